"""The statistics stage's own tables (harness.audit.statistics) on hand-made characters."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.audit.statistics import likelihood_histogram
from harness.identity import RACES


def test_likelihood_histogram_bins_are_closed_on_the_right():
    """Fig. 1c,d counts names in (t, t + 2] (digest 5.5, the authors' code). The bins were
    np.histogram's [t, t + 2): a 0% name filled the first bin, an exact 2% or 14% name moved up
    one bin (likelihoods [0, .02, .03] gave [1, 2, 0] for bins 0, 2, 4), and 100 * 0.14 =
    14.000000000000002 would have moved up even in right-closed bins without rounding."""
    white = [0.0, 0.02, 0.03, 0.14, 0.58, 1.0, np.nan]
    chars = pd.DataFrame([dict(model="m", first_name=f"N{i}", **(dict.fromkeys(RACES, 0.0) | {"white": w}))
                          for i, w in enumerate(white)])
    hist = likelihood_histogram(chars)
    w = hist[hist.group == "white"].set_index("bin_low")["count"]
    # by hand: 0 in no bin; 2 in (0, 2]; 3 in (2, 4]; 14 in (12, 14]; 58 in (56, 58]; 100 in (98, 100]
    expected = pd.Series(0, index=np.arange(0, 100, 2))
    expected[[0, 2, 12, 56, 98]] = 1
    assert w.tolist() == expected.tolist() and w.sum() == 5
    assert (hist.bin_high - hist.bin_low == 2).all()
    assert hist[hist.group == "black"]["count"].sum() == 0  # every black likelihood is 0
