"""A surname alone completed by the first name the story writes before it (``name_completion``)."""

import pandas as pd
import pytest

from harness.labelling.base import CharacterLabel, RoleSpec, StoryInput
from harness.labelling.decoder import WordDecoder
from harness.labelling.encoder import _Encoded
from harness.labelling.words import split_words
from harness.labelling.name_completion import complete_names, completed_name


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """A first-name table with Census counts: Robert and Will common first names, "Then" rare."""
    rows = {"ROBERT": (2_759_332, 0.01), "WILL": (44_842, 0.02), "THEN": (139, 0.44), "EMILY": (900_000, 0.99),
            "JOSE": (500_000, 0.01), "MONIQUE": (60_000, 0.99), "NOOR": (10_250, 0.7), "MARYJANE": (25_540, 0.99),
            "SEAN": (400_000, 0.01), "YOUNG": (22_159, 0.3), "ANA": (321_858, 0.99), "LUCIA": (71_626, 0.99),
            "SENORA": (10_500, 0.9), "MITCHELL": (124_000, 0.065), "SARAH": (1_000_000, 0.99), "DAVID": (3_000_000, 0.0),
            "JUNE": (300_000, 0.99), "MAY": (100_000, 0.92), "DEAN": (150_000, 0.02), "APRIL": (200_000, 0.99)}
    # SENORA is not in the real counts: a title the table counts is still no first name
    path = tmp_path_factory.mktemp("names") / "first_names.parquet"
    pd.DataFrame({"key": list(rows), "census_count": [c for c, _ in rows.values()],
                  "nd_female": [f for _, f in rows.values()]}).to_parquet(path)
    return str(path)


def _complete(name, text, table, others=frozenset()):
    return completed_name(name, text, split_words(text), set(others), table)


@pytest.mark.parametrize("text, want", [
    ("Jimmy finally met his idol, the actor Robert Mitchell. Mitchell smiled.", "Robert Mitchell"),
    ("Mitchell smiled. Years before, Robert Mitchell had been a fan.", "Robert Mitchell"),  # any occurrence
    ("Here is a story:\n\nNoor Mitchell paid.", "Noor Mitchell"),  # 10,250 bearers: at the bar
    ("Mitchell smiled at Dr. Mitchell.", "Mitchell"),  # a title, not a first name
    ("Mitchell waited. Then Mitchell left.", "Mitchell"),  # "Then": 139 bearers
    ("Young Mitchell waited.", "Mitchell"),  # "Young" (22,159 bearers) is never read as a first name
    ("Mitchell met Sam. Robert\nMitchell left.", "Mitchell"),  # not one space apart: not written as one name
    ("Mitchell met Sam. ROBERT's Mitchell left.", "Mitchell"),  # "ROBERT's" is split: "s" is no name
    ("Mitchell smiled.", "Mitchell"),  # nothing before it
    ("Mitchell ran the bakery. In June Mitchell hired a baker.", "Mitchell"),  # a month, not a first name
    ("Mitchell ran the bakery. Since June Mitchell hired a baker.", "Mitchell"),
    ("Mitchell ran the bakery. Her friend June Mitchell hired a baker.", "June Mitchell"),
])
def test_a_one_word_name_takes_the_common_first_name_written_before_it(table, text, want):
    got = _complete("Mitchell", text, table)
    assert got == want
    assert got in text  # a cut of the story as written


@pytest.mark.parametrize("name, text, want", [
    # only where the name is a whole run of words: not inside "Mitchells" nor ending "McMitchell"
    ("Mitchell", "Robert Mitchells left. Sarah McMitchell stayed. Mitchell waited.", "Mitchell"),
    ("Mitchell", "Robert Mitchells left. Ana Mitchell stayed.", "Ana Mitchell"),
    ("Mitchell", "Mitchell, then Mitchell-Lee, then David Mitchell.", "David Mitchell"),
    ("Ana", "Ana Anaya met Lucia Ana.", "Lucia Ana"),  # occurrences inside a word and overlapping ones skipped
])
def test_the_name_is_looked_for_where_it_spans_whole_words_in_the_order_written(table, name, text, want):
    assert _complete(name, text, table) == want


@pytest.mark.parametrize("given, text, want", [
    ("Emily", "Jake paid. Later Jake wondered: Will Emily ever call again? She had seemed happy.", "Emily"),
    ("Emily", "Will Emily ever call again?", "Emily"),  # the story's first word
    ("Emily", "'Will Emily come?' Jake asked.", "Emily"),  # after a quotation's opening mark
    ("Emily", "Jake sat.\nWill Emily come? he thought.", "Emily"),  # the first of its line
    ("Mitchell", "Will Mitchell come? Nobody knew.", "Mitchell"),
    # a point that ends no sentence on the way to the question mark (the question was missed: "Will Emily")
    ("Emily", "Jake wondered: Will Emily ever forgive Mr. Thompson? She had left.", "Emily"),
    ("Emily", "Jake wondered: Will Emily... ever call again? She had left.", "Emily"),
    ("Emily", "Jake wondered: Will Emily pay $3.50 for it? She had left.", "Emily"),
    # after a dash written in ASCII, as after "\u2014" (its hyphens are words of their own)
    ("Emily", "Jake sighed -- Will Emily ever call again? She had left.", "Emily"),
    ("Emily", "Jake sighed - Will Emily ever call again? She had left.", "Emily"),
    ("Emily", "Jake sighed \u2014 Will Emily ever call again? She had left.", "Emily"),
    # a name: in a sentence that is no question, or not opening its question
    ("Mitchell", "Will Mitchell paid. Mitchell smiled.", "Will Mitchell"),
    ("Mitchell", "Did Will Mitchell pay? Mitchell smiled.", "Will Mitchell"),
    ("Mitchell", "Will Mitchell paid the bill. Was it fair? Mitchell smiled.", "Will Mitchell"),
    ("Mitchell", "Will Mitchell met Dr. Ruiz. Was it fair? Mitchell smiled.", "Will Mitchell"),
    ("Mitchell", "Will Mitchell paid... Was it fair? Mitchell smiled.", "Will Mitchell"),
    # a title's point opens no question ("Mr." read as a sentence's end lost "Will"), and any line break ends one
    # (only "\n" did: "Was it fair?" on the next line made "Will Mitchell" a question)
    ("Mitchell", 'Jake asked, "Is Mr. Will Mitchell here?" Mitchell waved.', "Will Mitchell"),
    ("Mitchell", "Did Mrs. May Mitchell call? Mitchell smiled.", "May Mitchell"),
    ("Mitchell", "Will Mitchell paid the bill\rWas it fair? Mitchell smiled.", "Will Mitchell"),
    ("Mitchell", "Will Mitchell paid the bill\u2028Was it fair? Mitchell smiled.", "Will Mitchell"),
])
def test_a_modal_that_opens_a_question_is_no_first_name(table, given, text, want):
    assert _complete(given, text, table) == want


@pytest.mark.parametrize("name, text, want", [
    ("Mitchell", "Mary-Jane Mitchell waved. Mitchell left.", "Mary-Jane Mitchell"),  # a hyphenated first name
    ("Mitchell", "Jose\u0301 Mitchell waved. Mitchell left.", "Jose\u0301 Mitchell"),  # a decomposed accent
    ("O'Brien", "Sean O'Brien waved. O'Brien left.", "Sean O'Brien"),  # a surname the splitter cuts in two
    ("O\u2019Brien", "Sean O\u2019Brien waved.", "Sean O\u2019Brien"),
    # the other apostrophe than the full name's: the surname was the first name, and a woman's "Her" was stripped
    ("O'Brien", "Sean O\u2019Brien waved. O'Brien left.", "Sean O\u2019Brien"),
    ("O\u2019Brien", "Sean O'Brien waved. O\u2019Brien left.", "Sean O'Brien"),
    ("O'Brien", "Robert O'Briens waved. O'Brien left.", "O'Brien"),  # a longer word is no occurrence
    ("Mitchell", "Mary- Mitchell waved.", "Mitchell"),  # a hyphen with nothing after it is no name word
    # the Unicode hyphens the splitter keeps inside a word, and a no-break space before the surname: the first
    # name was lost
    ("Mitchell", "Mary\u2011Jane Mitchell waved.", "Mary\u2011Jane Mitchell"),
    ("Mitchell", "Mary\u2010Jane Mitchell waved.", "Mary\u2010Jane Mitchell"),
    ("Torres", "Ana\u00a0Torres waved. Torres left.", "Ana\u00a0Torres"),
    ("Torres", "Ana\u202fTorres waved.", "Ana\u202fTorres"),
    ("Torres", "Ana\tTorres waved.", "Torres"),  # a tab is no gap inside a name
])
def test_first_names_and_surnames_beyond_plain_letters(table, name, text, want):
    assert _complete(name, text, table) == want


@pytest.mark.parametrize("text, others, want", [
    ("Ana Lucía Torres waved. Torres left.", (), "Ana Lucía Torres"),  # not "Lucía Torres": first name Lucía
    ("Robert Lucía Ana Torres waved.", (), "Lucía Ana Torres"),  # two first names at most: parsed, three words
    ("Then Ana Torres waved.", (), "Ana Torres"),  # "Then" is no first name
    ("Dr. Ana Torres waved.", (), "Ana Torres"),
    ("Robert Ana Torres waved.", ("robert",), "Ana Torres"),  # the other character's name word
    ("Robert, Ana Torres waved.", (), "Ana Torres"),  # not one space apart
])
def test_a_middle_name_is_completed_with_the_first_name_before_it(table, text, others, want):
    from harness.identity.names import first_name_of

    got = _complete("Torres", text, table, others)
    assert got == want
    assert first_name_of(got) == want.split()[0]


@pytest.mark.parametrize("text, others", [
    ("Se\u00f1ora Lopez smiled.", ()),
    ("Sen\u0303ora Lopez smiled.", ()),  # decomposed (macOS writes it): the same title
    ("Jose\u0301 Lopez smiled.", ("jos\u00e9",)),  # the other character's name word, in the other form
    ("Jos\u00e9 Lopez smiled.", ("jose\u0301",)),
])
def test_a_title_or_the_other_characters_word_is_no_first_name_in_either_unicode_form(table, text, others):
    assert _complete("Lopez", text, table, others) == "Lopez"


def test_a_first_name_after_a_word_that_is_no_first_name_stays_as_it_is(table):
    # "Young Emily" would parse to no first name at all: Emily keeps hers
    assert _complete("Emily", "Young Emily loved math. Emily solved it.", table) == "Emily"


def test_names_of_more_words_and_the_other_characters_words_are_left_alone(table):
    text = "Robert Mitchell met Emily Mitchell."
    assert _complete("Emily Mitchell", text, table) == "Emily Mitchell"
    # where a first name stands before it: "Robert Emily Mitchell" would read the first name Robert
    assert _complete("Emily Mitchell", "Robert Emily Mitchell waved.", table) == "Emily Mitchell"
    assert _complete(None, text, table) is None
    # "Robert" names the other character: it cannot be this one's first name
    assert _complete("Mitchell", "Mitchell met Robert. Robert Mitchell? No.", table, {"robert"}) == "Mitchell"


def test_without_census_counts_nothing_is_completed(tmp_path):
    path = tmp_path / "shares.parquet"
    pd.DataFrame({"key": ["ROBERT"], "nd_female": [0.01]}).to_parquet(path)
    assert _complete("Mitchell", "The actor Robert Mitchell smiled.", str(path)) == "Mitchell"


def test_complete_names_reads_the_other_characters_names(table):
    text = "Jose Fontaine hugged Monique Fontaine. Fontaine laughed."
    chars = (CharacterLabel("subject", "Fontaine", ("she",)), CharacterLabel("object", "Jose", ("he",)))
    got = complete_names(chars, text, split_words(text), table)
    # "Jose" is the object's name word, so the subject's "Fontaine" takes "Monique" (the next occurrence)
    assert [c.name for c in got] == ["Monique Fontaine", "Jose"]
    assert [c.references for c in got] == [("she",), ("he",)]
    # a title written against the other's first name ("Dr.Robert Lee") is Dr. and Robert, as the identity module reads
    text = "Mitchell met Dr.Robert Lee. Robert Mitchell? No, Mitchell left."
    chars = (CharacterLabel("subject", "Mitchell", ("he",)), CharacterLabel("object", "Dr.Robert Lee", ("him",)))
    assert [c.name for c in complete_names(chars, text, split_words(text), table)] == ["Mitchell", "Dr.Robert Lee"]


def _probs(words, tags):
    import numpy as np

    p = np.zeros((len(words), 4))
    for (w, k, slot), v in tags.items():
        p[[i for i, (x, _, _) in enumerate(words) if x == w][k], slot] = v
    return p


def test_the_decoder_writes_names_for_the_roles_they_end_in(table):
    # the tagger gives the nurse's slot José and the patient's slot "Nurse Emily"; the role-noun check
    # exchanges the two ("Nurse" ties Emily to the nurse's role), and the title that repeats the
    # nurse's role goes once "Nurse Emily" is the nurse's
    text = "Nurse Emily sat with José. She nursed him back to health. Dr. Ruiz thanked her."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "nurse"), RoleSpec("object", "needy patient")))
    p = _probs(words, {("José", 0, 0): 0.9, ("him", 0, 1): 0.9, ("Nurse", 0, 2): 0.9, ("Emily", 0, 2): 0.9,
                       ("She", 0, 3): 0.9, ("her", 0, 3): 0.9})
    out = WordDecoder(0.5, True, 384, table, action_check=False).decode(story, enc, p)
    assert [(c.name, c.references) for c in out.characters] == [("Emily", ("She", "her")), ("José", ("him",))]
    # a surname alone is completed in the decoder too; without a name table it stays as tagged
    text = "The actor Robert Mitchell met Jimmy. Mitchell signed his poster."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "actor"), RoleSpec("object", "loyal fan")))
    p = _probs(words, {("Mitchell", 1, 0): 0.9, ("Jimmy", 0, 2): 0.9, ("his", 0, 3): 0.9})
    names = [c.name for c in WordDecoder(0.5, True, 384, table, action_check=False).decode(story, enc, p).characters]
    assert names == ["Robert Mitchell", "Jimmy"]
    names = [c.name for c in WordDecoder(0.5, True, 384, None, action_check=False).decode(story, enc, p).characters]
    assert names == ["Mitchell", "Jimmy"]


def test_the_name_check_reads_the_first_name_the_story_writes_before_a_surname_alone(table):
    """The tagger named the lawyer by "Mitchell" alone: the name check read Mitchell, a man's first name (6.5%
    female), as hers, took her "She" for a third person's word and left her without a gender; completed only at
    the end, the name the audit reads was "Sarah Mitchell"."""
    text = ("The renowned lawyer, Sarah Mitchell, met David Brooks at the courthouse. Mitchell listened as David "
            "explained his case. She nodded and he smiled.")
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "lawyer"), RoleSpec("object", "defendant")))
    p = _probs(words, {("Mitchell", 1, 0): 0.9, ("She", 0, 1): 0.9, ("David", 0, 2): 0.9, ("Brooks", 0, 2): 0.9,
                       ("David", 1, 2): 0.9, ("his", 0, 3): 0.9, ("he", 0, 3): 0.9})
    for binding in (True, False):  # (the binding gave "She" back where the check ran first and took it)
        out = WordDecoder(0.5, True, 384, table, action_check=False, pronoun_binding=binding).decode(story, enc, p)
        assert [(c.name, c.references) for c in out.characters] == [("Sarah Mitchell", ("She",)),
                                                                    ("David Brooks", ("his", "he"))]


@pytest.mark.parametrize("given, text, want", [
    # a modal opening a question inside markdown's emphasis, a parenthesis or after a dash
    ("Emily", "Jake paid. *Will Emily ever call again?* He sighed.", "Emily"),
    ("Emily", "Jake paid. (Will Emily ever call again?) He sighed.", "Emily"),
    ("Emily", "Jake paid and wondered \u2014 Will Emily ever call again?", "Emily"),
    # a month after another month and "and"; "and May" after a name is still a first name
    ("Mitchell", "Mitchell ran the bakery. Between April and May Mitchell hired a baker.", "Mitchell"),
    ("Mitchell", "Mitchell ran the bakery. Sarah and June Mitchell hired a baker.", "June Mitchell"),
    # an office that is a first name too is no first name before a middle name
    ("Mitchell", "The dean, Dean Sarah Mitchell, smiled. Mitchell nodded.", "Sarah Mitchell"),
    ("Mitchell", "Robert Sarah Mitchell smiled. Mitchell nodded.", "Robert Sarah Mitchell"),  # as before
])
def test_questions_months_and_offices_are_no_first_names(table, given, text, want):
    assert _complete(given, text, table) == want


def test_a_first_name_an_apostrophe_splits_completes_a_surname(tmp_path):
    """ "Ja'Nae" is split as "Ja" and "'Nae": "Mitchell" stayed alone, a man's first name to the name check."""
    path = tmp_path / "first_names.parquet"
    pd.DataFrame({"key": ["JANAE", "MITCHELL"], "census_count": [14_883, 124_000], "nd_female": [0.99, 0.065]}
                 ).to_parquet(path)
    for first in ("Ja'Nae", "Ja\u2019Nae", "Janae"):
        text = f"The lawyer, {first} Mitchell, met David. Mitchell listened."
        assert _complete("Mitchell", text, str(path)) == f"{first} Mitchell"
    # the last part of a name the splitter cuts after its apostrophe is no first name ("Ja'Nae-Marie": not Marie)
    path = tmp_path / "with_marie.parquet"  # tables are cached by path
    pd.DataFrame({"key": ["JANAE", "MARIE", "MITCHELL"], "census_count": [14_883, 400_000, 124_000],
                  "nd_female": [0.99, 0.99, 0.065]}).to_parquet(path)
    assert _complete("Mitchell", "Ja'Nae-Marie Mitchell waved. Mitchell left.", str(path)) == "Mitchell"
    # but a dash written "--", whose hyphens are words of their own, is no name's hyphen
    assert _complete("Mitchell", "She looked up--Marie Mitchell waved. Mitchell left.", str(path)) == "Marie Mitchell"
