"""Benchmark: first-name likelihood lookups per second (1,000,000 names), and table coverage.

Run standalone: ``python benchmarks/names_lookup.py [--n 1000000] [--table PATH] [--no-write]`` (builds the
table in the user cache if it is missing). Compares the vectorised ``NameTable.lookup`` with a per-name Python
loop over a dict (the obvious hand-written alternative), both measured in this run, and reports the coverage of
the table on the manual names of ``../shared/data/laissez_faire_audit_dev.jsonl`` when that file sits beside the
repository. Writes the ``names`` section of ``benchmarks/RESULTS.md`` (not with ``--no-write``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from _results import machine_description, write_section  # noqa: E402
from harness.identity import RACES  # noqa: E402
from harness.identity.build import build_table, default_table_path, name_key  # noqa: E402
from harness.identity.names import NameTable, first_names_from_jsonl  # noqa: E402

N = 1_000_000
N_LOOP = 100_000          # the Python loop is timed on a prefix and reported per name
REPEATS = 5
DEV = ROOT.parent / "shared" / "data" / "laissez_faire_audit_dev.jsonl"


def workload(dev_names: list[str], n: int = N) -> np.ndarray:
    """``n`` first names: the dev-set names in their observed frequencies, plus 5% unknown strings."""
    rng = np.random.default_rng(0)
    pool = dev_names or ["Sarah", "John", "Emily", "Maria", "Juan", "Jamal", "Priya", "Ahmed", "Lily", "Jake"]
    names = rng.choice(np.array(pool, dtype=object), n)
    unknown = rng.random(n) < 0.05
    names[unknown] = np.array([f"Zq{i}x" for i in range(int(unknown.sum()))], dtype=object)
    return names


def python_loop(table: pd.DataFrame, names: np.ndarray) -> list:
    """Baseline: normalise each name in Python and look it up in a dict of row tuples."""
    import unicodedata

    rows = dict(zip(table.index, table[list(RACES)].itertuples(index=False, name=None)))
    empty = (float("nan"),) * len(RACES)
    out = []
    for n in names:
        k = "".join(c for c in unicodedata.normalize("NFKD", n).encode("ascii", "ignore").decode().upper()
                    if "A" <= c <= "Z")
        out.append(rows.get(k, empty))
    return out


def timed(fn, repeats: int = REPEATS) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=N, help="names looked up by the vectorised path")
    ap.add_argument("--table", type=Path, default=None, help="the first-name table (default: the user cache's)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args(argv)
    n, n_loop = args.n, min(N_LOOP, args.n)
    path = args.table or default_table_path()
    t0 = time.perf_counter()
    built = not path.exists()
    if built:
        build_table(path)
    nt = NameTable.load(path)
    load_s = time.perf_counter() - t0
    dev_names = first_names_from_jsonl(DEV) if DEV.exists() else []
    names = workload(dev_names, n)

    nt.lookup(names[:1000])  # warm the key index
    vec = timed(lambda: nt.lookup(names))
    vec_rate = n / statistics.median(vec)

    keys = sorted(set(name_key(names[:n_loop]).tolist()) - {""})
    keyed = nt.lookup(pd.Series(keys))
    keyed.index = keys
    loop = timed(lambda: python_loop(keyed, names[:n_loop]), repeats=3)
    loop_rate = n_loop / statistics.median(loop)

    # sanity: both paths agree on the prefix
    ref = np.array(python_loop(keyed, names[:n_loop]), dtype=float)
    got = nt.lookup(names[:n_loop])[list(RACES)].to_numpy()
    if not np.allclose(ref, got, equal_nan=True):
        raise SystemExit("vectorised lookup disagrees with the Python loop")

    lines = [
        "## First-name lookups (`benchmarks/names_lookup.py`)",
        "",
        f"Machine: {machine_description()}",
        f"Table: {nt.size:,} keys ({'built' if built else 'loaded'} in {load_s:.1f} s).",
        "",
        "| method | names | median s | names/s | vs loop |",
        "|---|---|---|---|---|",
        f"| `NameTable.lookup` (vectorised) | {n:,} | {statistics.median(vec):.3f} | {vec_rate:,.0f} | "
        f"{vec_rate / loop_rate:.1f}x |",
        f"| Python loop + dict (baseline) | {n_loop:,} | {statistics.median(loop):.3f} | {loop_rate:,.0f} | 1.0x |",
        "",
        f"Timings: median of {REPEATS} (loop: 3) runs; workload = dev-set first names in their observed "
        "frequencies plus 5% unknown strings. 500,000 stories with two characters each need "
        f"{1e6 / vec_rate:.2f} s of lookups.",
    ]
    if dev_names:
        lines += ["", "Coverage on the manual names of `laissez_faire_audit_dev.jsonl` "
                  "(paper reports 99.98% of characters with its sources):", "",
                  "| mode | distinct matched | occurrences matched | unmatched |", "|---|---|---|---|"]
        for mode in ("paper", "renormalised"):
            cov = NameTable.load(path, mode=mode).coverage(dev_names)
            lines.append(f"| {mode} | {cov.distinct_matched}/{cov.distinct} ({100 * cov.distinct_share:.2f}%) | "
                         f"{cov.occurrences_matched}/{cov.occurrences} ({100 * cov.occurrence_share:.2f}%) | "
                         f"{', '.join(cov.unmatched[:10]) or '-'} |")
    else:
        lines += ["", f"Coverage: skipped ({DEV.name} not found beside the repository)."]
    text = "\n".join(lines)
    if not args.no_write:
        write_section("names", text)
    print(text)
    return text


if __name__ == "__main__":
    main()
