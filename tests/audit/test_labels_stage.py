"""The label stage's labeller: the encoder trained on first use takes extra files from the config."""

from __future__ import annotations

import re

import pytest

from harness.audit.labels import make_labeller
from harness.config import parse_config
from harness.errors import ConfigError


def test_missing_extra_training_file_stops_before_training(tmp_path):
    cfg = parse_config({
        "model": {"backend": "transformers", "path": "smollm2-135m"},
        "output_dir": str(tmp_path / "run"),
        "label": {"labeller": "encoder", "model_dir": str(tmp_path / "enc"), "train_if_missing": True,
                  "train_extra": [str(tmp_path / "nope.jsonl")], "train_epochs": 2},
    })
    assert cfg.label.train_epochs == 2
    with pytest.raises(ConfigError, match=r"label\.train_extra: .*nope\.jsonl not found"):
        make_labeller(cfg, echo=lambda s: None)
    assert not (tmp_path / "enc").exists()  # nothing was trained or written


def _config(tmp_path, **label):
    return parse_config({
        "model": {"backend": "transformers", "path": "smollm2-135m"},
        "output_dir": str(tmp_path / "run"),
        "label": {"labeller": "encoder", "train_extra": [str(tmp_path / "nope.jsonl")], **label},
    })


def test_a_model_dir_without_an_encoder_stops_the_run_instead_of_training_there(tmp_path):
    """A mistyped ``label.model_dir`` must not train a new model in its place: the run stops, naming the
    setting, the path and the three ways out, and writes nothing."""
    cfg = _config(tmp_path, model_dir=str(tmp_path / "encodr"))
    with pytest.raises(ConfigError) as e:
        make_labeller(cfg, echo=lambda s: None)
    msg = str(e.value)
    assert msg.startswith(f"label.model_dir: {tmp_path / 'encodr'} holds no trained encoder")
    assert f"harness label train --out {tmp_path / 'encodr'}" in msg and "label.train_if_missing: true" in msg
    assert "\n" not in msg
    assert not (tmp_path / "encodr").exists()


def test_the_user_cache_is_trained_on_first_use_unless_told_not_to(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    # default: the user cache goes on to training, which here stops at the missing extra file
    with pytest.raises(ConfigError, match=r"label\.train_extra: .*nope\.jsonl not found"):
        make_labeller(_config(tmp_path), echo=lambda s: None)
    with pytest.raises(ConfigError, match=r"label\.train_if_missing is false and the user cache: .*cache"):
        make_labeller(_config(tmp_path, train_if_missing=False), echo=lambda s: None)


def test_run_stops_on_a_missing_model_dir_before_generating(tmp_path, monkeypatch):
    """The check runs before the first stage: hours of generation are not spent before the label stage
    finds its model directory missing. A run without the label stage, or with another labeller, goes on."""
    from harness.audit import stages
    from harness.audit.stages import StageResult, run_stages

    ran = []
    for name in stages.RUNNERS:
        monkeypatch.setitem(stages.RUNNERS, name,
                            lambda cfg, store, name=name, **kw: ran.append(name) or StageResult(name, "done", 0.0))
    cfg = _config(tmp_path, model_dir=str(tmp_path / "encodr"))
    with pytest.raises(ConfigError, match=r"^label\.model_dir: "):
        run_stages(cfg, stages=["generate", "label"], progress=False, echo=lambda s: None)
    assert ran == [] and not (tmp_path / "run").exists()
    run_stages(cfg, stages=["generate"], progress=False, echo=lambda s: None)
    assert ran == ["generate"]
    rules = parse_config({**cfg.model_dump(mode="json"), "label": {"labeller": "rules"}})
    run_stages(rules, stages=["generate", "label"], progress=False, echo=lambda s: None)
    assert ran == ["generate", "generate", "label"]


def test_the_llm_labellers_backend_is_closed_with_it(tmp_path, monkeypatch):
    """The label stage starts the LLM labeller's backend for it alone: closing the labeller releases it (a
    vLLM engine's GPU memory and process, an HTTP client), as the labeller does with a backend it starts."""
    import harness.generation as G
    from harness.generation.base import Backend

    closed = []

    class Engine(Backend):
        name = "engine"

        def generate(self, requests, params, *, progress=False):
            return iter(())

        def close(self):
            closed.append(self)

    monkeypatch.setattr(G, "load_backend", lambda cfg, seed=0: Engine())
    cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"},
                        "output_dir": str(tmp_path / "run"),
                        "label": {"labeller": "llm", "llm": {"backend": "transformers", "path": "smollm2-135m"}}})
    lab = make_labeller(cfg, echo=lambda s: None)
    assert not closed
    lab.close()
    assert len(closed) == 1 and closed[0] is lab.backend


def _llm_config(tmp_path, label):
    return parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"},
                         "output_dir": str(tmp_path / "run"), "label": label})


@pytest.mark.parametrize("llm, message", [
    (None, r"label\.llm: the llm labeller needs a model block \(backend, path\) under label\.llm"),
    ({"backend": "transformers", "path": "/no/such/model"},
     r"label\.llm\.path: '/no/such/model' does not exist; give a local model directory"),
    ({"backend": "transformers", "path": "TMP", "gguf_file": "model.gguf"},
     r"label\.llm\.gguf_file: 'model\.gguf' not found in '.*'; fix the file name"),
    ({"backend": "openai", "path": "m"}, r"label\.llm\.base_url: the openai backend needs the server's URL, e\.g\. "),
    ({"backend": "vllm", "path": "smollm2-135m", "base_url": "http://127.0.0.1:8000/v1"},
     r"label\.llm\.base_url: a server's URL is for the openai backend, not vllm; set label\.llm\.backend: openai"),
    ({"backend": "vllm", "path": "smollm2-135m", "device": "cpu"},
     r"label\.llm\.device: the vllm backend does not read it \(vLLM places the model itself\); remove it, or use "
     r"backend transformers$"),
    ({"backend": "openai", "path": "m", "base_url": "http://127.0.0.1:8000/v1", "max_model_len": 2048},
     r"label\.llm\.max_model_len: the openai backend does not read it .*or use backend transformers or vllm$"),
])
def test_a_wrong_llm_labeller_model_block_stops_the_run_before_generating_naming_its_field(tmp_path, monkeypatch,
                                                                                          llm, message):
    """The llm labeller's model (``label.llm``) is checked with the run's, before the first stage: a missing block,
    a mistyped path, an openai backend without its server, a server given to a local engine or a field its backend
    does not read stop the run in one line naming the ``label.llm`` field (not the run's ``model.path``), not hours
    of generation later (or never, for a field that would do nothing)."""
    from harness.audit import stages
    from harness.audit.stages import StageResult, run_stages

    ran = []
    for name in stages.RUNNERS:
        monkeypatch.setitem(stages.RUNNERS, name,
                            lambda cfg, store, name=name, **kw: ran.append(name) or StageResult(name, "done", 0.0))
    if llm and llm["path"] == "TMP":  # a model directory that exists
        llm = {**llm, "path": str(tmp_path)}
    cfg = _llm_config(tmp_path, {"labeller": "llm", **({"llm": llm} if llm else {})})
    for start in (lambda: run_stages(cfg, stages=["generate", "label"], progress=False, echo=lambda s: None),
                  lambda: make_labeller(cfg, echo=lambda s: None)):
        with pytest.raises(ConfigError) as e:
            start()
        assert re.match(message, str(e.value)) and "\n" not in str(e.value)
    assert ran == [] and not (tmp_path / "run").exists()
    run_stages(cfg, stages=["generate"], progress=False, echo=lambda s: None)  # a run without the label stage goes on
    assert ran == ["generate"]


def test_a_mistyped_labeller_name_is_an_error_of_the_config_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"field 'label\.labeller': unknown labeller 'llmm'; choose one of encoder, "
                                          r"llm, rules \(got 'llmm'\)"):
        _llm_config(tmp_path, {"labeller": "llmm", "llm": {"backend": "transformers", "path": "smollm2-135m"}})



def test_the_llm_labellers_sampling_attempts_and_batch_come_from_the_config(tmp_path, monkeypatch):
    """``label.llm_sampling`` and ``label.llm_attempts`` reach the LLM labeller (the authors sampled at the
    API's temperature 1; there was no way to ask for it): the fields given replace the labeller's own greedy
    256 tokens, so ``{temperature: 1}`` keeps 256 tokens and ``{max_new_tokens: 512}`` stays greedy."""
    import harness.generation as G
    from harness.generation.base import Backend

    class Engine(Backend):
        name = "engine"

        def generate(self, requests, params, *, progress=False):
            return iter(())

    monkeypatch.setattr(G, "load_backend", lambda cfg, seed=0: Engine())
    llm = {"backend": "transformers", "path": "smollm2-135m"}

    def info(**label):
        lab = make_labeller(_llm_config(tmp_path, {"labeller": "llm", "llm": llm, **label}), echo=lambda s: None)
        return {k: lab.info()[k] for k in ("temperature", "top_p", "max_tokens", "max_attempts", "stop")}

    assert info() == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 256, "max_attempts": 3, "stop": []}
    assert info(llm_sampling={"temperature": 1.0, "top_p": 0.9}, llm_attempts=5) == {
        "temperature": 1.0, "top_p": 0.9, "max_tokens": 256, "max_attempts": 5, "stop": []}
    # what info() holds is checked on resume (check_labeller): stop too
    assert info(llm_sampling={"max_new_tokens": 512, "stop": ["}"]}) == {
        "temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "max_attempts": 3, "stop": ["}"]}
    # the engine's batch is filled with as many stories: label.llm.batch_size, unless label.batch_size says
    lab = make_labeller(_llm_config(tmp_path, {"labeller": "llm", "llm": {**llm, "batch_size": 256}}), echo=print)
    assert lab.default_batch_size == 256
    lab = make_labeller(_llm_config(tmp_path, {"labeller": "llm", "llm": {**llm, "batch_size": 256}, "batch_size": 8}),
                        echo=print)
    assert lab.default_batch_size == 16  # label_run passes label.batch_size, 8, to iter_label
    with pytest.raises(ConfigError, match=r"label\.llm_attempts"):
        _llm_config(tmp_path, {"labeller": "llm", "llm": llm, "llm_attempts": 0})


def test_first_use_training_with_several_seeds_saves_their_soup(tmp_path, monkeypatch):
    import harness.labelling.training as training

    calls = []
    report = training.TrainReport("enc", 1, 1, 2, 1.0, 0.1, "x")
    monkeypatch.setattr(training, "train_soup", lambda files, seeds, **kw: calls.append((list(seeds), kw)) or report)
    for seeds in ([0, 1], [3]):
        calls.clear()
        cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"},
                            "output_dir": str(tmp_path / "run"),
                            "label": {"labeller": "encoder", "model_dir": str(tmp_path / "enc"),
                                      "train_if_missing": True, "train_seeds": seeds, "train_epochs": 2,
                                      "train_jobs": 2, "train_precision": "bfloat16"}})
        with pytest.raises(ConfigError):  # nothing was trained, so the labeller finds no model afterwards
            make_labeller(cfg, echo=lambda s: None)
        assert [c[0] for c in calls] == [seeds]
        assert calls[0][1]["epochs"] == 2 and calls[0][1]["out_dir"] == tmp_path / "enc" and calls[0][1]["jobs"] == 2
        assert calls[0][1]["precision"] == "bfloat16"
    with pytest.raises(ConfigError, match="train_seeds"):
        parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}, "output_dir": str(tmp_path / "r"),
                      "label": {"train_seeds": []}})


def test_a_mistyped_gender_lexicon_stops_the_run_before_generating(tmp_path, monkeypatch):
    """identity.lexicon is read when the identities stage starts, after generation and labelling: a path that
    does not exist stops `harness run` before its first stage instead."""
    from harness.audit import stages
    from harness.audit.stages import StageResult, run_stages

    ran = []
    for name in stages.RUNNERS:
        monkeypatch.setitem(stages.RUNNERS, name,
                            lambda cfg, store, name=name, **kw: ran.append(name) or StageResult(name, "done", 0.0))
    cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}, "output_dir": str(tmp_path / "run"),
                        "label": {"labeller": "rules"}, "identity": {"lexicon": str(tmp_path / "mine.yaml")}})
    with pytest.raises(ConfigError, match=rf"gender lexicon file {tmp_path / 'mine.yaml'} not found; pass one of "):
        run_stages(cfg, progress=False, echo=lambda s: None)
    assert ran == [] and not (tmp_path / "run").exists()
    run_stages(cfg, stages=["generate", "label"], progress=False, echo=lambda s: None)  # no identities: not read
    assert ran == ["generate", "label"]


def test_jobs_sharing_the_cache_train_the_encoder_once(tmp_path, monkeypatch):
    """Two jobs of an array starting on a machine without a trained encoder each trained one into the same folder,
    each writing over the other's files; now the second waits for the first and uses its model."""
    import json
    import threading
    import time

    import harness.labelling as labelling
    import harness.labelling.training as training

    trained, said = [], []

    def fake_train(files, seeds, out_dir, **kw):
        trained.append(out_dir)
        time.sleep(0.5)
        out_dir.mkdir(parents=True)
        (out_dir / "meta.json").write_text("{}")
        return training.TrainReport(str(out_dir), 1, 1, 2, 1.0, 0.1, "x", resumed_epochs=1)

    monkeypatch.setattr(training, "train_soup", fake_train)
    monkeypatch.setattr(labelling, "get_labeller", lambda name, **kw: kw["path"])
    cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}, "output_dir": str(tmp_path / "run"),
                        "label": {"labeller": "encoder", "model_dir": str(tmp_path / "enc"), "train_if_missing": True}})
    got = []
    first = threading.Thread(target=lambda: got.append(make_labeller(cfg, echo=said.append)))
    first.start()
    while not trained:
        time.sleep(0.01)
    got.append(make_labeller(cfg, echo=said.append))  # the second job, while the first trains
    first.join()
    assert trained == [tmp_path / "enc"] and got == [tmp_path / "enc"] * 2
    assert any(s == f"[label] another job is training the encoder at {tmp_path / 'enc'}; waiting for it" for s in said)
    assert [s for s in said if "trained on" in s] == [  # the training's own line, once
        f"[label] trained on 1 story (1 word) for 2 epochs in 1 s on cpu; went on from 1 epoch a training cut "
        f"short had finished; final loss 0.1000; saved to {tmp_path / 'enc'}"]

    # a job that asked for other training settings, waiting while another trains with the defaults, is refused
    # afterwards as it would be at its start (it used the other job's model without a word)
    import shutil

    shutil.rmtree(tmp_path / "enc")
    trained.clear()
    other = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"},
                          "output_dir": str(tmp_path / "run2"),
                          "label": {"labeller": "encoder", "model_dir": str(tmp_path / "enc"), "train_if_missing": True,
                                    "train_epochs": 3}})

    def fake_train_meta(files, seeds, out_dir, **kw):
        trained.append(out_dir)
        time.sleep(0.5)
        (out_dir / "encoder").mkdir(parents=True)
        (out_dir / "encoder" / "config.json").write_text("{}")
        (out_dir / "head.pt").write_bytes(b"")
        (out_dir / "encoder" / "model.safetensors").write_bytes(b"")
        (out_dir / "encoder" / "tokenizer.json").write_text("{}")
        (out_dir / "meta.json").write_text(json.dumps({"format": 1, "train": {"epochs": 8, "seed": 0}, "files": []}))
        return training.TrainReport(str(out_dir), 1, 1, 8, 1.0, 0.1, "x")

    monkeypatch.setattr(training, "train_soup", fake_train_meta)
    first = threading.Thread(target=lambda: make_labeller(cfg, echo=said.append))
    first.start()
    while not trained:
        time.sleep(0.01)
    try:
        with pytest.raises(ConfigError, match=r"^label\.train_epochs: the encoder at .* was trained with 8, not 3"):
            make_labeller(other, echo=said.append)
    finally:
        first.join()
    assert [s for s in said if "trained on" in s][:1] == [  # (the first part's line)
        f"[label] trained on 1 story (1 word) for 2 epochs in 1 s on cpu; went on from 1 epoch a training cut "
        f"short had finished; final loss 0.1000; saved to {tmp_path / 'enc'}"]
