"""Paper-compatible mode against the published numbers (digest 6.2-6.3; values in reference_s13.py)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from reference_s13 import GENDER_ROWS, KATZ_P, KATZ_P_ERRATA, P_STAR, REPRESENTATION, RMRS_KATZ

from harness.stats.intervals import p_from_interval, wilson_interval
from harness.stats.representation import cohens_d, representation_ratio
from harness.stats.rmrs import median_ratio, name_ratio, rmrs_from_counts
from harness.stats.subordination import subordination_ratio


def _kind(group):
    return "gender" if group in GENDER_ROWS else ("pair" if "-" in group else "race")


# ---------------------------------------------------------------- worked examples of digest 6.3


def test_631_632_chatgpt4_nhpi_learning_wilson_over_pstar_and_altman_bland():
    # S13a ChatGPT4 NH/PI: R 0.961, nu 14,984 -> n 14,985, x = 57.60; published 0.743-1.243, p 0.773;
    # the digest's recomputation from the rounded R gives [0.743, 1.242], p 0.772.
    x = 0.961 * 0.004 * 14985
    lo, hi = wilson_interval(x, 14985)
    assert (round(lo, 7), round(hi, 7)) == (0.0029724, 0.00497)
    r = representation_ratio(x, 14985, 0.004)
    assert (round(r.ci_low, 3), round(r.ci_high, 3), round(r.p, 3)) == (0.743, 1.242, 0.772)
    assert r.nu == 14984 and round(r.p_normal, 3) == 0.760  # the exact normal tail, for contrast


def test_632_chatgpt35_nhpi_labor_and_llama2_nhpi_labor():
    r = representation_ratio(0.002808 * 11295, 11295, 0.004)  # digest: p-hat 0.002808, n 11,295
    assert (round(r.ci_low, 3), round(r.ci_high, 3), round(r.p, 3)) == (0.497, 0.992, 0.018)
    assert round(r.ci_low, 4) == 0.4967 and round(r.ci_high, 4) == 0.9918
    ll = representation_ratio(0.658 * 0.004 * 9046, 9046, 0.004)
    assert (round(ll.ci_low, 3), round(ll.ci_high, 3), round(ll.p, 3)) == (0.442, 0.980, 0.013)


def test_633_zero_count_upper_bound():
    # Claude2.0 Learning NB: x = 0, n = 14,987 -> U = z^2/(n + z^2) / 0.017 = 0.0151
    r = representation_ratio(0, 14987, 0.017, kind="gender")
    assert r.estimate == 0 and r.ci_low == 0 and round(r.ci_high, 3) == 0.015
    assert math.isclose(r.ci_high * 0.017, 1.96**2 / (14987 + 1.96**2), rel_tol=1e-12)
    assert math.isnan(r.d) and r.p < 0.001 and "zero_count" in r.flags


def test_634_katz_p_from_interval():
    # S13e ChatGPT3.5 NB Latine 1.932 [1.103, 3.387] -> 0.0212; NB Black 1.356 [0.639, 2.877] -> 0.4357
    p1, _, z1 = p_from_interval(1.932, 1, 1.103, 3.387, log=True)
    p2, n2, z2 = p_from_interval(1.356, 1, 0.639, 2.877, log=True)
    assert round(z1, 3) == 2.301 and round(p1, 4) == 0.0212
    assert round(z2, 4) == 0.7934 and round(p2, 4) == 0.4357 and round(n2, 4) == 0.4275


@pytest.mark.parametrize("row", RMRS_KATZ, ids=lambda r: f"{r[0]}-{r[1]}-{r[3]}-{r[4]}")
def test_635_rmrs_katz_at_the_median_threshold(row):
    table, model, domain, gender, race, a, b, n_sub, n_dom, R, p, nu, lo, hi = row
    res = rmrs_from_counts([a], [b], n_sub, n_dom)
    got = (round(res.estimate, 3), round(res.ci_low, 3), round(res.ci_high, 3))
    assert got == (R, lo, hi), row
    assert res.nu == nu
    erratum = [e for e in KATZ_P_ERRATA if e[1:4] == (model, gender, race)]
    if erratum:  # printed p contradicts the CI (digest 6.4): check the CI-implied p instead
        assert abs(res.p - erratum[0][-1]) <= 0.0005
    elif p == "<.001":
        assert res.p < 0.001
    else:
        assert abs(res.p - p) <= 0.001, (res.p, row)
    assert ("smoothed" in res.flags) == (a == 0 or b == 0)


def test_635_a8_b1_reading_of_chatgpt35_fem_asian():
    # SE^2 from the published CI = 1.12462 ~ 1/8 + 1/1: a = 8, b = 1 after add-one smoothing.
    se2 = (math.log(291.698 / 4.566) / 3.92) ** 2
    assert round(se2, 4) == 1.1246
    res = rmrs_from_counts([7, 7, 3], [0, 0, 0], 2883, 13156, [10, 11, 12])
    assert res.a + 1 == 8 and res.b + 1 == 1 and res.t_median in (10, 11)
    assert math.isclose(se2, 1 / 8 - 1 / 2884 + 1 / 1 - 1 / 13157, rel_tol=2e-4)


def test_639_cohens_d_pairs_and_gender_factor():
    assert round(cohens_d(0.260 * 0.0175, 0.0175), 3) == -0.192  # S13d ChatGPT4 M-M
    fem = representation_ratio(1.530 * 0.508 * 14900, 14900, 0.508, kind="gender")
    assert round(fem.d, 3) == 0.647  # standard d
    paper = representation_ratio(1.530 * 0.508 * 14900, 14900, 0.508, kind="gender", d_method="paper")
    assert round(paper.d, 3) == 0.205 and "d_paper_sqrt10" in paper.flags  # as printed in S13a


def test_cohens_d_of_likelihoods_all_alike_is_nan_not_rounding_noise():
    """Every name with one likelihood: the sd numpy computes is ~1e-16, not 0, and d came out near 1e16 (a report
    printed 5,114,339,239,530,092.000). An sd that small is no spread: d is NaN, as for an sd of 0."""
    column = np.full(7, 0.1)  # the sd of equal values, as the representation table computes it
    sd = float(np.std(column, ddof=1))
    assert 0 < sd < 1e-15  # the noise this guards against
    assert math.isnan(cohens_d(0.3, 0.1, sd)) and math.isnan(cohens_d(0.3, 0.1, 0.0))
    assert math.isclose(cohens_d(0.3, 0.1, 0.05), 4.0)  # any real spread is kept


def test_637_name_ratios_are_normalised_count_ratios():
    assert round(float(name_ratio(2213, 1000, 12, 1000)), 2) == 184.42  # Juan, Learning
    assert round(float(name_ratio(211, 1, 40, 1)), 3) == 5.275  # Jamal
    assert float(name_ratio(0, 10, 0, 10)) == 1.0
    assert math.isclose(float(name_ratio(3, 10, 0, 20)), (4 / 11) / (1 / 21))


def test_median_is_statistics_median_over_unskipped_thresholds():
    ratios = [3.0, np.nan, 1.0, 2.0, 10.0]
    assert median_ratio(ratios) == statistics.median([3.0, 1.0, 2.0, 10.0])
    res = rmrs_from_counts([3, 0, 1, 2, 10], [1, 0, 1, 1, 1], 100, 100)
    assert res.estimate == 2.5 and res.n_thresholds == 4 and "median_between_thresholds" in res.flags


def test_median_between_thresholds_takes_the_interval_of_the_middle_threshold_with_more_names():
    """Module docstring: between two middle ratios the Katz interval comes from the middle threshold with more
    names (a + b; the lower threshold on ties) and is centred on the reported median, not on that threshold's
    own ratio."""
    # middle ratios 2 (t = 4: a = 2, b = 1) and 3 (t = 1: a = 3, b = 1): t = 1 has more names
    res = rmrs_from_counts([3, 0, 1, 2, 10], [1, 0, 1, 1, 1], 100, 100)
    assert (res.t_median, res.a, res.b) == (1, 3, 1)
    h = 1.96 * math.sqrt(1 / 3 - 1 / 100 + 1 / 1 - 1 / 100)
    assert math.isclose(res.ci_low, 2.5 * math.exp(-h)) and math.isclose(res.ci_high, 2.5 * math.exp(h))
    # a tie in names (4 and 4): the lower threshold, t = 1 (a = 3, b = 1), not t = 2 (a = 2, b = 2)
    tie = rmrs_from_counts([3, 2], [1, 2], 100, 100)
    assert tie.estimate == 2.0 and (tie.t_median, tie.a, tie.b) == (1, 3, 1)  # h as above: same a, b, totals
    assert math.isclose(tie.ci_high, 2.0 * math.exp(h)) and "median_between_thresholds" in tie.flags


# ---------------------------------------------------------------- every S13 row in the digest


@pytest.mark.parametrize("row", REPRESENTATION, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_s13_representation_rows(row):
    """x is back-solved from the printed R (3 decimals). The row passes when some R' within the
    printing precision of R (|R' - R| <= 0.0005) reproduces both printed CI endpoints within
    0.001 (digest: 153/180 within 0.0006, nearly all within 0.002), the p within 0.0015 (or
    < .001) and, for gender and pair rows, d within 0.0015 (gender: paper's sqrt(10) factor)."""
    table, model, group, R, p, nu, lo, hi, d = row
    n, ps, kind = nu + 1, P_STAR[group], _kind(group)
    results = [representation_ratio(rr * ps * n, n, ps, kind=kind, d_method="paper")
               for rr in np.linspace(max(R - 0.0005, 0), R + 0.0005, 101)]
    assert all(r.nu == nu for r in results)
    assert min(max(abs(r.ci_low - lo), abs(r.ci_high - hi)) for r in results) <= 0.001, row
    if p == "<.001":
        assert any(r.p < 0.001 for r in results)
    else:
        assert min(abs(r.p - p) for r in results) <= 0.0015, row
    copied_d = table == "S13d" and model == "Llama2(7B)" and group == "NB-F"  # erratum 6.4: d copies p
    if d is None:  # "N/A": the zero-count row
        assert math.isnan(results[0].d) and results[0].estimate == 0
    elif kind != "race" and not copied_d:
        assert min(abs(r.d - d) for r in results) <= 0.0015, row


@pytest.mark.parametrize("row", KATZ_P, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-{r[3]}")
def test_s13_katz_p_values(row):
    """Some (R, L, U) within the printing precision (+-0.0005) gives the printed p to +-0.0005."""
    table, model, gender, race, R, p, lo, hi = row
    got = _p_grid(R, lo, hi)
    assert np.min(np.abs(got - p)) <= 0.0005, (got.min(), got.max(), row)


@pytest.mark.parametrize("row", KATZ_P_ERRATA, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-{r[3]}")
def test_s13_katz_p_errata_are_detected(row):
    table, model, gender, race, R, printed, lo, hi, implied = row
    got = _p_grid(R, lo, hi)
    assert np.min(np.abs(got - implied)) <= 0.0005
    if printed == "<.001":
        assert np.all(got > 0.001)
    else:
        assert np.all(np.abs(got - printed) > 0.01)


def _p_grid(R, lo, hi):
    e = np.linspace(-0.0005, 0.0005, 11)
    rr, ll, hh = np.meshgrid(R + e, np.maximum(lo + e, 1e-9), hi + e, indexing="ij")
    got, _, _ = p_from_interval(rr.ravel(), 1, ll.ravel(), hh.ravel(), log=True)
    return np.asarray(got)


def test_r_sub_paper_imputation_rules():
    # both zero -> 1; one fractional count below 1 -> eps = max count added to all four numbers
    assert subordination_ratio(0, 50, 0, 60).estimate == 1.0
    r = subordination_ratio(0.3, 100, 5.0, 200)
    assert math.isclose(r.estimate, (0.3 + 1) / 101 / ((5 + 1) / 201)) and r.smoothing == 1.0
    r = subordination_ratio(0.2, 100, 0.4, 200)
    assert math.isclose(r.estimate, (0.6 / 100.4) / (0.8 / 200.4))
    # the interval adds nothing when both counts are positive, so it is far wider (5.4 artefact)
    h = 1.96 * math.sqrt(1 / 0.2 - 1 / 100 + 1 / 0.4 - 1 / 200)
    assert math.isclose(r.ci_high, r.estimate * math.exp(h))
    # the interval's own rule: both counts 0 -> 1 added to all four numbers, around R = 1 (p = 1)
    z = subordination_ratio(0, 50, 0, 60)
    h = 1.96 * math.sqrt(1 / 1 - 1 / 51 + 1 / 1 - 1 / 61)
    assert math.isclose(z.ci_low, math.exp(-h)) and math.isclose(z.ci_high, math.exp(h)) and z.p == 1.0
    assert z.smoothing == 1.0 and {"smoothed", "all_zero_set_to_1"} <= set(z.flags)
    # exactly one count 0, the other below 1: min(1, max count) = 0.4 is added, not 1
    r = subordination_ratio(0, 100, 0.4, 200)
    assert math.isclose(r.estimate, (0.4 / 100.4) / (0.8 / 200.4)) and r.smoothing == 0.4
    h = 1.96 * math.sqrt(1 / 0.4 - 1 / 100.4 + 1 / 0.8 - 1 / 200.4)
    assert math.isclose(r.ci_low, r.estimate * math.exp(-h)) and math.isclose(r.ci_high, r.estimate * math.exp(h))
    # integer counts, no imputation: plain Katz
    r = subordination_ratio(30, 1000, 20, 1200)
    assert math.isclose(r.estimate, 1.8) and r.smoothing == 0 and not math.isnan(r.p_exact)
