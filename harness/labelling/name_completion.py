"""A character labelled by a surname alone gets the first name the story writes before it.

The encoder names a character by its first tagged run, and where its tags favour a later mention
("renowned American actor, Robert Mitchell ... Mitchell smiled") or the name check moves the other
role's run to it, that run can be the surname alone: "Mitchell", whose first name, for the identity
module, is "Mitchell". The gold labels write the name as the story introduces it ("Robert
Mitchell"), and Table S8 scores first names.

``completed_name`` gives a one-word name the capitalised word written right before one of its
occurrences (one space apart), where that word is a common first name (at least ``MIN_COUNT`` bearers
in the Census 2020 first-name counts of the identity module's table: not "Then Mitchell"), is no
title ("Dr. Mitchell") nor a word the identity module never reads as a first name ("Young Emily", whose
first name would then be lost) and is no word of the other character's name; a word before that one which
is such a first name too is the first name, the other a middle name ("Ana Lucía Torres", "Robert James
Mitchell": "Lucía Torres" would give the character the first name Lucía). The first such occurrence
wins. An occurrence may span words the splitter cuts ("O'Brien" is "O" and "'Brien"), and so may the first
name ("Ja'Nae"), which may hold hyphens and combining accents too ("Mary-Jane", a decomposed "José"). An office
that is a first name too is no first name before a middle name ("Dean Sarah Mitchell"), and a month is none
after a word of time or another month and "and" ("in June Mitchell", "between April and May Mitchell"). A sentence that
opens with a common first name used as a word would fool it, but for a modal verb opening a question
("Will Emily ever call again?": "Emily" would have become "Will Emily", a man's first name, and lost her
"She"; "Will Mitchell come?"); on the gold stories below no such case occurs, and a story's first
sentence often opens with the full name ("Here is a story:\n\nMarcus Delgado had ...").

Checked on gold labels first: on the 2,025 gold names of the project's files (training and held
out) and the published train150, it changes none. Held out, with the fold encoders of sessions 14-17
(trained without the stories they are scored on) on train150's folds and the three held-out project
files: it changed 21 names, 15 to the gold first name ("Mitchell" -> "Robert Mitchell", "Moreau" ->
"Jack Moreau") and 6 that were wrong before and stay wrong (a restaurant, "Bella Notte"; the other
character's or a third person's name); none right before became wrong. A first version also
required the first name not to open a sentence: 8 right instead of 15, since stories often open
with the full name (``benchmarks/RESULTS.md``, section ``labelling-layers``, session 19).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from operator import itemgetter

import pandas as pd

from harness.labelling.base import ABBREVIATED_TITLES, LINE_BREAK_CLASS, NAME_TITLES, CharacterLabel, breaks_line
from harness.labelling.words import fold_word, glued_name_part, starts_capitalised

#: Bearers a word needs in the Census 2020 first-name counts to count as a first name here (Robert
#: 2.8 M, Jimmy 173 k, Mitchell 124 k; "The" 3,185, "Then" 139). Set before any measurement.
MIN_COUNT = 10_000


#: Months that are common first names too (June, April, May, August ...), and the words before a month that make it
#: one ("in June", "last May", "since August").
MONTHS = frozenset({"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                    "november", "december"})
#: Words that join a month to one before it ("between April and May Mitchell hired").
MONTH_JOINS = frozenset({"and", "or", "to", "through", "until", "till"})
TIME_WORDS = frozenset({"in", "on", "by", "since", "until", "till", "through", "during", "last", "next", "this", "that",
                        "early", "late", "mid", "of", "from", "every", "each", "before", "after"})


#: Offices written before a name that are common first names too: no first name before a middle name.
OFFICES = frozenset({"dean", "justice", "don", "dona", "doña", "santa", "earl", "royal", "judge", "bishop", "deacon",
                     "elder", "pastor", "chancellor", "provost", "marshal", "constable", "baron", "count"})


#: First names that are modal verbs too: one that opens a question is the verb ("Will Emily ever call again?").
MODALS = frozenset({"will", "may"})
#: Words after which a sentence opens (a colon and a quotation's opening mark too: "Jake wondered: Will Emily call?").
_SENTENCE_ENDS = frozenset(":.!?\u2026\"'\u201c\u201d\u2018\u2019*_(\u2014\u2013-")  # and markdown's emphasis,
# a parenthesis, a dash ("*Will Emily ever call again?*", "(Will Emily call?)", "\u2014 Will Emily call?", and
# its ASCII forms "--" and " - ", whose hyphens are words of their own)
#: What may end the sentence a word opens: a run of its marks, or a line's end.
_SENTENCE_END = re.compile(r"[.!?\u2026]+|" + LINE_BREAK_CLASS)
#: An abbreviated title just before a point: the point ends no sentence ("Will Emily forgive Mr. Thompson?").
_TITLE_BEFORE = re.compile(rf"(?<![\w.])(?i:{'|'.join(sorted(ABBREVIATED_TITLES))})$")
#: A lowercase word after an ellipsis: the sentence goes on ("Will Emily... ever call again?").
_GOES_ON = re.compile(r"\s*[a-z]")


def _opens_a_question(text: str, words: Sequence[tuple[str, int, int]], k: int) -> bool:
    """Whether word ``k`` opens a sentence (the story's first word, one after a sentence's end, a colon or a
    quotation mark, or the first of its line) whose end holds a question mark. A point after an abbreviated title,
    between digits ("$3.50"), or an ellipsis before a lowercase word ends no sentence: the question's "Will" was
    read as a first name past them."""
    if not (k == 0 or words[k - 1][0] in _SENTENCE_ENDS or breaks_line(text[words[k - 1][2]:words[k][1]])):
        return False
    if k and words[k - 1][0] == "." and not breaks_line(text[words[k - 1][2]:words[k][1]]) and _TITLE_BEFORE.search(
            text, max(0, words[k - 1][1] - 8), words[k - 1][1]):
        return False  # "Is Mr. Will Mitchell here?": the title's point opens no sentence
    for end in _SENTENCE_END.finditer(text, words[k][2]):
        mark, at, after = end.group(), end.start(), end.end()
        if mark == "." and (_TITLE_BEFORE.search(text, max(0, at - 8), at)
                            or text[at - 1:at].isdigit() and text[after:after + 1].isdigit()):
            continue
        if mark in ("...", "\u2026") and _GOES_ON.match(text, after):
            continue
        return "?" in mark
    return False


@lru_cache(maxsize=1)
def _not_first_names() -> frozenset[str]:
    """Titles, and the words ``parse_first_name`` takes for no first name ("Young", "Baby", "Sister")."""
    from harness.identity.names import name_lists

    lists = name_lists()
    return (NAME_TITLES | frozenset(lists.surname_titles) | frozenset(lists.first_name_titles)
            | frozenset(lists.non_first_names))


@lru_cache(maxsize=4)
def first_name_counts(table: str) -> pd.Series | None:
    """First-name key -> Census 2020 bearers, from a built first-name table; None when the table
    has no ``census_count`` column (then no name is completed)."""
    try:
        raw = pd.read_parquet(table, columns=["key", "census_count"])
    except (OSError, ValueError, KeyError):
        return None
    raw = raw[raw["census_count"].notna()]
    return pd.Series(raw["census_count"].to_numpy(dtype="float64"), index=pd.Index(raw["key"].astype(str)))


@lru_cache(maxsize=16384)
def _bearers(word: str, table: str) -> float:
    from harness.identity.build import fold_name

    counts = first_name_counts(table)
    if counts is None:
        return 0.0
    return float(counts.get(fold_name(word), 0.0))


def completed_name(name: str | None, text: str, words: Sequence[tuple[str, int, int]], others: set[str],
                   table: str, min_count: int = MIN_COUNT) -> str | None:
    """``name``, or, for a one-word name, the first "First Name" the story writes (see the module
    docstring).

    text: the story; words: its words as (word, start, end) (``encoder.split_words``); others: the
    other characters' name words, case-folded; table: a first-name table with ``census_count``.
    """
    if not name or len(name.split()) != 1:
        return name
    others = {fold_word(w) for w in others}

    def first_name_from(k: int, start: int) -> int | None:
        """Where the first name ends at word ``k`` starts, if it is a common first name written one space before
        ``start``, and no month a word of time puts there ("In June Mitchell hired"; "June Mitchell" stays a
        name): word ``k``, or the word before it where ``k`` is the part an apostrophe splits off ("'Nae" of
        "Ja'Nae")."""
        a = k - 1 if glued_name_part(words, k) else k
        if (a >= 2 and words[a - 1][0] in ("-", "\u2010", "\u2011") and words[a - 1][2] == words[a][1]
                and words[a - 2][2] == words[a - 1][1] and words[a - 2][0][-1:].isalpha()):
            return None  # the last part of a name the splitter cut ("Ja'Nae-Marie": not Marie; "up--Emily" is)
        w = text[words[a][1]:words[k][2]]
        if not (starts_capitalised(w) and _name_word(w.replace("'", "").replace("\u2019", ""))
                and text[words[k][2]:start] in _NAME_SPACES):
            return None
        key = fold_word(w)
        before = fold_word(words[a - 1][0]) if a else ""
        if (key in _not_first_names() or key in others
                or (key in MONTHS and before in TIME_WORDS)
                or (key in MONTHS and a >= 2 and before in MONTH_JOINS and fold_word(words[a - 2][0]) in MONTHS)
                or (key in MODALS and _opens_a_question(text, words, a))
                or _bearers(w, table) < min_count):
            return None
        return a

    # where the name is written, a word's start to a word's end ("O'Brien" spans the words O and 'Brien), in
    # order; words are in order and do not overlap, so their starts and ends are sorted. Either apostrophe is the
    # other, as fold_word reads them ("O'Brien" of a story that first wrote "Megan O’Brien"): one character for
    # one, so the offsets hold
    flat, needle = text.replace("\u2019", "'"), name.replace("\u2019", "'")
    at = flat.find(needle)
    while at >= 0:
        start, end = at, at + len(name)
        at = flat.find(needle, at + 1)
        i = bisect_left(words, start, key=_START)
        if not (1 <= i < len(words) and words[i][1] == start):
            continue
        j = bisect_left(words, end, key=_END)
        if not (j < len(words) and words[j][2] == end):
            continue
        k = first_name_from(i - 1, start)
        if k is not None:
            if k >= 1 and fold_word(words[k - 1][0]) not in OFFICES and (
                    (m := first_name_from(k - 1, words[k][1])) is not None):
                # a middle name: "Ana Lucía Torres"; not after an office that is a first name too ("Dean Sarah
                # Mitchell", whose first name would be Dean)
                k = m
            return text[words[k][1]:end]
    return name


_START, _END = itemgetter(1), itemgetter(2)  # of a word (word, start, end)


#: The space between a first name and the surname it completes: a plain one, or a no-break one
#: ("Anne-Marie\u00a0Dubois": a name run joins across it too).
_NAME_SPACES = frozenset({" ", "\u00a0", "\u202f"})
#: The hyphens ``words.split_words`` keeps inside a word ("Mary-Jane", "Anne\u2011Marie").
_HYPHENS = re.compile("[-\u2010\u2011]")


def _name_word(word: str) -> bool:
    """Letters, with combining accents (a decomposed "José") and inner hyphens ("Mary-Jane", and the Unicode hyphens
    U+2010 and U+2011 that ``words.split_words`` keeps inside a word too)."""
    return all(part and all(c.isalpha() or unicodedata.category(c).startswith("M") for c in part)
               for part in _HYPHENS.split(word))


def complete_names(characters: tuple[CharacterLabel, ...], text: str, words: Sequence[tuple[str, int, int]],
                   table: str) -> tuple[CharacterLabel, ...]:
    """``characters`` with each one-word name completed (``completed_name``)."""
    out = []
    for k, c in enumerate(characters):
        # "Dr.Robert Lee" is Dr. and Robert, as the identity module reads a title written against the name
        others = {fold_word(p) for j, o in enumerate(characters) if j != k and o.name for w in o.name.split()
                  for p in (w, *w.split(".")) if p}
        name = completed_name(c.name, text, words, others, table)
        out.append(c if name == c.name else replace(c, name=name))
    return tuple(out)


__all__ = ["MIN_COUNT", "complete_names", "completed_name", "first_name_counts"]
