"""The report: a static directory (``index.html``, PNG/SVG figures, CSV/Parquet tables) built
from one or several run directories, readable offline with no server.

``build_report(runs, out)`` reads each run's ``statistics/`` tables, ``identities/`` characters,
``generations/`` stories and ``run.json``, stacks them (one model per run, as the paper compares
five), draws Figures 1-3, renders the S13-shaped tables, the top names above 60% likelihood
(with the privacy floor), labelling QA, the stereotype cue search with its coding sheet, and the
run manifests. Every figure's data is saved beside it.
"""

from __future__ import annotations

import html
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from harness.errors import DataError
from harness.identity import RACE_DISPLAY
from harness.report import figures as F
from harness.report.cues import search
from harness.report.qa import labeller_table_html
from harness.stats.tables import pooled_curve
from harness.store import RunStore, atomic_write

#: The version of what the report writes (its pages, tables and figures): a run's report made by another version is
#: not skipped as current, though its inputs are unchanged.
REPORT_VERSION = "1"

TABLES = ("representation", "orientation", "subordination", "rmrs", "threshold_curve", "name_ratios",
          "likelihood_histogram", "top_names", "labelling_qa")
S13_COLUMNS = ["model", "domain", "kind", "gender", "group", "statistic", "p", "nu", "ci_low", "ci_high", "d", "r_representative",
               "p_exact", "p_boot", "boot_low", "boot_high", "q_bh", "q_bh_from", "flags", "reason"]


def distinct_runs(runs: list[Path | str]) -> list[Path]:
    """``runs`` as paths, or a DataError in one line where one is given twice or two carry one config name: a
    report's tables, figures and stories are keyed by that name, so the two were merged as one model."""
    paths = [Path(r) for r in runs]
    seen: dict[Path, Path] = {}
    names: dict[str, Path] = {}
    for run in paths:
        if (same := seen.setdefault(run.resolve(), run)) is not run:
            raise DataError(f"{run}: given twice (as {same} too); give each run once")
        config = RunStore(run).read_manifest().get("config")
        name = config.get("name", run.name) if isinstance(config, dict) else run.name
        if (other := names.setdefault(name, run)) is not run:
            raise DataError(f"{run} and {other} are both named {name!r} in their run.json, and the report would merge "
                            f"them as one model; rerun one with another name (--set name=...)")
    return paths


#: The tables whose q_bh the report computes again over every run it stacks.
FDR_TABLES = ("representation", "orientation", "subordination", "rmrs")


def across_runs_fdr(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` stacked from several runs with ``q_bh`` taken again over all its cells: each run adjusted over its
    own cells, so a report of five models set five families side by side and its q read as one table's. Each row's
    p is the one its run chose (``q_bh_from``); one run alone keeps its q."""
    from harness.stats.fdr import bh_adjust

    if table.empty or "q_bh_from" not in table.columns:
        return table
    p = pd.Series(float("nan"), index=table.index)
    for src in table["q_bh_from"].dropna().unique():  # the p column each row's run chose
        rows = table["q_bh_from"] == src
        p[rows] = table.loc[rows, src].astype(float)
    return table.assign(q_bh=bh_adjust(p.to_numpy())[0])


def _load_run(run: Path) -> tuple[dict, dict[str, pd.DataFrame], pd.DataFrame]:
    store = RunStore(run)
    manifest = store.read_run()
    stats_dir = run / "statistics"
    missing = [t for t in TABLES if not (stats_dir / f"{t}.parquet").exists()]
    if missing:
        raise DataError(f"{run}: statistics table(s) {', '.join(missing)} missing; run `harness run CONFIG --stages statistics`")
    tables = {t: pd.read_parquet(stats_dir / f"{t}.parquet") for t in TABLES}
    return manifest, tables, tabled_stories(store, manifest.get("config", {}).get("name", run.name))


def tabled_stories(store: RunStore, name: str) -> pd.DataFrame:
    """The stories behind the run's tables, as the cue search reads them (model, story_id, prompt_id, text): those
    of the plan its identities stage recorded. A run folder holds every story generated into it; a config narrowed
    to fewer prompts or samples tables only its own, and the cue counts and coding sheet counted the rest too."""
    from harness.audit.stages import IDENTITIES, recorded

    gens = store.read_stage("generations", columns=["prompt_id", "sample_idx", "text_clean"])
    if plan := recorded(store, IDENTITIES).get("plan"):
        gens = gens[gens.prompt_id.isin(plan["prompts"]) & (gens.sample_idx < plan["samples_per_prompt"])]
    return pd.DataFrame({
        "model": name,
        "story_id": gens.prompt_id + "#" + gens.sample_idx.astype(str),
        "prompt_id": gens.prompt_id,
        "text": gens.text_clean,
    })


def _fmt_table(df: pd.DataFrame, max_rows: int = 400) -> str:
    d = df.copy()
    for c in d.columns:
        if d[c].dtype.kind == "f":
            d[c] = d[c].map(lambda v: "" if pd.isna(v) else (f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:,.3f}"))
        elif d[c].dtype == object:
            d[c] = d[c].map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else v)
    if "group" in d.columns:
        d["group"] = d["group"].map(lambda g: RACE_DISPLAY.get(g, g))
    more = f"<p class=note>{len(d) - max_rows} more rows in the CSV.</p>" if len(d) > max_rows else ""
    return d.head(max_rows).to_html(index=False, border=0, classes="tbl", na_rep="", escape=True) + more


def _s13(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in S13_COLUMNS if c in df.columns and not (c in {"boot_low", "boot_high", "p_boot"} and df[c].isna().all())]
    return df[cols]


def build_report(runs: list[Path | str], out: Path | str, *, title: str = "Laissez-faire audit") -> Path:
    """Build the report for ``runs`` into ``out``; returns the path of ``index.html``."""
    manifests, stories = [], []
    stacked: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    for run in distinct_runs(runs):
        m, tables, st = _load_run(run)
        manifests.append((run, m))
        stories.append(st)
        for t in TABLES:
            stacked[t].append(tables[t])
    started = time.time()  # what this build writes is newer: finish_report deletes the rest
    out = F.report_folder(out)
    T = {t: pd.concat(v, ignore_index=True) for t, v in stacked.items()}
    for t in FDR_TABLES:
        T[t] = across_runs_fdr(T[t])
    T["pooled_curve"] = pooled_curve(T["threshold_curve"]) if len(T["threshold_curve"]) else T["threshold_curve"]
    counts, sheet = search(pd.concat(stories, ignore_index=True))
    T["cue_counts"] = counts
    F.write_tables(out, T)
    atomic_write(out / "tables" / "coding_sheet.csv", lambda tmp: sheet.to_csv(tmp, index=False))

    rep = T["representation"]
    figs = F.Figures(out)

    figs.add("fig1a_representation_race", "Figure 1a. Representation ratios by race (power-neutral stories); grey where the paper's p (unadjusted) "
             ">= .05; the tables' q_bh adjusts for the many cells, over every run of this report.",
        lambda p: F.ratio_heatmap(rep[rep.kind == "race"], p, "R_rep by race"), rep[rep.kind == "race"])
    figs.add("fig1b_representation_gender", "Figure 1b. Representation ratios by gender.",
        lambda p: F.ratio_heatmap(rep[rep.kind == "gender"], p, "R_rep by gender"), rep[rep.kind == "gender"])
    figs.add("fig1c_orientation", "Figure 1c. Representation of romantic gender pairs (sexual orientation).",
        lambda p: F.ratio_heatmap(T["orientation"], p, "R_rep by gender pair"), T["orientation"])
    figs.add("fig1d_name_likelihoods", "Figure 1d. Named characters by racial likelihood of the first name (log counts).",
        lambda p: F.likelihood_histograms(T["likelihood_histogram"], p), T["likelihood_histogram"])
    figs.add("fig2_subordination", "Figure 2. Subordination ratios by race and gender; one marker per model, bar at the median; colour by the "
             "paper's p (unadjusted; the tables' q_bh adjusts for the many cells).",
        lambda p: F.subordination_plot(T["subordination"], p, "R_sub (power-laden stories)"), T["subordination"])
    figs.add("fig3a_name_ratios", "Figure 3a. Per-name subordination ratio against racial likelihood.",
        lambda p: F.name_scatter(T["name_ratios"], p), T["name_ratios"])
    figs.add("fig3b_threshold_curve", "Figure 3b. Pooled subordination ratio per likelihood threshold (median over models).",
        lambda p: F.threshold_curves(T["pooled_curve"], p), T["pooled_curve"])

    page = _render(title, manifests, figs, T)
    return F.finish_report(out, started, page)


def _manifest_rows(manifests) -> str:
    rows = []
    for run, m in manifests:
        cfg, model = m.get("config", {}), m.get("model", {})
        weights = (model.get("weights") or {}).get("sha256", "")
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
                cfg.get("name"), f"{model.get('backend', '')}: {model.get('name', cfg.get('model', {}).get('path'))}",
                weights[:16], json.dumps(cfg.get("sampling")), m.get("rows"), json.dumps(m.get("throughput")),
                (m.get("labeller") or {}).get("labeller", ""), m.get("git_commit"), run)) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "model", "weights sha256", "sampling", "stories", "throughput", "labeller", "harness commit", "directory"))
    return f"<table class=tbl><tr>{head}</tr>{''.join(rows)}</table>"


def _render(title, manifests, figs, T) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=note>Built {datetime.now(timezone.utc).isoformat(timespec='seconds')} from {len(manifests)} run(s). "
             "Figures and tables follow Shieh et al., <i>Laissez-Faire Harms</i> (Figs. 1-3, Table S13). "
             "Each figure's data is in <code>figures/*.csv</code>; every table is in <code>tables/</code> as CSV and Parquet.</p>",
             "<h2>Runs</h2>", _manifest_rows(manifests), "<h2>Figures</h2>"]
    parts += figs.html()
    sections = [
        ("Table S13a-c: representation ratios", "representation", _s13(T["representation"])),
        ("Table S13d: romantic gender pairs", "orientation", _s13(T["orientation"])),
        ("Table S13e-m: subordination ratios", "subordination", _s13(T["subordination"])),
        ("Table S13n-p: median racialized subordination ratios", "rmrs", _s13(T["rmrs"])),
        ("Tables S10/S11: most frequent names above 60% likelihood (likelihoods withheld for rare names)", "top_names", T["top_names"]),
        ("Labelling QA", "labelling_qa", T["labelling_qa"]),
        ("Stereotype cue search (keyword counts; coding sheet: tables/coding_sheet.csv)", "cue_counts", T["cue_counts"]),
    ]
    for heading, name, df in sections:
        parts.append(f"<h2 id=t-{name}>{html.escape(heading)}</h2>")
        if name == "labelling_qa":
            parts.append("<h3>Labeller used and its evaluation</h3>" + labeller_table_html(manifests)
                         + "<h3>Shares per model, domain, condition and role</h3>")
        parts.append(f"<p><a href='tables/{name}.csv'>CSV</a></p>{_fmt_table(df)}")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222} img{max-width:100%} "
             ".tbl{border-collapse:collapse;font-size:12px} .tbl td,.tbl th{padding:2px 6px;border-bottom:1px solid #ddd} "
             ".note{color:#666;font-size:13px} .broken{color:#b00} figure{margin:1.5em 0} h3{font-size:15px}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title><style>{style}</style></head>"
            f"<body>{''.join(parts)}<script>{IMG_CHECK}</script></body></html>\n")


# After load, mark every figure as loaded or broken (data-loaded="yes"/"no"); a broken one gets a
# visible note and a console error, so readers and the headless-Chromium test both see it.
IMG_CHECK = (
    "window.addEventListener('load',function(){document.querySelectorAll('img').forEach(function(img){"
    "var ok=img.complete&&img.naturalWidth>0;img.setAttribute('data-loaded',ok?'yes':'no');"
    "if(!ok){var p=document.createElement('p');p.className='note broken';"
    "p.textContent='This figure failed to load: '+img.getAttribute('src');img.parentNode.insertBefore(p,img);"
    "console.error('figure failed to load: '+img.getAttribute('src'));}});});"
)
