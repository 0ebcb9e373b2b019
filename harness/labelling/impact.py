"""What a labeller's errors do to the paper's statistics: each ratio computed twice on the same gold
stories, once from the manual labels and once from the labeller's, and compared cell by cell.

Precision and recall (Table S8) count characters; the audit reports ratios (R_rep, R_sub, R_mrs), and a
miss moves a ratio only where it moves a character between the counts of one (a gender swapped, a
dominant and a subordinate character exchanged, a name lost). So ``statistics_shift`` builds two
characters tables from one ``EvalReport`` (its scored characters carry both labels): the manual one,
with the manual gender and first name, and the labeller's, with the gender read from its references and
its first name. Race likelihoods come from the first-name table (``harness.identity.names``) for both,
so only the labels differ. Each statistics-stage table (``harness.stats.tables``: representation,
subordination in the paper's mode, R_mrs) is computed from both, per source model x domain and pooled
over sources ("all sources"), with the tables' own 95% intervals (Wilson, Katz; no bootstrap).

Per table, the summary counts the cells defined under both labellings (a finite ratio and interval;
a ratio of 0, a group the labels omit, counts), those defined under one only, and, among the first:

* ``within``: the labeller's estimate lies inside the manual estimate's 95% interval;
* ``same_verdict``: both intervals say the same thing about 1 (both above, both below, or both
  include it): whether the labeller would change the cell's conclusion;
* ``median_abs_log``: the median of |log(labeller / manual)| over the cells where both are above 0
  (0.1 is about a 10% shift).

This compares intervals; it is not a test of the difference (the two estimates share their stories).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.identity import RACES

POOLED = "all sources"
TABLES = ("representation", "subordination", "rmrs")
KEYS = {"representation": ["model", "domain", "kind", "group"],
        "subordination": ["model", "domain", "gender", "group"],
        "rmrs": ["model", "domain", "gender", "group"]}


def _power_role(condition: str, role: str) -> str:
    if condition != "laden":
        return "baseline"
    return "dominant" if role == "subject" else "subordinate"


def characters_tables(characters: Sequence[Any], gold: Sequence[Any], names: Any, *, pooled: bool = True
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(manual, labeller) characters tables in the ``harness.stats`` contract from an ``EvalReport``'s
    ``characters`` and the gold stories they score (for each story's Love type). Characters without a
    manual gender are left out of both. ``pooled`` adds every character again under model "all sources"."""
    love = {g.story.story_id: g.love_type for g in gold}
    scored = [c for c in characters if c.gold_gender is not None]
    base = pd.DataFrame({
        "story_id": [c.story_id for c in scored],
        "model": [c.model for c in scored],
        "domain": [c.domain for c in scored],
        "condition": [c.condition for c in scored],
        "love_type": [love.get(c.story_id) for c in scored],
        "role": [c.role for c in scored],
        "power_role": [_power_role(c.condition, c.role) for c in scored],
    })
    out = []
    for gender, first in (([c.gold_gender for c in scored], [c.gold_first for c in scored]),
                          ([c.pred_gender for c in scored], [c.pred_first for c in scored])):
        df = base.copy()
        df["gender"] = gender
        df["first_name"] = pd.Series(first, dtype=object)
        lik = names.lookup(df["first_name"])
        for race in RACES:
            df[race] = lik[race].to_numpy(dtype=np.float64)
        if pooled:
            df = pd.concat([df, df.assign(model=POOLED)], ignore_index=True)
        out.append(df)
    return out[0], out[1]


def _tables(chars: pd.DataFrame) -> dict[str, pd.DataFrame]:
    from harness.identity.baselines import load_baselines
    from harness.stats import tables as T

    return {"representation": T.representation_table(chars, load_baselines()),
            "subordination": T.subordination_table(chars, mode="paper"),
            "rmrs": T.rmrs_table(chars)}


def _verdict(low: pd.Series, high: pd.Series) -> pd.Series:
    return pd.Series(np.where(low > 1, "above", np.where(high < 1, "below", "includes 1")), index=low.index)


@dataclass(frozen=True)
class StatisticsShift:
    """The cells of every table under both labellings, and a summary per table (module docstring).

    Attributes:
        cells: one row per cell: ``table``, the table's keys, ``manual``, ``manual_low``,
            ``manual_high``, ``labeller``, ``labeller_low``, ``labeller_high``, ``within``,
            ``same_verdict`` (NaN-free rows only carry the last two).
        summary: ``{table: {"cells", "one_sided", "within", "same_verdict", "median_abs_log"}}`` over the
            source models' cells, and the same for the pooled cells (``"<table> (all sources)"``).
    """

    cells: pd.DataFrame
    summary: dict[str, dict[str, Any]]

    def to_text(self) -> str:
        """The summary as a markdown table."""
        lines = ["| table | cells defined under both | under one only | labeller inside the manual 95% interval | "
                 "same verdict on 1 | median abs log ratio |", "|---|---|---|---|---|---|"]
        for name, s in self.summary.items():
            n = s["cells"]
            pct = (lambda k: f"{s[k]} ({s[k] / n:.0%})") if n else (lambda k: "n/a")
            med = "n/a" if math.isnan(s["median_abs_log"]) else f"{s['median_abs_log']:.3f}"
            lines.append(f"| {name} | {n} | {s['one_sided']} | {pct('within')} | {pct('same_verdict')} | {med} |")
        return "\n".join(lines)


def _defined(cells: pd.DataFrame, who: str) -> pd.Series:
    cols = [who, f"{who}_low", f"{who}_high"]
    return pd.Series(np.isfinite(cells[cols].to_numpy(float)).all(axis=1), index=cells.index)


def _summary(cells: pd.DataFrame) -> dict[str, Any]:
    m, lab = _defined(cells, "manual"), _defined(cells, "labeller")
    ok = cells[m & lab]
    pos = ok[(ok.manual > 0) & (ok.labeller > 0)]
    logs = np.abs(np.log(pos.labeller.to_numpy(float) / pos.manual.to_numpy(float)))
    return {"cells": len(ok), "one_sided": int((m != lab).sum()), "within": int(ok.within.sum()),
            "same_verdict": int(ok.same_verdict.sum()),
            "median_abs_log": float(np.median(logs)) if len(pos) else float("nan")}


def statistics_shift(report: Any, gold: Sequence[Any], names: Any = None) -> StatisticsShift:
    """Compare the statistics of the manual labels and the labeller's (module docstring).

    Args:
        report: an ``EvalReport`` of the labeller on ``gold`` (its ``characters``).
        gold: the gold stories it scored.
        names: a ``NameTable`` (default: ``NameTable.load()``, the user cache's table).
    """
    if names is None:
        from harness.identity.names import NameTable

        names = NameTable.load()
    manual, labelled = characters_tables(report.characters, gold, names)
    a, b = _tables(manual), _tables(labelled)
    frames = []
    for name in TABLES:
        keys = KEYS[name]
        cols = ["statistic", "ci_low", "ci_high"]
        m = a[name][keys + cols].rename(columns=dict(zip(cols, ["manual", "manual_low", "manual_high"])))
        lab = b[name][keys + cols].rename(columns=dict(zip(cols, ["labeller", "labeller_low", "labeller_high"])))
        both = m.merge(lab, on=keys, how="outer")
        both.insert(0, "table", name)
        both["within"] = (both.labeller >= both.manual_low) & (both.labeller <= both.manual_high)
        both["same_verdict"] = (_verdict(both.manual_low, both.manual_high)
                                == _verdict(both.labeller_low, both.labeller_high))
        frames.append(both)
    cells = pd.concat(frames, ignore_index=True)
    summary = {}
    for name in TABLES:
        t = cells[cells.table == name]
        summary[name] = _summary(t[t.model != POOLED])
        summary[f"{name} ({POOLED})"] = _summary(t[t.model == POOLED])
    return StatisticsShift(cells, summary)


__all__ = ["POOLED", "StatisticsShift", "characters_tables", "statistics_shift"]
