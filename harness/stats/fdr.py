"""Benjamini-Hochberg false discovery rate across the cells of a table (not in the paper).

Wraps ``statsmodels.stats.multitest.multipletests(method="fdr_bh")``; NaN p-values (undefined
cells) are left out of the family and stay NaN.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bh_adjust"]


def bh_adjust(pvalues, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """BH-adjusted p-values (q) and rejections at ``alpha``; NaN p -> NaN q, not rejected.

    >>> q, rej = bh_adjust([0.01, 0.04, float("nan"), 0.03])
    >>> [round(float(v), 3) for v in q[[0, 1, 3]]], rej.tolist()
    ([0.03, 0.04, 0.04], [True, True, False, True])
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=float).ravel()
    q = np.full(p.shape, np.nan)
    rej = np.zeros(p.shape, dtype=bool)
    ok = np.isfinite(p)
    if ok.any():
        r, qv, _, _ = multipletests(np.clip(p[ok], 0, 1), alpha=alpha, method="fdr_bh")
        q[ok], rej[ok] = qv, r
    return q, rej
