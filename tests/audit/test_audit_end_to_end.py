"""`harness run` from prompts to report on the embedded model, and the report's tables
checked against the statistics module."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from browser import check_rendered, render_in_chromium

from harness.audit.statistics import compute_tables
from harness.config import StatsConfig, load_config

PROMPTS = ["learning-neutral-06", "learning-laden-06", "labor-neutral-06", "labor-laden-06",
           "love-neutral-01", "love-laden-01", "labor-laden-10", "learning-laden-08"]


@pytest.fixture(scope="module")
def audited_run(tmp_path_factory, smollm2_dir):
    tmp = tmp_path_factory.mktemp("audit")
    conf = tmp / "audit.yaml"
    conf.write_text(
        "name: smollm2-e2e\n"
        "model: {backend: transformers, path: smollm2-135m, batch_size: 8, max_model_len: 384}\n"
        "sampling: {temperature: 1.0, max_new_tokens: 96}\n"
        f"prompts: {json.dumps(PROMPTS)}\nsamples_per_prompt: 3\nseed: 1\nshard_rows: 8\n"
        f"output_dir: {tmp / 'run'}\n"
        "label: {labeller: rules}\n"
    )
    cmd = [sys.executable, "-m", "harness.cli", "run", str(conf), "--no-progress"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    return conf, tmp / "run", first.stdout, second.stdout


@pytest.mark.slow
def test_every_stage_runs_and_a_rerun_skips_them(audited_run):
    conf, run, first, second = audited_run
    for stage in ("generate", "label", "identities", "statistics", "report"):
        assert f"[{stage}] done" in first, first
        assert f"[{stage}] skipped (current)" in second, second
    assert f"report: {run / 'report' / 'index.html'}" in first
    labels = pd.read_parquet(run / "labels")
    assert len(labels.groupby(["prompt_id", "sample_idx"])) == len(PROMPTS) * 3
    chars = pd.read_parquet(run / "identities" / "characters.parquet")
    laden = chars[chars.condition == "laden"]
    assert set(laden.power_role) == {"dominant", "subordinate"}
    assert set(chars[chars.condition == "neutral"].power_role) == {"baseline"}
    assert chars.gender.isin(["Female", "Male", "Non-binary", "Unspecified", "Unsure"]).all()
    assert chars.first_name.notna().sum() > 0, "the embedded model names characters in most stories"


@pytest.mark.slow
def test_report_tables_match_the_statistics_module(audited_run):
    conf, run, _, _ = audited_run
    cfg = load_config(conf)
    chars = pd.read_parquet(run / "identities" / "characters.parquet")
    from harness.audit.stages import IDENTITIES, recorded
    from harness.store import RunStore

    expected = compute_tables(chars, StatsConfig(**cfg.statistics.model_dump()), min_population=cfg.identity.min_population,
                              representative=recorded(RunStore(run), IDENTITIES)["representative_shares"])
    report = run / "report"
    for name in ("representation", "subordination", "rmrs", "orientation", "top_names"):
        got = pd.read_csv(report / "tables" / f"{name}.csv")
        exp = expected[name]
        assert len(got) == len(exp), name
        for col in ("statistic", "p", "ci_low", "ci_high"):
            if col in exp:
                np.testing.assert_allclose(got[col].to_numpy(float), exp[col].to_numpy(float), rtol=1e-9, equal_nan=True, err_msg=f"{name}.{col}")
    html = (report / "index.html").read_text()
    for fig in ("fig1a_representation_race", "fig2_subordination", "fig3b_threshold_curve"):
        if f"id={fig}>" in html:
            assert (report / "figures" / f"{fig}.png").stat().st_size > 1000
            assert (report / "figures" / f"{fig}.csv").exists()
    assert "Table S13a-c" in html and "coding_sheet.csv" in html
    assert (report / "tables" / "coding_sheet.csv").exists()


@pytest.mark.slow
def test_report_renders_in_headless_chromium(audited_run, tmp_path):
    _, run, _, _ = audited_run
    index = run / "report" / "index.html"
    dom, log, shot = render_in_chromium(index, tmp_path)
    check_rendered(index, dom, log, shot, copy_as="report.png")


@pytest.mark.slow
def test_a_new_name_parsing_parses_the_characters_again(audited_run, tmp_path, monkeypatch):
    """The identities stage records the name-parsing version (non_names.yaml) and the gender inference's:
    after a bump, the characters of an existing run are parsed again instead of being kept as current."""
    import dataclasses
    import shutil

    from harness.audit.stages import stage_identities
    from harness.identity import names
    from harness.store import RunStore

    conf, run, _, _ = audited_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    cfg = load_config(conf).model_copy(update={"output_dir": copy})
    assert stage_identities(cfg, RunStore(copy)).status == "skipped (current)"
    bumped = dataclasses.replace(names.name_lists(), version="bumped")
    monkeypatch.setattr(names, "name_lists", lambda: bumped)
    assert stage_identities(cfg, RunStore(copy)).status == "done"
    assert json.loads((copy / "identities" / "_stage.json").read_text())["name_parsing"] == "bumped"
    # and so does the gender inference's version (gender.py's rules, not a lexicon's words)
    from harness.identity import gender

    assert stage_identities(cfg, RunStore(copy)).status == "skipped (current)"
    monkeypatch.setattr(gender, "INFERENCE_VERSION", "bumped")
    assert stage_identities(cfg, RunStore(copy)).status == "done"
    assert json.loads((copy / "identities" / "_stage.json").read_text())["gender_inference"] == "bumped"
