"""harness.labelling.words: the word-level helpers that the decoder's checks share."""

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.labelling.base import breaks_line
from harness.labelling.words import (find_all, glued_name_part, her_is_possessive, is_clitic, line_starts,
                                     single_quote_dialogue, split_words, starts_capitalised)

_PIECES = ["Maya", "Tom", "O'Brien", " ", "  ", "\n", "\r\n", "\n\n", "\u2028", "\x85", "\x0b", ".", ",", "'",
           "\u2019s", "-", "Ana\u0301", "x\x85y"]


def _by_definition(text: str, words) -> list[int]:
    """The docstring's definition, one gap at a time: a line break stands between word k and the word before."""
    return [k for k in range(1, len(words)) if breaks_line(text[words[k - 1][2]:words[k][1]])]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_line_starts_are_the_words_with_a_line_break_in_the_gap_before_them(pieces):
    text = "".join(pieces)
    words = split_words(text)
    assert line_starts(text, words) == _by_definition(text, words)


def test_line_starts_of_a_story_without_breaks_and_of_breaks_at_either_end():
    assert line_starts("Maya paid. Tom smiled.", split_words("Maya paid. Tom smiled.")) == []
    text = "\nTitle\n\nMaya paid.\n"
    assert line_starts(text, split_words(text)) == [1]  # before the first word or after the last: no word starts


def test_an_elision_is_a_whole_word_not_the_start_of_a_quoted_name():
    """An elision's letters at the start of a longer word ("'Nancy", "'Tilly", "'Emma") are no elision: the word was
    cut into "'N", "ancy", a name no one has, and its quotation's opening mark was lost."""
    text = "Tom said, 'Nancy, wait!' and 'Tilly' rode 'til dawn, got 'em and 'Emma.'"
    words = split_words(text)
    assert [w for w, _, _ in words] == ["Tom", "said", ",", "'", "Nancy", ",", "wait", "!", "'", "and", "'", "Tilly",
                                        "'", "rode", "'til", "dawn", ",", "got", "'em", "and", "'", "Emma", ".", "'"]
    assert single_quote_dialogue(text, words) == [3, 8, 20, 23]


def test_single_quote_dialogue_opens_after_a_bracket_glued_and_closes_before_no_letter():
    """The docstring's rules one at a time: an opening mark after a bracket or a dash opens; one that stands apart
    from its word (" ' ok") opens nothing; a mark after punctuation that a letter follows ("the U.S.'s") closes
    nothing, so the quotation it stands in keeps its own closing mark."""
    for text, starts in (("He waved ('Go,' Sam said) and left.", [10, 14]),
                         ("He waved \u2014'Go,' Sam said.", [10, 14]),
                         ("He said ' ok.' Then 'Go,' Sam said.", [20, 24]),
                         ("'Go home,' Sam said. 'The U.S.'s best days are over,' Ana said.", [0, 9, 21, 52])):
        words = split_words(text)
        assert [words[k][1] for k in single_quote_dialogue(text, words)] == starts, text


def test_georgian_names_from_the_first_letter_of_the_alphabet_count_as_capitalised():
    """Georgian letters, filed as lowercase, start a name from "\u10d0" on: "\u10d0\u10dc\u10d0" (Ana) included."""
    assert starts_capitalised("\u10d0\u10dc\u10d0") and starts_capitalised("\u10d2\u10d8\u10dd\u10e0\u10d2\u10d8")
    assert not starts_capitalised("ana")
    assert not starts_capitalised("\u10fb")  # the Georgian paragraph separator, among its letters, is no letter


def test_a_glued_name_part_follows_a_capitalised_word_with_no_space_and_no_clitic():
    """``glued_name_part``: the rest of "O'Brien" and "Ja'Nae", not a clitic ("Maya's", "MAYA'LL"), not an elision a
    space sets apart ("Tom 'bout"), not a piece after a lowercase word ("y'know"), not a lone apostrophe."""
    for text, parts in (("Megan O'Brien and Ja'Nae met.", ["'Brien", "'Nae"]),
                        ("Ask Tom 'bout it, y'know.", []), ("James' book and Maya's and MAYA'LL.", [])):
        words = split_words(text)
        assert [w for k, (w, _, _) in enumerate(words) if glued_name_part(words, k)] == parts, text
    assert is_clitic("") and is_clitic("LL") and is_clitic("til") and not is_clitic("Brien")


def test_find_all_finds_every_run_up_to_the_last_word_and_none_of_nothing():
    """``find_all``: every start of the run, one that ends on the last word too, and none for an empty run."""
    assert find_all(["ana", "ruiz", "and", "ana", "ruiz"], ["ana", "ruiz"]) == [0, 3]
    assert find_all(["ana", "ruiz"], ["ruiz"]) == [1] and find_all(["ana"], ["ana", "ruiz"]) == []
    assert find_all(["ana", "ruiz"], []) == []


def test_her_before_a_participle_or_adverbs_and_a_function_word_is_an_object():
    """The docstring's objects: "saw her leaving." (a participle that ends the phrase) and adverbs a function word
    follows ("thanked her warmly for dinner", "told her quietly that"); a determiner stays one ("found her missing
    earring")."""
    for text, possessive in (("Jake saw her leaving .", False), ("He thanked her warmly for dinner .", False),
                             ("She told her quietly that Tom left .", False), ("He found her missing earring .", True)):
        words = text.split()
        assert her_is_possessive(words, words.index("her")) == possessive, text
