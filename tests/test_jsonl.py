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
