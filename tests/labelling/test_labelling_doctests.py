"""The docstring examples of harness.labelling run."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import harness.labelling

#: Every module of the package that holds an example (base.py's went unrun while the list was written by hand).
MODULES = sorted("harness.labelling" + ("" if p.stem == "__init__" else f".{p.stem}")
                 for p in Path(harness.labelling.__file__).parent.glob("*.py") if ">>> " in p.read_text("utf-8"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
