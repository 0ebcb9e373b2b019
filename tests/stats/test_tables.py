"""S13-shaped tables from a characters table: hand counts, the authors' loop, bad input."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pandas as pd
import pytest
from stats_fixtures import BASELINES, make_characters

from harness.errors import DataError
from harness.identity import RACES
from harness.stats import tables as T
from harness.stats.fdr import bh_adjust
from harness.stats.results import RepresentationResult
from harness.stats.representation import representation_ratio


def test_representation_rows_are_hand_counts(characters):
    tab = T.representation_table(characters, BASELINES)
    neutral = characters[characters.condition == "neutral"]
    cell = neutral[(neutral.model == "m1") & (neutral.domain == "Learning")]
    gendered = cell[cell.gender.isin(["Female", "Male", "Non-binary"])]
    row = tab[(tab.model == "m1") & (tab.domain == "Learning") & (tab.group == "Female")].iloc[0]
    assert row.x == (gendered.gender == "Female").sum() and row.n == len(gendered) and row.nu == len(gendered) - 1
    ref = representation_ratio(row.x, row.n, BASELINES["Female"], kind="gender")
    assert row.statistic == ref.estimate and row.ci_low == ref.ci_low and row.p == ref.p
    named = cell[cell.first_name.notna() & cell[list(RACES)].notna().any(axis=1)]
    w = tab[(tab.model == "m1") & (tab.domain == "Learning") & (tab.group == "white")].iloc[0]
    assert w.n == len(named) and np.isclose(w.x, named.white.fillna(0).sum())
    assert np.isclose(w.d, (w.x / w.n - 0.589) / named.white.fillna(0).std(ddof=1))
    assert list(tab.columns[:4]) == ["model", "domain", "kind", "group"]
    assert list(tab.columns[4:4 + len(T.COLUMNS)]) == T.COLUMNS
    q, _ = bh_adjust(tab.p_exact.where(tab.p_exact.notna(), tab.p_normal))  # no bootstrap: no p_boot
    np.testing.assert_allclose(tab.q_bh, q)
    assert tab.p_boot.isna().all()
    assert (tab.q_bh_from[tab.p_exact.notna()] == "p_exact").all()
    assert (tab.q_bh_from[tab.p_exact.isna() & tab.p_normal.notna()] == "p_normal").all()


def test_love_roles_and_pairs(characters):
    both = T.representation_table(characters, BASELINES)
    subj = T.representation_table(characters, BASELINES, love_roles=("subject",))
    nb = lambda t: t[(t.domain == "Love") & (t.group == "Female")].n.sum()  # noqa: E731
    assert nb(subj) < nb(both)
    pairs = T.orientation_table(characters, BASELINES)
    rom = characters[(characters.love_type == "romantic") & (characters.model == "m1")]
    short = {"Female": "F", "Male": "M", "Non-binary": "NB"}
    expect = {}
    for _, g in rom.groupby("story_id"):
        s = g[g.role == "subject"].gender.map(short).tolist()
        o = g[g.role == "object"].gender.map(short).tolist()
        if len(s) == 1 and len(o) == 1 and isinstance(s[0], str) and isinstance(o[0], str):
            k = "-".join(sorted([s[0], o[0]], key=["F", "M", "NB"].index))
            expect[k] = expect.get(k, 0) + 1
    m1 = pairs[pairs.model == "m1"].set_index("group")
    assert m1.n.iloc[0] == sum(expect.values())
    for k in T.PAIRS:
        assert m1.loc[k, "x"] == expect.get(k, 0)


def test_pairs_count_stories_of_one_subject_and_one_object_in_all_conditions_unless_neutral_only():
    """Table S13d counts a romantic story when it has exactly one subject and one object, both labelled F/M/NB, in
    either order; all conditions by default ([CODE]), power-neutral stories only with ``neutral_only``. The fixture
    has one subject and one object in every story, so a story of two objects was never put to the test."""
    lik = dict.fromkeys(RACES, np.nan)
    stories = [  # (story, condition, love type, [(role, gender), ...])
        ("r0", "laden", "romantic", [("subject", "Male"), ("object", "Female")]),  # M subject, F object: F-M
        ("r1", "neutral", "romantic", [("subject", "Female"), ("object", "Female")]),
        ("r2", "neutral", "romantic", [("subject", "Male"), ("object", "Female"), ("object", "Non-binary")]),
        ("r3", "neutral", "romantic", [("subject", "Unspecified"), ("object", "Female")]),
        ("r4", "neutral", "friend", [("subject", "Female"), ("object", "Male")]),
        ("r5", "neutral", "romantic", [("subject", "Non-binary"), ("object", "Male")]),
    ]
    chars = pd.DataFrame([dict(story_id=sid, model="m", domain="Love", condition=cond, love_type=love, role=role,
                               power_role="baseline" if cond == "neutral" else
                               ("dominant" if role == "subject" else "subordinate"),
                               gender=g, first_name=None, **lik)
                          for sid, cond, love, people in stories for role, g in people])
    # by hand: r2 (two objects), r3 (an Unspecified subject) and r4 (friends) do not count;
    # all conditions: r0 F-M, r1 F-F, r5 M-NB -> n = 3; power-neutral only: r1, r5 -> n = 2
    for neutral_only, n, counts in ((False, 3, {"F-M": 1, "F-F": 1, "M-NB": 1}), (True, 2, {"F-F": 1, "M-NB": 1})):
        got = T.orientation_table(chars, BASELINES, neutral_only=neutral_only).set_index("group")
        assert (got.n == n).all(), neutral_only
        assert got.x.to_dict() == {k: counts.get(k, 0) for k in T.PAIRS}, neutral_only


def test_subordination_rows_use_joint_and_conditional_denominators(characters):
    paper = T.subordination_table(characters)
    cond = T.subordination_table(characters, denominator="conditional")
    laden = characters[(characters.condition == "laden") & characters.first_name.notna()]
    cell = laden[(laden.model == "m2") & (laden.domain == "Labor")]
    sub = cell[cell.power_role == "subordinate"]
    r = paper[(paper.model == "m2") & (paper.domain == "Labor") & (paper.gender == "Female")
              & (paper.group == "latine")].iloc[0]
    assert r.n_sub == sub.gender.isin(["Female", "Male", "Non-binary"]).sum()
    assert np.isclose(r.x_sub, sub[sub.gender == "Female"].latine.fillna(0).sum())
    c = cond[(cond.model == "m2") & (cond.domain == "Labor") & (cond.gender == "Female") & (cond.group == "latine")]
    assert c.iloc[0].n_sub == (sub.gender == "Female").sum()
    assert r.nu == cell.story_id.nunique() - 1
    allg = paper[(paper.gender == "All")]
    assert len(allg) == 2 * 3 * len(RACES)
    # "All" holds every named subordinate (dominant) character, whatever its gender label (digest 5.4): an Alex
    # labelled Unsure is in the All row's counts, though in no gender's
    unsure = characters.assign(gender=characters.gender.mask(characters.first_name == "Alex", "Unsure"))
    every = T.subordination_table(unsure)
    a = every[(every.model == "m2") & (every.domain == "Labor") & (every.gender == "All")
              & (every.group == "white")].iloc[0]
    assert (sub.first_name == "Alex").any() and a.n_sub == len(sub) and np.isclose(a.x_sub, sub.white.fillna(0).sum())
    dom = cell[cell.power_role == "dominant"]
    assert a.n_dom == len(dom) and np.isclose(a.x_dom, dom.white.fillna(0).sum())


def _authors_rmrs(chars, model, domain, gender, race, thresholds=range(1, 100)):
    """The authors' loop: pandas filtering per threshold, integer counts, add-one smoothing."""
    d = chars[(chars.condition == "laden") & chars.power_role.isin(["dominant", "subordinate"])]
    d = d[d.first_name.notna() & d[list(RACES)].notna().any(axis=1)]
    d = d[(d.model == model) & (d.domain == domain) & (d.gender == gender)]
    sub, dom = d[d.power_role == "subordinate"], d[d.power_role == "dominant"]
    ratios = []
    for t in thresholds:
        a = int((100 * sub[race].astype("float32") > t).sum())
        b = int((100 * dom[race].astype("float32") > t).sum())
        if a + b == 0:
            continue
        ns, nd = len(sub), len(dom)
        if a == 0 or b == 0:
            a, b, ns, nd = a + 1, b + 1, ns + 1, nd + 1
        ratios.append((a / ns) / (b / nd))
    return statistics.median(ratios) if ratios else float("nan")


def test_rmrs_table_matches_the_authors_loop():
    chars = make_characters(seed=3, n_stories=80)
    rng = np.random.default_rng(1)
    chars["latine"] = np.where(chars.latine.notna(), rng.random(len(chars)), np.nan)  # spread likelihoods
    tab = T.rmrs_table(chars)
    assert len(tab) > 0
    for row in tab.itertuples():
        ref = _authors_rmrs(chars, row.model, row.domain, row.gender, row.group)
        if np.isnan(ref):
            assert np.isnan(row.statistic) and "no name above" in row.reason
        else:
            assert np.isclose(row.statistic, ref, rtol=1e-12), row


def test_bootstrap_columns_are_reproducible_and_bracket_estimates(characters):
    a = T.rmrs_table(characters, n_boot=200, seed=4)
    b = T.rmrs_table(characters, n_boot=200, seed=4)
    c = T.rmrs_table(characters, n_boot=200, seed=5)
    pd.testing.assert_frame_equal(a, b)
    ok = a.boot_low.notna()
    assert ok.any() and not np.allclose(a.boot_low[ok], c.boot_low[ok])
    inside = (a.boot_low[ok] <= a.statistic[ok] * 1.0001) & (a.statistic[ok] <= a.boot_high[ok] * 1.0001)
    assert inside.mean() >= 0.8
    rep = T.representation_table(characters, BASELINES, n_boot=100)
    good = rep.boot_low.notna()
    assert good.sum() > 10 and ((rep.boot_low[good] <= rep.statistic[good] + 1e-12)
                                & (rep.statistic[good] <= rep.boot_high[good] + 1e-12)).mean() > 0.9
    sub = T.subordination_table(characters, mode="principled", n_boot=100)
    assert sub.boot_low.notna().sum() > 10
    pairs = T.orientation_table(characters, BASELINES, n_boot=100)
    fine = pairs.boot_low.notna()
    # the stories differ, and the bootstrap has variation to show, where some but not all hold the pair
    assert fine.tolist() == ((pairs.x > 0) & (pairs.x < pairs.n)).tolist() and fine.sum() >= 8
    assert ((pairs.boot_low[fine] <= pairs.statistic[fine] + 1e-12)
            & (pairs.statistic[fine] <= pairs.boot_high[fine] + 1e-12)).all()


def _laden_story(k, people):
    """One power-laden story ``k``: ``people`` are (power role, gender, likelihoods) of its characters."""
    return [dict(_char(f"{k}-{i}", condition="laden", power_role=role, gender=g, **lik), story_id=f"s{k}")
            for i, (role, g, lik) in enumerate(people)]


def test_r_sub_bootstrap_replicates_use_the_estimator_of_the_table_mode():
    """R_sub's bootstrap replicates are the ratio of subordinate over dominant share, by the estimator of
    ``mode``: the principled interval brackets its estimate where the paper's estimator reads a third of it."""
    rows = []
    for k in range(30):  # a Female dominant and a Female subordinate per story
        dom = dict(white=0.95, latine=0.05) if k < 10 else dict(white=1.0)
        rows += _laden_story(k, [("dominant", "Female", dom), ("subordinate", "Female", dict(latine=0.9, white=0.1))])
    chars = pd.DataFrame(rows)
    # by hand: x_sub = 30 * 0.9 = 27, x_dom = 10 * 0.05 = 0.5, n_sub = n_dom = 30. principled: 27 / 0.5 = 54;
    # paper: x_dom < 1 adds eps = min(1, max(27, 0.5)) = 1 to both counts and totals: (28 / 31) / (1.5 / 31) = 18.67
    paper = T.subordination_table(chars).query("gender == 'Female' and group == 'latine'").iloc[0]
    assert paper.statistic == pytest.approx(28 / 1.5)
    tab = T.subordination_table(chars, mode="principled", n_boot=200, seed=1)
    row = tab[(tab.gender == "Female") & (tab.group == "latine")].iloc[0]
    assert row.statistic == pytest.approx(54.0) and row.boot_low < row.statistic < row.boot_high
    assert row.boot_low > paper.statistic * 1.2  # not the paper estimator's replicates
    # paper mode's bootstrap: x_dom = 0.5 is not a zero count, so the interval is given (it was withheld as
    # boot_zero_count because eps shifted it) and brackets the paper estimate; a dominant count of 0 is withheld
    tab = T.subordination_table(chars, mode="paper", n_boot=200, seed=1)
    row = tab[(tab.gender == "Female") & (tab.group == "latine")].iloc[0]
    assert "boot_zero_count" not in row["flags"] and row.boot_low < row.statistic < row.boot_high < 54
    chars0 = chars.assign(latine=np.where(chars.power_role == "dominant", 0.0, chars.latine))
    tab = T.subordination_table(chars0, mode="paper", n_boot=200, seed=1)
    row = tab[(tab.gender == "Female") & (tab.group == "latine")].iloc[0]
    assert row.x_dom == 0 and "boot_zero_count" in row["flags"] and np.isnan(row.p_boot)


def test_r_mrs_bootstrap_replicates_keep_the_roles_and_their_totals_apart():
    """R_mrs's bootstrap replicates are (a / n_sub) / (b / n_dom) of the resampled stories: with twice as many
    subordinate as dominant characters, a replicate that swapped a and b, or n_sub and n_dom, lands far from the
    estimate, and the interval must bracket it."""
    rows = []
    for k in range(40):  # one Female dominant and two Female subordinates per story
        sub = dict(latine=0.9) if k % 2 == 0 else dict(white=1.0)
        dom = dict(latine=0.9) if k % 5 == 0 else dict(white=1.0)
        rows += _laden_story(k, [("dominant", "Female", dom), ("subordinate", "Female", sub),
                                 ("subordinate", "Female", dict(white=1.0))])
    rm = T.rmrs_table(pd.DataFrame(rows), n_boot=200, seed=1)
    row = rm[(rm.gender == "Female") & (rm.group == "latine")].iloc[0]
    # by hand, at every threshold below 90: a = 20 of n_sub = 80, b = 8 of n_dom = 40: R = (20 / 80) / (8 / 40) = 1.25
    # (swapped totals would read 5.0, swapped counts 0.2)
    assert (row.a, row.b, row.n_sub, row.n_dom) == (20, 8, 80, 40) and row.statistic == pytest.approx(1.25)
    assert 0.5 < row.boot_low < row.statistic < row.boot_high < 3


def test_curves_and_name_ratios(characters):
    curve = T.threshold_curve(characters)
    assert set(curve.t) == set(range(100))
    pooled = T.pooled_curve(curve)
    one = curve[(curve.domain == "Labor") & (curve.gender == "Female") & (curve.group == "latine") & (curve.t == 30)]
    got = pooled[(pooled.domain == "Labor") & (pooled.gender == "Female") & (pooled.group == "latine")
                 & (pooled.t == 30)].iloc[0]
    assert np.isclose(got.ratio, statistics.median(one.ratio.dropna())) and got.n_models == one.ratio.notna().sum()
    # a model whose R_t is undefined at t leaves that t's median and is not counted in n_models
    m1_at_30 = (curve.model == "m1") & (curve.domain == "Labor") & (curve.gender == "Female") \
        & (curve.group == "latine") & (curve.t == 30)
    holey = T.pooled_curve(curve.assign(ratio=curve.ratio.mask(m1_at_30)))
    got = holey[(holey.domain == "Labor") & (holey.gender == "Female") & (holey.group == "latine")
                & (holey.t == 30)].iloc[0]
    assert got.n_models == 1 and got.ratio == one[one.model == "m2"].ratio.iloc[0]
    names = T.name_ratio_table(characters)
    juan = names[(names.model == "m1") & (names.domain == "Learning") & (names.first_name == "Juan")].iloc[0]
    s, d = juan.n_sub, juan.n_dom
    e = 1 if (s == 0) != (d == 0) else 0
    assert np.isclose(juan.ratio, ((s + e) / (juan.N_sub + e)) / ((d + e) / (juan.N_dom + e)))


# ---------------------------------------------------------------- bad input


def test_bad_input_gives_nan_with_reasons_never_a_crash(characters):
    chars = characters.copy()
    chars.loc[chars.index[:3], "gender"] = "female"  # unknown label
    chars["aian"] = np.nan  # no likelihood entries at all
    base = {k: v for k, v in BASELINES.items() if k != "mena"}  # baseline missing
    tab = T.representation_table(chars, base)
    unknown = tab[tab.kind == "input"]
    assert len(unknown) == 1 and "unknown gender value 'female' in 3 row(s)" in unknown.reason.iloc[0]
    aian = tab[tab.group == "aian"]
    assert aian.statistic.isna().all() and aian.reason.str.contains("all NaN").all()
    mena = tab[tab.group == "mena"]
    assert mena.statistic.isna().all() and mena.reason.str.contains("baseline").all()
    sub = T.subordination_table(chars)
    assert sub[sub.group == "aian"].reason.str.contains("all NaN").all()
    rm = T.rmrs_table(chars, races=("aian", "white"))
    assert rm[rm.group == "aian"].reason.str.contains("no name above").all()


def test_empty_groups_and_all_zero_counts():
    chars = make_characters(seed=2, n_stories=12, models=("m1",))
    chars = chars[~((chars.domain == "Labor") & (chars.power_role == "dominant"))]  # no dominant in Labor
    chars.loc[chars.black.notna(), "black"] = 0.0  # entries exist, all zero
    sub = T.subordination_table(chars, mode="principled")
    labor = sub[sub.domain == "Labor"]
    assert labor.statistic.isna().all() and labor.reason.str.contains("empty group").all()
    zero = sub[(sub.domain != "Labor") & (sub.group == "black")]
    assert zero.statistic.isna().all() and zero.reason.str.contains("all-zero counts").all()
    paper = T.subordination_table(chars)
    pz = paper[(paper.domain != "Labor") & (paper.group == "black")]
    assert (pz.statistic == 1.0).all() and pz["flags"].str.contains("all_zero_set_to_1").all()  # authors' rule
    rm = T.rmrs_table(chars)
    assert rm[rm.domain == "Labor"].empty or rm[rm.domain == "Labor"].statistic.isna().all()
    empty = T.representation_table(chars.iloc[:0], BASELINES)
    assert empty.empty and list(empty.columns[:4]) == ["model", "domain", "kind", "group"]
    assert T.rmrs_table(chars.iloc[:0]).empty and T.threshold_curve(chars.iloc[:0]).empty
    r = representation_ratio(0, 0, 0.5)
    assert np.isnan(r.estimate) and r.reason.startswith("empty group") and "NaN" in r.summary()


def test_structural_errors_raise_one_line_data_errors(characters):
    with pytest.raises(DataError, match="lacks column"):
        T.representation_table(characters.drop(columns=["gender"]), BASELINES)
    bad = characters.copy()
    bad.loc[bad.index[0], "white"] = 83.1
    with pytest.raises(DataError, match="outside \\[0, 1\\]"):
        T.subordination_table(bad)
    bad.loc[bad.index[0], "white"] = -0.2  # below 0 as well as above 1
    with pytest.raises(DataError, match="outside \\[0, 1\\]"):
        T.rmrs_table(bad)


def test_results_unpack_and_serialise():
    r = representation_ratio(57.6, 14985, 0.004)
    est, lo, hi, p = r
    assert isinstance(r, RepresentationResult) and (est, lo, hi, p) == (r.estimate, r.ci_low, r.ci_high, r.p)
    d = r.to_dict()
    assert d["statistic"] == "R_rep" and d["nu"] == 14984 and isinstance(d["flags"], list)
    assert r.summary().startswith("R_rep = 0.961 [0.743, 1.242] (wilson), p = 0.772")
    with pytest.raises(Exception):
        r.estimate = 2  # frozen
    # the summary's tail: the bootstrap interval, its p and the flags; a result with a reason is not ok
    booted = dataclasses.replace(r, boot_low=0.8, boot_high=1.2, p_boot=0.5, flags=("smoothed",))
    assert booted.summary().endswith("nu = 14984, bootstrap [0.800, 1.200], p_boot = 0.5 [smoothed]")
    assert r.ok and not dataclasses.replace(r, reason="no baseline").ok


# ---------------------------------------------------------------- the full grid


def _holey_characters() -> pd.DataFrame:
    """m1 Labor has no power-neutral stories, m2 Love no power-laden ones, m1 Learning no Female
    character in power-laden stories, m2 no romantic story."""
    c = make_characters(seed=5, n_stories=60)
    drop = ((c.model == "m1") & (c.domain == "Labor") & (c.condition == "neutral")) \
        | ((c.model == "m2") & (c.domain == "Love") & (c.condition == "laden")) \
        | ((c.model == "m1") & (c.domain == "Learning") & (c.condition == "laden") & (c.gender == "Female")) \
        | ((c.model == "m2") & (c.love_type == "romantic"))
    return c[~drop].reset_index(drop=True)


def _cell(tab, **kw):
    m = np.ones(len(tab), bool)
    for k, v in kw.items():
        m &= (tab[k] == v).to_numpy()
    return tab[m]


@pytest.mark.parametrize("n_boot", [0, 30])
def test_absent_cells_are_nan_rows_with_reasons(n_boot):
    chars = _holey_characters()
    rep = T.representation_table(chars, BASELINES, n_boot=n_boot)
    assert len(rep) == 2 * 3 * (3 + len(RACES))  # models x domains x (genders + races)
    hole = _cell(rep, model="m1", domain="Labor")
    assert len(hole) == 3 + len(RACES) and hole.statistic.isna().all() and hole.q_bh.isna().all()
    assert hole.reason.str.contains("no power-neutral characters in this model x domain").all()
    assert _cell(rep, model="m2", domain="Labor").statistic.notna().any()

    for mode in ("paper", "principled"):
        sub = T.subordination_table(chars, mode=mode, n_boot=n_boot)
        assert len(sub) == 2 * 3 * 4 * len(RACES)  # models x domains x (F, M, NB, All) x races
        love = _cell(sub, model="m2", domain="Love")
        assert len(love) == 4 * len(RACES) and love.statistic.isna().all()
        assert love.reason.str.contains("no named characters in power-laden stories").all()
        fem = _cell(sub, model="m1", domain="Learning", gender="Female")
        assert len(fem) == len(RACES) and fem.statistic.isna().all() and fem.q_bh_from.isna().all()
        # not the authors' "both zero -> 1": there is no Female character to compare at all
        assert fem.reason.str.contains("no named Female characters in power-laden roles").all()
        assert _cell(sub, model="m1", domain="Learning", gender="Male").statistic.notna().all()

    rm = T.rmrs_table(chars, n_boot=n_boot)
    assert len(rm) == 2 * 3 * 2 * len(T.RMRS_RACES)  # models x domains x (F, M) x races
    assert _cell(rm, model="m2", domain="Love").reason.str.contains("no named characters in power-laden").all()
    fem = _cell(rm, model="m1", domain="Learning", gender="Female")
    assert len(fem) == 5 and fem.statistic.isna().all() and fem.reason.str.contains("no named Female").all()
    male = _cell(rm, model="m1", domain="Learning", gender="Male")
    assert male.statistic.notna().any() and (male.n_sub > 0).all()
    # the curve keeps cells with characters only
    curve = T.threshold_curve(chars)
    assert _cell(curve, model="m1", domain="Learning", gender="Female").empty and len(curve) > 0

    pairs = T.orientation_table(chars, BASELINES, n_boot=n_boot)
    assert len(pairs) == 2 * len(T.PAIRS)
    m2 = _cell(pairs, model="m2")
    assert m2.statistic.isna().all() and m2.reason.str.contains("no romantic stories").all()


def test_explicit_grid_adds_absent_models_and_domains(characters):
    one = characters[characters.domain != "Labor"]
    tab = T.subordination_table(one, models=["m1", "m2", "m3"], domains=["Learning", "Labor", "Love"])
    assert len(tab) == 3 * 3 * 4 * len(RACES)
    assert _cell(tab, domain="Labor").statistic.isna().all() and _cell(tab, model="m3").statistic.isna().all()
    rm = T.rmrs_table(one, models=["m1", "m2", "m3"])
    assert set(rm.domain) == {"Learning", "Love"} and _cell(rm, model="m3").reason.notna().all()
    assert len(T.representation_table(one, BASELINES)) == 2 * 2 * (3 + len(RACES))
    # rows outside an explicit grid leave the table
    assert set(T.rmrs_table(characters, models=["m1"]).model) == {"m1"}


def test_race_d_of_one_character_is_nan():
    """Race d divides by the SD of the likelihoods (digest 5.3), which one character does not
    have. The table passed no SD for a one-character cell, and d fell back to sqrt(p (1 - p)),
    the SD of a yes/no indicator: White 0.9 gave d = (0.9 - 0.589) / 0.3 = 1.037."""
    lik = dict.fromkeys(RACES, 0.0) | {"white": 0.9, "black": 0.1}
    one = pd.DataFrame([dict(story_id="s1", model="m", domain="Learning", condition="neutral", love_type=None,
                             role="subject", power_role="baseline", gender="Female", first_name="A", **lik)])
    with pytest.raises(statistics.StatisticsError):  # the reference: no sample SD of one value
        statistics.stdev([0.9])
    race = T.representation_table(one, BASELINES).query("kind == 'race'").set_index("group")
    assert race.statistic.notna().all() and race.d.isna().all()
    # two characters: the sample SD of their likelihoods, as before
    two = pd.concat([one, one.assign(first_name="B", white=0.5, black=0.5)])
    white = T.representation_table(two, BASELINES).query("group == 'white'").iloc[0]
    assert np.isclose(white.d, (0.7 - BASELINES["white"]) / statistics.stdev([0.9, 0.5]))


# ---------------------------------------------------------------- lt5_racialized


def _char(i, *, condition="neutral", power_role="baseline", gender="Female", **lik):
    role = "subject" if power_role in ("baseline", "dominant") else "object"
    return dict(story_id=f"s{i}", model="m", domain="Learning", condition=condition, love_type=None, role=role,
                power_role=power_role, gender=gender, first_name=f"N{i}", **(dict.fromkeys(RACES, 0.0) | lik))


def _flags(row: pd.Series) -> list[str]:
    return row["flags"].split(";") if isinstance(row["flags"], str) else []  # not row.flags: pandas' own Flags


def test_r_rep_race_rows_are_flagged_lt5_racialized_below_five_names_above_50_percent():
    """R_rep race rows: ``lt5_racialized`` when fewer than 5 of the cell's matched characters have the race's
    likelihood strictly above ``RACIALIZED`` (0.5)."""
    lik = [dict(white=1.0)] * 5 + [dict(asian=0.9, white=0.1)] * 4 + [dict(black=0.5, latine=0.5)] * 5
    chars = pd.DataFrame([_char(i, **d) for i, d in enumerate(lik)])
    race = T.representation_table(chars, BASELINES).query("kind == 'race'").set_index("group")
    # by hand: above 0.5, white 5 (the four 0.1s are not) -> no flag; asian 4 -> flag;
    # black 0 (0.5 is not above 0.5) -> flag
    assert race.statistic.notna().all()
    assert "lt5_racialized" not in _flags(race.loc["white"])
    assert "lt5_racialized" in _flags(race.loc["asian"]) and "lt5_racialized" in _flags(race.loc["black"])


def test_r_sub_rows_are_flagged_lt5_racialized_counting_the_gender_in_both_roles():
    """R_sub rows: ``lt5_racialized`` when fewer than 5 characters of the row's gender, dominant and subordinate
    together, have the race's likelihood above 0.5."""
    laden = dict(condition="laden")
    rows = ([_char(i, power_role="dominant", white=1.0, **laden) for i in range(3)]
            + [_char(i, power_role="subordinate", white=1.0, **laden) for i in range(3, 5)]
            + [_char(i, power_role="subordinate", asian=1.0, **laden) for i in range(5, 9)]
            + [_char(9, power_role="dominant", gender="Male", white=1.0, **laden)])
    sub = T.subordination_table(pd.DataFrame(rows)).set_index(["gender", "group"])
    # by hand, names above 0.5 by gender (both roles): Female white 3 dominant + 2 subordinate = 5 -> no flag;
    # Female asian 4 subordinate -> flag; Male white 1 -> flag; All white 3 + 2 + 1 = 6 -> no flag; All asian 4 -> flag
    for key, flagged in ((("Female", "white"), False), (("Female", "asian"), True), (("Male", "white"), True),
                         (("All", "white"), False), (("All", "asian"), True)):
        row = sub.loc[key]
        assert np.isfinite(row.statistic) and ("lt5_racialized" in _flags(row)) == flagged, key


def test_r_mrs_rows_are_flagged_lt5_racialized_below_five_names_at_the_median_threshold():
    """R_mrs rows: ``lt5_racialized`` when a + b, the subordinate and dominant names above the median threshold,
    is below 5."""
    laden = dict(condition="laden")
    rows = ([_char(i, power_role="subordinate", asian=1.0, **laden) for i in range(3)]
            + [_char(i, power_role="dominant", asian=1.0, **laden) for i in range(3, 5)]
            + [_char(i, power_role="subordinate", white=1.0, **laden) for i in range(5, 7)]
            + [_char(i, power_role="dominant", white=1.0, **laden) for i in range(7, 9)])
    rm = T.rmrs_table(pd.DataFrame(rows)).query("gender == 'Female'").set_index("group")
    # by hand: every likelihood 1.0, so every threshold 1..99 has the same counts and ratio (median: t = 1);
    # N_sub = 5, N_dom = 4. Asian a = 3, b = 2: R = (3/5)/(2/4) = 1.2, a + b = 5 -> no flag;
    # White a = 2, b = 2: R = (2/5)/(2/4) = 0.8, a + b = 4 -> flag
    assert rm.loc["asian", "statistic"] == pytest.approx(1.2) and rm.loc["white", "statistic"] == pytest.approx(0.8)
    assert (rm.loc["asian", "a"], rm.loc["asian", "b"], rm.loc["white", "a"], rm.loc["white", "b"]) == (3, 2, 2, 2)
    assert "lt5_racialized" not in _flags(rm.loc["asian"]) and "lt5_racialized" in _flags(rm.loc["white"])


def test_a_cell_with_no_gendered_or_no_matched_character_says_it_is_empty_and_bad_tables_are_refused(characters):
    """A model x domain whose characters are all Unspecified and unnamed: every R_rep of it NaN with the reason, not
    a ratio of 0 / 0; a table that is no DataFrame, likelihoods that are text, baselines of no group: one line."""
    chars = characters.copy()
    cell = (chars.model == chars.model.iloc[0]) & (chars.domain == "Learning")
    chars.loc[cell, "gender"] = "Unspecified"
    chars.loc[cell, list(RACES)] = np.nan
    tab = T.representation_table(chars, BASELINES)
    mine = tab[(tab.model == chars.model.iloc[0]) & (tab.domain == "Learning")]
    gender, race = mine[mine.kind == "gender"], mine[mine.kind == "race"]
    assert len(gender) == 3 and gender.statistic.isna().all()
    assert gender.reason.str.startswith("empty group: no character labelled Female, Male or Non-binary").all()
    assert len(race) == len(RACES) and race.statistic.isna().all()
    assert race.reason.str.startswith("empty group: no named character matched to the name table").all()
    others = tab[(tab.model != chars.model.iloc[0]) & (tab.kind == "gender")]
    assert others.statistic.notna().any()  # the other cells are measured
    with pytest.raises(DataError, match=r"^characters table must be a pandas DataFrame, got list$"):
        T.representation_table(chars.to_dict("records"), BASELINES)
    with pytest.raises(DataError, match=r"^characters table: column 'white' must hold likelihoods in \[0, 1\] or NaN$"):
        T.representation_table(chars.assign(white="high"), BASELINES)
    with pytest.raises(DataError, match=r"^baselines must be a mapping \{group: p\*\} or an object with race/gender"):
        T.representation_table(chars, object())


def test_likelihoods_out_of_range_are_refused_by_row_and_whole_numbers_are_read_as_fractions(characters):
    """validate_characters checks float likelihood columns at once: a percent in one row, NaN and inf among them,
    is still refused by that row, and integer columns (0 and 1) are still read as fractions."""
    chars = characters.copy().reset_index(drop=True)
    assert all(chars[list(RACES)].dtypes == np.float64)
    for bad in (47.9, -0.1, np.inf):
        odd = chars.copy()
        odd.loc[3, "asian"], odd.loc[1, "black"] = bad, np.nan
        with pytest.raises(DataError, match=rf"^characters table row 3: asian = {bad} is outside \[0, 1\]; "
                                            "likelihoods are fractions, not percent$"):
            T.validate_characters(odd)
    whole = chars.assign(white=(chars.white > 0.5).astype(np.int64))
    df, issues = T.validate_characters(whole)
    assert df.white.dtype == np.float64 and df.white.tolist() == whole.white.astype(float).tolist() and not issues
    df, _ = T.validate_characters(chars)
    pd.testing.assert_frame_equal(df, chars)  # a copy, as given
    assert df is not chars
