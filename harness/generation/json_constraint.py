"""JSON-Schema-constrained decoding for the transformers backend.

vLLM holds a request with a ``json_schema`` to it through its structured outputs, whose default
grammar engine is xgrammar. This module gives the transformers backend the same engine: the schema
is compiled once against the model's tokenizer, and a logits processor masks, at every step and for
every row of the batch, the tokens that cannot continue a reply the schema accepts. A small model
(the embedded SmolLM2-135M) then writes JSON that parses and follows the schema, where unconstrained
it mostly does not.

Rows of a batch without a schema are left as they are, so one ``generate`` call may mix them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from harness.errors import BackendError

#: The most memory xgrammar's compiler keeps for grammars it has compiled already.
CACHE_BYTES = 64 << 20
#: Threads that compile one batch's schemas (xgrammar's compiler releases the GIL and is shared safely,
#: as vLLM's structured outputs share it): 128 story schemas took 3.3 ms each alone, 1.8 ms on two threads
#: of the 2-core EPYC.
COMPILE_THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class SchemaGrammars:
    """JSON Schemas compiled against one tokenizer (xgrammar's compiler keeps each schema it has seen).

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        vocab_size: the model's logits width (it may exceed the tokenizer's vocabulary by padding).
        stop_token_ids: the tokens that end generation; a reply may end only where the schema is complete.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        try:
            import xgrammar as xgr
        except ImportError:  # pragma: no cover - xgrammar is a dependency of the package
            raise BackendError("a request's json_schema needs xgrammar for the transformers backend; "
                               "install it with `pip install xgrammar`") from None
        self._xgr = xgr
        self.vocab_size = int(vocab_size)
        stops = sorted({int(t) for t in stop_token_ids})
        if not stops:
            raise BackendError("json_schema: the model has no end-of-sequence token (neither its generation config "
                               "nor its tokenizer names one), so no reply could end; set the tokenizer's eos_token")
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size, stop_token_ids=stops)
        # The labeller's schemas differ story by story: a bounded cache keeps memory flat over a corpus.
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_limit_bytes=CACHE_BYTES)

    def compile(self, schema: str, where: str = "json_schema") -> Any:
        """The compiled grammar of one JSON Schema (as JSON text); ``where`` names it in an error."""
        try:
            return self._compiler.compile_json_schema(schema)
        except Exception as e:  # noqa: BLE001 - xgrammar raises several types for a bad schema
            raise BackendError(f"{where} could not be compiled: {e}".splitlines()[0]) from None

    def processor(self, schemas: Sequence[str | None], kernel: str | None = None,
                  ids: Sequence[str] | None = None) -> SchemaConstraint:
        """A logits processor for one ``generate`` call over rows with these schemas (None: free);
        ``ids`` (the requests' ids) name a row in an error."""
        names = list(ids) if ids is not None else [f"row {i}" for i in range(len(schemas))]
        todo: dict[str, str] = {}  # each distinct schema, with the first request that sent it
        for s, name in zip(schemas, names):
            if s is not None:
                todo.setdefault(s, f"request {name}: json_schema")
        with ThreadPoolExecutor(max(1, min(COMPILE_THREADS, len(todo)))) as pool:  # in order: the first error raises
            compiled = dict(zip(todo, pool.map(self.compile, todo, todo.values())))
        return SchemaConstraint([compiled.get(s) if s is not None else None for s in schemas], self.vocab_size,
                                kernel, names)


class SchemaConstraint:
    """A transformers logits processor that holds each row to its compiled grammar.

    Stateful, like xgrammar's own Hugging Face processor: make one per ``generate`` call. At each
    step after the first it advances every row's matcher by the token the row drew last, then sets
    the logits of every token the grammar forbids to -inf. A row whose grammar has accepted a stop
    token is finished; transformers pads it from then on, and its matcher is left alone.
    ``kernel`` names xgrammar's masking kernel (default: its pure-torch one, see ``__call__``).
    """

    def __init__(self, grammars: Sequence[Any | None], vocab_size: int, kernel: str | None = None,
                 names: Sequence[str] | None = None) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.rows = [i for i, g in enumerate(grammars) if g is not None]
        self.matchers = {i: xgr.GrammarMatcher(grammars[i]) for i in self.rows}
        self.bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self.vocab_size = vocab_size
        self.kernel = kernel
        self.names = list(names) if names is not None else [f"row {i}" for i in range(len(grammars))]
        self._started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self.rows:
            return scores
        live = []
        last = input_ids[:, -1].tolist() if self._started else []  # one device-to-host copy per step
        for i in self.rows:
            m = self.matchers[i]
            if self._started and not m.is_terminated():
                if not m.accept_token(last[i]):
                    raise BackendError(f"{self.names[i]} drew token {last[i]}, which its json_schema forbids")
            if not m.is_terminated():
                m.fill_next_token_bitmask(self.bitmask, i)
                live.append(i)
        self._started = True
        if not live:
            return scores
        # xgrammar's pure-torch kernel by default, on every device: it needs no Triton or CUDA compiler
        # beside a GPU, and on CPU it beat xgrammar's C++ kernel (64 rows of a 49,152-token vocabulary:
        # 2.8 ms against 9.6 ms on the 2-core EPYC); with every row live it goes faster without indices.
        self._xgr.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device),
                                              vocab_size=min(self.vocab_size, scores.shape[-1]),
                                              indices=None if len(live) == scores.shape[0] else live,
                                              backend=self.kernel or "torch_native")
        if scores.shape[-1] > self.vocab_size:  # columns past the grammar's vocabulary (a padded output layer)
            scores[live, self.vocab_size:] = float("-inf")
        return scores


__all__ = ["SchemaConstraint", "SchemaGrammars"]
