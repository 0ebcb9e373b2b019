"""Small hand-made cases of the ratio statistics (R_rep, R_sub, R_mrs) that the published rows do not reach: which
threshold's counts give R_mrs its flags and exact p, the paper-mode d of race rows, and the NaN results (with the
reason) that impossible input must give instead of a figure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.stats.representation import cohens_d, representation_ratio
from harness.stats.rmrs import rmrs_from_counts, threshold_ratios
from harness.stats.subordination import subordination_ratio

# ---------------------------------------------------------------- R_mrs


def test_rmrs_exact_p_is_fisher_on_the_unsmoothed_counts_of_the_median_threshold():
    """Fisher's p at the median threshold tests the names counted, not the add-one smoothed counts of the Katz
    interval: S13n ChatGPT3.5 Learning Fem. Asian (a = 7, b = 0) is p = 6.0e-6 on [[7, 2876], [0, 13156]]; on the
    smoothed [[8, 2876], [1, 13156]] it would be 8.2e-6, and this p feeds q_bh when no bootstrap runs."""
    res = rmrs_from_counts([7], [0], 2883, 13156)
    assert "smoothed" in res.flags and (res.a, res.b) == (7, 0)
    assert res.p_exact == sps.fisher_exact([[7, 2876], [0, 13156]]).pvalue
    assert not math.isclose(res.p_exact, sps.fisher_exact([[8, 2876], [1, 13156]]).pvalue, rel_tol=0.1)


def test_rmrs_smoothed_flag_is_the_median_thresholds_own():
    """``smoothed`` says the *median* threshold needed add-one smoothing: a high threshold with b = 0 that is not
    the median one leaves the cell unflagged."""
    res = rmrs_from_counts([9, 6, 4, 1], [3, 2, 1, 0], 100, 100)  # ratios 3, 3, 4 and (smoothed) 2
    assert res.estimate == 3.0 and res.t_median == 1 and "smoothed" not in res.flags
    assert "smoothed" in rmrs_from_counts([9, 6, 4, 1], [0, 0, 0, 0], 100, 100).flags


def test_rmrs_empty_role_is_named_and_a_zero_total_gives_nan_ratios():
    """An empty role gives NaN with the reason naming that role (not "no name above any threshold"), and
    ``threshold_ratios`` is NaN, not inf, where a role total is 0."""
    sub = rmrs_from_counts([1, 1], [1, 1], 0, 10)
    dom = rmrs_from_counts([1, 1], [1, 1], 10, 0)
    assert math.isnan(sub.estimate) and sub.reason == "empty group: no named subordinate characters of this gender"
    assert math.isnan(dom.estimate) and dom.reason == "empty group: no named dominant characters of this gender"
    r, _ = threshold_ratios([1, 0], [1, 1], [0, 10], [10, 0])
    assert np.isnan(r).all()


# ---------------------------------------------------------------- R_rep


def test_paper_d_divides_only_single_gender_rows_by_sqrt10():
    """``d_method="paper"`` keeps the standard d of race rows (d = (p - p*) / sd with the likelihoods' sd) and of
    pair rows; only gender rows lose the factor sqrt(10)."""
    race = representation_ratio(30, 1000, 0.05, kind="race", sd=0.2, d_method="paper")
    assert math.isclose(race.d, (0.03 - 0.05) / 0.2) and "d_paper_sqrt10" not in race.flags
    pair = representation_ratio(30, 1000, 0.05, kind="pair", d_method="paper")
    assert math.isclose(pair.d, (0.03 - 0.05) / math.sqrt(0.03 * 0.97)) and "d_paper_sqrt10" not in pair.flags


def test_cohens_d_of_a_zero_share_is_nan_even_with_a_likelihood_sd():
    """d is "N/A" (NaN) for a zero share whatever the sd (race rows pass the likelihoods' sd), and only a share of
    exactly 0 is flagged ``zero_count``."""
    assert math.isnan(cohens_d(0.0, 0.1, 0.05))
    zero = representation_ratio(0, 1000, 0.004, kind="race", sd=0.05)
    assert math.isnan(zero.d) and "zero_count" in zero.flags
    small = representation_ratio(0.5, 1000, 0.004, kind="race", sd=0.05)
    assert math.isclose(small.d, (0.0005 - 0.004) / 0.05) and "zero_count" not in small.flags


@pytest.mark.parametrize("x, n, p_star, reason", [
    (11, 10, 0.5, "count 11 outside [0, n = 10]"),
    (-1, 10, 0.5, "count -1 outside [0, n = 10]"),
    (float("nan"), 10, 0.5, "count is NaN"),
    (3, 10, 1.0, "no usable baseline p*"),
    (3, 10, 0.0, "no usable baseline p*"),
    (3, 10, None, "no usable baseline p*"),
])
def test_representation_impossible_input_is_nan_with_a_reason(x, n, p_star, reason):
    """A count outside [0, n], a NaN count or a baseline outside (0, 1) gives NaN and says why, never a ratio."""
    r = representation_ratio(x, n, p_star, kind="gender")
    assert math.isnan(r.estimate) and math.isnan(r.ci_high) and not r.ok and r.reason.startswith(reason)


def test_fractional_gender_count_has_no_exact_p_and_says_so():
    """The binomial test needs whole counts: a fractional gender count gets NaN and ``no_exact_fractional``."""
    r = representation_ratio(2.5, 10, 0.5, kind="gender")
    assert math.isnan(r.p_exact) and "no_exact_fractional" in r.flags
    assert "no_exact_fractional" not in representation_ratio(2, 10, 0.5, kind="gender").flags


# ---------------------------------------------------------------- R_sub


@pytest.mark.parametrize("mode", ["paper", "principled"])
def test_subordination_impossible_counts_are_nan_with_a_reason(mode):
    """A count above its role total or a NaN count gives NaN with the reason, in both modes."""
    over = subordination_ratio(11, 10, 1, 10, mode=mode)
    assert math.isnan(over.estimate) and over.reason == "count outside [0, n]"
    assert subordination_ratio(1, 10, 11, 10, mode=mode).reason == "count outside [0, n]"
    assert subordination_ratio(-0.5, 10, 1, 10, mode=mode).reason == "count outside [0, n]"
    nan = subordination_ratio(float("nan"), 10, 1, 10, mode=mode)
    assert math.isnan(nan.estimate) and nan.reason.startswith("NaN count")


def test_subordination_nu_defaults_to_both_totals_minus_two():
    """nu = n_sub + n_dom - 2 unless the caller supplies its own."""
    assert subordination_ratio(3, 10, 1, 20).nu == 28
    assert subordination_ratio(3, 10, 1, 20, nu=7).nu == 7


def test_a_median_several_thresholds_share_takes_the_lowest_of_them():
    """Thresholds 10, 20 and 30 all give the ratio 2: the interval and p come from t = 10, the one with the most
    names (8 + 4), as the rule between two thresholds also prefers more names."""
    res = rmrs_from_counts([8, 4, 2], [4, 2, 1], 100, 100, thresholds=[10, 20, 30])
    assert res.estimate == 2.0 and "median_between_thresholds" not in res.flags
    assert (res.t_median, res.a, res.b) == (10.0, 8.0, 4.0)
