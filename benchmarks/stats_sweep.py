"""R_mrs threshold sweep: the NumPy reference (harness.stats.sweep) against the authors' pandas loop.

The baseline is the loop the authors' code runs (digest 5.5): for every model x domain x gender
cell, race and threshold t = 1..99, filter the subordinate and dominant frames with
``100 * likelihood > t`` and count. A bootstrap replicate in that style reweights stories
(the same Poisson weights) and sums weights instead of counting rows. Both implementations are
checked to give identical counts before timing is reported.

The pandas bootstrap is slow, so only ``--pandas-reps`` replicates are timed and the cost of
1,000 replicates is extrapolated linearly (stated as such in the output); the NumPy bootstrap
is timed on ``--numpy-reps`` replicates and extrapolated the same way.

Usage: ``python benchmarks/stats_sweep.py [--n 500000] [--pandas-reps 2] [--numpy-reps 50]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_description, write_section  # noqa: E402

from harness.stats.sweep import DEFAULT_THRESHOLDS, PERCENT_DECIMALS, story_weights, sweep_counts  # noqa: E402

RACES5 = ("mena", "asian", "black", "latine", "white")


def synthetic(n: int, seed: int = 0) -> pd.DataFrame:
    """n power-laden characters, two per story, over 5 models x 3 domains, F/M genders."""
    rng = np.random.default_rng(seed)
    n_st = n // 2
    story = np.repeat(np.arange(n_st), 2)[:n]
    cell = rng.integers(0, 15, n_st)[story]
    df = pd.DataFrame({
        "story": story,
        "model": (cell // 3).astype(np.int32),
        "domain": (cell % 3).astype(np.int32),
        "gender": rng.integers(0, 2, n).astype(np.int32),
        "sub": (np.arange(n) % 2).astype(np.int8),
    })
    # likelihoods: mostly low, a heavy tail of racialized names, some missing entries
    for r in RACES5:
        v = rng.beta(0.3, 3.0, n).astype(np.float32)
        v[rng.random(n) < 0.05] = np.nan
        df[r] = v
    return df


def pandas_loop(df: pd.DataFrame, weights: np.ndarray | None = None) -> np.ndarray:
    """The authors' style: filter and count per cell, race and threshold. Returns (G, R, T, 2)."""
    thr = DEFAULT_THRESHOLDS
    if weights is not None:
        df = df.assign(w=weights[df["story"].to_numpy()])
    out = np.zeros((30, len(RACES5), thr.size, 2), dtype=np.int64)
    for (m, d, g), cell in df.groupby(["model", "domain", "gender"], sort=True):
        gi = (m * 3 + d) * 2 + g
        for k, part in ((0, cell[cell["sub"] == 0]), (1, cell[cell["sub"] == 1])):
            for j, r in enumerate(RACES5):
                col = part[r]
                for ti, t in enumerate(thr):
                    hit = (100 * col.astype(np.float64)).round(PERCENT_DECIMALS) > t  # the contract's percentage
                    out[gi, j, ti, k] = hit.sum() if weights is None else part.loc[hit, "w"].sum()
    return out


def numpy_sweep(df: pd.DataFrame, n_boot: int, seed: int = 7):
    group = ((df["model"] * 3 + df["domain"]) * 2 + df["gender"]).to_numpy(np.int32)
    return sweep_counts(df[list(RACES5)].to_numpy(np.float32), df["sub"].to_numpy(np.int8), group,
                        df["story"].to_numpy(np.int64), DEFAULT_THRESHOLDS, n_groups=30, n_boot=n_boot, seed=seed)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500_000, help="characters (two per story)")
    ap.add_argument("--pandas-reps", type=int, default=2, help="bootstrap replicates timed for pandas")
    ap.add_argument("--numpy-reps", type=int, default=50, help="bootstrap replicates timed for NumPy")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args(argv)
    df = synthetic(args.n)
    n_st = int(df["story"].nunique())

    numpy_sweep(df.iloc[:1000], 1)  # warm-up: imports (scipy.sparse) outside the timings
    t0 = time.perf_counter()
    obs_np = numpy_sweep(df, 0)
    t_np_obs = time.perf_counter() - t0
    t0 = time.perf_counter()
    obs_pd = pandas_loop(df)
    t_pd_obs = time.perf_counter() - t0
    if not np.array_equal(obs_np.above[0], obs_pd):
        raise SystemExit("pandas loop and NumPy sweep disagree on the observed counts")

    t0 = time.perf_counter()
    boot_np = numpy_sweep(df, args.numpy_reps)
    t_np_boot = max(time.perf_counter() - t0 - t_np_obs, 0.0)  # replicates only (the call redoes replicate 0)
    t_pd_boot = 0.0
    for b in range(1, args.pandas_reps + 1):
        w = story_weights(7, [b], np.arange(n_st))[0]
        t0 = time.perf_counter()
        rep = pandas_loop(df, w)
        t_pd_boot += time.perf_counter() - t0
        if not np.array_equal(rep, boot_np.above[b]):
            raise SystemExit(f"pandas loop and NumPy sweep disagree on bootstrap replicate {b}")
    per_np = t_np_boot / max(args.numpy_reps, 1)
    per_pd = t_pd_boot / max(args.pandas_reps, 1)
    md = "\n".join([
        "## Statistics: R_mrs threshold sweep (harness.stats.sweep, NumPy reference)",
        "",
        f"Machine: {machine_description()}. Command: `python benchmarks/stats_sweep.py --n {args.n} "
        f"--pandas-reps {args.pandas_reps} --numpy-reps {args.numpy_reps}`.",
        f"Synthetic input: {args.n:,} power-laden characters in {n_st:,} stories, 30 model x domain x gender "
        f"cells, 5 races, thresholds 1..99. Baseline: the authors' pandas loop (filter and count per cell, "
        "race and threshold; a replicate sums Poisson story weights). Counts of both were checked to be "
        "identical (observed data and every timed replicate) before timing.",
        "",
        "| task | pandas loop (s) | NumPy sweep (s) | speed-up |",
        "|---|---|---|---|",
        f"| observed counts (replicate 0) | {t_pd_obs:.2f} | {t_np_obs:.2f} | {t_pd_obs / t_np_obs:.1f}x |",
        f"| one bootstrap replicate (pandas: mean of {args.pandas_reps}; NumPy: mean of {args.numpy_reps}) | "
        f"{per_pd:.2f} | {per_np:.3f} | {per_pd / per_np:.1f}x |",
        f"| 1,000 replicates, **extrapolated** linearly from the row above | {1000 * per_pd / 60:.0f} min | "
        f"{1000 * per_np / 60:.1f} min | {per_pd / per_np:.1f}x |",
        "",
        "Extrapolation assumes each replicate costs the same (true for both: fixed work per replicate). "
        "The GPU kernels (harness.kernels.sweep) report their own figures in the kernels section.",
    ])
    print(md)
    if not args.no_write:
        write_section("stats", md)
    return md


if __name__ == "__main__":
    main()
