"""Mixed models from sufficient statistics: against statsmodels MixedLM on the full pair table,
and the digest's internal-consistency identities (section 4.8) at paper scale."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import patsy
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.regression.mixed_linear_model import MixedLMParams

from harness.errors import DataError
from harness.homogeneity.mixed import (
    design_matrix, fit_lmm, fit_paper_models, lrt_type3, standardization, standardize_sums,
)
from harness.kernels import homogeneity as hk

from homogeneity_fixtures import GENDERS, RACES, synthetic_corpus


def pair_table(x, texts):
    """Every within-cell pair cosine (i < j) with its cell labels: what the paper fitted."""
    x = x.astype(np.float64)
    xu = x / np.linalg.norm(x, axis=1, keepdims=True)
    out = []
    for key, g in texts.groupby(["race", "gender", "format"], sort=False):
        idx = g.index.to_numpy()
        C = xu[idx] @ xu[idx].T
        iu = np.triu_indices(len(idx), 1)
        out.append(pd.DataFrame({"race": key[0], "gender": key[1], "format": key[2], "y": C[iu]}))
    return pd.concat(out, ignore_index=True)


def cells_of(x, texts):
    keys = list(zip(texts["race"], texts["gender"], texts["format"]))
    order = list(dict.fromkeys(keys))
    cell = np.array([order.index(k) for k in keys])
    gs = hk.reference(x, cell, n_groups=len(order))
    cells = pd.DataFrame(order, columns=["race", "gender", "format"])
    cells["n_pairs"], cells["sum"], cells["sumsq"] = gs.n_pairs, gs.sum, gs.sumsq
    return cells


def statsmodels_model(P, formula, coding="treatment", drop=()):
    d = design_matrix(P, formula, coding=coding)
    keep = [i for i, t in enumerate(d.terms) if t not in drop]
    return sm.MixedLM(P["y"].to_numpy(), d.X[:, keep], groups=P["format"].to_numpy())


def statsmodels_fit(P, formula, reml, coding="treatment", drop=()):
    m = statsmodels_model(P, formula, coding, drop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # environment.md: the default optimiser can stall on this kind of data
        return m.fit(reml=reml, method=["nm", "bfgs"], maxiter=5000)


@pytest.fixture(scope="module")
def unbalanced():
    x, texts = synthetic_corpus(lambda rng: int(rng.integers(6, 14)), n_formats=5, seed=7)
    return cells_of(x, texts), pair_table(x, texts)


@pytest.mark.parametrize("formula", ["race", "gender", "race + gender", "race * gender"])
@pytest.mark.parametrize("reml", [True, False])
def test_matches_statsmodels_on_the_full_pair_table(unbalanced, formula, reml):
    cells, P = unbalanced
    ours = fit_lmm(cells, formula, reml=reml)
    ref = statsmodels_fit(P, formula, reml)
    case = f"{formula} reml={reml}"
    assert ours.n_obs == len(P)
    # statsmodels' own likelihood, evaluated at our estimates, is our log-likelihood
    m = statsmodels_model(P, formula)
    m.reml, m.cov_pen, m.fe_pen = reml, None, None  # what fit() sets before evaluating
    params = MixedLMParams.from_components(fe_params=ours.fe, cov_re=np.array([[ours.sigma2_group / ours.sigma2]]))
    np.testing.assert_allclose(m.loglike(params, profile_fe=False), ours.loglik, rtol=1e-10, err_msg=case)
    # and our 1-D optimum is at least as good as statsmodels' optimiser's
    assert ours.loglik >= ref.llf - 1e-6, case
    np.testing.assert_allclose(ours.loglik, ref.llf, rtol=1e-8, err_msg=case)
    np.testing.assert_allclose(ours.fe, ref.fe_params, atol=1e-6, err_msg=case)
    np.testing.assert_allclose(ours.se, ref.bse_fe, rtol=2e-3, err_msg=case)
    np.testing.assert_allclose(ours.sigma2, ref.scale, rtol=1e-4, err_msg=case)
    np.testing.assert_allclose(ours.sigma2_group, float(np.asarray(ref.cov_re).ravel()[0]), rtol=2e-3, err_msg=case)
    assert ours.converged


def patsy_sum_fit(P, drop=None):
    """ML fit of ``y ~ race * gender + (1 | format)`` with patsy's own sum coding (R ``contr.sum``: the last
    level, White / woman, is -1 in every column), without ``term``'s columns: a design built apart from ours."""
    X = patsy.dmatrix("C(race, Sum) * C(gender, Sum)", P)
    names = {"race": "C(race, Sum)", "gender": "C(gender, Sum)", "race:gender": "C(race, Sum):C(gender, Sum)"}
    cols = np.ones(X.shape[1], dtype=bool)
    if drop:
        cols[X.design_info.term_name_slices[names[drop]]] = False
    m = sm.MixedLM(P["y"].to_numpy(), np.asarray(X)[:, cols], groups=P["format"].to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return m.fit(reml=False, method=["nm", "bfgs"], maxiter=5000)


def test_type3_lrt_matches_statsmodels_ml_fits(unbalanced):
    """afex's Type-3 LRT is ML + sum coding + each term's columns dropped; the reference design is patsy's
    ``Sum`` coding, so a wrong sum coding in ``design_matrix`` (e.g. dummy columns: race tested among women
    only) cannot hide behind a reference that uses it too. p is the chi-square tail at the term's df."""
    cells, P = unbalanced
    lrt = lrt_type3(cells).set_index("term")
    full = patsy_sum_fit(P)
    for term, df in (("race", 3), ("gender", 1), ("race:gender", 3)):
        restricted = patsy_sum_fit(P, drop=term)
        chisq = 2 * (full.llf - restricted.llf)
        np.testing.assert_allclose(lrt.loc[term, "chisq"], chisq, rtol=1e-5, atol=1e-6, err_msg=term)
        assert lrt.loc[term, "df"] == df
        assert lrt.loc[term, "p"] == pytest.approx(stats.chi2.sf(chisq, df), rel=1e-4, abs=1e-12), term
        np.testing.assert_allclose(lrt.loc[term, "loglik_full"], full.llf, rtol=1e-8, err_msg=term)
    assert 1e-6 < lrt.loc["race:gender", "p"] < 0.999  # a p-value the df can move (race's is ~0 at any df)


def test_fit_on_z_scale_equals_rescaled_raw_fit(unbalanced):
    cells, P = unbalanced
    st = standardization(cells["n_pairs"], cells["sum"], cells["sumsq"])
    assert st.mean == pytest.approx(P["y"].mean(), rel=1e-12)
    assert st.sd == pytest.approx(P["y"].std(ddof=1), rel=1e-10)  # R scale(): n - 1
    zs, zq = standardize_sums(cells["n_pairs"], cells["sum"], cells["sumsq"], st)
    z = (P["y"] - st.mean) / st.sd
    assert zs.sum() == pytest.approx(z.sum(), abs=1e-8) and zq.sum() == pytest.approx((z * z).sum(), rel=1e-10)
    raw = fit_lmm(cells, "race * gender")
    zfit = fit_paper_models(cells).models["interaction"]
    np.testing.assert_allclose(zfit.fe[1:], raw.fe[1:] / st.sd, rtol=1e-6)
    np.testing.assert_allclose(zfit.t, (raw.fe - np.r_[st.mean, np.zeros(len(raw.fe) - 1)]) / st.sd / zfit.se,
                               rtol=1e-6)


# ----------------------------------------------------------------------------- section 4.8


def paper_scale_cells(sigma2=0.69, sigma2_format=0.32, seed=0, race_eff=None, women=0.037, women_by_race=None):
    """104 cells x 124,750 pairs with additive cell means (race, gender, format effects) and a
    within-cell variance sigma2: the sufficient statistics of a corpus shaped like the paper's.
    ``women_by_race``: an extra Women effect per race (an interaction)."""
    rng = np.random.default_rng(seed)
    n = 124_750
    race_eff = race_eff or {"African": 0.33, "Asian": 0.31, "Hispanic": 0.18, "White": 0.0}
    women_by_race = women_by_race or {}
    fmt_eff = rng.normal(0, np.sqrt(sigma2_format), 13)
    rows = []
    for r in RACES:
        for g in GENDERS:
            for f in range(13):
                mu = -0.21 + race_eff[r] + (women + women_by_race.get(r, 0.0)) * (g == "woman") + fmt_eff[f]
                rows.append({"race": r, "gender": g, "format": f"f{f:02d}", "n_pairs": n, "sum": n * mu,
                             "sumsq": n * (sigma2 + mu * mu)})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def paper_fit():
    cells = paper_scale_cells()
    return cells, fit_paper_models(cells, standardize=False)


def test_se_identities_of_the_balanced_design(paper_fit):
    cells, suite = paper_fit
    race, gender, inter = suite.models["race"], suite.models["gender"], suite.models["interaction"]
    assert race.n_obs == 12_974_000
    # race contrasts: sqrt(sigma2 (1/n1 + 1/n2)), n = 26 x 124,750
    assert race.se[1] == pytest.approx(np.sqrt(race.sigma2 * 2 / 3_243_500), rel=1e-9)
    assert race.se[1] == pytest.approx(0.000652, abs=5e-7)  # Table 3: 0.00065 at sigma2 = 0.69
    assert gender.se[1] == pytest.approx(np.sqrt(gender.sigma2 * 2 / 6_487_000), rel=1e-9)
    # interaction model: simple contrasts sqrt(2 sigma2 / 1,621,750), interactions sqrt(4 sigma2 / 1,621,750)
    assert inter.se[1] == pytest.approx(np.sqrt(inter.sigma2 * 2 / 1_621_750), rel=1e-9)
    assert inter.se[-1] == pytest.approx(np.sqrt(inter.sigma2 * 4 / 1_621_750), rel=1e-9)
    assert inter.se[-1] == pytest.approx(0.00130, abs=5e-6)
    # intercept SE ~ sqrt(sigma2_format / 13)
    assert race.se[0] == pytest.approx(np.sqrt(race.sigma2_group / 13), rel=1e-3)


def test_satterthwaite_df_is_n_minus_formats_minus_p_plus_1(paper_fit):
    _, suite = paper_fit
    assert suite.models["race"].df[1:] == pytest.approx([12_973_984] * 3, rel=1e-6)  # as printed in section 4.2
    assert suite.models["gender"].df[1] == pytest.approx(12_973_986, rel=1e-6)
    inter = suite.models["interaction"]
    assert inter.df[1:] == pytest.approx([12_974_000 - 13 - 7] * 7, rel=1e-6)
    assert inter.df[0] < 20  # the intercept is informed by the 13 formats


def test_fixed_effects_are_cell_mean_contrasts(paper_fit):
    cells, suite = paper_fit
    mean = cells.assign(m=cells["sum"] / cells["n_pairs"]).groupby(["race", "gender"])["m"].mean()
    inter = dict(zip(suite.models["interaction"].names, suite.models["interaction"].fe))
    assert inter["(Intercept)"] == pytest.approx(mean["White", "man"], abs=1e-9)  # interaction intercept = White men
    assert inter["raceHispanic"] == pytest.approx(mean["Hispanic", "man"] - mean["White", "man"], abs=1e-9)
    race = dict(zip(suite.models["race"].names, suite.models["race"].fe))
    by_race = mean.groupby("race").mean()
    assert race["raceAfrican"] == pytest.approx(by_race["African"] - by_race["White"], abs=1e-9)
    assert race["raceAfrican"] == pytest.approx(0.33, abs=1e-9)
    se = suite.simple_effects.set_index("race")
    for r in RACES:  # emmeans Women - Men within race = Women + race x Women
        assert se.loc[r, "estimate"] == pytest.approx(mean[r, "woman"] - mean[r, "man"], abs=1e-9)
    assert se.loc["African", "estimate"] == pytest.approx(inter["genderwoman"] + inter["raceAfrican:genderwoman"])
    assert suite.models["race"].sigma2 == pytest.approx(0.69 + 0.037**2 / 4, rel=1e-5)  # gender left in the residual


def table3_interaction_cells():
    """Cells whose interaction model is Table 3's (BERT-2): Women 0.00021, African x Women 0.0097, Asian x Women
    0.013, Hispanic x Women 0.12, sigma2 0.69."""
    return paper_scale_cells(race_eff={"African": 0.33, "Asian": 0.31, "Hispanic": 0.12, "White": 0.0}, women=0.00021,
                             women_by_race={"African": 0.0097, "Asian": 0.013, "Hispanic": 0.12})


def test_p_values_and_intervals_are_two_sided_at_the_satterthwaite_df():
    """Table 3 / footnote 9: the Women term of the interaction model, 0.00021 (SE 0.00092), is not significant:
    t = 0.23, two-sided p = .82 (df ~ 13 million, so the t reference is the normal). The intercept's
    interval uses its own small Satterthwaite df (about the 12 of 13 formats), not the normal quantile."""
    suite = fit_paper_models(table3_interaction_cells(), standardize=False, lrt=False)
    tab = suite.models["interaction"].coef_table().set_index("term")
    w = tab.loc["genderwoman"]
    assert w["estimate"] == pytest.approx(0.00021, abs=1e-9)
    assert w["se"] == pytest.approx(np.sqrt(0.69 * 2 / 1_621_750), rel=1e-4)
    assert w["t"] == pytest.approx(0.2277, abs=1e-3)
    assert w["p"] == pytest.approx(2 * stats.norm.sf(w["t"]), rel=1e-5) and round(w["p"], 2) == 0.82
    half = stats.norm.ppf(0.975) * w["se"]
    assert (w["ci_low"], w["ci_high"]) == pytest.approx((w["estimate"] - half, w["estimate"] + half), rel=1e-5)
    i = tab.loc["(Intercept)"]
    assert i["df"] == pytest.approx(12, rel=0.01)
    assert i["p"] == pytest.approx(2 * stats.t.sf(abs(i["t"]), 12), rel=0.01)
    assert i["ci_high"] - i["estimate"] == pytest.approx(stats.t.ppf(0.975, 12) * i["se"], rel=0.01)


def test_simple_effects_are_table_a4_women_minus_men_with_asymptotic_z():
    """Table A4 (BERT-2): Women - Men within White is 0.00021, z = 0.23, p = .82; within each race the SE is
    sqrt(2 sigma2 / 1,621,750) (the covariance of Women and race x Women enters for the minority races)."""
    suite = fit_paper_models(table3_interaction_cells(), standardize=False, lrt=False)
    se = suite.simple_effects.set_index("race")
    assert list(se.index) == RACES and set(se["contrast"]) == {"woman - man"}
    want = {"African": 0.00991, "Asian": 0.01321, "Hispanic": 0.12021, "White": 0.00021}
    for r, est in want.items():
        row = se.loc[r]
        assert row["estimate"] == pytest.approx(est, abs=1e-8), r
        assert row["se"] == pytest.approx(np.sqrt(0.69 * 2 / 1_621_750), rel=1e-4), r
        assert row["z"] == pytest.approx(row["estimate"] / row["se"]), r
        assert row["p"] == pytest.approx(2 * stats.norm.sf(abs(row["z"])), rel=1e-9, abs=1e-300), r
        half = stats.norm.ppf(0.975) * row["se"]
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((row["estimate"] - half, row["estimate"] + half)), r
    assert round(se.loc["White", "z"], 2) == 0.23 and round(se.loc["White", "p"], 2) == 0.82
    assert se.loc["African", "z"] == pytest.approx(10.7, abs=0.1)  # Table A4 10.79 from unrounded coefficients


def test_lrt_degrees_of_freedom_and_boundary():
    cells = paper_scale_cells()
    lrt = lrt_type3(cells).set_index("term")
    assert lrt["df"].to_dict() == {"race": 3, "gender": 1, "race:gender": 3}
    assert lrt.loc["race:gender", "chisq"] == pytest.approx(0, abs=1e-3)  # no interaction was built in
    assert lrt.loc["race", "chisq"] > 1e5


def test_degenerate_designs_are_reported():
    cells = paper_scale_cells()
    with pytest.raises(DataError, match="single level"):
        fit_lmm(cells.assign(race="White"), "race")
    with pytest.raises(DataError, match="not in"):
        fit_lmm(cells.assign(race="Martian"), "race")
    with pytest.raises(DataError, match="lack"):
        fit_lmm(cells.drop(columns="sumsq"), "race")


def test_formulas_codings_and_fits_that_cannot_be_made_are_named_in_one_line():
    from harness.errors import ConfigError
    from harness.homogeneity.mixed import parse_formula, simple_effects

    assert parse_formula("1") == [] and parse_formula(" ") == []
    assert parse_formula("race * gender + race") == ["race", "gender", "race:gender"]  # a term once
    with pytest.raises(ConfigError, match=r"^formula 'race\*gender\*format': only two-way interactions"):
        parse_formula("race*gender*format")
    cells = paper_scale_cells()
    with pytest.raises(ConfigError, match=r"^coding must be 'treatment' or 'sum', got 'helmert'$"):
        design_matrix(cells, "race", coding="helmert")
    with pytest.raises(DataError, match=r"^design: cells lack a 'age' column \(needed by the formula\)$"):
        design_matrix(cells, "race + age")
    with pytest.raises(ConfigError, match=r"^design: reference level 'Martian' of race is not one of \["):
        design_matrix(cells, "race", refs={"race": "Martian"})
    with pytest.raises(DataError, match=r"^fit_lmm: no cell has any pair$"):
        fit_lmm(cells.assign(n_pairs=0), "race")
    few = cells.groupby("race").head(1)  # 4 cells of one pair each: 4 observations, 4 fixed effects
    with pytest.raises(DataError, match=r"^fit_lmm: 4 observations cannot identify 4 fixed effects and two variances"):
        fit_lmm(few.assign(n_pairs=1), "race")
    with pytest.raises(DataError, match=r"^simple_effects: model has no column 'genderwoman'; fit the interaction"):
        simple_effects(fit_lmm(cells, "race"))
    # a main-effects model has the gender column but no race:gender ones: it gave the reference race's row alone,
    # every other race skipped as a level without data
    with pytest.raises(DataError, match=r"^simple_effects: model has no race:gender columns; fit the interaction"):
        simple_effects(fit_lmm(cells, "race + gender"))
    assert len(simple_effects(fit_lmm(cells, "race * gender"))) == cells.race.nunique()
    with pytest.raises(DataError, match=r"^standardization: fewer than two pair cosines in total$"):
        standardization([1], [0.5], [0.25])
    with pytest.raises(DataError, match=r"^standardization: every pair cosine is identical; nothing to standardise$"):
        standardization([2, 3], [1.0, 1.5], [0.5, 0.75])  # five cosines of 0.5
