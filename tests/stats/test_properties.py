"""Property tests against statsmodels / scipy and closed forms (hypothesis, modest example counts)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from statsmodels.stats.contingency_tables import Table2x2
from statsmodels.stats.proportion import proportion_confint

from harness.stats.bootstrap import cluster_sums
from harness.stats.fdr import bh_adjust
from harness.stats.intervals import altman_bland_p, katz_interval, normal_p, p_from_interval, wilson_interval
from harness.stats.representation import representation_ratio
from harness.stats.subordination import subordination_ratio
from harness.stats.sweep import story_weights

Z = float(sps.norm.ppf(0.975))  # statsmodels' critical value for alpha = 0.05
FAST = settings(max_examples=60, deadline=None)


@st.composite
def count_and_total(draw, fractional=False):
    n = draw(st.integers(1, 10**6))
    if fractional:
        x = draw(st.floats(0, 1)) * n
    else:
        x = draw(st.integers(0, n))
    return x, n


@FAST
@given(count_and_total(), st.sampled_from([0.05, 0.01, 0.1]))
def test_wilson_matches_statsmodels(case, alpha):
    x, n = case
    z = float(sps.norm.ppf(1 - alpha / 2))
    lo, hi = wilson_interval(x, n, z)
    ref = proportion_confint(x, n, alpha=alpha, method="wilson")
    np.testing.assert_allclose([lo, hi], ref, rtol=1e-9, atol=1e-12, err_msg=repr(case))


def test_interval_edges_and_impossible_input():
    """The exact edges (x = 0 gives 0, x = n gives exactly 1, not 1 - 1e-16) and NaN, not numbers, for impossible
    input: n <= 0 or x outside [0, n] (Wilson), a zero or over-total count (Katz), a zero-width interval (p)."""
    n = np.arange(1.0, 200.0)
    assert (wilson_interval(0 * n, n, Z)[0] == 0).all() and (wilson_interval(n, n, Z)[1] == 1).all()
    for x, tot in [(0, 0), (3, 0), (5, -2), (11, 10), (-1, 10), (float("nan"), 10)]:
        assert np.isnan(wilson_interval(x, tot)).all(), (x, tot)
    for case in [(0, 10, 3, 10), (3, 10, 0, 10), (11, 10, 3, 10), (3, 10, 11, 10)]:
        assert np.isnan(katz_interval(*case)).all(), case
    assert np.isnan(p_from_interval(0.5, 0.4, 0.5, 0.5)).all()  # not p = 0 from an infinite z
    assert np.isnan(p_from_interval(2.0, 1.0, 2.0, 2.0, log=True)).all()


@FAST
@given(count_and_total(fractional=True))
def test_wilson_fractional_counts_match_statsmodels(case):
    # statsmodels' formula is the same algebra on count/nobs, so fractional x agrees too
    x, n = case
    np.testing.assert_allclose(wilson_interval(x, n, Z), proportion_confint(x, n, method="wilson"),
                               rtol=1e-9, atol=1e-12)


@st.composite
def two_binomials(draw, zero_first=False):
    n1, n2 = draw(st.integers(2, 50_000)), draw(st.integers(2, 50_000))
    x1 = 0 if zero_first else draw(st.integers(1, n1 - 1))
    x2 = draw(st.integers(1, n2 - 1))
    return x1, n1, x2, n2


@FAST
@given(two_binomials())
def test_katz_matches_statsmodels_riskratio(case):
    """Reference: statsmodels Table2x2 risk ratio of rows [[x1, n1-x1], [x2, n2-x2]] (log-normal CI,
    SE = sqrt(1/x1 - 1/n1 + 1/x2 - 1/n2)), and its normal p for ratio = 1."""
    x1, n1, x2, n2 = case
    t = Table2x2(np.array([[x1, n1 - x1], [x2, n2 - x2]], float), shift_zeros=False)
    r, lo, hi = katz_interval(x1, n1, x2, n2, Z)
    np.testing.assert_allclose([r, lo, hi], [t.riskratio, *t.riskratio_confint(alpha=0.05)], rtol=1e-9)
    res = subordination_ratio(x1, n1, x2, n2, mode="principled", z=Z)
    np.testing.assert_allclose([res.estimate, res.ci_low, res.ci_high], [r, lo, hi], rtol=1e-12)
    np.testing.assert_allclose(res.p_normal, t.riskratio_pvalue(), rtol=1e-7, atol=1e-300)
    # the paper mode agrees when every count is >= 1 (no imputation)
    paper = subordination_ratio(x1, n1, x2, n2, mode="paper", z=Z)
    np.testing.assert_allclose([paper.estimate, paper.ci_low, paper.ci_high], [r, lo, hi], rtol=1e-12)


@FAST
@given(two_binomials(zero_first=True))
def test_principled_zero_count_is_haldane_anscombe(case):
    """0.5 added to all four cells, then the statsmodels risk ratio (its own ``shift_zeros`` shifts
    only the zero cells, contrary to its docstring, so the shift is applied here)."""
    x1, n1, x2, n2 = case
    t = Table2x2(np.array([[x1, n1 - x1], [x2, n2 - x2]], float) + 0.5, shift_zeros=False)
    res = subordination_ratio(x1, n1, x2, n2, mode="principled", z=Z)
    np.testing.assert_allclose([res.estimate, res.ci_low, res.ci_high],
                               [t.riskratio, *t.riskratio_confint(alpha=0.05)], rtol=1e-9)
    assert "smoothed" in res.flags


# Fractional counts are sums of likelihoods stored to 4 decimals: 0 or at least 1e-6 (a count of
# 1e-308 would overflow the ratio to inf and no reciprocal exists in floating point).
FRACTIONAL_COUNT = st.one_of(st.just(0.0), st.floats(1e-6, 1000))


@FAST
@given(FRACTIONAL_COUNT, FRACTIONAL_COUNT, st.integers(1, 10**5), st.integers(1, 10**5),
       st.sampled_from(["paper", "principled"]))
def test_subordination_role_swap_gives_reciprocals(xs, xd, ns, nd, mode):
    xs, xd = min(xs, ns), min(xd, nd)
    a = subordination_ratio(xs, ns, xd, nd, mode=mode)
    b = subordination_ratio(xd, nd, xs, ns, mode=mode)
    if not a.ok:
        assert not b.ok and a.reason == b.reason
        return
    assert math.isclose(a.estimate * b.estimate, 1, rel_tol=1e-9)
    if 0 < a.ci_low and math.isfinite(b.ci_high):
        assert math.isclose(a.ci_low * b.ci_high, 1, rel_tol=1e-9)
    else:  # counts so tiny that the interval is [0, inf]
        assert a.ci_low == 0 and b.ci_high == math.inf
    assert math.isclose(a.p, b.p, rel_tol=1e-9, abs_tol=1e-15)


@FAST
@given(st.integers(1, 10**6), st.floats(0.001, 0.999))
def test_representation_monotone_in_count_and_zero_behaviour(n, p_star):
    xs = np.linspace(0, n, 7)
    res = [representation_ratio(x, n, p_star, kind="gender") for x in xs]
    for a, b in zip(res, res[1:]):
        assert a.estimate <= b.estimate and a.ci_low <= b.ci_low and a.ci_high <= b.ci_high
    zero, full = res[0], res[-1]
    assert zero.ci_low == 0 and math.isclose(zero.ci_high * p_star, 1.96**2 / (n + 1.96**2), rel_tol=1e-9)
    assert math.isclose(full.ci_high * p_star, 1.0, rel_tol=1e-12)
    assert math.isclose(full.ci_low * p_star, n / (n + 1.96**2), rel_tol=1e-9)
    for r in res:
        assert r.ci_low <= r.estimate * (1 + 1e-12) and r.estimate <= r.ci_high * (1 + 1e-12) and 0 <= r.p <= 1


@FAST
@given(st.floats(0, 8))
def test_altman_bland_tracks_the_normal_tail(z):
    ab, nm = altman_bland_p(z), normal_p(z)
    assert 0 < ab <= 1 and abs(ab - nm) < 0.015
    assert altman_bland_p(-z) == ab and normal_p(-z) == nm  # two-sided: the sign of z does not matter
    assert altman_bland_p(z + 0.1) < ab


@FAST
@given(st.lists(st.one_of(st.floats(0, 1), st.just(float("nan"))), min_size=1, max_size=40),
       st.sampled_from([0.05, 0.01, 0.2]))
@example([0.1, 0.9, float("nan")], 0.2)  # q = 0.2: rejected at alpha = 0.2, not at 0.05
def test_bh_matches_the_step_up_formula(ps, alpha):
    p = np.asarray(ps)
    q, rej = bh_adjust(p, alpha)
    ok = np.isfinite(p)
    assert np.all(np.isnan(q[~ok])) and not rej[~ok].any()
    v = p[ok]
    m = v.size
    if m:
        order = np.argsort(v)
        ranked = np.minimum.accumulate((v[order] * m / np.arange(1, m + 1))[::-1])[::-1]
        expect = np.empty(m)
        expect[order] = np.minimum(ranked, 1)
        np.testing.assert_allclose(q[ok], expect, rtol=1e-12, atol=1e-15)
        # rejections at alpha: every p up to the largest rank k with p_(k) <= k / m * alpha
        below = np.flatnonzero(v[order] <= np.arange(1, m + 1) / m * alpha)
        expect_rej = np.zeros(m, bool)
        expect_rej[order[: below[-1] + 1 if below.size else 0]] = True
        np.testing.assert_array_equal(rej[ok], expect_rej)


def test_cluster_sums_are_story_weighted_sums():
    rng = np.random.default_rng(0)
    story = rng.integers(0, 30, 200)
    vals = rng.random((200, 3))
    out = cluster_sums(vals, story, n_boot=5, seed=9)
    w = story_weights(9, np.arange(6), np.arange(30))
    expect = np.stack([(w[b][story][:, None] * vals).sum(0) for b in range(6)])
    np.testing.assert_allclose(out, expect, rtol=1e-12)
    # many stories: the replicates come in chunks of chunk_elems // stories rows, the same replicates in order
    for chunk in (1, 60, 90, 150):
        np.testing.assert_allclose(cluster_sums(vals, story, n_boot=5, seed=9, chunk_elems=chunk), out, rtol=1e-12)
    # the story index is global: a story's weight depends on its index, not on its rank among the cell's stories
    sparse = 7 * story + 3
    w = story_weights(9, np.arange(6), np.arange(7 * 30 + 3))
    expect = np.stack([(w[b][sparse][:, None] * vals).sum(0) for b in range(6)])
    np.testing.assert_allclose(cluster_sums(vals, sparse, n_boot=5, seed=9), expect, rtol=1e-12)
    # a 1-D column of values is one column
    np.testing.assert_allclose(cluster_sums(vals[:, 1], story, n_boot=5, seed=9), out[:, [1]], rtol=1e-12)
