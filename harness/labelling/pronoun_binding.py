"""Pronouns that their sentence binds to a named character the tagger left without any.

The encoder tags reference words by type ("his" for the subject or not), and in a story about two
characters of one gender it often gives the shared "he"/"his" to one of them only: "chef Paul ...
the student, Max ... Paul finally spoke, his voice brimming" comes back with Paul unreferenced, and
a character the story calls "he" is labelled Unspecified.

The rule reads where each pronoun stands. In a story with two named characters, one holding words of
one binary gender (the he or she family) and the other (X) no gendered word at all, an occurrence of
that gender's subject, possessive or reflexive pronoun (he, his, himself; she, her as a determiner,
herself), outside quotation marks, in a sentence where X's name has already occurred and nothing of
the other character (a word of its name, or one of its references other than these pronouns) has, is
bound to X: "Paul finally spoke, his voice ..." gives Paul "his". Object pronouns are never bound
(in "Mei thanked her" the object is not the subject of its clause), and a first name that contradicts
the gender (``name_gender``: its share of female bearers at least ``strength`` for "he", at most
``1 - strength`` for "she") vetoes the binding when a name table is given.

Checked on gold references first: in the project's same-gender named pairs, with one character's
pronouns removed, the pronouns it binds back are among that character's gold references in 222 of 230
bindings (the training files; 190 of 195 on the held-out sets), and they restore the character's
gender in 170 of 284 cases. Held out with the project-only encoder (section ``labelling-layers`` of
``benchmarks/RESULTS.md``): it changed 11 characters of the 450 held-out stories, 9 right
(Unspecified -> the gold gender), 2 wrong (a pronoun of the other character in a
participial clause: "Sara nodded, squeezing her hand"; "spotting his obvious potential").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from harness.labelling.base import NAME_TITLES, CharacterLabel, RoleSpec

#: The pronouns it binds, by the gender they carry ("her" only where it is a determiner).
BOUND = {"he": "Male", "his": "Male", "himself": "Male", "she": "Female", "her": "Female", "herself": "Female"}
_FAMILIES = {"Male": frozenset({"he", "him", "his", "himself"}), "Female": frozenset({"she", "her", "hers", "herself"})}
_SENTENCE_END = frozenset({".", "!", "?"})
_NAME_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*")


def name_words(name: str | None) -> frozenset[str]:
    """A name's capitalised words other than titles, case-folded ("Dr. Ana Ruiz" -> {"ana", "ruiz"})."""
    if not name:
        return frozenset()
    return frozenset(w.lower() for w in _NAME_WORD.findall(name) if w[:1].isupper() and w.lower() not in NAME_TITLES)


def bind_unreferenced(words: Sequence[str], characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...],
                      possessive_her: Callable[[Sequence[str], int], bool], table: str | None = None,
                      strength: float | None = None) -> tuple[CharacterLabel, ...]:
    """``characters`` with the pronouns their sentences bind to an unreferenced named character added
    to its references (see the module docstring); otherwise ``characters`` unchanged.

    words: the story's words and punctuation in order (``encoder.split_words``);
    possessive_her(words, i): whether ``words[i]`` ("her") is a determiner;
    table, strength: a first-name table and the share at which a name contradicts a gender (the veto),
    as ``name_gender.check_pronoun_sets`` takes them; no veto without a table.
    """
    from harness.identity.gender import infer_gender
    from harness.labelling.name_gender import DEFAULT_STRENGTH, default_lexicon, female_share

    if len(characters) != 2 or not all(c.name for c in characters):
        return characters
    lexicon = default_lexicon()
    genders = [infer_gender(list(c.references), lexicon=lexicon) for c in characters]
    if "Unspecified" not in genders:
        return characters
    x = genders.index("Unspecified")
    y = 1 - x
    gender = genders[y]
    if gender not in _FAMILIES:
        return characters
    mine, theirs = name_words(characters[x].name), name_words(characters[y].name)
    if not mine or mine & theirs:
        return characters
    family = _FAMILIES[gender]
    theirs = theirs | {r.lower() for r in characters[y].references if r.lower() not in family}
    if table is not None:
        f = female_share(characters[x].name, roles[x].description, table)
        if f is not None and (f if gender == "Male" else 1.0 - f) >= (strength or DEFAULT_STRENGTH):
            return characters
    found: list[str] = []
    keys: set[str] = set()
    quoted = False
    seen_x = seen_y = False
    for i, w in enumerate(words):
        if w in ('"', "\u201c", "\u201d"):
            quoted = (not quoted) if w == '"' else w == "\u201c"
            continue
        if w in _SENTENCE_END:
            seen_x = seen_y = False
            continue
        k = w.lower()
        seen_x = seen_x or k in mine
        seen_y = seen_y or k in theirs
        if (seen_x and not seen_y and not quoted and BOUND.get(k) == gender and k not in keys
                and (k != "her" or possessive_her(words, i))):
            keys.add(k)
            found.append(w)
    if not found:
        return characters
    bound = replace(characters[x], references=(*characters[x].references, *found))
    return tuple(bound if i == x else c for i, c in enumerate(characters))


__all__ = ["BOUND", "bind_unreferenced", "name_words"]
