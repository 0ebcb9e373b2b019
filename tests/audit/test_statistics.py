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


def _char(sid, condition, power_role, name, race, lik, population=500):
    return dict(model="m", domain="Labor", story_id=sid, condition=condition, power_role=power_role, first_name=name,
                name_population=population, **(dict.fromkeys(RACES, 0.0) | {race: lik}))


def test_name_ratios_are_hand_counts_with_add_one_smoothing():
    """Fig. 3a as the statistics stage writes it: (n_sub / N_sub) / (n_dom / N_dom) per name over the power-laden
    characters, 1 added to a zero count and its total (digest 6.3.7)."""
    from harness.audit.statistics import name_ratios

    chars = pd.DataFrame([_char("s0", "laden", "dominant", "Ana", "white", 0.9),
                          _char("s0", "laden", "subordinate", "Wei", "asian", 0.9),
                          _char("s1", "laden", "dominant", "Ana", "white", 0.9),
                          _char("s1", "laden", "subordinate", "Bo", "white", 0.7),
                          _char("s2", "laden", "dominant", "Bo", "white", 0.7),
                          _char("s2", "laden", "subordinate", "Wei", "asian", 0.9),
                          _char("n0", "neutral", "baseline", "Wei", "asian", 0.9)])  # not power-laden: left out
    got = name_ratios(chars).set_index("first_name")
    # by hand: N_sub = N_dom = 3; Wei 2 sub 0 dom -> (3/4) / (1/4); Ana 0 sub 2 dom -> (1/4) / (3/4); Bo 1 and 1
    assert got.loc[["Wei", "Ana", "Bo"], ["n_sub", "n_dom", "N_sub", "N_dom"]].values.tolist() == [
        [2, 0, 3, 3], [0, 2, 3, 3], [1, 1, 3, 3]]
    np.testing.assert_allclose(got.loc[["Wei", "Ana", "Bo"], "ratio"], [3.0, 1 / 3, 1.0], rtol=1e-12)
    assert got.loc["Wei", "asian"] == 0.9


def test_top_names_count_names_above_60_percent_by_role_and_withhold_rare_likelihoods():
    """Tables S10/S11: names above 60% (strictly) for the race, counted as Base, dominant and subordinate; a name
    rarer than min_population keeps its counts, not its likelihood."""
    from harness.audit.statistics import top_names

    chars = pd.DataFrame([_char("n0", "neutral", "baseline", "Wei", "asian", 0.9),
                          _char("s0", "laden", "subordinate", "Wei", "asian", 0.9),
                          _char("s1", "laden", "subordinate", "Wei", "asian", 0.9),
                          _char("s1", "laden", "dominant", "Lee", "asian", 0.7, population=50),
                          _char("s2", "laden", "dominant", "Kim", "asian", 0.6)])  # exactly 60%: not above
    asian = top_names(chars, min_population=100).query("group == 'asian'").set_index("first_name")
    assert asian.index.tolist() == ["Wei", "Lee"]  # most frequent first; Kim is not above 60%
    assert asian.loc["Wei", ["baseline", "dominant", "subordinate", "total"]].tolist() == [1, 0, 2, 3]
    assert asian.loc["Wei", "likelihood"] == 0.9 and not asian.loc["Wei", "withheld"]
    assert np.isnan(asian.loc["Lee", "likelihood"]) and asian.loc["Lee", "withheld"] and asian.loc["Lee", "total"] == 1
