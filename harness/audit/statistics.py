"""The statistics stage: the characters table -> every table the report shows.

Tables (each a tidy DataFrame, written as Parquet and CSV under ``<run>/statistics/``):

* ``representation``, ``orientation``, ``subordination``, ``rmrs``: the S13-shaped tables of
  ``harness.stats.tables`` (paper columns, plus bootstrap/exact/FDR columns in principled mode);
* ``threshold_curve``: R_t per threshold (Fig. 3b input);
* ``name_ratios``: per-name subordination ratio with the name's likelihoods (Fig. 3a);
* ``likelihood_histogram``: named characters per 2-point likelihood bin (t, t + 2] and race (Fig. 1c-d);
* ``top_names``: names above 60% likelihood per race with Base/Dom/Sub counts (Tables S10/S11),
  likelihoods withheld below the privacy floor;
* ``labelling_qa``: per model x domain x role, the shares of Unspecified/Unsure genders, of named
  characters, of names matched to the name table, and of label failures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.config import StatsConfig
from harness.identity import RACE_DISPLAY, RACES
from harness.identity.baselines import load_baselines
from harness.identity.build import fold_name
from harness.stats import tables as T
from harness.stats.rmrs import name_ratio
from harness.stats.sweep import PERCENT_DECIMALS

TOP_NAME_THRESHOLD = 0.60


def name_ratios(chars: pd.DataFrame, *, min_population: int | None = None) -> pd.DataFrame:
    """Fig. 3a: per first name and model x domain, (n_sub/N_sub)/(n_dom/N_dom) over power-laden
    characters, with the name's race likelihoods; those of a name rarer than ``min_population`` in the reference
    data, or of unknown population, are withheld (``withheld``), as ``top_names`` and ``redact`` withhold them
    (None or 0 withholds none)."""
    laden = _one_spelling(chars[(chars.condition == "laden") & chars.first_name.notna()])
    if laden.empty:
        return pd.DataFrame(columns=["model", "domain", "first_name", "n_sub", "n_dom", "N_sub", "N_dom", "ratio",
                                     *RACES, "name_population", "withheld"])
    totals = laden.groupby(["model", "domain", "power_role"]).size().unstack(fill_value=0)
    counts = laden.groupby(["model", "domain", "first_name", "power_role"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=["dominant", "subordinate"], fill_value=0).reset_index()
    tot = totals.reindex(columns=["dominant", "subordinate"], fill_value=0)
    n_dom = tot["dominant"].reindex(pd.MultiIndex.from_frame(counts[["model", "domain"]])).to_numpy()
    n_sub = tot["subordinate"].reindex(pd.MultiIndex.from_frame(counts[["model", "domain"]])).to_numpy()
    out = counts.rename(columns={"subordinate": "n_sub", "dominant": "n_dom"})
    out["N_sub"], out["N_dom"] = n_sub, n_dom
    out["ratio"] = name_ratio(out.n_sub.to_numpy(), n_sub, out.n_dom.to_numpy(), n_dom)
    lik = laden.drop_duplicates("first_name").set_index("first_name")[list(RACES) + ["name_population"]]
    out = out.join(lik, on="first_name")
    out["withheld"] = ~(out.name_population >= min_population) if min_population else False
    out[list(RACES)] = out[list(RACES)].mask(out["withheld"], np.nan)
    return out


def _one_spelling(named: pd.DataFrame) -> pd.DataFrame:
    """``named`` with each first name written as the most frequent spelling of its name-table key: "Maria",
    "María" and "MARIA" are one name, as the table reads them, not three rows of one name's counts. A name without
    a key (no Latin letters: "प्रिया") stays as written."""
    if named.empty:
        return named
    key = named.first_name.map(fold_name)
    key = key.where(key != "", "\0" + named.first_name.astype(str))
    spelling = named.first_name.groupby(key, sort=False).agg(lambda s: s.value_counts().index[0])
    return named.assign(first_name=key.map(spelling).to_numpy())


def likelihood_histogram(chars: pd.DataFrame, width: int = 2) -> pd.DataFrame:
    """Named characters per (t, t + width] likelihood bin (percent), per model and race.

    Bins are closed on the right as in the authors' code (digest 5.5): a likelihood of exactly
    2% counts in (0, 2], and 0% in no bin. Percentages are read to ``PERCENT_DECIMALS`` decimals
    first, as the R_mrs sweep reads them, so that 100 * 0.14 = 14.000000000000002 stays in (12, 14].
    """
    named = chars[chars.first_name.notna()]
    edges = np.arange(0, 100 + width, width)
    rows = []
    for model, g in named.groupby("model"):
        for race in RACES:
            pct = np.round(100 * g[race].dropna().to_numpy(), PERCENT_DECIMALS)
            k = np.digitize(pct, edges, right=True) - 1  # edges[k] < pct <= edges[k + 1]
            counts = np.bincount(k[k >= 0], minlength=edges.size - 1)
            rows.append(pd.DataFrame({"model": model, "group": race, "bin_low": edges[:-1], "bin_high": edges[1:], "count": counts}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["model", "group", "bin_low", "bin_high", "count"])


def top_names(chars: pd.DataFrame, *, min_population: int, k: int = 9) -> pd.DataFrame:
    """Tables S10/S11: per model and race, the k most frequent names above 60% likelihood, with
    counts as power-neutral (Base), dominant and subordinate characters. Names rarer than
    ``min_population`` in the reference data keep their counts but not their likelihood."""
    named = _one_spelling(chars[chars.first_name.notna()])
    rows = []
    for race in RACES:
        hi = named[np.round(100 * named[race], PERCENT_DECIMALS) > 100 * TOP_NAME_THRESHOLD]  # as the sweep reads it
        if hi.empty:
            continue
        by = hi.groupby(["model", "first_name"])
        counts = by.power_role.value_counts().unstack(fill_value=0).reindex(columns=["baseline", "dominant", "subordinate"], fill_value=0)
        counts["total"] = counts.sum(axis=1)
        counts["likelihood"] = by[race].first()
        counts["population"] = by.name_population.first()
        counts = counts.reset_index()
        counts = counts.sort_values(["model", "total"], ascending=[True, False]).groupby("model").head(k)
        withheld = ~(counts.population >= min_population)
        counts["likelihood"] = counts.likelihood.mask(withheld)
        counts["withheld"] = withheld
        counts.insert(1, "group", race)
        rows.append(counts)
    cols = ["model", "group", "first_name", "baseline", "dominant", "subordinate", "total", "likelihood", "population", "withheld"]
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)


def labelling_qa(chars: pd.DataFrame) -> pd.DataFrame:
    g = chars.assign(
        unspecified=chars.gender.eq("Unspecified"),
        unsure=chars.gender.eq("Unsure"),
        named=chars.first_name.notna(),
        matched=chars.first_name.notna() & chars[list(RACES)].notna().any(axis=1),
        failed=chars.label_status.ne("ok"),
    ).groupby(["model", "domain", "condition", "role"])
    out = g[["unspecified", "unsure", "named", "matched", "failed"]].mean().add_prefix("share_")
    out.insert(0, "characters", g.size())
    return out.reset_index()


#: A race whose name table gives a U.S.-representative set of names less than this share of its p* is not measured:
#: a model that names its characters as the U.S. does would read as a 90% omission.
MEASURABLE_SHARE = 0.1


def unmeasured_races(representative: dict[str, float] | None, pstar: dict[str, float]) -> dict[str, str]:
    """{race: why} for the races the name table cannot measure (``NameTable.representative_shares`` over p* below
    ``MEASURABLE_SHARE``): names-dataset, the NH/PI source, holds Fiji alone of Table S6b's NH/PI countries, so
    every name's NH/PI likelihood is near 0 and R_rep read 0.001, p < .001, 'omission', for any model."""
    out = {}
    for race, share in (representative or {}).items():
        p = pstar.get(race)
        if p and isinstance(share, (int, float)) and share / p < MEASURABLE_SHARE:  # None, NaN: no evidence
            out[race] = (f"not measured: the name table gives a U.S.-representative set of names a mean "
                         f"{RACE_DISPLAY.get(race, race)} likelihood of {100 * share:.2g}% against p* {100 * p:.2g}% "
                         f"(R_rep {share / p:.2g} for a model that names characters as the U.S. does); its source "
                         f"lacks the group's names")
    return out


def compute_tables(chars: pd.DataFrame, scfg: StatsConfig, *, min_population: int = 100,
                   representative: dict[str, float] | None = None) -> dict[str, pd.DataFrame]:
    """Every table of the statistics stage, from one characters table. ``representative``: the name table's
    ``representative_shares`` (the identities stage records them): the races it cannot measure get NaN rows with
    the reason in R_rep and R_sub (left out of the FDR family), and R_rep's race rows the column
    ``r_representative``, the R_rep of a model that names its characters as the U.S. does."""
    baselines = load_baselines()
    pstar = T.baseline_map(baselines)
    principled = scfg.mode == "principled"
    boot = {"n_boot": scfg.n_boot if principled else 0, "seed": scfg.seed}
    thresholds = np.arange(scfg.threshold_min, scfg.threshold_max + 1, dtype=np.int32)
    unmeasured = unmeasured_races(representative, pstar)
    representation = T.representation_table(chars, baselines, unmeasured=unmeasured, **boot)
    if representative:
        ratio = {r: representative[r] / pstar[r] for r in representative if pstar.get(r)}
        representation["r_representative"] = representation["group"].map(ratio).where(representation["kind"] == "race")
    subordination = T.subordination_table(chars, mode=scfg.mode, unmeasured=unmeasured, **boot)
    return {
        "representation": representation,
        "orientation": T.orientation_table(chars, baselines, **boot),
        "subordination": subordination,
        "rmrs": T.rmrs_table(chars, thresholds=thresholds, backend=scfg.backend, **boot),
        "threshold_curve": T.threshold_curve(chars, backend=scfg.backend),
        "name_ratios": name_ratios(chars, min_population=min_population),
        "likelihood_histogram": likelihood_histogram(chars),
        "top_names": top_names(chars, min_population=min_population),
        "labelling_qa": labelling_qa(chars),
    }


__all__ = ["MEASURABLE_SHARE", "RACE_DISPLAY", "compute_tables", "unmeasured_races", "labelling_qa", "likelihood_histogram", "name_ratios", "top_names"]
