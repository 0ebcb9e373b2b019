"""Generation backends behind one interface (``harness.generation.base.Backend``).

``load_backend(model_config)`` builds the backend a config names. Backends are registered
lazily, so importing the harness never imports vLLM or torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.errors import ConfigError
from harness.generation.base import Backend, BackendInfo, GenParams, GenRequest, GenResult
from harness.registry import Registry

if TYPE_CHECKING:
    from harness.config import ModelConfig

BACKENDS: Registry = Registry("backend")
BACKENDS.register("transformers", "harness.generation.hf:TransformersBackend")
BACKENDS.register("vllm", "harness.generation.vllm_backend:VLLMBackend")
BACKENDS.register("openai", "harness.generation.openai_backend:OpenAIBackend")


def load_backend(cfg: ModelConfig, *, seed: int = 0) -> Backend:
    """Start the backend ``cfg`` describes."""
    from harness import models

    try:
        cls = BACKENDS.get(cfg.backend)
    except KeyError as e:
        raise ConfigError(f"model.backend: {e.args[0]}") from None
    if cfg.backend == "openai":
        return cls(
            cfg.path,
            base_url=cfg.base_url or "",
            api_key=cfg.api_key,
            chat_template=cfg.chat_template,
            concurrency=cfg.concurrency,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
        )
    resolved = models.resolve(cfg.backend, cfg.path, cfg.gguf_file)
    common = dict(
        dtype=cfg.dtype,
        chat_template=cfg.chat_template,
        batch_size=cfg.batch_size,
        max_model_len=cfg.max_model_len,
        **cfg.engine_kwargs,
    )
    if cfg.backend == "vllm":
        return cls(resolved, seed=seed, **common)
    return cls(resolved, device=cfg.device, **common)


__all__ = ["BACKENDS", "Backend", "BackendInfo", "GenParams", "GenRequest", "GenResult", "load_backend"]
