"""Reading JSONL files: one JSON value per line, blank lines skipped, errors that name the line."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import DataError


def iter_jsonl(path: str | Path, *, what: str = "JSONL file") -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, parsed value)`` for each non-blank line of ``path``.

    A missing file or a line that is not JSON raises ``DataError`` naming the file (and line) and
    the fix; ``what`` says what the file should hold ("JSONL file of labelled stories").
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: a directory; pass a {what}")
    if not path.is_file():
        kind = "not a regular file (a device or pipe)" if path.exists() else "file not found"
        raise DataError(f"{path}: {kind}; pass a {what}")
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                # a byte-order mark before the first line (Windows editors write one) is no JSON
                line = raw.decode("utf-8-sig" if i == 1 else "utf-8")
            except UnicodeDecodeError as e:
                # e.start counts from e.object: the line after its byte-order mark, if any
                raise DataError(f"{path}:{i}: not UTF-8 text (byte {e.object[e.start]:#04x} at column {e.start + 1}); "
                                f"save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{i}: not valid JSON ({e.msg}); one object per line") from None
            except (ValueError, RecursionError) as e:  # a number of over 4,300 digits, brackets nested too deep
                raise DataError(f"{path}:{i}: JSON this reader cannot take ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:120]}); one object per line") from None


def parse_list_text(text: str) -> list | None:
    """A Python or JSON list literal (``"['she', 'her']"``, ``'["Emily"]'``) as a list; None when
    ``text`` is not one (the published data writes lists as Python reprs)."""
    for parse in (ast.literal_eval, json.loads):
        try:
            val = parse(text)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):  # "{[1]: 2}", lists nested too deep
            continue
        if isinstance(val, list):
            return val
    return None


__all__ = ["iter_jsonl", "parse_list_text"]
