"""Story-level cluster bootstrap (stories are the units, not characters).

A dominant and a subordinate character of one story, and the two partners of a romantic
story, are not independent; resampling stories keeps them together. Replicates weight every
story by a Poisson(1) draw (the "Poisson bootstrap", Hanley & MacGibbon 2006; Chamandy et al.
2012), the same hashed weights as the R_mrs sweep (``harness.stats.sweep.story_weights``), so
replicate b of every statistic of a run uses the same resample of stories and results are
reproducible from (seed, replicate, story) alone.

A bootstrap needs stories that differ. ``boot_summary`` withholds the interval and p (NaN,
flag ``boot_no_variation``) where the replicates carry no sampling variation: when every story
of a cell contributes the same (``stories_differ``; one story included) or when the finite
replicates are all equal.
"""

from __future__ import annotations

import warnings

import numpy as np

from .sweep import story_weights

__all__ = ["FEW_FINITE", "NO_VARIATION", "ZERO_COUNT", "boot_summary",
           "bootstrap_p", "cluster_sums", "percentile_interval", "stories_differ"]

#: Flag of a cell whose bootstrap replicates carry no sampling variation (``boot_summary``).
NO_VARIATION = "boot_no_variation"
#: The flag of a cell whose estimate smoothed a zero count: its bootstrap is withheld (``boot_summary``).
ZERO_COUNT = "boot_zero_count"
#: The flag of a cell with fewer than ``min_finite`` finite replicates: too few to place the interval's ends.
FEW_FINITE = "boot_few_finite"


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
    ustory, per_story = _story_sums(values, story)
    if not np.isfinite(per_story).all():
        j = int(np.flatnonzero(~np.isfinite(per_story).all(axis=0))[0])
        raise ValueError(f"cluster_sums: column {j} of values is not finite (NaN or inf); pass 0 for no entry")
    out = np.empty((n_boot + 1, per_story.shape[1]))
    out[0] = per_story.sum(axis=0)
    step = max(1, chunk_elems // max(ustory.size, 1))
    for b0 in range(1, n_boot + 1, step):
        reps = np.arange(b0, min(n_boot + 1, b0 + step))
        out[b0 : b0 + reps.size] = story_weights(seed, reps, ustory) @ per_story
    return out


def _story_sums(values, story) -> tuple[np.ndarray, np.ndarray]:
    """(unique stories, (U, k) per-story column sums of ``values``)."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    ustory, inv = np.unique(np.asarray(story, dtype=np.int64), return_inverse=True)
    per_story = np.zeros((ustory.size, values.shape[1]))
    np.add.at(per_story, inv.reshape(-1), values)
    return ustory, per_story


def stories_differ(values, story) -> bool:
    """True when at least two stories contribute differently: their per-story sums of
    ``values`` (the columns one statistic reads) differ in some column.

    False for one story, and for stories that all contribute the same (``boot_summary`` says
    why neither gives a bootstrap).

    >>> stories_differ([[1, 0.9], [1, 0.8]], [0, 0]), stories_differ([[1, 0.9], [1, 0.9]], [0, 1])
    (False, False)
    >>> stories_differ([[1, 0.9], [1, 0.8]], [0, 1])
    True
    """
    _, per_story = _story_sums(values, story)
    if per_story.shape[0] < 2:
        return False
    return bool(~np.isclose(per_story, per_story[0], rtol=1e-12, atol=1e-12).all())


def boot_summary(replicates: np.ndarray, alpha: float = 0.05, *, stories_vary: bool = True,
                 zero_count: bool = False, min_finite: int = 20) -> tuple[float, float, float, tuple[str, ...]]:
    """Percentile interval and bootstrap p of ratio = 1 of one cell, or NaN where the
    replicates carry no sampling variation.

    Returns ``(boot_low, boot_high, p_boot, flags)``; ``flags`` says why when the three numbers are
    withheld (``NO_VARIATION``, ``ZERO_COUNT``, or ``FEW_FINITE``: fewer than ``min_finite``
    replicates are finite, as where most resamples leave a count's denominator at 0), else it is empty.

    The story bootstrap estimates how the statistic varies between samples of stories from
    how it varies between the stories at hand, and has nothing to go on in two cases:

      * every story contributes the same (``stories_vary`` False, from ``stories_differ``;
        one story is the extreme case): a multinomial resample of k equal stories is the data
        again, every time. The Poisson scheme's replicates then differ only by their random
        total size, which a ratio cancels and the smoothing of zero counts in R_sub and R_mrs
        does not, so such replicates can spread without any sampling variation behind them;
      * the finite replicates are all equal (a point mass: one story, equal stories, or a zero
        count, which every resample reproduces). The interval then has zero width, and p_boot
        is 2 / (B + 1) for any estimate other than 1, a number set by B and not by the data.

    ``zero_count``: the estimate smoothed a count that is 0 in the data (R_sub's Haldane 0.5, R_mrs's add-one at
    its median threshold). Every resample keeps that 0, the replicates where both counts are 0 are dropped as
    non-finite, and the rest sit on one side of 1 by construction: p_boot was its floor, 2 / (B + 1), for one
    character of one role (R_mrs 2.0, Fisher's p 1.0, q_bh .006). Withheld too, with the flag ``ZERO_COUNT``.

    Like the SD of one value, the between-story spread is undefined here, not 0, and no count
    of stories is a threshold: two stories that differ already give a spread. The tables'
    ``q_bh`` then takes the next p of its order of preference (``p_exact`` or ``p_normal``).

    >>> boot_summary(np.full(100, 1.443))
    (nan, nan, nan, ('boot_no_variation',))
    >>> lo, hi, p, flags = boot_summary(np.linspace(0.5, 1.5, 101))
    >>> round(lo, 3), round(hi, 3), p, flags
    (0.525, 1.475, 1.0, ())
    >>> boot_summary(np.r_[np.full(90, np.nan), np.linspace(1, 2, 10)])
    (nan, nan, nan, ('boot_few_finite',))
    """
    if zero_count:
        return float("nan"), float("nan"), float("nan"), (ZERO_COUNT,)
    r = np.asarray(replicates, dtype=float)
    fin = r[np.isfinite(r)]
    if not stories_vary or (fin.size and np.isclose(fin, fin[0], rtol=1e-12, atol=0).all()):
        return float("nan"), float("nan"), float("nan"), (NO_VARIATION,)
    if fin.size < min_finite:
        return float("nan"), float("nan"), float("nan"), (FEW_FINITE,)
    lo, hi = percentile_interval(r, alpha, min_finite=min_finite)
    return float(lo), float(hi), float(bootstrap_p(r, 1.0, min_finite=min_finite)), ()


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
