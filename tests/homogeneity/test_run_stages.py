"""`harness run` on a homogeneity config: stage selection, config blocks, the report from
synthetic tables (fast), and the whole run on the embedded model (slow)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from homogeneity_fixtures import synthetic_corpus

from harness.config import HOMOGENEITY_STAGES, load_config, parse_config
from harness.errors import ConfigError
from harness.homogeneity.mixed import fit_paper_models
from harness.homogeneity.stage import analyse_embeddings, cell_table
from harness.homogeneity.stages import embedder_spec, wanted_stages
from harness.report.homogeneity import build_homogeneity_report

ROOT = Path(__file__).resolve().parents[2]
BASE = {"model": {"backend": "openai", "path": "x", "base_url": "http://127.0.0.1:9/v1"}, "suite": "homogeneity"}


def test_stage_selection_and_embedding_block():
    cfg = parse_config(BASE)
    assert wanted_stages(cfg, None) == list(HOMOGENEITY_STAGES)  # the default list means every stage
    assert wanted_stages(cfg, ["report", "embed"]) == ["embed", "report"]
    with pytest.raises(ConfigError, match="label do not apply"):
        wanted_stages(cfg, ["generate", "label"])
    cfg = parse_config({**BASE, "stages": ["generate", "embed"], "embedding": {"preprocess": "simple_prep"}})
    assert wanted_stages(cfg, None) == ["generate", "embed"]
    spec = embedder_spec(cfg)
    assert spec.preprocess == "simple_prep" and spec.name == "minilm-l6+simple_prep"  # its own cache folder
    with pytest.raises(ConfigError, match="needs path"):
        embedder_spec(parse_config({**BASE, "embedding": {"embedder": "bert-2"}}))
    with pytest.raises(ConfigError, match="embedding.batch"):
        parse_config({**BASE, "embedding": {"batch": 3}})


def test_shipped_configs_load(monkeypatch, tmp_path):
    cfg = load_config(ROOT / "configs" / "homogeneity_smoke.yaml")
    assert cfg.suite == "homogeneity" and cfg.stages == list(HOMOGENEITY_STAGES) and len(cfg.prompts) == 16
    from harness.config import read_yaml

    monkeypatch.setenv("HARNESS_MODEL_DIR", str(tmp_path))
    rep = parse_config(read_yaml(ROOT / "configs" / "homogeneity_replication.yaml"))
    assert rep.samples_per_prompt == 500 and rep.prompts is None and rep.model.backend == "vllm"


@pytest.mark.parametrize("over, says", [
    ({"embedding": {"embedder": "nosuch"}}, "field 'embedding.embedder': must be one of minilm-l6"),
    ({"embedding": {"embedder": "bert-2"}}, "field 'embedding.path': embedder bert-2 needs path"),
    ({"embedding": {"embedder": "bert-2", "path": "no/such/dir"}}, "field 'embedding.path': model directory 'no/such/dir' not found"),
    ({"embedding": {"preprocess": "lower"}}, "field 'embedding.preprocess': must be one of none, simple_prep"),
    ({"embedding": {"device": "tpu"}}, "field 'embedding.device': must be auto, cpu, cuda or cuda:N"),
    ({"samples_per_prompt": 1}, "field 'samples_per_prompt': a homogeneity run compares pairs"),
    ({"statistics": {"n_boot": 1}}, "field 'statistics.n_boot': a text bootstrap needs at least 2"),
    ({"statistics": {"n_boot": 0}, "homogeneity": {"n_perm": 20}},
     "field 'homogeneity.n_perm': the permutations run within the text bootstrap, which statistics.n_boot: 0 skips"),
])
def test_a_homogeneity_config_is_checked_when_it_loads_not_after_generating(tmp_path, over, says):
    import yaml

    from harness.config import _deep_merge

    base = yaml.safe_load((ROOT / "configs" / "homogeneity_smoke.yaml").read_text())
    doc = _deep_merge(base, over)
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump({**doc, "output_dir": str(tmp_path / "run")}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: {says}") and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()
    # one text per prompt passes when the top-up target asks for two; zero replicates skip the bootstrap
    ok = {**base, "output_dir": str(tmp_path / "run"), "samples_per_prompt": 1, "homogeneity": {"target": 2},
          "statistics": {"n_boot": 0}}
    path.write_text(yaml.safe_dump(ok))
    assert load_config(path).samples_per_prompt == 1


@pytest.mark.parametrize("args, says", [
    ({"target": 1}, "target must be at least 2 texts per prompt"),
    ({"target": 0}, "target must be at least 2 texts per prompt"),
    ({"refusal": "strict"}, "refusal filter must be one of authors, open-models"),
    ({"max_rounds": -1}, "max_rounds must be 0 or more"),
])
def test_the_top_up_refuses_its_options_before_a_backend_loads(args, says, tmp_path, monkeypatch):
    from harness.homogeneity import stage

    def no_backend(*a, **k):
        raise AssertionError("a backend was loaded")

    monkeypatch.setattr("harness.generation.load_backend", no_backend)
    cfg = parse_config({**BASE, "output_dir": str(tmp_path / "run")})
    with pytest.raises(ConfigError, match=says):
        stage.generate_homogeneity(cfg, **args)
    other = parse_config({**BASE, "suite": "laissez-faire", "output_dir": str(tmp_path / "run")})
    with pytest.raises(ConfigError, match="takes a config with suite: homogeneity"):
        stage.generate_homogeneity(other)
    assert not (tmp_path / "run").exists()


def _fake_run(root: Path, name: str, seed: int) -> Path:
    x, texts = synthetic_corpus(8, n_formats=3, seed=seed)
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"config": {"name": name, "suite": "homogeneity"}, "rows": len(texts)}))
    analyse_embeddings(x, texts, root / "homogeneity" / "minilm-l6", n_boot=20, backend="numpy", top_k=2)
    return root


def test_report_from_two_runs(tmp_path):
    runs = [_fake_run(tmp_path / "a", "model-a", 1), _fake_run(tmp_path / "b", "model-b", 2)]
    index = build_homogeneity_report(runs, tmp_path / "report")
    page = index.read_text()
    for heading in ("Table 2: standardised cosine", "Table 3: mixed-model coefficients", "Table A3", "Table A4",
                    "Text-level intervals"):
        assert heading in page
    srcs = re.findall(r"<img src='([^']+)'", page)
    assert len(srcs) == 3
    for src in srcs:  # every figure's data beside it
        assert (index.parent / src).with_suffix(".csv").exists()
    coefs = pd.read_csv(tmp_path / "report" / "tables" / "hom_coefficients.csv")
    a = coefs[coefs["model"] == "model-a"]
    ref = pd.read_csv(runs[0] / "homogeneity" / "minilm-l6" / "coefficients.csv")
    np.testing.assert_allclose(a["estimate"], ref["estimate"], rtol=1e-12)
    assert list(a["model_formula"]) == list(ref["model"]) and a["se_text"].notna().all()
    ext = pd.read_csv(tmp_path / "report" / "figures" / "hom3_extreme_pairs.csv")
    assert len(ext) == 2 * 8 * 2 * 2  # runs x race-gender groups x (most, least) x k
    pairs = pd.read_csv(runs[0] / "homogeneity" / "minilm-l6" / "extreme_pairs.csv")
    top = pairs[(pairs.race == "Asian") & (pairs.gender == "man") & (pairs.kind == "most")]["cosine"].max()
    got = ext[(ext.model == "model-a") & (ext.race == "Asian") & (ext.gender == "man") & (ext.kind == "most")]
    assert got["cosine"].max() == pytest.approx(top) and got["group_rank"].tolist() == [1, 2]
    # the least similar: the group's lowest cosines, in rising order
    low = pairs[(pairs.race == "Asian") & (pairs.gender == "man") & (pairs.kind == "least")]["cosine"].nsmallest(2)
    got = ext[(ext.model == "model-a") & (ext.race == "Asian") & (ext.gender == "man") & (ext.kind == "least")]
    np.testing.assert_allclose(got["cosine"], low.to_numpy())
    assert got["group_rank"].tolist() == [1, 2]
    # every race x gender mean of Table 2 carries its text-level interval (a race read as the gender left them NaN)
    means = pd.read_csv(tmp_path / "report" / "tables" / "hom_group_means.csv")
    assert len(means) == 2 * 8 and means[["ci_low_text", "ci_high_text"]].notna().all().all()
    assert (means.ci_low_text <= means.ci_high_text).all()


class _Embedder:
    """Stands in for the embedding model: a deterministic vector per text."""

    def encode(self, texts, *, batch_size=64):
        return np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts]).astype(np.float32)


def _statistics_run(tmp_path, scripted_backend):
    """A homogeneity config, its run directory generated and embedded (a stand-in embedder), and its store."""
    from harness.homogeneity.embed import EmbeddingCache
    from harness.homogeneity.stage import generate_homogeneity
    from harness.homogeneity.stages import included_texts
    from harness.store import RunStore

    doc = {**BASE, "prompts": PROMPTS, "samples_per_prompt": 3, "seed": 3, "output_dir": str(tmp_path / "run"),
           "homogeneity": {"top_k": 2}, "statistics": {"n_boot": 0, "backend": "numpy"}}
    cfg = parse_config(doc)
    generate_homogeneity(cfg, backend=scripted_backend, progress=False)
    texts = included_texts(cfg)[1]
    EmbeddingCache(cfg.output_dir, embedder_spec(cfg)).embed(texts, texts["text_clean"].tolist(), embedder=_Embedder())
    return doc, cfg, RunStore(cfg.output_dir)


def test_a_statistics_stage_killed_while_it_writes_is_not_current(tmp_path, scripted_backend, monkeypatch):
    """The statistics stage forgets its record before it writes over its tables, as the audit's whole-table stages
    do: killed while writing the tables of other options, a rerun with the options it recorded (the changed config
    put back) found the old record and skipped the stage, over a texts table of the other options."""
    import harness.homogeneity.stage as H
    from harness.audit.stages import recorded
    from harness.homogeneity.stages import STATS_DIR, stage_statistics

    doc, cfg, store = _statistics_run(tmp_path, scripted_backend)
    assert stage_statistics(cfg, store).status == "done"
    assert stage_statistics(cfg, store).status == "skipped (current)"

    def killed(*a, **kw):
        raise KeyboardInterrupt

    other = parse_config({**doc, "homogeneity": {"top_k": 3}})
    monkeypatch.setattr(H, "analyse_embeddings", killed)  # after texts.parquet and refusals.csv, before the rest
    with pytest.raises(KeyboardInterrupt):
        stage_statistics(other, store)
    monkeypatch.undo()
    assert recorded(store, STATS_DIR) == {}
    assert stage_statistics(cfg, store).status == "done"
    assert recorded(store, STATS_DIR)["top_k"] == 2


def _second_job_while_the_stage_writes(monkeypatch, cfg, store, second_job) -> str:
    """Runs the statistics stage of ``cfg`` with ``second_job()`` started once the stage has written its texts
    table; the error ``second_job`` stopped with (it must stop with a DataError)."""
    import harness.homogeneity.stage as H
    from harness.errors import DataError
    from harness.homogeneity.stages import stage_statistics

    stopped, real_analyse = [], H.analyse_embeddings

    def second_job_starts(*a, **kw):
        if not stopped:
            with pytest.raises(DataError) as e:
                second_job()
            stopped.append(str(e.value))
        return real_analyse(*a, **kw)

    monkeypatch.setattr(H, "analyse_embeddings", second_job_starts)
    assert stage_statistics(cfg, store).status == "done"
    monkeypatch.undo()
    return stopped[0]


def test_a_second_statistics_job_stops_while_the_first_writes_and_the_first_ones_tables_stand(
        tmp_path, scripted_backend, monkeypatch):
    """The statistics stage took no lock: a second job (`harness run` started twice, here with another top_k) wrote
    texts.parquet and every table while the first was between its texts table and the rest, and the first then
    wrote over some of them. A job holds the stage's writer lock while it checks and writes the stage, as the
    audit's whole-table stages do; a second stops with a one-line error naming the folder."""
    from harness.audit.stages import recorded
    from harness.homogeneity.stages import STATS_DIR, stage_statistics

    doc, cfg, store = _statistics_run(tmp_path, scripted_backend)
    other = parse_config({**doc, "homogeneity": {"top_k": 3}})
    stopped = _second_job_while_the_stage_writes(monkeypatch, cfg, store, lambda: stage_statistics(other, store))
    assert stopped.startswith(f"{store.stage_dir(STATS_DIR)}: another job is writing") and "\n" not in stopped
    assert recorded(store, STATS_DIR)["top_k"] == 2
    pairs = pd.read_csv(store.stage_dir(STATS_DIR) / "minilm-l6" / "extreme_pairs.csv")
    assert pairs["rank"].max() == 2
    assert stage_statistics(cfg, store).status == "skipped (current)"
    assert stage_statistics(other, store).status == "done"


def test_the_statistics_tables_reach_the_disk_before_their_rename_and_the_stage_record_after(
        tmp_path, scripted_backend, stage_written_durably):
    """The statistics stage wrote texts.parquet, refusals.csv, the embedder's tables and summary.json in place and
    unsynced: a power loss after _stage.json recorded them current could leave a table empty or cut under its name,
    which every rerun skipped as current. Each is written under a temporary name, synced, renamed and its folder
    synced (the store's commit_file), all before the record."""
    from harness.homogeneity.stages import STATS_DIR, stage_statistics

    _, cfg, store = _statistics_run(tmp_path, scripted_backend)
    out = store.stage_dir(STATS_DIR)
    events, tables = stage_written_durably(out, lambda: stage_statistics(cfg, store), {
        "texts.parquet", "refusals.csv", "minilm-l6/cells.csv", "minilm-l6/pair_hist.parquet",
        "minilm-l6/summary.json"})
    assert events.index(("replace", (out / "minilm-l6" / "summary.json").stat().st_ino)) == max(
        events.index(("replace", p.stat().st_ino)) for p in tables if p.parent.name == "minilm-l6")


def test_harness_homogeneity_analyse_with_other_options_leaves_the_statistics_stage_to_run_again(
        tmp_path, scripted_backend):
    """`harness homogeneity analyse` (run_homogeneity) writes into the statistics stage's folder: run after the stage
    with other options (here top_k 3), it left the stage's _stage.json calling its tables current, and the next
    `harness run` skipped the stage over tables of the other options. It forgets the stage's record before it
    writes, so the next run makes the tables of its config again."""
    from harness.homogeneity.stage import run_homogeneity
    from harness.homogeneity.stages import STATS_DIR, stage_statistics

    _, cfg, store = _statistics_run(tmp_path, scripted_backend)
    assert stage_statistics(cfg, store).status == "done"
    run_homogeneity(cfg.output_dir, embedders=[embedder_spec(cfg)], target=3, n_boot=0, backend="numpy", top_k=3)
    pairs = store.stage_dir(STATS_DIR) / "minilm-l6" / "extreme_pairs.csv"
    assert pd.read_csv(pairs)["rank"].max() == 3
    assert stage_statistics(cfg, store).status == "done"
    assert pd.read_csv(pairs)["rank"].max() == 2
    assert stage_statistics(cfg, store).status == "skipped (current)"


def test_harness_homogeneity_analyse_stops_while_the_statistics_stage_writes(tmp_path, scripted_backend, monkeypatch):
    """`harness homogeneity analyse` took no lock: started while `harness run`'s statistics stage was between its
    texts table and the rest, it wrote every table of its own options under the stage, which then wrote over some
    of them and recorded the mix current. It holds the stage's writer lock, so it stops with the stage's one-line
    error and the stage's tables stand."""
    import harness.homogeneity.stage as H
    from harness.homogeneity.stages import STATS_DIR, stage_statistics

    _, cfg, store = _statistics_run(tmp_path, scripted_backend)
    stopped = _second_job_while_the_stage_writes(monkeypatch, cfg, store, lambda: H.run_homogeneity(
        cfg.output_dir, embedders=[embedder_spec(cfg)], target=3, n_boot=0, backend="numpy", top_k=3))
    assert stopped.startswith(f"{store.stage_dir(STATS_DIR)}: another job is writing") and "\n" not in stopped
    assert pd.read_csv(store.stage_dir(STATS_DIR) / "minilm-l6" / "extreme_pairs.csv")["rank"].max() == 2
    assert stage_statistics(cfg, store).status == "skipped (current)"


# ============================================================================ end to end (slow)

PROMPTS = [f"{r}-{g}-{f}" for r in ("african", "asian", "hispanic", "white") for g in ("man", "woman")
           for f in ("story", "biography")]


@pytest.fixture(scope="module")
def homogeneity_run(tmp_path_factory, smollm2_dir):
    tmp = tmp_path_factory.mktemp("homogeneity")
    conf = tmp / "homogeneity.yaml"
    conf.write_text(
        "name: smollm2-homogeneity-e2e\n"
        "model: {backend: transformers, path: smollm2-135m, batch_size: 16, max_model_len: 256}\n"
        "sampling: {temperature: 1.0, max_new_tokens: 40}\n"
        f"suite: homogeneity\nprompts: {json.dumps(PROMPTS)}\nsamples_per_prompt: 3\nseed: 3\nshard_rows: 32\n"
        f"output_dir: {tmp / 'run'}\n"
        "embedding: {embedder: minilm-l6, device: cpu, batch_size: 32}\n"
        "homogeneity: {top_k: 2, max_topup_rounds: 3}\n"
        "statistics: {n_boot: 60, backend: numpy}\n"
    )
    cmd = [sys.executable, "-m", "harness.cli", "run", str(conf), "--no-progress"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    return conf, tmp / "run", first.stdout, second.stdout


@pytest.mark.slow
def test_whole_homogeneity_run_on_the_embedded_model(homogeneity_run, tmp_path):
    conf, run, first, second = homogeneity_run
    for stage in HOMOGENEITY_STAGES:  # the default stage list runs every homogeneity stage, and a rerun skips them
        assert f"[{stage}] done" in first, first
        assert f"[{stage}] skipped (current)" in second, second
    assert f"report: {run / 'report' / 'index.html'}" in first

    # the tables agree with the statistics module on the cached embeddings
    from harness.homogeneity.embed import EmbeddingCache
    from harness.homogeneity.stage import FACTORS, suite_levels
    from harness.homogeneity.stages import included_texts
    from harness.kernels import homogeneity as hk

    cfg = load_config(conf)
    allt, texts, suite = included_texts(cfg)
    assert texts.groupby("prompt_id").size().eq(3).all() and texts["prompt_id"].nunique() == len(PROMPTS)
    x = EmbeddingCache(run, embedder_spec(cfg)).load(texts, texts["text_clean"].tolist())
    assert x.shape == (len(PROMPTS) * 3, 384)
    levels, refs = suite_levels(suite)
    cells, cell, _ = cell_table(texts, x, backend="numpy", cell_order=[tuple(p.meta[k] for k in FACTORS) for p in suite])
    bf = hk.brute_force(x, cell)  # every within-prompt pair formed explicitly
    np.testing.assert_allclose(cells["sum"], bf.sum, rtol=1e-6, atol=1e-9)
    ref = fit_paper_models(cells, levels=levels, refs=refs)
    out = run / "homogeneity" / "minilm-l6"
    coefs = pd.read_csv(out / "coefficients.csv")
    np.testing.assert_allclose(coefs["estimate"], ref.coefficients["estimate"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(coefs["se"], ref.coefficients["se"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(pd.read_csv(out / "lrt.csv")["chisq"], ref.lrt["chisq"], rtol=1e-6, atol=1e-9)
    groups = pd.read_csv(out / "groups.csv")
    z = (bf.sum.sum() - ref.standardization.mean * bf.n_pairs.sum()) / ref.standardization.sd / bf.n_pairs.sum()
    assert z == pytest.approx(0, abs=1e-9)  # z-standardised over all pairs
    rg = groups[groups.grouping == "race x gender"]
    assert len(rg) == 8 and rg["n_pairs"].sum() == len(PROMPTS) * 3

    # the report carries the same numbers, and Chromium renders it
    report = run / "report"
    rc = pd.read_csv(report / "tables" / "hom_coefficients.csv")
    np.testing.assert_allclose(rc["estimate"], coefs["estimate"], rtol=1e-12)
    assert rc["se_text"].notna().any()
    sys.path.insert(0, str(ROOT / "tests" / "audit"))
    from browser import PNG_SIGNATURE, render_in_chromium

    index = report / "index.html"
    dom, log, shot = render_in_chromium(index, tmp_path)
    errors = [ln for ln in log.splitlines() if ":CONSOLE" in ln and ("Uncaught" in ln or "ERROR:CONSOLE" in ln or "failed" in ln)]
    assert not errors, errors
    assert "Table 3: mixed-model coefficients" in dom and "Most and least similar pair" in dom
    srcs = re.findall(r"<img src='([^']+)'", index.read_text())
    assert len(srcs) == 3
    loaded = dict(re.findall(r'<img src="([^"]+)"[^>]*data-loaded="(yes|no)"', dom))
    for src in srcs:
        assert loaded.get(src) == "yes", src
        assert (report / src).read_bytes()[:8] == PNG_SIGNATURE and (report / src).with_suffix(".csv").exists()
    assert shot.read_bytes()[:8] == PNG_SIGNATURE


def test_every_homogeneity_report_file_reaches_the_disk_before_its_rename_and_the_stage_record_after(
        tmp_path, report_written_durably):
    """The homogeneity report wrote index.html, its figures, their data and its tables in place and unsynced: a
    power loss after the report stage's _stage.json recorded them current could leave the page or a figure empty or
    cut under its name, and every rerun skipped the stage as current. Each is written under a temporary name,
    synced, renamed and its folder synced (the store's atomic_write), all before the record."""
    from harness.store import RunStore

    report_written_durably(RunStore(_fake_run(tmp_path / "a", "model-a", 3)), build_homogeneity_report, {
        "index.html", "figures/hom1_group_means.png", "figures/hom1_group_means.svg", "figures/hom1_group_means.csv",
        "tables/hom_coefficients.parquet", "tables/hom_coefficients.csv"})


def test_report_command_builds_the_homogeneity_report(tmp_path):
    from typer.testing import CliRunner

    from harness.cli import app

    run = _fake_run(tmp_path / "a", "model-a", 3)
    res = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<title>Homogeneity audit</title>" in page and "Table A4" in page


def test_report_command_refuses_to_mix_a_homogeneity_run_with_a_laissez_faire_run(tmp_path):
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.errors import DataError

    run = _fake_run(tmp_path / "a", "model-a", 3)
    other = tmp_path / "b"
    (other / "statistics").mkdir(parents=True)
    res = CliRunner().invoke(app, ["report", str(other), str(run), "--out", str(tmp_path / "rep")])
    assert res.exit_code != 0 and isinstance(res.exception, DataError)  # `harness` prints it as one line, exit 3
    assert f"{run} is a homogeneity run and {other} is not" in str(res.exception)
    assert not (tmp_path / "rep" / "index.html").exists()


@pytest.mark.parametrize("args, says", [
    (["--embedder", "bert-9"], "embedder must be one of minilm-l6"),
    (["--embedder", "bert-2"], "embedder bert-2: needs path="),
    (["--embedder", "bert-2", "--model-path", "no/such/dir"], "embedder: model directory 'no/such/dir' not found"),
    (["--refusal", "strict"], "refusal filter must be one of authors, open-models"),
    (["--device", "tpu"], "--device: must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    (["--backend", "jax"], "--backend 'jax': use one of numpy, triton, cupy, auto"),
    (["--bootstrap", "1"], "--bootstrap 1: a text bootstrap needs at least 2 replicates"),
    (["--target", "1"], "--target 1: pairs need at least 2 texts per prompt"),
    # permutations without the bootstrap were recorded as asked in summary.json and never run
    (["--bootstrap", "0", "--permutations", "20"], "--permutations 20: the permutations run within the text bootstrap"),
    (["-e", "minilm-l6", "-e", "minilm-l6"], "-e minilm-l6: given twice; give each embedder once"),
    (["-e", "minilm-l6", "-e", "bert-2", "--model-path", "x"], "--model-path: one local model for one embedder"),
])
def test_homogeneity_analyse_refuses_its_options_before_reading_the_run(tmp_path, monkeypatch, args, says):
    from typer.testing import CliRunner

    import harness.homogeneity.stage as H
    from harness.homogeneity.cli import app

    monkeypatch.setattr(H, "run_homogeneity", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    r = CliRunner().invoke(app, ["analyse", str(tmp_path / "no-run"), *args])
    assert r.exit_code == 2 and r.output.startswith(f"error: {says}") and len(r.output.strip().splitlines()) == 1, r.output


def test_homogeneity_analyse_refuses_a_kernel_backend_the_machine_cannot_run_before_embedding(tmp_path, monkeypatch):
    """--backend cupy on a CPU machine failed after the embedding, in Python's words (backend='numpy')."""
    from typer.testing import CliRunner

    import harness.homogeneity.stage as H
    from harness.homogeneity.cli import app
    from harness.kernels import _common

    monkeypatch.setattr(_common, "cupy_runnable", lambda: False)
    monkeypatch.setattr(H, "run_homogeneity", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    r = CliRunner().invoke(app, ["analyse", str(tmp_path / "no-run"), "--backend", "cupy"])
    assert r.exit_code == 2 and r.output == ("error: --backend cupy: needs cupy and a CUDA device and this machine has "
                                             "none; use numpy or auto\n"), r.output


def test_homogeneity_generate_takes_the_configs_top_up_unless_an_option_replaces_it(tmp_path, monkeypatch):
    """The CLI's defaults (every usable text, authors, 5 rounds) won over the config's homogeneity block: a config
    target of 3 on a run of 2 per prompt generated nothing, exit 0, where `harness run` tops up to 3."""
    import yaml
    from typer.testing import CliRunner

    import harness.homogeneity.stage as H
    from harness.homogeneity.cli import app

    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump({**BASE, "samples_per_prompt": 2, "output_dir": str(tmp_path / "run"),
                                    "homogeneity": {"target": 3, "refusal": "open-models", "max_topup_rounds": 2}}))
    seen = {}
    monkeypatch.setattr(H, "generate_homogeneity", lambda cfg, **k: seen.update(k) or H.TopUpSummary(0, 0, 0, {}))
    assert CliRunner().invoke(app, ["generate", str(path)]).exit_code == 0
    assert seen == {"target": 3, "refusal": "open-models", "max_rounds": 2}
    r = CliRunner().invoke(app, ["generate", str(path), "--target", "4", "--refusal", "authors", "--max-rounds", "0"])
    assert r.exit_code == 0 and seen == {"target": 4, "refusal": "authors", "max_rounds": 0}
    r = CliRunner().invoke(app, ["generate", str(path), "--max-rounds", "-1"])
    assert r.exit_code == 2 and "--max-rounds" in r.output


def test_homogeneity_generate_reads_its_target_with_the_config(tmp_path, monkeypatch):
    """One sample per prompt in the config is refused at load, unless --target asks for two or more; a --target
    under 2 is refused by the top-up before a backend loads."""
    import yaml
    from typer.testing import CliRunner

    import harness.homogeneity.stage as H
    from harness.homogeneity.cli import app

    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump({**BASE, "samples_per_prompt": 1, "output_dir": str(tmp_path / "run")}))
    r = CliRunner().invoke(app, ["generate", str(path)])
    assert r.exit_code == 2 and "field 'samples_per_prompt': a homogeneity run compares pairs" in r.output
    seen = {}
    monkeypatch.setattr(H, "generate_homogeneity", lambda cfg, **k: seen.update(k, cfg=cfg) or H.TopUpSummary(3, 0, 0, {}))
    r = CliRunner().invoke(app, ["generate", str(path), "--target", "3"])
    assert r.exit_code == 0, r.output
    assert seen["target"] == 3 and seen["cfg"].homogeneity.target == 3
    monkeypatch.undo()
    path.write_text(yaml.safe_dump({**BASE, "samples_per_prompt": 3, "output_dir": str(tmp_path / "run")}))
    r = CliRunner().invoke(app, ["generate", str(path), "--target", "1"])
    assert r.exit_code == 2 and r.output.startswith("error: target must be at least 2 texts per prompt"), r.output
    assert not (tmp_path / "run").exists()


def test_a_run_without_homogeneity_tables_or_short_of_one_is_named_with_the_stage_to_rerun(tmp_path):
    from harness.errors import DataError
    from harness.report.homogeneity import load_run_tables

    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(DataError, match=r"bare: no run\.json, so it is no run directory; give the output_dir of"):
        load_run_tables(bare)
    (bare / "run.json").write_text(json.dumps({"config": {"name": "m", "suite": "homogeneity"}}))
    with pytest.raises(DataError, match=r"bare: no homogeneity tables; run `harness run CONFIG --stages statistics`"):
        load_run_tables(bare)
    run = _fake_run(tmp_path / "a", "model-a", 1)
    (run / "homogeneity" / "minilm-l6" / "lrt.csv").unlink()
    with pytest.raises(DataError, match=r"minilm-l6: table\(s\) lrt\.csv missing; rerun the statistics stage$"):
        load_run_tables(run)
