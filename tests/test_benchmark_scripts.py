"""The CPU benchmark scripts of ``benchmarks/`` run at small sizes, leave RESULTS.md alone with ``--no-write``, and
refuse to report figures where the paths they time disagree (kernels_cpu, stats_sweep)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest


def test_kernels_cpu_quick_measures_every_cpu_path_and_checks_their_counts(benchmark_module, results_untouched,
                                                                           capsys):
    bench = benchmark_module("kernels_cpu")
    bench.main(["--quick", "--no-write", "--skip-sklearn"])
    out = capsys.readouterr().out
    assert "## Kernels: homogeneity statistics and threshold sweep (`benchmarks/kernels_cpu.py` --quick)" in out
    for row in ("| closed form, NumPy (reference) | 1,600 | 64 | float64 |", "| naive: full matmul in 2048-row chunks",
                "| pandas loop (authors' style), B=0 measured | 4,000 | 99 |", "| vectorised histogram sweep, B=20"):
        assert row in out
    assert "Counts identical to the pandas loop and the reference." in out


def test_kernels_cpu_refuses_figures_where_a_timed_path_disagrees_with_the_reference(benchmark_module,
                                                                                     monkeypatch):
    bench = benchmark_module("kernels_cpu")
    args = SimpleNamespace(groups=4, per_group=30, dim=8, n_rep=2, repeat=1, quick=True, skip_sklearn=True)
    real = bench.H.torch_group_stats
    monkeypatch.setattr(bench.H, "torch_group_stats", lambda *a, **k: SimpleNamespace(
        sum=real(*a, **k).sum * 1.001, sumsq=real(*a, **k).sumsq))
    with pytest.raises(SystemExit, match=r"the torch Gram path and the NumPy reference disagree \(relative "):
        bench.bench_homogeneity(args, [], [])
    monkeypatch.setattr(bench.H, "torch_group_stats", real)
    real_naive = bench.naive_group_stats
    monkeypatch.setattr(bench, "naive_group_stats", lambda *a, **k: (real_naive(*a, **k)[0],
                                                                    real_naive(*a, **k)[1] * 1.001))
    with pytest.raises(SystemExit, match="the naive path and the NumPy reference disagree"):
        bench.bench_homogeneity(args, [], [])
    args = SimpleNamespace(characters=200, n_boot=2, pandas_boot=0)
    real_loop = bench.pandas_loop

    def one_count_off(*a):
        out = real_loop(*a)
        out.flat[7] += 1
        return out

    monkeypatch.setattr(bench, "pandas_loop", one_count_off)
    with pytest.raises(SystemExit, match="pandas loop and NumPy reference disagree"):
        bench.bench_sweep(args, [], [])


def test_stats_sweep_checks_observed_and_replicate_counts_against_the_authors_loop(benchmark_module,
                                                                                  results_untouched, monkeypatch):
    bench = benchmark_module("stats_sweep")
    # the authors' loop filters once per cell, race and threshold: five thresholds keep it to seconds
    monkeypatch.setattr(bench, "DEFAULT_THRESHOLDS", np.array([1, 5, 20, 50, 90], dtype=bench.DEFAULT_THRESHOLDS.dtype))
    md = bench.main(["--n", "600", "--pandas-reps", "1", "--numpy-reps", "2", "--no-write"])
    assert "Synthetic input: 600 power-laden characters in 300 stories" in md
    assert "| observed counts (replicate 0) |" in md and "| 1,000 replicates, **extrapolated**" in md
    real = bench.pandas_loop

    def off_in_replicates(df, weights=None):  # right on the data, wrong on a bootstrap replicate
        out = real(df, weights)
        if weights is not None:
            out.flat[3] += 1
        return out

    monkeypatch.setattr(bench, "pandas_loop", off_in_replicates)
    with pytest.raises(SystemExit, match="disagree on bootstrap replicate 1"):
        bench.main(["--n", "600", "--pandas-reps", "1", "--numpy-reps", "2", "--no-write"])
    monkeypatch.setattr(bench, "pandas_loop", lambda df, weights=None: real(df, weights) * 0)
    with pytest.raises(SystemExit, match="disagree on the observed counts"):
        bench.main(["--n", "600", "--pandas-reps", "1", "--numpy-reps", "2", "--no-write"])
