"""The follow-up studies' tests (digest 002, A.2.3 and A.2.4): each race against the reference race by a
one-sided Welch t-test on the raw pair cosines, pooled over gender and format.

The authors ran R's ``t.test(minority, white, alternative = "greater")`` on the pairs themselves (the chef
prompt: 9,900 pairs per race, African t(19,669) = 34.22). A Welch test needs only each side's count, mean and
variance, which the per-cell sums give exactly, so no pair is materialised: the same t, fractional df and p as
on the pairs. Like the paper's, the test treats the pairs as independent, which they are not (a text is in
n - 1 pairs of its prompt); the text bootstrap of the models (``text_coefficients.csv``) is the interval that
accounts for it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from harness.homogeneity.mixed import DEFAULT_REFS

COLUMNS = ["race", "reference", "n_pairs", "mean_raw", "sd_raw", "n_pairs_ref", "mean_raw_ref", "sd_raw_ref",
           "difference", "t", "df", "p_greater"]


def _pooled(cells: pd.DataFrame) -> tuple[float, float, float]:
    """(pairs, mean, variance with n - 1) of the pair cosines of ``cells`` from their n_pairs, sum and sumsq."""
    n, s, q = (float(cells[c].sum()) for c in ("n_pairs", "sum", "sumsq"))
    mean = s / n if n else np.nan
    var = max(q - n * mean * mean, 0.0) / (n - 1) if n > 1 else np.nan
    return n, mean, var


def welch_table(cells: pd.DataFrame, *, reference: str | None = None) -> pd.DataFrame:
    """One row per race other than ``reference`` (default the models' reference race, White): the one-sided
    Welch t-test that its pair cosines are greater (its portrayals more homogeneous) than the reference's.

    ``cells``: per prompt ``race``, ``n_pairs``, ``sum`` and ``sumsq`` of the raw cosines (``cell_table``).
    A race, or the reference, with fewer than two pairs gets NaN t, df and p.
    """
    reference = reference or DEFAULT_REFS["race"]
    by_race = {race: _pooled(g) for race, g in cells.groupby("race", sort=True)}
    n_ref, mean_ref, var_ref = by_race.get(reference, (0.0, np.nan, np.nan))
    rows = []
    for race, (n, mean, var) in by_race.items():
        if race == reference:
            continue
        t = df = p = np.nan
        if n > 1 and n_ref > 1 and var + var_ref > 0:
            t, p = stats.ttest_ind_from_stats(mean, np.sqrt(var), n, mean_ref, np.sqrt(var_ref), n_ref,
                                              equal_var=False, alternative="greater")
            a, b = var / n, var_ref / n_ref
            df = (a + b) ** 2 / (a * a / (n - 1) + b * b / (n_ref - 1))  # Welch-Satterthwaite, as R reports it
        rows.append({"race": race, "reference": reference, "n_pairs": int(n), "mean_raw": mean, "sd_raw": np.sqrt(var),
                     "n_pairs_ref": int(n_ref), "mean_raw_ref": mean_ref, "sd_raw_ref": np.sqrt(var_ref),
                     "difference": mean - mean_ref, "t": float(t), "df": df, "p_greater": float(p)})
    return pd.DataFrame(rows, columns=COLUMNS)


__all__ = ["COLUMNS", "welch_table"]
