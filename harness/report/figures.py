"""The report's figures (Figs. 1-3 of the laissez-faire paper), drawn with matplotlib.

Every function takes a tidy table, writes PNG and SVG, and returns the PNG path; the table it
drew is saved beside it as CSV by the caller. Every file of a report is written atomically
(``harness.store.atomic_write``): the report stage records the page current once it is built.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402

from harness.errors import ConfigError  # noqa: E402
from harness.identity import RACE_DISPLAY  # noqa: E402
from harness.store import atomic_write, make_folder  # noqa: E402

SIG_COLOURS = [(0.001, "#c0392b", "p < .001"), (0.01, "#e67e22", "p < .01"), (0.05, "#f1c40f", "p < .05")]
GREY = "#bdbdbd"
GENDER_SHORT = {"Female": "Fem.", "Male": "Masc.", "Non-binary": "NB"}


def _save(fig, path: Path) -> Path:
    """``fig`` as ``path`` .png and .svg, each drawn to a temporary file and renamed synced; closes ``fig``."""
    atomic_write(path.with_suffix(".png"), lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    atomic_write(path.with_suffix(".svg"), lambda tmp: fig.savefig(tmp, format="svg", bbox_inches="tight"))
    plt.close(fig)
    return path.with_suffix(".png")


def _label(group: str) -> str:
    return RACE_DISPLAY.get(group, GENDER_SHORT.get(group, group))


def _sig_colour(p: float) -> str:
    for cut, colour, _ in SIG_COLOURS:
        if p < cut:
            return colour
    return GREY


def ratio_heatmap(table: pd.DataFrame, path: Path, title: str, alpha: float = 0.05) -> Path:
    """Diverging heat map of log ratios (rows: groups; columns: model x domain); cells whose
    p >= alpha (or undefined) are grey."""
    t = table.assign(col=table.model + "\n" + table.domain, row=table.group.map(_label))
    rows = list(dict.fromkeys(t.row))
    cols = list(dict.fromkeys(t.col))
    val = t.pivot_table(index="row", columns="col", values="statistic", aggfunc="first").reindex(index=rows, columns=cols)
    p = t.pivot_table(index="row", columns="col", values="p", aggfunc="first").reindex(index=rows, columns=cols)
    v = val.to_numpy(dtype=float)
    logv = np.log10(v.clip(1e-3, 1e3))
    # colour range from the non-zero ratios, saturating at 10x: a single zero count (log -> -inf)
    # must not wash out every other cell
    pos = np.abs(logv[np.isfinite(logv) & (v > 0)])
    lim = float(np.clip(pos.max() if pos.size else 1.0, 0.1, 1.0))
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 2.5, 0.45 * len(rows) + 1.8))
    shown = np.ma.masked_where(~(p.to_numpy(dtype=float) < alpha) | ~np.isfinite(logv), logv)
    ax.imshow(np.zeros_like(logv), cmap=matplotlib.colors.ListedColormap([GREY]), aspect="auto")
    im = ax.imshow(shown, cmap="RdBu_r", norm=TwoSlopeNorm(0, -lim, lim), aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = val.iat[i, j]
            dark = not np.ma.is_masked(shown[i, j]) and abs(shown[i, j]) > 0.6 * lim  # white text on dark cells
            ax.text(j, i, "n/a" if not np.isfinite(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(cols)), cols, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    cb = fig.colorbar(im, ax=ax, shrink=0.8)
    cb.set_label("log10 ratio (grey: p >= %.2g)" % alpha, fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def likelihood_histograms(hist: pd.DataFrame, path: Path) -> Path:
    """Named characters per 2-point likelihood bin (log counts), one panel per race."""
    groups = list(dict.fromkeys(hist.group))
    fig, axes = plt.subplots(1, len(groups), figsize=(2.6 * len(groups), 2.6), sharey=True)
    for ax, g in zip(np.atleast_1d(axes), groups):
        for model, d in hist[hist.group == g].groupby("model"):  # each bin (t, t+2] drawn across its width
            ax.stairs(d["count"].clip(lower=0.8).to_numpy(), np.append(d.bin_low.to_numpy(), d.bin_high.iloc[-1]),
                      label=model, lw=1)
        ax.set_yscale("log")
        ax.set_title(_label(g), fontsize=9)
        ax.set_xlabel("likelihood (%)", fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel("characters")
    np.atleast_1d(axes)[-1].legend(fontsize=6)
    return _save(fig, path)


def subordination_plot(sub: pd.DataFrame, path: Path, title: str) -> Path:
    """R_sub by race x gender on a log axis: one marker per model, a bar at the median, colour by p."""
    d = sub[sub.gender.isin(["Female", "Male"]) & np.isfinite(sub.statistic.astype(float))]
    domains = list(dict.fromkeys(sub.domain))
    fig, axes = plt.subplots(1, len(domains), figsize=(5 * len(domains), 3.6), sharey=True, squeeze=False)
    models = list(dict.fromkeys(sub.model))
    markers = "osD^vP*X"
    for ax, dom in zip(axes[0], domains):
        dd = d[d.domain == dom]
        cats = [(g, r) for g in ("Female", "Male") for r in dict.fromkeys(sub.group)]
        xpos = {c: x for x, c in enumerate(cats)}
        x = np.array([xpos.get(k, -1) for k in zip(dd.gender, dd.group)])
        colours = np.array([_sig_colour(v) for v in dd.p.astype(float)], dtype=object)
        # one scatter call per model (its marker), not per point: a 500k-story report has thousands
        for i, m in enumerate(models):
            sel = (dd.model == m).to_numpy() & (x >= 0)
            if sel.any():
                ax.scatter(x[sel], dd.statistic.to_numpy(float)[sel], marker=markers[i % len(markers)],
                           c=list(colours[sel]), edgecolor="k", linewidth=0.4, s=28, zorder=3)
        med = dd.groupby(["gender", "group"]).statistic.median()
        for (g, r), v in med.items():
            if (g, r) in xpos:
                ax.hlines(v, xpos[(g, r)] - 0.3, xpos[(g, r)] + 0.3, color="k", lw=1.2)
        ax.axhline(1, color="k", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.set_xticks(range(len(cats)), [f"{_label(r)} {GENDER_SHORT[g]}" for g, r in cats], fontsize=7, rotation=90)
        ax.set_title(dom, fontsize=9)
    axes[0][0].set_ylabel("subordination ratio (log)")
    handles = [plt.Line2D([], [], marker=markers[i % len(markers)], ls="", color="w", markeredgecolor="k", label=m) for i, m in enumerate(models)]
    handles += [plt.Line2D([], [], marker="o", ls="", color=c, label=l) for _, c, l in SIG_COLOURS]
    handles += [plt.Line2D([], [], marker="o", ls="", color=GREY, label="p >= .05")]
    fig.legend(handles=handles, fontsize=7, loc="upper center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, 1.06))
    fig.suptitle(title, fontsize=10, y=1.12)
    return _save(fig, path)


def name_scatter(names: pd.DataFrame, path: Path, races=("mena", "asian", "black", "latine", "white")) -> Path:
    """Per-name subordination ratio against the name's racial likelihood (Fig. 3a)."""
    fig, axes = plt.subplots(1, len(races), figsize=(2.8 * len(races), 2.8), sharey=True)
    for ax, r in zip(axes, races):
        d = names[names[r].notna()]
        # rasterised in the SVG: thousands of names would otherwise make a multi-megabyte file
        ax.scatter(100 * d[r], d.ratio, s=8 + 2 * np.sqrt(d.n_sub + d.n_dom), alpha=0.6, rasterized=True)
        ax.axhline(1, color="k", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel(f"{_label(r)} likelihood (%)", fontsize=8)
    axes[0].set_ylabel("per-name subordination ratio")
    return _save(fig, path)


def threshold_curves(pooled: pd.DataFrame, path: Path) -> Path:
    """Pooled R_t against the likelihood threshold t (Fig. 3b): median across models."""
    genders = [g for g in ("Female", "Male") if g in set(pooled.gender)]
    domains = list(dict.fromkeys(pooled.domain))
    fig, axes = plt.subplots(len(genders) or 1, len(domains) or 1, figsize=(4 * max(1, len(domains)), 2.8 * max(1, len(genders))),
                             sharex=True, sharey=True, squeeze=False)
    for i, g in enumerate(genders):
        for j, dom in enumerate(domains):
            ax = axes[i][j]
            for r, d in pooled[(pooled.gender == g) & (pooled.domain == dom)].groupby("group"):
                ax.plot(d.t, d.ratio, label=_label(r), lw=1)
            ax.axhline(1, color="k", lw=0.6, ls=":")
            ax.set_yscale("log")
            ax.set_title(f"{dom}, {GENDER_SHORT[g]}", fontsize=9)
            if i == len(axes) - 1:
                ax.set_xlabel("threshold t (%)", fontsize=8)
        axes[i][0].set_ylabel(f"R_t, {GENDER_SHORT[g]} (median over models)", fontsize=8)
    seen: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labels, handles = list(seen), list(seen.values())
    if handles:  # outside the panels, so it hides no curve
        fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    return _save(fig, path)


#: The folders of a report's own files: what a rebuild did not write again there is deleted (``finish_report``).
REPORT_PARTS = ("figures", "tables")


def report_folder(out: Path | str) -> Path:
    """``out`` with its figures/ and tables/ folders made, or a ConfigError naming ``--out`` where a file stands at
    it or above it, or where it holds an index.html that is no report's (no figures/ or tables/ beside it: a
    page of another site, which the report would write over). Called once the runs have been read, so a report
    that fails on its inputs leaves no empty folders."""
    out = Path(out)
    if (out / "index.html").exists() and not any((out / part).is_dir() for part in REPORT_PARTS):
        raise ConfigError(f"--out {out}: holds an index.html that is no harness report's; give a new or empty folder")
    out = make_folder(out, "--out")
    for part in REPORT_PARTS:
        (out / part).mkdir(exist_ok=True)
    return out


def finish_report(out: Path, started: float, page: str) -> Path:
    """Write the report's ``index.html`` (``page``) and delete what an earlier build into ``out`` left in its
    figures/ and tables/ that this one, begun at ``started`` (``time.time()``), did not write again: a report over
    other runs or another kind of audit kept the earlier figures and tables beside its own. A second from the
    start is kept, for file systems whose clocks lag (what a build a second before wrote is then left)."""
    index = atomic_write(out / "index.html", lambda tmp: tmp.write_text(page))
    for part in REPORT_PARTS:
        for f in (out / part).iterdir():
            if f.is_file() and not f.name.startswith(".") and f.stat().st_mtime < started - 1:
                f.unlink(missing_ok=True)
    return index


def write_tables(out: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Every table of a report as ``out/tables/<name>.parquet`` and ``.csv``."""
    for name, df in tables.items():
        atomic_write(out / "tables" / f"{name}.parquet", lambda tmp: df.to_parquet(tmp, index=False))
        atomic_write(out / "tables" / f"{name}.csv", lambda tmp: df.to_csv(tmp, index=False))


class Figures(list):
    """One page's figures as (name, caption, PNG path relative to ``out`` or None when there is no
    data); ``add`` draws a figure into ``out/figures`` and saves the table it drew beside it."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = Path(out)

    def add(self, name: str, caption: str, draw, data: pd.DataFrame) -> None:
        if data.empty:
            self.append((name, caption, None))
            return
        png = draw(self.out / "figures" / name)
        atomic_write(self.out / "figures" / f"{name}.csv", lambda tmp: data.to_csv(tmp, index=False))
        self.append((name, caption, png.relative_to(self.out).as_posix()))

    def html(self) -> list[str]:
        """One ``<figure>`` per figure (image, caption, links to its data and SVG), or a note when
        a figure had no data."""
        import html

        out = []
        for name, caption, src in self:
            cap = html.escape(caption)
            if src:
                out.append(f"<figure id={name}><img src='{src}' alt='{cap}'><figcaption>{cap} "
                           f"<a href='figures/{name}.csv'>data</a> · <a href='figures/{name}.svg'>SVG</a></figcaption></figure>")
            else:
                out.append(f"<p class=note>{cap} No data for this figure.</p>")
        return out
