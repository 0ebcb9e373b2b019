"""Interval and p-value primitives, in the exact forms the paper used plus exact alternatives.

References:
    Wilson, E. B. (1927), JASA 22:209-212 (score interval; count form with fractional x as in
    the authors' ``calculate_95ci_wilson``).
    Katz, D. et al. (1978), Biometrics 34:469-474 (log-scale interval of a ratio of two
    binomial proportions; the authors' ``calculate_ln_95ci_binomial_ratio_with_imputation``).
    Altman, D. G. & Bland, J. M. (2011), BMJ 343:d2304 (p from a confidence interval,
    p = exp(-0.717 z - 0.416 z^2)); the paper's p-values use this approximation.

All functions broadcast over NumPy arrays and return floats for scalar input. Impossible input
(n <= 0, NaN) gives NaN rather than an exception; the table builders attach the reason.
"""

from __future__ import annotations

import numpy as np
from scipy import special as spsp
from scipy import stats as sps

__all__ = [
    "Z95",
    "altman_bland_p",
    "binomial_exact_p",
    "fisher_exact_p",
    "is_integral",
    "katz_interval",
    "normal_p",
    "p_from_interval",
    "wilson_interval",
]

#: The critical value the paper hard-codes (not norm.ppf(0.975) = 1.959964).
Z95 = 1.96


def _out(x):
    x = np.asarray(x, dtype=float)
    return float(x) if x.ndim == 0 else x


def wilson_interval(x, n, z: float = Z95):
    """Wilson score interval of the proportion x/n in count form (fractional x allowed).

    centre = (x + z^2/2) / (n + z^2); half = z / (n + z^2) * sqrt(x (n - x) / n + z^2 / 4).
    Returns (low, high); NaN where n <= 0 or x is outside [0, n].

    >>> [round(v, 7) for v in wilson_interval(0.961 * 0.004 * 14985, 14985)]  # S13a ChatGPT4 NH/PI
    [0.0029724, 0.00497]
    """
    x = np.asarray(x, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (n > 0) & (x >= 0) & (x <= n)
        z2 = z * z
        centre = (x + z2 / 2) / (n + z2)
        half = z / (n + z2) * np.sqrt(np.clip(x * (n - x) / n, 0, None) + z2 / 4)
        # exact bounds at the edges (x = 0 gives 0, x = n gives 1), not a rounding residual
        low = np.where(ok, np.where(x == 0, 0.0, np.clip(centre - half, 0, 1)), np.nan)
        high = np.where(ok, np.where(x == n, 1.0, np.clip(centre + half, 0, 1)), np.nan)
    return _out(low), _out(high)


def altman_bland_p(z):
    """Two-sided p from a z statistic by Altman & Bland's approximation exp(-0.717 z - 0.416 z^2).

    The paper's p-values use it (e.g. z = 0.3061 gives 0.772; the normal tail gives 0.760).
    """
    z = np.abs(np.asarray(z, dtype=float))
    return _out(np.exp(-0.717 * z - 0.416 * z * z))


def normal_p(z):
    """Two-sided normal p, 2 * (1 - Phi(|z|)): the quantity the Altman-Bland formula approximates."""
    # scipy's norm.sf(x) is ndtr(-x), bit for bit; called directly it is a hundredth of the time, and a bootstrap over
    # the statistics tables (harness.labelling.impact) takes one per cell and resample
    return _out(2 * spsp.ndtr(-np.abs(np.asarray(z, dtype=float))))


def p_from_interval(estimate, null, low, high, *, log: bool = False, z: float = Z95):
    """The paper's p-value from an interval: SE = (high - low) / (2 z), stat = |estimate - null| / SE.

    With ``log=True`` the interval and estimate are ratios and SE, stat are formed on the log
    scale (Katz intervals; ``null`` is then the null ratio, usually 1). Returns
    (p_altman_bland, p_normal, z_stat); NaN where the interval has zero or undefined width.
    """
    est, nul, lo, hi = (np.asarray(v, dtype=float) for v in (estimate, null, low, high))
    with np.errstate(invalid="ignore", divide="ignore"):
        if log:
            est, nul, lo, hi = np.log(est), np.log(nul), np.log(lo), np.log(hi)
        se = (hi - lo) / (2 * z)
        stat = np.where(se > 0, np.abs(est - nul) / se, np.nan)
    return altman_bland_p(stat), normal_p(stat), _out(stat)


def katz_interval(x1, n1, x2, n2, z: float = Z95):
    """Katz log interval of the ratio (x1/n1) / (x2/n2), no continuity correction.

    ln-scale half-width h = z * sqrt(1/x1 - 1/n1 + 1/x2 - 1/n2); returns (ratio, low, high).
    NaN where a count is <= 0 or a total is not above its count's lower bound.
    """
    x1, n1, x2, n2 = (np.asarray(v, dtype=float) for v in (x1, n1, x2, n2))
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (x1 > 0) & (x2 > 0) & (n1 >= x1) & (n2 >= x2)
        r = (x1 / n1) / (x2 / n2)
        h = z * np.sqrt(np.clip(1 / x1 - 1 / n1 + 1 / x2 - 1 / n2, 0, None))
        ratio = np.where(ok, r, np.nan)
        low = np.where(ok, np.exp(np.log(r) - h), np.nan)
        high = np.where(ok, np.exp(np.log(r) + h), np.nan)
    return _out(ratio), _out(low), _out(high)


def is_integral(*values, tol: float = 1e-9) -> bool:
    """True when every value is finite and within ``tol`` of an integer."""
    for v in values:
        a = np.asarray(v, dtype=float)
        if not np.all(np.isfinite(a)) or not np.all(np.abs(a - np.round(a)) <= tol):
            return False
    return True


def binomial_exact_p(x, n, p0) -> float:
    """Exact two-sided binomial p of x successes in n against p0 (scipy ``binomtest``).

    Defined only for integer counts; NaN for fractional x (race shares: use the bootstrap).
    """
    if not is_integral(x, n) or not (n >= 1) or not (0 < p0 < 1) or not (0 <= x <= n):
        return float("nan")
    return float(sps.binomtest(int(round(x)), int(round(n)), float(p0)).pvalue)


def fisher_exact_p(x1, n1, x2, n2) -> float:
    """Fisher's exact two-sided p that x1/n1 and x2/n2 share one proportion (ratio = 1).

    Defined only for integer counts; NaN otherwise.
    """
    if not is_integral(x1, n1, x2, n2) or not (0 <= x1 <= n1) or not (0 <= x2 <= n2) or min(n1, n2) < 1:
        return float("nan")
    a, b = int(round(x1)), int(round(x2))
    table = [[a, int(round(n1)) - a], [b, int(round(n2)) - b]]
    return float(sps.fisher_exact(table).pvalue)
