"""The docstring examples of harness.labelling run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["harness.labelling", "harness.labelling.evaluate", "harness.labelling.llm", "harness.labelling.training",
           "harness.labelling.words"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
