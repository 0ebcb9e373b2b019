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

from conftest import synthetic_corpus

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
