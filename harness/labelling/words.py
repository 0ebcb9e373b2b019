"""Story words as the labellers read them: split with character offsets (``split_words``), case-folded
(``fold_word``, ``fold_words``), and whether a "her" is a determiner (``her_is_possessive``), which the
gender flip of training and the pronoun binding of decoding both ask."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence


def _combining_marks() -> str:
    """Every combining mark (Unicode categories Mn, Mc and Me: accents, the vowel signs and viramas of the
    Indic scripts, Thai vowels and tones, Arabic and Hebrew points) as the ranges of a character class.
    None lies below U+0300 or between U+20000 and the variation selectors at U+E0100 (about 16 ms)."""
    ranges: list[list[int]] = []
    for cp in (*range(0x300, 0x20000), *range(0xE0100, 0xE01F0)):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


#: Combining marks, for a character class: what continues a word written with them ("Garci" + U+0301 + "a",
#: "प्रिया", "สมศักดิ์") though ``re``'s ``\w`` takes none of them.
COMBINING_MARKS = _combining_marks()
# inside a word: combining marks and invisible format marks (soft hyphen, zero-width space and joiners, word
# joiner), which a word never starts with
_INNER = COMBINING_MARKS + "\u00ad\u200b-\u200d\u2060"
_PART = rf"[^\W_]+(?:[{_INNER}]+[^\W_]*)*"
_WORD = re.compile(rf"{_PART}(?:[-\u2010\u2011]{_PART})*|['\u2019][^\W\d_]+(?:[{_INNER}]+[^\W_]*)*|[^\w\s]|_")


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Story words with character offsets; possessive/clitic endings ("'s") are words of their own."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def fold_word(w: str) -> str:
    """A word as reference types compare it: case-folded, a curly apostrophe made straight."""
    return w.casefold().replace("\u2019", "'")


def fold_words(words: Sequence[str]) -> list[str]:
    """``fold_word`` of each word, in one pass over their text: case folding maps each character on its
    own, so folding the words joined by NUL and splitting again gives each word's folding (a story
    with a NUL of its own is folded word by word)."""
    out = "\0".join(words).casefold().replace("\u2019", "'").split("\0")
    return out if len(out) == len(words) and words else [fold_word(w) for w in words]


def starts_capitalised(w: str) -> bool:
    """Whether a word starts as a name does: with a capital letter ("Ana", "Юлия"), or with a letter of a
    script that has no case (Chinese, Japanese, Korean, Arabic, Hebrew, Devanagari, Thai: "李明", "محمد"),
    whose names a capital cannot mark.

    >>> [starts_capitalised(w) for w in ["Ana", "ana", "Юлия", "李明", "محمد", "ß", "42", "'s", ""]]
    [True, False, True, True, True, False, False, False, False]
    """
    c = w[:1]
    return c.isupper() or (c.isalpha() and not c.islower())


def is_word(w: str) -> bool:
    """Whether a token holds a letter or digit (not punctuation alone)."""
    return any(c.isalnum() for c in w)


def is_split_word(w: str) -> bool:
    """``is_word`` for a token of ``split_words``, without its loop over the characters: those tokens
    are words (letters or digits, "'s") or single punctuation marks, so a token of more than one
    character, or an alphanumeric one, is a word (a decoding pass per story calls it for every token)."""
    return len(w) > 1 or w.isalnum()


def phrase_tokens(phrase: str) -> list[str]:
    """A name or reference as the folded words to look for in a story ("Dr. Ana Ruiz" -> dr, ana, ruiz),
    without a clitic ending ("'s"; so "O'Brien" is "o")."""
    return [fold_word(w) for w, _, _ in split_words(phrase) if is_word(w) and not w.startswith(("'", "\u2019"))]


def find_all(words: list[str], seq: list[str]) -> list[int]:
    """Every index at which ``seq`` occurs in ``words`` (none for an empty ``seq``)."""
    n = len(seq)
    return [i for i in range(len(words) - n + 1) if n and words[i:i + n] == seq]


#: Words after which "her" is an object ("gave her the book", "saw her and ..."), not a determiner; a
#: determiner cannot follow one ("handed her his keys", "told her something").
_AFTER_OBJECT_HER = frozenset(
    "and or but nor to for with as at in into on onto up down back off out over that the a an again too so from by "
    "about away home once now then when while if because before after through across around this tonight today "
    "tomorrow yesterday very how what why where who whom until all like more is was be feel know "
    "his my your our their its her these those some any another something anything everything nothing".split())


def her_is_possessive(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` ("her") is a determiner: a word follows and it is not a function word."""
    return i + 1 < len(words) and is_word(words[i + 1]) and fold_word(words[i + 1]) not in _AFTER_OBJECT_HER


__all__ = ["COMBINING_MARKS", "find_all", "fold_word", "fold_words", "her_is_possessive", "is_split_word", "is_word", "phrase_tokens",
           "split_words"]
