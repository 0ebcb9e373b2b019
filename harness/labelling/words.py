"""Story words as the labellers read them: split with character offsets (``split_words``), case-folded
(``_norm``, ``_norm_all``), and whether a "her" is a determiner (``her_is_possessive``), which the
gender flip of training and the pronoun binding of decoding both ask."""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[^\W_]+(?:[-\u2010\u2011][^\W_]+)*|['\u2019][^\W\d_]+|[^\w\s]|_")


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


#: Words after which "her" is an object ("gave her the book", "saw her and ..."), not a determiner.
_AFTER_OBJECT_HER = frozenset(
    "and or but nor to for with as at in into on onto up down back off out over that the a an again too so from by "
    "about away home once now then when while if because before after through across around this tonight today "
    "tomorrow yesterday very how what why where who whom until all like more is was be feel know".split())


def her_is_possessive(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` ("her") is a determiner: a word follows and it is not a function word."""
    return i + 1 < len(words) and _is_word(words[i + 1]) and _norm(words[i + 1]) not in _AFTER_OBJECT_HER


__all__ = ["her_is_possessive", "split_words"]
