"""The homogeneity stage: generations of a run directory -> embeddings -> tables.

``generate_homogeneity(cfg)`` runs the generation pipeline and then tops up every prompt
whose usable (non-refused, non-empty) texts fall short of the target, re-calling
``generate_run`` with the short prompts and an extended ``samples_per_prompt``: the run
store generates only the missing keys, and refused rows stay on disk, flagged.

``run_homogeneity(run_dir)`` reads the generations, flags refusals, keeps the first
``target`` usable texts per prompt, embeds them (cached, resumable), computes the per-cell
sufficient statistics with ``harness.kernels.homogeneity`` and writes tidy tables under
``<run>/homogeneity/<embedder>/``:

    cells.csv              per prompt: texts, pairs, sum, sum of squares, raw and z mean / SD
    groups.csv             Table 2: mean and SD of z (and raw) cosine by race x gender, race, gender
    coefficients.csv       Table 3: four REML models, estimate, SE, Satterthwaite df, t, p, CI
    variances.csv          variance components, REML log-likelihood, convergence
    lrt.csv                Table A3: Type-3 likelihood-ratio tests (ML, sum coding)
    simple_effects.csv     Table A4: Women - Men within each race (asymptotic z)
    welch.csv              A.2.3-4: each race against White, one-sided Welch t on the raw pair cosines
    text_coefficients.csv  the same coefficients with text-level bootstrap SE / CI (+ permutation p)
    text_group_means.csv   group means of z with text-level bootstrap CIs
    permutation.csv        text-level permutation tests (when n_perm > 0)
    cell_mean_models.csv   the four models on cell means (one observation per prompt)
    extreme_pairs.csv      the most and least similar pairs of each prompt, with their texts
    pair_hist.parquet      per prompt histogram of pair cosines (non-empty bins)
    summary.json           standardisation, settings, counts, file list

plus ``<run>/homogeneity/texts.parquet`` (every generation with its flags) and
``refusals.csv`` (refusals by race, gender and format: a result in its own right).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import ConfigError, DataError
from harness.homogeneity.embed import EmbedderSpec, EmbeddingCache, get_spec
from harness.homogeneity.followup import welch_table
from harness.homogeneity.inference import text_inference
from harness.homogeneity.mixed import fit_paper_models
from harness.homogeneity.refusal import flag_refusals, plan_topup, refusal_table, select_usable
from harness.store import atomic_write, atomic_write_text, run_folder

OUT = "homogeneity"
FACTORS = ("race", "gender", "format")


# ============================================================================ generation + top-up


@dataclass(frozen=True)
class TopUpSummary:
    """Rounds of top-up generation and what is still short afterwards."""

    target: int
    rounds: int
    generated: int
    still_short: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "rounds": self.rounds, "generated": self.generated, "still_short": dict(self.still_short)}


def check_topup(cfg, *, target: int, refusal, max_rounds: int) -> None:
    """Refuse, before a backend loads, what the top-up would only refuse after generating: another suite, an
    unknown refusal filter, fewer than two texts per prompt, a negative number of rounds."""
    from harness.homogeneity.refusal import get_filter

    if cfg.suite != "homogeneity":
        raise ConfigError(f"suite {cfg.suite!r}: the homogeneity top-up takes a config with suite: homogeneity; "
                          "run other suites with harness run")
    get_filter(refusal)
    if target < 2:
        raise ConfigError(f"target must be at least 2 texts per prompt (pairs need two), got {target}; raise "
                          "samples_per_prompt or give the target")
    if max_rounds < 0:
        raise ConfigError(f"max_rounds must be 0 or more top-up rounds, got {max_rounds}")


def generate_homogeneity(cfg, *, target: int | None = None, refusal="authors", max_rounds: int = 5, backend=None,
                         progress: bool = True) -> TopUpSummary:
    """Generate ``cfg`` (suite "homogeneity"), then top up refused/empty samples until each
    prompt has ``target`` usable texts (default ``cfg.samples_per_prompt``) or ``max_rounds``
    rounds have run. One backend serves every round."""
    from harness.generation import load_backend
    from harness.pipeline import GENERATIONS, generate_run, select_prompts
    from harness.store import RunStore
    from harness.suites import get_suite

    target = cfg.samples_per_prompt if target is None else target
    check_topup(cfg, target=target, refusal=refusal, max_rounds=max_rounds)
    suite = get_suite(cfg.suite, cfg.wording)
    ids = [p.id for p in select_prompts(cfg, suite)]
    own = backend is None
    backend = backend or load_backend(cfg.model, seed=cfg.seed)
    generated, rounds = 0, 0
    try:
        generated += generate_run(cfg, backend=backend, progress=progress).generated
        plan = None
        for rounds in range(1, max_rounds + 1):
            df = RunStore(cfg.output_dir).read_stage(GENERATIONS)
            plan = plan_topup(flag_refusals(df[df["prompt_id"].isin(ids)], refusal), target, ids)
            if plan.done:
                rounds -= 1
                break
            for n, pids in sorted(plan.groups.items()):
                sub = cfg.model_copy(update={"prompts": pids, "samples_per_prompt": n})
                # the run's plan stays cfg's in run.json: a round is a few prompts' extra samples
                generated += generate_run(sub, backend=backend, progress=progress, plan_config=cfg).generated
        else:
            df = RunStore(cfg.output_dir).read_stage(GENERATIONS)
            plan = plan_topup(flag_refusals(df[df["prompt_id"].isin(ids)], refusal), target, ids)
    finally:
        if own:
            backend.close()
    return TopUpSummary(target, rounds, generated, dict(plan.need) if plan else {})


# ============================================================================ reading a run


def load_texts(run_dir: Path | str, *, refusal="authors", target: int | None = None, suite=None) -> pd.DataFrame:
    """Every generation of the run with race / gender / format, refusal flags and
    ``included`` (the first ``target`` usable texts of each prompt)."""
    from harness.store import RunStore
    from harness.suites import get_suite

    store = RunStore(run_dir)
    df = store.read_stage("generations")
    if df.empty:
        raise DataError(f"{store.root}/generations: no generations; run `harness run` on a homogeneity config first")
    if suite is None:
        m = store.read_manifest().get("config", {})
        suite = get_suite(m.get("suite", "homogeneity"), m.get("wording"))
    meta = pd.DataFrame([{"prompt_id": p.id, **{k: p.meta.get(k) for k in FACTORS}} for p in suite])
    if meta[list(FACTORS)].isna().any().any():
        raise DataError(f"suite {suite.name}: prompts lack race/gender/format metadata; is this a homogeneity run?")
    unknown = sorted(set(df["prompt_id"]) - set(meta["prompt_id"]))
    if unknown:
        raise DataError(f"{store.root}/generations: prompt ids {unknown[:3]} are not in suite {suite.name}")
    df = df.drop(columns=[c for c in FACTORS if c in df.columns]).merge(meta, on="prompt_id", how="left")
    flagged = flag_refusals(df, refusal)
    flagged["included"] = select_usable(flagged, target).to_numpy()
    return flagged


def write_texts(texts: pd.DataFrame, out: Path) -> None:
    """``texts.parquet`` (every generation with its flags, without the prompt) and ``refusals.csv`` into ``out``,
    each synced by its rename."""
    texts = texts.drop(columns=[c for c in ("prompt",) if c in texts.columns])
    atomic_write(out / "texts.parquet", lambda tmp: texts.to_parquet(tmp, index=False))
    atomic_write(out / "refusals.csv", lambda tmp: refusal_table(texts).to_csv(tmp, index=False))


def suite_levels(suite) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Factor levels in suite order and the reference levels (White, man)."""
    levels: dict[str, list[str]] = {"race": [], "gender": []}
    refs = {"race": "White", "gender": "man"}
    for p in suite:
        for k in levels:
            if p.meta[k] not in levels[k]:
                levels[k].append(p.meta[k])
        refs = p.meta.get("reference", refs)
    return levels, dict(refs)


# ============================================================================ statistics


def _sufficient_stats(x: np.ndarray, cell: np.ndarray, n_cells: int, backend: str):
    """Per-cell pair count, sum and sum of squares (the one call into the kernel module)."""
    from harness.kernels import homogeneity as hk

    return hk.group_stats(x, cell, n_groups=n_cells, backend=backend)


def cell_table(texts: pd.DataFrame, x: np.ndarray, *, backend: str = "auto", cell_order: Sequence[tuple] | None = None):
    """Per-cell sufficient statistics of the included texts (rows of ``x`` align with ``texts``).

    Returns (cells DataFrame of the cells with a pair, each text's row in it (-1: its cell has no pair, a prompt
    with one usable text), GroupStats of every cell with a text). The rows were renumbered after the cells
    without a pair were dropped and the texts' were not: every text after such a cell was read as the next
    cell's, in the text bootstrap, the permutations and the extreme pairs.
    """
    keys = list(zip(*(texts[k] for k in FACTORS)))
    present = set(keys)
    # only cells that have texts (the kernel's reference path rejects trailing empty groups)
    order = [k for k in dict.fromkeys(list(cell_order or []) + keys) if k in present]
    pos = {k: i for i, k in enumerate(order)}
    cell = np.array([pos[k] for k in keys], dtype=np.int64)
    gs = _sufficient_stats(x, cell, len(order), backend)
    cells = pd.DataFrame(order, columns=list(FACTORS))
    cells["n_texts"] = gs.n
    cells["n_pairs"] = gs.n_pairs
    cells["sum"] = gs.sum
    cells["sumsq"] = gs.sumsq
    with np.errstate(invalid="ignore", divide="ignore"):
        cells["mean_raw"] = gs.sum / gs.n_pairs
        cells["sd_raw"] = np.sqrt(np.maximum(gs.sumsq - gs.n_pairs * cells["mean_raw"] ** 2, 0) / (gs.n_pairs - 1))
    paired = cells["n_pairs"].to_numpy() > 0
    row = np.full(len(order), -1, dtype=np.int64)
    row[paired] = np.arange(int(paired.sum()))
    return cells[paired].reset_index(drop=True), row[cell] if len(cell) else cell, gs


def group_table(cells: pd.DataFrame, st) -> pd.DataFrame:
    """Table 2: mean and SD (n - 1) of the z-scored (and raw) cosine by race x gender, race, gender."""
    rows = []
    for by in (("race", "gender"), ("race",), ("gender",)):
        for lv, g in cells.groupby(list(by), sort=False):
            n, s, q = g["n_pairs"].sum(), g["sum"].sum(), g["sumsq"].sum()
            mean = s / n
            var = max(q - n * mean * mean, 0.0) / (n - 1) if n > 1 else np.nan
            lv = lv if isinstance(lv, tuple) else (lv,)
            rows.append({"grouping": " x ".join(by), "race": dict(zip(by, lv)).get("race", "all"),
                         "gender": dict(zip(by, lv)).get("gender", "all"), "n_cells": len(g), "n_pairs": int(n),
                         "mean_z": (mean - st.mean) / st.sd, "sd_z": np.sqrt(var) / st.sd,
                         "mean_raw": mean, "sd_raw": np.sqrt(var)})
    return pd.DataFrame(rows)


def _pair_tables(x, cell, cells, texts, st, backend: str, top_k: int):
    from harness.kernels import homogeneity as hk

    ps = hk.pair_stats(x, cell, n_groups=int(cell.max()) + 1, backend=backend, top_k=top_k, explicit_max_n=0)
    tx = texts["text_clean"].to_numpy()
    rows, hist = [], []
    key_of = {i: tuple(r) for i, r in enumerate(zip(*(cells[k] for k in FACTORS)))}
    for c, key in key_of.items():
        for kind, vals, pairs in (("most", ps.top_values, ps.top_pairs), ("least", ps.bottom_values, ps.bottom_pairs)):
            for rank in range(top_k):
                i, j = pairs[c, rank]
                if i < 0:
                    continue
                rows.append({**dict(zip(FACTORS, key)), "kind": kind, "rank": rank + 1, "cosine": vals[c, rank],
                             "z": (vals[c, rank] - st.mean) / st.sd,
                             "prompt_id_a": texts["prompt_id"].iat[i], "sample_idx_a": int(texts["sample_idx"].iat[i]),
                             "prompt_id_b": texts["prompt_id"].iat[j], "sample_idx_b": int(texts["sample_idx"].iat[j]),
                             "text_a": tx[i], "text_b": tx[j]})
        nz = np.flatnonzero(ps.hist[c])
        hist.append(pd.DataFrame({**{k: v for k, v in zip(FACTORS, key)}, "bin_low": ps.bin_edges[nz],
                                  "bin_high": ps.bin_edges[nz + 1], "count": ps.hist[c, nz]}))
    return pd.DataFrame(rows), (pd.concat(hist, ignore_index=True) if hist else pd.DataFrame())


@dataclass(frozen=True)
class EmbedderOutputs:
    """Where one embedder's tables went, and the headline numbers."""

    embedder: str
    out_dir: Path
    files: tuple[str, ...]
    n_texts: int
    n_pairs: int
    seconds: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"embedder": self.embedder, "out_dir": str(self.out_dir), "files": list(self.files),
                "n_texts": self.n_texts, "n_pairs": self.n_pairs, "seconds": self.seconds}


#: Every table ``analyse_embeddings`` may write into an embedder's folder: those a later analysis does not write
#: (no bootstrap, no permutations, no pairs) are deleted, or a report would read them as the later analysis's.
TABLE_FILES = ("cells.csv", "groups.csv", "coefficients.csv", "variances.csv", "lrt.csv", "simple_effects.csv", "welch.csv",
               "text_coefficients.csv", "text_group_means.csv", "cell_mean_models.csv", "permutation.csv",
               "extreme_pairs.csv", "pair_hist.parquet")


def texts_fingerprint(texts: pd.DataFrame) -> str:
    """Which texts an analysis read: the sha256 of their sorted keys (prompt id, sample index)."""
    keys = sorted(f"{p}#{i}" for p, i in zip(texts["prompt_id"], texts["sample_idx"]))
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def analyse_embeddings(x: np.ndarray, texts: pd.DataFrame, out_dir: Path | str, *, levels=None, refs=None,
                       n_boot: int = 1000, n_perm: int = 0, seed: int = 0, backend: str = "auto", top_k: int = 3,
                       pairs: bool = True, cell_order=None, alpha: float = 0.05,
                       selection: dict[str, Any] | None = None) -> tuple[list[str], dict[str, float]]:
    """Statistics of embedded texts (rows of ``x`` = rows of ``texts``, with race / gender /
    format columns): writes the tables into ``out_dir``; returns (file names, seconds per step).
    ``selection`` (the target and refusal filter that chose the texts) goes into ``summary.json`` with the
    texts' count and fingerprint, which the report compares across a run's embedders."""
    out = run_folder(out_dir)
    secs: dict[str, float] = {}
    t = time.perf_counter()
    cells, cell, _ = cell_table(texts, x, backend=backend, cell_order=cell_order)
    paired = cell >= 0  # a text alone in its cell has no pair: no part of any text-level table
    read = texts  # what the analysis read, for summary.json: the texts of a prompt short of two too
    x, cell, texts = x[paired], cell[paired], texts[paired].reset_index(drop=True)
    secs["sufficient_stats"] = time.perf_counter() - t
    if len(cells) < 2:
        raise DataError(f"{out}: fewer than two prompts with two usable texts; nothing to compare")
    t = time.perf_counter()
    try:
        suite = fit_paper_models(cells, levels=levels, refs=refs, alpha=alpha)
    except DataError as e:  # named an internal function, after the embedding, with no way out
        raise DataError(f"{out}: {len(cells)} prompts with {int(cells['n_pairs'].sum())} pairs of texts are too few "
                        f"for the mixed models ({str(e).removeprefix('fit_lmm: ')}); analyse more prompts (the "
                        f"suite's race x gender x format cells) or more texts per prompt") from None
    st = suite.standardization
    secs["mixed_models"] = time.perf_counter() - t
    cells["mean_z"] = (cells["mean_raw"] - st.mean) / st.sd
    cells["sd_z"] = cells["sd_raw"] / st.sd
    tables: dict[str, pd.DataFrame] = {
        "cells.csv": cells, "groups.csv": group_table(cells, st), "coefficients.csv": suite.coefficients,
        "variances.csv": suite.variances, "lrt.csv": suite.lrt, "simple_effects.csv": suite.simple_effects,
        "welch.csv": welch_table(cells, reference=(refs or {}).get("race")),
    }
    t = time.perf_counter()
    if n_boot:
        ti = text_inference(x, cell, cells, suite, n_boot=n_boot, n_perm=n_perm, seed=seed, alpha=alpha,
                            levels=levels, refs=refs)
        tables.update({"text_coefficients.csv": ti.coefficients, "text_group_means.csv": ti.group_means,
                       "cell_mean_models.csv": ti.cell_mean_models})
        if n_perm:
            tables["permutation.csv"] = ti.permutation
    secs["text_inference"] = time.perf_counter() - t
    t = time.perf_counter()
    if pairs:
        ext, hist = _pair_tables(x, cell, cells, texts, st, backend, top_k)
        tables["extreme_pairs.csv"] = ext
        tables["pair_hist.parquet"] = hist
    secs["pair_tables"] = time.perf_counter() - t
    (out / "summary.json").unlink(missing_ok=True)  # killed from here on, the folder reads as no analysis
    for name in TABLE_FILES:
        if name not in tables:
            (out / name).unlink(missing_ok=True)
    for name, df in tables.items():  # each synced by its rename, summary.json last: the stage records them current next
        write = df.to_csv if name.endswith(".csv") else df.to_parquet
        atomic_write(out / name, lambda tmp, write=write: write(tmp, index=False))
    chosen = {"n": int(len(read)), "sha256": texts_fingerprint(read), "without_pair": int((~paired).sum()),
              **(selection or {})}
    if isinstance(chosen.get("target"), int):  # prompts the top-up left short: analysed with what they have
        chosen["prompts_short_of_target"] = int((read.groupby("prompt_id").size() < chosen["target"]).sum())
    summary = {"texts": chosen, "standardization": st.to_dict(), "n_texts": int(len(texts)), "n_cells": int(len(cells)),
               "n_pairs": int(cells["n_pairs"].sum()), "n_boot": n_boot, "n_perm": n_perm, "seed": seed,
               "alpha": alpha, "backend": backend, "seconds": {k: round(v, 3) for k, v in secs.items()},
               "models_converged": bool(suite.variances["converged"].all()), "files": sorted(tables)}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
    return sorted(tables) + ["summary.json"], secs


def run_homogeneity(
    run_dir: Path | str, *, embedders: Sequence[str | EmbedderSpec] = ("minilm-l6",), refusal="authors",
    target: int | None = None, n_boot: int = 1000, n_perm: int = 0, seed: int = 0, backend: str = "auto",
    device: str | None = "auto", batch_size: int = 64, cache_dtype: str = "float16", top_k: int = 3,
    pairs: bool = True, suite=None, progress: bool = False,
) -> list[EmbedderOutputs]:
    """The whole homogeneity analysis of one run directory (see the module docstring).

    ``embedders``: preset names of ``harness.homogeneity.embed.EMBEDDERS`` or specs;
    ``target``: texts per prompt (default: every usable text); ``n_boot`` / ``n_perm``:
    text-level bootstrap and permutation replicates (0 = skip); ``backend``: the kernel
    backend ("auto", "numpy", "triton", "cupy").

    It writes into the folder of ``harness run``'s statistics stage, so it holds that stage's writer lock
    (a second job stops) and forgets the stage's record before it writes: the next ``harness run`` makes the
    tables of its config again rather than skip them as current over the tables of these options.
    """
    from harness.audit.stages import mark_stale, writing_alone
    from harness.store import RunStore
    from harness.suites import get_suite

    run_dir = Path(run_dir)
    store = RunStore(run_dir)
    if suite is None:
        m = store.read_manifest().get("config", {})
        suite = get_suite(m.get("suite", "homogeneity"), m.get("wording"))
    texts_all = load_texts(run_dir, refusal=refusal, target=target, suite=suite)
    out_root = run_dir / OUT
    levels, refs = suite_levels(suite)
    cell_order = [tuple(p.meta[k] for k in FACTORS) for p in suite]
    results = []
    with writing_alone(store, OUT):
        mark_stale(store, OUT)
        write_texts(texts_all, out_root)
        texts = texts_all[texts_all["included"]].reset_index(drop=True)
        if texts.empty:
            raise DataError(f"{run_dir}: no usable texts after the refusal filter")
        for e in embedders:
            spec = get_spec(e) if isinstance(e, str) else e
            t = time.perf_counter()
            cache = EmbeddingCache(run_dir, spec, dtype=cache_dtype)
            cb = (lambda i, n: print(f"embedded {i}/{n}")) if progress else None
            cache.embed(texts, texts["text_clean"].tolist(), device=device, batch_size=batch_size, progress=cb)
            x = cache.load(texts, texts["text_clean"].tolist())
            embed_s = time.perf_counter() - t
            files, secs = analyse_embeddings(x, texts, out_root / spec.name, levels=levels, refs=refs, n_boot=n_boot,
                                             n_perm=n_perm, seed=seed, backend=backend, top_k=top_k, pairs=pairs,
                                             cell_order=cell_order,
                                             selection={"target": target, "refusal": getattr(refusal, "name", str(refusal))})
            secs = {"embed": embed_s, **secs}
            results.append(EmbedderOutputs(spec.name, out_root / spec.name, tuple(files), len(texts),
                                           int(pd.read_csv(out_root / spec.name / "cells.csv")["n_pairs"].sum()), secs))
    return results


__all__ = ["EmbedderOutputs", "TopUpSummary", "analyse_embeddings", "cell_table", "generate_homogeneity",
           "group_table", "load_texts", "run_homogeneity", "suite_levels"]
