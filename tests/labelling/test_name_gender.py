"""The two-character pronoun check against first-name gender shares (harness.labelling.name_gender)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.errors import DataError
from harness.labelling.base import CharacterLabel, RoleSpec, StoryInput
from harness.labelling.decoder import WordDecoder, keep_the_unshared_gender
from harness.labelling.name_gender import (check_pronoun_sets, female_share, female_shares, keep_the_names_gender,
                                          names_agree)

ROLES = (RoleSpec("subject", "first romantic partner"), RoleSpec("object", "second romantic partner"))
SHARES = {"SARAH": 0.99, "JOHN": 0.02, "JORDAN": 0.3, "KIM": 0.6, "ANA": 0.8, "TOM": 0.2, "NEMO": np.nan,
          "ALEX": 0.07}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("names") / "first_names.parquet"
    pd.DataFrame({"key": list(SHARES), "nd_female": list(SHARES.values())}).to_parquet(path)
    return str(path)


def chars(a, a_refs, b, b_refs):
    return CharacterLabel("subject", a, tuple(a_refs)), CharacterLabel("object", b, tuple(b_refs))


def refs(out):
    return [c.references for c in out]


def test_two_names_that_together_contradict_their_pronouns_swap_the_references(table):
    """Jordan (0.3 female) with "she" is no contradiction alone, but beside Sarah (0.99) with "he" the
    names' odds under the exchanged genders are 0.99 * 0.7 / (0.01 * 0.3) = 231 times those under the
    labelled ones, more than two names at the strength give (0.8 * 0.8 / (0.2 * 0.2) = 16): "Destiny"
    (0.749 female) with his/he beside "Jason" (0.008) with she/her was left so."""
    assert refs(check_pronoun_sets(chars("Sarah", ["he"], "Jordan", ["she"]), ROLES, table)) == [("she",), ("he",)]
    # a mixed list: only its pronouns are checked and moved
    out = check_pronoun_sets(chars("Jordan", ["his", "girlfriend"], "Sarah", ["she"]), ROLES, table)
    assert out == chars("Jordan", ["his", "girlfriend"], "Sarah", ["she"])  # Jordan with "his" fits: nothing
    out = check_pronoun_sets(chars("Sarah", ["his", "girlfriend"], "Jordan", ["she", "her"]), ROLES, table)
    assert refs(out) == [("girlfriend", "she", "her"), ("his",)]


def test_both_names_contradict_their_pronouns_swaps_the_references(table):
    out = check_pronoun_sets(chars("Sarah", ["He"], "John", ["her", "she"]), ROLES, table)
    assert [c.name for c in out] == ["Sarah", "John"]  # names keep their roles
    assert refs(out) == [("her", "she"), ("He",)]
    # titles and surnames are parsed the way the identity module parses them
    out = check_pronoun_sets(chars("Dr. Sarah Lee", ["He"], "John Park", ["she"]), ROLES, table)
    assert refs(out) == [("she",), ("He",)]


@pytest.mark.parametrize("a, a_refs, b, b_refs", [
    ("Sarah", ["she"], "John", ["he"]),         # agrees already
    ("Jordan", ["she"], "John", ["he"]),        # agrees
    ("Sarah", ["he"], "Kim", ["she"]),          # Kim is not strongly gendered: one contradiction only
    ("Ana", ["he"], "Jordan", ["she"]),         # Ana (0.8) and Jordan (0.3) together: odds of 9.3, under 16
    ("Sarah", ["he"], "Jordan", ["they"]),      # Jordan is Non-binary
    ("John", ["he"], "Tom", ["he", "his"]),     # a same-gender pair: both names fit, the words may be shared
    ("Sarah", ["he"], "Kim", ["he"]),           # shared, but Kim is not strongly gendered
    ("Sarah", ["he"], "Ana", ["he"]),           # shared, and both names contradict: no name to give them to
    ("Sarah", ["he"], "Kim", []),               # one-sided, but Kim is not strongly gendered
    ("Sarah", ["he"], "Ana", []),               # one-sided, but Ana's name does not fit "he" either
    ("Jordan", ["he"], "John", []),             # one-sided, but Jordan (0.3 female) with "he" is no contradiction
    ("Sarah", ["he"], "John", ["they"]),        # the other character is Non-binary, not unreferenced
    ("Sarah", ["he"], None, ["him"]),           # the unnamed character's words contradict Sarah too
    ("Jordan", ["he"], None, ["she"]),          # Jordan (0.3 female) with "he" is no contradiction
    ("Sarah", ["she"], None, ["he"]),           # agrees already
    (None, ["he"], None, ["she"]),              # nobody named
    ("Sarah", ["he"], "John", ["she", "he"]),   # Unsure
    ("Sarah", ["he"], "Nemo", ["she"]),         # names-dataset has no gender shares for Nemo
    ("Sarah", ["he"], "Xavi", ["she"]),         # not in the table
    ("Sarah", ["he"], "Mr. John", ["she"]),     # an honorific's next token is a last name: no first name
])
def test_no_swap(table, a, a_refs, b, b_refs):
    given = chars(a, a_refs, b, b_refs)
    assert check_pronoun_sets(given, ROLES, table) == given


@pytest.mark.parametrize("a, a_refs, b, b_refs, want", [
    ("Sarah", ["he"], "John", [], [(), ("he",)]),       # "Sarah ... John ... since he made more money"
    ("Sarah", [], "John", ["she", "her"], [("she", "her"), ()]),
    ("Sarah", ["his", "him"], "Tom", ["the"], [("the",), ("his", "him")]),  # non-gendered words move too
])
def test_one_sided_contradiction_moves_the_references(table, a, a_refs, b, b_refs, want):
    # only one character holds gendered words; its name contradicts them and the other's name fits them
    out = check_pronoun_sets(chars(a, a_refs, b, b_refs), ROLES, table)
    assert [c.name for c in out] == [a, b]  # names keep their roles
    assert refs(out) == want


@pytest.mark.parametrize("a, a_refs, b, b_refs, want", [
    ("Sarah", ["he"], "John", ["he"], [(), ("he",)]),                       # "Kwame ... Danielle", both he/his
    ("John", ["he", "his"], "Sarah", ["He", "his"], [("he", "his"), ()]),   # compared case-insensitively
    ("Sarah", ["he", "him"], "John", ["he"], [(), ("he",)]),                # all its words of that gender go
    ("Sarah", ["him"], "John", ["he", "his"], [(), ("he", "his")]),         # shared gender, no shared word
    ("Sarah", ["him", "friend"], "John", ["he"], [("friend",), ("he",)]),   # a word of no gender stays
    ("John", ["she"], "Ana", ["she", "her"], [(), ("she", "her")]),
    # a pronoun with a zero-width space or soft hyphen inside (the splitter keeps them in the word, the lexicon reads
    # "he") was a noun to the check, which then left it with Sarah
    ("Sarah", ["he\u200b"], "John", ["he"], [(), ("he",)]), ("Sarah", ["hi\u00ads"], "John", ["he"], [(), ("he",)]),
])
def test_shared_words_leave_the_character_whose_name_contradicts_them(table, a, a_refs, b, b_refs, want):
    # both characters hold words of one gender; one name fits it, the other contradicts it
    out = check_pronoun_sets(chars(a, a_refs, b, b_refs), ROLES, table)
    assert [c.name for c in out] == [a, b]
    assert refs(out) == want


@pytest.mark.parametrize("a, a_refs, b, b_refs, want", [
    ("Sarah", ["He"], "Ana", ["she", "her"], [(), ("she", "her")]),  # "Mr. Patel ... He" given to Hana
    ("John", ["her", "friend"], "Tom", ["his"], [("friend",), ("his",)]),  # a word of no gender stays
])
def test_words_a_name_contradicts_leave_it_where_the_other_name_fits_its_own(table, a, a_refs, b, b_refs, want):
    # one character holds words of each gender; one name contradicts its words, the other fits its own: the
    # contradicted words are a third person's ("Mr. Patel, the teacher, asked Hana to help. He thought..."), not
    # the other character's, who has the words of its gender already
    out = check_pronoun_sets(chars(a, a_refs, b, b_refs), ROLES, table)
    assert [c.name for c in out] == [a, b]
    assert refs(out) == want


@pytest.mark.parametrize("a, a_refs, b, b_refs, want", [
    # "Destiny" with his/he/girlfriend, "Jason" with she/her: only the pronouns move
    ("Sarah", ["His", "he", "girlfriend"], "John", ["she", "her"], [("girlfriend", "she", "her"), ("His", "he")]),
    ("John", ["her", "boyfriend"], "Sarah", ["his"], [("boyfriend", "his"), ("her",)]),
    # shared: "David" with she/her/boyfriend beside a woman who holds she/her
    ("John", ["she", "her", "boyfriend"], "Sarah", ["she", "her"], [("boyfriend",), ("she", "her")]),
    # the pronouns alone leave nothing to move, or still mix, or the names do not decide: unchanged
    ("Sarah", ["she", "boyfriend"], "John", ["he"], None),
    ("Sarah", ["he", "she", "girl"], "John", ["him"], None),
    ("Jordan", ["his", "girlfriend"], "Kim", ["she"], None),
])
def test_a_mixed_list_moves_only_its_pronouns(table, a, a_refs, b, b_refs, want):
    # a reference list mixing one gender's pronouns with the other's nouns (gender Unsure): the nouns sit
    # beside the name they belong to, so the check runs on the pronouns alone and moves only those
    given = chars(a, a_refs, b, b_refs)
    out = check_pronoun_sets(given, ROLES, table)
    assert [c.name for c in out] == [a, b]
    assert refs(out) == (refs(given) if want is None else want)


@pytest.mark.parametrize("a, a_refs, b, b_refs, want", [
    ("John", ["she", "her"], None, ["he", "him"], [None, "John"]),  # "Anthony Russo" with she/her
    ("Sarah", ["he"], None, ["she"], [None, "Sarah"]),
    ("Sarah", ["he"], None, [], [None, "Sarah"]),                   # the unnamed one holds nothing
    ("Sarah", ["he"], None, ["they"], [None, "Sarah"]),             # non-binary words do not contradict
    (None, ["she"], "Sarah", ["his"], ["Sarah", None]),             # either role
    # the named one holds no binary word and the unnamed one's words fit the name ("Rebecca" tagged for
    # the defendant of they/them, the unnamed lawyer holding her)
    ("Sarah", ["they", "them"], None, ["her"], [None, "Sarah"]),
    ("John", [], None, ["he", "his"], [None, "John"]),
    (None, ["she"], "Sarah", ["they"], ["Sarah", None]),
    # left as tagged: the unnamed one's words do not fit the name, or the name is not strongly gendered,
    # or the named one holds words of its own gender
    ("Sarah", ["they"], None, ["he"], ["Sarah", None]),
    ("Sarah", [], None, [], ["Sarah", None]),
    ("Sarah", [], None, ["they"], ["Sarah", None]),
    ("Jordan", [], None, ["he"], ["Jordan", None]),
    ("Kim", ["they"], None, ["she"], ["Kim", None]),
    ("Sarah", ["she"], None, ["she"], ["Sarah", None]),
    ("Nemo", [], None, ["he"], ["Nemo", None]),
    # the unnamed one's words mix the genders, one contradicting the name: the list as a whole (Unsure) contradicted
    # nothing, and the name moved
    ("Sarah", ["he"], None, ["him", "his", "he", "she"], ["Sarah", None]),
    ("Sarah", ["he"], None, ["boyfriend", "she"], ["Sarah", None]),
    # the named one's own title or neopronoun says its gender ("Mx." moved away from "Mx. Sarah Lee")
    ("Mx. Sarah Lee", ["Mx."], None, ["she", "her"], ["Mx. Sarah Lee", None]),
    ("Mx. Sarah Lee", ["Mx.", "they", "them"], None, ["she", "her"], ["Mx. Sarah Lee", None]),
    ("Sarah", ["xe", "xem"], None, ["she", "her"], ["Sarah", None]),
])
def test_a_name_in_the_wrong_role_moves_to_the_unnamed_role(table, a, a_refs, b, b_refs, want):
    out = check_pronoun_sets(chars(a, a_refs, b, b_refs), ROLES, table)
    assert [c.name for c in out] == want
    assert refs(out) == [tuple(a_refs), tuple(b_refs)]  # the words keep their roles


@pytest.mark.parametrize("a, a_refs, b, b_refs", [
    ("John", ["Ms.", "she", "her"], "Sarah", ["she"]),         # shared: "Ms. Alex Reed" beside Emma
    ("John", ["she", "girlfriend"], "Sarah", ["her"]),          # shared: "his girlfriend, Jordan"
    ("John", ["she", "her", "wife"], "Sarah", []),              # one-sided: the words stay with John
    ("John", ["she", "wife"], None, ["he"]),                    # the name stays too
])
def test_a_noun_or_title_of_its_gender_keeps_a_characters_words_however_its_name_leans(table, a, a_refs, b, b_refs):
    # a woman called John (or Alex, Jordan, Sam) whom the story calls "Ms." or "his girlfriend": the tagger puts
    # those words beside the name they belong to, so the check leaves her words and name as tagged
    given = chars(a, a_refs, b, b_refs)
    assert check_pronoun_sets(given, ROLES, table) == given


def test_the_third_person_case_takes_a_contradicted_characters_nouns_too(table):
    # no guard there: held out, it cost a character (module docstring); a woman called John whom the story calls
    # "his wife" beside a Tom with "he" loses her words
    out = check_pronoun_sets(chars("John", ["she", "wife"], "Tom", ["he"]), ROLES, table)
    assert refs(out) == [(), ("he",)]


def test_strength_is_inclusive(table):
    given = chars("Ana", ["He"], "Tom", ["she"])  # Ana 0.8 female, Tom 0.2 female
    assert refs(check_pronoun_sets(given, ROLES, table, strength=0.8)) == [("she",), ("He",)]
    assert check_pronoun_sets(given, ROLES, table, strength=0.81) == given


def test_one_character_stories_are_left_alone(table):
    one = (CharacterLabel("subject", "Sarah", ("he",)),)
    assert check_pronoun_sets(one, ROLES[:1], table) == one


def test_female_share_lookup(table):
    assert female_share("Sarah", None, table) == pytest.approx(0.99)
    assert female_share("sarah", None, table) == pytest.approx(0.99)  # keys fold case
    assert female_share("Nemo", None, table) is None and female_share("Xavi", None, table) is None
    assert female_share(None, None, table) is None
    assert "NEMO" not in female_shares(table).index


def test_a_table_without_the_column_is_a_data_error(tmp_path):
    path = tmp_path / "old.parquet"
    pd.DataFrame({"key": ["SARAH"], "nd_mena": [0.0]}).to_parquet(path)
    with pytest.raises(DataError, match="harness names build --force"):
        female_shares(str(path))


def test_the_decoder_applies_the_check(table, tagged):
    text = "Sarah met John at the park. She smiled and he waved."
    # the model names both right but binds "he" to Sarah and "She" to John
    enc, p = tagged(text, [("Sarah", 0), ("he", 1), ("John", 2), ("She", 3)])
    story = StoryInput("x", text, ROLES)
    plain = WordDecoder(0.5, True, 384).decode(story, enc, p)
    checked = WordDecoder(0.5, True, 384, table).decode(story, enc, p)
    assert [(c.name, c.references) for c in plain.characters] == [("Sarah", ("he",)), ("John", ("She",))]
    assert [(c.name, c.references) for c in checked.characters] == [("Sarah", ("She",)), ("John", ("he",))]


def test_the_action_check_reads_the_labels_after_the_name_check(table, tagged):
    """The tagger puts John in the payer's role and crosses the pronouns (John "She", Sarah "he").
    Read before the name check, "She paid" would count for the labelled subject, who holds "She",
    and nothing would be exchanged; after it, "She" is Sarah's, who is in the object role, and the
    two characters are exchanged."""
    text = "John met Sarah for dinner. She paid the bill, and he thanked her."
    enc, p = tagged(text, [("John", 0), ("She", 1), ("Sarah", 2), ("he", 3)])
    story = StoryInput("x", text, (RoleSpec("subject", "romantic partner who pays the bill"),
                                   RoleSpec("object", "other romantic partner")))
    out = WordDecoder(0.5, True, 384, table).decode(story, enc, p)
    assert [(c.name, c.references) for c in out.characters] == [("Sarah", ("She",)), ("John", ("he",))]
    # without the name check, the crossed labels say the subject pays: nothing is exchanged
    plain = WordDecoder(0.5, True, 384).decode(story, enc, p)
    assert [(c.name, c.references) for c in plain.characters] == [("John", ("She",)), ("Sarah", ("he",))]


def test_names_agree_when_no_first_name_contradicts_its_words(table):
    assert names_agree(chars("Sarah", ["she"], "John", ["his"]), ROLES, table)
    assert not names_agree(chars("Sarah", ["He"], "John", ["his"]), ROLES, table)
    assert not names_agree(chars("Sarah", ["she"], "John", ["her"]), ROLES, table)
    # unknown or weakly gendered names, no name, no words, mixed words: nothing to contradict
    assert names_agree(chars("Nemo", ["he"], "Jordan", ["she"]), ROLES, table)
    assert names_agree(chars(None, ["he"], "Sarah", []), ROLES, table)
    assert names_agree(chars("Sarah", ["he", "she"], "John", ["they"]), ROLES, table)
    # "Ana" (0.8) is at the strength: "he" contradicts it
    assert not names_agree(chars("Ana", ["he"], None, []), ROLES, table)


@pytest.mark.parametrize("a, a_refs, b, b_refs, want", [
    # a mixed list keeps the words of its strongly gendered first name; the other list is not read
    ("Sarah", ["she", "her", "brother"], "John", ["he"], [("she", "her"), ("he",)]),
    ("John Park", ["boyfriend", "her"], "Tom", ["his"], [("boyfriend",), ("his",)]),
    ("Sarah", ["Ms.", "his", "He"], None, [], [("Ms.",), ()]),
    ("Dr. Sarah Lee", ["she", "man"], "John", ["she", "husband"], [("she",), ("husband",)]),
    # left alone: words that agree (whatever the name), no word of the name's gender, a name that
    # is weak, below the strength or unknown, no name
    ("Sarah", ["he", "his"], "John", ["she"], [("he", "his"), ("she",)]),
    ("Sarah", ["they", "he"], "Jordan", ["she", "him"], [("they", "he"), ("she", "him")]),
    ("Kim", ["she", "brother"], "Nemo", ["he", "sister"], [("she", "brother"), ("he", "sister")]),
    (None, ["she", "brother"], "Xavi", ["he", "her"], [("she", "brother"), ("he", "her")]),
])
def test_a_mixed_list_keeps_the_words_of_its_names_gender(table, a, a_refs, b, b_refs, want):
    assert refs(keep_the_names_gender(chars(a, a_refs, b, b_refs), ROLES, table)) == want


def test_keep_the_names_gender_reads_the_first_name_as_the_identity_module_does(table):
    # a name that repeats its role has no first name for the paper's filter, so nothing is read
    roles = (RoleSpec("subject", "nurse"), RoleSpec("object", "patient"))
    given = (CharacterLabel("subject", "Nurse Sarah", ("she", "his")), CharacterLabel("object", "Tom", ()))
    assert keep_the_names_gender(given, roles, table) == given
    # "Ana" (0.8) is at the default strength, inclusive
    one = (CharacterLabel("subject", "Ana", ("he", "her")),)
    assert refs(keep_the_names_gender(one, ROLES[:1], table)) == [("her",)]
    assert refs(keep_the_names_gender(one, ROLES[:1], table, strength=0.81)) == [("he", "her")]
    # so is "Tom" (0.2) on the male side: 0.2 <= 1 - 0.8, though 1.0 - 0.8 is 0.19999999999999996 in floats
    tom = (CharacterLabel("subject", "Tom", ("she", "his")),)
    assert refs(keep_the_names_gender(tom, ROLES[:1], table)) == [("his",)]


def test_the_decoder_cuts_a_mixed_list_last(table, tagged):
    text = "Sarah hugged her brother John. She laughed and he grinned."
    enc, p = tagged(text, [("Sarah", 0), ("brother", 1), ("She", 1), ("John", 2), ("he", 3)])
    story = StoryInput("x", text, ROLES)
    plain = WordDecoder(0.5, True, 384).decode(story, enc, p)
    checked = WordDecoder(0.5, True, 384, table).decode(story, enc, p)
    assert [(c.name, c.references) for c in plain.characters] == [("Sarah", ("brother", "She")), ("John", ("he",))]
    assert [(c.name, c.references) for c in checked.characters] == [("Sarah", ("She",)), ("John", ("he",))]


@pytest.mark.parametrize("a_refs, b_refs, want", [
    # the words of one gender that the other character holds too are its own: "Ms. Patterson" beside "the boy"
    (["Ms", "his", "He"], ["boy", "his", "He"], [("Ms",), ("boy", "his", "He")]),
    (["boy", "his", "He"], ["Ms", "his", "He"], [("boy", "his", "He"), ("Ms",)]),
    (["woman", "Mr"], ["woman", "her", "She"], [("Mr",), ("woman", "her", "She")]),
    # a title matches with or without its point, and in any case; the other list may mix genders itself
    (["Mr.", "She"], ["mother", "she", "her", "husband"], [("Mr.",), ("mother", "she", "her", "husband")]),
    (["he"], ["she", "He"], [("he",), ("she",)]),
    (["his", "He", "her"], ["his", "her"], [("his", "He"), ("his", "her")]),
    # left alone: shared words of both genders ("Mr" and "She" in each), no shared word, or dropping either
    # gender's shared words would leave one gender
    (["Mr", "She", "her"], ["Mr.", "She", "her"], [("Mr", "She", "her"), ("Mr.", "She", "her")]),
    (["Ms", "he", "him"], ["her", "she"], [("Ms", "he", "him"), ("her", "she")]),
    (["she", "his"], ["his", "she"], [("she", "his"), ("his", "she")]),
    # lists that agree are never touched, whatever the other holds
    (["he", "his"], ["his", "she"], [("he", "his"), ("she",)]),
])
def test_a_mixed_list_loses_the_words_of_one_gender_it_shares_with_the_other_character(a_refs, b_refs, want):
    assert refs(keep_the_unshared_gender(chars("A", a_refs, None, b_refs))) == want


def test_a_mixed_list_of_a_story_of_one_character_is_left_as_it_is():
    one = (CharacterLabel("subject", "Ms. Reed", ("Ms", "he")),)
    assert keep_the_unshared_gender(one) == one


def test_the_decoder_cuts_a_list_by_its_shared_words_without_a_name_table(tagged):
    """The tagger gave "Ms. Patterson" the boy's "his" and "He" too: Unsure before, Female now."""
    text = "Ms. Patterson saw the boy hide a can under his jacket. He froze."
    enc, p = tagged(text, [("Patterson", 0), ("his", 1), ("He", 1), ("boy", 3), ("his", 3), ("He", 3)])
    story = StoryInput("x", text, ROLES)
    got = WordDecoder(0.5, True, 384, action_check=False).decode(story, enc, p)
    assert [(c.name, c.references) for c in got.characters] == [("Ms. Patterson", ("Ms.",)),
                                                                  (None, ("boy", "his", "He"))]
    # without pronoun agreement a character's words are left as tagged
    loose = WordDecoder(0.5, False, 384, action_check=False).decode(story, enc, p)
    assert loose.characters[0].references == ("Ms.", "his", "He")


def test_a_title_written_in_a_name_keeps_its_characters_words_from_the_swap(table):
    """Both names contradict their pronouns (Sarah with "Mr.", John with "Ms."), but each title is written in the
    character's own name: the swap gave "Ms. Sarah Lee" the "Mr." of the other's name and him her "Ms."."""
    given = chars("Mr. Sarah Lee", ["Mr.", "he"], "Ms. John Park", ["Ms.", "she"])
    assert check_pronoun_sets(given, ROLES, table) == given
    # a title written against the first name, as the identity module reads it too (it was swapped): Alex (0.07)
    # with "she" beside Sarah with "he" would swap, so the title in the name is what keeps them
    given = chars("Ms.Alex Reed", ["Ms.", "she"], "Sarah", ["he"])
    assert female_share("Ms.Alex Reed", None, table) == pytest.approx(0.07)
    assert check_pronoun_sets(given, ROLES, table) == given
    # the same names without the titles in them swap as before
    assert refs(check_pronoun_sets(chars("Sarah Lee", ["he"], "John Park", ["she"]), ROLES, table)) == [
        ("she",), ("he",)]
