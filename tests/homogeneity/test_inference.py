"""Text-level inference: replicate sums against the kernel module and brute force, the
bootstrap SE against the U-statistic variance, permutation p-values, cell-mean models."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from harness.homogeneity.inference import cell_mean_models, text_bootstrap, text_permutation, weighted_cell_sums
from harness.homogeneity.mixed import design_matrix, fit_paper_models
from harness.homogeneity.stage import cell_table
from harness.kernels import homogeneity as hk
from harness.kernels.sweep import story_weights

from homogeneity_fixtures import synthetic_corpus


@pytest.fixture(scope="module")
def fitted():
    x, texts = synthetic_corpus(14, n_formats=4, seed=2)
    cells, cell, _ = cell_table(texts, x, backend="numpy")
    return x, cell, cells, fit_paper_models(cells)


def test_replicate_sums_match_the_kernel_and_brute_force(fitted):
    x, cell, cells, _ = fitted
    xu = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    reps = np.arange(1, 7)
    n_b, s_b = weighted_cell_sums(xu, cell, len(cells), lambda rows: story_weights(5, reps, rows), len(reps))
    kern = hk.group_replicates(x, cell, kind="bootstrap", n_rep=6, seed=5, n_groups=len(cells), backend="numpy")
    np.testing.assert_allclose(n_b, kern.n_pairs, rtol=1e-12)
    np.testing.assert_allclose(s_b, kern.sum, rtol=1e-9, atol=1e-9)
    # brute force for one replicate and one cell: sum_{i<j} w_i w_j c_ij
    rows = np.flatnonzero(cell == 3)
    w = story_weights(5, reps, rows)[2].astype(float)
    C = xu[rows] @ xu[rows].T
    iu = np.triu_indices(rows.size, 1)
    assert s_b[2, 3] == pytest.approx((w[iu[0]] * w[iu[1]] * C[iu]).sum(), rel=1e-10)
    assert n_b[2, 3] == pytest.approx((w[iu[0]] * w[iu[1]]).sum())


def test_bootstrap_se_of_a_cell_mean_matches_the_u_statistic_variance():
    # one cell of 150 texts: Var(mean pair cosine) ~ 4 Var(h1) / n (Hoeffding), h1 = a text's
    # mean cosine to the others; the pair-level "SE" sqrt(Var(c)/n_pairs) is far smaller.
    rng = np.random.default_rng(0)
    n, d = 150, 16
    x = (rng.normal(size=(n, d)) + np.array([2.0] + [0] * (d - 1))).astype(np.float32)
    texts = pd.DataFrame({"race": "White", "gender": "man", "format": "f0", "prompt_id": "p", "sample_idx": range(n),
                          "text_clean": "t"})
    cells, cell, gs = cell_table(texts, x, backend="numpy")
    xu = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    B = 400
    n_b, s_b = weighted_cell_sums(xu, cell, 1, lambda rows: story_weights(1, np.arange(1, B + 1), rows), B)
    boot_se = np.std(s_b[:, 0] / n_b[:, 0], ddof=1)
    u_se = np.sqrt(4 * np.var(gs.text_mean, ddof=1) / n)
    assert boot_se == pytest.approx(u_se, rel=0.2)
    pair_se = np.sqrt(gs.var[0] / gs.n_pairs[0])
    assert boot_se > 3 * pair_se


def gls_at(X, fmt, n, s, gamma):
    """GLS fixed effects of y ~ X + (1 | fmt) at variance ratio gamma from per-cell pair counts and sums (the
    Sherman-Morrison identities of mixed.py's docstring, one format at a time)."""
    A, b = (X * n[:, None]).T @ X, X.T @ s
    for f in np.unique(fmt):
        k = fmt == f
        w = gamma / (1 + gamma * n[k].sum())
        a = n[k] @ X[k]
        A, b = A - w * np.outer(a, a), b - w * a * s[k].sum()
    return np.linalg.solve(A, b)


def test_bootstrap_replicates_are_gls_refits_at_the_fitted_variance_ratio(fitted):
    """Each replicate's fixed effects are the GLS estimates, at the model's own sigma2_format / sigma2, of the
    replicate's weighted pair sums on the full sample's z scale (mean and SD held fixed); se_text and the
    percentile interval are their SD and 2.5% / 97.5% quantiles: recomputed here for every term of every model,
    the intercepts (which a lost centring would shift) included. The group means' intervals likewise."""
    x, cell, cells, suite = fitted
    B = 60
    coefs, gm = text_bootstrap(x, cell, cells, suite, n_boot=B, seed=1)
    xu = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    n_b, s_b = weighted_cell_sums(xu, cell, len(cells), lambda rows: story_weights(1, np.arange(1, B + 1), rows), B)
    st = suite.standardization
    z_b = (s_b - st.mean * n_b) / st.sd
    fmt = cells["format"].to_numpy()
    for name, model in suite.models.items():
        X = design_matrix(cells, model.formula).X
        gamma = model.sigma2_group / model.sigma2
        assert gamma > 0.05, name  # the format intercept matters here: GLS is not OLS on replicate weights
        est = np.array([gls_at(X, fmt, n_b[b], z_b[b], gamma) for b in range(B)])
        got = coefs[coefs["model"] == name]
        np.testing.assert_allclose(got["estimate"], model.fe, rtol=1e-12, err_msg=name)
        # float32 weights and the closed form's cancellation leave ~1e-7 of noise
        np.testing.assert_allclose(got["se_text"], est.std(0, ddof=1), rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(got["ci_low_text"], np.quantile(est, 0.025, axis=0), atol=1e-6, err_msg=name)
        np.testing.assert_allclose(got["ci_high_text"], np.quantile(est, 0.975, axis=0), atol=1e-6, err_msg=name)
    g = gm.set_index(["grouping", "level"])
    for grouping, col, level in (("race", "race", "White"), ("gender", "gender", "woman")):
        k = (cells[col] == level).to_numpy()
        rep = z_b[:, k].sum(1) / n_b[:, k].sum(1)
        row = g.loc[(grouping, level)]
        assert row["se_text"] == pytest.approx(rep.std(ddof=1), rel=1e-5)
        assert (row["ci_low_text"], row["ci_high_text"]) == pytest.approx(tuple(np.quantile(rep, [0.025, 0.975])),
                                                                          abs=1e-6)


def test_bootstrap_tables(fitted):
    x, cell, cells, suite = fitted
    coefs, gm = text_bootstrap(x, cell, cells, suite, n_boot=60, seed=1)
    assert len(coefs) == sum(len(m.names) for m in suite.models.values())
    race = coefs[(coefs["model"] == "race") & (coefs["term"] != "(Intercept)")]
    assert (race["ci_low_text"] < race["estimate"]).all() and (race["estimate"] < race["ci_high_text"]).all()
    assert (race["se_ratio"] > 1).all()  # texts, not pairs, are independent
    g = gm.set_index(["grouping", "level"])
    z = (cells["sum"] - suite.standardization.mean * cells["n_pairs"]) / suite.standardization.sd
    white = cells["race"] == "White"
    assert g.loc[("race", "White"), "mean_z"] == pytest.approx(z[white].sum() / cells["n_pairs"][white].sum())
    again, _ = text_bootstrap(x, cell, cells, suite, n_boot=60, seed=1)
    pd.testing.assert_frame_equal(coefs, again)  # seeded


def test_bootstrap_group_means_skip_replicates_that_leave_a_level_without_pairs():
    """With 2 texts per cell and 2 formats, many replicates leave a race x gender level with no pair
    (weight 0 on one of its texts in both cells). The closed-form weighted sums of such a replicate
    leave a rounding residue over zero pairs; that must count as a replicate without a mean (left
    out, and counted in n_boot_valid), not as an infinite one that turns the SE into NaN."""
    x, texts = synthetic_corpus(2, n_formats=2, seed=3)
    cells, cell, _ = cell_table(texts, x, backend="numpy")
    suite = fit_paper_models(cells)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, gm = text_bootstrap(x, cell, cells, suite, n_boot=200, seed=0)
    assert (gm["n_boot_valid"] < 200).any() and (gm["n_boot_valid"] >= 2).all()
    assert np.isfinite(gm[["se_text", "ci_low_text", "ci_high_text"]].to_numpy()).all()
    # the SE and interval are those of the valid replicates, recomputed here from the weighted sums
    xu = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    n_b, s_b = weighted_cell_sums(xu, cell, len(cells), lambda rows: story_weights(0, np.arange(1, 201), rows), 200)
    st = suite.standardization
    m = ((cells["race"] == "White") & (cells["gender"] == "woman")).to_numpy()
    nb = n_b[:, m].sum(1)
    rep = ((s_b[:, m] - st.mean * n_b[:, m]) / st.sd).sum(1)[nb > 0] / nb[nb > 0]
    row = gm.set_index(["grouping", "level"]).loc[("race x gender", "White x woman")]
    assert row["n_boot_valid"] == rep.size
    assert row["se_text"] == pytest.approx(np.std(rep, ddof=1), rel=1e-6)


def test_permutation_detects_a_race_effect_and_not_a_null_gender_effect():
    """Race spreads differ strongly and gender has no effect at all (women's noise is men's): in each of ten such
    corpora race gets the smallest p, 1 / 50, while gender's p spreads over (0, 1] as a null's should (the check
    of one corpus's gender p, 0 < p <= 1, could not fail, and its corpus had a small gender effect)."""
    p_gender = []
    for seed in range(4, 14):
        x, texts = synthetic_corpus(12, n_formats=3, seed=seed, woman_spread=1.0,
                                    race_spread={"African": 0.5, "Asian": 0.5, "Hispanic": 0.5, "White": 1.5})
        cells, cell, _ = cell_table(texts, x, backend="numpy")
        suite = fit_paper_models(cells)
        per, omni = text_permutation(x, cell, cells, suite, n_perm=49, seed=0)
        o = omni.set_index("test")
        assert o.loc["race", "p_perm"] == pytest.approx(1 / 50)
        p_gender.append(o.loc["gender", "p_perm"])
        assert set(per["model"]) == {"race", "gender", "simple effect"}
        assert ((per["p_perm"] >= 1 / 50) & (per["p_perm"] <= 1)).all()
    p_gender = np.array(p_gender)
    assert (p_gender <= 0.05).sum() <= 2 and np.median(p_gender) > 0.2, p_gender
    assert p_gender.min() < 0.3 and p_gender.max() > 0.8, p_gender  # spread out, not stuck at one value


def test_permutation_statistics_are_the_fitted_effects_and_the_tests_two_sided():
    """On unbalanced cells (GLS is not OLS there) the permuted statistics' observed values are the fitted paper
    models' effects: the race and gender coefficients, and the Women - Men simple effect in each of the four
    races. Women's texts are made far more varied (lower cosines, every gender effect strongly negative): a
    two-sided test must still give the smallest p, 1 / (B + 1), not ~1."""
    x, texts = synthetic_corpus(lambda rng: int(rng.integers(6, 12)), n_formats=3, seed=5)
    x = x.copy()
    woman = (texts["gender"] == "woman").to_numpy()
    x[woman] += np.random.default_rng(0).normal(size=(int(woman.sum()), x.shape[1])).astype(np.float32) * 1.5
    cells, cell, _ = cell_table(texts, x, backend="numpy")
    suite = fit_paper_models(cells)
    per, omni = text_permutation(x, cell, cells, suite, n_perm=19, seed=0)
    for name in ("race", "gender"):
        m = suite.models[name]
        got = per[per["model"] == name].set_index("term")["estimate"]
        want = pd.Series(m.fe, index=list(m.names)).drop("(Intercept)")
        np.testing.assert_allclose(got.loc[want.index], want, rtol=1e-8, err_msg=name)
    se = suite.simple_effects
    simple = per[per["model"] == "simple effect"].set_index("term")
    assert list(simple.index) == [f"{r}: woman - man" for r in se["race"]] and len(simple) == 4
    np.testing.assert_allclose(simple["estimate"], se["estimate"], rtol=1e-8)
    assert (se["estimate"] < 0).all()
    assert per.set_index(["model", "term"]).loc[("gender", "genderwoman"), "p_perm"] == pytest.approx(1 / 20)
    assert simple["p_perm"].tolist() == pytest.approx([1 / 20] * 4)
    assert omni.set_index("test").loc["gender", "p_perm"] == pytest.approx(1 / 20)


def test_cell_mean_models_match_statsmodels(fitted):
    _, _, cells, suite = fitted
    cm = cell_mean_models(cells, suite).query("model == 'race'")
    st = suite.standardization
    y = ((cells["sum"] - st.mean * cells["n_pairs"]) / st.sd / cells["n_pairs"]).to_numpy()
    d = design_matrix(cells, "race")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sm.MixedLM(y, d.X, groups=cells["format"].to_numpy()).fit(reml=True, method=["nm", "bfgs"], maxiter=5000)
    np.testing.assert_allclose(cm["estimate"], ref.fe_params, atol=1e-6)
    np.testing.assert_allclose(cm["se"], ref.bse_fe, rtol=5e-3)


def test_a_prompt_with_one_usable_text_shifts_no_other_texts_cell(tmp_path):
    """cell_table dropped the cells without a pair and renumbered the table, not the texts: every text after a
    prompt with one usable text was read as the next cell's, in the text bootstrap, the permutations and the
    extreme pairs (139 of 139 texts of a corpus of six prompts a cell on)."""
    from harness.homogeneity.stage import FACTORS, analyse_embeddings

    x, texts = synthetic_corpus(6, n_formats=3, seed=1)
    first = texts.prompt_id.iloc[0]
    alone = texts.index[texts.prompt_id == first][1:]
    keep = ~texts.index.isin(alone)
    x1, t1 = x[keep], texts[keep].reset_index(drop=True)
    cells, cell, _ = cell_table(t1, x1, backend="numpy")
    assert (cell[t1.prompt_id == first] == -1).all()
    has = cell >= 0
    got = cells.loc[cell[has], list(FACTORS)].to_numpy()
    np.testing.assert_array_equal(got, t1.loc[has, list(FACTORS)].to_numpy())
    # the analysis equals the one of the corpus without that text, in every table
    without = t1.prompt_id != first
    kw = dict(n_boot=30, n_perm=20, backend="numpy", seed=3)
    analyse_embeddings(x1, t1, tmp_path / "one", selection={"target": 6}, **kw)
    analyse_embeddings(x1[without.to_numpy()], t1[without].reset_index(drop=True), tmp_path / "none", **kw)
    for name in ("text_coefficients.csv", "permutation.csv", "extreme_pairs.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "one" / name), pd.read_csv(tmp_path / "none" / name))
    # summary.json names the texts read, the lone one too (the prompt short of the target was not counted)
    import json

    texts_read = json.loads((tmp_path / "one" / "summary.json").read_text())["texts"]
    assert (texts_read["n"], texts_read["without_pair"], texts_read["prompts_short_of_target"]) == (len(t1), 1, 1)


def test_inference_refuses_an_all_zero_embedding_and_too_few_replicates_in_one_line(fitted):
    from harness.errors import ConfigError, DataError

    x, cell, cells, suite = fitted
    with pytest.raises(ConfigError, match=r"^n_boot must be at least 2, got 1$"):
        text_bootstrap(x, cell, cells, suite, n_boot=1)
    with pytest.raises(ConfigError, match=r"^n_perm must be positive, got 0$"):
        text_permutation(x, cell, cells, suite, n_perm=0)
    zero = x.copy()
    zero[3] = 0
    with pytest.raises(DataError, match=r"^inference: an embedding row is all zeros; drop it$"):
        text_bootstrap(zero, cell, cells, suite, n_boot=2)
