"""The NumPy reference sweep against a pure-Python brute force and hand-computed counts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from harness.errors import ConfigError, DataError
from harness.stats import sweep as S

M = 0xFFFFFFFF


def py_mix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M
    x ^= x >> 15
    x = (x * 0x846CA68B) & M
    x ^= x >> 16
    return x


def py_unmix32(h: int) -> int:
    """The inverse of ``py_mix32`` (each step of lowbias32 is a bijection of 32-bit integers)."""
    x = h ^ (h >> 16)
    x = (x * pow(0x846CA68B, -1, 1 << 32)) & M
    x ^= (x >> 15) ^ (x >> 30)
    x = (x * pow(0x7FEB352D, -1, 1 << 32)) & M
    return x ^ (x >> 16)


def py_weight(seed: int, rep: int, story: int) -> int:
    if rep == 0:
        return 1
    h = py_mix32(py_mix32(py_mix32(seed & M) ^ rep) ^ story)
    return sum(h >= c for c in S.POISSON1_CDF_U32.tolist())


def brute(lik, role, group, story, thr, G, B, seed):
    n, R = lik.shape
    above = np.zeros((B + 1, G, R, len(thr), 2), np.int64)
    totals = np.zeros((B + 1, G, 2), np.int64)
    for b in range(B + 1):
        for i in range(n):
            if group[i] < 0:
                continue
            w = py_weight(seed, b, int(story[i]))
            totals[b, group[i], role[i]] += w
            for r in range(R):
                v = lik[i, r]
                if np.isnan(v):
                    continue
                for j, t in enumerate(thr):
                    if round(100 * float(v), 4) > t:  # the percentage to 4 decimals, strict
                        above[b, group[i], r, j, role[i]] += w
    return above, totals


def random_case(seed, n=60, R=3, G=2, S_=15):
    rng = np.random.default_rng(seed)
    lik = rng.choice(np.array([0, 0.01, 0.07, 0.5, 0.505, 0.99, 1.0, np.nan], np.float32), size=(n, R))
    lik[: n // 2] = rng.random((n // 2, R)).astype(np.float32)
    return lik, rng.integers(0, 2, n), rng.integers(-1, G, n), rng.integers(0, S_, n), G


def test_poisson_table_is_the_exact_inverse_cdf():
    assert S.poisson1_cdf_u32() == S.POISSON1_CDF_U32.tolist()
    # cross-check the first entries against scipy in double precision
    ref = np.floor(sps.poisson.cdf(np.arange(6), 1.0) * 2.0**32)
    np.testing.assert_allclose(S.POISSON1_CDF_U32[:6].astype(float), ref, atol=1)


def test_weights_match_pure_python_and_are_poisson1():
    reps, stories = [0, 1, 2, 77], [0, 1, 5, 123456, 2**32 - 1]
    w = S.story_weights(2**40 + 9, reps, stories)
    assert w.tolist() == [[py_weight(2**40 + 9, r, s) for s in stories] for r in reps]
    # a seed with bits 16..31 set: 2**40 + 9 alone would not notice a seed cut to its low 16 bits
    w = S.story_weights(0x9E3779B9, reps, stories)
    assert w.tolist() == [[py_weight(0x9E3779B9, r, s) for s in stories] for r in reps]
    big = S.story_weights(1, np.arange(1, 201), np.arange(2000)).ravel()
    assert abs(big.mean() - 1) < 0.01 and abs(big.var() - 1) < 0.02
    freq = np.bincount(big, minlength=5)[:5] / big.size
    np.testing.assert_allclose(freq, sps.poisson.pmf(np.arange(5), 1.0), atol=0.003)


def test_weight_counts_hash_equal_to_a_cdf_entry():
    """The weight is #{k: h >= cdf[k]}, ``>=`` included: stories whose hash is exactly a table entry (found by
    inverting lowbias32) or one below it, where a strict comparison would give another backend's weight."""
    seed, rep = 7, 3
    h1 = py_mix32(py_mix32(seed) ^ rep)
    cdf = S.POISSON1_CDF_U32.tolist()
    stories = [py_unmix32(c - d) ^ h1 for c in cdf[:4] for d in (0, 1)]
    assert [py_mix32(h1 ^ s) for s in stories] == [c - d for c in cdf[:4] for d in (0, 1)]
    assert S.story_weights(seed, [rep], stories).tolist() == [[1, 0, 2, 1, 3, 2, 4, 3]]


def test_hand_computed_counts():
    # group 0: a subordinate 0.9 (story 0), a dominant 0.05 (story 1), a dominant without entry (story 2);
    # group 1: one subordinate exactly at 0.5 (not above t = 50).
    lik = np.array([[0.9], [0.05], [np.nan], [0.5]], np.float32)
    c = S.sweep_counts(lik, np.array([1, 0, 0, 1]), np.array([0, 0, 0, 1]), np.arange(4),
                       np.array([1, 5, 50, 89, 90]), n_groups=2)
    assert c.above.shape == (1, 2, 1, 5, 2) and c.totals.shape == (1, 2, 2)
    assert c.above[0, 0, 0].tolist() == [[1, 1], [0, 1], [0, 1], [0, 1], [0, 0]]  # (T, role)
    assert c.above[0, 1, 0, :, 1].tolist() == [1, 1, 0, 0, 0]
    assert c.totals[0].tolist() == [[2, 1], [0, 1]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_with_bootstrap(seed):
    lik, role, group, story, G = random_case(seed)
    thr = np.array([-1, 0, 1, 7, 50, 99, 100, 101])
    got = S.sweep_counts(lik, role, group, story, thr, n_groups=G, n_boot=4, seed=seed + 11)
    above, totals = brute(lik, role, group, story, thr, G, 4, seed + 11)
    np.testing.assert_array_equal(got.above, above)
    np.testing.assert_array_equal(got.totals, totals)
    assert got.above.dtype == np.int64 and got.n_boot == 4


def test_an_exact_percentage_is_not_above_its_own_threshold():
    """Digest 5.5: a name counts at t when its likelihood is above t, strictly. Formed in float32, 100 * 0.6 is
    60.0000024: names-dataset's three-decimal shares (811 names at exactly 60% MENA) and count ratios such as 27%
    were counted above their own threshold, on every backend."""
    exact = [0.07, 0.29, 0.6, 0.27, 0.15, 0.3, 0.54, 0.6]
    # just above 60%: 0.6001, and the count ratio 150001 / 250000 (60.0004%), above 60 at 4 decimals, not at 3
    lik = np.array([[v] for v in [*exact, 0.6001, 0.600004, 0.0]], np.float32)
    thr = np.array([7, 29, 60, 27, 15, 30, 54, 59])
    c = S.sweep_counts(lik, np.ones(len(lik), int), np.zeros(len(lik), int), np.arange(len(lik)), thr, n_groups=1)
    # above t: the exact values strictly greater than t, plus 0.6001 and 0.600004 wherever t <= 60
    want = [sum(round(100 * v) > t for v in exact) + 2 * int(60.0004 > t) for t in thr]
    assert c.above[0, 0, 0, :, 1].tolist() == want
    assert c.above[0, 0, 0, 2, 1] == 2  # at t = 60 only 0.6001 and 0.600004, not the two 0.6


def test_replicates_computed_in_chunks_match_one_chunk_and_brute_force():
    """Large inputs (stories x replicates above ``chunk_elems``) weigh the replicates in chunks: every chunk must
    land on its own replicates, an uneven last chunk included."""
    lik, role, group, story, G = random_case(3, n=40, S_=10)
    thr = np.array([0, 10, 50, 99])
    args = S.validate_inputs(lik, role, group, story, thr, G, 7, 5)
    above, totals = brute(lik, role, group, story, thr, G, 7, 5)
    for chunk_elems in (1, 20, 30, 1 << 24):  # 1, 2, 3 and all replicates per chunk
        got = S._numpy_sweep(*args, chunk_elems=chunk_elems)
        np.testing.assert_array_equal(got.above, above)
        np.testing.assert_array_equal(got.totals, totals)


def test_story_is_the_bootstrap_unit():
    # two characters of one story always carry the same weight: counts come in pairs
    lik = np.full((40, 1), 0.8, np.float32)
    story = np.repeat(np.arange(20), 2)
    c = S.sweep_counts(lik, np.tile([0, 1], 20), np.zeros(40, int), story, np.array([10]), n_groups=1, n_boot=30)
    np.testing.assert_array_equal(c.totals[:, 0, 0], c.totals[:, 0, 1])
    assert len(set(c.totals[1:, 0, 0].tolist())) > 1


def test_empty_and_all_excluded_give_zero_counts():
    lik = np.full((3, 2), np.nan, np.float32)
    c = S.sweep_counts(lik, np.zeros(3, int), np.full(3, -1), np.arange(3), np.array([1]), n_groups=2, n_boot=2)
    assert c.above.sum() == 0 and c.totals.sum() == 0 and c.above.shape == (3, 2, 2, 1, 2)
    e = S.sweep_counts(np.zeros((0, 7), np.float32), np.zeros(0, int), np.zeros(0, int), np.zeros(0, int),
                       n_groups=1, n_boot=1)
    assert e.above.shape == (2, 1, 7, 99, 2) and e.totals.sum() == 0


@pytest.mark.parametrize(
    "change, err",
    [
        (dict(likelihood=np.array([[1.5]], np.float32)), DataError),
        (dict(likelihood=np.array([0.5], np.float32)), DataError),
        (dict(role=np.array([2])), DataError),
        (dict(role=np.array([0, 1])), DataError),
        (dict(group=np.array([3])), DataError),
        (dict(story=np.array([-1])), DataError),
        (dict(story=np.array([0.5])), DataError),
        (dict(thresholds=np.array([0.5])), ConfigError),
        (dict(n_boot=-1), ConfigError),
        (dict(n_groups=0), ConfigError),
        (dict(backend="fortran"), ConfigError),
        # each of these was otherwise taken silently and gave wrong counts or shared weights
        (dict(likelihood=np.array([[-0.3]], np.float32)), DataError),  # would count in totals, never above
        (dict(likelihood=np.array([[1]])), DataError),  # integers are not fractions
        (dict(role=np.array([-1])), DataError),  # would land in another bucket's subordinate count
        (dict(group=np.array([1])), DataError),  # group == n_groups: off by one past the last group
        (dict(group=np.array([-2])), DataError),  # only -1 excludes
        (dict(story=np.array([2**32])), DataError),  # would wrap to story 0 and share its weight
        (dict(thresholds=np.array([], np.int64)), ConfigError),
        (dict(thresholds=np.array([[1, 2]])), ConfigError),
        (dict(n_boot=True), ConfigError),
        (dict(n_groups=1.5), ConfigError),
        (dict(seed=1.5), ConfigError),
        # checked before the cast to int8/int32: 256 and 257 wrapped to roles 0 and 1, 2**32 to group 0
        (dict(role=np.array([256])), DataError),
        (dict(role=np.array([257])), DataError),
        (dict(group=np.array([2**32])), DataError),
    ],
)
def test_bad_input_raises_one_line_errors(change, err):
    kw = dict(likelihood=np.array([[0.5]], np.float32), role=np.array([0]), group=np.array([0]),
              story=np.array([0]), thresholds=np.array([1, 2]), n_groups=1, n_boot=0)
    kw.update(change)
    with pytest.raises(err) as exc:
        S.sweep_counts(**kw)
    name = next(iter(change))
    assert "\n" not in str(exc.value) and name in str(exc.value), exc.value  # one line naming the argument


def test_auto_falls_back_to_numpy_without_gpu_and_gpu_backends_dispatch():
    lik, role, group, story, G = random_case(5, n=25)
    ref = S.sweep_counts(lik, role, group, story, n_groups=G, n_boot=2, seed=1)
    auto = S.sweep_counts(lik, role, group, story, n_groups=G, n_boot=2, seed=1, backend="auto")
    np.testing.assert_array_equal(auto.above, ref.above)
    kernels = pytest.importorskip("harness.kernels.sweep")
    from harness.kernels._common import cupy_runnable, triton_runnable

    for name, ok in (("triton", triton_runnable()), ("cupy", cupy_runnable())):
        if ok:
            out = S.sweep_counts(lik, role, group, story, n_groups=G, n_boot=2, seed=1, backend=name)
            np.testing.assert_array_equal(out.above, ref.above)
            np.testing.assert_array_equal(out.totals, ref.totals)
        else:
            with pytest.raises(Exception) as exc:
                S.sweep_counts(lik, role, group, story, n_groups=G, n_boot=2, seed=1, backend=name)
            assert exc.type.__module__.startswith("harness"), exc.value
    assert kernels.sweep_counts(lik, role, group, story, n_groups=G, n_boot=2, seed=1, backend="numpy").above.tolist() \
        == ref.above.tolist()
