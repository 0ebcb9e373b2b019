"""Fixtures of the statistics tests (data builders live in stats_fixtures.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from stats_fixtures import make_characters


@pytest.fixture(scope="module")
def characters() -> pd.DataFrame:
    return make_characters()
