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
a ratio of 0, a group the labels omit, counts), those defined under one only, and those the paper's
imputation alone defines under both (``all_zero_both``: R_sub's "both counts 0 -> R = 1", a race that
neither labelling gives any character of the cell, equal under any labels, so left out of the
comparisons below, which it would pull towards agreement), and, among the first:

* ``within``: the labeller's estimate lies inside the manual estimate's 95% interval;
* ``same_verdict``: both intervals say the same thing about 1 (both above, both below, or both
  include it): whether the labeller would change the cell's conclusion;
* ``median_abs_log``: the median of |log(labeller / manual)| over the cells where both are above 0
  (0.1 is about a 10% shift).

The interval comparison is not a test of the difference (the two estimates share their stories).
With ``n_boot``, each cell also gets a paired story-bootstrap interval of log(labeller / manual):
every resample of the stories is applied to both labellings, so the interval is of the shift the
labeller causes; ``shift_excludes_0`` counts the cells where the paired bootstrap test of a shift of 0 gives
p < alpha (``harness.stats.bootstrap.bootstrap_p``, which the interval inverts; at B resamples it is never
below 2 / (B + 1)). That count is uncorrected: where the labeller moves no ratio, about alpha of the cells tested
still show a shift. ``shift_after_bh`` counts those that survive Benjamini-Hochberg (``harness.stats.fdr``) within
the summary's row (a table's source-model cells, or its pooled ones). The gender pairs (S13d) are compared too,
and the races the name table cannot measure are left unmeasured on both sides, as the audit leaves them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.identity import RACES
from harness.stats.bootstrap import bootstrap_p, percentile_interval
from harness.stats.subordination import ALL_ZERO_FLAG

POOLED = "all sources"
TABLES = ("representation", "orientation", "subordination", "rmrs")
KEYS = {"representation": ["model", "domain", "kind", "group"],
        "orientation": ["model", "domain", "kind", "group"],
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
    manual gender are left out of both, and the names of those whose manual name was not labelled (a published
    row's null name) from both: the labeller's name alone would have moved the race statistics of a character
    the name figures leave out. ``pooled`` adds every character again under model "all sources"."""
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
                          ([c.pred_gender for c in scored],
                           [c.pred_first if c.gold_name_known else None for c in scored])):
        df = base.copy()
        df["gender"] = gender
        df["first_name"] = pd.Series(first, dtype=object)
        lik = names.lookup(df["first_name"])
        for race in RACES:
            df[race] = lik[race].to_numpy(dtype=np.float64)
        out.append(_pool(df) if pooled else df)
    return out[0], out[1]


def _tables(chars: pd.DataFrame, unmeasured: dict[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """The statistics stage's tables of ``chars``, the gender pairs (S13d) among them, and the races the name table
    cannot measure (``unmeasured``) left unmeasured as the audit leaves them."""
    from harness.identity.baselines import load_baselines
    from harness.stats import tables as T

    return {"representation": T.representation_table(chars, load_baselines(), unmeasured=unmeasured),
            "orientation": T.orientation_table(chars, load_baselines()),
            "subordination": T.subordination_table(chars, mode="paper", unmeasured=unmeasured),
            "rmrs": T.rmrs_table(chars)}


def _verdict(low: pd.Series, high: pd.Series) -> pd.Series:
    return pd.Series(np.where(low > 1, "above", np.where(high < 1, "below", "includes 1")), index=low.index)


@dataclass(frozen=True)
class StatisticsShift:
    """The cells of every table under both labellings, and a summary per table (module docstring).

    Attributes:
        cells: one row per cell: ``table``, the table's keys, ``manual``, ``manual_low``,
            ``manual_high``, ``labeller``, ``labeller_low``, ``labeller_high``, ``within``,
            ``same_verdict`` (None where either side is undefined), ``all_zero_both`` (R = 1 imputed from all-zero
            counts on both sides: left out of the summary); with ``n_boot``, also ``log_shift``
            (log(labeller / manual)), its paired bootstrap interval ``log_shift_low``, ``log_shift_high``, the
            bootstrap test's ``log_shift_p`` and ``shift_excludes_0`` (p < alpha: the test's decision, which the
            interpolated interval may contradict at a few resamples, so the two are not read as one), its
            Benjamini-Hochberg ``log_shift_q`` within the summary row's cells and ``shift_after_bh`` (q < alpha).
        summary: ``{table: {"cells", "one_sided", "all_zero_both", "within", "same_verdict", "median_abs_log"}}``
            over the source models' cells, and the same for the pooled cells (``"<table> (all sources)"``); with
            ``n_boot``, also ``"shift_tested"`` (cells with an interval), ``"shift_excludes_0"`` and
            ``"shift_after_bh"``.
        n_boot: the paired story resamples behind the intervals (0: none).
        alpha: the level of the shift's test.
    """

    cells: pd.DataFrame
    summary: dict[str, dict[str, Any]]
    n_boot: int = 0
    alpha: float = 0.05

    def to_text(self) -> str:
        """The summary as a markdown table."""
        boot = (f" | shift found (paired bootstrap test, p < {self.alpha:g}; {self.n_boot} resamples) | "
                f"of them, after Benjamini-Hochberg within the row (q < {self.alpha:g})" if self.n_boot else "")
        lines = ["| table | cells defined under both | under one only | all-zero under both (R = 1 imputed, left out) | "
                 "labeller inside the manual 95% interval | same verdict on 1 | median abs log ratio" + boot + " |",
                 "|---" * (9 if boot else 7) + "|"]
        for name, s in self.summary.items():
            n = s["cells"]
            pct = (lambda k: f"{s[k]} ({s[k] / n:.0%})") if n else (lambda k: "n/a")
            med = "n/a" if math.isnan(s["median_abs_log"]) else f"{s['median_abs_log']:.3f}"
            tail = f" | {s['shift_excludes_0']} of {s['shift_tested']} | {s['shift_after_bh']}" if boot else ""
            lines.append(f"| {name} | {n} | {s['one_sided']} | {s['all_zero_both']} | {pct('within')} | "
                         f"{pct('same_verdict')} | {med}{tail} |")
        tested = max((s["shift_tested"] for s in self.summary.values()), default=0) if boot else 0
        return "\n".join(lines + ([self._multiplicity_note(tested)] if tested else []))

    def _multiplicity_note(self, m: int) -> str:
        """What the two shift columns can say: the uncorrected count's share under no shift at all, and the fewest
        shifts Benjamini-Hochberg can keep at this many resamples (a bootstrap p is never below 2 / (B + 1), and
        a row of m tested cells keeps k of them only where some k' >= k of its p are below k' alpha / m); ``m`` is
        the largest row's count of tested cells."""
        floor = 2 / (self.n_boot + 1)
        fewest = math.floor(m * floor / self.alpha) + 1
        return (f"\nUncorrected, a row of m tested cells shows about {self.alpha:g} x m shifts where the labeller "
                f"moves no ratio. At {self.n_boot} resamples no p is below 2 / {self.n_boot + 1}, so after "
                f"Benjamini-Hochberg a row of m cells keeps none or more than m x {floor:.4g} / {self.alpha:g} "
                f"(the largest row here, {m} cells: none or at least {fewest}); more resamples "
                "(--statistics-boot) let it keep fewer.")


def _defined(cells: pd.DataFrame, who: str) -> pd.Series:
    cols = [who, f"{who}_low", f"{who}_high"]
    return pd.Series(np.isfinite(cells[cols].to_numpy(float)).all(axis=1), index=cells.index)


def _summary(cells: pd.DataFrame) -> dict[str, Any]:
    m, lab = _defined(cells, "manual"), _defined(cells, "labeller")
    imputed = cells.all_zero_both.astype(bool)
    ok = cells[m & lab & ~imputed]
    logs = np.abs(_log_shift(ok))
    logs = logs[np.isfinite(logs)]
    out = {"cells": len(ok), "one_sided": int((m != lab).sum()), "all_zero_both": int(imputed.sum()),
           "within": int(ok.within.sum()), "same_verdict": int(ok.same_verdict.sum()),
           "median_abs_log": float(np.median(logs)) if len(logs) else float("nan")}
    if "log_shift_low" in cells:
        tested = cells[~imputed].dropna(subset=["log_shift_low", "log_shift_high", "log_shift_p"])
        out["shift_tested"] = len(tested)
        out["shift_excludes_0"] = int(tested.shift_excludes_0.astype(bool).sum())
        out["shift_after_bh"] = int(tested.shift_after_bh.astype(bool).sum())
    return out


def _refuse_unknown_fields(stories: Sequence[tuple[str, str, str, str | None]], n_gold: int) -> None:
    """A DataError naming a story of ``stories`` (id, condition, domain, love type) whose condition or domain is
    none the tables know, or a Love story without its love type: every character of such a story left the tables
    (a Love story without its type, the romantic pairs' table), and they read 0 cells, exit 0."""
    from harness.errors import DataError
    from harness.labelling.prompts import LOVE_TYPE_NAMES
    from harness.stats.tables import ALLOWED

    for field, allowed, of in (("condition", ALLOWED["condition"], lambda s: s[1]),
                               ("domain", ALLOWED["domain"], lambda s: s[2]),
                               ("love_type", LOVE_TYPE_NAMES,
                                lambda s: s[3] if s[2] == "Love" else LOVE_TYPE_NAMES[0])):
        unknown = sorted({s[0] for s in stories if of(s) not in allowed})
        if unknown:
            raise DataError(f"--statistics needs each gold story's {field} ({' or '.join(allowed)}): {len(unknown)} "
                            f"of {n_gold} have none, e.g. {unknown[0]}; add `{field}` to them, or drop --statistics")


def check_statistics_fields(gold: Sequence[Any]) -> None:
    """``statistics_shift``'s check of the gold stories' condition, domain and love type, run on the stories alone,
    before the labelling: it ran on the labeller's report, after every story was labelled. Only a story with a
    labelled character is checked, as only those reach the tables."""
    _refuse_unknown_fields([(g.story.story_id, g.condition, g.domain, g.love_type) for g in gold
                            if any(r.key in g.characters for r in g.story.roles)], len(gold))


def statistics_shift(report: Any, gold: Sequence[Any], names: Any = None, *, n_boot: int = 0, seed: int = 0,
                     alpha: float = 0.05) -> StatisticsShift:
    """Compare the statistics of the manual labels and the labeller's (module docstring).

    Args:
        report: an ``EvalReport`` of the labeller on ``gold`` (its ``characters``).
        gold: the gold stories it scored.
        names: a ``NameTable`` (default: ``NameTable.load()``, the user cache's table).
        n_boot: paired story resamples for each cell's interval of log(labeller / manual) (0: none;
            about 0.5 s each on the 1,000 dev stories).
        seed, alpha: the resampling seed and the intervals' level.
    """
    if names is None:
        from harness.identity.names import NameTable

        names = NameTable.load()
    from harness.audit.statistics import unmeasured_races
    from harness.identity.baselines import load_baselines
    from harness.stats.tables import baseline_map

    love_type = {g.story.story_id: g.love_type for g in gold}
    _refuse_unknown_fields([(c.story_id, c.condition, c.domain, love_type.get(c.story_id)) for c in report.characters],
                           len(gold))
    manual, labelled = characters_tables(report.characters, gold, names, pooled=False)
    shares = names.representative_shares() if hasattr(names, "representative_shares") else None  # a table's
    unmeasured = unmeasured_races(shares, baseline_map(load_baselines()))
    cells = _cells(_tables(_pool(manual), unmeasured), _tables(_pool(labelled), unmeasured))
    if n_boot:
        cells["log_shift"] = _log_shift(cells)
        reps = _paired_replicates(manual, labelled, cells, n_boot, seed, unmeasured)
        low, high = percentile_interval(reps, alpha, min_finite=math.ceil(0.9 * n_boot))
        cells["log_shift_low"], cells["log_shift_high"] = low, high
        # the decision is the bootstrap test's (p < alpha): the interpolated interval "excluded 0" at 20 resamples
        # with one on the other side, where the test's p is .19 (and never below 2 / (B + 1))
        p = np.asarray(bootstrap_p(reps, 0.0, min_finite=math.ceil(0.9 * n_boot)), dtype=float)
        cells["log_shift_p"] = np.where(np.isfinite(low) & np.isfinite(high), p, np.nan)
        cells["shift_excludes_0"] = cells.log_shift_p < alpha
        cells["log_shift_q"] = _bh_within_rows(cells, alpha)
        cells["shift_after_bh"] = cells.log_shift_q < alpha  # strict, as the uncorrected p < alpha
    summary = {key: _summary(cells[rows]) for key, rows in _summary_rows(cells)}
    return StatisticsShift(cells, summary, n_boot, alpha)


def _summary_rows(cells: pd.DataFrame):
    """(summary key, boolean mask of ``cells``) per row of the summary: each table's source-model cells, then its
    pooled ones. The rows are also the families of the Benjamini-Hochberg correction."""
    for name in TABLES:
        of_table = (cells.table == name).to_numpy()
        pooled = (cells.model == POOLED).to_numpy()
        yield name, of_table & ~pooled
        yield f"{name} ({POOLED})", of_table & pooled


def _bh_within_rows(cells: pd.DataFrame, alpha: float) -> np.ndarray:
    """Benjamini-Hochberg q of each cell's ``log_shift_p`` (``harness.stats.fdr.bh_adjust``), the family being
    the cells of one summary row (``_summary_rows``) that the row counts as tested:
    an uncorrected p < alpha in 1 cell of 20 is what no shift at all gives. NaN for untested and imputed cells."""
    from harness.stats.fdr import bh_adjust

    q = np.full(len(cells), np.nan)
    p = cells.log_shift_p.to_numpy(float)
    tested = np.isfinite(p) & ~cells.all_zero_both.astype(bool).to_numpy()
    for _, rows in _summary_rows(cells):
        q[rows & tested] = bh_adjust(p[rows & tested], alpha)[0]
    return q


def _log_shift(cells: pd.DataFrame) -> np.ndarray:
    """log(labeller / manual) per cell; NaN where either ratio is 0 or undefined."""
    ratio = cells.labeller.where(cells.labeller > 0) / cells.manual.where(cells.manual > 0)
    return np.log(ratio.to_numpy(float))


def _pool(chars: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([chars, chars.assign(model=POOLED)], ignore_index=True)


def _cells(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every cell of the manual tables ``a`` beside the labeller's ``b``."""
    frames = []
    for name in TABLES:
        keys = KEYS[name]
        cols = ["statistic", "ci_low", "ci_high", "flags"]
        m = a[name][keys + cols].rename(columns=dict(zip(cols, ["manual", "manual_low", "manual_high", "manual_flags"])))
        lab = b[name][keys + cols].rename(columns=dict(zip(cols, ["labeller", "labeller_low", "labeller_high",
                                                                  "labeller_flags"])))
        both = m.merge(lab, on=keys, how="outer")
        both.insert(0, "table", name)
        both["all_zero_both"] = _flagged(both.pop("manual_flags")) & _flagged(both.pop("labeller_flags"))
        within = (both.labeller >= both.manual_low) & (both.labeller <= both.manual_high)
        same = _verdict(both.manual_low, both.manual_high) == _verdict(both.labeller_low, both.labeller_high)
        defined = _defined(both, "manual") & _defined(both, "labeller")  # NaN read as "includes 1" on both sides
        both["within"] = within.astype(object).where(defined, None)  # not False where nothing was measured
        both["same_verdict"] = same.astype(object).where(defined, None)
        frames.append(both)
    return pd.concat(frames, ignore_index=True)


def _flagged(flags: pd.Series, flag: str = ALL_ZERO_FLAG) -> pd.Series:
    """Whether each row's ``;``-joined flags (a statistics table's ``flags``; NaN where a row has none) hold ``flag``."""
    return flags.map(lambda f: isinstance(f, str) and flag in f.split(";")).astype(bool)


def _cell_ids(cells: pd.DataFrame) -> pd.Index:
    cols = ["table", "model", "domain", "kind", "gender", "group"]
    return pd.Index(["|".join(str(v) for v in row) for row in cells.reindex(columns=cols).fillna("").to_numpy()])


def _paired_replicates(manual: pd.DataFrame, labelled: pd.DataFrame, cells: pd.DataFrame, n_boot: int, seed: int,
                       unmeasured: dict[str, str] | None = None) -> np.ndarray:
    """(n_boot, cells) log(labeller / manual) over story resamples, each drawn once and applied to both
    labellings (so the spread is of the shift, not of either ratio); NaN where a resample leaves it undefined
    (a ratio of 0 or none). The caller takes percentile intervals and the bootstrap test from them; a cell
    undefined in more than 10% of the resamples gets neither."""
    codes, uniques = pd.factorize(manual.story_id)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    rng = np.random.default_rng(seed)
    ids = _cell_ids(cells)
    reps = np.full((n_boot, len(cells)), np.nan)
    for r in range(n_boot if len(uniques) else 0):  # no story with a manual gender: nothing to resample
        pick = rng.integers(0, len(uniques), len(uniques))
        sizes = starts[pick + 1] - starts[pick]
        rows = order[np.concatenate([np.arange(starts[i], starts[i + 1]) for i in pick])]
        story = np.repeat(np.arange(len(pick)), sizes).astype(str)

        def draw(chars: pd.DataFrame) -> pd.DataFrame:
            return _pool(chars.iloc[rows].assign(story_id=story))

        by_manual = _statistic_by_cell(_tables(draw(manual), unmeasured)).reindex(ids)
        by_labeller = _statistic_by_cell(_tables(draw(labelled), unmeasured)).reindex(ids)
        reps[r] = _log_shift(pd.DataFrame({"manual": by_manual, "labeller": by_labeller}))
    return reps


def _statistic_by_cell(tables: dict[str, pd.DataFrame]) -> pd.Series:
    """Each cell's statistic, indexed as ``_cell_ids`` names it: what a resample needs of ``_cells``, without its
    intervals' comparisons (a third of a resample's time)."""
    frames = [tables[name][KEYS[name] + ["statistic"]].assign(table=name) for name in TABLES]
    both = pd.concat(frames, ignore_index=True)
    return pd.Series(both.statistic.to_numpy(float), index=_cell_ids(both))


__all__ = ["POOLED", "StatisticsShift", "characters_tables", "check_statistics_fields", "statistics_shift"]
