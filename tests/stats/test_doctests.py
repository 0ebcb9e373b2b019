"""The docstring examples of harness.stats run (they quote published values)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["intervals", "representation", "subordination", "rmrs", "fdr", "sweep", "bootstrap"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(f"harness.stats.{name}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
