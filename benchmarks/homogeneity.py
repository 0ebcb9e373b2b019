"""Homogeneity audit benchmark: MiniLM embeddings/s, and the statistics stage at 52,000 and
500,000 texts (time and peak memory per step).

    python benchmarks/homogeneity.py [--embed-texts 3000] [--sizes 52000 500000] [--boot 200]

The statistics stage (``analyse_embeddings``: sufficient statistics, the four mixed models with
LRTs and simple effects, text-level bootstrap, per-prompt extreme pairs and histograms, tables
written) runs on random unit vectors (d = 384, 104 prompts of equal size): the cost does not
depend on what the vectors mean. Each size runs in a fresh process, so its peak RSS is its
own; the tracemalloc peak (NumPy allocations included) is given beside it. Embedding
throughput is measured on a sample of synthetic 27-word texts and extrapolated to the corpus
sizes (labelled as such).
Results go to the ``homogeneity`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import subprocess
import tempfile
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_description, write_section  # noqa: E402

RACES, GENDERS = ["African", "Asian", "Hispanic", "White"], ["man", "woman"]
WORDS = ("he she walked through the city with hope and courage dreaming of a better world family heritage music "
         "food love laughter journey friends community strength resilience sunrise river mountain story").split()


def measure(fn):
    gc.collect()
    tracemalloc.start()
    t = time.perf_counter()
    out = fn()
    secs = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, secs, peak


def embed_rate(n_texts: int, batch_size: int) -> tuple[float, float]:
    from harness.homogeneity.embed import Embedder, get_spec

    rnd = random.Random(0)
    texts = [" ".join(rnd.choice(WORDS) for _ in range(27)).capitalize() + "." for _ in range(n_texts)]
    t = time.perf_counter()
    emb = Embedder(get_spec("minilm-l6"), device="cpu")
    load = time.perf_counter() - t
    emb.encode(texts[:batch_size], batch_size=batch_size)  # warm-up
    t = time.perf_counter()
    emb.encode(texts, batch_size=batch_size)
    return n_texts / (time.perf_counter() - t), load


def synthetic(n_texts: int, d: int = 384, seed: int = 0):
    rng = np.random.default_rng(seed)
    per = n_texts // 104
    x = rng.standard_normal((per * 104, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    keys = [(r, g, f"f{f:02d}") for r in RACES for g in GENDERS for f in range(13)]
    texts = pd.DataFrame(np.repeat(np.array(keys, dtype=object), per, axis=0), columns=["race", "gender", "format"])
    texts["prompt_id"] = texts["race"] + "-" + texts["gender"] + "-" + texts["format"]
    texts["sample_idx"] = np.tile(np.arange(per), 104)
    texts["text_clean"] = "synthetic"
    return x, texts


def stats_stage(n_texts: int, n_boot: int) -> dict:
    """The whole statistics stage of ``harness run`` on ``n_texts`` synthetic unit vectors."""
    from harness.homogeneity.stage import analyse_embeddings

    x, texts = synthetic(n_texts)
    row = {"texts": len(x), "pairs": 104 * (len(x) // 104) * (len(x) // 104 - 1) // 2, "input_MB": x.nbytes / 2**20,
           "boot_B": n_boot, "rss_before_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with tempfile.TemporaryDirectory() as out:
        (_, secs), row["total_s"], peak = measure(
            lambda: analyse_embeddings(x, texts, out, n_boot=n_boot, seed=0, backend="numpy", top_k=3))
    row.update({f"{k}_s": v for k, v in secs.items()})
    row["tracemalloc_peak_MB"] = peak / 2**20
    row["peak_rss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def stats_stage_subprocess(n_texts: int, n_boot: int) -> dict:
    """``stats_stage`` in a fresh interpreter (a clean peak RSS per size)."""
    r = subprocess.run([sys.executable, __file__, "--child", str(n_texts), "--boot", str(n_boot)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        raise SystemExit(f"statistics stage at {n_texts} texts failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embed-texts", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--sizes", type=int, nargs="+", default=[52_000, 500_000])
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(stats_stage(a.child, a.boot)))
        return
    rate, load = embed_rate(a.embed_texts, a.batch_size)
    gc.collect()
    print(f"MiniLM: {rate:.1f} texts/s ({a.embed_texts} texts, batch {a.batch_size}); load {load:.1f} s", flush=True)
    rows = []
    for n in a.sizes:
        r = stats_stage_subprocess(n, a.boot)
        print(r, flush=True)
        rows.append(r)
    md = [
        "## Homogeneity audit (`benchmarks/homogeneity.py`)", "",
        f"Machine: {machine_description()}.", "",
        f"**Embeddings (measured):** all-MiniLM-L6-v2 (sentence-transformers, CPU, fp32, batch {a.batch_size}) "
        f"embeds **{rate:.0f} texts/s** on {a.embed_texts} synthetic 27-word texts (model load {load:.1f} s).", "",
        "**Embeddings (extrapolated from that rate, not measured):** "
        + "; ".join(f"{n:,} texts ≈ {n / rate / 60:.0f} min" for n in a.sizes) + ".", "",
        "**Statistics stage (measured)** of `harness run` (`analyse_embeddings`, the whole stage: per-prompt "
        "sufficient statistics from `harness.kernels.homogeneity.group_stats`; the four REML models, Type-3 LRTs (ML) "
        f"and simple effects from those sums; a text-level Poisson bootstrap, B = {a.boot}, of every fixed effect and "
        "group mean; the per-prompt most/least similar pairs (top 3) and pair-cosine histograms from `pair_stats`; "
        "tables written). Input: **synthetic random unit vectors** (not embeddings of real texts), d = 384, float32, "
        "104 prompts of equal size, NumPy kernel backend. Each size runs in a fresh process: peak RSS is the "
        "process maximum (the imported libraries, torch among them, and the synthetic input included; "
        "the column before it is the same maximum just before the stage starts), tracemalloc peak the largest "
        "traced allocation total during the stage.", "",
        "| texts | within-prompt pairs | input N x d (MB) | sufficient stats (s) | 4 LMMs + LRTs (s) "
        "| bootstrap (s) | extreme pairs + histograms (s) | whole stage (s) | tracemalloc peak (MB) "
        "| RSS before the stage (MB) | peak RSS (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(f"| {r['texts']:,} | {r['pairs']:,} | {r['input_MB']:.0f} | {r['sufficient_stats_s']:.2f} "
                  f"| {r['mixed_models_s']:.2f} | {r['text_inference_s']:.1f} | {r['pair_tables_s']:.1f} "
                  f"| {r['total_s']:.1f} | {r['tracemalloc_peak_MB']:.0f} | {r['rss_before_MB']:.0f} | {r['peak_rss_MB']:.0f} |")
    if len(rows) > 1:
        a0, a1 = rows[0], rows[-1]
        md += ["", f"Memory scales with N d, not with the number of pairs: from {a0['texts']:,} to {a1['texts']:,} texts "
               f"the input grows {a1['input_MB'] / a0['input_MB']:.1f}x, the pairs {a1['pairs'] / a0['pairs']:.0f}x and "
               f"the traced peak {a1['tracemalloc_peak_MB'] / a0['tracemalloc_peak_MB']:.1f}x "
               f"({a1['tracemalloc_peak_MB'] / a1['input_MB']:.1f} x the input at {a1['texts']:,}). "
               f"A float32 pair table would need {a1['pairs'] * 4 / 2**30:.1f} GiB at {a1['texts']:,} texts."]
    md += ["", "The pair table (one row per within-prompt pair) is never formed: pairs are reduced block by block "
           "inside each prompt, and the mixed models see 104 x 3 numbers at any corpus size.",
           "", "**End to end (extrapolated):** embedding at the measured rate plus the measured statistics stage: "
           + "; ".join(f"{r['texts']:,} texts ≈ {r['texts'] / rate / 60:.0f} min embedding (extrapolated) + "
                       f"{r['total_s'] / 60:.1f} min statistics (measured)" for r in rows) + "."]
    text = "\n".join(md)
    print(text)
    if not a.no_write:
        write_section("homogeneity", text)


if __name__ == "__main__":
    main()
