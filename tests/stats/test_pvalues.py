"""Principled p-values: exact tests against scipy / hand sums, the percentile-bootstrap p by hand,
and which p enters the Benjamini-Hochberg q of each table (issue 4, "beyond the paper")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from stats_fixtures import BASELINES

from harness.identity import RACES
from harness.stats import tables as T
from harness.stats.bootstrap import boot_summary, bootstrap_p, cluster_sums, percentile_interval
from harness.stats.fdr import bh_adjust
from harness.stats.intervals import binomial_exact_p, fisher_exact_p, normal_p
from harness.stats.representation import representation_ratio
from harness.stats.rmrs import median_ratio, rmrs_from_counts, threshold_ratios

FAST = settings(max_examples=60, deadline=None)


# ---------------------------------------------------------------- exact tests


def _binom_two_sided_by_hand(x: int, n: int, p: float) -> float:
    """Sum of the probabilities of outcomes no more likely than x (the 'minlike' two-sided test)."""
    pmf = sps.binom.pmf(np.arange(n + 1), n, p)
    return float(min(1.0, pmf[pmf <= pmf[x] * (1 + 1e-7)].sum()))


@FAST
@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       st.sampled_from([0.004, 0.017, 0.475, 0.508, 0.944]), st.sampled_from(["gender", "pair"]))
def test_exact_binomial_p_equals_scipy_binomtest(xn, p_star, kind):
    x, n = xn
    r = representation_ratio(x, n, p_star, kind=kind)
    ref = sps.binomtest(x, n, p_star).pvalue
    assert r.p_exact == ref and binomial_exact_p(x, n, p_star) == ref
    hand = _binom_two_sided_by_hand(x, n, p_star)
    if ref > 1e-250:  # every x, n <= 400 of these p*: within 1e-13
        assert math.isclose(r.p_exact, hand, rel_tol=1e-9)
    else:  # near the smallest doubles scipy's tail (binom.sf) drifts: x=131, n=148, p*=0.004 gives
        assert hand < 1e-240  # 5.8759102e-293 where the pmf sum and an exact sum of fractions give 5.8759110e-293
    assert "no_exact_fractional" not in r.flags


def test_fisher_exact_p_equals_the_hypergeometric_sum():
    for x1, n1, x2, n2 in [(8, 1174, 1, 3006), (0, 12, 5, 20), (3, 10, 3, 10), (7, 2882, 0, 13156)]:
        lo, hi = max(0, (x1 + x2) - (n2)), min(n1, x1 + x2)
        pmf = sps.hypergeom.pmf(np.arange(lo, hi + 1), n1 + n2, x1 + x2, n1)
        p_obs = sps.hypergeom.pmf(x1, n1 + n2, x1 + x2, n1)
        hand = min(1.0, pmf[pmf <= p_obs * (1 + 1e-7)].sum())
        assert math.isclose(fisher_exact_p(x1, n1, x2, n2), hand, rel_tol=1e-9), (x1, n1, x2, n2)
    assert math.isnan(fisher_exact_p(0.5, 10, 1, 10))  # fractional: no exact test
    # a count above its total is impossible input: NaN, not scipy's error on a negative cell
    assert math.isnan(fisher_exact_p(11, 10, 1, 10)) and math.isnan(fisher_exact_p(1, 10, 12, 10))


def test_result_level_exact_and_normal_p_against_scipy():
    from harness.stats.subordination import subordination_ratio

    r = subordination_ratio(30, 1000, 20, 1200, mode="principled")
    assert r.p_exact == sps.fisher_exact([[30, 970], [20, 1180]]).pvalue
    # R_mrs: Fisher's p of the median threshold's 2x2 table (a = 2, b = 1 at t = 2 here)
    m = rmrs_from_counts([1, 2, 3], [1, 1, 1], 100, 300, thresholds=[1, 2, 3])
    assert m.t_median == 2 and m.p_exact == sps.fisher_exact([[2, 98], [1, 299]]).pvalue
    # R_rep p_normal: the normal tail of the z the paper forms from the Wilson interval
    g = representation_ratio(820, 1500, 0.508, kind="gender")
    se = (g.ci_high - g.ci_low) * 0.508 / (2 * 1.96)
    assert math.isclose(g.p_normal, 2 * sps.norm.sf(abs(820 / 1500 - 0.508) / se), rel_tol=1e-12)


def test_race_rows_have_no_exact_p():
    r = representation_ratio(57.6, 14985, 0.004, kind="race")
    assert math.isnan(r.p_exact) and "no_exact_fractional" in r.flags and math.isnan(r.p_boot)
    # the primitive itself: no binomial test of a fractional count (not a test of round(57.6) = 58), nor of x > n
    assert math.isnan(binomial_exact_p(57.6, 14985, 0.004)) and math.isnan(binomial_exact_p(15000, 14985, 0.004))


# ---------------------------------------------------------------- percentile-bootstrap p


def test_bootstrap_p_by_hand():
    r = np.array([0.5, 0.9, 0.95, 1.0, 1.1, 1.2, 1.3, 1.4, 1.6, 2.0])
    # k_le = 4 (the tie at 1.0 counts on both sides), k_ge = 7, B = 10: 2 * (4 + 1) / 11
    assert bootstrap_p(r, min_finite=1) == 2 * 5 / 11
    assert bootstrap_p(np.log(r), null=0.0, min_finite=1) == 2 * 5 / 11  # monotone-invariant
    # all replicates above the null: the smallest p the Monte Carlo test can give, 2 / (B + 1)
    assert bootstrap_p(np.linspace(1.1, 3, 99)) == 2 / 100
    # ties at the null count on both sides: 8 below and 2 at it give k_ge = 2 (not 0), so 2 * 3 / 11, not 2 / 11
    assert bootstrap_p(np.r_[np.full(8, 0.5), 1.0, 1.0], min_finite=1) == 2 * 3 / 11
    assert bootstrap_p(np.r_[1.0, 1.0, np.full(8, 2.0)], min_finite=1) == 2 * 3 / 11
    # balanced: capped at 1
    assert bootstrap_p(np.r_[np.full(50, 0.5), np.full(50, 2.0)]) == 1.0
    # non-finite replicates leave the family; too few finite ones give NaN
    with_nan = np.r_[np.linspace(1.1, 3, 30), np.nan, np.inf, -np.inf]
    assert bootstrap_p(with_nan) == 2 / 31
    assert math.isnan(bootstrap_p(np.linspace(1.1, 3, 19)))
    assert bootstrap_p(np.linspace(1.1, 3, 20)) == 2 / 21  # exactly min_finite = 20 finite replicates suffice
    both = bootstrap_p(np.column_stack([np.linspace(1.1, 3, 99), np.linspace(0.1, 0.9, 99)]))
    np.testing.assert_array_equal(both, [2 / 100, 2 / 100])


def test_bootstrap_p_agrees_with_the_percentile_interval():
    """The test inverts the interval: p < alpha exactly when 1 lies outside the (1 - alpha)
    percentile interval, up to the +1 of the Monte Carlo p and the quantile interpolation."""
    rng = np.random.default_rng(0)
    for shift in np.linspace(-0.6, 0.6, 25):
        reps = np.exp(rng.normal(shift, 0.2, 4000))
        lo, hi = percentile_interval(reps, 0.05)
        p = bootstrap_p(reps)
        share = min((reps <= 1).mean(), (reps >= 1).mean())
        if share > 0.03:
            assert p > 0.05 and lo <= 1 <= hi
        if share < 0.02:
            assert p < 0.05 and not (lo <= 1 <= hi)


def test_percentile_interval_and_normal_p_by_hand():
    lo, hi = percentile_interval(np.arange(1.0, 101.0))
    # numpy's default (linear) quantile: 1 + 0.025 * 99 and 1 + 0.975 * 99
    assert math.isclose(float(lo), 3.475) and math.isclose(float(hi), 97.525)
    assert np.isnan(percentile_interval(np.arange(10.0))[0])
    assert np.isfinite(percentile_interval(np.arange(20.0))).all()  # exactly min_finite = 20 finite ones suffice
    # non-finite replicates (a ratio whose denominator resampled to 0) are left out, not ranked at the ends
    lo, hi = percentile_interval(np.r_[np.arange(1.0, 101.0), np.inf, np.inf, -np.inf, np.nan])
    assert math.isclose(float(lo), 3.475) and math.isclose(float(hi), 97.525)
    # (B, k) replicates give one interval per column (the labeller's figures, the impact cells)
    lo, hi = percentile_interval(np.column_stack([np.arange(1.0, 101.0), np.arange(101.0, 201.0)]))
    np.testing.assert_allclose([lo, hi], [[3.475, 103.475], [97.525, 197.525]])
    assert math.isclose(normal_p(1.959963984540054), 0.05, rel_tol=1e-12)
    assert math.isclose(normal_p(0.0), 1.0)


def test_cluster_sums_refuse_a_value_that_is_not_finite():
    """The docstring's "NaN is an error": a NaN spread to every sum of its column (all replicates NaN) unnoticed."""
    from harness.stats.bootstrap import cluster_sums

    with pytest.raises(ValueError, match="column 1 of values is not finite"):
        cluster_sums(np.array([[1.0, np.nan], [1.0, 2.0]]), np.array([0, 1]), n_boot=2)


def test_a_cell_with_too_few_finite_replicates_says_why_its_bootstrap_is_withheld():
    """Fewer than 20 finite replicates (most resamples left a denominator at 0): the interval and p are NaN and the
    flag says so, as the docstring promises for every withheld cell (they were NaN with no flag)."""
    from harness.stats.bootstrap import FEW_FINITE, boot_summary

    reps = np.r_[np.full(90, np.nan), np.linspace(1.0, 2.0, 19)]
    assert boot_summary(reps)[3] == (FEW_FINITE,) and np.isnan(boot_summary(reps)[:3]).all()
    lo, hi, p, flags = boot_summary(np.r_[reps, 2.5])  # exactly 20 finite: given, no flag
    assert flags == () and lo < hi and 0 < p <= 1
    assert boot_summary(reps, min_finite=19)[3] == ()


def test_rmrs_p_boot_is_the_bootstrap_p_of_the_replicate_medians():
    rng = np.random.default_rng(2)
    a, b = np.array([9, 6, 4, 1]), np.array([2, 2, 1, 0])
    boot_a, boot_b = rng.poisson(a, (200, 4)), rng.poisson(b, (200, 4))
    bns, bnd = rng.poisson(100, 200), rng.poisson(300, 200)
    res = rmrs_from_counts(a, b, 100, 300, boot_a=boot_a, boot_b=boot_b, boot_n_sub=bns, boot_n_dom=bnd)
    med = median_ratio(threshold_ratios(boot_a, boot_b, bns[:, None], bnd[:, None])[0], axis=1)
    fin = med[np.isfinite(med)]
    k = min((fin <= 1).sum(), (fin >= 1).sum())
    assert res.p_boot == min(1.0, 2 * (k + 1) / (fin.size + 1))
    assert res.p_boot < 0.05 and "p_boot" in res.summary()


# ---------------------------------------------------------------- tables


def test_representation_race_rows_get_p_boot_from_the_story_replicates(characters):
    tab = T.representation_table(characters, BASELINES, n_boot=199, seed=3)
    race = tab[tab.kind == "race"]
    ok = race.statistic.notna()
    # every named character of the fixture has likelihood 0.01 for aian, nhpi and black: no spread
    flat = race["flags"].str.contains("boot_no_variation")
    assert flat[ok & race.group.isin(["aian", "nhpi", "black"])].all()  # every one of them, so the next line bites
    assert race.p_exact.isna().all() and race.p_boot[ok & ~flat].notna().all() and (ok & ~flat).sum() > 10
    assert (race.q_bh_from[ok & ~flat] == "p_boot").all() and (race.q_bh_from[ok & flat] == "p_normal").all()
    # by hand for m1 Learning white: the same story index and replicates as the table
    df = characters[characters.condition == "neutral"]
    story = pd.factorize(df.story_id.astype(str))[0]
    sel = ((df.model == "m1") & (df.domain == "Learning")).to_numpy()
    cell, st_ = df[sel], story[sel]
    m = (cell.first_name.notna() & cell[list(RACES)].notna().any(axis=1)).to_numpy()
    vals = np.column_stack([np.ones(m.sum()), cell.white.fillna(0).to_numpy()[m]])
    sums = cluster_sums(vals, st_[m], n_boot=199, seed=3)
    reps = sums[1:, 1] / sums[1:, 0] / BASELINES["white"]
    k = min((reps <= 1).sum(), (reps >= 1).sum())
    row = race[(race.model == "m1") & (race.domain == "Learning") & (race.group == "white")].iloc[0]
    assert row.p_boot == min(1.0, 2 * (k + 1) / 200)
    # q_bh: BH over the best p of every row (exact for integer gender rows, bootstrap for race rows)
    best = tab.p_exact.fillna(tab.p_boot).fillna(tab.p_normal)
    np.testing.assert_allclose(tab.q_bh, bh_adjust(best)[0])
    assert (tab.q_bh_from[(tab.kind == "gender") & tab.p_exact.notna()] == "p_exact").all()


def test_subordination_and_rmrs_tables_use_p_boot(characters):
    sub = T.subordination_table(characters, mode="principled", n_boot=150, seed=1)
    ok = sub.statistic.notna() & ~sub["flags"].str.contains("boot_no_variation")
    assert sub.p_boot[ok].notna().mean() > 0.9 and sub.p_boot.between(0, 1).sum() == sub.p_boot.notna().sum()
    frac = ok & sub.p_exact.isna() & sub.p_boot.notna()
    assert frac.any() and (sub.q_bh_from[frac] == "p_boot").all()
    rm = T.rmrs_table(characters, n_boot=150, seed=1)
    okr = rm.statistic.notna() & rm.p_boot.notna()
    assert okr.any() and (rm.q_bh_from[okr] == "p_boot").all()
    np.testing.assert_allclose(rm.q_bh, bh_adjust(rm.p_boot.fillna(rm.p_exact).fillna(rm.p_normal))[0])
    # without the bootstrap R_mrs falls back to Fisher's p at the median threshold
    plain = T.rmrs_table(characters)
    assert (plain.q_bh_from[plain.statistic.notna()] == "p_exact").all()


@pytest.mark.parametrize("n_boot", [0, 50])
def test_q_bh_skips_nan_rows(characters, n_boot):
    chars = characters.copy()
    chars["aian"] = np.nan
    tab = T.subordination_table(chars, n_boot=n_boot)
    nan_rows = tab.statistic.isna() & tab.p_exact.isna() & tab.p_boot.isna() & tab.p_normal.isna()
    assert nan_rows.any() and tab.q_bh[nan_rows].isna().all() and tab.q_bh_from[nan_rows].isna().all()


def _story_chars(rows, condition):
    """Characters of the given (story, role, power role, gender, white, latine) tuples; other
    races 0."""
    out = []
    for sid, role, power, gender, white, latine in rows:
        lik = dict.fromkeys(RACES, 0.0) | {"white": white, "latine": latine}
        out.append(dict(story_id=sid, model="m", domain="Love", condition=condition, love_type="romantic",
                        role=role, power_role=power, gender=gender, first_name=f"{sid}{role}", **lik))
    return pd.DataFrame(out)


def test_stories_that_do_not_differ_give_no_bootstrap():
    """One story, or stories all alike, carry no sampling variation for a story bootstrap.

    Before, a one-story cell's Poisson replicates all equalled the estimate (both sums scale
    by the story's weight), so the interval had zero width and p_boot was 2 / (B + 1) (.0032
    for B = 1000 with a White R_rep of 1.443 whose Wilson p is .17), and q_bh took that p: a
    "significant" cell from one story. Three equal power-laden stories fared no better: the
    smoothing of a zero count does not cancel the replicates' random total size, which spread
    R_sub to [1.6, 5.2] and R_mrs to [2, 8], p_boot .002, from no variation at all.
    """
    one = _story_chars([("s1", "subject", "baseline", "Female", 0.9, 0.1),
                        ("s1", "object", "baseline", "Male", 0.8, 0.2)], "neutral")
    rep = T.representation_table(one, BASELINES, n_boot=1000)
    white = rep[rep.group == "white"].iloc[0]
    assert math.isclose(white.statistic, (0.9 + 0.8) / 2 / BASELINES["white"])  # 1.443
    assert np.isnan([white.boot_low, white.boot_high, white.p_boot]).all()
    ok = rep.statistic.notna()
    assert rep["flags"][ok].str.contains("boot_no_variation").all() and rep.p_boot.isna().all()
    # q_bh falls back to the analytic p: exact for the gender rows, normal for the race rows
    assert (rep.q_bh_from[ok & (rep.kind == "race")] == "p_normal").all()
    np.testing.assert_allclose(rep.q_bh, bh_adjust(rep.p_exact.fillna(rep.p_normal))[0])
    # a second story that differs gives the bootstrap back
    two = pd.concat([one, _story_chars([("s2", "subject", "baseline", "Female", 0.5, 0.5),
                                        ("s2", "object", "baseline", "Male", 0.4, 0.6)], "neutral")])
    white = T.representation_table(two, BASELINES, n_boot=1000).query("group == 'white'").iloc[0]
    assert white.boot_low < white.statistic < white.boot_high and 0 < white.p_boot <= 1
    assert "boot_no_variation" not in white["flags"]
    # stories that differ in size but not in share: every replicate is the estimate (a point mass), withheld too
    rows = [("s1", "subject", "Female"), ("s1", "object", "Male"), ("s2", "subject", "Female")]
    sizes = _story_chars([(sid, role, "baseline", g, 0.8, 0.2) for sid, role, g in rows], "neutral")
    white = T.representation_table(sizes, BASELINES, n_boot=1000).query("group == 'white'").iloc[0]
    assert math.isclose(white.statistic, 0.8 / BASELINES["white"]) and np.isnan(white.p_boot)
    assert "boot_no_variation" in white["flags"] and white.q_bh_from == "p_normal"
    # the withholding itself, for alike stories whose replicates spread (the smoothing described above)
    assert boot_summary(np.linspace(0.5, 1.5, 101), stories_vary=False)[3] == ("boot_no_variation",)
    assert np.isnan(boot_summary(np.linspace(0.5, 1.5, 101), stories_vary=False)[:3]).all()

    alike = _story_chars([(s, role, power, "Female", w, lat) for s in ("s1", "s2", "s3") for role, power, w, lat in
                          (("subject", "dominant", 0.9, 0.0), ("object", "subordinate", 0.6, 0.3))], "laden")
    sub = T.subordination_table(alike, mode="principled", n_boot=1000).query("gender == 'Female'")
    rm = T.rmrs_table(alike, n_boot=1000).query("gender == 'Female'")
    for tab in (sub, rm):
        lat = tab[tab.group == "latine"].iloc[0]
        assert lat.statistic > 1 and np.isnan([lat.boot_low, lat.boot_high, lat.p_boot]).all()
        assert {"boot_no_variation", "boot_zero_count"} & set(lat["flags"].split(";")) and lat.q_bh_from != "p_boot"


def test_a_smoothed_zero_count_gives_no_bootstrap_p_and_whole_likelihood_sums_no_exact_test():
    """One subordinate character with an Asian name among 40 laden stories, no dominant one: every resample keeps
    the dominant count at 0, so the finite replicates sat on one side of 1 and p_boot was 2 / (B + 1): R_mrs 2.0
    (Fisher's p 1.0) and R_sub 2.8 (Katz p .53) came out with q_bh .006, discoveries from one character. R_sub
    ran Fisher on likelihood sums that happened to be whole, which R_rep's race rows never do, and an undefined
    cell (all-zero counts) kept Fisher's p = 1 in the FDR family."""
    rows = [(f"s{i}", role, power, "Female", 0.8, 0.0) for i in range(40)
            for role, power in (("subject", "dominant"), ("object", "subordinate"))]
    chars = _story_chars(rows, "laden")
    chars.loc[1, ["asian", "white"]] = [0.9, 0.1]  # the subordinate character of story s0
    sub = T.subordination_table(chars, mode="principled", n_boot=300).query("gender == 'Female'")
    rm = T.rmrs_table(chars, n_boot=300).query("gender == 'Female'")
    for tab in (sub, rm):
        row = tab[tab.group == "asian"].iloc[0]
        assert row.statistic > 1 and np.isnan(row.p_boot) and "boot_zero_count" in row["flags"]
        assert row.q_bh_from != "p_boot" and row.q_bh > 0.05
    assert sub.p_exact.isna().all() and sub["flags"].str.contains("no_exact_fractional").all()
    undefined = sub[sub.statistic.isna()]
    assert len(undefined) and undefined.q_bh.isna().all()
