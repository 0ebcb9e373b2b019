"""Tidy tables shaped like Table S13 from the characters table (see the interfaces note).

Every builder returns one row per cell with the S13 columns ``statistic`` (the ratio), ``p``
(paper's Altman-Bland p), ``nu``, ``ci_low``, ``ci_high``, ``d`` (R_rep only), followed by the
principled columns ``p_normal``, ``p_exact`` (exact binomial / Fisher p, integer counts only),
``p_boot`` (story-level percentile-bootstrap p of ratio = 1, when ``n_boot`` > 0; the
principled p of race cells, whose counts are fractional: ``harness.stats.bootstrap.bootstrap_p``),
``boot_low``, ``boot_high``, ``q_bh`` (Benjamini-Hochberg across the table's cells), ``q_bh_from``
(which p entered ``q_bh`` for the row: the best principled p available), ``flags``
(';'-joined) and ``reason`` (why ``statistic`` is NaN). The p entering ``q_bh`` is, in order of
preference: R_rep and R_sub, ``p_exact`` (exact under the paper's sampling model; integer
counts: gender and pair rows), else ``p_boot`` (race rows, whose counts are likelihood sums
with no exact test), else ``p_normal``; R_mrs, ``p_boot`` (it tests the median over thresholds
itself, with the threshold choice and the story clustering inside the resampling, where
Fisher's p tests only the median threshold's 2x2 table), else ``p_exact``. Benjamini &
Hochberg (1995) need only valid p-values per cell, so mixing tests in one family is sound.
Where the cell's stories all contribute the same (one story, say) or its replicates do not vary,
the bootstrap has no sampling variation to show: ``boot_low``, ``boot_high`` and ``p_boot`` are
NaN with the flag ``boot_no_variation`` (``harness.stats.bootstrap.boot_summary``), and ``q_bh``
takes the next p of the order; likewise, flag ``boot_zero_count``, where the estimate smoothed a zero count
(every resample keeps it, and the replicates sit on one side of 1 by construction), and flag
``boot_few_finite``, where fewer than 20 replicates are finite (too few to place the interval's ends).
R_sub cells are sums of race likelihoods and get no exact test, whole or not. A cell whose statistic is
undefined enters no family.

The table is the full grid its shape dictates: every model (present in the input, or
``models=``) x domain (present in the input, or ``domains=``) x gender x group, whether or not
the cell has characters. Cells that cannot be computed (no characters of the model x domain or
gender, empty group, no baseline, no likelihood entries, unknown category values) are NaN rows
with a reason, never a crash, a silent zero or a missing row.

Which characters enter (digest 5.1, 5.4, 5.5, 10.4-10.5):
  * race statistics use named, matched characters (a first name and at least one non-NaN race
    likelihood); NaN likelihoods count 0 in the numerator and stay in the denominator;
  * gender statistics use characters labelled Female / Male / Non-binary;
  * R_rep: power-neutral stories (Love: the roles in ``love_roles``, both partners by default as
    in the authors' code); pairs: romantic stories, all conditions by default ([CODE]);
  * R_sub: power-laden dominant / subordinate characters; gender rows use the joint share
    (denominator = all gendered characters of the role, [CODE]) unless ``denominator=
    "conditional"``; nu = (stories of the model x domain with a laden named character) - 1, a
    documented choice (the paper's is unresolved);
  * R_mrs: power-laden named characters, gender-specific totals, thresholds 1..99.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import DataError
from harness.identity import RACE_DISPLAY, RACES

from .bootstrap import boot_summary, cluster_sums, stories_differ
from .fdr import bh_adjust
from .representation import representation_ratio
from .rmrs import median_ratio, rmrs_from_counts, threshold_ratios
from .results import RmrsResult, SubordinationResult
from .subordination import paper_point_estimate, subordination_ratio
from .sweep import DEFAULT_THRESHOLDS, sweep_counts

__all__ = [
    "COLUMNS",
    "name_ratio_table",
    "RMRS_RACES",
    "baseline_map",
    "orientation_table",
    "pooled_curve",
    "representation_table",
    "rmrs_table",
    "subordination_table",
    "threshold_curve",
    "validate_characters",
]

FEMALE, MALE, NON_BINARY = "Female", "Male", "Non-binary"
GENDERED = (FEMALE, MALE, NON_BINARY)
GENDER_LABELS = (FEMALE, MALE, NON_BINARY, "Unspecified", "Unsure")
SHORT = {FEMALE: "F", MALE: "M", NON_BINARY: "NB"}
PAIR_ORDER = {"F": 0, "M": 1, "NB": 2}
PAIRS = ("NB-NB", "F-NB", "M-NB", "F-F", "M-M", "F-M")
RMRS_RACES = ("mena", "asian", "black", "latine", "white")
REQUIRED = ("story_id", "model", "domain", "condition", "love_type", "role", "power_role", "gender", "first_name",
            *RACES)
ALLOWED = {
    "domain": ("Learning", "Labor", "Love"),
    "condition": ("neutral", "laden"),
    "role": ("subject", "object"),
    "power_role": ("baseline", "dominant", "subordinate"),
    "gender": GENDER_LABELS,
}
#: The flag of a race the name table cannot measure (``unmeasured``).
NOT_MEASURED = "not_measured"
#: A character is a "racialized name" for the small-count flag when its likelihood exceeds this.
RACIALIZED = 0.5
COLUMNS = ["statistic", "p", "nu", "ci_low", "ci_high", "d", "p_normal", "p_exact", "p_boot", "boot_low",
           "boot_high", "q_bh", "q_bh_from", "flags", "reason"]
#: Order of preference of the p-value that enters ``q_bh`` (the first one defined is used).
Q_BH_SOURCES = ("p_exact", "p_boot", "p_normal")
#: R_mrs: the bootstrap tests the median itself; Fisher's p only its median threshold's table.
Q_BH_SOURCES_RMRS = ("p_boot", "p_exact", "p_normal")


# ----------------------------------------------------------------------------- input


def validate_characters(chars: pd.DataFrame) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Check the characters table; return it (likelihoods as float) and rows describing problems.

    Missing columns raise ``DataError``. Unknown category values (a gender label outside the
    canonical spelling, an unknown domain ...) do not: the affected characters drop out of the
    cells that need the value, and one NaN row per problem carries the reason.
    """
    if not isinstance(chars, pd.DataFrame):
        raise DataError(f"characters table must be a pandas DataFrame, got {type(chars).__name__}")
    missing = [c for c in REQUIRED if c not in chars.columns]
    if missing:
        raise DataError(f"characters table lacks column(s) {', '.join(missing)}; "
                        "build it with the labelling + identity steps (see the interfaces note)")
    df = chars.copy()
    issues: list[dict[str, Any]] = []
    block = df[list(RACES)]
    in_range = all(block.dtypes == np.float64) and not ((block.to_numpy() < 0) | (block.to_numpy() > 1)).any()
    # the usual table, float and in [0, 1] (NaN compares False), is checked at once; any other column by column,
    # to name the first bad one (a column at a time cost a bootstrap over these tables milliseconds a table)
    for r in () if in_range else RACES:
        try:
            df[r] = pd.to_numeric(df[r], errors="raise").astype(float)
        except (TypeError, ValueError):
            raise DataError(f"characters table: column {r!r} must hold likelihoods in [0, 1] or NaN") from None
        bad = df[r].notna() & ((df[r] < 0) | (df[r] > 1))
        if bad.any():
            i = df.index[bad][0]
            raise DataError(f"characters table row {i}: {r} = {df.at[i, r]} is outside [0, 1]; "
                            "likelihoods are fractions, not percent")
    for col, allowed in ALLOWED.items():
        vals = df[col]
        unknown = vals.notna() & ~vals.isin(allowed)
        if col == "gender":
            unknown = ~vals.isin(allowed)
        if unknown.any():
            counts = vals[unknown].astype(str).value_counts()
            for v, k in counts.items():
                issues.append(dict(kind="input", group=col, statistic=np.nan,
                                   reason=f"unknown {col} value {v!r} in {k} row(s): excluded from cells that "
                                          f"need {col}; allowed: {', '.join(allowed)}"))
    return df, issues


def baseline_map(baselines: Any) -> dict[str, float]:
    """Flatten baselines to {key: p*} (race codes, gender labels, pair codes; fractions).

    Accepts a plain mapping or an object with ``race``, ``gender`` and ``pair`` mappings
    (``harness.identity.baselines.Baselines``).
    """
    if isinstance(baselines, Mapping):
        return {str(k): float(v) for k, v in baselines.items()}
    out: dict[str, float] = {}
    for attr in ("race", "gender", "pair"):
        out.update({str(k): float(v) for k, v in dict(getattr(baselines, attr, {}) or {}).items()})
    if not out:
        raise DataError("baselines must be a mapping {group: p*} or an object with race/gender/pair mappings")
    return out


def _matched(df: pd.DataFrame) -> pd.Series:
    return df["first_name"].notna() & df[list(RACES)].notna().any(axis=1)


def _story_index(df: pd.DataFrame) -> np.ndarray:
    return pd.factorize(df["story_id"].astype(str))[0].astype(np.int64)


def _grid(chars: pd.DataFrame, models: Sequence[str] | None, domains: Sequence[str] | None,
          ) -> tuple[list[str], list[str]]:
    """The models and domains of the expected grid: as given, else those present in the input
    (every condition, so a model x domain with no stories of the table's kind still gets rows)."""
    if models is None:
        models = sorted(chars["model"].dropna().unique())
    if domains is None:
        present = set(chars["domain"].dropna())
        domains = sorted(d for d in ALLOWED["domain"] if d in present)
    return list(models), list(domains)


def _nan_result(statistic: str, reason: str, **kw):
    from .results import RatioResult

    return RatioResult(statistic=statistic, reason=reason, **kw)


def _row(res, **labels) -> dict[str, Any]:
    d = res.to_dict()
    row = dict(labels)
    row.update(statistic=d["estimate"], p=d["p"], nu=d["nu"], ci_low=d["ci_low"], ci_high=d["ci_high"],
               d=d.get("d", np.nan), p_normal=d["p_normal"], p_exact=d["p_exact"], p_boot=d["p_boot"],
               boot_low=d["boot_low"],
               boot_high=d["boot_high"], flags=";".join(d["flags"]), reason=d["reason"])
    for k in ("x", "n", "p_star", "x_sub", "n_sub", "x_dom", "n_dom", "t_median", "a", "b"):
        if k in d:
            row[k] = d[k]
    return row


def _finish(rows: list[dict[str, Any]], issues: list[dict[str, Any]], labels: Sequence[str],
            alpha: float, sources: Sequence[str] = Q_BH_SOURCES) -> pd.DataFrame:
    out = pd.DataFrame(rows + issues)
    missing = [c for c in dict.fromkeys((*labels, *COLUMNS)) if c not in out.columns]
    if missing:  # all at once: one at a time was much of a bootstrap's time over these tables (labelling.impact)
        out = pd.concat([out, pd.DataFrame(np.nan, index=out.index, columns=missing)], axis=1)
    pfam = np.full(len(out), np.nan)
    src = np.full(len(out), np.nan, dtype=object)
    # an undefined cell (all-zero counts kept Fisher's p = 1) is no hypothesis
    defined = out["statistic"].notna().to_numpy()
    for c in sources:  # the best principled p available per row
        take = np.isnan(pfam) & out[c].notna().to_numpy() & defined
        pfam[take] = out[c].to_numpy()[take].astype(float)
        src[take] = c
    out["q_bh"], _ = bh_adjust(pfam, alpha)
    out["q_bh_from"] = pd.Series(src, index=out.index, dtype=object)
    out["flags"] = out["flags"].fillna("")
    extra = [c for c in out.columns if c not in (*labels, *COLUMNS)]
    return out[[*labels, *COLUMNS, *extra]].reset_index(drop=True)


# ----------------------------------------------------------------------------- R_rep


def representation_table(
    chars: pd.DataFrame,
    baselines: Any,
    *,
    d_method: str = "standard",
    love_roles: Sequence[str] = ("subject", "object"),
    n_boot: int = 0,
    seed: int = 0,
    alpha: float = 0.05,
    races: Sequence[str] = RACES,
    models: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
    unmeasured: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Tables S13a-c: R_rep per model x domain for every race and gender (power-neutral stories).

    Args:
        chars: the characters table.
        baselines: {group: p*} (race codes and gender labels) or a ``Baselines``.
        d_method: "standard" or "paper" (``harness.stats.representation``).
        love_roles: roles that enter Love stories (both partners by default, [CODE]).
        n_boot: story-level bootstrap replicates (0 = none).
        seed, alpha: bootstrap seed and level.
        races: race codes to report.
        models, domains: the grid (default: those present in the input); a model x domain
            without power-neutral characters gets NaN rows with the reason.
        unmeasured: {race: why} for races the name table cannot measure: NaN rows with the reason and the
            flag ``not_measured``, out of the FDR family.

    Returns:
        DataFrame with ``model, domain, kind ("race"|"gender"), group`` and the S13 columns.
    """
    df, issues = validate_characters(chars)
    pstar = baseline_map(baselines)
    models, domains = _grid(df, models, domains)
    df = df[df["condition"] == "neutral"]
    df = df[(df["domain"] != "Love") | df["role"].isin(list(love_roles))]
    story = _story_index(df) if len(df) else np.zeros(0, np.int64)
    cells = df.groupby(["model", "domain"], sort=True).indices
    rows: list[dict[str, Any]] = []
    for model in models:
        for domain in domains:
            lab = dict(model=model, domain=domain)
            if (model, domain) not in cells:
                why = "no power-neutral characters in this model x domain"
                rows += [_row(_nan_result("R_rep", why, method="wilson"), **lab, kind="gender", group=g)
                         for g in GENDERED]
                rows += [_row(_not_measured("R_rep", unmeasured[r], "wilson") if r in (unmeasured or {}) else
                              _nan_result("R_rep", why, method="wilson"), **lab, kind="race", group=r,
                              group_display=RACE_DISPLAY.get(r, r)) for r in races]
                continue
            rows += _representation_cell(df.iloc[cells[model, domain]], story[cells[model, domain]], lab, pstar,
                                         d_method, n_boot, seed, alpha, races, unmeasured or {})
    return _finish(rows, issues, ["model", "domain", "kind", "group"], alpha)


def _not_measured(statistic: str, why: str, method: str):
    """The NaN result of a race the name table cannot measure (``unmeasured``)."""
    return _nan_result(statistic, why, method=method, flags=(NOT_MEASURED,))


def _representation_cell(cell, st, lab, pstar, d_method, n_boot, seed, alpha, races, unmeasured
                         ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    # gender rows
    gendered = cell["gender"].isin(GENDERED).to_numpy()
    ind = np.column_stack([gendered] + [(cell["gender"] == g).to_numpy() for g in GENDERED]).astype(float)
    boot = cluster_sums(ind, st, n_boot=n_boot, seed=seed) if n_boot else None
    for j, g in enumerate(GENDERED, start=1):
        res = representation_ratio(ind[:, j].sum(), ind[:, 0].sum(), pstar.get(g), kind="gender",
                                   d_method=d_method)
        if ind[:, 0].sum() == 0:
            res = _replace(res, reason="empty group: no character labelled Female, Male or Non-binary in this "
                                       "model x domain")
        res = _with_boot(res, boot, j, 0, pstar.get(g), alpha, ind[:, [0, j]], st)
        rows.append(_row(res, **lab, kind="gender", group=g))
    # race rows
    m = _matched(cell).to_numpy()
    lik = cell[list(races)].to_numpy(dtype=float)[m]
    filled = np.nan_to_num(lik, nan=0.0)
    vals = np.column_stack([np.ones(m.sum()), filled])
    boot = cluster_sums(vals, st[m], n_boot=n_boot, seed=seed) if n_boot else None
    for j, r in enumerate(races):
        x, n = filled[:, j].sum(), float(m.sum())
        if r in unmeasured:
            rows.append(_row(_not_measured("R_rep", unmeasured[r], "wilson"), **lab, kind="race", group=r,
                             group_display=RACE_DISPLAY.get(r, r)))
            continue
        if n == 0:
            res = _replace(representation_ratio(x, n, pstar.get(r), kind="race"),
                           reason="empty group: no named character matched to the name table in this model x domain")
        elif np.isnan(lik[:, j]).all():
            res = representation_ratio(np.nan, n, pstar.get(r), kind="race")
            res = _replace(res, reason=f"no named character has a {r} likelihood entry (all NaN)")
        else:
            # d's SD is that of the likelihoods (digest 5.3), undefined for one character: d NaN, not
            # the sqrt(p (1 - p)) of an indicator that representation_ratio falls back to without sd
            sd = float(np.std(filled[:, j], ddof=1)) if n > 1 else float("nan")
            res = representation_ratio(x, n, pstar.get(r), kind="race", sd=sd, d_method=d_method)
            if res.ok and (filled[:, j] > RACIALIZED).sum() < 5:
                res = _replace(res, flags=(*res.flags, "lt5_racialized"))
        res = _with_boot(res, boot, j + 1, 0, pstar.get(r), alpha, vals[:, [0, j + 1]], st[m])
        rows.append(_row(res, **lab, kind="race", group=r, group_display=RACE_DISPLAY.get(r, r)))
    return rows


def _replace(res, **kw):
    from dataclasses import replace

    return replace(res, **kw)


def _with_boot(res, boot, jx, jn, p_star, alpha, vals, st):
    """Bootstrap columns of an R_rep cell from the sums ``boot``; ``vals`` and ``st``, the
    columns the ratio reads and their stories, tell whether the stories differ at all."""
    if boot is None or not res.ok or p_star is None:
        return res
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = boot[1:, jx] / boot[1:, jn] / p_star
    lo, hi, p, flags = boot_summary(reps, alpha, stories_vary=stories_differ(vals, st))
    return _replace(res, boot_low=lo, boot_high=hi, p_boot=p, flags=(*res.flags, *flags))


# ----------------------------------------------------------------------------- pairs


def _pair(a: str, b: str) -> str | None:
    sa, sb = SHORT.get(a), SHORT.get(b)
    if sa is None or sb is None:
        return None
    x, y = sorted((sa, sb), key=PAIR_ORDER.__getitem__)
    return f"{x}-{y}"


def orientation_table(
    chars: pd.DataFrame,
    baselines: Any,
    *,
    neutral_only: bool = False,
    n_boot: int = 0,
    seed: int = 0,
    alpha: float = 0.05,
    models: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Table S13d: R_rep of the six romantic gender pairs per model.

    A story counts when it is romantic (``love_type == "romantic"``; all conditions by default
    as in the authors' code, ``neutral_only=True`` for the table title's reading) and has one
    subject and one object both labelled F/M/NB; d is the standard (p - p*)/sqrt(p (1 - p)).
    Every model (present in the input, or ``models=``) gets its six rows; a model without
    romantic stories gets NaN rows with the reason.
    """
    df, issues = validate_characters(chars)
    pstar = baseline_map(baselines)
    models, _ = _grid(df, models, ())
    df = df[(df["love_type"] == "romantic") & df["role"].isin(["subject", "object"])]
    if neutral_only:
        df = df[df["condition"] == "neutral"]
    by_model = dict(tuple(df.groupby("model", sort=True)))
    rows: list[dict[str, Any]] = []
    for model in models:
        if model not in by_model:
            why = "no romantic stories for this model" + (" (power-neutral only)" if neutral_only else "")
            rows += [_row(_nan_result("R_rep", why, method="wilson"), model=model, domain="Love", kind="pair",
                          group=k) for k in PAIRS]
            continue
        cell = by_model[model]
        # stories (sorted by id) with exactly one subject and one object
        by_role = cell.groupby(["story_id", "role"])["gender"]
        n = by_role.size().unstack("role").reindex(columns=["subject", "object"])
        first = by_role.first().unstack("role").reindex(columns=["subject", "object"])
        one_each = (n["subject"] == 1) & (n["object"] == 1)
        ps = pd.Series([_pair(a, b) for a, b in zip(first["subject"][one_each], first["object"][one_each])],
                       index=first.index[one_each], dtype=object).dropna()
        ind = np.column_stack([(ps == k).to_numpy() for k in PAIRS]).astype(float) if len(ps) else np.zeros((0, 6))
        boot, vals = None, np.column_stack([np.ones(len(ps)), ind])
        if n_boot and len(ps):
            boot = cluster_sums(vals, np.arange(len(ps)), n_boot=n_boot, seed=seed)
        for j, k in enumerate(PAIRS):
            res = representation_ratio(ind[:, j].sum(), float(len(ps)), pstar.get(k), kind="pair")
            if not len(ps):
                res = _replace(res, reason="empty group: no romantic story with one subject and one object "
                                           "labelled Female, Male or Non-binary")
            res = _with_boot(res, boot, j + 1, 0, pstar.get(k), alpha, vals[:, [0, j + 1]], np.arange(len(ps)))
            rows.append(_row(res, model=model, domain="Love", kind="pair", group=k))
    return _finish(rows, issues, ["model", "domain", "kind", "group"], alpha)


# ----------------------------------------------------------------------------- R_sub


def subordination_table(
    chars: pd.DataFrame,
    *,
    mode: str = "paper",
    denominator: str = "joint",
    n_boot: int = 0,
    seed: int = 0,
    alpha: float = 0.05,
    races: Sequence[str] = RACES,
    models: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
    unmeasured: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Tables S13e-m: R_sub per model x domain x gender (F, M, NB, All) x race.

    ``mode``: "paper" or "principled" (``harness.stats.subordination``). ``denominator``:
    "joint" (authors' code: all gendered characters of the role, so the ratio compares joint
    shares p(race and g | role)) or "conditional" (characters of gender g: p(race | g, role)).
    Bootstrap replicates (``n_boot``) resample stories and use the same estimator as ``mode``,
    giving ``boot_low``/``boot_high`` and ``p_boot``.

    Grid: every model x domain (present in the input, or ``models=``/``domains=``) x gender x
    race. A model x domain without named power-laden characters, and a gender with no named
    power-laden character in either role, give NaN rows with the reason (in both modes: the
    authors' "both counts 0 -> R = 1" rule is kept for a race absent from a gender that is
    present, not for a gender with no characters at all). ``unmeasured``: as ``representation_table``'s.
    """
    unmeasured = unmeasured or {}
    if denominator not in ("joint", "conditional"):
        raise ValueError(f"subordination_table: denominator must be 'joint' or 'conditional', got {denominator!r}")
    df, issues = validate_characters(chars)
    models, domains = _grid(df, models, domains)
    df = df[(df["condition"] == "laden") & df["power_role"].isin(["dominant", "subordinate"])]
    df = df[_matched(df)]
    story = _story_index(df) if len(df) else np.zeros(0, np.int64)
    cells = df.groupby(["model", "domain"], sort=True).indices
    rows: list[dict[str, Any]] = []
    for model, domain in ((m, d) for m in models for d in domains):
        if (model, domain) not in cells:
            why = "no named characters in power-laden stories of this model x domain"
            rows += [_row(_not_measured("R_sub", unmeasured[r], "katz") if r in unmeasured else
                          SubordinationResult(statistic="R_sub", method="katz", reason=why), model=model,
                          domain=domain, gender=g, group=r, group_display=RACE_DISPLAY.get(r, r))
                     for g in (*GENDERED, "All") for r in races]
            continue
        idx = cells[model, domain]
        cell = df.iloc[idx]
        st = story[idx]
        nu = float(np.unique(st).size - 1)
        sub = (cell["power_role"] == "subordinate").to_numpy()
        gend = cell["gender"].isin(GENDERED).to_numpy()
        lik = cell[list(races)].to_numpy(dtype=float)
        filled = np.nan_to_num(lik, nan=0.0)
        for g in (*GENDERED, "All"):
            in_g = np.ones(len(cell), bool) if g == "All" else (cell["gender"] == g).to_numpy()
            in_den = np.ones(len(cell), bool) if g == "All" else (gend if denominator == "joint" else in_g)
            cols = [in_den & sub, in_den & ~sub]
            for j in range(len(races)):
                cols += [np.where(in_g & sub, filled[:, j], 0.0), np.where(in_g & ~sub, filled[:, j], 0.0)]
            vals = np.column_stack(cols).astype(float)
            sums = cluster_sums(vals, st, n_boot=n_boot, seed=seed)
            n_sub, n_dom = sums[0, 0], sums[0, 1]
            for j, r in enumerate(races):
                x_sub, x_dom = sums[0, 2 + 2 * j], sums[0, 3 + 2 * j]
                lab = dict(model=model, domain=domain, gender=g, group=r, group_display=RACE_DISPLAY.get(r, r))
                if r in unmeasured:
                    rows.append(_row(_not_measured("R_sub", unmeasured[r], "katz"), **lab))
                    continue
                if not in_g.any():
                    res = SubordinationResult(
                        statistic="R_sub", method="katz", x_sub=x_sub, n_sub=n_sub, x_dom=x_dom, n_dom=n_dom, nu=nu,
                        reason=f"no named {g} characters in power-laden roles of this model x domain")
                    rows.append(_row(res, **lab))
                    continue
                if np.isnan(lik[in_g, j]).all():
                    res = subordination_ratio(np.nan, n_sub, np.nan, n_dom, mode=mode, nu=nu)
                    res = _replace(res, reason=f"no {g} character has a {r} likelihood entry (all NaN)")
                    rows.append(_row(res, **lab))
                    continue
                res = subordination_ratio(x_sub, n_sub, x_dom, n_dom, mode=mode, nu=nu, exact=False)
                if res.ok:
                    nrac = int((filled[in_g, j] > RACIALIZED).sum())
                    if nrac < 5:
                        res = _replace(res, flags=(*res.flags, "lt5_racialized"))
                    if n_boot:
                        reps = _sub_reps(sums[1:, 2 + 2 * j], sums[1:, 0], sums[1:, 3 + 2 * j], sums[1:, 1], mode)
                        vary = stories_differ(vals[:, [0, 1, 2 + 2 * j, 3 + 2 * j]], st)
                        # withheld where a count is 0 (not where paper mode's eps shifted a count under 1)
                        zero = min(x_sub, x_dom) == 0
                        lo, hi, p, flags = boot_summary(reps, alpha, stories_vary=vary, zero_count=zero)
                        res = _replace(res, boot_low=lo, boot_high=hi, p_boot=p, flags=(*res.flags, *flags))
                rows.append(_row(res, **lab))
    return _finish(rows, issues, ["model", "domain", "gender", "group"], alpha)


def _sub_reps(xs, ns, xd, nd, mode):
    if mode == "paper":
        return np.array([paper_point_estimate(*v)[0] if v[1] > 0 and v[3] > 0 else np.nan
                         for v in zip(xs, ns, xd, nd)])
    e = np.where((xs == 0) | (xd == 0), 0.5, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = ((xs + e) / (ns + 2 * e)) / ((xd + e) / (nd + 2 * e))
    return np.where((xs + xd > 0) & (ns > 0) & (nd > 0), r, np.nan)


# ----------------------------------------------------------------------------- R_mrs


def _rmrs_inputs(chars, races, genders, models=None, domains=None):
    df, issues = validate_characters(chars)
    models, domains = _grid(df, models, domains)
    df = df[(df["condition"] == "laden") & df["power_role"].isin(["dominant", "subordinate"])]
    df = df[_matched(df) & df["gender"].isin(list(genders))]
    present = set(zip(df["model"], df["domain"]))
    # the full grid: every model x domain x gender is a sweep group, with or without characters
    cells = [(m, d, g) for m in models for d in domains for g in genders]
    gid = {c: i for i, c in enumerate(cells)}
    group = np.array([gid.get(c, -1) for c in zip(df["model"], df["domain"], df["gender"])], dtype=np.int32)
    keep = group >= 0
    df, group = df[keep], group[keep]
    cells = [(*c, (c[0], c[1]) in present) for c in cells]
    role = (df["power_role"] == "subordinate").to_numpy().astype(np.int8)
    lik = df[list(races)].to_numpy(dtype=np.float32)
    return df, issues, cells, lik, role, group, _story_index(df) if len(df) else np.zeros(0, np.int64)


def rmrs_table(
    chars: pd.DataFrame,
    *,
    thresholds: Sequence[int] | np.ndarray = DEFAULT_THRESHOLDS,
    n_boot: int = 0,
    seed: int = 0,
    alpha: float = 0.05,
    backend: str = "numpy",
    races: Sequence[str] = RMRS_RACES,
    genders: Sequence[str] = (FEMALE, MALE),
    models: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Tables S13n-p: R_mrs per model x domain x gender x race, with Katz interval at the median.

    One ``sweep_counts`` call covers every cell (cells are the sweep's groups); with
    ``n_boot`` > 0 its Poisson story replicates give ``boot_low``/``boot_high`` and ``p_boot``.
    Grid: every model x domain (present in the input, or ``models=``/``domains=``) x gender x
    race; a cell without named power-laden characters of the gender (in one role or both)
    is a NaN row with the reason.
    """
    thr = np.asarray(thresholds, dtype=np.int32)
    df, issues, cells, lik, role, group, story = _rmrs_inputs(chars, races, genders, models, domains)
    rows: list[dict[str, Any]] = []
    if cells:
        sc = sweep_counts(lik, role, group, story, thr, n_groups=len(cells), n_boot=n_boot, seed=seed,
                          backend=backend)
        above, totals = np.asarray(sc.above), np.asarray(sc.totals)
        for gi, (model, domain, g, present) in enumerate(cells):
            why = None
            if not present:
                why = "no named characters in power-laden stories of this model x domain"
            elif totals[0, gi].sum() == 0:
                why = f"no named {g} characters in power-laden roles of this model x domain"
            for j, r in enumerate(races):
                if why is not None:
                    res = RmrsResult(statistic="R_mrs", method="katz", n_sub=0.0, n_dom=0.0,
                                     thresholds=tuple(int(t) for t in thr), reason=why)
                    rows.append(_row(res, model=model, domain=domain, gender=g, group=r,
                                     group_display=RACE_DISPLAY.get(r, r)))
                    continue
                kw = {}
                if n_boot:
                    mine = group == gi
                    kw = dict(boot_a=above[1:, gi, j, :, 1], boot_b=above[1:, gi, j, :, 0],
                              boot_n_sub=totals[1:, gi, 1], boot_n_dom=totals[1:, gi, 0],
                              stories_vary=_characters_differ(lik[mine, j], role[mine], story[mine]))
                res = rmrs_from_counts(above[0, gi, j, :, 1], above[0, gi, j, :, 0], totals[0, gi, 1],
                                       totals[0, gi, 0], thr, alpha=alpha, **kw)
                rows.append(_row(res, model=model, domain=domain, gender=g, group=r,
                                 group_display=RACE_DISPLAY.get(r, r)))
    return _finish(rows, issues, ["model", "domain", "gender", "group"], alpha, Q_BH_SOURCES_RMRS)


def _characters_differ(lik, role, story) -> bool:
    """True when two stories hold different characters (the multisets of role and likelihood
    differ). A story's R_mrs counts are a function of these, so stories alike contribute alike
    (``harness.stats.bootstrap.boot_summary`` says why their bootstrap is withheld)."""
    key = np.where(np.isnan(lik), -1.0, lik)
    order = np.lexsort((key, role, story))
    st, rl, key = story[order], role[order], key[order]
    _, size = np.unique(st, return_counts=True)
    if size.size < 2:
        return False
    if (size != size[0]).any():
        return True
    k = int(size[0])
    return bool((rl.reshape(-1, k) != rl[:k]).any() or (key.reshape(-1, k) != key[:k]).any())


def threshold_curve(
    chars: pd.DataFrame,
    *,
    thresholds: Sequence[int] | np.ndarray = np.arange(0, 100),
    races: Sequence[str] = RMRS_RACES,
    genders: Sequence[str] = (FEMALE, MALE),
    backend: str = "numpy",
) -> pd.DataFrame:
    """Per-threshold ratios R_t (Fig. 3b input): one row per model x domain x gender x race x t.

    Columns ``a, b, n_sub, n_dom, ratio, smoothed``; ratio NaN where no name is above t.
    """
    thr = np.asarray(thresholds, dtype=np.int32)
    _, _, cells, lik, role, group, story = _rmrs_inputs(chars, races, genders)
    if not len(lik):
        return pd.DataFrame(columns=["model", "domain", "gender", "group", "t", "a", "b", "n_sub", "n_dom", "ratio",
                                     "smoothed"])
    sc = sweep_counts(lik, role, group, story, thr, n_groups=len(cells), backend=backend)
    above, totals = np.asarray(sc.above)[0], np.asarray(sc.totals)[0]
    out = []
    for gi, (model, domain, g, _) in enumerate(cells):
        if totals[gi].sum() == 0:  # the curve keeps cells with characters only
            continue
        for j, r in enumerate(races):
            a, b = above[gi, j, :, 1], above[gi, j, :, 0]
            ratio, sm = threshold_ratios(a, b, totals[gi, 1], totals[gi, 0])
            out.append(pd.DataFrame(dict(model=model, domain=domain, gender=g, group=r, t=thr, a=a, b=b,
                                         n_sub=totals[gi, 1], n_dom=totals[gi, 0], ratio=ratio, smoothed=sm)))
    return pd.concat(out, ignore_index=True)


def pooled_curve(curve: pd.DataFrame) -> pd.DataFrame:
    """Fig. 3b: the median across models of R_t per domain x gender x race x t.

    Models whose R_t is undefined at t are left out of that median; ``n_models`` counts the rest.
    """
    g = curve.groupby(["domain", "gender", "group", "t"], sort=True)["ratio"]
    return pd.DataFrame({"ratio": g.agg(lambda s: float(median_ratio(s.to_numpy()))),
                         "n_models": g.count()}).reset_index()


def name_ratio_table(chars: pd.DataFrame, *, by: Sequence[str] = ("model", "domain")) -> pd.DataFrame:
    """Fig. 3a: per-name subordination ratios within each ``by`` group (power-laden stories).

    ratio = (n_sub,name / N_sub) / (n_dom,name / N_dom) with add-one smoothing when one name
    count is 0 (``harness.stats.rmrs.name_ratio``); N are the group's named characters per
    role. The name's race likelihoods come along for the scatter's x-axis.
    """
    from .rmrs import name_ratio

    df, _ = validate_characters(chars)
    df = df[(df["condition"] == "laden") & df["power_role"].isin(["dominant", "subordinate"]) & _matched(df)]
    by = list(by)
    cols = [*by, "first_name", "n_sub", "n_dom", "N_sub", "N_dom", "ratio", *RACES]
    if df.empty:
        return pd.DataFrame(columns=cols)
    counts = (df.assign(sub=df["power_role"] == "subordinate", dom=df["power_role"] == "dominant")
              .groupby([*by, "first_name"], sort=True)
              .agg(n_sub=("sub", "sum"), n_dom=("dom", "sum"), **{r: (r, "first") for r in RACES})
              .reset_index())
    tot = counts.groupby(by)[["n_sub", "n_dom"]].transform("sum")
    counts["N_sub"], counts["N_dom"] = tot["n_sub"], tot["n_dom"]
    counts["ratio"] = name_ratio(counts["n_sub"], counts["N_sub"], counts["n_dom"], counts["N_dom"])
    return counts[cols]
