"""The transformers backend: batched, left-padded ``generate`` on CPU or GPU.

A request's ``json_schema`` is enforced while decoding, with the grammar engine of vLLM's
structured outputs (``harness.generation.json_constraint``).

Sampling is done per request with its own ``torch.Generator`` seeded from the request seed, by
a logits processor that draws the next token for each row and masks every other token. A
story therefore depends on its seed, not on which batch it lands in (up to floating-point
differences of padded batches), which is what makes resumed and re-sharded runs reproducible.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from harness.errors import BackendError
from harness.generation.base import Backend, BackendInfo, GenParams, GenRequest, GenResult
from harness.generation.chat import cut_at_stop, render_prompt
from harness.generation.json_constraint import SchemaGrammars
from harness.models import ResolvedModel, offline_env, resolve_device

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SeededSampler:
    """A logits processor drawing each row's next token from the row's own generator.

    Temperature, top-k and top-p follow vLLM's order (temperature, then top-k, then top-p).
    Returns logits that are -inf everywhere but the drawn token, so greedy decoding in
    ``generate`` emits exactly the drawn token.
    """

    def __init__(self, seeds: Sequence[int], params: GenParams) -> None:
        self.params = params
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        p = self.params
        logits = scores.float() / max(p.temperature, 1e-6)
        if p.top_k > 0:
            kth = torch.topk(logits, min(p.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
            cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
            drop = cum - torch.softmax(sorted_logits, dim=-1) > p.top_p  # keep the token crossing top_p
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
        # Inverse-CDF sampling: one uniform per row from the row's own generator, then one
        # batched search (a per-row multinomial call costs ~10% of a 135M model's step).
        probs = torch.softmax(logits, dim=-1)
        u = torch.tensor([torch.rand(1, generator=g).item() for g in self.generators], dtype=probs.dtype, device=probs.device)
        cdf = probs.cumsum(dim=-1)
        # right=True: the first index whose CDF exceeds u*total, so a zero-probability token
        # (a flat step of the CDF) can never be drawn, not even for u == 0.
        tok = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).clamp_(max=probs.shape[-1] - 1)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, tok, 0.0)
        return out


class TransformersBackend(Backend):
    """Runs a local model (safetensors directory or GGUF) with transformers."""

    name = "transformers"

    def __init__(
        self,
        model: ResolvedModel,
        *,
        dtype: str = "auto",
        chat_template: bool = True,
        batch_size: int = 16,
        device: str = "auto",
        max_model_len: int = 1024,
        **engine_kwargs: object,
    ) -> None:
        offline_env()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_ref = model
        self.chat_template = chat_template
        self.batch_size = batch_size
        self.max_model_len = max_model_len
        self.device = resolve_device(device, "model.device")
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        else:
            torch_dtype = _DTYPES[dtype]
        kw = {"gguf_file": model.gguf_file} if model.gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model.path, **kw)
            self.model = AutoModelForCausalLM.from_pretrained(model.path, dtype=torch_dtype, **kw, **engine_kwargs)
        except (OSError, ValueError) as e:
            raise BackendError(f"transformers could not load {model.weights_path}: {e}".splitlines()[0]) from None
        self.model.to(self.device).eval()
        self._left_pad()
        self.dtype = str(torch_dtype).removeprefix("torch.")

    @classmethod
    def from_loaded(
        cls, model, tokenizer, ref: ResolvedModel, *, chat_template: bool = True, batch_size: int = 16,
        max_model_len: int = 1024,
    ) -> TransformersBackend:
        """Wrap a model and tokenizer already in memory (a model built from its config with random
        weights, say, to time a real architecture on a GPU without its checkpoint); ``ref`` says
        where the run manifest should point (a directory with its config.json)."""
        self = cls.__new__(cls)
        self.model_ref, self.chat_template = ref, chat_template
        self.batch_size, self.max_model_len = batch_size, max_model_len
        param = next(model.parameters())
        self.device, self.dtype = param.device.type, str(param.dtype).removeprefix("torch.")
        self.model, self.tokenizer = model.eval(), tokenizer
        self._left_pad()
        return self

    def _left_pad(self) -> None:
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    def info(self) -> BackendInfo:
        return BackendInfo(
            backend=self.name,
            model=self.model_ref.name,
            extra={"device": self.device, "dtype": self.dtype, "weights_path": str(self.model_ref.weights_path)},
        )

    @torch.inference_mode()
    def _generate_batch(self, batch: Sequence[GenRequest], params: GenParams) -> list[GenResult]:
        from transformers import LogitsProcessorList

        texts = [render_prompt(self.tokenizer, r.prompt, self.chat_template, r.system) for r in batch]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        prompt_len = enc["input_ids"].shape[1]
        own = enc["attention_mask"].sum(dim=1).tolist()
        capped = [i for i, n in enumerate(own) if self.max_model_len - n < params.max_tokens]
        if capped and len(batch) > 1:
            # a prompt too long for max_tokens in the model's length gets its own reply's room alone: in the batch,
            # the longest prompt's room bounded every reply, so a story's reply depended on its batchmates
            rest = [r for i, r in enumerate(batch) if i not in capped]
            done = {g.request_id: g for g in self._generate_batch(rest, params)} if rest else {}
            for i in capped:
                done.update((g.request_id, g) for g in self._generate_batch([batch[i]], params))
            return [done[r.request_id] for r in batch]
        max_new = min(params.max_tokens, max(1, self.max_model_len - prompt_len))
        eos_ids = self._eos_ids()
        processors = LogitsProcessorList()
        if any(r.json_schema is not None for r in batch):  # the schema's mask first, then the draw
            processors.append(self._schema_grammars().processor([r.json_schema for r in batch],
                                                                ids=[r.request_id for r in batch]))
        if not params.greedy:
            processors.append(SeededSampler([r.seed for r in batch], params))
        out = self.model.generate(
            **enc,
            max_new_tokens=max_new,
            eos_token_id=sorted(eos_ids) or None,  # a row ends on any of them, as its text and grammar do
            do_sample=False,
            logits_processor=processors,
            pad_token_id=self.tokenizer.pad_token_id,
            # a row ends at its first stop string (it ran to max_tokens and was cut after, all of it counted)
            stop_strings=list(params.stop) or None,
            tokenizer=self.tokenizer if params.stop else None,
            temperature=None,
            top_p=None,
            top_k=None,
        )
        results = []
        prompt_tokens = enc["attention_mask"].sum(dim=1).tolist()
        for req, ids, n_prompt in zip(batch, out[:, prompt_len:].tolist(), prompt_tokens):
            n = first_eos(ids, eos_ids)
            hit_eos = n < len(ids)
            text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
            text, hit_stop = cut_at_stop(text, params.stop)
            reason = "stop" if hit_eos or hit_stop else ("length" if n >= max_new else "stop")
            # a row's output ends with the token that completes its first stop string (its batch ran on after it)
            n_out = _tokens_to_stop(self.tokenizer, ids[:n], params.stop) if hit_stop else n + int(hit_eos)
            results.append(GenResult(req.request_id, text, reason, int(n_prompt), n_out))
        return results

    def _eos_ids(self) -> set[int]:
        """The tokens that end a reply: the generation config's and the tokenizer's end of sequence."""
        eos = self.model.generation_config.eos_token_id
        ids = [*(eos if isinstance(eos, list) else [eos]), self.tokenizer.eos_token_id]
        return {int(t) for t in ids if t is not None}

    def _schema_grammars(self) -> SchemaGrammars:
        """The compiler of requests' JSON Schemas for this model, made on first use."""
        if getattr(self, "_grammars", None) is None:
            # The logits' width, padding included: the head's, else the config's, else the tokenizer's.
            head = self.model.get_output_embeddings()
            text_config = self.model.config.get_text_config()
            vocab = (getattr(head, "out_features", None) or getattr(text_config, "vocab_size", None)
                     or len(self.tokenizer))
            self._grammars = SchemaGrammars(self.tokenizer, vocab, self._eos_ids())
        return self._grammars

    def generate(
        self, requests: Sequence[GenRequest], params: GenParams, *, progress: bool = False
    ) -> Iterator[GenResult]:
        # Sort by prompt length to cut padding; results carry their ids so order does not matter.
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt))
        for start in range(0, len(order), self.batch_size):
            batch = [requests[i] for i in order[start : start + self.batch_size]]
            yield from self._generate_batch(batch, params)

    def close(self) -> None:
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def first_eos(ids: list[int], eos_ids: set[int]) -> int:
    """The index of a reply's first end-of-sequence token (its length where it has none): its text ends there, and
    its output tokens count that one too."""
    return next((i for i, t in enumerate(ids) if t in eos_ids), len(ids))


def _tokens_to_stop(tokenizer, ids: list[int], stop: tuple[str, ...]) -> int:
    """The fewest leading tokens of ``ids`` whose text holds one of ``stop`` (which the whole of ``ids`` holds)."""
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if cut_at_stop(tokenizer.decode(ids[:mid], skip_special_tokens=True), stop)[1]:
            hi = mid
        else:
            lo = mid + 1
    return lo
