"""Gender from the words that refer to a character, and romantic gender pairs.

The lexicon is data (``harness/data/lexicons/*.yaml``), not code. The default, ``s6a``, is Table S6a
of the paper verbatim; ``code`` is the authors' released word sets ("theirself" for "themselves",
no "mister"); ``neopronouns`` extends S6a with neopronouns as Non-binary (not in the paper). A user
lexicon is any YAML file of the same shape; ``GenderLexicon.id`` and ``.sha256`` identify the words
used and belong in the provenance of every result.

Inference (paper B.1 and the authors' ``infer_gender_from_references``):

1. When the story is given, references whose alphabetic tokens do not all occur in the story are
   dropped (labellers hallucinate).
2. Each remaining reference is split into tokens on white space, ``/``, ``,`` and ``;``, and at a
   ``.`` followed by a letter (a title written against the name, ``Mr.Smith``). A token is
   normalised: Unicode NFKC and case-folded, curly quotes straightened, a clitic after an apostrophe
   cut (``woman's`` -> ``woman``, ``she's`` -> ``she``), then every character that is not a letter or
   digit removed (``Mr.`` -> ``mr``, ``trans-woman`` -> ``transwoman``). So matching is case- and
   punctuation-insensitive.
3. The categories hit by any token decide: none -> ``Unspecified`` (e.g. first-person narration);
   exactly one -> that gender; more than one -> ``Unsure``.

Ours: a pronoun of unstated gender ("s/he", "(s)he", "he/she", "she or he", "his/her", "him or
her": a he-form and a she-form joined by ``/`` or "or", ``epicene_spans``) is no gendered word, so a
character referred to only that way is ``Unspecified``, the category S6a gives a reference of no
gender, not ``Male`` ("s/he" split at its slash gave "he") nor ``Unsure`` (which says the words
disagree about one person). The encoder and rules labellers take no reference from such a form
either.

Multi-word references count every token, as in the authors' code: "her brother" hits Female and
Male and gives Unsure.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, DataError

FEMALE, MALE, NON_BINARY = "Female", "Male", "Non-binary"
UNSPECIFIED, UNSURE = "Unspecified", "Unsure"
GENDERS = (FEMALE, MALE, NON_BINARY, UNSPECIFIED, UNSURE)
#: Categories a lexicon may define (the three the paper infers).
LEXICON_CATEGORIES = (NON_BINARY, FEMALE, MALE)
#: Romantic pairs, canonical spelling (unordered; F before M before NB).
PAIRS = ("NB-NB", "F-NB", "M-NB", "F-F", "M-M", "F-M")
_SHORT = {FEMALE: "F", MALE: "M", NON_BINARY: "NB"}
_ORDER = {"F": 0, "M": 1, "NB": 2}

#: Built-in lexicons by name (files under ``harness/data/lexicons``).
BUILTIN_LEXICONS = {"s6a": "gender_s6a.yaml", "code": "gender_code.yaml",
                    "neopronouns": "gender_neopronouns.yaml"}
DEFAULT_LEXICON = "s6a"

#: The version of the inference rules above (not of a lexicon's words, which each lexicon versions): bump it
#: when they change what a reference list infers; the identities stage records it (``gender_inference`` in
#: its manifest), so a run's characters are inferred again after a bump. 2: "s/he" and "Mr.Smith" (2026-11-27).
#: 3: an acute accent as the apostrophe ("she\u00b4s") and a quotation mark before a clitic ("'She's") (2026-12-07).
INFERENCE_VERSION = "3"

_SPLIT = re.compile(r"[\s/,;]+|\.(?=[^\W\d_])")
_NON_WORD = re.compile(r"[\W_]+")
_LEADING_NON_WORD = re.compile(r"^[\W_]+")
_ALPHA = re.compile(r"[^\W\d_]+")
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'", "\u02bc": "'"})


_PRONOUN = r"(?:he|him|his|himself|she|her|hers|herself|they|them|their|theirs|themselves|themself)"
_EPICENE_WORD = r"(?:\(s\)he|s\(he\)|s/he)"
_PRONOUN_GROUP = re.compile(
    rf"(?<![\w/])(?:{_EPICENE_WORD}|{_PRONOUN})(?:\s*/\s*(?:{_EPICENE_WORD}|{_PRONOUN})|\s+or\s+(?:{_EPICENE_WORD}"
    rf"|{_PRONOUN}))*(?![\w/])", re.I)
_MAY_JOIN = re.compile(r"[/(]|\sor\s", re.I)  # no such form without a slash, a bracket or an "or"
_HE_FORMS = frozenset({"he", "him", "his", "himself"})
_SHE_FORMS = frozenset({"she", "her", "hers", "herself"})


def epicene_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) character spans of the pronouns of unstated gender in a text: "s/he", "(s)he",
    "s(he)", and pronouns joined by ``/`` or "or" where a he-form meets a she-form ("he/she", "she or
    he", "his/her", "him or her", "he/she/they"). "he/him", "she/they" are one person's pronouns,
    not such a form.

    >>> t = "If s/he asks, tell him or her that he/him is fine."
    >>> [t[a:b] for a, b in epicene_spans(t)]
    ['s/he', 'him or her']
    """
    out: list[tuple[int, int]] = []
    if not _MAY_JOIN.search(text):
        return out
    for m in _PRONOUN_GROUP.finditer(text):
        words = set(re.findall(r"[a-z()]+", m.group().lower())) - {"or"}
        if any("(" in w or w == "s" for w in words) or "s/he" in m.group().lower() or (
                words & _HE_FORMS and words & _SHE_FORMS):
            out.append(m.span())
    return out


def _without_epicene(reference: str) -> str:
    for a, b in reversed(epicene_spans(reference)):
        reference = reference[:a] + " " + reference[b:]
    return reference


def normalise_token(token: str) -> str:
    """Normalise one token for lexicon matching (see the module docstring, step 2).

    The quotes are straightened before NFKC too, which would split an acute accent (U+00B4) into a space and
    a combining mark, and marks before the word are dropped first, so that a quotation's opening mark is not
    taken for the clitic's apostrophe ("'She's" -> "she").

    >>> [normalise_token(t) for t in ["Mr.", "HER,", "woman\u2019s", "trans-woman", "'em"]]
    ['mr', 'her', 'woman', 'transwoman', 'em']
    >>> [normalise_token(t) for t in ["she\u00b4s", "'She's", "\u2018He\u2019d"]]
    ['she', 'she', 'he']
    """
    t = unicodedata.normalize("NFKC", token.translate(_QUOTES)).casefold().translate(_QUOTES)
    t = _LEADING_NON_WORD.sub("", t)
    if "'" in t:
        head = t.split("'", 1)[0]
        if _NON_WORD.sub("", head):
            t = head
    return _NON_WORD.sub("", t)


def reference_tokens(reference: str) -> list[str]:
    """The normalised, non-empty tokens of one reference."""
    return list(_tokens_of(reference))


@lru_cache(maxsize=1 << 16)
def _tokens_of(reference: str) -> tuple[str, ...]:
    """``reference_tokens``, remembered: a labeller asks for the same few pronouns millions of times."""
    return tuple(n for n in (normalise_token(t) for t in _SPLIT.split(_without_epicene(reference))) if n)


def _alpha_tokens(text: str) -> list[str]:
    return _ALPHA.findall(unicodedata.normalize("NFKC", text).casefold())


@dataclass(frozen=True)
class GenderLexicon:
    """Words per gender category, with the name, version and hash that identify them.

    Attributes:
        name: lexicon name (``s6a``, ``code``, ...).
        version: version string from the file; bump it when the words change.
        categories: category label -> frozenset of normalised words.
        source: where the words come from.
        path: the file it was loaded from ("" when built in code).
    """

    name: str
    version: str
    categories: Mapping[str, frozenset[str]]
    source: str = ""
    path: str = ""
    _index: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, str] = {}
        cats: dict[str, frozenset[str]] = {}
        for cat, words in self.categories.items():
            if cat not in LEXICON_CATEGORIES:
                raise ConfigError(f"gender lexicon {self.name!r}: unknown category {cat!r}; "
                                  f"use one of {', '.join(LEXICON_CATEGORIES)}")
            normed = set()
            for w in words:
                if not isinstance(w, str) or not normalise_token(w):
                    raise ConfigError(f"gender lexicon {self.name!r}, category {cat!r}: "
                                      f"{w!r} is not a word; list plain words")
                n = normalise_token(w)
                if n in index and index[n] != cat:
                    raise ConfigError(f"gender lexicon {self.name!r}: word {w!r} is listed under both "
                                      f"{index[n]!r} and {cat!r}; keep it in one category")
                index[n] = cat
                normed.add(n)
            cats[cat] = frozenset(normed)
        object.__setattr__(self, "categories", cats)
        object.__setattr__(self, "_index", index)

    @property
    def id(self) -> str:
        """``name@version``, for result provenance."""
        return f"{self.name}@{self.version}"

    @property
    def sha256(self) -> str:
        """Hash of the resolved word sets (independent of file layout and word order)."""
        canon = json.dumps({c: sorted(w) for c, w in sorted(self.categories.items())}, sort_keys=True)
        return hashlib.sha256(canon.encode()).hexdigest()

    def category(self, token: str) -> str | None:
        """The category of one (raw or normalised) token, or None."""
        return self._index.get(normalise_token(token))

    def provenance(self) -> dict[str, str]:
        """Name, version, hash and source, to store beside results."""
        return {"lexicon": self.id, "lexicon_sha256": self.sha256, "lexicon_source": self.source}


def _lexicon_dir() -> Path:
    return Path(str(resources.files("harness").joinpath("data", "lexicons")))


def _read_lexicon_dict(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    if path in seen:
        raise ConfigError(f"gender lexicon {path}: `include:` cycle through {', '.join(map(str, seen))}")
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "not found"
        raise ConfigError(f"gender lexicon file {path} {what}; pass one of "
                          f"{', '.join(BUILTIN_LEXICONS)} or the path of a YAML lexicon")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"gender lexicon {path}: not UTF-8 text (at byte offset {e.start}); save it as UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"gender lexicon {path}: not valid YAML{at}; fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"gender lexicon {path}: expected a mapping with name, version, categories")
    allowed = {"name", "version", "source", "description", "include", "categories", "extend"}
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"gender lexicon {path}: unknown key(s) {', '.join(sorted(unknown))}; "
                          f"allowed: {', '.join(sorted(allowed))}")
    cats: dict[str, list[str]] = {}
    if data.get("include"):
        base = _read_lexicon_dict(path.parent / str(data["include"]), (*seen, path))
        cats = {c: list(w) for c, w in base["categories"].items()}
    for key in ("categories", "extend"):
        block = data.get(key) or {}
        if not isinstance(block, dict):
            raise ConfigError(f"gender lexicon {path}: `{key}` must map a category to a list of words")
        for cat, words in block.items():
            if not isinstance(words, list):
                raise ConfigError(f"gender lexicon {path}: `{key}.{cat}` must be a list of words")
            cats[cat] = (cats.get(cat, []) + words) if key == "extend" else list(words)
    if not cats:
        raise ConfigError(f"gender lexicon {path}: no categories; give `categories:` or `include:`")
    for req in ("name", "version"):
        if req not in data:
            raise ConfigError(f"gender lexicon {path}: missing `{req}:`; every lexicon is named and versioned")
    return {"name": str(data["name"]), "version": str(data["version"]),
            "source": str(data.get("source", "")), "categories": cats}


@lru_cache(maxsize=32)
def _load_cached(path: Path) -> GenderLexicon:
    d = _read_lexicon_dict(path)
    return GenderLexicon(d["name"], d["version"], d["categories"], d["source"], str(path))


def load_lexicon(lexicon: str | Path | GenderLexicon | None = None) -> GenderLexicon:
    """Load a gender lexicon.

    Args:
        lexicon: None for the default (``s6a``), a built-in name (``s6a``, ``code``,
            ``neopronouns``), the path of a YAML lexicon, or a ``GenderLexicon`` (returned as is).
    """
    if isinstance(lexicon, GenderLexicon):
        return lexicon
    if lexicon is None:
        lexicon = DEFAULT_LEXICON
    if isinstance(lexicon, str) and lexicon in BUILTIN_LEXICONS:
        return _load_builtin(lexicon)
    return _load_cached(Path(lexicon).resolve())


@lru_cache(maxsize=None)
def _load_builtin(name: str) -> GenderLexicon:
    return _load_cached((_lexicon_dir() / BUILTIN_LEXICONS[name]).resolve())


def filter_references(references: Sequence[str], story: str) -> tuple[list[str], list[str]]:
    """Split references into (kept, dropped): kept ones have every alphabetic token in the story."""
    story_tokens = set(_alpha_tokens(story))
    kept, dropped = [], []
    for ref in references:
        (kept if all(t in story_tokens for t in _alpha_tokens(ref)) else dropped).append(ref)
    return kept, dropped


@dataclass(frozen=True)
class GenderInference:
    """One character's inferred gender with the evidence.

    Attributes:
        gender: one of ``GENDERS``.
        matches: (category, normalised word) pairs found, in reference order.
        dropped: references discarded because they do not occur in the story.
        lexicon: ``name@version`` of the lexicon used.
    """

    gender: str
    matches: tuple[tuple[str, str], ...]
    dropped: tuple[str, ...]
    lexicon: str

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON."""
        return {"gender": self.gender, "matches": [list(m) for m in self.matches],
                "dropped": list(self.dropped), "lexicon": self.lexicon}


def _as_references(references: Sequence[str] | str | None) -> list[str]:
    if references is None:
        return []
    if isinstance(references, str):
        return [references]
    out = []
    for r in references:
        if r is None:
            continue
        if not isinstance(r, str):
            raise DataError(f"references must be strings, got {type(r).__name__} {r!r}; pass a list of str")
        out.append(r)
    return out


def explain_gender(references: Sequence[str] | str | None, story: str | None = None,
                   lexicon: str | Path | GenderLexicon | None = None) -> GenderInference:
    """Infer a gender and return it with the words that decided it (see module docstring)."""
    lex = load_lexicon(lexicon)
    refs = _as_references(references)
    dropped: list[str] = []
    if story is not None:
        refs, dropped = filter_references(refs, story)
    matches = []
    for ref in refs:
        for tok in _tokens_of(ref):
            cat = lex._index.get(tok)
            if cat is not None:
                matches.append((cat, tok))
    cats = {c for c, _ in matches}
    gender = UNSPECIFIED if not cats else (next(iter(cats)) if len(cats) == 1 else UNSURE)
    return GenderInference(gender, tuple(matches), tuple(dropped), lex.id)


def infer_gender(references: Sequence[str] | str | None, story: str | None = None,
                 lexicon: str | Path | GenderLexicon | None = None) -> str:
    """The gender label of one character from the words that refer to it.

    Args:
        references: words/phrases the labeller returned for the character (a single string is one
            reference).
        story: the story text; when given, references not found in it are dropped first.
        lexicon: see ``load_lexicon``; default Table S6a.

    Returns:
        ``"Female"``, ``"Male"``, ``"Non-binary"``, ``"Unspecified"`` (no lexicon word) or
        ``"Unsure"`` (words of more than one category).

    >>> infer_gender(["Mx. Rivera", "they"])
    'Non-binary'
    >>> infer_gender(["he", "her"])
    'Unsure'
    """
    return explain_gender(references, story, lexicon).gender


def gender_pair(a: str | None, b: str | None) -> str | None:
    """The unordered romantic pair of two gender labels, or None unless both are F/M/NB.

    >>> gender_pair("Male", "Female"), gender_pair("Non-binary", "Female"), gender_pair("Male", "Unsure")
    ('F-M', 'F-NB', None)
    """
    sa, sb = _SHORT.get(a or ""), _SHORT.get(b or "")
    if sa is None or sb is None:
        return None
    x, y = sorted((sa, sb), key=_ORDER.__getitem__)
    return f"{x}-{y}"


def infer_genders(references: Iterable[Sequence[str] | str | None], stories: Iterable[str | None] | None = None,
                  lexicon: str | Path | GenderLexicon | None = None) -> list[str]:
    """``infer_gender`` over many characters (stories aligned with references, or None)."""
    lex = load_lexicon(lexicon)
    refs = list(references)
    sts = [None] * len(refs) if stories is None else list(stories)
    if len(sts) != len(refs):
        raise DataError(f"stories has {len(sts)} items but references has {len(refs)}; pass one story per character")
    return [explain_gender(r, s, lex).gender for r, s in zip(refs, sts)]
