"""Frozen result records of the ratio statistics.

Each result unpacks as ``estimate, ci_low, ci_high, p = result`` (statsmodels-style limited
iteration) and offers ``to_dict()`` (plain Python, NaN kept as float NaN) and ``summary()``
(one readable line). ``flags`` name the caveats of a cell (smoothing, small counts, no exact
test); ``reason`` says why the estimate is NaN when it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["RatioResult", "RepresentationResult", "RmrsResult", "SubordinationResult"]

NAN = float("nan")


@dataclass(frozen=True)
class RatioResult:
    """Fields shared by every ratio statistic.

    Attributes:
        statistic: "R_rep", "R_sub" or "R_mrs".
        estimate: the ratio (NaN when undefined; see ``reason``).
        ci_low, ci_high: the 95% interval of ``method``.
        p: two-sided p of the paper's approximation (Altman-Bland from the interval).
        nu: the paper's nu (degrees of freedom column of Table S13).
        method: "wilson", "katz" or "bootstrap" (how ci_low/ci_high were formed).
        p_normal: 2 * (1 - Phi(z)) from the same z (what the approximation approximates).
        p_exact: exact test p (binomial / Fisher) where counts are integers, else NaN.
        p_boot: two-sided story-level percentile-bootstrap p of ratio = 1 (the test that inverts
            the bootstrap interval, ``harness.stats.bootstrap.bootstrap_p``); NaN if not run.
            The principled p of cells with fractional (race) counts, where no exact test exists.
        boot_low, boot_high: story-level cluster bootstrap percentile interval (NaN if not run).
        alpha: 1 - coverage of the interval.
        flags: caveats, e.g. "smoothed", "lt5_racialized", "no_exact_fractional",
            "boot_no_variation", "boot_zero_count", "boot_few_finite" (bootstrap columns withheld, and why:
            ``harness.stats.bootstrap.boot_summary``).
        reason: why the estimate is NaN (None when it is defined).
    """

    statistic: str = ""
    estimate: float = NAN
    ci_low: float = NAN
    ci_high: float = NAN
    p: float = NAN
    nu: float = NAN
    method: str = ""
    p_normal: float = NAN
    p_exact: float = NAN
    p_boot: float = NAN
    boot_low: float = NAN
    boot_high: float = NAN
    alpha: float = 0.05
    flags: tuple[str, ...] = ()
    reason: str | None = None

    def __iter__(self):
        """``estimate, ci_low, ci_high, p = result``."""
        return iter((self.estimate, self.ci_low, self.ci_high, self.p))

    @property
    def ok(self) -> bool:
        """True when the estimate is defined."""
        return self.reason is None and not math.isnan(self.estimate)

    def to_dict(self) -> dict[str, Any]:
        """All fields as plain Python values (flags joined by ';' is left to the tables)."""
        # shallow: every field is a scalar or a tuple of them (dataclasses.asdict's deep copy was slow)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["flags"] = list(self.flags)
        return d

    def summary(self) -> str:
        """One line: statistic, estimate, interval, p, nu and caveats."""
        if not self.ok:
            return f"{self.statistic}: NaN ({self.reason})"
        s = (f"{self.statistic} = {self.estimate:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}] ({self.method}), "
             f"p = {self.p:.3g}, nu = {self.nu:g}")
        if not math.isnan(self.boot_low):
            s += f", bootstrap [{self.boot_low:.3f}, {self.boot_high:.3f}]"
        if not math.isnan(self.p_boot):
            s += f", p_boot = {self.p_boot:.3g}"
        if self.flags:
            s += f" [{', '.join(self.flags)}]"
        return s


@dataclass(frozen=True)
class RepresentationResult(RatioResult):
    """R_rep = (x/n) / p* with the Wilson interval of x/n divided by p*.

    Attributes:
        x: (fractional) count of the group; n: characters in the denominator; p_star: baseline;
        share: x/n; d: Cohen's d (see ``harness.stats.representation.cohens_d``).
    """

    x: float = NAN
    n: float = NAN
    p_star: float = NAN
    share: float = NAN
    d: float = NAN


@dataclass(frozen=True)
class SubordinationResult(RatioResult):
    """R_sub = (x_sub/n_sub) / (x_dom/n_dom) with a Katz log interval.

    Attributes: the raw counts, and ``smoothing`` (the value added by the imputation, 0 if none).
    """

    x_sub: float = NAN
    n_sub: float = NAN
    x_dom: float = NAN
    n_dom: float = NAN
    smoothing: float = 0.0


@dataclass(frozen=True)
class RmrsResult(RatioResult):
    """Median racialized subordination ratio over thresholds.

    Attributes:
        t_median: the threshold whose ratio carries the interval (see ``harness.stats.rmrs``).
        a, b: integer subordinate / dominant counts above ``t_median`` (before smoothing).
        n_sub, n_dom: gender-specific role totals.
        n_thresholds: thresholds with a + b > 0 (those entering the median).
        ratios: R_t per threshold (NaN where skipped), aligned with ``thresholds``.
        thresholds: the swept thresholds.
    """

    t_median: float = NAN
    a: float = NAN
    b: float = NAN
    n_sub: float = NAN
    n_dom: float = NAN
    n_thresholds: int = 0
    ratios: tuple[float, ...] = field(default=(), repr=False)
    thresholds: tuple[int, ...] = field(default=(), repr=False)
