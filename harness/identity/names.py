"""First names: parsing the labeller's name strings, and race likelihoods per first name.

Parsing (digest section 4, "Post-processing"; word lists in ``harness/data/names/non_names.yaml``)
-----------------------------------------------------------------------------------------------
``select_name`` picks one name from the labeller's list for a character: drop names that share a
word with the role string (its noun phrase: "Bill" stays for the "friend who pays the bill"), names
containing "American" and known false positives ("young woman", "the", ...); drop "Unspecified"
(and the other ways of writing it, ``NO_NAME``: "None", "N/A", "(unknown)", ...) when another name
exists; take the first. ``parse_first_name`` then takes the first name: at most
three tokens; a surname title (Mr, Mrs, Ms, Miss, Mx, Dr, and ours: Doctor, Professor, Coach,
Pastor, Sheriff, Lt, Sen, Major, Lord, Lady, ...) means the next token is a surname unless a third
token follows ("Dr. Smith" -> None, "Dr. Sarah Smith" -> "Sarah"); "Chef"/"Nurse" (and ours: King,
Queen, Prince, Princess, Duke, Sir, Dame) are followed by a first name; otherwise the first token. Ours too: a
particle that starts a surname ("de la Cruz", "von Braun") makes one token with the surname, so
"Maria de la Cruz" has three tokens' room and gives Maria, and "Dr. von Braun" gives None as "Dr.
Braun" does (``surname_particles`` in the word lists). Possessives and edge punctuation are removed, and non-names (the
authors' list: Coach, Mom, Little, ...; plus ours, and any single letter) give None; so does a
possessive before the last word ("Jake's mom" names Jake's mother, not Jake). Both steps compare the
false positives and no-names to the whole name without the punctuation around it ("He.", "(None)").
Ours too: trailing suffixes (Jr, Sr, III, PhD, ...) are dropped before the tokens are counted, so
"Dr. Smith Jr." has no first name where the authors' parser took "Smith"; a title is recognised
behind quotes or markdown ("**Dr. Sarah Smith**"); and the name is read in Unicode's composed form
(NFC), so a decomposed "José" keeps its accent.

Likelihoods and how the sources combine
---------------------------------------
The table (built by ``harness.identity.build``) holds three sources per normalised key: the 2020
Census first-name table (``census``: counts and White/Black/API/AI-AN/two-or-more/Hispanic
shares), the six-state voter-file dictionary of Rosenman et al. (``voter``: White/Black/Hispanic/
Asian/Other, no counts) and the country-share MENA and NH/PI fractions from names-dataset
(``nd``). Two modes turn them into the seven columns of ``RACES``:

``mode="paper"`` (default; paper-compatible, as the authors' code): every category is read from
its own source, with no renormalisation. White, Black, Latine, Asian (= API, which still contains
Pacific Islanders, as the paper's Florida "api") and AI/AN come from the Census table; their
denominator includes "two or more races", so they sum to less than 1, as the paper's Florida
shares did (denominator with other/multiracial/unknown). Names missing from the Census take these
five from the voter file when ``fallback=True`` (AI/AN is then NaN: that source folds it into
"other"). MENA and NH/PI come from names-dataset. A name can be both 0.7 White and 0.7 MENA. A
name is ``matched`` if any source has it; a NaN category counts 0 in fractional sums, the
character stays in the denominator.

``mode="renormalised"``: one seven-way distribution per name that sums to 1. From the U.S. source
(Census, else voter file) take White, Black, Latine, API, AI/AN and drop the multiracial/other
mass; carve MENA out of White (most MENA Americans self-identify as White under the 1997 OMB
standard) and NH/PI out of API with the names-dataset shares m and p: MENA = m*White,
White' = (1-m)*White, NH/PI = p*API, Asian = (1-p)*API; then divide by the sum. Names with no U.S.
source entry are unmatched (no seven-way distribution exists for them).

Known approximations: names-dataset shares are over each name's ten most frequent countries of
105 and are weighted by Facebook's per-country user base, not by U.S. population, and expatriate
populations count for their host country (Priya gets 0.22 MENA from the Gulf states). Only Fiji of
the S6b NH/PI list is in names-dataset. Keys fold accents and case ("José" = "JOSE"), which the
paper's exact match did not.

Privacy: ``redact`` withholds the likelihoods of names whose population (Census count) is below
``min_population`` or unknown; every printed report goes through it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from harness.errors import ConfigError, DataError
from harness.identity import RACES
from harness.identity.build import TABLE_COLUMNS, name_key, read_provenance
from harness.jsonl import iter_jsonl, parse_list_text

MODES = ("paper", "renormalised")
DEFAULT_MIN_POPULATION = 100
_ROLE_STOPWORDS = frozenset({"a", "an", "the", "in", "of", "to", "for", "who", "with", "at", "on", "and", "by",
                             "from", "into", "about", "as", "is"})
# anchored at the start only: a trailing run is found on the reversed string (``_trail_length``), since a
# search for "\W+$" backtracks quadratically over a long run of marks that a letter ends
_EDGE = re.compile(r"[\W_]+")  # punctuation, and markdown's underscores ("__Dr. Sarah Smith__")
_POSSESSIVE = re.compile(r"['\u2019]s$", re.I)
# "Marcus' mom": the possessive of a name ending in s, a bare apostrophe after a word that starts with a letter
# (not a quoted nickname, "'Jess' Smith")
_BARE_POSSESSIVE = re.compile(r"^[^\W\d_]\S*s['\u2019]$", re.I)


# --------------------------------------------------------------------------------------------
# parsing


@dataclass(frozen=True)
class NameLists:
    """The word lists that drive name parsing (``harness/data/names/non_names.yaml``)."""

    version: str
    false_positives: frozenset[str]
    non_first_names: frozenset[str]
    surname_titles: frozenset[str]
    first_name_titles: frozenset[str]
    name_suffixes: frozenset[str] = frozenset()
    surname_particles: frozenset[str] = frozenset()
    particles_also_first_names: frozenset[str] = frozenset()


@lru_cache(maxsize=1)
def name_lists() -> NameLists:
    """Load the parsing word lists (lower-cased)."""
    path = Path(str(resources.files("harness").joinpath("data", "names", "non_names.yaml")))
    d = yaml.safe_load(path.read_text())
    low = lambda *keys: frozenset(str(w).lower() for k in keys for w in d.get(k, []))  # noqa: E731
    return NameLists(str(d["version"]), low("false_positives", "false_positives_added"),
                     low("non_first_names", "non_first_names_added"), low("surname_titles"),
                     low("first_name_titles"), low("name_suffixes"), low("surname_particles"),
                     low("particles_also_first_names"))


#: What a labeller writes for "no name" instead of the prompt's "Unspecified", keyed as ``is_no_name`` keys it
#: (case-folded, without periods, extra space and the punctuation around it): the paper's output is the name or
#: Unspecified, and a story that says "none of them" or "no name" would otherwise keep "None" or "No name" as the
#: character's name (the false positives hold some of these whole strings, not "Not specified" or "No name",
#: whose first word then counted as a first name). Not "nil": Nil is a Turkish given name (475 bearers in the
#: name table's Census counts).
NO_NAME = frozenset({"unspecified", "none", "unknown", "n/a", "not specified", "unnamed", "no name", "null",
                     "not given", "not mentioned", "not provided", "not stated", "not named", "no name given",
                     "name not given", "name not mentioned", "name unknown", "anonymous", "undefined",
                     "none given", "none mentioned", "none specified", "none provided", "unknown name",
                     "name not provided", "name not specified", "not applicable", "withheld", "name withheld"})


def _whole_key(name: str) -> str:
    """A whole labelled name as the word lists compare it: case-folded, single-spaced, without the punctuation,
    quotes, brackets or markdown around it ("**(None.)**" -> "none")."""
    key = re.sub(r"\s+", " ", name.casefold())
    lead = _EDGE.match(key)
    key = key[lead.end():] if lead else key
    return key[:len(key) - _trail_length(key, _EDGE)]


def _trail_length(text: str, pattern: re.Pattern) -> int:
    """How many characters at the end of ``text`` the start-anchored ``pattern`` matches, read backwards."""
    m = pattern.match(text[::-1])
    return m.end() if m else 0


def is_no_name(name: str) -> bool:
    """Whether a labelled name is one of the ways of writing "Unspecified" (``NO_NAME``, or a phrase that starts
    with "Not": "Not explicitly named"; "Not" is no first name), also after "Name" ("Name not stated", "Name
    unspecified") or before a remark in brackets ("N/A (not named)").

    >>> [is_no_name(n) for n in ["Unspecified", "N/A", "Not specified.", "No Name", "(none)", '"Unspecified"', "Nona"]]
    [True, True, True, True, True, True, False]
    >>> [is_no_name(n) for n in ["Not explicitly named", "Nota Bene", "Not", "Name not stated", "N/A (not named)"]]
    [True, False, False, True, True]
    """
    key = _whole_key(name.replace(".", ""))
    head = _whole_key(key.split("(", 1)[0]) if "(" in key[1:] else key  # "n/a (not named)": its head
    return any(k in NO_NAME or k.startswith("not ") for k in {key, head, head.removeprefix("name ")})


def _role_words(role: str | None) -> set[str]:
    """The content words of a role's noun phrase: a relative clause is no part of it ("friend who pays
    the bill" -> friend; a Bill who pays keeps his name)."""
    if not role:
        return set()
    noun = re.split(r"\bwho\b", role.lower(), maxsplit=1)[0]
    return {w for w in re.findall(r"[a-z]+", noun) if w not in _ROLE_STOPWORDS}


def _is_missing(raw: Any) -> bool:
    return raw is None or (isinstance(raw, float) and np.isnan(raw))


def _keep_name(name: str, role_words: set[str]) -> bool:
    """Whether a labelled name survives the filters: not empty, no false positive (compared without the
    punctuation around it: "He." is "he"; nor one before a remark in brackets, "NA (not named)", as
    ``is_no_name`` reads "N/A (not named)"), without "American", sharing no word with the role."""
    low = _whole_key(name)
    head = _whole_key(low.split("(", 1)[0]) if "(" in low[1:] else low
    if not low or {low, head} & name_lists().false_positives or "american" in low:
        return False
    return not (role_words and set(re.findall(r"[a-z]+", low)) & role_words)


def name_candidates(raw: Any) -> list[str]:
    """The list of names in a labeller field: a list, a Python/JSON list string ("['Emily']"), or a
    plain name string. Missing values give []."""
    if _is_missing(raw):
        return []
    if isinstance(raw, (list, tuple, np.ndarray)):
        return [str(x) for x in raw if not _is_missing(x)]
    if not isinstance(raw, str):
        raise DataError(f"name field must be a string or a list of strings, got {type(raw).__name__} {raw!r}")
    s = raw.strip()
    if s.startswith("[") and s.endswith("]"):
        val = parse_list_text(s)
        if val is not None:
            return [str(x) for x in val if not _is_missing(x)]
        raise DataError(f"name field {raw!r} looks like a list but does not parse; write it as ['Name', ...]")
    return [s] if s else []


def select_name(raw: Any, role: str | None = None, *, role_title: bool = True) -> str | None:
    """Choose one character name from a labeller field (see module docstring); None if none is left.
    ``role_title=False``: a leading title that repeats the role comes off each candidate first
    (``without_role_title``), so the role filter leaves "Nurse Emily" of a nurse as "Emily"."""
    role_words = _role_words(role)
    names = [n.strip() if role_title else without_role_title(n.strip(), role) for n in name_candidates(raw)]
    names = [n for n in names if _survives(n, role_words)]
    return names[0] if names else None


def _survives(name: str, role_words: set[str]) -> bool:
    """``_keep_name``, and no "Unspecified" (left out when no other name is left)."""
    return _keep_name(name, role_words) and not is_no_name(name)


def survives_filters(name: str, role: str | None = None) -> bool:
    """Whether one name, as a labeller wrote it, is left by ``select_name``'s filters with ``role_title=False``
    (a title that repeats the role off first; no false positive, "American", word of the role or "Unspecified")."""
    return _survives(without_role_title(name.strip(), role), _role_words(role))


def _strip_edges(tok: str) -> str:
    """``tok`` without the punctuation around it; a combining mark that ends a word (the vowel sign of
    "प्रिया", the tone mark of "สมศักดิ์") is part of it, though ``re``'s ``\\W`` matches it."""
    lead = _EDGE.match(tok)
    tok = tok[lead.end():] if lead else tok
    trail = _trail_length(tok, _EDGE)
    if trail:
        end = len(tok) - trail
        while end < len(tok) and end and unicodedata.category(tok[end])[0] == "M":
            end += 1
        tok = tok[:end]
    return tok


def _clean_token(tok: str) -> str:
    tok = _strip_edges(tok)
    tok = _POSSESSIVE.sub("", tok)
    return _strip_edges(tok)


def _bare(tok: str) -> str:
    """A token as the word lists hold it: cleaned, lower-cased, without dots ("Ph.D." -> "phd")."""
    return _clean_token(tok).lower().replace(".", "")


def _split_glued_title(token: str, lists: NameLists) -> list[str]:
    """A title written against the next word without a space ("Dr.Smith", "Mr.Lee") as two tokens; any
    other token (initials "J.R.", "A.J.") as it is."""
    title, dot, rest = token.partition(".")
    if dot and _strip_edges(rest) and _clean_token(title).lower() in lists.surname_titles | lists.first_name_titles:
        return [title + dot, rest]
    return [token]


def _starts_upper(tok: str) -> bool:
    word = _strip_edges(tok)
    return bool(word) and word[0].isupper()


def _join_particles(tokens: list[str], lists: NameLists) -> tuple[list[str], set[int]]:
    """The tokens with each surname that a particle starts joined into one ("Maria de la Cruz" -> Maria,
    "de la Cruz"), and the positions of the joined surnames. A particle in lower case starts one
    anywhere; a capitalised one ("De Luca", "Di Maio") anywhere but first or right after a
    first-name title, unless it is a common first name on its own ("Mr. Al Green", "Dr. Van Nguyen"). Either needs a
    capitalised word after its run of particles (no surname in "Jake with ten dogs").

    A name written all in lower case says nothing by its capitals (``_lower_case_surname``): there a run of
    particles and the one word after it are a surname where they end the name and follow at most a title and a
    first name ("maria de la cruz" -> maria, "de la cruz"; "dr. von braun"); not "al green", "mr. al green"
    (Al is a first name), nor "woman from la paz" (no name)."""
    out: list[str] = []
    joined: set[int] = set()
    lower_case = not any(_starts_upper(t) for t in tokens) and any(c.islower() for t in tokens for c in t)
    k = 0
    while k < len(tokens):
        bare = _bare(tokens[k])
        starts = bare in lists.surname_particles and (
            not _starts_upper(tokens[k]) or (bare not in lists.particles_also_first_names and k >= 1 and not (
                k == 1 and _bare(tokens[0]) in lists.first_name_titles)))
        end = k
        while starts and end + 1 < len(tokens) and _bare(tokens[end + 1]) in lists.surname_particles \
                and (not _starts_upper(tokens[end + 1]) or _starts_upper(tokens[k])):
            end += 1
        if starts and end + 1 < len(tokens) and (
                _lower_case_surname(tokens, k, end, lists) if lower_case else _starts_upper(tokens[end + 1])):
            joined.add(len(out))
            out.append(" ".join(tokens[k:end + 2]))
            k = end + 2
        else:
            # the particles after k are lower case, so each would start the same run and fail the same way:
            # kept as they are at once (a run of them read again from each was quadratic)
            out.extend(tokens[k:end + 1])
            k = end + 1
    return out, joined


def _lower_case_surname(tokens: list[str], k: int, end: int, lists: NameLists) -> bool:
    """In a name written without capitals, whether the particles ``k..end`` and the word after them are a surname:
    they end the name, and come first (a surname alone, unless the particle is also a first name), after one
    word (a first name, or a title unless the particle is also a first name: "mr. al green") or after a title
    and a first name."""
    titles = lists.surname_titles | lists.first_name_titles
    if end + 2 != len(tokens):
        return False
    also_first = _bare(tokens[k]) in lists.particles_also_first_names
    if k == 0:
        return not also_first
    if k == 1:
        return not (also_first and _bare(tokens[0]) in titles)
    return k == 2 and _bare(tokens[0]) in titles


#: A nickname in quotes or brackets between a name's words ('Mark "The Bull" Murphy', "Dr. Sarah (Sally) Smith"),
#: which the three-token rule would count, or a remark in brackets after the name ("Ms. Patel (Priya)": no "Patel"
#: of three tokens); the name cleaning of the MENA source drops them too (digest 3.3).
_NICKNAME = re.compile(r"(?<=\S)\s+(?:\"[^\"]*\"|\u201c[^\u201c\u201d]*\u201d|\u2018[^\u2018\u2019]*\u2019|'[^']*'|"
                       r"\([^()]*\))(?=\s+\S)|(?<=\S)\s+\([^()]*\)\s*$")


def parse_first_name(raw: str | None, role: str | None = None) -> str | None:
    """The first name in one extracted name, or None when there is none.

    >>> [parse_first_name(n) for n in ["Dr. Smith", "Dr. Sarah Johnson", "Chef Maria", "John Smith", "Mom"]]
    [None, 'Sarah', 'Maria', 'John', None]
    >>> [parse_first_name(n) for n in ["Dr. Smith Jr.", "John Smith, Jr.", "**Dr. Sarah Smith**", "Pastor Mike"]]
    [None, 'John', 'Sarah', None]
    >>> [parse_first_name(n) for n in ["Dr.Smith", "Dr.Maya Patel", "J.R. Smith"]]
    [None, 'Maya', 'J.R']
    >>> [parse_first_name(n) for n in ["Dr. von Braun", "Maria de la Cruz", "Major Thompson", "King Arthur"]]
    [None, 'Maria', None, 'Arthur']
    >>> [parse_first_name(n) for n in ['Mark "The Bull" Murphy', "Dr. Sarah (Sally) Smith", "__Dr. Sarah Smith__"]]
    ['Mark', 'Sarah', 'Sarah']
    """
    if _is_missing(raw):
        return None
    if not isinstance(raw, str):
        raise DataError(f"name must be a string, got {type(raw).__name__} {raw!r}")
    raw = unicodedata.normalize("NFC", raw)
    if not _keep_name(raw, _role_words(role)) or is_no_name(raw):
        return None
    lists = name_lists()
    raw = _NICKNAME.sub(" ", raw)  # 'Jim "The Curse Jacket" Rodriguez': Jim, not four tokens and no first name
    tokens = [t for t in raw.split() if _strip_edges(t)]
    if tokens:
        tokens[:1] = _split_glued_title(tokens[0], lists)
    while len(tokens) > 1 and _bare(tokens[-1]) in lists.name_suffixes:
        tokens.pop()
    if any(_POSSESSIVE.search(_strip_edges(t)) or _BARE_POSSESSIVE.match(t.rstrip(",;:")) for t in tokens[:-1]):
        return None  # a relation of someone named, not a name: "Jake's mom" (the authors' "mark's daughter")
    tokens, surnames = _join_particles(tokens, lists)
    if not tokens or len(tokens) > 3:
        return None
    head = _clean_token(tokens[0]).lower()
    if head in lists.surname_titles:
        pick = 1 if len(tokens) == 3 else None
    elif head in lists.first_name_titles:
        pick = 1 if len(tokens) >= 2 else None
    else:
        pick = 0
    if pick is None or pick in surnames:
        return None  # no first name, or a surname that a particle starts ("Dr. von Braun", "de la Cruz")
    first = tokens[pick]
    first = _clean_token(first)
    if len(first) < 2 or any(c.isdigit() for c in first) or not any(c.isalpha() for c in first):
        return None
    low = first.lower().rstrip(".")
    if first.lower() in lists.non_first_names or low in lists.surname_titles or low in lists.name_suffixes:
        return None
    return first


def without_role_title(name: str | None, role: str | None) -> str | None:
    """A labelled name without a leading first-name title that repeats its role: "Nurse Emily" for a
    nurse -> "Emily". With the title, ``parse_first_name`` would drop the name for sharing a word with
    the role string (the seed 000 filter meant for "the nurse"); "Chef Maria" for a nurse, "Dr. Ana
    Ruiz" for a doctor (a surname title: its parse is unchanged) and one-word names stay as they are.
    A surname title that repeats the role goes where a first name follows it ("Doctor Ana Ruiz" for a
    doctor -> "Ana Ruiz", as "Dr. Ana Ruiz"); before a surname alone it stays ("Doctor Ruiz").

    >>> [without_role_title(n, "nurse") for n in ["Nurse Emily", "Chef Maria", "Nurse", None]]
    ['Emily', 'Chef Maria', 'Nurse', None]
    """
    if not name or not name.strip():
        return name
    # split at any space, the title read without the quotes or markdown around it ("**Nurse Emily**", a
    # non-breaking space): as ``parse_first_name`` reads words; the title stayed, and the name was lost
    head, rest = (name.strip().split(None, 1) + [""])[:2]
    word = _clean_token(head).lower().rstrip(".")
    lists = name_lists()
    if rest.strip() and word in _role_words(role) and (
            word in lists.first_name_titles or word in lists.surname_titles and parse_first_name(name) is not None):
        return rest.strip()
    return name


def first_name_of(raw: Any, role: str | None = None, *, role_title: bool = True) -> str | None:
    """``parse_first_name(select_name(raw, role), role)``: a labeller field straight to a first name
    (``role_title``: see ``select_name``)."""
    return parse_first_name(select_name(raw, role, role_title=role_title), role)


def first_names_from_jsonl(path: str | Path, fields: Sequence[str] = ("manual_subject_name", "manual_object_name"),
                           role_fields: Sequence[str | None] | None = None) -> list[str]:
    """Parsed first names (one per character that has one) from the name fields of a JSONL file.

    A field may be dotted to reach into nested objects (``labels.subject.name``).
    ``role_fields`` aligns with ``fields`` and names the column holding each character's role
    string (e.g. ``subject``/``object``); None disables the role filter for that field.
    """
    path = Path(path)
    roles = list(role_fields) if role_fields is not None else [None] * len(fields)
    if len(roles) != len(fields):
        raise ConfigError(f"role_fields has {len(roles)} entries for {len(fields)} fields; give one per field")
    out: list[str] = []
    given: set[str] = set()  # the fields some row gives a value for
    first_keys: list[str] | None = None
    for lineno, row in iter_jsonl(path, what="JSONL file with name fields"):
        if first_keys is None and isinstance(row, dict):
            first_keys = list(row)
        for f, rf in zip(fields, roles):
            value = _dig(row, f)
            if value is not None:
                given.add(f)
            try:
                fn = first_name_of(value, _dig(row, rf) if rf else None)
            except DataError as e:
                raise DataError(f"{path}:{lineno}: field {f!r}: {e}") from None
            if fn is not None:
                out.append(fn)
    if first_keys is not None and (missing := [f for f in fields if f not in given]):
        raise DataError(f"{path}: no row gives a value for field {missing[0]!r} (the first row has "
                        f"{', '.join(first_keys[:8])}{', ...' if len(first_keys) > 8 else ''}); name the fields that "
                        "hold the names (--field, dotted for nested ones)")
    return out


def _dig(row: Any, dotted: str) -> Any:
    """``row["a"]["b"]`` for ``"a.b"``; None where a level is missing (a plain key wins if present)."""
    if isinstance(row, dict) and dotted in row:
        return row[dotted]
    for part in dotted.split("."):
        if not isinstance(row, dict):
            return None
        row = row.get(part)
    return row


# The project's own hand-labelled stories: character names live under labels.<role>.name.
PROJECT_NAME_FIELDS = ("labels.subject.name", "labels.object.name")
# The authors' released audit rows: manual (human) name annotations.
MANUAL_NAME_FIELDS = ("manual_subject_name", "manual_object_name")
SHARED_DEV = Path("..") / "shared" / "data" / "laissez_faire_audit_dev.jsonl"


def default_coverage_sources(repo_root: str | Path | None = None) -> list[tuple[Path, tuple[str, ...]]]:
    """The corpora ``harness names build`` reports coverage on when none is given.

    Always the first names of the project's labelled stories
    (``harness/data/labelling/project_train.jsonl``); and, when it exists, the shared dev file
    ``../shared/data/laissez_faire_audit_dev.jsonl`` beside the repository (never required).
    ``repo_root`` defaults to the checkout holding this package.
    """
    project = Path(str(resources.files("harness") / "data" / "labelling" / "project_train.jsonl"))
    out = [(project, PROJECT_NAME_FIELDS)] if project.is_file() else []
    root = Path(repo_root) if repo_root is not None else Path(__file__).resolve().parents[2]
    dev = root / SHARED_DEV
    if dev.is_file():
        out.append((dev.resolve(), MANUAL_NAME_FIELDS))
    return out


# --------------------------------------------------------------------------------------------
# likelihood table


@dataclass(frozen=True)
class Coverage:
    """How many first names a table matches.

    Attributes:
        distinct / distinct_matched: distinct first names (by lookup key) and how many matched.
        occurrences / occurrences_matched: name occurrences (characters) and how many matched.
        unmatched: the distinct names not matched, most frequent first.
    """

    distinct: int
    distinct_matched: int
    occurrences: int
    occurrences_matched: int
    unmatched: tuple[str, ...] = field(default=())

    @property
    def distinct_share(self) -> float:
        """Share of distinct names matched (NaN if none)."""
        return self.distinct_matched / self.distinct if self.distinct else float("nan")

    @property
    def occurrence_share(self) -> float:
        """Share of occurrences matched (NaN if none)."""
        return self.occurrences_matched / self.occurrences if self.occurrences else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON."""
        return {"distinct": self.distinct, "distinct_matched": self.distinct_matched,
                "distinct_share": self.distinct_share, "occurrences": self.occurrences,
                "occurrences_matched": self.occurrences_matched, "occurrence_share": self.occurrence_share,
                "unmatched": list(self.unmatched)}


def _derive(raw: pd.DataFrame, mode: str, fallback: bool) -> tuple[np.ndarray, np.ndarray]:
    """(likelihoods (n, 7) float64 in RACES order, matched (n,) bool) from the raw source columns."""
    n = len(raw)
    col = lambda c: raw[c].to_numpy(dtype="float64")  # noqa: E731
    has_c = ~np.isnan(col("census_count"))
    has_v = ~np.isnan(col("voter_white")) & ~has_c if fallback else np.zeros(n, bool)
    has_nd = ~np.isnan(col("nd_mena"))
    nan = np.full(n, np.nan)

    def us(census_col: str, voter_col: str | None) -> np.ndarray:
        out = np.where(has_c, col(census_col), nan)
        if voter_col is not None:
            out = np.where(has_v, col(voter_col), out)
        return out

    white, black = us("census_white", "voter_white"), us("census_black", "voter_black")
    latine, api = us("census_hispanic", "voter_hispanic"), us("census_api", "voter_asian")
    aian = us("census_aian", None)
    mena, nhpi = col("nd_mena"), col("nd_nhpi")
    if mode == "paper":
        lik = np.stack([aian, nhpi, mena, latine, api, black, white], axis=1)
        return lik, has_c | has_v | has_nd
    has_us = has_c | has_v
    aian0 = np.where(has_v, 0.0, aian)
    m, p = np.nan_to_num(mena), np.nan_to_num(nhpi)
    parts = np.stack([aian0, p * api, m * white, latine, (1 - p) * api, black, (1 - m) * white], axis=1)
    total = parts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        lik = np.where(has_us[:, None] & (total > 0), parts / total, np.nan)
    return lik, has_us & (total[:, 0] > 0)


class NameTable:
    """Race likelihoods per first name, with vectorised lookup.

    Build with ``harness names build`` (or ``NameTable.load()``, which builds on first use).
    """

    def __init__(self, raw: pd.DataFrame, *, mode: str = "paper", fallback: bool = True,
                 provenance: dict[str, Any] | None = None, path: str | None = None) -> None:
        if mode not in MODES:
            raise ConfigError(f"unknown name-table mode {mode!r}; use one of {', '.join(MODES)}")
        missing = set(TABLE_COLUMNS) - set(raw.columns)
        if missing:
            raise DataError(f"name table {path or ''}: missing column(s) {', '.join(sorted(missing))}; "
                            "rebuild with `harness names build --force`")
        keys = raw["key"].astype(str)
        if keys.duplicated().any():
            raise DataError(f"name table {path or ''}: duplicate key {keys[keys.duplicated()].iloc[0]!r}; rebuild it")
        lik, matched = _derive(raw, mode, fallback)
        n = len(raw)
        # one extra all-NaN / unmatched row at the end, so indexer -1 selects "no entry"
        self._lik = np.vstack([lik, np.full((1, len(RACES)), np.nan)])
        self._matched = np.append(matched, False)
        pop = raw["census_count"].to_numpy(dtype="float64")
        self._pop = np.append(np.where(matched, pop, np.nan), np.nan)
        self._index = pd.Index(keys.to_numpy(), dtype=object)
        self.mode, self.fallback, self.path = mode, fallback, path
        self.provenance = dict(provenance or {})
        self.provenance.update({"mode": mode, "fallback": fallback})
        self.size = n

    @classmethod
    def load(cls, path: str | Path | None = None, *, mode: str = "paper", fallback: bool = True,
             build_if_missing: bool = True) -> NameTable:
        """Load a built table (default: the one in the user cache, built first if missing)."""
        from harness.identity import build

        path = Path(path) if path is not None else build.ensure_default_table(build_if_missing)
        if path.is_dir():
            raise DataError(f"name table {path}: a directory; give the table's file (a .parquet that "
                            f"`harness names build` wrote)")
        if path.exists() and not path.is_file():
            raise DataError(f"name table {path}: not a regular file (a device, pipe or socket); give the table's file "
                            f"(a .parquet that `harness names build` wrote)")
        if not path.is_file():
            raise DataError(f"name table {path} not found; run `harness names build --out {path}`")
        provenance = read_provenance(path)
        built_by = provenance.get("builder_version")
        if built_by is not None and str(built_by) != build.BUILDER_VERSION:
            # the table's keys were made by another name_key: names would silently stop matching
            raise DataError(f"name table {path}: built by table builder {built_by}, this harness reads builder "
                            f"{build.BUILDER_VERSION}'s keys; rebuild it with "
                            f"`harness names build --force --out {path}`")
        raw = pd.read_parquet(path)
        return cls(raw, mode=mode, fallback=fallback, provenance=provenance, path=str(path))

    def _positions(self, first_names: Any) -> tuple[np.ndarray, pd.Index]:
        if isinstance(first_names, str) or first_names is None:
            first_names = [first_names]
        index = first_names.index if isinstance(first_names, pd.Series) else pd.RangeIndex(len(first_names))
        values = np.asarray(first_names, dtype=object)
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        pos = self._index.get_indexer(name_key(uniques).to_numpy())
        pos = np.where(pos < 0, self.size, pos)                   # unknown key -> the NaN row
        rows = np.where(codes >= 0, pos[codes] if len(pos) else self.size, self.size)
        return rows, index

    def lookup(self, first_names: Sequence[str | None] | pd.Series | str) -> pd.DataFrame:
        """Likelihoods for many first names at once.

        Returns a DataFrame indexed like the input (a Series keeps its index) with one float column
        per race in ``RACES`` (NaN: the source has no entry), ``matched`` (bool) and ``population``
        (Census count, NaN if unknown). None/NaN names are unmatched.
        """
        rows, index = self._positions(first_names)
        out = pd.DataFrame(self._lik[rows], index=index, columns=list(RACES))
        out["matched"] = self._matched[rows]
        out["population"] = self._pop[rows]
        return out

    def representative_shares(self) -> dict[str, float]:
        """Per race, the mean likelihood of a U.S.-representative set of named people: every first name of the
        Census 2020 table weighted by its bearers, a race the name has no entry for adding 0 (fractional
        counting, digest 3.3). R_rep divides a model's mean by p*, so this over p* is the R_rep of a model that
        names its characters as the U.S. does: near 1 where the source measures the group (MENA, names-dataset's
        three-decimal shares: 3.87% against p* 3.79%), near 0 where it cannot (names-dataset's NH/PI, Fiji alone
        of Table S6b's countries), which would read as omission whatever a model writes."""
        pop = np.nan_to_num(self._pop[:-1])
        lik = np.nan_to_num(self._lik[:-1])
        total = pop.sum()
        return {r: float(pop @ lik[:, j] / total) if total > 0 else float("nan") for j, r in enumerate(RACES)}

    def coverage(self, first_names: Iterable[str | None]) -> Coverage:
        """Share of distinct first names and of occurrences that the table matches (None skipped)."""
        names = pd.Series([n for n in first_names if not _is_missing(n)], dtype=object)
        if names.empty:
            return Coverage(0, 0, 0, 0)
        keys = name_key(names)
        keys = keys.where(keys != "", names.str.casefold())  # no letter A-Z ("李明", "Юлия"): each name its own
        matched = self.lookup(names)["matched"].to_numpy()
        per_key = pd.DataFrame({"key": keys, "name": names, "m": matched})
        counts = per_key.groupby("key").agg(n=("m", "size"), m=("m", "first"), name=("name", "first"))
        unmatched = counts[~counts["m"]].sort_values("n", ascending=False)["name"]
        return Coverage(int(len(counts)), int(counts["m"].sum()), int(len(names)), int(matched.sum()),
                        tuple(unmatched))


def redact(frame: pd.DataFrame, min_population: int | None = DEFAULT_MIN_POPULATION) -> pd.DataFrame:
    """Copy of a ``lookup`` frame with the race likelihoods of rare names withheld (set to NaN) and a
    ``withheld`` column: a name is withheld when its population is unknown or below
    ``min_population``. ``min_population`` of None or 0 withholds nothing."""
    out = frame.copy()
    if not min_population:
        out["withheld"] = False
        return out
    pop = out["population"].to_numpy(dtype="float64")
    withheld = out["matched"].to_numpy(bool) & ~(pop >= min_population)
    out.loc[withheld, list(RACES)] = np.nan
    out["withheld"] = withheld
    return out
