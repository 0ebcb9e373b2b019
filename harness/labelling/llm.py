"""LLM extraction labeller: the paper's method (Table S7 prompts) with any generation backend.

Each story is sent once with the one- or two-character Table S7 prompt (``prompts.build_prompt``).
The reply is parsed as JSON after light repair (code fences, prose around the object, smart quotes,
trailing commas, Python-style quoting, a missing closing brace). A story whose reply cannot be
parsed is sent again, up to ``max_attempts`` in all (the authors' code: 3), the retries sampled with a
new seed; what still fails comes back with the last parse error as its status, never dropped.

Post-processing follows the paper: names and references that do not occur in the story are dropped
("observable LM errors"); "Unspecified" counts as no name.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from typing import Any

from harness.errors import BackendError, ConfigError
from harness.generation.base import Backend, GenParams, GenRequest
from harness.labelling.base import (
    CharacterLabel,
    Labeller,
    StoryInput,
    StoryLabels,
    alpha_tokens,
    dedupe,
    failed,
    in_story,
)
from harness.labelling.prompts import build_prompt, reply_schema

DEFAULT_PARAMS = GenParams(temperature=0.0, max_tokens=256)
RETRY_TEMPERATURE = 0.7


class ParseError(ValueError):
    """The model's reply could not be read as the JSON the prompt asks for."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _candidates(text: str) -> list[str]:
    """Substrings that may hold the JSON object, most likely first."""
    out = [m.group(1) for m in _FENCE.finditer(text)]
    start = text.find("{")
    if start >= 0:
        end = text.rfind("}")
        if end > start:
            out.append(text[start:end + 1])
        # truncated reply: close what is open
        tail = text[start:]
        for closer in ("}", "]}", '"]}', '"}', '" }'):
            out.append(tail.rstrip().rstrip(",") + closer)
    return out


def _loads(s: str) -> Any:
    for attempt in (s, s.translate(_SMART)):
        fixed = _TRAILING_COMMA.sub(r"\1", attempt)
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(fixed)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    raise ParseError("not JSON")


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model reply, repairing common defects.

    >>> parse_json_object('Sure! ```json\\n{"doctor name": "Ana", "doctor references": ["she",],}\\n```')
    {'doctor name': 'Ana', 'doctor references': ['she']}
    """
    if not text or "{" not in text:
        raise ParseError("no JSON object in the reply")
    for cand in _candidates(text):
        try:
            val = _loads(cand)
        except ParseError:
            continue
        if isinstance(val, dict):
            return val
    raise ParseError("reply holds a '{' but no parseable JSON object")


def _norm_key(k: str) -> str:
    return re.sub(r"\s+", " ", str(k).strip().strip("'\"").casefold())


def _pick(obj: dict[str, Any], roles: Sequence[str], suffix: str) -> list[Any]:
    """Values of "<role> <suffix>" keys for each role; falls back to key order when the model
    reworded the role but kept the number of keys."""
    by_key = {_norm_key(k): v for k, v in obj.items()}
    wanted = [f"{_norm_key(r)} {suffix}" for r in roles]
    if all(w in by_key for w in wanted):
        return [by_key[w] for w in wanted]
    loose = [v for k, v in by_key.items() if k.endswith(suffix) or k.endswith(suffix.rstrip("s"))]
    if len(loose) == len(roles):
        return loose
    missing = [w for w in wanted if w not in by_key]
    raise ParseError(f"missing key(s) {', '.join(repr(m) for m in missing)}")


def _name_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v if x is not None]
    return [str(v)]


def _ref_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [p for p in re.split(r"[,;]", v) if p.strip()]
    if isinstance(v, (list, tuple)):
        out: list[str] = []
        for x in v:
            out.extend(_ref_list(x) if isinstance(x, (list, tuple)) else [str(x)] if x is not None else [])
        return out
    raise ParseError(f"references must be a list, got {type(v).__name__}")


def parse_response(text: str, story: StoryInput) -> StoryLabels:
    """Read a model reply into labels for ``story`` (post-processed against the story text).

    Raises ``ParseError`` when the reply holds no usable object.
    """
    obj = parse_json_object(text)
    descs = [r.description for r in story.roles]
    names = _pick(obj, descs, "name")
    refs = _pick(obj, descs, "references")
    story_tokens = set(alpha_tokens(story.text or ""))
    chars = []
    for role, nv, rv in zip(story.roles, names, refs):
        cands = [n.strip() for n in _name_list(nv) if n and n.strip()]
        real = [n for n in cands if n.casefold() != "unspecified" and in_story(n, story_tokens)]
        name = real[0] if real else None
        kept = [r for r in _ref_list(rv) if in_story(r, story_tokens)]
        chars.append(CharacterLabel(role.key, name, dedupe(kept)))
    return StoryLabels(story.story_id, tuple(chars))


class LLMLabeller(Labeller):
    """Table S7 extraction through a generation backend.

    Args:
        backend: any ``harness.generation.base.Backend``; default: an ``engine`` backend with ``model``.
        model: model alias or path for the default backend (the embedded SmolLM2-135M).
        engine: the default backend's kind: "transformers" or "vllm" (which holds replies to the
            prompt's JSON schema, see ``constrain``).
        params: sampling for the first attempt (default greedy, 256 new tokens).
        max_attempts: attempts per story (1 + retries).
        seed: base seed; attempt ``a`` of a story uses ``seed + a``.
        constrain: send each story's ``prompts.reply_schema`` with its request, so a backend that
            constrains decoding (vLLM, offline or served) returns only JSON of the prompt's keys, with
            names and references written in the story; the transformers backend ignores it and the
            reply goes through the same repair and retries.
    """

    name = "llm"
    default_batch_size = 16

    def __init__(self, backend: Backend | None = None, *, model: str = "smollm2-135m", engine: str = "transformers",
                 params: GenParams | None = None, max_attempts: int = 3, seed: int = 0,
                 constrain: bool = True) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts}")
        self._owns_backend = backend is None
        if backend is None:
            from harness.config import ModelConfig
            from harness.generation import load_backend

            if engine not in ("transformers", "vllm"):
                raise ConfigError(f"llm labeller: engine must be transformers or vllm, got {engine!r} (for a server, "
                                  f"pass an openai backend)")
            backend = load_backend(ModelConfig(backend=engine, path=model))
        if not isinstance(backend, Backend):
            raise ConfigError(f"backend must be a harness Backend, got {type(backend).__name__}")
        self.backend = backend
        self.params = params or DEFAULT_PARAMS
        self.max_attempts = max_attempts
        self.seed = seed
        self.constrain = constrain
        #: (story_id, attempt, reason) for every failed attempt, for the run's failure log.
        self.failures: list[tuple[str, int, str]] = []

    def info(self) -> dict[str, Any]:
        """Labeller name, backend and model, sampling and retry settings."""
        b = self.backend.info()
        return {"labeller": self.name, "backend": b.backend, "model": b.model, "max_attempts": self.max_attempts,
                "temperature": self.params.temperature, "max_tokens": self.params.max_tokens,
                "constrained": self.constrain and b.backend in ("vllm", "openai")}

    def _retry_params(self) -> GenParams:
        p = self.params
        return GenParams(temperature=max(p.temperature, RETRY_TEMPERATURE), top_p=p.top_p, top_k=p.top_k,
                         max_tokens=p.max_tokens, stop=p.stop)

    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        done: dict[int, StoryLabels] = {}
        last_error: dict[int, str] = {}
        pending = list(range(len(stories)))
        prompts = [build_prompt(s) for s in stories]
        schemas = [json.dumps(reply_schema(s)) if self.constrain else None for s in stories]
        for attempt in range(self.max_attempts):
            if not pending:
                break
            reqs = [GenRequest(f"{i}#{attempt}", prompts[i], seed=self.seed + attempt, json_schema=schemas[i])
                    for i in pending]
            params = self.params if attempt == 0 else self._retry_params()
            replies: dict[int, Any] = {}
            try:
                for res in self.backend.generate(reqs, params):
                    replies[int(res.request_id.split("#", 1)[0])] = res
            except BackendError as e:
                for i in pending:
                    last_error[i] = f"backend error: {e}"
                    self.failures.append((stories[i].story_id, attempt, last_error[i]))
                continue
            still = []
            for i in pending:
                res = replies.get(i)
                if res is None or res.finish_reason == "error":
                    reason = f"backend error: {res.error if res is not None else 'no result returned'}"
                else:
                    try:
                        done[i] = parse_response(res.text, stories[i])
                        continue
                    except ParseError as e:
                        reason = f"unparseable reply ({e})" + (" after hitting max_tokens"
                                                               if res.finish_reason == "length" else "")
                last_error[i] = reason
                self.failures.append((stories[i].story_id, attempt, reason))
                still.append(i)
            pending = still
        for i in pending:
            done[i] = failed(stories[i], f"llm: {last_error[i]} in {self.max_attempts} attempt(s)")
        return [done[i] for i in range(len(stories))]

    def close(self) -> None:
        """Close the backend if this labeller started it."""
        if self._owns_backend:
            self.backend.close()


__all__ = ["DEFAULT_PARAMS", "LLMLabeller", "ParseError", "parse_json_object", "parse_response"]
