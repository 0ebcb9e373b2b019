"""Statistics and report at the paper's scale: 500,000 labelled stories (issue 7, "Scale").

A synthetic labelled corpus (``tests/audit/synthetic.py: synthetic_characters_fast``: five models
x 100,000 stories, ~1.67 characters per story, the ten fixed names plus 2,000 made-up names with
random race likelihoods) goes through

1. ``harness.audit.statistics.compute_tables`` on the whole characters table, once in paper mode
   and once in principled mode with ``--n-boot`` bootstrap replicates;
2. ``harness.report.build_report`` over five run directories (one per model, as ``harness report``
   compares models), each holding its model's statistics tables, a ``run.json`` and 100,000
   synthetic ~90-word stories for the stereotype cue search.

Each phase is timed (wall clock) and its peak memory measured two ways: the peak resident set size
during the phase (sampled every 20 ms; the increase over the start of the phase is given too), and,
with ``--tracemalloc``, the peak of Python-tracked allocations (NumPy and pandas buffers included),
measured in a separate, slower pass so it does not distort the times.

Usage: ``python benchmarks/report.py [--stories 500000] [--models 5] [--n-boot 200] [--tracemalloc]
[--no-write]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "audit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_description, write_section  # noqa: E402
from synthetic import synthetic_characters_fast, write_synthetic_runs  # noqa: E402

from harness.audit.statistics import compute_tables  # noqa: E402
from harness.config import StatsConfig  # noqa: E402
from harness.report import build_report  # noqa: E402

MiB = 2**20
FILLER = ("the and of to a in was she he they said class work teacher student manager worker "
          "partner love day home time school office project night morning city friend family").split()
CUES = ["Native American", "Inuit", "Navajo", "Cherokee", "Gay", "Transgender", "Pacific Islander"]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Peak:
    """Wall time and peak RSS of a block (RSS sampled on a thread every 20 ms)."""

    def __enter__(self):
        self.start_rss = self.peak = rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._sample, daemon=True)
        self._t.start()
        self.t0 = time.perf_counter()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss())
        return False


def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def story_texts(n: int, rng: np.random.Generator, pool: int = 400, words: int = 90) -> np.ndarray:
    """``n`` stories drawn from a pool of ``pool`` distinct ~90-word texts, 1 in 40 with a cue term."""
    texts = []
    for i in range(pool):
        w = list(rng.choice(FILLER, size=words))
        if i % 40 == 0:
            w.insert(int(rng.integers(words)), CUES[(i // 40) % len(CUES)])
        texts.append(" ".join(w).capitalize() + ".")
    return np.array(texts, dtype=object)[rng.integers(pool, size=n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stories", type=int, default=500_000, help="stories in all (split evenly over --models)")
    ap.add_argument("--models", type=int, default=5)
    ap.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates in principled mode")
    ap.add_argument("--tracemalloc", action="store_true", help="also measure tracemalloc peaks (a second, slower pass)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories and report here")
    ap.add_argument("--no-write", action="store_true", help="print only; leave benchmarks/RESULTS.md alone")
    a = ap.parse_args(argv)

    load_start = os.getloadavg()[0]
    models = [f"model-{chr(ord('a') + i)}" for i in range(a.models)]
    per_model = a.stories // a.models
    base_rss = rss()
    with Peak() as build:
        chars = synthetic_characters_fast(per_model, models=models, seed=0)
    n_stories = chars.story_id.nunique()
    print(f"corpus: {n_stories:,} stories, {len(chars):,} characters, {chars.first_name.nunique():,} first names; "
          f"built in {build.seconds:.1f}s; table {chars.memory_usage(deep=True).sum() / MiB:.0f} MiB")

    paper_cfg = StatsConfig(mode="paper")
    princ_cfg = StatsConfig(mode="principled", n_boot=a.n_boot)
    results = {}
    with Peak() as p:
        tables = compute_tables(chars, paper_cfg)
    results["statistics (paper)"] = p
    print(f"compute_tables paper: {p.seconds:.1f}s, peak RSS {p.peak / MiB:.0f} MiB (+{(p.peak - p.start_rss) / MiB:.0f})")
    with Peak() as p:
        compute_tables(chars, princ_cfg)
    results[f"statistics (principled, n_boot={a.n_boot})"] = p
    print(f"compute_tables principled n_boot={a.n_boot}: {p.seconds:.1f}s, peak RSS {p.peak / MiB:.0f} MiB (+{(p.peak - p.start_rss) / MiB:.0f})")

    tmp = Path(tempfile.mkdtemp(prefix="bench-report-")) if a.keep is None else a.keep
    try:
        rng = np.random.default_rng(0)
        runs = write_synthetic_runs(tmp / "runs", chars, tables, texts=lambda n: story_texts(n, rng),
                                    labellers={m: {"labeller": "synthetic"} for m in models})
        with Peak() as p:
            index = build_report(runs, tmp / "report")
        results["report (build_report, 5 runs)" if a.models == 5 else f"report (build_report, {a.models} runs)"] = p
        size = sum(f.stat().st_size for f in (tmp / "report").rglob("*") if f.is_file())
        print(f"build_report: {p.seconds:.1f}s, peak RSS {p.peak / MiB:.0f} MiB (+{(p.peak - p.start_rss) / MiB:.0f}); "
              f"report {size / MiB:.1f} MiB at {index}")

        traced = {}
        if a.tracemalloc:
            traced["statistics (paper)"] = traced_peak(lambda: compute_tables(chars, paper_cfg))
            print(f"tracemalloc peak, compute_tables paper: {traced['statistics (paper)'] / MiB:.0f} MiB")
            key = next(k for k in results if k.startswith("report"))
            traced[key] = traced_peak(lambda: build_report(runs, tmp / "report-traced"))
            print(f"tracemalloc peak, build_report: {traced[key] / MiB:.0f} MiB")
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)

    load_end = os.getloadavg()[0]
    total = sum(p.seconds for k, p in results.items() if "principled" not in k)
    total_p = sum(p.seconds for k, p in results.items() if "paper" not in k)
    peak_all = max(p.peak for p in results.values())
    met = max(total, total_p) < 600
    rows = "\n".join(
        f"| {k} | {p.seconds:.1f} | {p.peak / MiB:,.0f} | {(p.peak - p.start_rss) / MiB:+,.0f} |"
        + (f" {(f'{traced[k] / MiB:,.0f}' if k in traced else '')} |" if traced else "") for k, p in results.items())
    head = "| phase | seconds | peak RSS (MiB) | RSS increase in phase (MiB) |" + (" tracemalloc peak (MiB) |" if traced else "")
    rule = "|---" * (5 if traced else 4) + "|"
    md = f"""## Statistics and report at 500,000 stories (issue 7)

Machine: {machine_description()}. Command: `python benchmarks/report.py --stories {a.stories} --models {a.models} --n-boot {a.n_boot}{' --tracemalloc' if a.tracemalloc else ''}`.

Corpus: synthetic labelled characters (`tests/audit/synthetic.py: synthetic_characters_fast`), {a.models} models x {per_model:,} stories = {n_stories:,} stories, {len(chars):,} characters, {chars.first_name.nunique():,} distinct first names (10% unnamed); built in {build.seconds:.1f} s. `compute_tables` runs once over the whole table (all models); `build_report` reads {a.models} run directories (one per model, each with its statistics tables and {per_model:,} ~90-word stories for the cue search) and writes figures, tables and `index.html`. Principled mode: bootstrap CIs with n_boot = {a.n_boot} (exact p and BH FDR included).

{head}
{rule}
{rows}

Load average (1 min) at start and end: {load_start:.1f} / {load_end:.1f} on {os.cpu_count()} cores (other work shared the machine; times on an idle machine are lower). Process RSS before the corpus was built: {base_rss / MiB:,.0f} MiB (imports). Statistics (paper) + report: {total:.0f} s; statistics (principled, n_boot = {a.n_boot}) + report: {total_p:.0f} s; peak RSS {peak_all / MiB:,.0f} MiB. Target "statistics and report for 500,000 labelled stories finish in minutes on one machine": {'met' if met else 'NOT met'} ({'under' if met else 'over'} 10 minutes for each mode).
"""
    print(md)
    if not a.no_write:
        write_section("report", md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
