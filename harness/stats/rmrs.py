"""Median racialized subordination ratio R_mrs (paper eq. 4), per-name ratios and curves.

Per model x domain x gender g x race (authors' code ``5c.iii``, digest 5.5):
  * a_t, b_t: integer numbers of subordinate / dominant characters of gender g whose race
    likelihood is above t (``100 * l > t``, strict), for t in the sweep (1..99 by default);
  * N_sub,g, N_dom,g: named subordinate / dominant characters of gender g (gender-specific);
  * thresholds with a_t + b_t = 0 are skipped; otherwise R_t = (a_t / N_sub) / (b_t / N_dom),
    with 1 added to all four numbers when a_t or b_t is 0 (add-one smoothing);
  * R_mrs = median of the R_t (``statistics.median``: mean of the two middle values).

Interval and p at the median (not in the authors' code; the digest infers them from S13n-p):
the Katz log interval on the integer counts (smoothed as above) of the threshold whose ratio
equals the median, p by Altman-Bland, and nu = N_sub + N_dom - 2. (The digest infers
N_sub + N_dom = nu + 1; back-solving S13n/S13o rows for integer totals instead gives a unique
solution only with N_sub + N_dom = nu + 2, e.g. Llama2 Labor Masc. N_sub = 1,174, N_dom = 3,006
for nu = 4,178, which then reproduces R, CI and p of the Black, MENA and Asian rows exactly;
see tests/stats/reference_s13.py.) When the median falls between
two different middle ratios (even number of thresholds), this module uses the middle threshold
with more names (a + b; the lower threshold on ties), centres the interval on the reported
median and flags the cell ``median_between_thresholds``.

Principled additions: a story-level bootstrap percentile interval of the median (replicates of
``SweepCounts``) and the percentile-bootstrap p of R_mrs = 1 from the same replicates
(``harness.stats.bootstrap.bootstrap_p``), Fisher's exact p at the median threshold, flags ``smoothed`` (the median
threshold needed add-one smoothing) and ``lt5_racialized`` (fewer than 5 names above it). The
bootstrap columns are NaN, flag ``boot_no_variation``, where the cell's stories all contribute the
same or the replicates do not vary (``harness.stats.bootstrap.boot_summary``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from .bootstrap import boot_summary
from .intervals import Z95, fisher_exact_p, p_from_interval
from .results import RmrsResult

__all__ = ["median_ratio", "rmrs_from_counts", "threshold_ratios", "name_ratio"]

MIN_RACIALIZED = 5


def threshold_ratios(a, b, n_sub, n_dom) -> tuple[np.ndarray, np.ndarray]:
    """R_t with add-one smoothing (broadcasting); NaN where a + b = 0 or a total is 0.

    Returns (ratio, smoothed) where ``smoothed`` marks thresholds that needed the +1.

    >>> r, s = threshold_ratios([1, 2, 0, 7], [1, 1, 0, 0], 1174, 3005)
    >>> np.round(r, 3).tolist(), s.tolist()
    ([2.56, 5.119, nan, 20.466], [False, False, False, True])
    """
    a, b, ns, nd = (np.asarray(v, dtype=float) for v in (a, b, n_sub, n_dom))
    sm = ((a == 0) | (b == 0)) & ((a + b) > 0)
    e = sm.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = ((a + e) / (ns + e)) / ((b + e) / (nd + e))
    r = np.where(((a + b) > 0) & (ns > 0) & (nd > 0), r, np.nan)
    return r, sm


def median_ratio(ratios, axis: int = -1) -> np.ndarray:
    """Median over thresholds ignoring skipped (NaN) ones; NaN when none is left."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slice -> NaN, reported by the caller
        return np.nanmedian(np.asarray(ratios, dtype=float), axis=axis)


def name_ratio(n_sub_name, n_sub, n_dom_name, n_dom):
    """Per-name ratio (Fig. 3a): (n_sub,name / N_sub) / (n_dom,name / N_dom).

    Add-one smoothing of all four numbers when one name count is 0; 1 when both are 0 (the
    authors' ``ratio_with_imputation`` on integer counts).

    >>> round(float(name_ratio(2213, 1000, 12, 1000)), 2)  # Juan, Learning (digest 6.3.7)
    184.42
    """
    a, b = np.asarray(n_sub_name, dtype=float), np.asarray(n_dom_name, dtype=float)
    r, _ = threshold_ratios(a, b, n_sub, n_dom)
    return np.where((a == 0) & (b == 0), 1.0, r)


def _pick_median_threshold(ratios: np.ndarray, a: np.ndarray, b: np.ndarray, med: float) -> tuple[int, bool]:
    """(index of the threshold whose counts give R_mrs its interval and p, whether the median lies between two).

    The threshold whose ratio is the median; where several are, the lowest of them, which holds the most names
    (counts only fall as the threshold rises). Where the median falls between two ratios (an even number of
    thresholds), the one of the two with more names (a + b), the lower threshold on a tie.
    """
    valid = np.flatnonzero(np.isfinite(ratios))
    exact = valid[np.isclose(ratios[valid], med, rtol=1e-12, atol=0)]
    if exact.size:
        return int(exact[0]), False
    order = valid[np.argsort(ratios[valid], kind="stable")]
    k = order.size
    lo, hi = order[k // 2 - 1], order[k // 2]
    na, nb = a[lo] + b[lo], a[hi] + b[hi]
    if na != nb:
        return int(lo if na > nb else hi), True
    return int(min(lo, hi)), True


def rmrs_from_counts(
    a: Sequence[float],
    b: Sequence[float],
    n_sub: float,
    n_dom: float,
    thresholds: Sequence[int] | None = None,
    *,
    boot_a: np.ndarray | None = None,
    boot_b: np.ndarray | None = None,
    boot_n_sub: np.ndarray | None = None,
    boot_n_dom: np.ndarray | None = None,
    stories_vary: bool = True,
    z: float = Z95,
    alpha: float = 0.05,
) -> RmrsResult:
    """R_mrs of one cell from the per-threshold counts (see the module docstring).

    Args:
        a, b: (T,) integer subordinate / dominant counts above each threshold.
        n_sub, n_dom: gender-specific role totals.
        thresholds: (T,) thresholds (default 1..T).
        boot_a, boot_b: optional (B, T) bootstrap replicates of a and b; boot_n_sub,
            boot_n_dom: (B,) replicate totals. Gives ``boot_low``/``boot_high`` and ``p_boot``.
        stories_vary: False when every story of the cell contributes the same (one story
            included): the bootstrap columns are then NaN, flag ``boot_no_variation``.
        z, alpha: critical value of the Katz interval (1.96 in the paper) and bootstrap level.

    Returns:
        ``RmrsResult``; NaN with ``reason`` when a role is empty or no name is above any
        threshold.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    thr = np.arange(1, a.size + 1) if thresholds is None else np.asarray(thresholds)
    n_sub, n_dom = float(n_sub), float(n_dom)
    base = dict(statistic="R_mrs", method="katz", n_sub=n_sub, n_dom=n_dom, thresholds=tuple(int(t) for t in thr),
                nu=n_sub + n_dom - 2)
    if not (n_sub > 0 and n_dom > 0):
        which = "subordinate" if not n_sub > 0 else "dominant"
        return RmrsResult(reason=f"empty group: no named {which} characters of this gender", **base)
    ratios, smoothed = threshold_ratios(a, b, n_sub, n_dom)
    base["ratios"] = tuple(float(v) for v in ratios)
    valid = np.isfinite(ratios)
    if not valid.any():
        return RmrsResult(reason="no name above any threshold (all-zero counts)", **base)
    med = float(median_ratio(ratios))
    j, between = _pick_median_threshold(ratios, a, b, med)
    e = 1.0 if smoothed[j] else 0.0
    x1, n1, x2, n2 = a[j] + e, n_sub + e, b[j] + e, n_dom + e
    h = z * math.sqrt(max(1 / x1 - 1 / n1 + 1 / x2 - 1 / n2, 0.0))
    low, high = med * math.exp(-h), med * math.exp(h)
    p_ab, p_norm, _ = p_from_interval(med, 1.0, low, high, log=True, z=z)
    flags = []
    if smoothed[j]:
        flags.append("smoothed")
    if a[j] + b[j] < MIN_RACIALIZED:
        flags.append("lt5_racialized")
    if between:
        flags.append("median_between_thresholds")
    boot_low = boot_high = p_boot = float("nan")
    if boot_a is not None:
        br, _ = threshold_ratios(boot_a, boot_b, np.asarray(boot_n_sub)[:, None], np.asarray(boot_n_dom)[:, None])
        reps = median_ratio(br, axis=1)
        boot_low, boot_high, p_boot, boot_flags = boot_summary(reps, alpha, stories_vary=stories_vary,
                                                               zero_count=bool(smoothed[j]))
        flags += boot_flags
    return RmrsResult(
        estimate=med, ci_low=low, ci_high=high, p=float(p_ab), p_normal=float(p_norm),
        p_exact=fisher_exact_p(a[j], n_sub, b[j], n_dom), p_boot=p_boot, boot_low=boot_low, boot_high=boot_high,
        alpha=alpha,
        flags=tuple(flags), t_median=float(thr[j]), a=float(a[j]), b=float(b[j]), n_thresholds=int(valid.sum()),
        **base,
    )
