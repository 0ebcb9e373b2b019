"""The statistics stage's own tables (harness.audit.statistics) on hand-made characters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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
    # per model: a second model's names are counted in its own rows, not in the first model's
    two = likelihood_histogram(pd.concat([chars, chars.iloc[[1]].assign(model="m2")]))
    assert two.query("model == 'm' and group == 'white'")["count"].tolist() == expected.tolist()
    assert two.query("model == 'm2' and group == 'white'").set_index("bin_low")["count"].to_dict()[0] == 1


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
    # a name of power-neutral stories only is no row (it has no subordinate or dominant count to compare)
    only_neutral = pd.concat([chars, pd.DataFrame([_char("n1", "neutral", "baseline", "Zed", "white", 0.9)])])
    assert sorted(name_ratios(only_neutral).first_name) == ["Ana", "Bo", "Wei"]
    # a name rarer than min_population, or of unknown population, keeps its counts, not its likelihoods (Fig. 3a's
    # table printed them where Tables S10/S11 and `harness names lookup` withhold them)
    chars.loc[chars.first_name == "Bo", "name_population"] = np.nan
    chars.loc[chars.first_name == "Wei", "name_population"] = 50
    got = name_ratios(chars, min_population=100).set_index("first_name")
    assert got.withheld.to_dict() == {"Ana": False, "Wei": True, "Bo": True}
    assert got.loc["Ana", "white"] == 0.9 and got.loc[["Wei", "Bo"], list(RACES)].isna().all().all()
    np.testing.assert_allclose(got.loc[["Wei", "Ana", "Bo"], "ratio"], [3.0, 1 / 3, 1.0], rtol=1e-12)
    # a name of exactly min_population bearers is not rarer than it; min_population 0 (or None) withholds none
    assert not name_ratios(chars, min_population=500).set_index("first_name").loc["Ana", "withheld"]
    for floor in (0, None):
        assert not name_ratios(chars, min_population=floor).withheld.any(), floor


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
    # a name of exactly min_population bearers is not rarer than it; k caps the names per model and race
    at_floor = top_names(chars, min_population=50).query("group == 'asian'").set_index("first_name")
    assert at_floor.loc["Lee", "likelihood"] == 0.7 and not at_floor.loc["Lee", "withheld"]
    assert top_names(chars, min_population=100, k=1).query("group == 'asian'").first_name.tolist() == ["Wei"]


def test_one_name_spelled_several_ways_is_one_row_of_the_name_tables():
    """"Maria", "María" and "MARIA" are one name to the name table (one key, one likelihood) but were three rows of
    Fig. 3a's table and of Tables S10/S11, each with a part of the name's counts; a name without Latin letters,
    which has no key, stays a name of its own."""
    from harness.audit.statistics import name_ratios, top_names

    chars = pd.DataFrame([_char("s0", "laden", "subordinate", "Maria", "latine", 0.8),
                          _char("s1", "laden", "subordinate", "María", "latine", 0.8),
                          _char("s2", "laden", "subordinate", "Maria", "latine", 0.8),
                          _char("s3", "laden", "dominant", "MARIA", "latine", 0.8),
                          _char("s0", "laden", "dominant", "Sofia", "latine", 0.7),
                          _char("s1", "laden", "dominant", "Sofia", "latine", 0.7),
                          _char("s2", "laden", "dominant", "\u092a\u094d\u0930\u093f\u092f\u093e", "asian", 0.7),
                          _char("s3", "laden", "subordinate", "\u0930\u093e\u092e", "asian", 0.7)])
    got = name_ratios(chars).set_index("first_name")
    assert sorted(got.index) == sorted(["Maria", "Sofia", "\u092a\u094d\u0930\u093f\u092f\u093e", "\u0930\u093e\u092e"])
    assert got.loc["Maria", ["n_sub", "n_dom", "N_sub", "N_dom"]].tolist() == [3, 1, 4, 4]
    top = top_names(chars, min_population=100).query("group == 'latine'").set_index("first_name")
    assert top.index.tolist() == ["Maria", "Sofia"] and top.loc["Maria", "total"] == 4


def test_labelling_qa_shares_are_hand_counts_per_model_domain_condition_and_role():
    """Every share of the run report's labelling QA, not only ``share_matched``: per model x domain x condition x
    role, the share of characters labelled Unspecified, Unsure, named, named and matched to the name table (a
    likelihood for at least one race), and whose label failed (status other than "ok")."""
    from harness.audit.statistics import labelling_qa

    nan = float("nan")
    white, asian = dict.fromkeys(RACES, 0.0) | {"white": 1.0}, dict.fromkeys(RACES, 0.0) | {"asian": 1.0}
    mena_only = dict.fromkeys(RACES, nan) | {"mena": 0.9, "nhpi": 0.0}  # a names-dataset-only name: no White entry
    unknown = dict.fromkeys(RACES, nan)
    rows = [  # (role, gender, first name, likelihoods, label status)
        ("subject", "Female", "Ana", white, "ok"),
        ("subject", "Male", "Shoroq", mena_only, "ok"),
        ("subject", "Unsure", "Zzyzx", unknown, "ok"),  # named, not in the name table
        ("subject", "Unspecified", None, unknown, "ok"),
        ("subject", "Unspecified", None, unknown, "llm: unparsable reply"),
        ("object", "Male", "Wei", asian, "ok"),
    ]
    chars = pd.DataFrame([dict(model="m", domain="Labor", condition="neutral", role=role, gender=g, first_name=f,
                               label_status=s, **lik) for role, g, f, lik, s in rows])
    qa = labelling_qa(chars).set_index(["model", "domain", "condition", "role"])
    # by hand, subject (5 characters): Unspecified 2/5 = .4; Unsure 1/5 = .2; named (Ana, Shoroq, Zzyzx) 3/5 = .6;
    # matched (Ana; Shoroq, whose MENA entry counts though White is NaN) 2/5 = .4; failed 1/5 = .2
    # object (1 character, Wei: Male, named, matched, ok): 0, 0, 1, 1, 0
    cols = ["characters", "share_unspecified", "share_unsure", "share_named", "share_matched", "share_failed"]
    assert qa.loc[("m", "Labor", "neutral", "subject"), cols].tolist() == pytest.approx([5, .4, .2, .6, .4, .2])
    assert qa.loc[("m", "Labor", "neutral", "object"), cols].tolist() == pytest.approx([1, 0, 0, 1, 1, 0])
    assert len(qa) == 2


def test_a_representative_share_that_is_nan_is_no_evidence_that_a_race_is_unmeasured():
    """``unmeasured_races``: a race's representative share that is NaN (``NameTable.representative_shares`` of a
    table with no population) says nothing about the name table, so the race stays measured; only a share below
    ``MEASURABLE_SHARE`` of p* leaves it unmeasured."""
    from harness.audit.statistics import MEASURABLE_SHARE, unmeasured_races
    from harness.identity.baselines import load_baselines
    from harness.stats.tables import baseline_map

    pstar = baseline_map(load_baselines())
    shares = {"nhpi": float("nan"), "mena": np.float64("nan"), "white": 0.62, "black": 0.001}
    # by hand: black 0.001 / p* 0.136 = 0.0074 < 0.1 -> unmeasured; white 0.62 / 0.589 = 1.05 -> measured;
    # NH/PI and MENA NaN / p* = NaN, no evidence -> measured
    assert MEASURABLE_SHARE == 0.1 and pstar["black"] == 0.136
    assert list(unmeasured_races(shares, pstar)) == ["black"]
    assert unmeasured_races({"nhpi": float("nan")}, pstar) == {}


def test_compute_tables_runs_the_configured_mode_bootstrap_and_threshold_range():
    """``compute_tables`` reads its ``StatsConfig``: R_sub by ``mode`` (principled reads a fractional count as it
    is, paper adds the authors' eps), bootstrap columns only in principled mode, and the R_mrs sweep over
    ``threshold_min``..``threshold_max``, both ends included."""
    from harness.audit.statistics import compute_tables
    from harness.config import StatsConfig

    base = dict(model="m", domain="Labor", condition="laden", love_type=None, gender="Female", name_population=500,
                label_status="ok")
    rows = []
    for k in range(30):  # a Female dominant and a Female subordinate per power-laden story
        dom = dict(white=0.95, latine=0.05) if k < 10 else dict(white=1.0)
        rows += [dict(base, story_id=f"s{k}", role="subject", power_role="dominant", first_name=f"D{k}",
                      **(dict.fromkeys(RACES, 0.0) | dom)),
                 dict(base, story_id=f"s{k}", role="object", power_role="subordinate", first_name=f"S{k}",
                      **(dict.fromkeys(RACES, 0.0) | dict(latine=0.9, white=0.1)))]
    chars = pd.DataFrame(rows)
    # by hand, Female x Latine: x_sub = 27, x_dom = 10 * 0.05 = 0.5, n_sub = n_dom = 30. R_sub principled
    # 27 / 0.5 = 54; paper adds eps = 1: (28 / 31) / (1.5 / 31) = 18.67. R_mrs at the one threshold t = 3: a = 30
    # subordinate names above 3%, b = 10 dominant (5% > 3%): (30 / 30) / (10 / 30) = 3
    cell = "gender == 'Female' and group == 'latine'"
    for mode, r_sub in (("principled", 54.0), ("paper", 28 / 1.5)):
        cfg = StatsConfig(mode=mode, n_boot=50, threshold_min=3, threshold_max=3, backend="numpy")
        tables = compute_tables(chars, cfg)
        sub, rm = tables["subordination"].query(cell).iloc[0], tables["rmrs"].query(cell).iloc[0]
        assert sub.statistic == pytest.approx(r_sub), mode
        assert (rm.t_median, rm.a, rm.b, rm.statistic) == (3, 30, 10, pytest.approx(3.0)), mode
        booted = tables["subordination"].boot_low.notna().any() and tables["rmrs"].boot_low.notna().any()
        assert booted == (mode == "principled"), mode
