"""The docstring examples of the package's top-level modules run (the subpackages' have tests of their own)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import harness

MODULES = sorted(f"harness.{p.stem}" for p in Path(harness.__file__).parent.glob("*.py")
                 if p.stem != "__init__" and ">>> " in p.read_text("utf-8"))


def test_the_modules_with_examples_are_found():
    assert {"harness.config", "harness.pipeline"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
