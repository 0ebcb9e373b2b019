"""Which of two named characters a set of pronouns belongs to, checked against first names.

A word tagger can name both characters of a story right and still hand each one the other's
pronouns ("Sarah" with he/his, "John" with she/her): binding a pronoun to one of two antecedents
is the hardest part of the task for a small encoder. When a story has exactly two named characters,
one referred to as Male and the other as Female, and *both* first names contradict the pronouns
they were given (the name's share of female bearers in names-dataset is at least ``strength`` for
the character labelled Male and at most ``1 - strength`` for the one labelled Female), the two
reference lists are swapped. Both named, names keep their roles; only references move. The
one-sided case is treated the same way: when only one of the two named characters holds gendered
words (the other is Unspecified), its first name contradicts them and the other's first name fits them ("Samantha and
David ... David was hesitant since he made more money", tagged as Samantha's "he"), the two lists
are swapped, so the words move to the character whose name fits. In the shared case both characters
hold words of the same gender (often the very same "he"/"his", given to both), one first name fits
that gender and the other contradicts it ("Kwame" and "Danielle", both with he/his; "John ... he"
and "Mary ... him"): the character whose name contradicts loses its words of that gender, and is
left Unspecified; ``pronoun_binding.claim_unheld`` may then give it the other gender's pronouns when
nobody holds them. A wrong gender becomes a missing one, or the right one. In the third-person case the two
characters hold words of different genders, one name contradicts its own words and the other name fits its
own ("Hana" with "He" beside "Maria" with she/her, where the "He" is the teacher's: "Mr. Patel, the teacher,
asked Hana to help. He thought..."): the contradicted words are nobody's of the two, since the other
character has the words of its gender already, and the character whose name contradicts them loses them, as
in the shared case. On the gold labels of 398 two-named man-woman project, held-out and train150 stories it
fires once (a woman named Yuki, 0.18 female in the table then, which had taken the shares of names-dataset's junk
spelling "Yu-Ki": Yuki's own are 0.82 since first-name table builder 4). On the encoder's labels of the six
held-out files and train150 it changed 7 characters' genders, 6 to the gold one and one wrong to another wrong
(session 42; two of the 7 are in stories read while writing it).

In the mixed case a reference list mixes one gender's pronouns with the other gender's nouns
("Destiny": his, he, girlfriend; "Jason": she, her), so the tagger's gender for it is Unsure. The
nouns are mostly tagged beside the name they belong to ("his girlfriend, Destiny"), the pronouns are
what went to the wrong character: the check runs on the pronouns alone and moves only them.
The gold reference lists of 928 two-named project and train150 stories never mix genders, so it never
fires there; on the three held-out project files it changed 7 characters, 5 right and 2 wrong (both in
stories whose two names the encoder had already put in each other's roles), and on dev 3 stories,
each for the better (``benchmarks/RESULTS.md``, section ``labelling-layers``, session 15).

When only one of the two characters is named and its first name contradicts its own words, while
the unnamed character's words do not contradict that name, the *name* moves to the unnamed role
("Anthony Russo" tagged for the subject, who holds she/her, beside an unnamed object holding he/him):
in the power-laden Love stories where this happens, the encoder has put the name, not the words, in
the wrong role. On the gold labels of 1,041 two-role project and train150 stories it never fires.
The name moves too where the named character holds no word of either binary gender (none, or only
they/them) and the unnamed one holds words that fit the name: the stories with one named character
beside an unnamed one of singular they, where the encoder gives the name to the unnamed character and
the words to the right roles. On the gold labels of 1,218 two-role project, train150 and held-out
stories it never fires; on the encoder's labels of the six held-out project files it moved 8 names,
7 to the right role (``benchmarks/RESULTS.md``, section ``labelling-layers``, session 38).

Every case acts on first names that lean one way, so it can mislabel a character whose name leans the
other way: a woman called Alex (female share 0.07), Jordan (0.11) or Sam (0.19) whom the story calls "she"
beside a John with "he" loses her words in the third-person case, beside an Emma with "she" in the shared
case, and hands them to Emma when Emma holds none in the one-sided case. Except in the third-person case and the
mixed one (a list of one gender's pronouns beside the other gender's nouns, checked on its pronouns alone: such a
list may hold nouns of both genders, one of them the other character's, "mother" tagged beside a man's "man", and
guarded by them it kept the other's pronouns, 1 held-out story, session 79) and the swap of two characters'
lists (which only a title written in a character's own name holds back: "Ms. Alex Reed" with "Ms."), a
character that holds a noun or title of the gender in question ("Ms. Alex Reed", "his girlfriend" beside
Jordan) keeps its words (and a named one its name, in the move to the unnamed role): the tagger puts those
words beside the name they belong to, and a pronoun is the word it binds to the wrong character. Held out
(the seven held-out files pooled) this guard changes no figure; in the third-person case it cost one
character's gender (gender precision 91.47 -> 91.39), so that case has none; asking these three cases
for a stronger name (a share of the other gender of at least 0.95) cost 0.7 points (session 58). Such
names are rare among the characters of the stories we hold: of the 1,808 gold-gendered named characters of the project files,
train150 and the held-out files whose first name the table knows, 7 have a name that contradicts their
gender at ``strength`` (Yuki twice and Dee among them, by junk spellings' shares that builder 4 of the
first-name table no longer takes: Yuki is 0.82 female and Dee 0.61). With two named characters labelled with two
genders, the swap of their lists needs both names to contradict them. Two names that both lean against their
words count as two contradictions when together they are as strong as two names at ``strength`` (the odds of the names
under the exchanged genders at least (strength / (1 - strength)) squared, 16 at 0.8): "Destiny", whose
female share in the table is 0.749, with his/he beside "Jason" (0.008) with she/her (odds 370) is
swapped, as is "Sarah" with "he" beside a name of share 0.3 with "she" (231), while Sarah beside a "Kim"
(0.6, leaning the way of its "she") is not. On the gold labels of 411 two-named man-woman stories of the
project, held-out and train150 files it never fires; on the encoder's labels of the held-out files and
train150 it changed 4 characters (2 stories), all to the gold gender (session 43).
A story whose two characters really are a trans man named Sarah and a trans woman named John, or a
woman named John beside an unreferenced Sarah, would be mislabelled by it; switch the check off
(``EncoderLabeller(name_check=False)``, ``harness label --no-name-check``) for corpora where that is
expected. The female shares come from the first-name table of ``harness.identity.build``
(column ``nd_female``), which is built from the installed names-dataset, never downloaded.

Held-out check (no dev data): it swapped 4 of 150 train150 stories and 4 of 73 held-out project
stories, every swap right (``benchmarks/RESULTS.md``, section ``labelling-layers``). The one-sided
case, checked the same way later, swapped 5 more train150 stories, all right, and fired on none of the
200 stories of ``heldout/project_heldout.jsonl``. The shared case changed 2 train150 stories and 4
held-out project stories: 5 wrong genders became Unspecified (4 of them missing; one non-binary), and
in 1 train150 story, whose two names the encoder had put in each other's roles, a gender right by
accident became Unspecified.
"""

from __future__ import annotations

import re
from functools import lru_cache
import pandas as pd

from harness.errors import DataError
from harness.labelling.base import CharacterLabel, RoleSpec
from harness.labelling.words import fold_word

#: The share of female bearers at which a first name counts as strongly gendered (and 1 - it).
DEFAULT_STRENGTH = 0.8


@lru_cache(maxsize=4)
def female_shares(table: str) -> pd.Series:
    """First-name key -> share of female bearers, from a built first-name table (cached per path)."""
    try:
        raw = pd.read_parquet(table, columns=["key", "nd_female"])
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"name table {table}: cannot read columns key, nd_female ({e}); rebuild it with "
                        f"`harness names build --force`") from None
    raw = raw[raw["nd_female"].notna()]
    return pd.Series(raw["nd_female"].to_numpy(dtype="float64"), index=pd.Index(raw["key"].astype(str)))


def default_table() -> str:
    """The identity module's default first-name table, built first if it is missing (~10 s)."""
    from harness.identity.build import ensure_default_table

    return str(ensure_default_table())


@lru_cache(maxsize=65536)
def female_share(name: str | None, role: str | None, table: str) -> float | None:
    """The female share of a labelled name's first name (parsed as the identity module parses it:
    "Dr. Ana Ruiz" -> Ana, "Mr. Thompson" -> no first name), or None when unknown."""
    from harness.identity.names import first_name_of

    first = first_name_of(name, role)
    return _share_of_first(first, table) if first else None


@lru_cache(maxsize=16384)
def _share_of_first(first: str, table: str) -> float | None:
    # cached per first name: a corpus repeats a few thousand first names
    from harness.identity.build import fold_name

    v = female_shares(table).get(fold_name(first))  # the series holds no NaN
    return None if v is None else float(v)


def check_pronoun_sets(characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...], table: str,
                       strength: float = DEFAULT_STRENGTH) -> tuple[CharacterLabel, ...]:
    """``characters`` with the two reference lists swapped when both names contradict their
    pronouns, or one does and only the other name fits them; with its words of that gender taken from
    the one whose name contradicts when both hold words of one gender, or when they hold words of two genders
    and the other's name fits its own; with only the pronouns checked and
    moved when a list mixes genders; with the name moved to the unnamed role when only one character is
    named and its name contradicts its own words but not the other role's (see the module docstring);
    otherwise ``characters`` unchanged."""
    from dataclasses import replace

    from harness.identity.gender import infer_gender

    if len(characters) != 2 or not any(c.name for c in characters):
        return characters
    lexicon = default_lexicon()
    genders = [infer_gender(list(c.references), lexicon=lexicon) for c in characters]
    if not all(c.name for c in characters):
        return _name_to_the_unnamed(characters, roles, genders, table, strength)
    if "Unsure" in genders:
        return _check_mixed(characters, roles, table, strength)
    binary = [g in ("Male", "Female") for g in genders]
    one_sided = sum(binary) == 1 and "Unspecified" in genders
    shared = all(binary) and genders[0] == genders[1]
    if set(genders) != {"Male", "Female"} and not one_sided and not shared:
        return characters
    shares = [female_share(c.name, r.description, table) for c, r in zip(characters, roles)]
    if any(f is None for f in shares):
        return characters

    def contradicts(gender: str, f: float) -> bool:
        return _contradicts(gender, f, strength)  # the share of the other gender

    def fits(gender: str, f: float) -> bool:
        return _fits(gender, f, strength)

    if shared:  # both hold words of one gender: the one whose name contradicts it loses the shared words
        wrong = [contradicts(genders[0], f) for f in shares]
        right = [fits(genders[0], f) for f in shares]
        if sum(wrong) != 1 or not right[wrong.index(False)]:
            return characters
        if _holds_more_than_pronouns(characters[wrong.index(True)], genders[0], lexicon):
            return characters  # "Ms. Sam Reed" beside Emma: a title or noun is Sam's own
        return _without_words_of(characters, wrong.index(True), genders[0], lexicon)
    if one_sided:  # only one character holds gendered words: move them if only the other's name fits
        h = binary.index(True)
        swap = (contradicts(genders[h], shares[h]) and fits(genders[h], shares[1 - h])
                and not _holds_more_than_pronouns(characters[h], genders[h], lexicon))
    else:
        wrong = [contradicts(g, f) for g, f in zip(genders, shares)]
        swap = ((all(wrong) or _jointly_contradicted(genders, shares, strength))
                and not any(_titled_as(c, g, lexicon) for c, g in zip(characters, genders)))
        w = wrong.index(True) if sum(wrong) == 1 and not swap else None
        if w is not None and fits(genders[1 - w], shares[1 - w]):
            # a third person's words: the other character, whose name fits, has the words of its gender
            return _without_words_of(characters, w, genders[w], lexicon)
    if not swap:
        return characters
    a, b = characters
    return replace(a, references=b.references), replace(b, references=a.references)


def _without_words_of(characters: tuple[CharacterLabel, ...], w: int, gender: str, lexicon
                      ) -> tuple[CharacterLabel, ...]:
    """``characters`` with character ``w``'s words of ``gender`` taken out (its words of no gender stay)."""
    from dataclasses import replace

    from harness.identity.gender import infer_gender

    fixed = replace(characters[w], references=tuple(
        r for r in characters[w].references if infer_gender([r], lexicon=lexicon) != gender))
    return tuple(fixed if i == w else c for i, c in enumerate(characters))


#: The binary pronoun families; in a reference list that mixes genders, their words are what the check moves.
BINARY_PRONOUNS = {"Male": frozenset({"he", "him", "his", "himself"}),
                   "Female": frozenset({"she", "her", "hers", "herself"})}
#: Both families' words.
BINARY_PRONOUN_WORDS = BINARY_PRONOUNS["Male"] | BINARY_PRONOUNS["Female"]


def _is_pronoun(word: str) -> bool:
    """Whether a reference is a binary pronoun, folded as the story's words are (``words.fold_word``): a "he" with a
    zero-width space or soft hyphen inside, which the lexicon reads as "he", was a noun to the checks."""
    return fold_word(word) in BINARY_PRONOUN_WORDS


def _titled_as(c: CharacterLabel, gender: str, lexicon) -> bool:
    """Whether a character's name writes a title of ``gender`` that its references hold ("Ms. Alex Reed" with
    "Ms."): the swap of two characters' lists would give the other one a title of this one's name."""
    from harness.identity.gender import infer_gender

    # split at points too: a title written against the name ("Ms.Alex Reed", as the identity module reads it)
    own = {w.casefold() for w in re.split(r"[\s.]+", c.name or "") if w}
    return any(r.casefold().rstrip(".") in own and not _is_pronoun(r)
               and infer_gender([r], lexicon=lexicon) == gender for r in c.references)


def _holds_more_than_pronouns(c: CharacterLabel, gender: str, lexicon) -> bool:
    """Whether a character holds a word of ``gender`` other than a pronoun: a noun or a title ("girlfriend",
    "woman", "Ms."). The tagger marks those beside the name they belong to ("his girlfriend, Jordan", "Ms.
    Alex Reed"), where a pronoun is the word it binds to the wrong one of two characters: a woman called Alex,
    Jordan or Sam whom the story calls "Ms. Reed" or "his girlfriend" keeps her words however her name leans."""
    from harness.identity.gender import infer_gender

    return any(not _is_pronoun(r) and infer_gender([r], lexicon=lexicon) == gender
               for r in c.references)


def _check_mixed(characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...], table: str,
                 strength: float) -> tuple[CharacterLabel, ...]:
    """Two named characters, one of whose reference lists mixes one gender's pronouns with the other
    gender's nouns ("Destiny": his, he, girlfriend; "Jason": she, her). The nouns are mostly tagged
    beside the name they belong to ("his girlfriend, Destiny") and right; the pronouns are what the
    tagger bound to the wrong character. So the check runs on the pronouns alone, and only pronouns
    move: here Destiny gets she/her and keeps "girlfriend", Jason gets his/he."""
    from dataclasses import replace

    from harness.identity.gender import infer_gender

    lexicon = default_lexicon()
    only = tuple(replace(c, references=tuple(r for r in c.references if _is_pronoun(r)))
                 for c in characters)
    if "Unsure" in (infer_gender(list(c.references), lexicon=lexicon) for c in only):
        return characters
    checked = check_pronoun_sets(only, roles, table, strength)
    if checked == only:
        return characters
    return tuple(replace(c, references=tuple(r for r in c.references if not _is_pronoun(r))
                         + k.references)
                 for c, k in zip(characters, checked))


def keep_the_names_gender(characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...], table: str,
                          strength: float = DEFAULT_STRENGTH) -> tuple[CharacterLabel, ...]:
    """``characters`` with each reference list that mixes genders (Unsure) cut to the words of its
    first name's gender, where that name is strongly gendered (female share at least ``strength``, or
    at most ``1 - strength``) and the list holds words of that gender; other lists unchanged.

    Hand-labelled lists almost never mix genders (1 of the 2,206 gold characters with references in
    the project files and train150 is Unsure, and this changes none of them), so a mixed list
    nearly always holds words of someone else: the other character's relation ("brother" for
    "Sarah": she, her, brother), its title, or its pronouns. The first name tells which of the words
    are the character's own. Unlike the swaps of ``check_pronoun_sets``, it moves nothing and reads
    one character at a time: a character whose words already disagree among themselves keeps the
    subset its name agrees with; one whose words agree is never touched, whatever its name, so a
    woman called John whom the story calls "she" stays Female. Held out (the fold encoders of
    train150 on their folds, and they and the default encoder on the project's held-out files): 30
    characters changed, 29 to the gold gender; the other was Unsure before
    (``benchmarks/RESULTS.md``, section ``labelling-layers``, session 20)."""
    from dataclasses import replace

    from harness.identity.gender import explain_gender

    lexicon = default_lexicon()
    out = []
    for c, r in zip(characters, roles):
        ex = explain_gender(list(c.references), lexicon=lexicon) if c.name else None
        f = female_share(c.name, r.description, table) if ex is not None and ex.gender == "Unsure" else None
        want = None if f is None else next((g for g in ("Female", "Male") if _fits(g, f, strength)), None)
        if want is not None and any(cat == want for cat, _ in ex.matches):
            c = replace(c, references=tuple(w for w in c.references if all(
                cat == want for cat, _ in explain_gender([w], lexicon=lexicon).matches)))
        out.append(c)
    return tuple(out)


def names_agree(characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...], table: str,
                strength: float = DEFAULT_STRENGTH) -> bool:
    """Whether no named character's first name contradicts the gender of its own words (a name
    whose share is unknown contradicts nothing)."""
    from harness.identity.gender import infer_gender

    lexicon = default_lexicon()
    for c, r in zip(characters, roles):
        f = female_share(c.name, r.description, table) if c.name else None
        if f is not None and _contradicts(infer_gender(list(c.references), lexicon=lexicon), f, strength):
            return False
    return True


def _contradicts(gender: str, f: float, strength: float) -> bool:
    """Whether a first name's female share ``f`` contradicts a Male or Female label."""
    return gender in ("Male", "Female") and (f if gender == "Male" else 1.0 - f) >= strength


def _jointly_contradicted(genders: list[str], shares: list[float], strength: float) -> bool:
    """Whether two names labelled with two genders both lean the other way (each name's share of the other
    gender's bearers above one half) and, together, as strongly as two names at ``strength`` would: the
    odds of the names under the exchanged genders against their odds under the labelled ones are at
    least (strength / (1 - strength)) squared (16 at 0.8). "Jason" (0.008 female) with she/her beside
    "Destiny" (0.749) with he/his: 370."""
    c = [f if g == "Male" else 1.0 - f for g, f in zip(genders, shares)]  # each name's share of the other gender
    return (min(c) > 0.5 and c[0] * c[1] * (1.0 - strength) ** 2 >= strength ** 2 * (1.0 - c[0]) * (1.0 - c[1]))


def _fits(gender: str, f: float, strength: float) -> bool:
    """Whether a first name's female share ``f`` fits a Male or Female label (is strongly of that gender)."""
    return gender in ("Male", "Female") and (1.0 - f if gender == "Male" else f) >= strength


def _name_to_the_unnamed(characters: tuple[CharacterLabel, ...], roles: tuple[RoleSpec, ...], genders: list[str],
                         table: str, strength: float) -> tuple[CharacterLabel, ...]:
    """One named character whose first name contradicts its own words, beside an unnamed one whose
    words do not contradict it: the name moves to the unnamed role ("Anthony" tagged for the subject
    with she/her, the unnamed object with he/him). Likewise where the named character holds no word of
    either binary gender (none, or only they/them) and the unnamed one holds words that fit the name
    ("Rebecca" tagged for the defendant, who holds they/them, beside the unnamed lawyer holding her).
    The words stay, so the role that holds them keeps its gender; here the name, not the words, is what
    sits in the wrong role."""
    from dataclasses import replace

    x = 0 if characters[0].name else 1
    f = female_share(characters[x].name, roles[x].description, table)
    if f is None:
        return characters
    # the unnamed one's words, each: a list of both genders (Unsure) contradicts no name as a whole, and the name
    # went to a role holding "him" beside "she"
    theirs = {_word_gender(r) for r in characters[1 - x].references}
    contradicted = (_contradicts(genders[x], f, strength) and not any(_contradicts(g, f, strength) for g in theirs)
                    and not _holds_more_than_pronouns(characters[x], genders[x], default_lexicon()))
    # none, or only they/them: "Mx." or "xe" of the name's own character say its gender, and kept it there
    fits_the_other = (genders[x] in ("Unspecified", "Non-binary") and _fits(genders[1 - x], f, strength)
                      and all(r.casefold() in THEY_FAMILY for r in characters[x].references))
    if not (contradicted or fits_the_other):
        return characters
    out = list(characters)
    out[x], out[1 - x] = replace(characters[x], name=None), replace(characters[1 - x], name=characters[x].name)
    return tuple(out)


#: The they family: a character holding only these, or nothing, says no gender of its own.
THEY_FAMILY = frozenset({"they", "them", "their", "theirs", "themself", "themselves"})


def _word_gender(word: str) -> str:
    """The gender one reference word says (the default lexicon)."""
    from harness.identity.gender import infer_gender

    return infer_gender([word], lexicon=default_lexicon())


@lru_cache(maxsize=1)
def default_lexicon():
    """The default gender lexicon, loaded once per process."""
    from harness.identity.gender import load_lexicon

    return load_lexicon()  # the default (Table S6a): he/she families are Male/Female in every lexicon

