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

__all__ = ["bootstrap_p", "cluster_sums", "percentile_interval"]


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


def bootstrap_p(replicates: np.ndarray, null: float = 1.0, axis: int = 0, min_finite: int = 20):
    """Two-sided percentile-bootstrap p-value of H0: statistic = ``null`` (ratio 1 by default).

    The test that inverts the percentile interval: the achieved significance level is the
    smallest alpha whose 1 - alpha percentile interval excludes the null, 2 * min(P*(R* <= null),
    P*(R* >= null)) (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, sec. 15.4 and
    16.4). With B finite replicates, k_le of them <= null and k_ge >= null, the Monte Carlo
    version (Davison & Hinkley 1997, *Bootstrap Methods and their Application*, eq. 4.11;
    North, Curtis & Sham 2002, AJHG 71:439) is

        p = min(1, 2 * (min(k_le, k_ge) + 1) / (B + 1)),

    which is never 0 (at least 2 / (B + 1)) and is invariant to monotone transforms (log ratio
    against 0 gives the same p). Replicates exactly at the null count on both sides
    (conservative). Non-finite replicates (a ratio undefined in a resample) are left out; NaN
    where fewer than ``min_finite`` remain.

    Why this and not an exact test on rounded counts: race counts are sums of name
    likelihoods, not binomial counts, so a binomial / Fisher test on rounded sums has no
    sampling model behind it; and a dominant and a subordinate character share a story, which
    the story-level resampling respects while the exact tests assume independent characters.

    >>> r = np.array([0.5, 0.9, 0.95, 1.0, 1.1, 1.2, 1.3, 1.4, 1.6, 2.0])
    >>> float(bootstrap_p(r, min_finite=1))  # k_le = 4, k_ge = 7: 2 * 5 / 11
    0.9090909090909091
    """
    r = np.asarray(replicates, dtype=float)
    fin = np.isfinite(r)
    b = fin.sum(axis=axis)
    k_le = np.sum(fin & (r <= null), axis=axis)
    k_ge = np.sum(fin & (r >= null), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.minimum(1.0, 2.0 * (np.minimum(k_le, k_ge) + 1) / (b + 1))
    p = np.where(b >= min_finite, p, np.nan)
    return float(p) if np.ndim(p) == 0 else p
