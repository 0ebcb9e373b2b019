"""The one contract every generation backend implements.

Shaped after vLLM's offline ``LLM.generate``: a list of requests in, results out carrying the
request id, so the run store can commit results as they finish. One ``GenParams`` applies to
every request; each request carries its own seed.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError


@dataclass(frozen=True, slots=True)
class GenParams:
    """Sampling parameters, with vLLM's field names.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: nucleus mass in (0, 1].
        top_k: keep the k most likely tokens; 0 or -1 disables the cut.
        max_tokens: new tokens to generate at most.
        stop: strings that end generation (not included in the output).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 200
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if self.top_k == 0:
            object.__setattr__(self, "top_k", -1)
        if self.temperature < 0:
            raise ConfigError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ConfigError(f"sampling.top_k must be -1, 0 or positive, got {self.top_k}")
        if self.max_tokens < 1:
            raise ConfigError(f"sampling.max_new_tokens must be >= 1, got {self.max_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True, slots=True)
class GenRequest:
    """One prompt to complete. ``prompt`` is the user message (the chat template, if any, is
    applied by the backend); ``seed`` makes the sample reproducible where the backend allows;
    ``system`` is a system message sent before it when the backend uses a chat template (the
    homogeneity suite's "You are a chatbot"), ignored without one; ``json_schema`` is a JSON Schema
    (as JSON text) the reply must follow. Every backend here constrains decoding to it: vLLM
    offline through its structured outputs, the openai backend as ``response_format`` (which vLLM's
    server enforces), and the transformers backend with xgrammar, the grammar engine vLLM uses."""

    request_id: str
    prompt: str
    seed: int = 0
    system: str | None = None
    json_schema: str | None = None


@dataclass(frozen=True, slots=True)
class GenResult:
    """One completed request."""

    request_id: str
    text: str
    finish_reason: str  # "stop" (end of sequence or stop string), "length", "content_filter" (a server's), or "error"
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None


@dataclass
class BackendInfo:
    """What the run manifest records about a backend."""

    backend: str
    model: str
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """A text-generation engine. Subclasses are registered in ``harness.generation.BACKENDS``."""

    name: str = "base"

    @abc.abstractmethod
    def generate(
        self,
        requests: Sequence[GenRequest],
        params: GenParams,
        *,
        progress: bool = False,
    ) -> Iterator[GenResult]:
        """Complete every request. Results may arrive in any order; each carries its id."""

    def info(self) -> BackendInfo:
        return BackendInfo(backend=self.name, model="unknown")

    def close(self) -> None:
        """Release the engine (GPU memory, worker processes, HTTP clients)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
