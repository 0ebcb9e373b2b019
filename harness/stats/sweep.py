"""The R_mrs threshold sweep with a story-level Poisson bootstrap: the NumPy reference.

``sweep_counts`` returns, for every replicate b (0 = observed data, 1..B = Poisson(1) story
weights), gender group g, race r, threshold t and role k (0 dominant, 1 subordinate), the
weighted number of characters whose race-r likelihood is above t (``100 * likelihood > t``,
strict, the percentage to ``PERCENT_DECIMALS`` decimals; NaN is never above), and the weighted number of characters per (g, k).

Story weights are a pure function of (seed, replicate, story) through the lowbias32 hash
(C. Wellons) and an integer inverse-CDF of Poisson(1), so every backend (this NumPy reference,
the Triton and CuPy kernels of ``harness.kernels.sweep``) returns identical integer counts.

A likelihood is read as a percentage to ``PERCENT_DECIMALS`` decimals (``percent_bucket``): the likelihoods are
ratios of counts and names-dataset's three-decimal shares, so 0.60 is 60%, not above t = 60 (the digest's strict
``>``); formed in float32, ``100 * 0.6`` is 60.0000024 and 3,093 names of the table sat one threshold too high.

How the reference avoids a loop over thresholds: for integer t, ``100 * p > t`` iff
``ceil(100 * p) > t``. Each
(character, race) therefore falls in one bucket u = ceil(100 p) in 0..100; the per-story
bucket counts form a sparse (key, story) matrix, the replicate weights a dense (story, B+1)
matrix, and one sparse product gives every replicate's histogram; a suffix sum over buckets
answers all thresholds at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ConfigError, DataError

__all__ = [
    "BACKENDS",
    "DEFAULT_THRESHOLDS",
    "POISSON1_CDF_U32",
    "SweepCounts",
    "mix32",
    "percent_bucket",
    "poisson1_cdf_u32",
    "story_weights",
    "sweep_counts",
]

BACKENDS = ("numpy", "triton", "cupy", "auto")
#: Decimals of the percentage ``100 * likelihood`` compared with a threshold: finer than any likelihood the name
#: table holds (a count ratio of a name's bearers, a three-decimal share), coarser than float32's rounding of it.
PERCENT_DECIMALS = 4
M32 = 0xFFFFFFFF
N_BUCKETS = 101  # u = ceil(100 p) in 0..100
#: The authors' code sweeps ``range(1, 100)``; the paper says 1..100 (digest 5.5, 10.6).
DEFAULT_THRESHOLDS = np.arange(1, 100, dtype=np.int32)

#: floor(P(Poisson(1) <= k) * 2**32) for k = 0..15, clipped to 2**32 - 1. ``poisson1_cdf_u32()``
#: recomputes it with 50-digit decimals and a test checks the two agree.
POISSON1_CDF_U32 = np.array(
    [
        1580030168, 3160060337, 3950075421, 4213413783, 4279248373, 4292415291, 4294609777,
        4294923276, 4294962463, 4294966817, 4294967252, 4294967292, 4294967295, 4294967295,
        4294967295, 4294967295,
    ],
    dtype=np.uint32,
)


def poisson1_cdf_u32(kmax: int = 15) -> list[int]:
    """Recompute ``POISSON1_CDF_U32`` exactly: floor(P(Poisson(1) <= k) * 2**32), clipped."""
    from decimal import Decimal, getcontext

    getcontext().prec = 50
    e_inv = Decimal(1) / Decimal(1).exp()
    out, term, acc = [], Decimal(1), Decimal(0)
    for k in range(kmax + 1):
        if k:
            term /= k
        acc += term
        out.append(min(int(acc * e_inv * (1 << 32)), M32))
    return out


@dataclass(frozen=True)
class SweepCounts:
    """Weighted counts of a threshold sweep.

    Attributes:
        above: int64 (B+1, G, R, T, 2); ``above[b, g, r, t, k]`` is the weighted number of
            characters of group g and role k (0 dominant, 1 subordinate) whose race-r
            likelihood is above threshold t, in replicate b (0 = observed data).
        totals: int64 (B+1, G, 2); weighted characters of group g and role k (characters with
            NaN likelihoods included: they stay in the denominator).
    """

    above: np.ndarray
    totals: np.ndarray

    @property
    def n_boot(self) -> int:
        """Number of bootstrap replicates B (replicate 0 is the observed data)."""
        return int(self.totals.shape[0]) - 1

    def to_dict(self) -> dict[str, Any]:
        """Plain lists for JSON."""
        return {"above": np.asarray(self.above).tolist(), "totals": np.asarray(self.totals).tolist()}


def mix32(x) -> np.ndarray:
    """lowbias32 (C. Wellons) on uint32 arrays, all arithmetic mod 2**32."""
    x = np.asarray(x, dtype=np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    x = x ^ (x >> np.uint32(16))
    return x


def story_weights(seed: int, replicates, stories) -> np.ndarray:
    """Poisson(1) story weights, int64 of shape (len(replicates), len(stories)).

    ``h = mix32(mix32(mix32(seed) ^ replicate) ^ story)``; the weight is the number of k in
    0..15 with ``h >= POISSON1_CDF_U32[k]``. Replicate 0 (the observed data) has weight 1.
    """
    reps = np.atleast_1d(np.asarray(replicates, dtype=np.int64))
    st = np.atleast_1d(np.asarray(stories, dtype=np.int64)).astype(np.uint32)
    hs = mix32(np.array([int(seed) & M32], dtype=np.uint32))
    h1 = mix32(hs ^ reps.astype(np.uint32))
    h = mix32(h1[:, None] ^ st[None, :])
    w = np.searchsorted(POISSON1_CDF_U32, h, side="right").astype(np.int64)  # #{k: h >= cdf[k]}
    w[reps == 0] = 1
    return w


def percent_bucket(likelihood) -> np.ndarray:
    """Bucket u = ceil(100 * p), int16, -1 for NaN: ``100 * p > t`` iff ``u > t`` for integer t, the percentage
    read to ``PERCENT_DECIMALS`` decimals in float64, so every backend puts an exact percentage (0.07, 0.6) at its
    own threshold, not above it.

    >>> percent_bucket(np.array([0.6, 0.07, 0.6001, 0.0, np.nan], np.float32)).tolist()
    [60, 7, 61, 0, -1]
    """
    pct = np.round(100.0 * np.asarray(likelihood, dtype=np.float64), PERCENT_DECIMALS)
    u = np.ceil(pct)
    return np.where(np.isnan(u), -1, u).astype(np.int16)


def validate_inputs(likelihood, role, group, story, thresholds, n_groups, n_boot, seed):
    """Check ``sweep_counts``' arguments (one-line errors naming the argument and, for arrays, the
    first bad row) and return them as (float32 likelihood, int8 role, int32 group, int64 story,
    int64 thresholds, G, B, seed); every backend here and in ``harness.kernels.sweep`` uses it."""
    lik = np.asarray(likelihood)
    if lik.ndim != 2:
        raise DataError(f"sweep_counts: likelihood must be a 2-D (n, R) array, got shape {lik.shape}")
    if lik.size and not np.issubdtype(lik.dtype, np.floating):
        raise DataError(f"sweep_counts: likelihood must be float, got dtype {lik.dtype}")
    lik = lik.astype(np.float32, copy=False)
    n = lik.shape[0]
    out = {}
    for name, arr in (("role", role), ("group", group), ("story", story)):
        a = np.asarray(arr)
        if a.shape != (n,):
            raise DataError(f"sweep_counts: {name} must have shape ({n},) like likelihood, got {a.shape}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise DataError(f"sweep_counts: {name} must be integers, got dtype {a.dtype}")
        out[name] = a  # range-checked below before the cast, so that no value wraps into a valid one
    for name, v, lo in (("n_groups", n_groups, 1), ("n_boot", n_boot, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"sweep_counts: {name} must be an integer >= {lo}, got {v!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"sweep_counts: seed must be an integer, got {seed!r}")
    thr = np.asarray(thresholds)
    if thr.ndim != 1 or thr.size == 0 or not np.issubdtype(thr.dtype, np.integer):
        raise ConfigError(f"sweep_counts: thresholds must be a non-empty 1-D integer array (percent), got {thr!r}")
    with np.errstate(invalid="ignore"):
        bad = ~np.isnan(lik) & ((lik < 0) | (lik > 1))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"sweep_counts: likelihood[{r}, {c}] = {lik[r, c]} is outside [0, 1]; "
                        "pass fractions, NaN for no entry")
    rl, g, s = out["role"], out["group"], out["story"]
    if ((rl != 0) & (rl != 1)).any():
        i = int(np.flatnonzero((rl != 0) & (rl != 1))[0])
        raise DataError(f"sweep_counts: role[{i}] = {rl[i]}; use 0 (dominant) or 1 (subordinate)")
    if ((g < -1) | (g >= n_groups)).any():
        i = int(np.flatnonzero((g < -1) | (g >= n_groups))[0])
        raise DataError(f"sweep_counts: group[{i}] = {g[i]} is outside -1..{n_groups - 1} (-1 = excluded)")
    if ((s < 0) | (s > M32)).any():
        i = int(np.flatnonzero((s < 0) | (s > M32))[0])
        raise DataError(f"sweep_counts: story[{i}] = {s[i]}; story indices must be in 0..2**32-1")
    rl, g, s = rl.astype(np.int8, copy=False), g.astype(np.int32, copy=False), s.astype(np.int64, copy=False)
    return lik, rl, g, s, thr.astype(np.int64), int(n_groups), int(n_boot), int(seed)


def _numpy_sweep(lik, rl, g, s, thr, G, B, seed, chunk_elems=1 << 24):
    from scipy import sparse

    n, R = lik.shape
    keep = g >= 0
    u = percent_bucket(lik)
    ci, ri = np.nonzero(keep[:, None] & (u >= 0))
    # Histogram keys: ((g * R + r) * 101 + u) * 2 + role, then one totals key per (g, role).
    n_hist = G * R * N_BUCKETS * 2
    keys = ((g[ci].astype(np.int64) * R + ri) * N_BUCKETS + u[ci, ri].astype(np.int64)) * 2 + rl[ci]
    tc = np.flatnonzero(keep)
    tkeys = n_hist + g[tc].astype(np.int64) * 2 + rl[tc]
    K = n_hist + 2 * G
    ustory, inv = np.unique(s[keep], return_inverse=True)
    col = np.empty(n, dtype=np.int64)
    col[tc] = inv.reshape(-1)
    rows = np.concatenate([keys, tkeys])
    cols = np.concatenate([col[ci], col[tc]])
    counts = sparse.csr_matrix((np.ones(rows.size, dtype=np.int64), (rows, cols)), shape=(K, max(ustory.size, 1)))
    counts.sum_duplicates()
    hist = np.zeros((B + 1, K), dtype=np.int64)
    hist[0] = np.asarray(counts.sum(axis=1)).ravel()
    step = max(1, chunk_elems // max(ustory.size, 1))
    for b0 in range(1, B + 1 if ustory.size else 1, step):
        reps = np.arange(b0, min(B + 1, b0 + step))
        w = story_weights(seed, reps, ustory)  # (chunk, S)
        hist[b0 : b0 + reps.size] = (counts @ w.T).T
    h = hist[:, :n_hist].reshape(B + 1, G, R, N_BUCKETS, 2)
    suffix = np.zeros((B + 1, G, R, N_BUCKETS + 1, 2), dtype=np.int64)
    suffix[:, :, :, :N_BUCKETS] = np.cumsum(h[:, :, :, ::-1], axis=3)[:, :, :, ::-1]
    idx = np.clip(thr + 1, 0, N_BUCKETS)  # above t  <=>  u >= t + 1
    above = np.ascontiguousarray(suffix[:, :, :, idx, :])
    totals = np.ascontiguousarray(hist[:, n_hist:].reshape(B + 1, G, 2))
    return SweepCounts(above=above, totals=totals)


def _auto_backend() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            import importlib.util

            if importlib.util.find_spec("triton") is not None:
                return "triton"
            if importlib.util.find_spec("cupy") is not None:
                return "cupy"
    except ImportError:
        pass
    return "numpy"


def sweep_counts(
    likelihood: np.ndarray,
    role: np.ndarray,
    group: np.ndarray,
    story: np.ndarray,
    thresholds: np.ndarray = DEFAULT_THRESHOLDS,
    *,
    n_groups: int,
    n_boot: int = 0,
    seed: int = 0,
    backend: str = "numpy",
) -> SweepCounts:
    """Counts above every threshold, per replicate, group, race and role.

    Args:
        likelihood: (n, R) float in [0, 1]; NaN = no entry for the name (never above, but the
            character still counts in ``totals``).
        role: (n,) int, 0 = dominant, 1 = subordinate.
        group: (n,) int gender-group (or cell) id in 0..n_groups-1; -1 excludes the character.
        story: (n,) int story index, the bootstrap unit (characters of one story share a weight).
        thresholds: (T,) int percent; default 1..99 as the authors' code.
        n_groups: number of groups G.
        n_boot: number of Poisson bootstrap replicates B (0 = observed counts only).
        seed: bootstrap seed; weights are a pure function of (seed, replicate, story).
        backend: "numpy" (this reference), "triton" or "cupy" (``harness.kernels.sweep``), or
            "auto" (a GPU kernel when a CUDA device is present, else NumPy).

    Returns:
        ``SweepCounts(above (B+1, G, R, T, 2), totals (B+1, G, 2))``, int64.

    Example:
        >>> import numpy as np
        >>> lik = np.array([[0.9], [0.05], [np.nan]], dtype=np.float32)
        >>> c = sweep_counts(lik, np.array([1, 0, 0]), np.array([0, 0, 0]), np.arange(3),
        ...                  np.array([1, 50]), n_groups=1)
        >>> c.above[0, 0, 0].tolist(), c.totals[0, 0].tolist()
        ([[1, 1], [0, 1]], [2, 1])
    """
    if backend not in BACKENDS:
        raise ConfigError(f"sweep_counts: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        backend = _auto_backend()
    if backend != "numpy":
        try:
            from harness.kernels import sweep as ksweep
        except ImportError as e:
            raise ConfigError(f"sweep_counts: backend {backend!r} needs harness.kernels.sweep ({e}); "
                              "install the kernels extra or use backend='numpy'") from None
        fn = ksweep.triton_sweep_counts if backend == "triton" else ksweep.cupy_sweep_counts
        return fn(likelihood, role, group, story, thresholds, n_groups=n_groups, n_boot=n_boot, seed=seed)
    args = validate_inputs(likelihood, role, group, story, thresholds, n_groups, n_boot, seed)
    return _numpy_sweep(*args)
