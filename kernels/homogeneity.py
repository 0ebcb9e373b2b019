"""Homogeneity statistics: within- and between-group pairwise cosines without forming pairs.

For unit vectors x_i of one group (n texts, group sum s, Gram matrix X^T X):

- sum of pairwise cosines    sum_{i<j} c_ij   = (||s||^2 - sum_i ||x_i||^2) / 2
- sum of squared cosines     sum_{i<j} c_ij^2 = (||X^T X||_F^2 - sum_i ||x_i||^4) / 2
- text i's mean similarity to the rest of its group = (x_i . s - ||x_i||^2) / (n - 1)
- mean cosine between groups g != h = s_g . s_h / (n_g n_h)

(the diagonal terms are taken from the vectors actually used, so rounding of the normalised
inputs does not bias the sums). These give what the digest's mixed models need (per group
n, sum, sum of squares) in O(N d^2) time and O(N d + G d^2) memory. The Gram matrices come
from a segmented Gram kernel (Triton: ``tl.dot`` on tensor cores, bf16/fp16/fp32 in, fp32
accumulate per chunk of rows, fp64 merge of the chunks).

Pair-level outputs (``pair_stats``): per-group histograms of pairwise cosine on fixed fine bins
(hence quantiles), the k most and least similar pairs per group, per-text row sums and, for
small groups, every pair value. The Triton kernel tiles each group's upper triangle and
reduces every tile in its epilogue: the N x N matrix never exists.

Text-level inference (``replicate_stats`` / ``group_replicates``): B replicate weightings of a
pool of texts (bootstrap multiplicities, permuted group memberships) give weighted pair
statistics sum_{i<j} w_i w_j c_ij and sum_{i<j} w_i w_j c_ij^2 from w^T C w and w^T (C o C) w,
i.e. from one GEMM of the B x m weight matrix with the pool's cosine matrix C; the Triton
kernel fuses that GEMM, the square C o C and the row-wise reduction.

Backends: ``reference``/``pair_reference``/``replicate_reference`` (NumPy, float64, the
oracles; ``brute_force`` forms every pair explicitly), ``triton_*`` (CUDA or
``TRITON_INTERPRET=1``), ``cupy_*`` (the same array code on CuPy: cuBLAS GEMMs), and the
dispatchers ``group_stats``, ``pair_stats``, ``replicate_stats`` with ``backend="auto"``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import ConfigError, DataError

from ._common import numpy_blas_single_thread, resolve_backend, torch_device

# ============================================================================ results


class _PairMoments:
    """``mean`` and ``var`` of the pairwise cosines from ``sum``, ``sumsq`` and ``n_pairs``."""

    sum: np.ndarray
    sumsq: np.ndarray
    n_pairs: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """Mean pairwise cosine per group or replicate (NaN where there are no pairs: a replicate that
        weights one text only can still carry a rounding residue in ``sum``, which is no mean)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(np.asarray(self.n_pairs) > 0, self.sum / self.n_pairs, np.nan)

    @property
    def var(self) -> np.ndarray:
        """Population variance of the pairwise cosines per group or replicate (NaN without pairs)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(np.asarray(self.n_pairs) > 0, self.sumsq / self.n_pairs - self.mean**2, np.nan)


@dataclass(frozen=True)
class GroupStats(_PairMoments):
    """Sufficient statistics of within-group pairwise cosines (pairs i < j, self-pairs excluded).

    ``n``: texts per group; ``n_pairs``: n (n - 1) / 2; ``sum`` / ``sumsq``: sum of pairwise
    cosines and of their squares (float64); ``text_mean``: per text (input order) the mean
    cosine to the other texts of its group (NaN for excluded texts or groups of one);
    ``between``: G x G mean cosine between groups, diagonal = within-group pair mean.
    """

    n: np.ndarray
    n_pairs: np.ndarray
    sum: np.ndarray
    sumsq: np.ndarray
    text_mean: np.ndarray
    between: np.ndarray
    backend: str = "numpy"

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n.tolist(), "n_pairs": self.n_pairs.tolist(), "sum": self.sum.tolist(),
            "sumsq": self.sumsq.tolist(), "mean": self.mean.tolist(), "var": self.var.tolist(),
            "text_mean": self.text_mean.tolist(), "between": self.between.tolist(), "backend": self.backend,
        }


@dataclass(frozen=True)
class PairStats:
    """Pair-level summaries of within-group cosines, computed tile by tile.

    ``hist[g, k]``: pairs of group g with cosine in bin k, bins ``bin_edges`` (uniform on
    [-1, 1]; values outside go to the end bins); ``top_values[g, :]`` / ``top_pairs[g, :, 2]``:
    the k most similar pairs (original row indices, value descending, -1 / NaN padding when a
    group has fewer pairs); ``bottom_*`` the k least similar; ``pairs[g]``: every pair value
    of group g in the order of ``pair_rows(g)`` (None for groups above ``explicit_max_n``);
    ``sum`` / ``sumsq``: the pair sums recomputed from the tiles (a cross-check of
    ``GroupStats``); ``row_sum``: per text, the sum of its cosines to the rest of its group.
    """

    bin_edges: np.ndarray
    hist: np.ndarray
    top_values: np.ndarray
    top_pairs: np.ndarray
    bottom_values: np.ndarray
    bottom_pairs: np.ndarray
    pairs: tuple
    sum: np.ndarray
    sumsq: np.ndarray
    row_sum: np.ndarray
    members: tuple = field(repr=False, default=())
    backend: str = "numpy"

    def pair_rows(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Original row indices (i, j) of the pairs of group g, in the order of ``pairs[g]``."""
        m = self.members[g]
        iu, ju = np.triu_indices(len(m), 1)
        return m[iu], m[ju]

    def quantiles(self, q) -> np.ndarray:
        """Quantiles (G, len(q)) of each group's pairwise cosines, linear within histogram bins.

        Exact to one bin width (2 / n_bins).
        """
        q = np.atleast_1d(np.asarray(q, dtype=np.float64))
        out = np.full((self.hist.shape[0], q.size), np.nan)
        for g, h in enumerate(self.hist):
            tot = h.sum()
            if tot == 0:
                continue
            cum = np.concatenate([[0], np.cumsum(h)]) / tot
            out[g] = np.interp(q, cum, self.bin_edges)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "bin_edges": self.bin_edges.tolist(), "hist": self.hist.tolist(),
            "top_values": self.top_values.tolist(), "top_pairs": self.top_pairs.tolist(),
            "bottom_values": self.bottom_values.tolist(), "bottom_pairs": self.bottom_pairs.tolist(),
            "sum": self.sum.tolist(), "sumsq": self.sumsq.tolist(), "backend": self.backend,
        }


@dataclass(frozen=True)
class ReplicateStats(_PairMoments):
    """Weighted pair statistics of B replicate weightings w_b of one pool of texts.

    Each pair i < j counts with weight w_i w_j: ``n_pairs`` = sum w_i w_j, ``sum`` =
    sum w_i w_j c_ij, ``sumsq`` = sum w_i w_j c_ij^2, ``weight_total`` = sum w_i. With 0/1
    weights a replicate is exactly the group of texts it selects; with bootstrap
    multiplicities it is the usual weighted U-statistic (copies of one text never pair).
    """

    weight_total: np.ndarray
    n_pairs: np.ndarray
    sum: np.ndarray
    sumsq: np.ndarray
    backend: str = "numpy"

    def to_dict(self) -> dict[str, Any]:
        return {
            "weight_total": self.weight_total.tolist(), "n_pairs": self.n_pairs.tolist(),
            "sum": self.sum.tolist(), "sumsq": self.sumsq.tolist(), "backend": self.backend,
        }


# ============================================================================ validation


def _check_x(x, what: str) -> np.ndarray:
    a = _to_numpy(x)
    if a.ndim != 2 or a.shape[1] == 0:
        raise DataError(f"{what}: embeddings must be a 2-D (N, d) array, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise DataError(f"{what}: embeddings must be floating point, got dtype {a.dtype}")
    return a


def _check_x_shape(x, what: str) -> tuple[int, int]:
    """Validate (N, d) floating embeddings without copying them (a CUDA tensor stays on the GPU)."""
    if hasattr(x, "detach") or type(x).__module__.startswith("cupy"):
        shape = tuple(x.shape)
        floating = x.is_floating_point() if hasattr(x, "detach") else x.dtype.kind == "f"
        dtype = x.dtype
    else:
        a = np.asarray(x)
        shape, floating, dtype = a.shape, np.issubdtype(a.dtype, np.floating), a.dtype
    if len(shape) != 2 or shape[1] == 0:
        raise DataError(f"{what}: embeddings must be a 2-D (N, d) array, got shape {shape}")
    if not floating:
        raise DataError(f"{what}: embeddings must be floating point, got dtype {dtype}")
    return shape[0], shape[1]


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def _check_groups(groups, n: int, n_groups, what: str) -> tuple[np.ndarray, int]:
    g = _to_numpy(groups)
    if g.shape != (n,):
        raise DataError(f"{what}: groups must have shape ({n},) like the embeddings, got {g.shape}")
    if g.size and not np.issubdtype(g.dtype, np.integer):
        raise DataError(f"{what}: groups must be integer ids (0..G-1, -1 = excluded), got dtype {g.dtype}")
    g = g.astype(np.int64, copy=False)
    lo, hi = (int(g.min()), int(g.max())) if g.size else (0, -1)
    if n_groups is None:
        n_groups = hi + 1 if g.size else 0
    if not isinstance(n_groups, (int, np.integer)) or n_groups < 1:
        raise ConfigError(f"{what}: n_groups must be a positive integer, got {n_groups!r}")
    if lo < -1 or hi >= n_groups:  # two passes over the ids when they are all in range
        i = int(np.flatnonzero((g < -1) | (g >= n_groups))[0])
        raise DataError(f"{what}: groups[{i}] = {g[i]} is outside -1..{n_groups - 1}")
    return g, int(n_groups)


def _normalize_np(a: np.ndarray, what: str) -> np.ndarray:
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        i = int(np.flatnonzero(~np.isfinite(a).all(1))[0])
        raise DataError(f"{what}: embedding row {i} has a NaN or infinite value")
    nrm = np.linalg.norm(a, axis=1)
    if (nrm == 0).any():
        i = int(np.flatnonzero(nrm == 0)[0])
        raise DataError(f"{what}: embedding row {i} is all zeros and has no direction; drop it")
    return a / nrm[:, None]


def _segments(g: np.ndarray, G: int):
    """Stable order of the non-excluded rows by group, group counts and offsets.

    The ids are sorted as the narrowest unsigned type that holds them: NumPy's stable sort is a
    radix sort for 8- and 16-bit integers and a merge sort for wider ones (N = 100,000 ids of 104
    groups: 0.7-0.8 ms against 4.3 ms as int64 on a 2-core Xeon), and the order is the same."""
    keep = np.flatnonzero(g >= 0)
    ids = g[keep]
    if G <= 1 << 16:
        ids = ids.astype(np.uint8 if G <= 1 << 8 else np.uint16)
    order = keep[np.argsort(ids, kind="stable")]
    counts = np.bincount(g[keep], minlength=G).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return order, counts, offsets


def _assemble(counts, sums_vec, sq_norms_sorted, sq4_by_group, frob, xs_dot_s, backend):
    """Common tail: (per-text means in group order, GroupStats) from group sums, diagonal terms and
    Frobenius norms (float64)."""
    n = counts
    G = n.size
    # Per-group sum of squared norms; bincount handles empty groups anywhere (reduceat does not
    # accept an offset equal to the length, i.e. trailing empty groups).
    diag1 = np.bincount(np.repeat(np.arange(G), n), weights=sq_norms_sorted, minlength=G).astype(np.float64)
    others = np.repeat(n - 1.0, n)  # per text (in group order): the other texts of its group
    with np.errstate(invalid="ignore", divide="ignore"):
        text_mean_sorted = (xs_dot_s - sq_norms_sorted) / others
    text_mean_sorted[others <= 0] = np.nan
    return text_mean_sorted, _group_terms(n, sums_vec, diag1, sq4_by_group, frob, backend)


def _group_terms(n, sums_vec, diag1, sq4_by_group, frob, backend, dots=None) -> GroupStats:
    """GroupStats without the per-text means, from each group's count, vector sum, sum of squared
    norms (diag1), sum of squared squared norms (sq4) and ||X^T X||_F^2 (frob), all float64.
    ``dots``: the G x G products of the group sums, when the device took them (then ``sums_vec`` is
    not read)."""
    n_pairs = n * (n - 1) // 2
    norms = (sums_vec**2).sum(1) if dots is None else np.diag(dots)
    ssum = np.where(n_pairs > 0, (norms - diag1) / 2, 0.0)
    sumsq = np.where(n_pairs > 0, (frob - sq4_by_group) / 2, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        between = (sums_vec @ sums_vec.T if dots is None else dots) / np.outer(n, n)
        between = np.where(np.outer(n, n) > 0, between, np.nan)
        np.fill_diagonal(between, np.where(n_pairs > 0, ssum / np.maximum(n_pairs, 1), np.nan))
    return GroupStats(n=n, n_pairs=n_pairs, sum=ssum, sumsq=sumsq, text_mean=None, between=between, backend=backend)


def _finish(stats: GroupStats, text_mean_sorted, order, N) -> GroupStats:
    tm = np.full(N, np.nan)
    tm[order] = text_mean_sorted
    return GroupStats(
        n=stats.n, n_pairs=stats.n_pairs, sum=stats.sum, sumsq=stats.sumsq, text_mean=tm,
        between=stats.between, backend=stats.backend,
    )


# ============================================================================ group statistics


def _closed_form_xp(xp, xs, counts, offsets, G, backend):
    """Closed form on a namespace (numpy float64 for the reference, cupy for the GPU path).

    ``xs`` are the normalised rows sorted by group. Each group's Frobenius norm comes from the
    cheaper of its d x d Gram (X^T X) or its n x n Gram (X X^T): the two norms are equal.
    """
    d = xs.shape[1]
    sq = xp.zeros(xs.shape[0], dtype=xp.float64)
    sums = xp.zeros((G, d), dtype=xp.float64)
    frob = np.zeros(G)
    sq4 = np.zeros(G)
    xs_dot_s = xp.zeros(xs.shape[0], dtype=xp.float64)
    for g in range(G):
        a, b = int(offsets[g]), int(offsets[g + 1])
        if b == a:
            continue
        Xg = xs[a:b]
        s = Xg.sum(0, dtype=xp.float64)  # no float64 copy of the group's rows
        sums[g] = s
        sq[a:b] = (Xg * Xg).sum(1, dtype=xp.float64)
        gram = Xg @ Xg.T if (b - a) < d else Xg.T @ Xg
        frob[g] = float((gram.astype(xp.float64) ** 2).sum())
        sq4[g] = float((sq[a:b] ** 2).sum())
        xs_dot_s[a:b] = Xg @ s.astype(Xg.dtype)
    to_np = (lambda v: v.get()) if xp is not np else (lambda v: v)
    return _assemble(counts, to_np(sums), to_np(sq), sq4, frob, to_np(xs_dot_s), backend)


def reference(x, groups, *, n_groups=None, normalize=True) -> GroupStats:
    """Closed-form group statistics in NumPy float64 (the oracle of the kernels).

    ``x``: (N, d) embeddings; ``groups``: (N,) ids in 0..G-1 (-1 = excluded). With
    ``normalize=False`` the rows are used as given (dot products instead of cosines).
    """
    a = _check_x(x, "homogeneity.reference")
    g, G = _check_groups(groups, a.shape[0], n_groups, "homogeneity.reference")
    xs = _normalize_np(a, "homogeneity.reference") if normalize else a.astype(np.float64)
    order, counts, offsets = _segments(g, G)
    tms, st = _closed_form_xp(np, xs[order], counts, offsets, G, "numpy")
    return _finish(st, tms, order, a.shape[0])


def brute_force(x, groups, *, n_groups=None, normalize=True) -> GroupStats:
    """Every within-group pair formed explicitly (float64); for small N only (tests)."""
    a = _check_x(x, "homogeneity.brute_force")
    g, G = _check_groups(groups, a.shape[0], n_groups, "homogeneity.brute_force")
    xs = _normalize_np(a, "homogeneity.brute_force") if normalize else a.astype(np.float64)
    n = np.bincount(g[g >= 0], minlength=G).astype(np.int64)
    ssum, sumsq = np.zeros(G), np.zeros(G)
    tm = np.full(a.shape[0], np.nan)
    means = [xs[g == k].mean(0) if n[k] else None for k in range(G)]
    for k in range(G):
        idx = np.flatnonzero(g == k)
        for ii, i in enumerate(idx):
            others = [float(xs[i] @ xs[j]) for j in idx if j != i]
            if others:
                tm[i] = np.mean(others)
            for j in idx[ii + 1 :]:
                c = float(xs[i] @ xs[j])
                ssum[k] += c
                sumsq[k] += c * c
    n_pairs = n * (n - 1) // 2
    between = np.full((G, G), np.nan)
    for h in range(G):
        for k in range(G):
            if h == k:
                between[h, k] = ssum[h] / n_pairs[h] if n_pairs[h] else np.nan
            elif n[h] and n[k]:
                between[h, k] = float(means[h] @ means[k])
    return GroupStats(n=n, n_pairs=n_pairs, sum=ssum, sumsq=sumsq, text_mean=tm, between=between, backend="brute")


def cupy_group_stats(x, groups, *, n_groups=None, normalize=True) -> GroupStats:
    """Closed form on the GPU with CuPy: one cuBLAS GEMM per group (fp32 in, fp64 reductions)."""
    resolve_backend("cupy", what="cupy_group_stats")
    import cupy

    return _group_stats_xp(cupy, x, groups, n_groups=n_groups, normalize=normalize)


def _prep_xp(xp, x, groups, n_groups, normalize, what):
    """(input rows, group order, counts, offsets, G, the rows in group order on ``xp`` in float32,
    normalised when asked): the common start of the namespace paths."""
    a = _check_x(x, what)
    g, G = _check_groups(groups, a.shape[0], n_groups, what)
    order, counts, offsets = _segments(g, G)
    xs = xp.asarray(a[order], dtype=xp.float32)
    if normalize:
        nrm = xp.sqrt((xs * xs).sum(1, keepdims=True))
        if bool((nrm == 0).any()):
            raise DataError(f"{what}: an embedding row is all zeros and has no direction; drop it")
        xs = xs / nrm
    return a, order, counts, offsets, G, xs


def _group_stats_xp(xp, x, groups, *, n_groups=None, normalize=True, dtype=np.float32) -> GroupStats:
    """The CuPy path written against an array namespace (tests run it with NumPy)."""
    a, order, counts, offsets, G, xs = _prep_xp(xp, x, groups, n_groups, normalize, "cupy_group_stats")
    xs = xs.astype(dtype)
    tms, st = _closed_form_xp(xp, xs, counts, offsets, G, "cupy" if xp is not np else "numpy-f32")
    return _finish(st, tms, order, a.shape[0])


def triton_group_stats(
    x, groups, *, n_groups=None, normalize=True, dtype="float32", chunk_rows: int = 4096,
    input_precision: str | None = None,
) -> GroupStats:
    """Group statistics with the Triton segmented Gram kernel.

    Rows are sorted by group on the device, normalised (fp32) and cast to ``dtype`` ("float32",
    "bfloat16", "float16") in one pass (``prep_rows``), and cut into chunks of at most ``chunk_rows``
    rows of one group. One program per (chunk, upper-triangular d-tile) accumulates its tile of
    X^T X in fp32 with ``tl.dot``; the chunks of a group cut into several are added in fp32. The
    group sums and the sums of squared norms (``chunk_sums``), each text's mean cosine to its group
    (``text_means``) and the G x G products of the group sums are taken on the device; the host
    merges G-sized terms in float64.
    ``input_precision`` ("ieee", "tf32") applies to float32 inputs; the default is "ieee" (exact
    fp32 products, no tensor cores).
    """
    resolve_backend("triton", what="triton_group_stats")
    import torch

    from ._triton_homogeneity import chunk_sums, prep_rows, segmented_gram, text_means

    n_all = _check_x_shape(x, "triton_group_stats")[0]  # a CUDA tensor is used in place
    g, G = _check_groups(groups, n_all, n_groups, "triton_group_stats")
    tdt = _torch_dtype(dtype, "triton_group_stats")
    dev = torch_device()
    # Everything of size N stays on the device, and the host waits on it twice: for the group counts
    # (the chunk plan needs them) and for one copy of all results. Sorting, the per-row terms and
    # the scatter back had taken 4.6 ms at N = 100,000 on an H200 around a 0.09 ms Gram kernel: a
    # chain of ~90 torch launches with ~20 synchronisations (benchmarks/RESULTS.md, kernels-gpu).
    order, gid, counts_t, counts = _segments_torch(g, G, dev)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    starts, ends, cgroup = _chunk_plan(offsets, chunk_rows)
    per_group = np.bincount(cgroup, minlength=G)  # chunks of each group, in chunk order
    C = starts.size
    plan = torch.as_tensor(np.concatenate([starts, ends, cgroup, per_group]), device=dev)  # one copy over
    st_t, en_t, cg_t, pg_t = plan[:C], plan[C:2 * C], plan[2 * C:3 * C], plan[3 * C:]
    # rows gathered into group order, normalised in fp32 and cast in one pass; sq = ||row||^2 after
    # the cast (the vectors the Gram kernel reads); flag marks NaN/inf and all-zero rows
    xs, sq, flag = prep_rows(_device_tensor(x, dev), order, tdt, normalize)
    N, d = xs.shape
    # per group: the vector sum, sum of sq and of sq^2 (G, d + 2), each chunk's rows added in order,
    # then a group's chunks in order (deterministic)
    sums = torch.segment_reduce(chunk_sums(xs, sq, st_t, en_t), "sum", lengths=pg_t, axis=0, unsafe=True)
    frob = torch.zeros(G, dtype=torch.float64, device=dev)
    if C:
        prec = input_precision or ("ieee" if tdt == torch.float32 else "tf32")
        partial = segmented_gram(xs, st_t, en_t, input_precision=prec)
        if C > np.count_nonzero(per_group):  # a group cut into several chunks: add its partial Grams first
            partial = torch.segment_reduce(partial, "sum", lengths=pg_t, axis=0, unsafe=True)
            frob = torch.linalg.vector_norm(partial.flatten(1), dim=1, dtype=torch.float64).square()
        else:
            frob.index_copy_(0, cg_t, torch.linalg.vector_norm(partial.flatten(1), dim=1, dtype=torch.float64).square())
    tm = torch.full((n_all,), float("nan"), dtype=torch.float64, device=dev)
    text_means(xs, gid, sums, sq, counts_t, order, tm)
    worst = flag.amax().double().reshape(1) if N else torch.zeros(1, dtype=torch.float64, device=dev)
    dots = sums[:, :d] @ sums[:, :d].T  # G x G products of the group sums: fewer bytes back than the sums
    host = _to_host(torch.cat([worst, dots.flatten(), sums[:, d:].T.flatten(), frob, tm]))
    if host[0] > 0:
        _raise_bad_row(flag, order, int(host[0]), "triton_group_stats")
    k = 1 + G * G
    diag = host[k:k + 2 * G].reshape(2, G)
    st = _group_terms(counts, None, diag[0], diag[1], host[k + 2 * G:k + 3 * G], "triton",
                      dots=host[1:k].reshape(G, G))
    return GroupStats(n=st.n, n_pairs=st.n_pairs, sum=st.sum, sumsq=st.sumsq, text_mean=host[k + 3 * G:],
                      between=st.between, backend=st.backend)


def _to_host(t) -> np.ndarray:
    """A device tensor copied to a NumPy array, through page-locked memory on CUDA (torch caches
    those buffers, so repeated calls do not pay for pinning; the array keeps its buffer alive)."""
    import torch

    if t.device.type != "cuda":
        return t.numpy()
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t)
    return out.numpy()


def _chunk_plan(offsets: np.ndarray, chunk_rows: int):
    """(starts, ends, group) int64 arrays of the chunks: each group's rows cut into runs of at most
    ``chunk_rows``; empty groups have none."""
    offsets = np.asarray(offsets, dtype=np.int64)
    per_group = -(-np.diff(offsets) // chunk_rows)  # chunks of each group
    cgroup = np.repeat(np.arange(per_group.size, dtype=np.int64), per_group)
    within = np.arange(cgroup.size, dtype=np.int64) - np.repeat(np.cumsum(per_group) - per_group, per_group)
    starts = offsets[cgroup] + within * chunk_rows
    return starts, np.minimum(starts + chunk_rows, offsets[cgroup + 1]), cgroup


def _device_tensor(x, dev):
    """``x`` as a tensor on ``dev``: a tensor already there is used in place, anything else copied once."""
    import torch

    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    return t.to(dev)


def _raise_bad_row(flag, order, worst: int, what: str):
    """The DataError for the first row (in input order) that ``prep_rows`` flagged ``worst``."""
    i = int(order[flag == worst].min())  # order holds input row numbers
    if worst == 2:
        raise DataError(f"{what}: embedding row {i} has a NaN or infinite value")
    raise DataError(f"{what}: embedding row {i} is all zeros and has no direction; drop it")


def _segments_torch(g: np.ndarray, G: int, dev):
    """``_segments`` on the device: the stable order of the non-excluded rows by group, each sorted
    row's group id and the group counts (device tensors), and the counts as a NumPy array (the one
    synchronisation). Excluded rows (-1) sort last under the key G and are cut off."""
    import torch

    small = np.int16 if G < 1 << 15 else np.int32 if G < 1 << 31 else np.int64  # fewer bytes to copy over
    gt = torch.as_tensor(g.astype(small), device=dev)
    key = torch.where(gt >= 0, gt, G)
    ids, order = torch.sort(key, stable=True)
    counts_t = torch.bincount(key, minlength=G + 1)[:G]
    counts = counts_t.cpu().numpy().astype(np.int64)
    n = int(counts.sum())
    return order[:n], ids[:n], counts_t, counts


def _gram_frob2(a) -> float:
    """||A A^T||_F^2 from three blocks of the symmetric Gram, 3/4 of its products: with
    A = [A1; A2], the diagonal blocks A1 A1^T and A2 A2^T once and the off-diagonal A1 A2^T twice.

    BLAS SYRK (half the products) was tried here, through ``scipy.linalg.blas.ssyrk`` and NumPy's
    ``a.T @ a``: alone it beats these blocks, but inside ``torch_group_stats`` it made the whole path
    3-5x slower on 2 cores, because OpenBLAS's threads and torch's OpenMP threads, alternating call by
    call, contend for the cores (benchmarks/kernels_cpu.py, 2026-11-23). The same contention, from the
    small NumPy GEMVs of x_i . s, is why that loop holds NumPy's BLAS to one thread; a one-thread SYRK
    would do half the products on half the cores, no gain."""
    import torch

    def sq(t):  # the fp32 Gram's squares summed in fp64 (digest 5: tiles in fp32, merged in fp64): a float32 dot
        # over the k^2 entries lost 3e-7 of it, and the within-cell variance, a difference of two near-equal sums,
        # 0.1-0.25% (cosines near 0.8)
        return float(torch.sum(t.square(), dtype=torch.float64))

    k = a.shape[0]
    if k < 64:
        return sq(torch.mm(a, a.t()))
    m = k // 2
    return sq(torch.mm(a[:m], a[:m].t())) + 2.0 * sq(torch.mm(a[:m], a[m:].t())) + sq(torch.mm(a[m:], a[m:].t()))


# Rows whose norms are this close to 1 count as unit vectors and are used as given: a copy to
# normalise them again would change their cosines by no more than float32 rounding does, and costs a
# pass over the embeddings (about 5 of 65 ms at N = 52,000, d = 384 on 2 cores).
_UNIT_TOL = 1e-6


def torch_group_stats(x, groups, *, n_groups=None, normalize=True, chunk_rows: int = 1024) -> GroupStats:
    """The closed form with torch in float32 where ``x`` lives (the CPU cores for NumPy input),
    fused by chunks of whole groups: a chunk's rows (about ``chunk_rows``, so it stays in cache)
    are gathered and, unless they are unit vectors already, normalised into one reused scratch
    buffer, never a full-size copy of the embeddings, and each of its groups' norms, sum, Gram
    (three BLAS GEMM blocks) and x_i . s are taken from there; every total is merged in float64.
    The fast CPU path (compare with one GEMM of the same shape in ``benchmarks/kernels_cpu.py``);
    ``reference`` is the float64 oracle.
    """
    import torch

    n_all = _check_x_shape(x, "torch_group_stats")[0]
    g, G = _check_groups(groups, n_all, n_groups, "torch_group_stats")
    order, counts, offsets = _segments(g, G)
    t = (x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))).detach()
    dev, d = t.device, t.shape[1]
    grouped = order.size == n_all and bool((np.diff(order) > 0).all())  # rows already in group order
    order_t = None if grouped else torch.as_tensor(order, device=dev)
    # chunks of consecutive whole groups: [offsets[c0], offsets[c1])
    bounds, k = [0], 0
    while k < G:
        k2 = k + 1
        while k2 < G and offsets[k2 + 1] - offsets[k] <= chunk_rows:
            k2 += 1
        bounds.append(k2)
        k = k2
    rows_max = max((int(offsets[b] - offsets[a]) for a, b in zip(bounds[:-1], bounds[1:])), default=0)
    buf = torch.empty((rows_max, d), dtype=torch.float32, device=dev)
    sums = torch.zeros((G, d), dtype=torch.float32, device=dev)
    sq = torch.empty(order.size, dtype=torch.float32, device=dev)
    xs_dot_s = torch.empty(order.size, dtype=torch.float32, device=dev)
    frob = np.zeros(G)
    on_cpu = dev.type == "cpu"
    sums_np, dots_np = (sums.numpy(), xs_dot_s.numpy()) if on_cpu else (None, None)
    ones_np = np.ones(rows_max, np.float32)
    # NumPy's GEMVs below run on one BLAS thread: OpenBLAS's pool spinning against torch's OpenMP
    # threads between calls cost more than the Grams (numpy_blas_single_thread)
    with numpy_blas_single_thread() if on_cpu else contextlib.nullcontext():
        for c0, c1 in zip(bounds[:-1], bounds[1:]):
            a0, a1 = int(offsets[c0]), int(offsets[c1])
            if a1 == a0:
                continue
            src = t[a0:a1] if grouped else t.index_select(0, order_t[a0:a1])
            src = src if src.dtype == torch.float32 else src.to(torch.float32)
            nrm = torch.linalg.vector_norm(src, dim=1)
            bad = ~torch.isfinite(nrm) | (nrm == 0) if normalize else ~torch.isfinite(nrm)
            if bool(bad.any()):  # a NaN or infinity anywhere in a row reaches its norm
                r = int(torch.nonzero(bad)[0])
                i = int(order[a0 + r])
                if not bool(torch.isfinite(nrm[r])):
                    raise DataError(f"torch_group_stats: embedding row {i} has a NaN or infinite value")
                raise DataError(f"torch_group_stats: embedding row {i} is all zeros and has no direction; drop it")
            if normalize and float((nrm - 1.0).abs().max()) > _UNIT_TOL:
                xc = buf[: a1 - a0]
                torch.div(src, nrm.unsqueeze(1), out=xc)
                torch.linalg.vector_norm(xc, dim=1, out=sq[a0:a1])  # the vectors actually used
            else:  # the rows as given: unit already (within float32 rounding), or normalize=False
                xc = src if src.is_contiguous() else src.contiguous()
                sq[a0:a1] = nrm
            sq[a0:a1].square_()
            for k in range(c0, c1):
                a, b = int(offsets[k]) - a0, int(offsets[k + 1]) - a0
                if b == a:
                    continue
                xg = xc[a:b]
                frob[k] = _gram_frob2(xg if (b - a) < d else xg.t())  # X X^T or X^T X: same norm
                if on_cpu:  # NumPy on the same memory: torch's threaded GEMVs here cost more than the Grams
                    xn = xg.numpy()
                    np.matmul(ones_np[: b - a], xn, out=sums_np[k])
                    np.matmul(xn, sums_np[k], out=dots_np[a0 + a:a0 + b])
                else:
                    torch.sum(xg, 0, out=sums[k])
                    torch.mv(xg, sums[k], out=xs_dot_s[a0 + a:a0 + b])
    sq64 = sq.double().cpu().numpy()
    sq4 = np.bincount(np.repeat(np.arange(G), counts), weights=sq64 * sq64, minlength=G)
    tms, st = _assemble(counts, sums.double().cpu().numpy(), sq64, sq4, frob, xs_dot_s.double().cpu().numpy(),
                        "torch")
    return _finish(st, tms, order, n_all)


def group_stats(x, groups, *, n_groups=None, normalize=True, backend="auto", **kw) -> GroupStats:
    """Dispatch group statistics to ``backend`` in {"numpy", "torch", "triton", "cupy", "auto"}.

    ``"auto"``: Triton on a CUDA device, then CuPy, else the torch path on the CPU cores.
    """
    b = resolve_backend(backend, what="group_stats")
    if b == "triton":
        return triton_group_stats(x, groups, n_groups=n_groups, normalize=normalize, **kw)
    if b == "cupy":
        return cupy_group_stats(x, groups, n_groups=n_groups, normalize=normalize)
    if b == "torch" or backend == "auto":
        return torch_group_stats(x, groups, n_groups=n_groups, normalize=normalize)
    return reference(x, groups, n_groups=n_groups, normalize=normalize)


def _torch_dtype(dtype, what):
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if isinstance(dtype, torch.dtype) and dtype in table.values():
        return dtype
    if dtype not in table:
        raise ConfigError(f"{what}: dtype must be one of {', '.join(table)}, got {dtype!r}")
    return table[dtype]


def _prep_torch(x, order, normalize, tdt, dev, what):
    """Rows sorted by group on the kernel device, normalised in fp32, cast to ``tdt``."""
    import torch

    t = _device_tensor(x, dev)[torch.as_tensor(order, device=dev)].to(torch.float32)  # order: NumPy or on the device
    if not torch.isfinite(t).all():
        raise DataError(f"{what}: an embedding row has a NaN or infinite value")
    if normalize:
        nrm = t.norm(dim=1, keepdim=True)
        if (nrm == 0).any():
            raise DataError(f"{what}: an embedding row is all zeros and has no direction; drop it")
        t = t / nrm
    return t.to(tdt).contiguous()


# ============================================================================ pair statistics


def _bin_edges(n_bins: int) -> np.ndarray:
    return np.linspace(-1.0, 1.0, n_bins + 1)


def _check_pair_args(n_bins, top_k, what):
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ConfigError(f"{what}: n_bins must be a positive integer, got {n_bins!r}")
    if not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise ConfigError(f"{what}: top_k must be a non-negative integer, got {top_k!r}")


def _bins_xp(xp, c, n_bins):
    """Bin index of cosines: clip(floor((c + 1) * n_bins / 2), 0, n_bins - 1)."""
    return xp.clip(xp.floor((c + 1) * (n_bins * 0.5)), 0, n_bins - 1).astype(xp.int64)


def _pair_blocks_xp(xp, xs, counts, offsets, G, n_bins, top_k, explicit_max_n, block_rows, fdt):
    """Row-block sweep over each group's upper triangle on namespace ``xp`` (reference / CuPy).

    Memory per step is block_rows x n; the full N x N matrix never exists.
    """
    to_np = (lambda v: v.get()) if xp is not np else (lambda v: v)
    hist = np.zeros((G, n_bins), dtype=np.int64)
    top_v = np.full((G, top_k), np.nan)
    top_p = np.full((G, top_k, 2), -1, dtype=np.int64)
    bot_v = np.full((G, top_k), np.nan)
    bot_p = np.full((G, top_k, 2), -1, dtype=np.int64)
    ssum, sumsq = np.zeros(G), np.zeros(G)
    row_sum = np.zeros(xs.shape[0])
    pairs = []
    for g in range(G):
        a, b = int(offsets[g]), int(offsets[g + 1])
        n = b - a
        Xg = xs[a:b]
        cand_v, cand_i, cand_j, chunks = [], [], [], []
        rs = xp.zeros(n, dtype=xp.float64)
        for r0 in range(0, max(n - 1, 0), block_rows):
            r1 = min(r0 + block_rows, n - 1)
            C = (Xg[r0:r1] @ Xg[r0 + 1 :].T).astype(fdt)  # rows r0..r1-1 against columns r0+1..n-1
            ii = xp.arange(r0, r1)[:, None]
            jj = xp.arange(r0 + 1, n)[None, :]
            mask = jj > ii
            vals = C[xp.broadcast_to(mask, C.shape)]
            iv = xp.broadcast_to(ii, C.shape)[mask]
            jv = xp.broadcast_to(jj, C.shape)[mask]
            Cm = xp.where(mask, C, 0).astype(xp.float64)
            rs[r0:r1] += Cm.sum(1)
            rs[r0 + 1 :] += Cm.sum(0)
            hist[g] += to_np(xp.bincount(_bins_xp(xp, vals, n_bins), minlength=n_bins))
            v64 = vals.astype(xp.float64)
            ssum[g] += float(v64.sum())
            sumsq[g] += float((v64 * v64).sum())
            if n <= explicit_max_n:
                chunks.append(to_np(vals))
            if top_k and vals.size:
                k = min(top_k, int(vals.size))
                for sel in (xp.argpartition(-vals, k - 1)[:k], xp.argpartition(vals, k - 1)[:k]):
                    cand_v.append(to_np(vals[sel]))
                    cand_i.append(to_np(iv[sel]))
                    cand_j.append(to_np(jv[sel]))
        row_sum[a:b] = to_np(rs)
        pairs.append(np.concatenate(chunks).astype(np.float64) if n <= explicit_max_n and chunks else
                     (np.zeros(0) if n <= explicit_max_n else None))
        if top_k and cand_v:
            v = np.concatenate(cand_v).astype(np.float64)
            i = np.concatenate(cand_i) + a
            j = np.concatenate(cand_j) + a
            # de-duplicate (a pair can be both a top and a bottom candidate)
            key = i * xs.shape[0] + j
            _, uniq = np.unique(key, return_index=True)
            v, i, j = v[uniq], i[uniq], j[uniq]
            k = min(top_k, v.size)
            hi = np.lexsort((j, i, -v))[:k]
            lo = np.lexsort((j, i, v))[:k]
            top_v[g, :k], top_p[g, :k, 0], top_p[g, :k, 1] = v[hi], i[hi], j[hi]
            bot_v[g, :k], bot_p[g, :k, 0], bot_p[g, :k, 1] = v[lo], i[lo], j[lo]
    return hist, top_v, top_p, bot_v, bot_p, pairs, ssum, sumsq, row_sum


def _pair_result(parts, order, offsets, counts, N, n_bins, backend) -> PairStats:
    hist, top_v, top_p, bot_v, bot_p, pairs, ssum, sumsq, row_sum_sorted = parts
    # sorted positions -> original row indices
    top_p = np.where(top_p >= 0, order[np.maximum(top_p, 0)], -1)
    bot_p = np.where(bot_p >= 0, order[np.maximum(bot_p, 0)], -1)
    rs = np.full(N, np.nan)
    rs[order] = row_sum_sorted
    members = tuple(order[offsets[k] : offsets[k + 1]] for k in range(len(counts)))
    return PairStats(
        bin_edges=_bin_edges(n_bins), hist=hist, top_values=top_v, top_pairs=top_p,
        bottom_values=bot_v, bottom_pairs=bot_p, pairs=tuple(pairs), sum=ssum, sumsq=sumsq,
        row_sum=rs, members=members, backend=backend,
    )


def pair_reference(
    x, groups, *, n_groups=None, normalize=True, n_bins: int = 2048, top_k: int = 5,
    explicit_max_n: int = 1000, block_rows: int = 1024,
) -> PairStats:
    """Pair-level statistics in NumPy float64, one block of rows at a time (the oracle)."""
    _check_pair_args(n_bins, top_k, "pair_reference")
    a = _check_x(x, "pair_reference")
    g, G = _check_groups(groups, a.shape[0], n_groups, "pair_reference")
    xs = _normalize_np(a, "pair_reference") if normalize else a.astype(np.float64)
    order, counts, offsets = _segments(g, G)
    parts = _pair_blocks_xp(np, xs[order], counts, offsets, G, n_bins, top_k, explicit_max_n, block_rows, np.float64)
    return _pair_result(parts, order, offsets, counts, a.shape[0], n_bins, "numpy")


def _pair_stats_xp(xp, x, groups, *, n_groups=None, normalize=True, n_bins=2048, top_k=5,
                   explicit_max_n=1000, block_rows=4096) -> PairStats:
    """The CuPy pair path against an array namespace (float32 GEMMs, fp64 reductions)."""
    _check_pair_args(n_bins, top_k, "cupy_pair_stats")
    a, order, counts, offsets, G, xs = _prep_xp(xp, x, groups, n_groups, normalize, "cupy_pair_stats")
    parts = _pair_blocks_xp(xp, xs, counts, offsets, G, n_bins, top_k, explicit_max_n, block_rows, xp.float32)
    return _pair_result(parts, order, offsets, counts, a.shape[0], n_bins, "cupy" if xp is not np else "numpy-f32")


def cupy_pair_stats(x, groups, **kw) -> PairStats:
    """Pair-level statistics on CuPy: cuBLAS row-block GEMMs, device bincount and argpartition."""
    resolve_backend("cupy", what="cupy_pair_stats")
    import cupy

    return _pair_stats_xp(cupy, x, groups, **kw)


def pair_tile_plan(counts: np.ndarray, block: int, explicit_max_n: int) -> dict[str, Any]:
    """The pair kernel's work list: tiles (group, bi, bj), bi <= bj, over each group's row blocks of
    ``block`` rows, and the offsets of the explicit pair values of groups of at most ``explicit_max_n``."""
    G = counts.size
    tg, tbi, tbj = [], [], []
    for k in range(G):
        if counts[k] < 2:
            continue
        bi, bj = np.triu_indices(-(-int(counts[k]) // block))
        tg.append(np.full(bi.size, k))
        tbi.append(bi)
        tbj.append(bj)
    pair_off = np.full(G, -1, dtype=np.int64)
    n_pairs = counts * (counts - 1) // 2
    small = np.flatnonzero((counts <= explicit_max_n) & (n_pairs > 0))
    pair_off[small] = np.concatenate([[0], np.cumsum(n_pairs[small])])[:-1]
    empty = np.zeros(0, np.int64)
    return {"tile_group": np.concatenate(tg) if tg else empty, "tile_bi": np.concatenate(tbi) if tbi else empty,
            "tile_bj": np.concatenate(tbj) if tbj else empty, "pair_off": pair_off,
            "total_pairs": int(n_pairs[small].sum())}


def triton_pair_stats(
    x, groups, *, n_groups=None, normalize=True, n_bins: int = 2048, top_k: int = 5,
    explicit_max_n: int = 1000, dtype="float32", block: int = 128, block_k: int = 64,
    input_precision: str | None = None, hist_mode: str | None = None,
) -> PairStats:
    """Pair-level statistics with a fused, tiled Triton kernel (no N x N matrix).

    One program per (group, row-block, column-block) tile of the group's upper triangle:
    ``tl.dot`` over d, then in the epilogue the tile is reduced into the group histogram
    (``tl.histogram`` + one atomic per bin, or per-element atomics with ``hist_mode="atomic"``;
    the default is "tl" when ``n_bins`` is a power of two), the tile's sum and sum of squares,
    per-text row sums, ``top_k`` largest and smallest candidates, and, for groups of at most
    ``explicit_max_n`` texts, the pair values themselves. Candidates are merged on the host.
    """
    resolve_backend("triton", what="triton_pair_stats")
    _check_pair_args(n_bins, top_k, "triton_pair_stats")
    import torch

    from ._triton_homogeneity import pair_tiles

    n_all = _check_x_shape(x, "triton_pair_stats")[0]  # a CUDA tensor is used in place
    g, G = _check_groups(groups, n_all, n_groups, "triton_pair_stats")
    tdt = _torch_dtype(dtype, "triton_pair_stats")
    if hist_mode is None:
        hist_mode = "tl" if n_bins & (n_bins - 1) == 0 else "atomic"
    if hist_mode not in ("tl", "atomic"):
        raise ConfigError(f"triton_pair_stats: hist_mode must be 'tl' or 'atomic', got {hist_mode!r}")
    order, counts, offsets = _segments(g, G)
    dev = torch_device()
    xs = _prep_torch(x, order, normalize, tdt, dev, "triton_pair_stats")
    plan = pair_tile_plan(counts, block, explicit_max_n)
    pair_off, n_pairs = plan["pair_off"], counts * (counts - 1) // 2
    prec = input_precision or ("ieee" if tdt == torch.float32 else "tf32")
    out = pair_tiles(xs, offsets=offsets, counts=counts, n_groups=G, n_bins=n_bins, top_k=top_k, block=block,
                     block_k=block_k, input_precision=prec, hist_mode=hist_mode, **plan)
    tile_g = out["tile_group"]
    ssum = np.bincount(tile_g, weights=out["tile_sum"], minlength=G).astype(np.float64)
    sumsq = np.bincount(tile_g, weights=out["tile_sumsq"], minlength=G).astype(np.float64)
    top_v = np.full((G, top_k), np.nan)
    top_p = np.full((G, top_k, 2), -1, dtype=np.int64)
    bot_v = np.full((G, top_k), np.nan)
    bot_p = np.full((G, top_k, 2), -1, dtype=np.int64)
    if top_k and tile_g.size:
        for vals, (ci, cj), dst_v, dst_p, sign in (
            (out["top_val"], out["top_ij"], top_v, top_p, -1.0),
            (out["bot_val"], out["bot_ij"], bot_v, bot_p, 1.0),
        ):
            cg = np.repeat(tile_g, top_k)
            v, ci, cj = vals.reshape(-1).astype(np.float64), ci.reshape(-1), cj.reshape(-1)
            ok = np.isfinite(v)
            cg, v, ci, cj = cg[ok], v[ok], ci[ok], cj[ok]
            o = np.lexsort((cj, ci, sign * v, cg))
            cg, v, ci, cj = cg[o], v[o], ci[o], cj[o]
            first = np.searchsorted(cg, np.arange(G))
            rank = np.arange(cg.size) - first[cg]
            sel = rank < top_k
            dst_v[cg[sel], rank[sel]] = v[sel]
            dst_p[cg[sel], rank[sel], 0] = ci[sel]
            dst_p[cg[sel], rank[sel], 1] = cj[sel]
    pv = out["pairs"].astype(np.float64)
    pairs = [pv[pair_off[k] : pair_off[k] + n_pairs[k]] if pair_off[k] >= 0 else
             (np.zeros(0) if counts[k] <= explicit_max_n else None) for k in range(G)]
    parts = (out["hist"].astype(np.int64), top_v, top_p, bot_v, bot_p, pairs, ssum, sumsq,
             out["row_sum"].astype(np.float64))
    return _pair_result(parts, order, offsets, counts, n_all, n_bins, "triton")


def pair_stats(x, groups, *, backend="auto", **kw) -> PairStats:
    """Dispatch pair-level statistics to ``backend`` in {"numpy", "torch", "triton", "cupy", "auto"}
    ("torch" has no pair path of its own: it runs the NumPy one)."""
    b = resolve_backend(backend, what="pair_stats")
    if b == "triton":
        return triton_pair_stats(x, groups, **kw)
    if b == "cupy":
        return cupy_pair_stats(x, groups, **kw)
    return pair_reference(x, groups, **kw)


# ============================================================================ replicates


def _check_weights(weights, m, what):
    w = _to_numpy(weights)
    if w.ndim != 2 or w.shape[1] != m:
        raise DataError(f"{what}: weights must be (B, {m}) for a pool of {m} texts, got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise DataError(f"{what}: weights must be finite and non-negative")
    return w


def _replicate_xp(xp, xs, w, fdt):
    """sum_{i<j} w_i w_j f(c_ij) = (w^T F w - sum_i w_i^2 F_ii) / 2 for F = C and C o C (one GEMM)."""
    to_np = (lambda v: v.get()) if xp is not np else (lambda v: v)
    C = (xs @ xs.T).astype(fdt)
    W = xp.asarray(w, dtype=fdt)
    m = C.shape[0]
    WF = W @ xp.concatenate([C, C * C], axis=1)  # (B, 2m): the GEMM
    W64 = W.astype(xp.float64)
    wCw = (WF[:, :m].astype(xp.float64) * W64).sum(1)
    wQw = (WF[:, m:].astype(xp.float64) * W64).sum(1)
    dC = xp.diagonal(C).astype(xp.float64)
    W2 = W64 * W64
    tot = W64.sum(1)
    return (to_np(tot), to_np((tot * tot - W2.sum(1)) / 2), to_np((wCw - W2 @ dC) / 2),
            to_np((wQw - W2 @ (dC * dC)) / 2))


def replicate_reference(x, weights, *, normalize=True) -> ReplicateStats:
    """Weighted pair statistics of B replicate weightings of a pool (NumPy float64)."""
    a = _check_x(x, "replicate_reference")
    w = _check_weights(weights, a.shape[0], "replicate_reference")
    xs = _normalize_np(a, "replicate_reference") if normalize else a.astype(np.float64)
    return ReplicateStats(*_replicate_xp(np, xs, w, np.float64), backend="numpy")


def _replicate_stats_xp(xp, x, weights, *, normalize=True) -> ReplicateStats:
    a = _check_x(x, "cupy_replicate_stats")
    w = _check_weights(weights, a.shape[0], "cupy_replicate_stats")
    xs = xp.asarray(a, dtype=xp.float32)
    if normalize:
        xs = xs / xp.sqrt((xs * xs).sum(1, keepdims=True))
    return ReplicateStats(*_replicate_xp(xp, xs, w, xp.float32), backend="cupy" if xp is not np else "numpy-f32")


def cupy_replicate_stats(x, weights, *, normalize=True) -> ReplicateStats:
    """Replicates on CuPy: the pool's cosine matrix, then one cuBLAS GEMM W [C | C o C]."""
    resolve_backend("cupy", what="cupy_replicate_stats")
    import cupy

    return _replicate_stats_xp(cupy, x, weights, normalize=normalize)


def triton_replicate_stats(
    x, weights, *, normalize=True, dtype="float32", input_precision: str | None = None,
) -> ReplicateStats:
    """Replicates with a fused Triton GEMM: W C and W (C o C) share each loaded tile of C and
    are reduced against W in the epilogue, so neither C o C nor the (B, m) products exist.

    The pool's cosine matrix C (m x m, fp32) is formed once with torch.
    """
    resolve_backend("triton", what="triton_replicate_stats")
    import torch

    from ._triton_homogeneity import fused_replicates

    a = _check_x(x, "triton_replicate_stats")
    w = _check_weights(weights, a.shape[0], "triton_replicate_stats")
    tdt = _torch_dtype(dtype, "triton_replicate_stats")
    dev = torch_device()
    xs = _prep_torch(x, np.arange(a.shape[0]), normalize, torch.float32, dev, "triton_replicate_stats")
    C = xs @ xs.T
    W = torch.as_tensor(w, dtype=torch.float32, device=dev)
    prec = input_precision or ("ieee" if tdt == torch.float32 else "tf32")
    wCw, wQw = fused_replicates(W.to(tdt).contiguous(), C.to(tdt).contiguous(), input_precision=prec)
    W64 = W.to(torch.float64)
    dC = torch.diagonal(C.to(tdt).to(torch.float64))
    W2 = W64 * W64
    tot = W64.sum(1)
    res = (tot, (tot * tot - W2.sum(1)) / 2, (wCw - W2 @ dC) / 2, (wQw - W2 @ (dC * dC)) / 2)
    return ReplicateStats(*(r.cpu().numpy() for r in res), backend="triton")


def replicate_stats(x, weights, *, normalize=True, backend="auto", **kw) -> ReplicateStats:
    """Dispatch replicate statistics to ``backend`` in {"numpy", "torch", "triton", "cupy", "auto"}
    ("torch" has no replicate path of its own: it runs the NumPy one)."""
    b = resolve_backend(backend, what="replicate_stats")
    if b == "triton":
        return triton_replicate_stats(x, weights, normalize=normalize, **kw)
    if b == "cupy":
        return cupy_replicate_stats(x, weights, normalize=normalize)
    return replicate_reference(x, weights, normalize=normalize)


@dataclass(frozen=True)
class GroupReplicates(_PairMoments):
    """Replicates (B, G) of each group's weighted pair statistics (see ``ReplicateStats``)."""

    kind: str
    n_pairs: np.ndarray
    sum: np.ndarray
    sumsq: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "n_pairs": self.n_pairs.tolist(), "sum": self.sum.tolist(),
                "sumsq": self.sumsq.tolist()}


def group_replicates(
    x, groups, *, kind: str = "bootstrap", n_rep: int = 1000, seed: int = 0, strata=None,
    n_groups=None, backend="auto", **kw,
) -> GroupReplicates:
    """Text-level bootstrap or permutation replicates of every group's pair statistics.

    ``kind="bootstrap"``: each text of group g gets a Poisson(1) multiplicity, hashed from
    (seed, replicate, row index) with the sweep's lowbias32 generator (replicate 1..n_rep),
    so every backend sees the same weights. ``kind="permutation"``: group labels are permuted
    within each stratum (``strata``: (N,) ids, e.g. the text format; default one stratum) with
    ``numpy.random.default_rng(seed)``; all groups of a stratum share one GEMM.
    """
    from .sweep import story_weights

    a = _check_x(x, "group_replicates")
    g, G = _check_groups(groups, a.shape[0], n_groups, "group_replicates")
    if kind not in ("bootstrap", "permutation"):
        raise ConfigError(f"group_replicates: kind must be 'bootstrap' or 'permutation', got {kind!r}")
    if not isinstance(n_rep, (int, np.integer)) or n_rep < 1:
        raise ConfigError(f"group_replicates: n_rep must be a positive integer, got {n_rep!r}")
    npairs, ssum, ssq = (np.zeros((n_rep, G)) for _ in range(3))
    if kind == "bootstrap":
        for k in range(G):
            idx = np.flatnonzero(g == k)
            if idx.size < 2:
                continue
            w = story_weights(seed, np.arange(1, n_rep + 1), idx).astype(np.float32)
            r = replicate_stats(a[idx], w, backend=backend, **kw)
            npairs[:, k], ssum[:, k], ssq[:, k] = r.n_pairs, r.sum, r.sumsq
        return GroupReplicates(kind, npairs, ssum, ssq)
    s = np.zeros(a.shape[0], dtype=np.int64) if strata is None else _to_numpy(strata).astype(np.int64)
    if s.shape != g.shape:
        raise DataError(f"group_replicates: strata must have shape {g.shape}, got {s.shape}")
    rng = np.random.default_rng(seed)
    for st in np.unique(s[g >= 0]):
        idx = np.flatnonzero((s == st) & (g >= 0))
        labels = g[idx]
        perm = np.stack([labels[rng.permutation(idx.size)] for _ in range(n_rep)])  # (B, m)
        present = np.unique(labels)
        W = (perm[:, None, :] == present[None, :, None]).reshape(n_rep * present.size, idx.size)
        r = replicate_stats(a[idx], W.astype(np.float32), backend=backend, **kw)
        shape = (n_rep, present.size)
        npairs[:, present] += r.n_pairs.reshape(shape)  # pairs never cross strata
        ssum[:, present] += r.sum.reshape(shape)
        ssq[:, present] += r.sumsq.reshape(shape)
    return GroupReplicates(kind, npairs, ssum, ssq)
