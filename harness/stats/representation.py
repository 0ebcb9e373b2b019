"""Representation ratio R_rep (paper eqs. 1-2) with the Wilson interval and Cohen's d.

R_rep = p / p*, p = x / n with x a (fractional, for race) count over n characters. The interval
is the Wilson score interval of the *observed* proportion (count form, n = nu + 1) divided by
p*; the paper's p is the Altman-Bland approximation from that interval (digest 5.2, 6.3).

Cohen's d (digest 5.3, 10.8; the paper gives no formula): ``d_method="standard"`` reports
d = (p - p*) / s with s the SD of the per-character variable (sqrt(p (1 - p)) for a binary
gender or pair indicator; the SD of the per-character likelihoods for race, passed as ``sd``).
This reproduces Table S13d. ``d_method="paper"`` additionally divides single-gender rows by
sqrt(10), the unexplained factor the digest finds in S13a-c (reported / standard = 3.12-3.25
in 31 of 42 rows); such rows carry the flag ``d_paper_sqrt10``.
"""

from __future__ import annotations

import math

from .intervals import Z95, binomial_exact_p, is_integral, p_from_interval, wilson_interval
from .results import RepresentationResult

__all__ = ["D_METHODS", "KINDS", "cohens_d", "representation_ratio"]

KINDS = ("race", "gender", "pair")
D_METHODS = ("standard", "paper")
SQRT10 = math.sqrt(10.0)


#: An sd at or below this is no spread: the sd of equal shares or likelihoods in [0, 1] computes to ~1e-16.
SD_FLOOR = 1e-12


def cohens_d(share: float, p_star: float, sd: float | None = None) -> float:
    """d = (share - p*) / sd; sd defaults to sqrt(share (1 - share)). NaN when share = 0 ("N/A").

    >>> round(cohens_d(0.260 * 0.0175, 0.0175), 3)  # S13d ChatGPT4 M-M (digest 6.3.9)
    -0.192
    """
    if not (share > 0) or math.isnan(p_star):
        return float("nan")
    s = math.sqrt(share * (1 - share)) if sd is None else float(sd)
    if not (s > SD_FLOOR):  # likelihoods all alike: their sd is rounding noise (1e-16), d came out near 1e16
        return float("nan")
    return (share - p_star) / s


def _nan(reason: str, **kw) -> RepresentationResult:
    return RepresentationResult(statistic="R_rep", method="wilson", reason=reason, **kw)


def representation_ratio(
    x: float,
    n: float,
    p_star: float,
    *,
    kind: str = "race",
    sd: float | None = None,
    d_method: str = "standard",
    z: float = Z95,
) -> RepresentationResult:
    """R_rep of one cell with the paper's Wilson interval, Altman-Bland p and Cohen's d.

    Args:
        x: count of the group (sum of likelihoods for race; may be fractional).
        n: characters in the denominator (nu = n - 1).
        p_star: baseline share p* in (0, 1).
        kind: "race", "gender" or "pair" (selects the d convention and the exact test).
        sd: SD of the per-character variable for d (race: SD of the likelihoods); default
            sqrt(p (1 - p)).
        d_method: "standard" or "paper" (see the module docstring).
        z: critical value; the paper uses 1.96.

    Returns:
        ``RepresentationResult``; NaN with ``reason`` for an empty group, a NaN count, a count
        outside [0, n] or a missing / non-positive baseline.

    >>> r = representation_ratio(0.961 * 0.004 * 14985, 14985, 0.004)  # S13a ChatGPT4 NH/PI
    >>> round(r.ci_low, 3), round(r.ci_high, 3), round(r.p, 3), r.nu
    (0.743, 1.242, 0.772, 14984.0)
    """
    if kind not in KINDS:
        raise ValueError(f"representation_ratio: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if d_method not in D_METHODS:
        raise ValueError(f"representation_ratio: d_method must be one of {', '.join(D_METHODS)}, got {d_method!r}")
    x, n = float(x), float(n)
    base = dict(x=x, n=n, p_star=float("nan") if p_star is None else float(p_star))
    if math.isnan(n) or n <= 0:
        return _nan("empty group: no characters in the denominator", **base)
    base["nu"] = n - 1
    if p_star is None or math.isnan(float(p_star)) or not (0 < float(p_star) < 1):
        return _nan(f"no usable baseline p* (got {p_star!r}); supply p* in (0, 1)", **base)
    if math.isnan(x):
        return _nan("count is NaN (NaN likelihoods must count as 0 before this point)", **base)
    if x < 0 or x > n:
        return _nan(f"count {x:g} outside [0, n = {n:g}]", **base)
    p_star = float(p_star)
    share = x / n
    low, high = wilson_interval(x, n, z)
    p_ab, p_norm, _ = p_from_interval(share, p_star, low, high, z=z)
    flags: list[str] = []
    if kind == "race":
        p_ex = float("nan")
        flags.append("no_exact_fractional")
    elif is_integral(x, n):
        p_ex = binomial_exact_p(x, n, p_star)
    else:
        p_ex = float("nan")
        flags.append("no_exact_fractional")
    d = cohens_d(share, p_star, sd)
    if d_method == "paper" and kind == "gender" and not math.isnan(d):
        d /= SQRT10
        flags.append("d_paper_sqrt10")
    if share == 0:
        flags.append("zero_count")
    return RepresentationResult(
        statistic="R_rep", estimate=share / p_star, ci_low=low / p_star, ci_high=high / p_star, p=p_ab,
        nu=n - 1, method="wilson", p_normal=p_norm, p_exact=p_ex, flags=tuple(flags), share=share, d=d,
        **{k: v for k, v in base.items() if k != "nu"},
    )
