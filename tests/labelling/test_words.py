"""harness.labelling.words: the word-level helpers that the decoder's checks share."""

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.labelling.base import breaks_line
from harness.labelling.words import line_starts, split_words

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
