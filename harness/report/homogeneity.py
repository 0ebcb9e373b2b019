"""The homogeneity report (seed 002, Lee, Montgomery and Lai, FAccT 2024): a static page built
from the ``homogeneity/<embedder>/`` tables of one or several run directories.

Tables (``tables/hom_*.csv`` and ``.parquet``): standardised cosine by group (Table 2), the four
mixed models' coefficients with SE, Satterthwaite df and CI next to text-level bootstrap SE and
CI (Table 3), Type-3 likelihood-ratio tests (Table A3), simple effects of gender within race
(Table A4), text-level group means, variance components and refusals. Figures: group means
with text-level intervals, coefficients (pair-level vs text-level intervals), and the most and
least similar pairs of each race x gender group (the kernel's per-prompt top-k, pooled over
formats). Each figure's data is saved beside it as CSV.
"""

from __future__ import annotations

import html
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.errors import DataError  # noqa: E402
from harness.report.figures import Figures, _save, finish_report, report_folder, write_tables  # noqa: E402
from harness.store import RunStore  # noqa: E402

STATS_DIR = "homogeneity"
#: table file in each embedder folder -> report table name
TABLES = {
    "groups.csv": "hom_groups",
    "coefficients.csv": "hom_coefficients",
    "text_coefficients.csv": "hom_text_coefficients",
    "lrt.csv": "hom_lrt",
    "simple_effects.csv": "hom_simple_effects",
    "welch.csv": "hom_welch",
    "text_group_means.csv": "hom_text_group_means",
    "variances.csv": "hom_variances",
    "extreme_pairs.csv": "hom_extreme_pairs",
    "cells.csv": "hom_cells",
}
REQUIRED = ("groups.csv", "coefficients.csv", "lrt.csv", "simple_effects.csv")
GENDER_COLOURS = {"man": "#1f77b4", "woman": "#d62728"}


def same_texts(dirs: list[Path]) -> None:
    """A DataError where two embedders' analyses of one run read different texts (another target or refusal
    filter: their summary.json say so), which a report would set side by side as one run's."""
    seen: dict[str, tuple[Path, dict]] = {}
    for d in dirs:
        texts = json.loads((d / "summary.json").read_text()).get("texts")
        if texts is None:  # written before summaries named their texts
            continue
        if seen and texts["sha256"] not in seen:
            (other, was), = list(seen.values())[:1]
            raise DataError(f"{d} and {other} analysed different texts ({texts['n']} vs {was['n']}; target "
                            f"{texts.get('target')} vs {was.get('target')}, refusal filter {texts.get('refusal')} vs "
                            f"{was.get('refusal')}); analyse both over the same texts, or delete the folder of one")
        seen.setdefault(texts["sha256"], (d, texts))


def load_run_tables(run: Path | str) -> tuple[dict, dict[str, pd.DataFrame]]:
    """(manifest, {report table name: stacked table}) of one run, a ``model`` and an
    ``embedder`` column first in every table."""
    run = Path(run)
    manifest = RunStore(run).read_run()
    model = manifest.get("config", {}).get("name", run.name)
    root = run / STATS_DIR
    dirs = sorted(p.parent for p in root.glob("*/summary.json"))
    if not dirs:
        raise DataError(f"{run}: no homogeneity tables; run `harness run CONFIG --stages statistics` first")
    same_texts(dirs)
    out: dict[str, list[pd.DataFrame]] = {}
    for d in dirs:
        missing = [f for f in REQUIRED if not (d / f).exists()]
        if missing:
            raise DataError(f"{d}: table(s) {', '.join(missing)} missing; rerun the statistics stage")
        for f, name in TABLES.items():
            if (d / f).exists():
                # the model tables' own "model" column is the formula (race, gender, race+gender, interaction)
                t = pd.read_csv(d / f).rename(columns={"model": "model_formula"})
                t.insert(0, "embedder", d.name)
                t.insert(0, "model", model)
                out.setdefault(name, []).append(t)
    if (root / "refusals.csv").exists():
        r = pd.read_csv(root / "refusals.csv")
        r.insert(0, "model", model)
        out["hom_refusals"] = [r]
    return manifest, {k: pd.concat(v, ignore_index=True) for k, v in out.items()}


def coefficient_table(coefs: pd.DataFrame, text: pd.DataFrame | None) -> pd.DataFrame:
    """Table 3 (estimate, SE, df, t, p, CI) with the text-level bootstrap SE and CI beside it."""
    if text is None or text.empty:
        return coefs
    keep = ["model", "embedder", "model_formula", "term", "se_text", "ci_low_text", "ci_high_text", "se_ratio"]
    return coefs.merge(text[[k for k in keep if k in text.columns]], on=["model", "embedder", "model_formula", "term"],
                       how="left")


# ============================================================================ figures


def group_means_figure(means: pd.DataFrame, path: Path) -> Path:
    """Mean standardised cosine by race x gender with text-level bootstrap intervals, one panel
    per run x embedder; higher = more homogeneous."""
    panels = list(dict.fromkeys(zip(means["model"], means["embedder"])))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.4), squeeze=False, sharey=True)
    for ax, (m, e) in zip(axes[0], panels):
        d = means[(means["model"] == m) & (means["embedder"] == e)]
        races = list(dict.fromkeys(d["race"]))
        for k, (g, dg) in enumerate(d.groupby("gender", sort=False)):
            x = np.array([races.index(r) for r in dg["race"]]) + (k - 0.5) * 0.25
            lo, hi = dg["ci_low_text"].to_numpy(float), dg["ci_high_text"].to_numpy(float)
            y = dg["mean_z"].to_numpy(float)
            ax.errorbar(x, y, yerr=[np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)], fmt="o", capsize=3,
                        color=GENDER_COLOURS.get(g), label=f"{g}")
        ax.axhline(0, color="k", lw=0.6, ls=":")
        ax.set_xticks(range(len(races)), [f"{r} Am." for r in races], fontsize=8)
        ax.set_title(f"{m} · {e}", fontsize=9)
    axes[0][0].set_ylabel("mean standardised cosine (z)\n95% text-level bootstrap CI", fontsize=8)
    axes[0][-1].legend(fontsize=7, title="gender", title_fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def coefficient_figure(coefs: pd.DataFrame, path: Path) -> Path:
    """Fixed effects of the four models (intercepts left out): estimate with the pair-level CI
    (thin) and the text-level bootstrap CI (thick), one row per term."""
    d = coefs[coefs["term"] != "(Intercept)"].reset_index(drop=True)
    labels = [f"{r.model} · {r.embedder} · {r.model_formula}: {r.term}" for r in d.itertuples()]
    fig, ax = plt.subplots(figsize=(7.5, 0.24 * len(d) + 1.2))
    y = np.arange(len(d))[::-1]
    ax.hlines(y, d["ci_low"], d["ci_high"], color="#555", lw=1, label="pair-level CI (paper)")
    if "ci_low_text" in d.columns and d["ci_low_text"].notna().any():
        ax.hlines(y, d["ci_low_text"], d["ci_high_text"], color="#e67e22", lw=3, alpha=0.6, label="text-level bootstrap CI")
    ax.plot(d["estimate"], y, "o", color="k", ms=3)
    ax.axvline(0, color="k", lw=0.6, ls=":")
    ax.set_yticks(y, labels, fontsize=6)
    ax.set_xlabel("coefficient (SD of standardised cosine; references White, man)", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _save(fig, path)


def extreme_pairs_by_group(pairs: pd.DataFrame, k: int | None = None) -> pd.DataFrame:
    """The ``k`` most and least similar pairs of each run x embedder x race x gender group, from
    the per-prompt top-k of the kernel (pooled over formats; default k = the per-prompt k)."""
    if pairs.empty:
        return pairs
    k = k or int(pairs["rank"].max())
    rows = []
    for _, g in pairs.groupby(["model", "embedder", "race", "gender"], sort=False):
        rows.append(g[g["kind"] == "most"].nlargest(k, "cosine"))
        rows.append(g[g["kind"] == "least"].nsmallest(k, "cosine"))
    out = pd.concat(rows, ignore_index=True)
    out["group_rank"] = out.groupby(["model", "embedder", "race", "gender", "kind"]).cumcount() + 1
    return out


def extreme_pairs_figure(ext: pd.DataFrame, path: Path) -> Path:
    """Standardised cosine of the most (triangles up) and least (triangles down) similar pairs
    of each race x gender group, one panel per run x embedder."""
    panels = list(dict.fromkeys(zip(ext["model"], ext["embedder"])))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.4), squeeze=False, sharey=True)
    for ax, (m, e) in zip(axes[0], panels):
        d = ext[(ext["model"] == m) & (ext["embedder"] == e)]
        groups = list(dict.fromkeys(zip(d["race"], d["gender"])))
        pos = {g: i for i, g in enumerate(groups)}
        for kind, marker in (("most", "^"), ("least", "v")):
            dk = d[d["kind"] == kind]
            x = np.array([pos[g] for g in zip(dk["race"], dk["gender"])], float)
            ax.scatter(x, dk["z"], marker=marker, c=[GENDER_COLOURS.get(g, "k") for g in dk["gender"]],
                       edgecolor="k", linewidth=0.3, s=26)
        ax.axhline(0, color="k", lw=0.6, ls=":")
        ax.set_xticks(range(len(groups)), [f"{r} {g}" for r, g in groups], fontsize=7, rotation=60, ha="right")
        ax.set_title(f"{m} · {e}", fontsize=9)
    axes[0][0].set_ylabel("pair cosine (z)", fontsize=8)
    handles = [plt.Line2D([], [], marker=m, ls="", color="#888", markeredgecolor="k", label=f"{k} similar")
               for k, m in (("most", "^"), ("least", "v"))]
    handles += [plt.Line2D([], [], marker="s", ls="", color=c, label=g) for g, c in GENDER_COLOURS.items()]
    axes[0][-1].legend(handles=handles, fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


# ============================================================================ report


def build_homogeneity_report(runs: list[Path | str], out: Path | str, *, title: str = "Homogeneity audit") -> Path:
    """Build the homogeneity report for ``runs`` into ``out``; returns the path of ``index.html``."""
    from harness.report import distinct_runs

    manifests, stacked = [], {}
    for run in distinct_runs(runs):
        m, tables = load_run_tables(run)
        manifests.append((run, m))
        for k, v in tables.items():
            stacked.setdefault(k, []).append(v)
    started = time.time()  # what this build writes is newer: finish_report deletes the rest
    out = report_folder(out)
    T = {k: pd.concat(v, ignore_index=True) for k, v in stacked.items()}
    T["hom_coefficients"] = coefficient_table(T["hom_coefficients"], T.pop("hom_text_coefficients", None))
    T["hom_group_means"] = _group_means(T["hom_groups"], T.get("hom_text_group_means"))
    ext = extreme_pairs_by_group(T.get("hom_extreme_pairs", pd.DataFrame()))
    T["hom_extreme_pairs_by_group"] = ext
    write_tables(out, T)

    figs = Figures(out)

    gm = T["hom_group_means"]
    figs.add("hom1_group_means", "Figure H1. Mean standardised within-prompt cosine by race and gender (higher = more "
        "homogeneous), with 95% text-level bootstrap intervals (pair-level intervals are far too narrow: each text "
        "sits in many pairs).", lambda p: group_means_figure(gm, p), gm)
    figs.add("hom2_coefficients", "Figure H2. Fixed effects of the four mixed models (references White, men): pair-level "
        "CI as in the paper (thin) and text-level bootstrap CI (thick).",
        lambda p: coefficient_figure(T["hom_coefficients"], p), T["hom_coefficients"])
    figs.add("hom3_extreme_pairs", "Figure H3. The most and least similar pairs of texts in each race x gender group "
        "(per-prompt top-k of the homogeneity kernel, pooled over formats); the texts are in the table below.",
        lambda p: extreme_pairs_figure(ext, p), ext)
    page = _render(title, manifests, figs, T)
    return finish_report(out, started, page)


def _group_means(groups: pd.DataFrame, text_means: pd.DataFrame | None) -> pd.DataFrame:
    """Race x gender rows of Table 2 with the text-level bootstrap interval of each mean."""
    g = groups[groups["grouping"] == "race x gender"].copy()
    if text_means is None or text_means.empty:
        g["ci_low_text"] = g["ci_high_text"] = np.nan
        return g
    tm = text_means[text_means["grouping"] == "race x gender"].copy()
    tm["race"] = tm["level"].str.split(" x ").str[0]
    tm["gender"] = tm["level"].str.split(" x ").str[1]
    return g.merge(tm[["model", "embedder", "race", "gender", "se_text", "ci_low_text", "ci_high_text"]],
                   on=["model", "embedder", "race", "gender"], how="left")


def _fmt(df: pd.DataFrame, max_rows: int = 300) -> str:
    from harness.report import _fmt_table

    return _fmt_table(df, max_rows)


def _manifest_rows(manifests) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("run", "model", "weights sha256", "sampling", "texts", "harness commit", "directory"))
    rows = []
    for run, m in manifests:
        cfg, model = m.get("config", {}), m.get("model", {})
        weights = (model.get("weights") or {}).get("sha256", "")
        cells = (cfg.get("name"), f"{model.get('backend', '')}: {model.get('name', cfg.get('model', {}).get('path'))}",
                 weights[:16], json.dumps(cfg.get("sampling")), m.get("rows"), m.get("git_commit"), run)
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in cells) + "</tr>")
    return f"<table class=tbl><tr>{head}</tr>{''.join(rows)}</table>"


def _pairs_html(ext: pd.DataFrame) -> str:
    if ext.empty:
        return "<p class=note>No pairs.</p>"
    top = ext[ext["group_rank"] == 1][["model", "embedder", "race", "gender", "kind", "format", "cosine", "z", "text_a", "text_b"]]
    return _fmt(top)


def _render(title, manifests, figs, T) -> str:
    from harness.report import IMG_CHECK

    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=note>Built {datetime.now(timezone.utc).isoformat(timespec='seconds')} from {len(manifests)} run(s). "
             "Homogeneity = mean cosine similarity between texts written for the same prompt (race x gender x "
             "format), z-standardised over all pairs; linear mixed models with a random intercept for format "
             "(Lee, Montgomery and Lai, FAccT 2024, Tables 2, 3, A3, A4). Each figure's data is in "
             "<code>figures/*.csv</code>; every table is in <code>tables/</code> as CSV and Parquet.</p>",
             "<h2>Runs</h2>", _manifest_rows(manifests), "<h2>Figures</h2>"]
    parts += figs.html()
    cols_coef = [c for c in ("model", "embedder", "model_formula", "term", "estimate", "se", "df", "t", "p", "ci_low", "ci_high",
                             "se_text", "ci_low_text", "ci_high_text", "se_ratio") if c in T["hom_coefficients"].columns]
    sections = [
        ("Table 2: standardised cosine similarity by group", "hom_groups", T["hom_groups"]),
        ("Table 3: mixed-model coefficients (SE, Satterthwaite df, CI) with text-level bootstrap SE and CI",
         "hom_coefficients", T["hom_coefficients"][cols_coef]),
        ("Table A3: likelihood-ratio tests (Type 3, ML)", "hom_lrt", T["hom_lrt"]),
        ("Table A4: simple effects of gender within race", "hom_simple_effects", T["hom_simple_effects"]),
        ("A.2.3-4: each race against White, one-sided Welch t-test on the raw pair cosines (pairs taken as "
         "independent, as in the paper)", "hom_welch", T.get("hom_welch", pd.DataFrame())),
        ("Text-level intervals of the group means (cluster bootstrap over texts)", "hom_text_group_means",
         T.get("hom_text_group_means", pd.DataFrame())),
        ("Variance components and convergence", "hom_variances", T.get("hom_variances", pd.DataFrame())),
        ("Refusals by race, gender and format (flagged, topped up, never analysed)", "hom_refusals",
         T.get("hom_refusals", pd.DataFrame())),
    ]
    for heading, name, df in sections:
        parts.append(f"<h2 id=t-{name}>{html.escape(heading)}</h2><p><a href='tables/{name}.csv'>CSV</a></p>{_fmt(df)}")
    parts.append("<h2 id=t-hom_extreme_pairs_by_group>Most and least similar pair of each group</h2>"
                 "<p><a href='tables/hom_extreme_pairs_by_group.csv'>CSV (top-k per group)</a></p>"
                 + _pairs_html(T["hom_extreme_pairs_by_group"]))
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222} img{max-width:100%} "
             ".tbl{border-collapse:collapse;font-size:12px} .tbl td,.tbl th{padding:2px 6px;border-bottom:1px solid #ddd} "
             ".note{color:#666;font-size:13px} .broken{color:#b00} figure{margin:1.5em 0} h3{font-size:15px}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title><style>{style}</style></head>"
            f"<body>{''.join(parts)}<script>{IMG_CHECK}</script></body></html>\n")


__all__ = ["build_homogeneity_report", "coefficient_table", "extreme_pairs_by_group", "load_run_tables"]
