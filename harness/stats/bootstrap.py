"""Story-level cluster bootstrap (stories are the units, not characters).

A dominant and a subordinate character of one story, and the two partners of a romantic
story, are not independent; resampling stories keeps them together. Replicates weight every
story by a Poisson(1) draw (the "Poisson bootstrap", Hanley & MacGibbon 2006; Chamandy et al.
2012), the same hashed weights as the R_mrs sweep (``harness.stats.sweep.story_weights``), so
replicate b of every statistic of a run uses the same resample of stories and results are
reproducible from (seed, replicate, story) alone.
"""

from __future__ import annotations

import warnings

import numpy as np

from .sweep import story_weights

__all__ = ["cluster_sums", "percentile_interval"]


def cluster_sums(values: np.ndarray, story: np.ndarray, *, n_boot: int, seed: int = 0,
                 chunk_elems: int = 1 << 23) -> np.ndarray:
    """Story-weighted column sums of ``values`` for the observed data and ``n_boot`` replicates.

    Args:
        values: (n, k) per-character values (NaN is an error: pass 0 for "no entry").
        story: (n,) integer story index (global, so cells share resamples).
        n_boot: number of replicates B.
        seed: bootstrap seed.

    Returns:
        (B + 1, k) float array; row 0 holds the plain sums.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    story = np.asarray(story, dtype=np.int64)
    ustory, inv = np.unique(story, return_inverse=True)
    per_story = np.zeros((ustory.size, values.shape[1]))
    np.add.at(per_story, inv.reshape(-1), values)
    out = np.empty((n_boot + 1, values.shape[1]))
    out[0] = per_story.sum(axis=0)
    step = max(1, chunk_elems // max(ustory.size, 1))
    for b0 in range(1, n_boot + 1, step):
        reps = np.arange(b0, min(n_boot + 1, b0 + step))
        out[b0 : b0 + reps.size] = story_weights(seed, reps, ustory) @ per_story
    return out


def percentile_interval(replicates: np.ndarray, alpha: float = 0.05, axis: int = 0,
                        min_finite: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over replicates, ignoring non-finite ones.

    Returns NaN where fewer than ``min_finite`` replicates are finite (too few to place the
    2.5% and 97.5% points).
    """
    r = np.asarray(replicates, dtype=float)
    r = np.where(np.isfinite(r), r, np.nan)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: handled below
        low = np.nanquantile(r, alpha / 2, axis=axis)
        high = np.nanquantile(r, 1 - alpha / 2, axis=axis)
    enough = np.sum(np.isfinite(r), axis=axis) >= min_finite
    return np.where(enough, low, np.nan), np.where(enough, high, np.nan)
