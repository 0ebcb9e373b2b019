"""R_mrs threshold sweep with a Poisson story bootstrap: counts above every threshold.

The contract of ``harness.stats.sweep`` (whose ``SweepCounts`` and input checks this module uses):
``sweep_counts(likelihood, role, group, story, thresholds, *, n_groups, n_boot, seed, backend)``
returns ``SweepCounts(above (B+1, G, R, T, 2), totals (B+1, G, 2))`` as int64, replicate 0 being
the observed data and replicates 1..B weighting each story by a Poisson(1) draw that is a pure
function of (seed, replicate, story) (lowbias32 hash, integer inverse-CDF).

How the kernels avoid a loop over thresholds: a character is above integer threshold ``t``
iff ``100 * p > t`` iff ``u > t`` with ``u = ceil(100 * p)`` in 0..100. So each (character,
race) falls in one bucket ``u``; the weighted histogram over (replicate, group, race, bucket,
role) followed by a suffix sum over buckets answers every threshold at once. The kernels only
build that histogram; weights are generated inside the kernel from (seed, replicate, story).

Backends: ``reference`` (plain NumPy, loops over replicates, the oracle), ``numpy_sweep_counts``
(vectorised histogram formulation on the CPU), ``triton_sweep_counts`` (Triton kernel; CUDA or
``TRITON_INTERPRET=1``), ``cupy_sweep_counts`` (the vectorised formulation on CuPy arrays).
"""

from __future__ import annotations

import numpy as np

from harness.errors import ConfigError, DataError
from harness.stats.sweep import PERCENT_DECIMALS, SweepCounts, percent_bucket, validate_inputs as _validate

from ._common import resolve_backend, torch_device

N_BUCKETS = 101  # u = ceil(100 * p) in 0..100
M32 = 0xFFFFFFFF

#: floor(P(Poisson(1) <= k) * 2**32) for k = 0..15, clipped to 2**32 - 1 (computed with 60-digit
#: decimals; tests recompute it). A draw is the number of k with h >= POISSON1_CDF_U32[k].
POISSON1_CDF_U32 = np.array(
    [
        1580030168, 3160060337, 3950075421, 4213413783, 4279248373, 4292415291, 4294609777,
        4294923276, 4294962463, 4294966817, 4294967252, 4294967292, 4294967295, 4294967295,
        4294967295, 4294967295,
    ],
    dtype=np.uint32,
)


# ----------------------------------------------------------------------------- hashing (NumPy)


def mix32(x, xp=np):
    """lowbias32 (C. Wellons) on uint32 arrays of namespace ``xp`` (numpy or cupy), mod 2**32."""
    x = xp.asarray(x, dtype=xp.uint32)
    x = x ^ (x >> xp.uint32(16))
    x = x * xp.uint32(0x7FEB352D)
    x = x ^ (x >> xp.uint32(15))
    x = x * xp.uint32(0x846CA68B)
    x = x ^ (x >> xp.uint32(16))
    return x


def story_weights(seed: int, replicates, stories, xp=np):
    """Poisson(1) weights (len(replicates), len(stories)) as int64; replicate 0 gets weight 1."""
    reps = xp.asarray(replicates, dtype=xp.int64)
    st = xp.asarray(stories, dtype=xp.int64).astype(xp.uint32)
    seed_h = mix32(xp.asarray([int(seed) & M32], dtype=xp.uint32), xp)
    h1 = mix32(seed_h ^ reps.astype(xp.uint32), xp)
    h = mix32(h1[:, None] ^ st[None, :], xp)
    cdf = xp.asarray(POISSON1_CDF_U32)
    w = xp.zeros(h.shape, dtype=xp.int64)
    for k in range(len(POISSON1_CDF_U32)):
        w += (h >= cdf[k]).astype(xp.int64)
    return xp.where(reps[:, None] == 0, xp.int64(1), w)


def buckets(likelihood: np.ndarray) -> np.ndarray:
    """Bucket u = ceil(100 * p) (int16, -1 for NaN) as the reference forms it (``percent_bucket``): every backend
    puts an exact percentage such as p = 0.07 or 0.6 at its own threshold, not above it."""
    return percent_bucket(likelihood)


# ----------------------------------------------------------------------------- reference


def reference(likelihood, role, group, story, thresholds=None, *, n_groups, n_boot=0, seed=0):
    """Plain NumPy sweep (the oracle): one pass per replicate, thresholds compared directly."""
    if thresholds is None:
        thresholds = np.arange(1, 100, dtype=np.int32)
    lik, rl, g, s, thr, G, B, seed = _validate(likelihood, role, group, story, thresholds, n_groups, n_boot, seed)
    n, R = lik.shape
    above = np.zeros((B + 1, G, R, thr.size, 2), dtype=np.int64)
    totals = np.zeros((B + 1, G, 2), dtype=np.int64)
    with np.errstate(invalid="ignore"):
        pct = np.round(100.0 * lik.astype(np.float64), PERCENT_DECIMALS)  # the percentage the contract compares
        hit = pct[:, :, None] > thr[None, None, :]  # (n, R, T); NaN compares False
    keep = g >= 0
    for b in range(B + 1):
        w = story_weights(seed, [b], s)[0]
        for gi in range(G):
            for k in (0, 1):
                m = keep & (g == gi) & (rl == k)
                totals[b, gi, k] = w[m].sum()
                above[b, gi, :, :, k] = np.einsum("n,nrt->rt", w[m], hit[m].astype(np.int64))
    return SweepCounts(above=above, totals=totals)


# ----------------------------------------------------------------------------- shared host side


def _items(lik, rl, g, s, G):
    """(key, story) of every (character, race) with a likelihood, plus one totals item per character.

    Key layout of the flat histogram: ((g * R + r) * 101 + u) * 2 + role for likelihood items,
    then G * R * 202 + g * 2 + role for the totals. Items come back sorted by key (stable), so
    each key is one run.
    """
    n, R = lik.shape
    u = buckets(lik)
    keep = g >= 0
    ci, ri = np.nonzero(keep[:, None] & (u >= 0))
    keys = ((g[ci].astype(np.int64) * R + ri) * N_BUCKETS + u[ci, ri]) * 2 + rl[ci]
    tc = np.flatnonzero(keep)
    tkeys = G * R * N_BUCKETS * 2 + g[tc].astype(np.int64) * 2 + rl[tc]
    key = np.concatenate([keys, tkeys])
    sto = np.concatenate([s[ci], s[tc]])
    order = np.lexsort((sto, key))
    return key[order], sto[order], G * R * N_BUCKETS * 2 + 2 * G


def _hist_to_counts(hist: np.ndarray, G: int, R: int, thr: np.ndarray):
    """Flat (B+1, K) histogram -> (above, totals) via a suffix sum over the 101 buckets."""
    B1 = hist.shape[0]
    h = hist[:, : G * R * N_BUCKETS * 2].reshape(B1, G, R, N_BUCKETS, 2)
    suffix = np.zeros((B1, G, R, N_BUCKETS + 1, 2), dtype=np.int64)
    suffix[:, :, :, :N_BUCKETS] = np.cumsum(h[:, :, :, ::-1], axis=3)[:, :, :, ::-1]
    idx = np.clip(thr + 1, 0, N_BUCKETS)  # above t  <=>  u >= t + 1
    above = np.ascontiguousarray(suffix[:, :, :, idx, :])
    totals = np.ascontiguousarray(hist[:, G * R * N_BUCKETS * 2 :].reshape(B1, G, 2))
    return above, totals


def _xp_hist(xp, key, sto, K, B, seed, chunk_elems=1 << 25):
    """Weighted histogram (B+1, K) with namespace ``xp``: per-run sums of a cumulative sum.

    Items are sorted by key; a run's weighted count is the difference of the running sum at
    its last item and at the previous run's last item. Exact integer arithmetic throughout.
    """
    hist = xp.zeros((B + 1, K), dtype=xp.int64)
    if key.size == 0:
        return hist
    ends = xp.nonzero(xp.concatenate([key[1:] != key[:-1], xp.asarray([True])]))[0]
    run_keys = key[ends]
    ustory, inv = xp.unique(sto, return_inverse=True)
    step = max(1, chunk_elems // max(int(key.size), 1))
    for b0 in range(0, B + 1, step):
        reps = xp.arange(b0, min(B + 1, b0 + step), dtype=xp.int64)
        w = story_weights(seed, reps, ustory, xp)[:, inv.reshape(-1)]
        cs = xp.cumsum(w, axis=1)[:, ends]
        sums = cs - xp.concatenate([xp.zeros((cs.shape[0], 1), dtype=xp.int64), cs[:, :-1]], axis=1)
        hist[b0 : b0 + reps.size, run_keys] = sums
    return hist


def numpy_sweep_counts(likelihood, role, group, story, thresholds=None, *, n_groups, n_boot=0, seed=0):
    """Vectorised CPU sweep through the bucket histogram (same counts as ``reference``)."""
    if thresholds is None:
        thresholds = np.arange(1, 100, dtype=np.int32)
    lik, rl, g, s, thr, G, B, seed = _validate(likelihood, role, group, story, thresholds, n_groups, n_boot, seed)
    key, sto, K = _items(lik, rl, g, s, G)
    hist = _xp_hist(np, key, sto, K, B, seed)
    return SweepCounts(*_hist_to_counts(hist, G, lik.shape[1], thr))


def cupy_sweep_counts(likelihood, role, group, story, thresholds=None, *, n_groups, n_boot=0, seed=0):
    """The histogram sweep on CuPy arrays (weights hashed on the GPU from seed, replicate, story).

    Host side: validation and the sorted (key, story) items; device side: hashing, the
    cumulative sums and the per-run differences for every replicate, in chunks of replicates.
    """
    resolve_backend("cupy", what="cupy_sweep_counts")
    import cupy

    if thresholds is None:
        thresholds = np.arange(1, 100, dtype=np.int32)
    lik, rl, g, s, thr, G, B, seed = _validate(likelihood, role, group, story, thresholds, n_groups, n_boot, seed)
    key, sto, K = _items(lik, rl, g, s, G)
    hist = _xp_hist(cupy, cupy.asarray(key), cupy.asarray(sto), K, B, seed)
    return SweepCounts(*_hist_to_counts(cupy.asnumpy(hist), G, lik.shape[1], thr))


def triton_sweep_counts(
    likelihood, role, group, story, thresholds=None, *, n_groups, n_boot=0, seed=0,
    block_rep: int = 16, block_items: int = 1024,
):
    """Triton sweep: one program per (block of replicates, block of sorted items).

    The kernel hashes (seed, replicate, story) into Poisson(1) weights, takes a running sum
    along the key-sorted items and adds only run totals to the int32 histogram with atomics
    (two atomics per run boundary, never one per item). Integer atomics commute, so counts do
    not depend on the launch configuration.
    """
    resolve_backend("triton", what="triton_sweep_counts")
    import torch

    from ._triton_sweep import launch_sweep_hist

    if thresholds is None:
        thresholds = np.arange(1, 100, dtype=np.int32)
    lik, rl, g, s, thr, G, B, seed = _validate(likelihood, role, group, story, thresholds, n_groups, n_boot, seed)
    if 16 * lik.shape[0] >= 2**31:
        raise DataError(f"triton_sweep_counts: {lik.shape[0]} characters overflow the int32 histogram; split the input")
    key, sto, K = _items(lik, rl, g, s, G)
    dev = torch_device()
    seed_h = int(mix32(np.asarray([seed & M32], dtype=np.uint32))[0])
    hist = launch_sweep_hist(
        torch.as_tensor(key, device=dev), torch.as_tensor(sto, device=dev), K, B, seed_h,
        torch.as_tensor(POISSON1_CDF_U32.astype(np.int64), device=dev),
        block_rep=block_rep, block_items=block_items,
    )
    # suffix sums on the device: only the (B+1, G, R, T, 2) counts cross to the host
    R = lik.shape[1]
    h = hist.to(torch.int64)
    B1 = h.shape[0]
    suffix = h[:, : G * R * N_BUCKETS * 2].reshape(B1, G, R, N_BUCKETS, 2).flip(3).cumsum(3).flip(3)
    suffix = torch.cat([suffix, torch.zeros((B1, G, R, 1, 2), dtype=torch.int64, device=dev)], dim=3)
    idx = torch.as_tensor(np.clip(thr + 1, 0, N_BUCKETS), device=dev)  # above t  <=>  u >= t + 1
    above = suffix.index_select(3, idx).cpu().numpy()
    totals = h[:, G * R * N_BUCKETS * 2 :].reshape(B1, G, 2).cpu().numpy()
    return SweepCounts(above=above, totals=totals)


def sweep_counts(likelihood, role, group, story, thresholds=None, *, n_groups, n_boot=0, seed=0, backend="auto"):
    """Dispatch the sweep to ``backend`` in {"numpy", "triton", "cupy", "auto"}.

    ``"numpy"`` uses the statistics module's reference when it is installed
    (``harness.stats.sweep``), else this module's vectorised CPU path.
    """
    b = resolve_backend(backend, what="sweep_counts")
    kw = dict(n_groups=n_groups, n_boot=n_boot, seed=seed)
    if b == "triton":
        return triton_sweep_counts(likelihood, role, group, story, thresholds, **kw)
    if b == "cupy":
        return cupy_sweep_counts(likelihood, role, group, story, thresholds, **kw)
    try:
        from harness.stats.sweep import sweep_counts as stats_sweep_counts
    except ImportError:
        return numpy_sweep_counts(likelihood, role, group, story, thresholds, **kw)
    if thresholds is None:
        thresholds = np.arange(1, 100, dtype=np.int32)
    return stats_sweep_counts(likelihood, role, group, story, thresholds, backend="numpy", **kw)
