"""The stage end to end: a generated run -> embeddings -> tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.config import parse_config
from harness.homogeneity.cli import app
from harness.homogeneity.mixed import fit_paper_models
from harness.homogeneity.stage import analyse_embeddings, cell_table, generate_homogeneity
from harness.kernels import homogeneity as hk

from homogeneity_fixtures import synthetic_corpus


def test_a_second_analysis_leaves_no_table_of_the_first_and_names_its_texts(tmp_path):
    """Rerun without the bootstrap (or permutations, or pairs), the first analysis's text_*.csv and permutation.csv
    stayed beside the new tables, and the report published them as current. Two embedders' analyses over other
    texts (another target) were set side by side in one report; their summaries now say which texts they read."""
    from harness.errors import DataError
    from harness.report.homogeneity import same_texts

    x, texts = synthetic_corpus(6, n_formats=2, seed=3)
    first, _ = analyse_embeddings(x, texts, tmp_path / "a", n_boot=20, n_perm=5, backend="numpy", top_k=2,
                                  selection={"target": None, "refusal": "authors"})
    assert {"text_coefficients.csv", "permutation.csv", "extreme_pairs.csv"} <= set(first)
    again, _ = analyse_embeddings(x, texts, tmp_path / "a", n_boot=0, backend="numpy", pairs=False)
    on_disk = {p.name for p in (tmp_path / "a").iterdir()}
    assert on_disk == set(again) and not on_disk & {"text_coefficients.csv", "permutation.csv", "pair_hist.parquet"}
    fewer = texts["sample_idx"] < 4  # a target of 4 texts per prompt
    analyse_embeddings(x[fewer.to_numpy()], texts[fewer].reset_index(drop=True), tmp_path / "b", n_boot=0,
                       backend="numpy", pairs=False, selection={"target": 4, "refusal": "authors"})
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["texts"]["n"] == int(fewer.sum()) and summary["texts"]["target"] == 4
    assert summary["texts"]["prompts_short_of_target"] == 0
    with pytest.raises(DataError, match=rf"{tmp_path / 'b'} and {tmp_path / 'a'} analysed different texts \("
                                        rf"{int(fewer.sum())} vs {len(texts)}; target 4 vs None"):
        same_texts([tmp_path / "a", tmp_path / "b"])
    analyse_embeddings(x, texts, tmp_path / "b", n_boot=0, backend="numpy", pairs=False)
    same_texts([tmp_path / "a", tmp_path / "b"])  # the same texts: one run's report
    # as many texts per prompt but other samples (e.g. another filter dropped sample 0): other texts all the same
    other = texts["sample_idx"] > 0
    first5 = texts["sample_idx"] < 5
    for name, pick in (("c", other), ("d", first5)):
        analyse_embeddings(x[pick.to_numpy()], texts[pick].reset_index(drop=True), tmp_path / name, n_boot=0,
                           backend="numpy", pairs=False, selection={"target": 5, "refusal": "authors"})
    n = int(other.sum())  # == first5.sum()
    with pytest.raises(DataError, match=rf"analysed different texts \({n} vs {n}; target 5 vs 5"):
        same_texts([tmp_path / "c", tmp_path / "d"])


def test_too_few_prompts_for_the_mixed_models_say_so_in_the_users_words(tmp_path):
    """Two prompts of two texts: 'fit_lmm: 2 observations cannot identify ...', an internal name and no fix."""
    from harness.errors import DataError

    x, texts = synthetic_corpus(2, n_formats=2, seed=1)
    few = texts["prompt_id"].isin(texts["prompt_id"].unique()[:2]).to_numpy()
    with pytest.raises(DataError) as e:
        analyse_embeddings(x[few], texts[few].reset_index(drop=True), tmp_path, n_boot=0, backend="numpy", pairs=False)
    assert str(e.value).startswith(f"{tmp_path}: 2 prompts with 2 pairs of texts are too few for the mixed models (")
    assert str(e.value).endswith("analyse more prompts (the suite's race x gender x format cells) or more texts per "
                                 "prompt") and "fit_lmm" not in str(e.value)


def test_analyse_embeddings_writes_consistent_tables(tmp_path):
    x, texts = synthetic_corpus(10, n_formats=3, seed=9)
    files, secs = analyse_embeddings(x, texts, tmp_path, n_boot=30, n_perm=9, backend="numpy", top_k=2)
    assert {"cells.csv", "groups.csv", "coefficients.csv", "lrt.csv", "simple_effects.csv", "text_coefficients.csv",
            "permutation.csv", "extreme_pairs.csv", "pair_hist.parquet", "summary.json"} <= set(files)
    cells = pd.read_csv(tmp_path / "cells.csv")
    assert len(cells) == 24 and (cells["n_pairs"] == 45).all()
    # sums agree with every pair formed explicitly
    keys = list(zip(texts["race"], texts["gender"], texts["format"]))
    order = list(dict.fromkeys(keys))
    bf = hk.brute_force(x, np.array([order.index(k) for k in keys]))
    np.testing.assert_allclose(cells["sum"], bf.sum, rtol=1e-9)
    np.testing.assert_allclose(cells["sumsq"], bf.sumsq, rtol=1e-9)
    coefs = pd.read_csv(tmp_path / "coefficients.csv")
    ref = fit_paper_models(cell_table(texts, x, backend="numpy")[0]).coefficients
    np.testing.assert_allclose(coefs["estimate"], ref["estimate"], rtol=1e-9)
    ext = pd.read_csv(tmp_path / "extreme_pairs.csv")
    one = ext[(ext["race"] == "Asian") & (ext["gender"] == "woman") & (ext["format"] == "f1")]
    assert one.query("kind == 'most'")["cosine"].is_monotonic_decreasing and len(one) == 4
    xi = x[(texts["prompt_id"] == "asian-woman-f1").to_numpy()].astype(float)
    xi /= np.linalg.norm(xi, axis=1, keepdims=True)
    C = xi @ xi.T
    assert one.query("kind == 'most' and rank == 1")["cosine"].item() == pytest.approx(C[np.triu_indices(10, 1)].max(), abs=1e-6)
    assert one.query("kind == 'least' and rank == 1")["cosine"].item() == pytest.approx(C[np.triu_indices(10, 1)].min(), abs=1e-6)
    hist = pd.read_parquet(tmp_path / "pair_hist.parquet")
    assert hist["count"].sum() == cells["n_pairs"].sum()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_pairs"] == 24 * 45 and summary["models_converged"]


def _prompt_pairs(x, texts):
    """{prompt_id: every within-prompt pair cosine}, formed explicitly."""
    xu = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    out = {}
    for pid, idx in texts.groupby("prompt_id").indices.items():
        out[pid] = (xu[idx] @ xu[idx].T)[np.triu_indices(len(idx), 1)]
    return out


def test_cells_and_table_2_are_the_pairs_means_and_sds_z_scored_over_all_pairs(tmp_path):
    """cells.csv (per prompt) and groups.csv (Table 2: race x gender, race, gender) give the mean and SD (n - 1) of
    the pair cosines, raw and z-scored by the mean and SD of all pairs, as formed pair by pair; welch.csv tests
    against the reference race the analysis is given."""
    x, texts = synthetic_corpus(lambda rng: int(rng.integers(3, 9)), n_formats=2, seed=5)
    analyse_embeddings(x, texts, tmp_path, n_boot=0, backend="numpy", pairs=False,
                       refs={"race": "Hispanic", "gender": "man"})
    pairs = _prompt_pairs(x, texts)
    every = np.concatenate(list(pairs.values()))
    mu, sd = every.mean(), every.std(ddof=1)
    st = json.loads((tmp_path / "summary.json").read_text())["standardization"]
    assert (st["mean"], st["sd"]) == pytest.approx((mu, sd), rel=1e-9)
    cells = pd.read_csv(tmp_path / "cells.csv")
    for r in cells.itertuples():
        c = pairs[f"{r.race}-{r.gender}-{r.format}".lower()]
        assert (r.mean_raw, r.sd_raw) == pytest.approx((c.mean(), c.std(ddof=1)), rel=1e-9)
        assert (r.mean_z, r.sd_z) == pytest.approx(((c.mean() - mu) / sd, c.std(ddof=1) / sd), rel=1e-9)
    groups = pd.read_csv(tmp_path / "groups.csv")
    assert groups["grouping"].value_counts().to_dict() == {"race x gender": 8, "race": 4, "gender": 2}
    for r in groups.itertuples():
        pids = texts.prompt_id[((texts.race == r.race) | (r.race == "all"))
                               & ((texts.gender == r.gender) | (r.gender == "all"))].unique()
        c = np.concatenate([pairs[p] for p in pids])
        assert r.n_pairs == c.size and r.n_cells == len(pids)
        assert (r.mean_raw, r.sd_raw) == pytest.approx((c.mean(), c.std(ddof=1)), rel=1e-9)
        assert (r.mean_z, r.sd_z) == pytest.approx(((c.mean() - mu) / sd, c.std(ddof=1) / sd), rel=1e-9)
    welch = pd.read_csv(tmp_path / "welch.csv")
    assert set(welch["race"]) == {"African", "Asian", "White"} and (welch["reference"] == "Hispanic").all()


@pytest.mark.slow
def test_generation_to_tables_with_minilm_via_cli(tmp_path, scripted_backend):
    ids = [f"{r}-{g}-{f}" for r in ("african", "white") for g in ("man", "woman") for f in ("story", "biography")]
    cfg = parse_config({"model": {"backend": "openai", "path": "x", "base_url": "http://127.0.0.1:9/v1"},
                        "suite": "homogeneity", "prompts": ids, "samples_per_prompt": 6, "seed": 1,
                        "output_dir": str(tmp_path / "run")})
    generate_homogeneity(cfg, backend=scripted_backend, progress=False)
    res = CliRunner().invoke(app, ["analyse", str(tmp_path / "run"), "--target", "6", "--bootstrap", "20",
                                   "--backend", "numpy", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "run" / "homogeneity"
    ref = pd.read_csv(out / "refusals.csv")
    assert ref["usable"].ge(6).all() and ref["refusals"].sum() > 0
    texts = pd.read_parquet(out / "texts.parquet")
    assert texts["included"].sum() == 48 and texts["refusal"].sum() == ref["refusals"].sum()
    cells = pd.read_csv(out / "minilm-l6" / "cells.csv")
    assert len(cells) == 8 and (cells["n_texts"] == 6).all()
    emb = list((tmp_path / "run" / "embeddings" / "minilm-l6").glob("*.npy"))
    assert emb and np.load(emb[0]).dtype == np.float16
    coefs = pd.read_csv(out / "minilm-l6" / "coefficients.csv")
    assert set(coefs["model"]) == {"race", "gender", "race+gender", "interaction"}
    assert "raceAfrican" in set(coefs["term"])
    # rerun: embeddings come from the cache
    res2 = CliRunner().invoke(app, ["analyse", str(tmp_path / "run"), "--target", "6", "--bootstrap", "0",
                                    "--backend", "numpy", "--device", "cpu", "--no-pairs"])
    assert res2.exit_code == 0, res2.output


def test_texts_of_no_run_of_another_suite_or_of_too_few_prompts_are_refused_in_one_line(tmp_path):
    from harness.errors import DataError
    from harness.homogeneity.stage import load_texts
    from harness.pipeline import GENERATION_SCHEMA, GENERATIONS
    from harness.store import RunStore
    from harness.suites import get_suite

    with pytest.raises(DataError, match=r"/generations: no generations; run `harness run` on a homogeneity config"):
        load_texts(tmp_path / "empty")
    store = RunStore(tmp_path / "run")
    row = {"prompt_id": "learning-neutral-01", "sample_idx": 0, "text": "Ana ran.", "text_clean": "Ana ran.",
           "finish_reason": "stop"}
    store.write_shard(GENERATIONS, [row], "gen-0of1", GENERATION_SCHEMA)
    with pytest.raises(DataError, match=r"^suite laissez-faire: prompts lack race/gender/format metadata; is this a "):
        load_texts(tmp_path / "run", suite=get_suite("laissez-faire"))
    with pytest.raises(DataError, match=r"/generations: prompt ids \['learning-neutral-01'\] are not in suite "
                                        r"homogeneity$"):
        load_texts(tmp_path / "run", suite=get_suite("homogeneity"))
    x, texts = synthetic_corpus(2, n_formats=2, seed=1)
    one = texts["prompt_id"].eq(texts["prompt_id"].iloc[0]).to_numpy()
    with pytest.raises(DataError, match=r": fewer than two prompts with two usable texts; nothing to compare$"):
        analyse_embeddings(x[one], texts[one].reset_index(drop=True), tmp_path / "out", n_boot=0, backend="numpy",
                           pairs=False)
