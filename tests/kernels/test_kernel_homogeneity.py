"""Homogeneity kernels against explicit pairs (brute force) and a hand computation."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from harness.errors import ConfigError, DataError
from harness.kernels import homogeneity as H
from harness.kernels.sweep import story_weights


def make_case(seed=0, N=90, d=40, G=5):
    """Clustered vectors; group sizes 0, 1, 2 and larger (both n < d and n > d); -1 = excluded."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(G, d))
    g = rng.integers(2, G, N)
    g[:3] = -1
    g[3] = 1  # group 1: one text; group 0: empty
    g[4:6] = 2
    g[g == 2] = np.where(np.arange((g == 2).sum()) < 2, 2, 3)  # group 2: exactly two texts
    x = centers[np.maximum(g, 0)] + 0.8 * rng.normal(size=(N, d))
    return x, g, G


def explicit_pairs(x, g, k):
    xs = x / np.linalg.norm(x, axis=1, keepdims=True)
    idx = np.flatnonzero(g == k)
    iu, ju = np.triu_indices(idx.size, 1)
    return np.einsum("ij,ij->i", xs[idx[iu]], xs[idx[ju]]), idx[iu], idx[ju]


FIELDS = ("n", "n_pairs", "sum", "sumsq", "text_mean", "between")


def assert_stats_close(got, want, rtol, atol):
    for f in FIELDS:
        np.testing.assert_allclose(getattr(got, f), getattr(want, f), rtol=rtol, atol=atol, err_msg=f)


def test_closed_form_hand_computed():
    # three unit vectors in the plane at 0, 60 and 90 degrees: cosines 1/2, 0, sqrt(3)/2
    x = np.array([[1, 0], [0.5, np.sqrt(3) / 2], [0, 2.0]])
    st = H.reference(x, np.array([0, 0, 0]))
    c = np.array([0.5, 0.0, np.sqrt(3) / 2])
    assert st.n.tolist() == [3] and st.n_pairs.tolist() == [3]
    np.testing.assert_allclose(st.sum, [c.sum()])
    np.testing.assert_allclose(st.sumsq, [(c**2).sum()])
    np.testing.assert_allclose(st.text_mean, [(0.5 + 0) / 2, (0.5 + c[2]) / 2, (0 + c[2]) / 2])
    np.testing.assert_allclose(st.var, [c.var()])


@pytest.mark.parametrize("seed, d", [(0, 40), (1, 8)])
def test_reference_equals_brute_force(seed, d):
    x, g, G = make_case(seed, d=d)
    ref, bf = H.reference(x, g, n_groups=G), H.brute_force(x, g, n_groups=G)
    assert_stats_close(ref, bf, rtol=1e-10, atol=1e-10)
    assert ref.n.tolist()[:3] == [0, 1, 2] and np.isnan(ref.mean[:2]).all()
    c, _, _ = explicit_pairs(x, g, 4)
    np.testing.assert_allclose([ref.mean[4], ref.var[4]], [c.mean(), c.var()], rtol=1e-10)


@pytest.mark.parametrize("chunk_rows", [16, 4096])  # groups cut into several chunks; each group one chunk
def test_triton_group_stats_fp32(triton_ok, chunk_rows):
    x, g, G = make_case(2, N=80, d=70)
    bf = H.brute_force(x, g, n_groups=G)
    got = H.triton_group_stats(x, g, n_groups=G, chunk_rows=chunk_rows)
    assert got.backend == "triton"
    assert_stats_close(got, bf, rtol=2e-5, atol=2e-5)


def test_triton_paths_take_a_tensor_in_place(triton_ok):
    """A torch tensor (on the GPU where there is one) is used where it lives, excluded rows too."""
    import torch

    from harness.kernels._common import torch_device

    x, g, G = make_case(16, N=70, d=24)
    xt = torch.as_tensor(x, dtype=torch.float32, device=torch_device())
    bf = H.brute_force(x, g, n_groups=G)
    got = H.triton_group_stats(xt, g, n_groups=G, chunk_rows=16)
    assert got.text_mean.shape == (70,) and np.isnan(got.text_mean[:3]).all()  # rows 0-2 excluded
    assert_stats_close(got, bf, rtol=2e-5, atol=2e-5)
    ps = H.triton_pair_stats(xt, g, n_groups=G, n_bins=32, top_k=2, block=16, block_k=16)
    np.testing.assert_allclose(ps.sum, bf.sum, rtol=2e-5, atol=2e-5)


def test_triton_row_kernels_equal_their_torch_references(triton_ok):
    """The O(N d) kernels around the Gram: rows gathered, normalised and cast in one pass (with their
    squared norms and bad-row flags), chunk sums, and each row's dot with its group's sum."""
    import torch

    from harness.kernels._common import torch_device
    from harness.kernels._triton_homogeneity import chunk_sums, prep_rows, text_means

    dev = torch_device()
    rng = np.random.default_rng(30)
    x = rng.normal(size=(53, 37))  # rows and columns that fill no block exactly
    x[7] = 0.0
    x[11, 5] = np.inf
    x[12, 0] = np.nan
    xt = torch.as_tensor(x, device=dev)  # float64 in: cast to fp32 first, as the API does
    order = torch.as_tensor(rng.permutation(53)[:41], device=dev)
    for normalize in (True, False):
        out, sq, flag = prep_rows(xt, order, torch.float16, normalize)
        rows = xt[order].float()
        want = rows / rows.norm(dim=1, keepdim=True) if normalize else rows
        good = torch.isfinite(rows).all(1) & (rows.norm(dim=1) > 0)
        assert out.dtype == torch.float16 and out.shape == (41, 37)
        torch.testing.assert_close(out[good].float(), want[good].half().float(), rtol=0, atol=0)
        torch.testing.assert_close(sq[good], out[good].float().square().sum(1), rtol=1e-6, atol=1e-6)
        want_flag = torch.where(~torch.isfinite(rows).all(1), 2, torch.where(rows.norm(dim=1) == 0, int(normalize), 0))
        assert flag.tolist() == want_flag.tolist()
    xs = torch.as_tensor(rng.normal(size=(150, 70)), dtype=torch.float32, device=dev)
    sq = torch.as_tensor(rng.random(150), dtype=torch.float32, device=dev)
    starts = torch.as_tensor([0, 64, 65, 140], device=dev)
    ends = torch.as_tensor([64, 65, 140, 150], device=dev)
    sq64 = sq.double()
    want = torch.stack([torch.cat([xs[a:b].double().sum(0), sq64[a:b].sum()[None], sq64[a:b].square().sum()[None]])
                        for a, b in zip(starts.tolist(), ends.tolist())])
    got = chunk_sums(xs, sq, starts, ends)
    assert got.shape == (4, 72) and got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # text means: sorted rows of groups of 64, 1, 75 and 10 texts, written back through `order`
    gid = torch.repeat_interleave(torch.arange(4, device=dev), ends - starts)
    counts = ends - starts
    order = torch.as_tensor(rng.permutation(160)[:150], device=dev)
    out = text_means(xs, gid, want, sq, counts, order, torch.full((160,), np.nan, dtype=torch.float64, device=dev))
    dots = (xs.double() * want[gid, :70]).sum(1)
    others = (counts - 1)[gid].double()
    expect = torch.full((160,), np.nan, dtype=torch.float64, device=dev)
    expect[order] = torch.where(others > 0, (dots - sq64) / others.clamp(min=1), np.nan)
    torch.testing.assert_close(out, expect, rtol=1e-6, atol=1e-6, equal_nan=True)
    assert torch.isnan(out[order[64]]) and torch.isnan(out).sum() == 11  # the lone text and the 10 not in order


def test_triton_group_stats_names_the_bad_row_and_skips_excluded_ones(triton_ok):
    x, g, G = make_case(31, N=40, d=12)
    x[0, 2] = np.nan  # row 0 is excluded (group -1): not read
    bf = H.brute_force(np.where(g[:, None] < 0, 1.0, x), g, n_groups=G)
    assert_stats_close(H.triton_group_stats(x, g, n_groups=G), bf, rtol=2e-5, atol=2e-5)
    x[25, 3], x[17, 1] = np.inf, np.nan
    with pytest.raises(DataError, match="row 17 has a NaN or infinite"):
        H.triton_group_stats(x, g, n_groups=G)
    x[25, 3] = x[17, 1] = 1.0
    x[30] = x[20] = 0.0
    with pytest.raises(DataError, match="row 20 is all zeros"):
        H.triton_group_stats(x, g, n_groups=G)
    raw = H.triton_group_stats(x, g, n_groups=G, normalize=False)  # the vectors as given: zeros are fine
    assert_stats_close(raw, H.reference(np.where(g[:, None] < 0, 1.0, x), g, n_groups=G, normalize=False),
                       rtol=2e-5, atol=2e-4)


def test_chunk_plan_cuts_each_group_into_runs():
    # groups of 0, 5, 0 and 7 rows in chunks of at most 4
    starts, ends, groups = H._chunk_plan(np.array([0, 0, 5, 5, 12]), 4)
    assert starts.tolist() == [0, 4, 5, 9] and ends.tolist() == [4, 5, 9, 12] and groups.tolist() == [1, 1, 3, 3]
    assert [a.size for a in H._chunk_plan(np.array([0, 0]), 4)] == [0, 0, 0]


def test_triton_group_stats_with_every_row_excluded(triton_ok):
    got = H.triton_group_stats(np.ones((4, 3)), np.full(4, -1), n_groups=2)
    assert got.n.tolist() == [0, 0] and got.sum.tolist() == [0.0, 0.0] and np.isnan(got.text_mean).all()


@pytest.mark.parametrize("dtype, tol", [("float16", 4e-3), ("bfloat16", 3e-2)])
def test_triton_group_stats_half(triton_ok, dtype, tol):
    if dtype == "bfloat16" and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("the Triton interpreter computes bf16 tl.dot wrongly (NumPy has no bfloat16); runs on CUDA")
    x, g, G = make_case(3, N=60, d=32)
    bf = H.brute_force(x, g, n_groups=G)
    got = H.triton_group_stats(x, g, n_groups=G, dtype=dtype, chunk_rows=32)
    # half-precision inputs (fp32 accumulate): tolerance is the input rounding (2**-11, 2**-8)
    np.testing.assert_allclose(got.mean[3:], bf.mean[3:], atol=tol)
    np.testing.assert_allclose(got.sumsq, bf.sumsq, rtol=tol, atol=tol)


def test_cupy_code_path_on_numpy_namespace():
    x, g, G = make_case(4)
    bf = H.brute_force(x, g, n_groups=G)
    assert_stats_close(H._group_stats_xp(np, x, g, n_groups=G), bf, rtol=1e-5, atol=1e-5)


def test_cupy_group_stats(cupy_ok):
    x, g, G = make_case(5)
    assert_stats_close(H.cupy_group_stats(x, g, n_groups=G), H.brute_force(x, g, n_groups=G), rtol=1e-5, atol=1e-5)


def check_pairs_against_brute(ps, x, g, G, n_bins, top_k, tol, explicit_max_n=None):
    for k in range(G):
        c, i, j = explicit_pairs(x, g, k)
        if explicit_max_n is not None:  # every pair value of a group of at most explicit_max_n texts, none above
            assert (ps.pairs[k] is None) == ((g == k).sum() > explicit_max_n), k
        np.testing.assert_allclose(ps.sum[k], c.sum(), rtol=tol, atol=tol)
        np.testing.assert_allclose(ps.sumsq[k], (c * c).sum(), rtol=tol, atol=tol)
        # histogram: exact except for pairs within rounding of a bin edge
        pos = (c + 1) * n_bins / 2
        near = np.abs(pos - np.round(pos)) < 1e-4
        want = np.bincount(np.clip(np.floor(pos), 0, n_bins - 1).astype(int), minlength=n_bins)
        assert ps.hist[k].sum() == c.size
        assert np.abs(ps.hist[k] - want).sum() <= 2 * near.sum()
        if c.size:
            order = np.argsort(-c, kind="stable")[:top_k]
            m = min(top_k, c.size)
            np.testing.assert_allclose(ps.top_values[k, :m], c[order], atol=tol)
            assert ps.top_pairs[k, :m].tolist() == np.stack([i[order], j[order]], 1).tolist()
            order = np.argsort(c, kind="stable")[:top_k]
            np.testing.assert_allclose(ps.bottom_values[k, :m], c[order], atol=tol)
            assert ps.bottom_pairs[k, :m].tolist() == np.stack([i[order], j[order]], 1).tolist()
            assert np.isnan(ps.top_values[k, m:]).all() and (ps.top_pairs[k, m:] == -1).all()
        if ps.pairs[k] is not None:
            pi, pj = ps.pair_rows(k)
            assert pi.tolist() == i.tolist() and pj.tolist() == j.tolist()
            np.testing.assert_allclose(ps.pairs[k], c, atol=tol)
    rs = H.reference(x, g, n_groups=G)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(ps.row_sum / (rs.n[np.maximum(g, 0)] - 1), rs.text_mean, atol=tol, rtol=tol)


def test_pair_reference_equals_brute_force():
    x, g, G = make_case(6)
    # groups of 0, 1, 2, 58 and 26 texts: group 4 sits exactly at explicit_max_n, group 3 above it
    ps = H.pair_reference(x, g, n_groups=G, n_bins=50, top_k=4, explicit_max_n=26, block_rows=7)
    check_pairs_against_brute(ps, x, g, G, 50, 4, 1e-10, explicit_max_n=26)


@pytest.mark.parametrize("hist_mode, n_bins, block", [("tl", 64, 16), ("atomic", 50, 32)])
def test_triton_pair_stats(triton_ok, hist_mode, n_bins, block):
    x, g, G = make_case(7, N=80, d=24)  # groups of 0, 1, 2, 47 and 27 texts: group 4 at explicit_max_n
    ps = H.triton_pair_stats(x, g, n_groups=G, n_bins=n_bins, top_k=3, explicit_max_n=27,
                             block=block, block_k=16, hist_mode=hist_mode)
    assert ps.backend == "triton"
    check_pairs_against_brute(ps, x, g, G, n_bins, 3, 2e-5, explicit_max_n=27)


def test_cupy_pair_code_path_on_numpy_namespace():
    x, g, G = make_case(8)
    ps = H._pair_stats_xp(np, x, g, n_groups=G, n_bins=40, top_k=2, explicit_max_n=100, block_rows=9)
    check_pairs_against_brute(ps, x, g, G, 40, 2, 2e-5, explicit_max_n=100)


def test_cupy_pair_stats(cupy_ok):
    x, g, G = make_case(9)
    ps = H.cupy_pair_stats(x, g, n_groups=G, n_bins=40, top_k=2)
    check_pairs_against_brute(ps, x, g, G, 40, 2, 2e-5)


@pytest.mark.parametrize("backend", ["numpy", "triton-tl", "triton-atomic"])
def test_pair_histograms_put_identical_and_opposite_texts_in_the_end_bins(request, backend):
    """Duplicated texts (cosine 1, or a rounding above it) and opposite ones (-1, or a rounding below) count in
    the last and the first bin: no pair is lost, and none spills into the next group's histogram."""
    rng = np.random.default_rng(40)
    base = rng.normal(size=(3, 16))
    x = np.concatenate([base, base, -base, rng.normal(size=(4, 16))]) * rng.uniform(0.5, 3, size=(13, 1))
    g = np.array([0] * 9 + [1] * 4)
    if backend == "numpy":
        ps = H.pair_reference(x, g, n_bins=16, top_k=2)
    else:
        request.getfixturevalue("triton_ok")
        ps = H.triton_pair_stats(x, g, n_bins=16, top_k=2, block=16, block_k=16, hist_mode=backend[7:])
    # group 0: 3 identical pairs, 6 opposite ones, 27 others well inside (-1, 1)
    assert ps.hist[0, -1] == 3 and ps.hist[0, 0] == 6 and ps.hist[0].sum() == 36
    c, _, _ = explicit_pairs(x, g, 1)
    assert ps.hist[1].tolist() == np.bincount(np.floor((c + 1) * 8).astype(int), minlength=16).tolist()


def test_histogram_quantiles_within_one_bin():
    x, g, G = make_case(10, N=120)
    ps = H.pair_reference(x, g, n_groups=G, n_bins=400, top_k=0)
    for k in (3, 4):
        c, _, _ = explicit_pairs(x, g, k)
        q = ps.quantiles([0.1, 0.5, 0.9])[k]
        np.testing.assert_allclose(q, np.quantile(c, [0.1, 0.5, 0.9]), atol=2 / 400 + 0.02 * c.std())


def weighted_brute(x, w):
    xs = x / np.linalg.norm(x, axis=1, keepdims=True)
    iu, ju = np.triu_indices(x.shape[0], 1)
    c = np.einsum("ij,ij->i", xs[iu], xs[ju])
    ww = w[:, iu] * w[:, ju]
    return ww.sum(1), (ww * c).sum(1), (ww * c * c).sum(1)


def test_replicates_without_normalising_weight_the_dot_products_of_the_rows_as_given(triton_ok):
    """``normalize=False``: every backend's replicates are the weighted pairs of raw dot products (not cosines), and
    group_replicates hands the option to them."""
    rng = np.random.default_rng(13)
    x = (rng.normal(size=(24, 10)) + 0.5) * rng.uniform(0.5, 3.0, size=(24, 1))  # rows of unequal norms
    w = rng.poisson(1.0, size=(5, 24)).astype(float)
    iu, ju = np.triu_indices(24, 1)
    dots = np.einsum("ij,ij->i", x[iu], x[ju])
    ww = w[:, iu] * w[:, ju]
    want = ((ww * dots).sum(1), (ww * dots * dots).sum(1))
    assert not np.allclose(want[0], weighted_brute(x, w)[1])  # the cosines' sums differ: the case tells them apart
    for r, tol in ((H.replicate_reference(x, w, normalize=False), 1e-10),
                   (H._replicate_stats_xp(np, x, w, normalize=False), 1e-5),
                   (H.triton_replicate_stats(x, w, normalize=False), 2e-5)):
        np.testing.assert_allclose(r.sum, want[0], rtol=tol, err_msg=r.backend)
        np.testing.assert_allclose(r.sumsq, want[1], rtol=tol, err_msg=r.backend)
    g = np.repeat(np.arange(3), 8)
    raw = H.group_replicates(x, g, kind="bootstrap", n_rep=4, seed=3, n_groups=3, backend="numpy", normalize=False)
    cos = H.group_replicates(x, g, kind="bootstrap", n_rep=4, seed=3, n_groups=3, backend="numpy")
    np.testing.assert_allclose(raw.n_pairs, cos.n_pairs)
    assert np.nanmax(raw.mean) > 1.5 and np.nanmax(cos.mean) <= 1  # dot products of norms above 1, and cosines


def test_replicate_reference_equals_weighted_pairs():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(30, 12)) + 0.5
    w = rng.poisson(1.0, size=(6, 30)).astype(float)
    r = H.replicate_reference(x, w)
    for got, want in zip((r.n_pairs, r.sum, r.sumsq), weighted_brute(x, w)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(r.weight_total, w.sum(1))
    np.testing.assert_allclose(H._replicate_stats_xp(np, x, w).sum, r.sum, rtol=1e-5, atol=1e-5)
    # a negative or NaN weight is no resample (a negative one gave negative pair counts): refused, naming the
    # weights; a wrong shape names the pool's size
    for bad, says in ((-w, "finite and non-negative"), (w * np.nan, "finite and non-negative"), (w[:, :5], "(B, 30)")):
        with pytest.raises(DataError, match=re.escape(says)):
            H.replicate_reference(x, bad)


def test_a_replicate_without_pairs_has_no_mean(triton_ok):
    """A replicate that weights one text only has no pair; the closed form can still leave a rounding
    residue in its sum (1e-16 in float64, 1e-7 in the float32 kernel), which must not become an
    infinite mean or variance."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 24)).astype(np.float32)
    w = np.zeros((200, 50))
    w[np.arange(200), rng.integers(0, 50, 200)] = rng.integers(1, 4, 200)
    w[:5] = rng.poisson(1.0, size=(5, 50))  # and a few replicates with pairs
    for r in (H.replicate_reference(x, w), H.replicate_stats(x, w, backend="numpy"), H.triton_replicate_stats(x, w)):
        none = r.n_pairs == 0
        assert none.sum() >= 190 and np.isnan(r.mean[none]).all() and np.isnan(r.var[none]).all()
        assert np.isfinite(r.mean[~none]).all() and np.isfinite(r.var[~none]).all()
    g = np.repeat(np.arange(10), 5)
    gr = H.group_replicates(x, g, kind="bootstrap", n_rep=300, seed=0, n_groups=10, backend="numpy")
    assert not np.isinf(gr.mean).any() and np.array_equal(np.isnan(gr.mean), gr.n_pairs == 0)


def test_triton_replicates(triton_ok):
    rng = np.random.default_rng(12)
    x = rng.normal(size=(40, 20)) + 0.5
    w = rng.poisson(1.0, size=(9, 40)).astype(float)
    r = H.triton_replicate_stats(x, w)
    for got, want in zip((r.n_pairs, r.sum, r.sumsq), weighted_brute(x, w)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("bj", [16, 32, 64])
def test_replicate_kernel_writes_every_partial_whatever_the_tile(triton_ok, bj):
    """The autotuner tries several tile widths on one output buffer: each must write every column
    (a stale column from a wider or narrower tile once doubled some rows on an H100)."""
    import torch

    from harness.kernels._common import torch_device
    from harness.kernels._triton_homogeneity import _replicate_kernel

    rng = np.random.default_rng(17)
    B, M, min_bj = 9, 40, 16
    dev = torch_device()
    W = torch.as_tensor(rng.poisson(1.0, size=(B, M)), dtype=torch.float32, device=dev)
    x = rng.normal(size=(M, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    C = torch.as_tensor(x @ x.T, dtype=torch.float32, device=dev)
    nj = -(-M // min_bj)
    out1 = torch.full((B, nj), float("nan"), device=dev)  # poisoned: an unwritten column shows
    out2 = torch.full((B, nj), float("nan"), device=dev)
    grid = (-(-B // 16), -(-M // bj))
    _replicate_kernel.fn[grid](W, C, out1, out2, B, M, W.stride(0), C.stride(0), nj, 4, 6,
                               BB=16, BJ=bj, BK=16, PREC="ieee", MIN_BJ=min_bj)
    w, c = W.double().cpu().numpy(), C.double().cpu().numpy()
    np.testing.assert_allclose(out1.double().sum(1).cpu().numpy(), ((w @ c) * w).sum(1), rtol=1e-5)
    np.testing.assert_allclose(out2.double().sum(1).cpu().numpy(), ((w @ (c * c)) * w).sum(1), rtol=1e-5)


def test_cupy_replicates(cupy_ok):
    rng = np.random.default_rng(13)
    x = rng.normal(size=(40, 20))
    w = rng.poisson(1.0, size=(5, 40)).astype(float)
    np.testing.assert_allclose(H.cupy_replicate_stats(x, w).sum, weighted_brute(x, w)[1], rtol=1e-5, atol=1e-4)


def test_permutation_replicates_are_group_stats_of_permuted_labels():
    x, g, G = make_case(14, N=50, d=10)
    strata = np.arange(50) % 2
    rep = H.group_replicates(x, g, kind="permutation", n_rep=3, seed=5, strata=strata, n_groups=G, backend="numpy")
    rng = np.random.default_rng(5)
    perms = {}
    for st in (0, 1):
        idx = np.flatnonzero((strata == st) & (g >= 0))
        perms[st] = (idx, [g[idx][rng.permutation(idx.size)] for _ in range(3)])
    for b in range(3):
        pg = g.copy()
        for st in (0, 1):
            idx, labels = perms[st]
            pg[idx] = labels[b]
        # permutation within strata: pairs only within a stratum, each stratum adding its pairs to every field
        want = {"n_pairs": np.zeros(G), "sum": np.zeros(G), "sumsq": np.zeros(G)}
        for st in (0, 1):
            sel = np.where(strata == st, pg, -1)
            ref = H.reference(x, sel, n_groups=G)
            for f in want:
                want[f] += getattr(ref, f)
        for f in want:
            np.testing.assert_allclose(getattr(rep, f)[b], want[f], atol=1e-9, err_msg=f)
    # no strata: one stratum of every non-excluded text
    one = H.group_replicates(x, g, kind="permutation", n_rep=2, seed=5, n_groups=G, backend="numpy")
    rng = np.random.default_rng(5)
    keep = np.flatnonzero(g >= 0)
    for b in range(2):
        pg = g.copy()
        pg[keep] = g[keep][rng.permutation(keep.size)]
        ref = H.reference(x, pg, n_groups=G)
        for f in ("n_pairs", "sum", "sumsq"):
            np.testing.assert_allclose(getattr(one, f)[b], getattr(ref, f), atol=1e-9, err_msg=f)


def test_bootstrap_replicates_use_hashed_text_weights(triton_ok):
    x, g, G = make_case(15, N=40, d=16)
    rep = H.group_replicates(x, g, kind="bootstrap", n_rep=4, seed=2, n_groups=G, backend="numpy")
    idx = np.flatnonzero(g == 4)
    w = story_weights(2, np.arange(1, 5), idx).astype(float)
    np.testing.assert_allclose(rep.sum[:, 4], weighted_brute(x[idx], w)[1], rtol=1e-10, atol=1e-10)
    tri = H.group_replicates(x, g, kind="bootstrap", n_rep=4, seed=2, n_groups=G, backend="triton")
    np.testing.assert_allclose(tri.sum, rep.sum, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize(
    "x, groups, err",
    [
        (np.ones((3,)), np.zeros(3, int), DataError),
        (np.ones((3, 2)), np.zeros(2, int), DataError),
        (np.ones((3, 2)), np.array([0, 0, 9]), DataError),
        (np.ones((3, 2)), np.array([0, 0, 5]), DataError),  # n_groups = 5: ids 0..4
        (np.ones((3, 2)), np.array([0, -2, 0]), DataError),  # only -1 means excluded
        (np.array([[1.0, 0], [0, 0], [1, 1]]), np.zeros(3, int), DataError),
        (np.ones((3, 2)), np.array([0.5, 0, 0]), DataError),
    ],
)
def test_bad_input(x, groups, err):
    with pytest.raises(err):
        H.reference(x, groups, n_groups=5)
    with pytest.raises(err):
        H.torch_group_stats(x, groups, n_groups=5)


@pytest.mark.parametrize("seed, d, chunk_rows", [(20, 40, 8192), (21, 8, 8192), (22, 24, 20)])
def test_torch_group_stats_equals_brute_force(seed, d, chunk_rows):
    """The fused CPU path: unsorted rows, excluded rows, groups of 0, 1, 2 and more texts (n < d and
    n > d, so both Gram shapes and the block split run), chunks of one or several groups."""
    x, g, G = make_case(seed, d=d)
    order = np.random.default_rng(seed).permutation(g.size)
    x, g = x[order], g[order]
    got = H.torch_group_stats(x, g, n_groups=G, chunk_rows=chunk_rows)
    assert got.backend == "torch"
    assert_stats_close(got, H.brute_force(x, g, n_groups=G), rtol=2e-5, atol=2e-5)
    raw = H.torch_group_stats(x, g, n_groups=G, normalize=False)  # the vectors as given
    assert_stats_close(raw, H.reference(x, g, n_groups=G, normalize=False), rtol=2e-5, atol=2e-4)
    assert H.group_stats(x, g, n_groups=G, backend="auto").backend in ("torch", "triton", "cupy")


@pytest.mark.parametrize("grouped", [True, False])
def test_torch_group_stats_uses_unit_rows_as_given_and_normalises_the_rest(grouped, monkeypatch):
    """Rows that are unit vectors already skip the normalising copy; a chunk holding one row that is
    not (norm 1.01) is normalised, or its cosines would be 1% off."""
    import torch

    x, g, G = make_case(24, N=120, d=16)
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    if grouped:
        order = np.argsort(np.where(g < 0, G, g), kind="stable")
        x, g = x[order], g[order]
    divs = []
    real_div = torch.div
    monkeypatch.setattr(torch, "div", lambda *a, **kw: divs.append(1) or real_div(*a, **kw))
    unit = H.torch_group_stats(x, g, n_groups=G, chunk_rows=8)
    assert not divs
    assert_stats_close(unit, H.brute_force(x, g, n_groups=G), rtol=2e-5, atol=2e-5)
    big = int(np.flatnonzero(g == 4)[0])
    x[big] *= 1.01
    scaled = H.torch_group_stats(x, g, n_groups=G, chunk_rows=8)
    assert divs
    assert_stats_close(scaled, H.brute_force(x, g, n_groups=G), rtol=2e-5, atol=2e-5)
    x[big] /= 1.01 * 1.01  # norm 0.99: as far from a unit vector below 1 as above
    divs.clear()
    shrunk = H.torch_group_stats(x, g, n_groups=G, chunk_rows=8)
    assert divs
    assert_stats_close(shrunk, H.brute_force(x, g, n_groups=G), rtol=2e-5, atol=2e-5)
    raw = H.torch_group_stats(x, g, n_groups=G, normalize=False)
    assert_stats_close(raw, H.reference(x, g, n_groups=G, normalize=False), rtol=2e-5, atol=2e-4)


def test_torch_group_stats_rows_in_group_order_after_excluded_ones():
    """Excluded rows in front of rows already in group order: the path that reads the rows in place (no
    gather) must not be taken, or every group reads the rows of the excluded ones and its neighbours."""
    x, g, G = make_case(25, N=60, d=12)
    order = np.argsort(g, kind="stable")  # the 3 excluded rows first, then groups 1..4 in order
    x, g = x[order], g[order]
    got = H.torch_group_stats(x, g, n_groups=G)
    assert_stats_close(got, H.brute_force(x, g, n_groups=G), rtol=2e-5, atol=2e-5)
    assert_stats_close(H.group_stats(x, g, n_groups=G, backend="torch"), got, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(130, 70), (70, 130), (200, 200), (3, 5), (1, 384), (384, 1)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gram_frob_equals_the_full_gram(shape, dtype):
    # either orientation (A A^T or A^T A: same norm), below and above the 64-row block split
    import torch

    a = torch.randn(*shape, dtype=getattr(torch, dtype), generator=torch.Generator().manual_seed(7))
    a64 = a.double()
    full = float((a64 @ a64.T).square().sum())
    np.testing.assert_allclose(H._gram_frob2(a), full, rtol=1e-12 if dtype == "float64" else 2e-6)
    np.testing.assert_allclose(H._gram_frob2(a.t()), full, rtol=1e-12 if dtype == "float64" else 2e-6)


def test_torch_group_stats_within_cell_variance_of_similar_texts_is_that_of_float64():
    """Cosines near 0.8 (sentence embeddings of one prompt): the variance of a cell is the difference of two
    near-equal sums, and the squares of the float32 Gram summed in float32 (a 250,000-term dot) put it 2.3e-4
    off the float64 reference (0.1-0.25% at d = 768); summed in float64 it is within 5e-5."""
    rng = np.random.default_rng(0)
    x = (rng.normal(size=384) + 0.5 * rng.normal(size=(500, 384))).astype(np.float32)
    g = np.zeros(500, np.int64)
    ref, got = (H.group_stats(x, g, n_groups=1, backend=b) for b in ("numpy", "torch"))
    var = lambda s: (s.sumsq[0] - s.sum[0] ** 2 / s.n_pairs[0]) / (s.n_pairs[0] - 1)  # noqa: E731
    assert 0.75 < ref.sum[0] / ref.n_pairs[0] < 0.85
    assert var(got) == pytest.approx(var(ref), rel=5e-5)


def test_torch_group_stats_names_the_bad_row():
    x, g, G = make_case(23, N=30)
    x[17, 3] = np.nan
    with pytest.raises(DataError, match="row 17 has a NaN"):
        H.torch_group_stats(x, np.where(g < 0, 0, g), n_groups=G)
    x[17, 3] = 1.0
    x[9] = 0.0
    with pytest.raises(DataError, match="row 9 is all zeros"):
        H.torch_group_stats(x, np.where(g < 0, 0, g), n_groups=G)


def test_torch_group_stats_holds_numpy_blas_to_one_thread_and_gives_it_back(monkeypatch):
    # the NumPy GEMVs inside the fused loop run on one BLAS thread (their pool spinning against
    # torch's OpenMP threads tripled the time on 2 cores); the caller's setting comes back after,
    # also when a bad row raises inside the loop
    from threadpoolctl import threadpool_info

    from harness.kernels import _common

    def numpy_blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]

    before = numpy_blas_threads()
    if not before:
        pytest.skip("threadpoolctl does not see NumPy's BLAS here")
    seen = []
    real = np.matmul

    def spy(*a, **kw):
        seen.append(numpy_blas_threads())
        return real(*a, **kw)

    x, g, G = make_case(23, N=30)
    g = np.where(g < 0, 0, g)
    monkeypatch.setattr(H.np, "matmul", spy)
    with _common._numpy_blas().limit(limits=2):
        outside = numpy_blas_threads()
        H.torch_group_stats(x, g, n_groups=G)
        assert seen and all(s == [1] * len(before) for s in seen)
        assert numpy_blas_threads() == outside
        x[5] = 0.0
        with pytest.raises(DataError):
            H.torch_group_stats(x, g, n_groups=G)
        assert numpy_blas_threads() == outside


def test_bad_options():
    x, g, G = make_case(16, N=20)
    with pytest.raises(ConfigError):
        H.pair_reference(x, g, n_bins=0)
    with pytest.raises(ConfigError):
        H.group_stats(x, g, backend="gpu")
    with pytest.raises(ConfigError):
        H.group_replicates(x, g, kind="jackknife")


def test_reference_with_empty_groups_first_middle_and_last():
    """Groups without rows anywhere in the id range (the last ones included) give n = 0 and
    zero sums, and do not disturb the others."""
    import numpy as np

    from harness.kernels import homogeneity as hk

    rng = np.random.default_rng(3)
    x = rng.normal(size=(9, 4))
    g = np.array([1, 1, 1, 3, 3, 3, 3, 1, 3])
    stats = hk.reference(x, g, n_groups=6)
    assert list(stats.n) == [0, 4, 0, 5, 0, 0]
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    for k in (1, 3):
        c = xn[g == k] @ xn[g == k].T
        iu = np.triu_indices(len(c), 1)
        assert np.isclose(stats.sum[k], c[iu].sum()) and np.isclose(stats.sumsq[k], (c[iu] ** 2).sum())
    assert stats.sum[[0, 2, 4, 5]].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("G", [1, 3, 256, 257, 300, 65536, 70000])
def test_segments_order_is_the_stable_sort_of_the_ids(G):
    # the ids are sorted as uint8/uint16 where they fit (a radix sort); the order must be the
    # stable order of the ids as given, excluded rows (-1) left out
    rng = np.random.default_rng(G)
    g = rng.integers(-1, G, 5000)
    order, counts, offsets = H._segments(g, G)
    keep = np.flatnonzero(g >= 0)
    assert np.array_equal(order, keep[np.argsort(g[keep], kind="mergesort")])
    assert np.array_equal(counts, np.bincount(g[keep], minlength=G))
    assert offsets[0] == 0 and offsets[-1] == keep.size and np.array_equal(np.diff(offsets), counts)
