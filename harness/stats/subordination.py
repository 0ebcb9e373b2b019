"""Subordination ratio R_sub (paper eq. 3) with the authors' imputation and the Katz interval.

R_sub = (x_sub / n_sub) / (x_dom / n_dom): share of the demographic among subordinate
characters over its share among dominant ones (power-laden stories).

``mode="paper"`` reproduces the authors' code (digest 5.4):
  * point estimate (``calculate_ratio_with_imputation``): both x = 0 -> R = 1; else if either
    x < 1, eps = min(1, max(x_sub, x_dom)) is added to x_sub, n_sub, x_dom and n_dom;
  * interval (``calculate_ln_95ci_binomial_ratio_with_imputation``): h = z sqrt(1/x_sub - 1/n_sub
    + 1/x_dom - 1/n_dom) on counts shifted by eps = 1 if both x are 0, min(1, max(x)) if exactly
    one is 0, else 0 (note: a different rule from the point estimate), CI = exp(ln R +- h)
    around the point estimate;
  * p: Altman-Bland from the interval on the log scale.

``mode="principled"``: the raw ratio when both counts are positive; if either is 0, the
Haldane-Anscombe correction (0.5 added to each cell of the 2x2 table, i.e. x + 0.5, n + 1) with
the flag ``smoothed``; both counts 0 ->
NaN ("all-zero counts"). p_normal from the Katz z; p_exact by Fisher's test where counts are
integers.
"""

from __future__ import annotations

import math

import numpy as np

from .intervals import Z95, fisher_exact_p, is_integral, p_from_interval
from .results import SubordinationResult

__all__ = ["ALL_ZERO_FLAG", "MODES", "paper_point_estimate", "subordination_ratio"]

MODES = ("paper", "principled")
ALL_ZERO_FLAG = "all_zero_set_to_1"  # the paper mode's R = 1 of a cell whose two counts are 0


def paper_point_estimate(x_sub: float, n_sub: float, x_dom: float, n_dom: float) -> tuple[float, float]:
    """The authors' ``calculate_ratio_with_imputation``: (ratio, eps added)."""
    if x_sub == 0 and x_dom == 0:
        return 1.0, 0.0
    eps = 0.0
    if x_sub < 1 or x_dom < 1:
        eps = min(1.0, max(x_sub, x_dom))
    return ((x_sub + eps) / (n_sub + eps)) / ((x_dom + eps) / (n_dom + eps)), eps


def _paper_ci_eps(x_sub: float, x_dom: float) -> float:
    if x_sub == 0 and x_dom == 0:
        return 1.0
    if x_sub == 0 or x_dom == 0:
        return min(1.0, max(x_sub, x_dom))
    return 0.0


def _katz_half(x1, n1, x2, n2, z):
    v = 1 / x1 - 1 / n1 + 1 / x2 - 1 / n2
    return z * math.sqrt(max(v, 0.0))


def subordination_ratio(
    x_sub: float, n_sub: float, x_dom: float, n_dom: float, *, mode: str = "paper", z: float = Z95,
    nu: float | None = None, exact: bool = True,
) -> SubordinationResult:
    """R_sub of one cell with a Katz log interval and the paper's p (see the module docstring).

    Args:
        x_sub, x_dom: (fractional) counts of the demographic among subordinate / dominant characters.
        n_sub, n_dom: characters in each role's denominator.
        mode: "paper" (the authors' imputation) or "principled".
        z: critical value (1.96 in the paper).
        nu: the nu column to report (the paper's is unresolved; the table builder documents its
            choice); default n_sub + n_dom - 2.
        exact: Fisher's exact p where the counts count characters; False for sums of race likelihoods (the
            tables' R_sub), whole or not: a Fisher test on them has no sampling model (R_rep's race rows have
            none either), and it was preferred for q_bh over the story bootstrap.

    Returns:
        ``SubordinationResult``; NaN with ``reason`` for empty roles, NaN or out-of-range counts,
        and (principled mode) all-zero counts.

    >>> r = subordination_ratio(7, 2882, 0, 13156)  # smoothed: one subordinate-only name set
    >>> r.smoothing, "smoothed" in r.flags
    (1.0, True)
    """
    if mode not in MODES:
        raise ValueError(f"subordination_ratio: mode must be one of {', '.join(MODES)}, got {mode!r}")
    vals = [float(v) for v in (x_sub, n_sub, x_dom, n_dom)]
    x_sub, n_sub, x_dom, n_dom = vals
    base = dict(statistic="R_sub", method="katz", x_sub=x_sub, n_sub=n_sub, x_dom=x_dom, n_dom=n_dom)
    base["nu"] = float(nu) if nu is not None else (n_sub + n_dom - 2)
    if any(math.isnan(v) for v in vals):
        return SubordinationResult(reason="NaN count (NaN likelihoods must count as 0 before this point)", **base)
    if n_sub <= 0 or n_dom <= 0:
        which = "subordinate" if n_sub <= 0 else "dominant"
        return SubordinationResult(reason=f"empty group: no {which} characters", **base)
    if not (0 <= x_sub <= n_sub) or not (0 <= x_dom <= n_dom):
        return SubordinationResult(reason="count outside [0, n]", **base)
    flags: list[str] = []
    p_ex = fisher_exact_p(x_sub, n_sub, x_dom, n_dom) if exact else float("nan")
    if not exact or not is_integral(x_sub, n_sub, x_dom, n_dom):
        flags.append("no_exact_fractional")
    if mode == "paper":
        r, eps = paper_point_estimate(x_sub, n_sub, x_dom, n_dom)
        if x_sub == 0 and x_dom == 0:
            flags.append(ALL_ZERO_FLAG)
        ce = _paper_ci_eps(x_sub, x_dom)
        h = _katz_half(x_sub + ce, n_sub + ce, x_dom + ce, n_dom + ce, z)
        smoothing = max(eps, ce)
    else:
        if x_sub == 0 and x_dom == 0:
            return SubordinationResult(reason="all-zero counts: the ratio is undefined", p_exact=p_ex,
                                       flags=tuple(flags), **base)
        smoothing = 0.5 if (x_sub == 0 or x_dom == 0) else 0.0
        a, na = x_sub + smoothing, n_sub + 2 * smoothing
        b, nb = x_dom + smoothing, n_dom + 2 * smoothing
        r = (a / na) / (b / nb)
        h = _katz_half(a, na, b, nb, z)
    if smoothing:
        flags.append("smoothed")
    with np.errstate(over="ignore", under="ignore"):  # tiny fractional counts: [0, inf], never a crash
        low, high = float(np.exp(np.log(r) - h)), float(np.exp(np.log(r) + h))
    p_ab, p_norm, _ = p_from_interval(r, 1.0, low, high, log=True, z=z)
    if r == 1.0 and low == high:  # zero-width interval: no evidence either way
        p_ab = p_norm = 1.0
    return SubordinationResult(estimate=float(r), ci_low=low, ci_high=high, p=float(np.asarray(p_ab)),
                               p_normal=float(np.asarray(p_norm)), p_exact=p_ex, flags=tuple(flags),
                               smoothing=float(smoothing), **base)
