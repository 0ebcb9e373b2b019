"""Which character the story calls by each role's noun: the role check of two-role stories.

In power-laden Learning and Labor stories the two roles have their own nouns ("actor" and "loyal
fan", "lawyer" and "defendant"), and stories often put a role's noun right beside a character's
name: "a renowned American actor, Ethan Michaels", "a loyal fan named Lily", "Lily, a devoted fan".
The encoder mostly reads these, but where the story names the object first it can still put the
first-named character in the subject role. This check counts such appositions: a role's head noun
followed by a name ("actor, Ethan Michaels", "fan named Lily", "Manager Tom", "patient, Mr. Sam Ortiz"),
which after a comma or "called" the name must close with a stop ("When she met the actor, Lily burst into
tears" and "the fan called Ethan to apologize" are none); or a name followed by a comma and, within five
words and no preposition nor relative pronoun, the noun, in a phrase that opens with a determiner ("Lily,
a loyal fan"; not "Sarah, an admirer of the actor", "Lily, who adored the actor", the possessive of "Lily,
the actor's biggest fan", "Lily, and the actor signed", nor a name after a preposition or conjunction that
opens its clause: "To Lily, the actor was everything", "To Mr. Ethan Park, ..."). A name right after the
noun, with no comma, counts even before a verb: on the gold labels of the project's files (training and held out)
and train150 all 21 such appositions name the character of the noun's own role, 3 of them before "had" ("Nurse
Jasmine Carter had worked"); but a titled name after a lowercase noun, which no stop closes, opens a relative
clause ("the patient Dr. Patel had worried about": Dr. Patel is no patient) and does not count. Nouns inside
quotation marks are forms of address ("Thank you, Nurse Kai") and do not count. The two labels are exchanged
when the appositions tie the labelled characters to each other's roles more often than to their own.

A role's head noun is the last word of its description before "who", "in", "on", "of", "at", "with"
or "for" ("rookie in the league" -> rookie, "public relations specialist" -> specialist). Roles
whose head nouns are the same ("star student", "struggling student in math class"; every Love key)
are not told apart by this check.

Measured on gold labels (the project's training and held-out files and train150: the power-laden
stories with two named characters and two different role nouns, 116): the appositions tie each
character to its own role only in 55, to the other's only in none, both ways in 1 (2 to 1 for its own);
60 have none. Held out with the project-only encoder it exchanged 2 train150 stories: 1 fully right,
1 half right (one role's name and the other's gender right that were wrong, one gender lost). Dev,
once: gender 95.0/95.1 -> 95.1/95.2, names 96.6/96.2 -> 96.8/96.4 (it exchanged one story).
The relative pronouns and the possessive, added later, change no vote on the gold labels of the 162
such stories of the project's files (all of them now) and train150: 67 own role only, 1 both ways, 94 none.
The closed name, the determiner and the words before the name (session 57), on the gold labels of the 91
such stories of the project's training files and train150: 48 own role only, 1 both ways, 42 none before;
51, 0, 40 after; held out, the encoder's labels the same to the digit.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence

from harness.labelling.base import APOSTROPHES, NAME_TITLES, QUOTES, quoted
from harness.labelling.pronoun_binding import name_words
from harness.labelling.words import fold_word, fold_words, is_clitic, line_starts, split_words, starts_capitalised

_CUT = re.compile(r"\s(?:who|in|on|of|at|with|for)\s")
#: "\n" marks a line break (``words_with_breaks``): a title, or a prompt the story echoes ("... who helps a new
#: employee" over "Camila Torres was ..."), ends at it without a stop.
_STOPS = frozenset({",", ".", ";", ":", "!", "?", "\u2026", "\n"}) | QUOTES  # "\u2026": as "..."
#: How many words may stand between "Name," and the role noun ("Lily, a devoted young fan").
_WITHIN = 5
#: A noun after one of these is not the apposition's head ("Sarah, a devoted admirer of the actor").
_PREPOSITIONS = frozenset({"of", "for", "to", "with", "at", "in", "on", "by", "from", "about", "like", "than"})
#: After "Name," one of these opens a relative clause, not an apposition: the noun in it is the clause's
#: object ("Lily, who adored the actor"; "Ethan, whose fans waited"), not what the name is.
_RELATIVES = frozenset({"who", "whom", "whose", "which"})
#: A role noun with one of these after it modifies the apposition's head ("Lily, the actor's biggest fan").
_POSSESSIVES = frozenset({"'s", "\u2019s"})
#: What opens an apposition after "Name," ("Lily, a loyal fan", "Ethan, her favourite actor").
_DETERMINERS = frozenset({"a", "an", "the", "his", "her", "their", "my", "our", "your", "its", "this", "that"})
#: Opening a clause before "Name," one of these (or a preposition) makes the name part of a phrase of its own ("Without
#: Ethan, the fan club ...", "To Lily, the actor was everything"; not "She smiled at Lily, a devoted fan").
_SUBORDINATORS = frozenset({"when", "as", "after", "before", "since", "while", "without", "because", "if", "unlike"})


def _fronted(low: Sequence[str], s: int) -> bool:
    """Whether the name that starts at ``s`` follows a preposition or subordinator that opens its clause, with
    the name's title, if any, before it ("To Mr. Ethan Park, the actor was everything")."""
    if s > 1 and low[s - 1] == "." and low[s - 2] in NAME_TITLES:
        s -= 2
    elif s > 0 and low[s - 1] in NAME_TITLES:
        s -= 1
    return s > 0 and low[s - 1] in _PREPOSITIONS | _SUBORDINATORS and (s == 1 or low[s - 2] in _STOPS)


def _in_fronted_clause(low: Sequence[str], s: int) -> bool:
    """Whether the words before ``s`` since the last stop open with a preposition or subordinator: the name may
    end that clause, and the noun after its comma start the main one ("When Ethan met Lily, the actor smiled";
    "When she noticed Jack, a struggling student, floundering" is an apposition, closed by its comma)."""
    k = s
    while k > 0 and low[k - 1] not in _STOPS:
        k -= 1
    return k < s and low[k] in _PREPOSITIONS | _SUBORDINATORS


def _indefinite(low: Sequence[str], i: int) -> bool:
    """Whether the noun at ``i`` has "a", "an" or "one" for its determiner, within its phrase ("a loyal fan
    called Lily"; not "the fan called Ethan")."""
    k = i - 1
    while k >= 0 and i - k <= _WITHIN and low[k] not in _STOPS:
        if low[k] in ("a", "an", "one"):
            return True
        if low[k] in _DETERMINERS:
            return False
        k -= 1
    return False


def _after_title(low: Sequence[str], j: int) -> int:
    """The index after a title (and its point) at ``j``, else ``j``: the name of "the patient, Mr. Sam Ortiz"
    starts after "Mr."."""
    if j < len(low) and low[j] in NAME_TITLES:
        j += 1
        j += j < len(low) and low[j] == "."
    return j


def head_noun(description: str) -> str | None:
    """The role's head noun: the last word of its description before a preposition or "who"."""
    words = _CUT.split(" " + description.lower() + " ")[0].split()
    return words[-1] if words else None


def words_with_breaks(text: str, words: Sequence[tuple[str, int, int]], starts: Collection[int] | None = None
                      ) -> list[str]:
    """A story's words (``encoder.split_words``: word, start, end) with a "\n" word wherever a line break
    stands between two of them (``words.line_starts``, or ``starts`` where the caller has them already), which
    no apposition crosses ("... a new employee" ending an echoed prompt, "Camila Torres" starting the story)."""
    starts = frozenset(line_starts(text, words) if starts is None else starts)
    out: list[str] = []
    for k, (w, _, _) in enumerate(words):
        if k in starts:
            out.append("\n")
        out.append(w)
    return out


def appositions(words: Sequence[str], descriptions: Sequence[str], names: Sequence[str | None]) -> Counter | None:
    """Counter of (role index, character index) over the appositions that tie a role's head noun to a
    character's name (see the module docstring), in a story given as its words and punctuation in
    order (``encoder.split_words``); None when the two roles share a head noun or lack one, or the
    names are missing or share a word."""
    heads = [head_noun(d) for d in descriptions]
    owned = [name_words(n) for n in names]
    if len(heads) != 2 or None in heads or heads[0] == heads[1] or not all(owned) or owned[0] & owned[1]:
        return None
    # every word of each name as written, its lowercase particles and hyphens too ("Omar al-Rashid", "Leonardo da
    # Vinci"), which a run of the name's words goes over
    spelled = [{fold_word(w) for w, _, _ in split_words(n) if w not in (".", ",")} for n in names]
    low = fold_words(words)  # as name_words folds a name: "O’Brien" is "o'brien"
    in_quote = quoted(words)
    out: Counter = Counter()

    def named(i: int) -> int | None:
        if not 0 <= i < len(low):
            return None
        # split_words splits "O'Brien" into "O" and "'Brien": the name's last word before a comma is "'brien"
        ws = {low[i]}
        if low[i][:1] in APOSTROPHES and not is_clitic(low[i][1:]) and i > 0:
            ws |= {low[i - 1], low[i - 1] + low[i]}
        elif i + 1 < len(low) and low[i + 1][:1] in APOSTROPHES and not is_clitic(low[i + 1][1:]):
            ws.add(low[i] + low[i + 1])
        if not starts_capitalised(words[i - 1] if low[i][:1] in APOSTROPHES and i > 0 else words[i]):
            return None  # "lost all hope, a feeling the actor knew": a lowercase word is no Hope
        hits = [c for c in (0, 1) if not ws.isdisjoint(owned[c])]
        return hits[0] if len(hits) == 1 else None

    def in_name(k: int, c: int) -> bool:
        """Whether word k is one of character c's name words or a word of its name as written, or the "'Brien" of
        "O'Brien", or the point of a title or an initial inside the name ("Dr. Ana", "J. Cole"). Any point of a name
        written with one was read as part of it, so a run went over a sentence's end ("a lawyer, Dr. Ana Ruiz. She")
        and lost the apposition."""
        if low[k] == ".":
            return (0 < k < len(low) - 1 and low[k - 1] in spelled[c] and (len(low[k - 1]) == 1 or low[k - 1] in
                    NAME_TITLES) and (low[k + 1] in owned[c] or low[k + 1] in spelled[c]))
        return low[k] in owned[c] or low[k] in spelled[c] or (low[k][:1] in APOSTROPHES and low[k][1:] != "s")

    def name_end(j: int, c: int) -> int:
        """The index after the run of character c's name words that starts at j."""
        while j < len(low) and in_name(j, c):
            j += 1
        return j

    def name_start(k: int, c: int) -> int:
        """The index of the first word of the run of character c's name words that ends at k."""
        while k > 0 and in_name(k - 1, c):
            k -= 1
        return k

    for i, t in enumerate(low):
        role = next((r for r in (0, 1) if t in (heads[r], heads[r] + "s")), None)
        if role is None or in_quote[i]:
            continue
        comma = i + 1 < len(low) and low[i + 1] == ","
        j = i + 1 + comma
        marker = low[j] if j < len(low) and low[j] in ("named", "called") else None
        j += marker is not None
        titled = _after_title(low, j) > j
        j = _after_title(low, j)
        c = named(j)  # "actor, Ethan Michaels", "a fan named Lily", "Manager Tom", "patient, Mr. Sam Ortiz"
        if marker == "called" and (titled or not _indefinite(low, i)):
            c = None  # the verb: "the patient called Dr. Patel.", "the doctor called Sam." (not "a fan called Lily")
        # a comma or "called" opens an apposition only where the name closes it ("When she met the actor,
        # Lily burst into tears", "the fan called Ethan to apologize" open none); "named" always does
        closed = c is not None and ((e := name_end(j, c)) >= len(low) or low[e] in _STOPS)
        # with no comma nor marker, a title after a lowercase noun starts the subject of a relative clause unless a
        # stop closes the name ("the patient Dr. Patel had worried about"; not "Nurse Jasmine Carter had worked")
        relative = titled and not comma and not closed and not words[i][:1].isupper()
        if c is not None and (closed or marker == "named" or (not comma and marker is None and not relative)):
            out[(role, c)] += 1
        if i + 1 < len(low) and (low[i + 1] in _POSSESSIVES or (low[i + 1] in APOSTROPHES and t.endswith("s"))):
            continue  # "Lily, the actor's biggest fan": the fan is Lily, the actor someone else
        k = i - 1
        while (k >= 0 and i - k <= _WITHIN and low[k] not in _STOPS and low[k] not in _PREPOSITIONS
               and low[k] not in _RELATIVES):
            k -= 1
        c = named(k - 1) if k >= 1 and low[k] == "," else None  # "Lily, a devoted fan"
        # the noun's phrase opens with a determiner ("Lily, and the actor signed" is another clause), and no
        # preposition or conjunction stands before the name ("To Lily, the actor was everything")
        if c is not None and low[k + 1] in _DETERMINERS and not _fronted(low, name_start(k - 1, c)) and (
                not _in_fronted_clause(low, name_start(k - 1, c)) or i + 1 >= len(low) or low[i + 1] in _STOPS):
            out[(role, c)] += 1
    return out


def roles_exchanged(words: Sequence[str], descriptions: Sequence[str], names: Sequence[str | None]) -> bool:
    """Whether the two labelled characters (``names``, in role order) should be exchanged: the
    appositions tie them to each other's roles more often than to their own."""
    votes = appositions(words, descriptions, names)
    if not votes:
        return False
    return votes[(0, 1)] + votes[(1, 0)] > votes[(0, 0)] + votes[(1, 1)]


__all__ = ["appositions", "head_noun", "roles_exchanged", "words_with_breaks"]
