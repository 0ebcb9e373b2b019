"""The labelling benchmark's random-weights labeller (timing an architecture whose trained weights
cannot reach the GPU machine): same architecture, tokenizer and settings, other weights."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "labelling.py"


def _bench():
    spec = importlib.util.spec_from_file_location("labelling_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_random_weights_keep_the_architecture_and_settings_and_label(tiny_encoder, gold, tmp_path):
    import torch
    from safetensors.torch import load_file

    from harness.labelling.encoder import EncoderLabeller

    trained, _ = tiny_encoder
    skeleton = tmp_path / "skeleton"
    shutil.copytree(trained, skeleton, ignore=shutil.ignore_patterns("*.safetensors", "*.pt"))
    out = _bench().random_model_dir(skeleton, tmp_path / "random")
    assert json.loads((out / "meta.json").read_text()) == json.loads((trained / "meta.json").read_text())
    assert json.loads((out / "encoder" / "config.json").read_text())["num_hidden_layers"] == 2
    a, b = (load_file(str(d / "encoder" / "model.safetensors")) for d in (trained, out))
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    lab = EncoderLabeller(out, device="cpu", workers=0)
    stories = [g.story for g in gold[:3]]
    assert [labels.story_id for labels in lab.label(stories)] == [s.story_id for s in stories]


def test_random_weights_need_a_config(tmp_path):
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(SystemExit, match="encoder/config.json"):
        _bench().random_model_dir(tmp_path, tmp_path / "out")
    # and the settings: a skeleton without meta.json is refused with the fix, not a FileNotFoundError traceback
    (tmp_path / "meta.json").unlink()
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match="needs meta.json"):
        _bench().random_model_dir(tmp_path, tmp_path / "out")


def test_the_host_layout_benchmark_labels_as_the_model_does(tiny_encoder, gold):
    """``--host-layout``: the GPU layout's worker processes, the model served from a table of its own
    probabilities, give the model's labels; the figures it reports are rates of that run."""
    trained, _ = tiny_encoder
    # a low threshold gives the tiny encoder more labels to compare
    res = _bench().host_layout(trained, [g.story for g in gold], 40, 8, workers=1, threshold=0.1)
    assert res["labels_equal_the_model"] is True and res["labelled_characters"] >= 10
    assert res["stories"] == 40 and res["workers"] == 1
    assert res["host_per_s"] > 0 and res["main_cpu_us_per_story"] > 0 and res["lookup_us_per_story"] > 0
    assert res["worker_cpu_us_per_story"] >= 0 and res["worker_busy_share"] >= 0  # read from /proc on Linux


def test_the_end_to_end_benchmark_says_where_the_time_went(tiny_encoder, gold):
    """``--end-to-end-only``: ``label`` timed as a user calls it, with the share of the wall time in the
    model's forward pass, and the labeller's forward left as it was (the method, or one set on it)."""
    from harness.labelling.encoder import EncoderLabeller

    trained, _ = tiny_encoder
    lab = EncoderLabeller(trained, device="cpu", workers=0)
    res = _bench().throughput(lab, [g.story for g in gold], 24, 8, end_to_end_only=True)
    assert res["stories"] == 24 and res["workers"] == 0 and res["end_to_end_per_s"] > 0
    assert 0 < res["main_forward_share"] <= 1 and res["main_cpu_us_per_story"] > 0
    assert res["worker_cpu_us_per_story"] is None and res["worker_busy_share"] is None
    assert "_forward" not in vars(lab)
    calls = []
    forward = lab._forward
    lab._forward = own = lambda *a: calls.append(len(a[0])) or forward(*a)
    _bench().end_to_end(lab, [g.story for g in gold][:8], 8, lambda: None)
    assert lab._forward is own and calls


def test_the_packed_gpu_labeller_unpacks_to_the_fp16_labeller(tiny_encoder, gold, labelled, tmp_path):
    """benchmarks/gpu_prepare.py packs the fp16 labeller for the GPU machine and gpu.sh unpacks it with
    tar into .gpu/labeller: the unpacked directory labels as the fp16 copy does."""
    import subprocess

    import torch
    from safetensors.torch import load_file

    from harness.labelling.encoder import EncoderLabeller

    spec = importlib.util.spec_from_file_location("gpu_prepare", BENCH.parent / "gpu_prepare.py")
    prep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prep)
    trained, _ = tiny_encoder
    prep.fp16_copy(trained, tmp_path / "fp16")
    prep.pack(tmp_path / "fp16", tmp_path / "labeller.tar.xz", "labeller")
    (tmp_path / "gpu").mkdir()
    subprocess.run(["tar", "-xJf", str(tmp_path / "labeller.tar.xz"), "-C", str(tmp_path / "gpu")], check=True)
    stories = [g.story for g in gold]
    want = EncoderLabeller(tmp_path / "fp16", device="cpu", workers=0).label(stories)
    got = EncoderLabeller(tmp_path / "gpu" / "labeller", device="cpu", workers=0).label(stories)
    assert labelled(want) >= 10
    assert [s.characters for s in got] == [s.characters for s in want]
    # the weights travel in fp16: half the bytes of the float32 original
    packed = load_file(str(tmp_path / "gpu" / "labeller" / "encoder" / "model.safetensors"))
    assert {w.dtype for w in packed.values()} == {torch.float16}


def test_the_host_scaling_benchmark_runs_processes_side_by_side(tiny_encoder, gold, monkeypatch):
    """benchmarks/host_scaling.py: W processes at once, each doing the host work alone; rates of that run."""
    monkeypatch.syspath_prepend(str(BENCH.parent))  # spawned processes import its worker function by name
    mod = importlib.import_module("host_scaling")
    trained, _ = tiny_encoder
    rows = mod.scaling(trained, [g.story for g in gold], [2, 1], 0.3, 8)  # the baseline, W = 1, need not come first
    assert [r["processes"] for r in rows] == [2, 1]
    assert all(0 < r["lowest"] <= r["stories_per_s_per_process"] for r in rows)
    # the two processes' timed work overlapped (processes run one after the other passed every check above)
    assert rows[0]["all_at_once"] > 0.5 and rows[1]["all_at_once"] == 1.0
    with pytest.raises(ValueError, match="include 1"):
        mod.scaling(trained, [g.story for g in gold], [2, 4], 0.3, 8)


def test_the_stream_benchmark_reads_memory_as_it_goes_and_judges_the_growth(tiny_encoder, gold):
    from harness.labelling.encoder import EncoderLabeller

    bench = _bench()
    assert bench.memory_flat([(128, 1000.0), (256, 1040.0), (384, 1020.0), (512, 1050.0)]) == (10.0, True)
    assert bench.memory_flat([(128, 1000.0), (256, 1000.0), (384, 1200.0), (512, 1300.0)]) == (300.0, False)
    with pytest.raises(ValueError, match="stream more stories"):
        bench.memory_flat([(128, 1.0), (256, 1.0)])
    trained, _ = tiny_encoder
    lab = EncoderLabeller(trained, device="cpu", workers=0)
    res = bench.stream_memory(lab, [g.story for g in gold], 520, 8)
    assert res["stories"] == 520 and [k for k, _ in res["samples"]] == [128, 256, 384, 512, 520]
    assert res["memory_flat"] is True and res["rss_max_mib"] >= res["rss_first_mib"] > 0


def test_the_section_says_how_the_weights_were_trained():
    text = _bench().training_text({"files": ["project_train.jsonl", "laissez_faire_train150.jsonl"], "epochs": 16,
                                   "batch_size": 8, "lr": 3e-4, "seed": 1, "model_layers": 6, "init_from": None,
                                   "device": "cuda", "seconds": 36.0}, "minilm")
    assert "on cuda" in text and "seed 1" in text and "lr 0.0003" in text and ", 6 layers," in text
    assert "`harness label train --extra laissez_faire_train150.jsonl --epochs 16 --lr 0.0003 --seed 1`" in text
    soup = _bench().training_text({"files": ["project_train.jsonl"], "epochs": 16, "batch_size": 8, "lr": 1e-4,
                                   "seed": 0, "seeds": [0, 1], "seconds": 3600.0}, "minilm")
    assert "seeds 0 and 1, their weights averaged) in 3600.0 s in all on cpu" in soup
    assert soup.endswith("`harness label train --epochs 16 --seed 0 --seed 1`)")



def test_the_section_command_repeats_every_option_of_the_recipe():
    """The command dropped --precision (a bfloat16 soup was published as float32's), --batch-size, --layers and
    --init-from, and joined two --extra files with " and ", which the CLI refuses."""
    bench = _bench()
    soup = bench.training_text({"files": ["project_train.jsonl", "laissez_faire_train150.jsonl"], "epochs": 16,
                                "batch_size": 8, "lr": 1e-4, "seeds": [0, 1], "precision": "bfloat16",
                                "seconds": 4800.0}, "minilm")
    assert "seeds 0 and 1, their weights averaged, bfloat16 arithmetic)" in soup
    assert soup.endswith("`harness label train --extra laissez_faire_train150.jsonl --epochs 16 --precision bfloat16 "
                         "--seed 0 --seed 1`)")
    stage2 = bench.training_text({"files": ["project_train.jsonl", "a.jsonl", "b.jsonl"], "epochs": 6, "batch_size": 16,
                                  "lr": 1e-4, "seed": 0, "layers": 4, "model_layers": 4, "init_from": "mp6",
                                  "augment": False, "occurrences": True, "seconds": 100.0}, "mpnet")
    assert stage2.endswith("`harness label train --extra a.jsonl --extra b.jsonl --epochs 6 --batch-size 16 --layers 4 "
                           "--init-from mp6 --no-augment --occurrences`)")
    mp = bench.training_text({"files": ["project_train.jsonl"], "epochs": 6, "batch_size": 8, "lr": 5e-5, "seed": 0,
                              "seconds": 1.0}, "mpnet")
    assert mp.endswith("`harness label train --epochs 6 --lr 5e-05 --base mpnet`)")
    import typer.main

    from harness.cli import app

    train = typer.main.get_command(app).commands["label"].commands["train"]
    params = train.make_context("train", stage2.rsplit("`harness label train ", 1)[1].rstrip("`)").split()).params
    assert [p.name for p in params["extra"]] == ["a.jsonl", "b.jsonl"] and params["init_from"].name == "mp6"
    assert (params["batch_size"], params["layers"], params["augment"], params["occurrences"]) == (16, 4, False, True)


def test_the_dev_benchmark_passes_its_options_and_writes_what_it_ran(gold_path, tmp_path, monkeypatch):
    """--device and --workers were never passed to the encoder (a GPU machine judged its cuda figure against the
    2-core target); a --stream under four readings failed after the whole evaluation; the section named the shared
    dev set whatever --dev was, and --json wrote NaN, which is no JSON."""
    import subprocess
    import sys

    bench = _bench()
    seen = {}
    import harness.labelling as labelling

    def stop_at_the_labeller(name, **kw):  # the options it was given are all this part checks
        seen[name] = kw
        raise SystemExit(0)

    monkeypatch.setattr(labelling, "get_labeller", stop_at_the_labeller)
    monkeypatch.setattr(sys, "argv", ["labelling.py", "--labellers", "encoder", "--dev", str(gold_path), "--device",
                                      "cpu", "--workers", "0", "--stream", "0", "--no-write"])
    with pytest.raises(SystemExit):
        bench.main()
    assert seen["encoder"]["device"] == "cpu" and seen["encoder"]["workers"] == 0
    r = subprocess.run([sys.executable, str(BENCH), "--stream", "100", "--no-write"], capture_output=True, text=True)
    assert r.returncode == 2 and "--stream needs more than 384 stories" in r.stderr
    # a negative --llm-limit scored all the stories but the last; a missing gold file or a bad device was a traceback
    for args, message in ((["--llm-limit", "-1"], "--llm-limit must be >= 1"), (["--threads", "0"], "--threads"),
                          (["--dev", str(tmp_path / "none.jsonl"), "--labellers", "rules", "--stream", "0"],
                           "none.jsonl"),
                          (["--labellers", "bogus"], "bogus")):
        r = subprocess.run([sys.executable, str(BENCH), *args, "--no-write"], capture_output=True, text=True,
                           timeout=120)  # refused before any work: the old code ran the whole evaluation
        assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]
    out = tmp_path / "b.json"
    r = subprocess.run([sys.executable, str(BENCH), "--labellers", "rules", "--dev", str(gold_path), "--stream", "0",
                        "--no-write", "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"Gold set: `{gold_path}` (" in r.stdout and "laissez_faire_audit_dev" not in r.stdout.split("Paper")[0]
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
