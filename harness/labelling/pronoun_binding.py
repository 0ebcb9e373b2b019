"""Pronouns that their sentence binds to a named character the tagger left without any.

The encoder tags reference words by type ("his" for the subject or not), and in a story about two
characters of one gender it often gives the shared "he"/"his" to one of them only: "chef Paul ...
the student, Max ... Paul finally spoke, his voice brimming" comes back with Paul unreferenced, and
a character the story calls "he" is labelled Unspecified.

The rule reads where each pronoun stands. In a story with two named characters, one holding words of
one binary gender (the he or she family) and the other (X) no gendered word at all, an occurrence of
that gender's subject, possessive or reflexive pronoun (he, his, himself; she, her as a determiner,
herself), outside quotation marks, in a sentence where X's name has already occurred and nothing of
the other character (a word of its name, or one of its references other than that gender's pronouns, "him"
among them) has, is bound to X: "Paul finally spoke, his voice ..." gives Paul "his". Object pronouns are never bound
(in "Mei thanked her" the object is not the subject of its clause), and a first name that contradicts
the gender (``name_gender``: its share of female bearers at least ``strength`` for "he", at most
``1 - strength`` for "she") vetoes the binding when a name table is given.

Checked on gold references first: in the project's same-gender named pairs, with one character's
pronouns removed, the pronouns it binds back are among that character's gold references in 222 of 230
bindings (the training files; 190 of 195 on the held-out sets), and they restore the character's
gender in 170 of 284 cases. Held out with the project-only encoder (section ``labelling-layers`` of
``benchmarks/RESULTS.md``): it changed 11 characters of the 450 held-out stories, 9 right
(Unspecified -> the gold gender), 2 wrong (a pronoun of the other character in a
participial clause: "Sara nodded, squeezing her hand"; "spotting his obvious potential"). The
possessive of a hand that a verb of touching takes ("squeezing her hand", ``touched_possessive``) is
since left to the other character: with the shipped encoder it changed 3 characters of the held-out
files and train150, 2 to their gold gender (train150's annotators leave such a "her" off both friends)
and 1 from one wrong gender to another, and none the other way (session 43).

A second rule, ``claim_unheld``, takes the pronouns of a gender that no character holds: when the
other character holds one binary gender's words, the story uses the other gender's pronouns outside
quotes, nobody holds any of them, and the unreferenced character's first name fits that gender
(``name_gender``: its share of bearers of that gender at least ``strength``), those pronouns are its
own ("Kayla ... Her best friend, Brian Walsh ... He gave it to Kayla", with Brian left unreferenced).
It needs a first-name table, so it runs with the name check only. On gold references: of 384
characters of the training files whose pronouns were removed beside a character of the other
gender, it restored 268 (575 words among the gold references, 2 not); of the 37 named characters the
gold leaves unreferenced beside a gendered one, it gave words to none (held-out sets: 266 of 352,
554 and 1; 0 of 28). Held out with the project-only encoder it changed 10 characters, all right.
Beside a non-binary character (singular they, neopronouns) the unreferenced character takes the family
its name fits, if nobody holds it ("Sage ... their jacket ... Nadia had already set her card down"). On
gold references: 22 of 24 characters of the training files and train150 whose pronouns were removed
beside a non-binary one were restored (20 of 22 on the held-out files), with no word outside the gold
references, and neither of the 2 the gold leaves unreferenced there was given one (session 42).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from functools import lru_cache

from harness.identity.gender import infer_gender, load_lexicon
from harness.labelling.base import (ABBREVIATED_TITLES, APOSTROPHES, NAME_TITLES, QUOTES, CharacterLabel, RoleSpec,
                                     quoted)
from harness.labelling.name_gender import (BINARY_PRONOUN_WORDS, BINARY_PRONOUNS, DEFAULT_STRENGTH, default_lexicon,
                                          female_share)
from harness.labelling.role_agent import verb_forms
from harness.labelling.words import fold_word, is_clitic, split_words, starts_capitalised

#: The pronouns it binds, by the gender they carry ("her" only where it is a determiner).
BOUND = {"he": "Male", "his": "Male", "himself": "Male", "she": "Female", "her": "Female", "herself": "Female"}
#: Words that open a sentence after a capital letter's point, which is then no initial's ("plan B. The ...").
_SENTENCE_OPENERS = frozenset({"i", "it", "the", "we", "you"})
_SENTENCE_END = frozenset({".", "!", "?", "\u2026"})


def name_words(name: str | None) -> frozenset[str]:
    """A name's capitalised words other than titles, case-folded ("Dr. Ana Ruiz" -> {"ana", "ruiz"}),
    split as the story's words are (``split_words``), so that they can be compared with them (``name_key``):
    "O'Brien" is the story's words "O" and "'Brien", joined again (name word "o'brien": as "o", Sean O'Brien
    and Liam O'Connor shared a word, and Father O'Malley was Sean), a decomposed "José" or "प्रिया" one word."""
    if not name:
        return frozenset()
    ws = [w for w, _, _ in split_words(name)]
    return frozenset(name_key(ws, i) for i, w in enumerate(ws)
                     if starts_capitalised(w) and w.lower() not in NAME_TITLES)


def name_key(words: Sequence[str], i: int) -> str:
    """Word ``i`` folded (``fold_word``) as ``name_words`` keys it: with the next word when that is the rest of the
    name after an apostrophe ("O", "'Brien" -> "o'brien", "O", "’Brien" too; not a clitic: "Tom", "'d" -> "tom",
    "Paul'll" is Paul)."""
    w = fold_word(words[i])
    if i + 1 < len(words) and words[i + 1][:1] in APOSTROPHES and not is_clitic(words[i + 1][1:]):
        return w + fold_word(words[i + 1])
    return w


def _seen_as(name: str | None) -> frozenset[str]:
    """The words that show a character in a sentence: its name's words, or, for a name of titles alone
    ("Coach", which the decoder keeps where a story names a character no other way), those titles."""
    return name_words(name) or frozenset(w.lower() for w, _, _ in split_words(name or "") if starts_capitalised(w))


def bind_unreferenced(words: Sequence[str], characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...],
                      possessive_her: Callable[[Sequence[str], int], bool], table: str | None = None,
                      strength: float | None = None, line_starts: Collection[int] = ()) -> tuple[CharacterLabel, ...]:
    """``characters`` with the pronouns their sentences bind to an unreferenced named character added
    to its references (see the module docstring); otherwise ``characters`` unchanged.

    words: the story's words and punctuation in order (``encoder.split_words``);
    possessive_her(words, i): whether ``words[i]`` ("her") is a determiner;
    table, strength: a first-name table and the share at which a name contradicts a gender (the veto),
    as ``name_gender.check_pronoun_sets`` takes them; no veto without a table;
    line_starts: the indices of the words that start a line (``words.line_starts``), where a quotation
    left open ends (``base.quoted``).
    """
    found_pair = _unreferenced_beside_gendered(characters)
    if found_pair is None:
        return characters
    x, gender = found_pair
    y = 1 - x
    mine, theirs = name_words(characters[x].name), _seen_as(characters[y].name)
    if not mine or mine & theirs:
        return characters
    family = BINARY_PRONOUNS[gender]
    their_refs = {r.lower() for r in characters[y].references if r.lower() not in family}
    if table is not None:
        f = female_share(characters[x].name, roles[x].description, table)
        if f is not None and (f if gender == "Male" else 1.0 - f) >= (strength or DEFAULT_STRENGTH):
            return characters
    found = _bound_in_sentences(words, line_starts, mine, theirs, their_refs,
                                lambda i, k: BOUND.get(k) == gender and (k != "her" or possessive_her(words, i)))
    return _with_words(characters, x, found)


#: The singular "they" forms that ``bind_singular_they`` binds (not "them", "theirs", "themselves").
SINGULAR_THEY = frozenset({"they", "their", "themself"})


#: The share of one gender's bearers at which a first name vetoes a singular "they": higher than the
#: name checks' strength, since names often given to non-binary characters are far from even in the
#: table (Alex 0.07 female, Jordan 0.11, Sam 0.19) while "Samantha" is 0.99.
THEY_VETO_STRENGTH = 0.95


def bind_singular_they(words: Sequence[str], characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...],
                       table: str | None = None, strength: float = THEY_VETO_STRENGTH,
                       line_starts: Collection[int] = ()) -> tuple[CharacterLabel, ...]:
    """``characters`` with the singular "they" of a named character the tagger left without gendered
    words, beside a named character of a binary gender: an occurrence of "they", "their" or "themself",
    outside quotation marks, in a sentence where the unreferenced character's name has already
    occurred and nothing of the other character (a word of its name, or one of its references) has,
    is bound to it ("Riley adjusted their glasses"). A "they" for the pair mostly shares its sentence
    with the other character's name, or has no name before it in its sentence; where it does not
    ("Samantha suggested they split all expenses"), the character is usually not non-binary, so with a
    name table a first name that nearly all its bearers share with one gender (``strength``, 0.95)
    vetoes the binding, as a contradicting name does in ``bind_unreferenced``.

    On gold references (the project's files and train150: two named characters, one Male or Female,
    the other Non-binary with its references removed, or Unspecified): without the veto it gives 34 of
    45 Non-binary characters words, all among their gold references, and 2 of 160 Unspecified
    characters a "they"; with it at 0.95, 34 of 45 and none of 160 (at the name checks' 0.8, only 21
    of 45). Section ``labelling-layers`` of ``benchmarks/RESULTS.md``, session 20."""
    found_pair = _unreferenced_beside_gendered(characters)
    if found_pair is None:
        return characters
    x = found_pair[0]
    if table is not None:
        f = female_share(characters[x].name, roles[x].description, table)
        if f is not None and max(f, 1.0 - f) >= strength:
            return characters
    mine, theirs = name_words(characters[x].name), _seen_as(characters[1 - x].name)
    if not mine or mine & theirs:
        return characters
    their_refs = {r.lower() for r in characters[1 - x].references}
    return _with_words(characters, x, _bound_in_sentences(words, line_starts, mine, theirs, their_refs,
                                                          lambda i, k: k in SINGULAR_THEY))


def _bound_in_sentences(words: Sequence[str], line_starts: Collection[int], mine: frozenset[str] | set[str],
                        theirs: frozenset[str] | set[str], their_refs: Collection[str],
                        binds: Callable[[int, str], bool]) -> list[str]:
    """The words (outside quotes) that ``binds(index, lower-cased word)`` accepts, in sentences where a
    word of ``mine`` (capitalised) has occurred before them and no word of ``theirs`` (the other character's name,
    capitalised: a "will" or "drew" is no Will or Drew) nor of ``their_refs`` (its references) has, both outside
    quotes (a word
    inside one names whom a character speaks to or of: '"Knife finesse, my lad," Hank critiqued, his eyes
    narrowed' binds "his" to Hank though "lad" is Leo's; with the project-only encoder on train150 this
    gave 1 character its gold gender, changed nothing on the held-out files, and left the gold-label checks
    of the module docstring as they were, session 43). A possessive of a touched
    hand (``touched_possessive``) is the other character's: it is not bound, and it counts as the other
    character's occurrence for the rest of its sentence."""
    found: list[str] = []
    seen_x = seen_y = False
    line = _line_of(len(words), line_starts)
    last = 0  # the line of the word before
    for i, w, in_quote in _marked(words, line_starts):
        if line[i] != last:  # a line ends its sentence ("**Waiting for Kai**" over "She checked her phone")
            seen_x = seen_y = False
            last = line[i]
        if w in _SENTENCE_END:
            if not _abbreviation_point(words, i):
                seen_x = seen_y = False
            continue
        k = w.lower()
        if in_quote:  # a name in what someone says is whom it is said to or of, not who acts ('"My lad," Hank said, his')
            continue
        key = name_key(words, i) if starts_capitalised(w) else None  # "Drew", not "He drew his sword"
        seen_x = seen_x or key in mine
        seen_y = seen_y or key in theirs or k in their_refs
        if seen_x and not seen_y and binds(i, k):
            if touched_possessive(words, i):
                seen_y = True
            else:
                found.append(w)
    return found


def _line_of(n: int, line_starts: Collection[int]) -> list[int]:
    """For each of ``n`` words, the number of its line (0 for the first)."""
    starts = frozenset(line_starts)
    out, line = [], 0
    for i in range(n):
        line += i in starts
        out.append(line)
    return out


#: Verbs of touching another person's hand, arm or face ("squeezed her hand", "took his arm").
TOUCHING = frozenset({"squeeze", "hold", "take", "grab", "grip", "kiss", "pat", "touch", "stroke", "shake", "caress",
                      "grasp", "clutch"})  # not "press", "rub", "clasp", "wring": one's own hands, mostly
#: What such a verb touches ("squeezing her hand"; not "shook his head", which is a gesture of one's own).
TOUCHED = frozenset({"hand", "hands", "arm", "arms", "shoulder", "shoulders", "cheek", "cheeks", "face", "fingers"})


@lru_cache(maxsize=1)
def _touching_forms() -> frozenset[str]:
    return frozenset(f for lemma in TOUCHING for f in verb_forms(lemma))


def touched_possessive(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` is the possessive of a hand (arm, shoulder, cheek, face) that a verb of touching
    takes as its object, with at most one word between ("Sara nodded, squeezing her hand"; "took his
    trembling hand"): the hand is nearly always the other person's, not the toucher's. On the gold labels
    of the project's files and train150 (two named characters, one of them named earlier in the
    sentence), the other character holds such a possessive in 21 cases, the named one in 1 (the named one
    was the object: "sits with Mrs. Alvarez and holds her hand"), both in 2."""
    if i == 0 or words[i - 1].lower() not in _touching_forms():
        return False
    after = [w.lower() for w in words[i + 1:i + 3]]
    return bool(after) and (after[0] in TOUCHED or (len(after) == 2 and after[0] != "own" and after[1] in TOUCHED))


def _abbreviation_point(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` is the point of an abbreviated title or an initial ("Dr. Ruiz", "J. Cole"), which
    ends no sentence; the point after a title written in full does ("Jordan went to see the doctor. He said")."""
    if words[i] != "." or i == 0:
        return False
    prev = words[i - 1]
    nxt = words[i + 1].lower() if i + 1 < len(words) else ""
    if len(prev) == 1 and (nxt in BOUND or nxt in SINGULAR_THEY or nxt in _SENTENCE_OPENERS
                           or (i > 1 and words[i - 2].lower() in ("a", "an"))):
        return False  # "gave the test an A. He", "a flight to the U.S. She": a sentence's end, not "J. Cole"
    return prev[:1].isupper() and (prev.lower() in ABBREVIATED_TITLES or len(prev) == 1)  # not "one last rep."


def claim_unheld(words: Sequence[str], characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...],
                 table: str, strength: float | None = None, line_starts: Collection[int] = ()
                 ) -> tuple[CharacterLabel, ...]:
    """``characters`` with the pronouns of a gender nobody holds given to the unreferenced named
    character whose first name fits that gender (the second rule of the module docstring), beside a
    character of the other binary gender or a non-binary one; otherwise ``characters`` unchanged."""
    found_pair = _unreferenced_beside_gendered(characters, non_binary=True)
    if found_pair is None:
        return characters
    x, other = found_pair
    f = female_share(characters[x].name, roles[x].description, table)
    if f is None:
        return characters
    if other == "Non-binary":  # beside a singular they (or neopronouns) either family may be X's: its name's
        gender = "Female" if f > 0.5 else "Male"
    else:
        gender = "Female" if other == "Male" else "Male"
    family = BINARY_PRONOUNS[gender]
    if any(r.lower() in family for c in characters for r in c.references):
        return characters
    if (f if gender == "Female" else 1.0 - f) < (strength or DEFAULT_STRENGTH):
        return characters
    return _with_words(characters, x, [w for _, w, in_quote in _marked(words, line_starts)
                                       if not in_quote and w.lower() in family])


def _unreferenced_beside_gendered(characters: tuple[CharacterLabel, ...], non_binary: bool = False
                                  ) -> tuple[int, str] | None:
    """For two named characters, one without any gendered word and the other Male or Female by its
    words (by its pronouns where its words mix genders), or Non-binary where ``non_binary``: (the index of
    the first, the gender of the other); else None."""
    if len(characters) != 2 or not all(c.name for c in characters):
        return None
    lexicon = default_lexicon()
    genders = [infer_gender(list(c.references), lexicon=lexicon) for c in characters]
    # neopronouns ("xe", "xyr") are gendered words too, which S6a lacks (a "themself" alone stays unreferenced)
    genders = [g if g != "Unspecified" or infer_gender([r for r in c.references if r.lower() not in SINGULAR_THEY],
                                                      lexicon=_lexicon_with_neopronouns()) != "Non-binary"
               else "Non-binary" for g, c in zip(genders, characters)]
    if "Unspecified" not in genders:
        return None
    x = genders.index("Unspecified")
    other = genders[1 - x]
    if other == "Unsure":  # its words mix genders, mostly a relation's noun ("Leah": she, her, boyfriend): its
        # pronouns say its gender, as in name_gender's mixed case
        other = infer_gender([r for r in characters[1 - x].references if r.lower() in BINARY_PRONOUN_WORDS],
                             lexicon=lexicon)
    return (x, other) if other in BINARY_PRONOUNS or (non_binary and other == "Non-binary") else None


@lru_cache(maxsize=1)
def _lexicon_with_neopronouns():
    """The lexicon with the neopronoun sets (S6a has none: "xe", "xyr" were no gendered words)."""
    return load_lexicon("neopronouns")


def _marked(words: Sequence[str], line_starts: Collection[int]) -> list[tuple[int, str, bool]]:
    """(index, word, inside quotation marks) for each word other than the quotation marks; a quotation left
    open ends with its line (``base.quoted``)."""
    return [(i, w, q) for i, (w, q) in enumerate(zip(words, quoted(words, line_starts))) if w not in QUOTES]


def _with_words(characters: tuple[CharacterLabel, ...], x: int, found: Sequence[str]) -> tuple[CharacterLabel, ...]:
    """``characters`` with the words of ``found`` (first form of each, case-folded) that character x
    does not hold yet added to it."""
    first: dict[str, str] = {r.lower(): "" for r in characters[x].references}
    for w in found:
        first.setdefault(w.lower(), w)
    first = {k: w for k, w in first.items() if w}
    if not first:
        return characters
    bound = replace(characters[x], references=(*characters[x].references, *first.values()))
    return tuple(bound if i == x else c for i, c in enumerate(characters))


__all__ = ["BOUND", "SINGULAR_THEY", "THEY_VETO_STRENGTH", "TOUCHED", "TOUCHING", "bind_singular_they",
           "bind_unreferenced", "claim_unheld", "name_key", "name_words", "touched_possessive"]
