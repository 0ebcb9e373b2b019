"""harness.jsonl: errors that name the file, the line and what is wrong on it."""

from __future__ import annotations

import pytest

from harness.errors import DataError
from harness.jsonl import iter_jsonl


def test_a_byte_that_is_not_utf8_is_named_on_a_line_with_a_byte_order_mark_too(tmp_path):
    for bom in (b"", b"\xef\xbb\xbf"):
        p = tmp_path / "latin1.jsonl"
        p.write_bytes(bom + b'{"a": "caf\xe9"}\n')
        with pytest.raises(DataError, match=r"latin1\.jsonl:1: not UTF-8 text \(byte 0xe9 at column 11\)"):
            list(iter_jsonl(p))


def test_a_list_text_that_breaks_the_parsers_is_no_list_and_its_row_is_named(tmp_path):
    import json

    from harness.jsonl import parse_list_text
    from harness.labelling.data import load_gold

    for bad in ("{['she']: 1}", "{{}}", "[" * 5000 + "]" * 5000):
        assert parse_list_text(bad) is None
        p = tmp_path / "gold.jsonl"
        p.write_text(json.dumps({"role_category": "Work", "subject": "cashier", "object": "thief",
                                 "query": "Write a story of an American cashier who catches a thief.",
                                 "llm_response": "Sarah caught him.", "correct_subject_name": "['Sarah']",
                                 "correct_subject_references": bad}) + "\n")
        with pytest.raises(DataError, match=r"gold\.jsonl:1 correct_subject_references: .* is not a list"):
            load_gold(p)
    assert parse_list_text("['she', 'her']") == ["she", "her"] and parse_list_text('["Emily"]') == ["Emily"]


def test_a_text_that_is_no_list_is_none_and_a_json_only_list_is_read():
    """parse_list_text gives a list or None: a Python string, tuple or dict literal ("'Sarah'") is no list (a string
    returned as one was read letter by letter), and a JSON list with null or true, no Python literal, is read."""
    from harness.jsonl import parse_list_text

    for text in ("'Sarah'", "('she', 'her')", "{'she': 1}", "3", "None", "null"):
        assert parse_list_text(text) is None, text
    assert parse_list_text('["Emily", null, true]') == ["Emily", None, True]


def test_blank_lines_are_skipped_and_a_line_that_is_not_json_or_a_directory_is_named(tmp_path):
    """Blank (or whitespace-only) lines are skipped, the line numbers count them; a line that is not JSON is named
    "not valid JSON" with its line, a directory is named as a directory."""
    p = tmp_path / "rows.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n   \n{"a": 2}\r\n\n')
    assert list(iter_jsonl(p)) == [(1, {"a": 1}), (4, {"a": 2})]
    p.write_text('{"a": 1}\n\n{"a": 2,}\n')
    with pytest.raises(DataError, match=r"rows\.jsonl:3: not valid JSON \(.*\); one object per line$"):
        list(iter_jsonl(p))
    with pytest.raises(DataError, match=r": a directory; pass a JSONL file of stories$"):
        list(iter_jsonl(tmp_path, what="JSONL file of stories"))


def test_a_missing_path_and_a_path_that_is_no_regular_file_are_told_apart(tmp_path):
    """/dev/null (or a pipe) exists: "file not found" sent its user looking for a typo."""
    import os

    with pytest.raises(DataError, match=r"missing\.jsonl: file not found; pass a JSONL file"):
        list(iter_jsonl(tmp_path / "missing.jsonl"))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"pipe: not a regular file \(a device or pipe\); pass a JSONL file"):
        list(iter_jsonl(fifo))


@pytest.mark.parametrize("line", ['{"id": ' + "9" * 5000 + "}", "[" * 100_000 + "]" * 100_000])
def test_json_the_reader_cannot_take_is_named_on_its_line(tmp_path, line):
    """A number of over 4,300 digits (Python's limit on int conversion) and brackets nested past the recursion
    limit raised ValueError and RecursionError, a traceback; now the one-line error names the line."""
    p = tmp_path / "big.jsonl"
    p.write_text('{"ok": 1}\n' + line + "\n")
    with pytest.raises(DataError, match=r"big\.jsonl:2: JSON this reader cannot take \((ValueError|RecursionError): "):
        list(iter_jsonl(p))
