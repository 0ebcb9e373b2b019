"""benchmarks/names_lookup.py at a small size: both lookup paths timed and checked against each other."""

from __future__ import annotations

import numpy as np
import pytest


def test_the_lookup_benchmark_times_both_paths_on_the_same_names_and_refuses_where_they_differ(
        benchmark_module, real_table, results_untouched, monkeypatch):
    bench = benchmark_module("names_lookup")
    text = bench.main(["--n", "3000", "--table", str(real_table), "--no-write"])
    assert "| `NameTable.lookup` (vectorised) | 3,000 |" in text and "| Python loop + dict (baseline) | 3,000 |" in text
    assert "Table: " in text and "(loaded in" in text
    real = bench.python_loop
    monkeypatch.setattr(bench, "python_loop", lambda table, names: [tuple(np.nan_to_num(r, nan=0.5))
                                                                   for r in real(table, names)])
    with pytest.raises(SystemExit, match="vectorised lookup disagrees with the Python loop"):
        bench.main(["--n", "3000", "--table", str(real_table), "--no-write"])
