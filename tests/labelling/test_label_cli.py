"""`harness label` commands through Typer's runner."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.labelling.base import StoryLabels
from harness.labelling.cli import app
from harness.labelling.evaluate import JSON_KEYS

runner = CliRunner()


def test_eval_json_keys_rules(gold_path):
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert tuple(d) == JSON_KEYS
    assert d["stories"] == 21 and d["stories_per_s"] > 0
    # the figures of scoring the rules labeller's labels directly, and above the floor it keeps on the
    # project's 21 gold stories (70.0/46.7 gender, 83.3/55.6 names when written)
    from harness.labelling.data import load_gold
    from harness.labelling.evaluate import score
    from harness.labelling.rules import RulesLabeller

    gold = load_gold(gold_path)
    want = score(gold, RulesLabeller().label([g.story for g in gold]), n_boot=0).overall()
    assert [d[k] for k in JSON_KEYS[:4]] == [want[k] for k in JSON_KEYS[:4]]
    assert d["gender_precision"] >= 0.65 and d["gender_recall"] >= 0.4
    assert d["name_precision"] >= 0.75 and d["name_recall"] >= 0.5


def test_eval_encoder_summary_and_details(gold_path, tiny_encoder, tmp_path):
    out_dir, _ = tiny_encoder
    details = tmp_path / "d.json"
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(out_dir), "--limit", "5",
                            "--details", str(details)])
    assert r.exit_code == 0, r.output
    assert "labeller `encoder`" in r.stdout and "gender confusion" in r.stdout
    def no_constant(c):
        raise AssertionError(f"{c} is not JSON")

    d = json.loads(details.read_text(), parse_constant=no_constant)  # a figure with no denominator: null
    assert d["stories"] == 5 and set(JSON_KEYS) <= set(d)


def test_eval_run_scores_the_labeller_that_labelled_the_run(gold_path, tiny_encoder, tmp_path, monkeypatch):
    """`label eval --run RUN` builds the labeller from the config the run recorded (its encoder folder, precision,
    checks and gender lexicon) and holds it to the labeller the run recorded: it scores as the options that build the
    same labeller do, and its --details are what the run's report reads. Options that build a labeller are refused
    beside it, and so are a folder with no run, a run not yet labelled and a run another labeller labelled."""
    from harness.audit.labels import make_labeller
    from harness.config import parse_config
    from harness.report.qa import labeller_summary
    from harness.store import RunStore

    out_dir, _ = tiny_encoder
    cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"},
                        "label": {"labeller": "encoder", "model_dir": str(out_dir), "precision": "int8",
                                  "name_check": False}, "identity": {"lexicon": "neopronouns"}})
    store = RunStore(tmp_path / "run")
    store.update_manifest(config=cfg.model_dump(mode="json"))
    run = ["eval", "--gold", str(gold_path), "--run", str(store.root)]
    r = runner.invoke(app, run)
    assert r.exit_code != 0 and f"--run {store.root}: its label stage has not run (no labeller recorded" in r.output
    lab = make_labeller(cfg, echo=lambda line: None)
    recorded = json.loads(json.dumps(lab.info(), default=str))  # as the label stage records it
    lab.close()
    store.update_manifest(labeller=recorded)
    details = tmp_path / "scores.json"
    r = runner.invoke(app, [*run, "--json", "--details", str(details)])
    assert r.exit_code == 0, r.output
    by_hand = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(out_dir), "--precision", "int8",
                                  "--no-name-check", "--lexicon", "neopronouns", "--json"])
    assert by_hand.exit_code == 0, by_hand.output
    keys = ("gender_precision", "gender_recall", "name_precision", "name_recall", "stories")
    assert [json.loads(r.stdout)[k] for k in keys] == [json.loads(by_hand.stdout)[k] for k in keys]
    scored = json.loads(details.read_text())
    assert scored["labeller_info"]["name_check"] is False and scored["labeller_info"]["precision"] == "int8"
    assert scored["lexicon"].startswith("s6a+neopronouns")  # the run's, not the default s6a
    shutil.copy(details, store.root / "labeller_evaluation.json")  # where the report's command writes them
    assert labeller_summary(recorded, store.root)["evaluation"]["gender_recall"] == scored["gender_recall"]
    import harness.labelling.cli as cli

    built, real = [], cli._labeller  # --against's encoder is built with the run's settings, not the options' defaults
    monkeypatch.setattr(cli, "_labeller", lambda *a, **kw: built.append((a, kw)) or real(*a, **kw))
    r = runner.invoke(app, [*run, "--against", str(out_dir), "--json", "--limit", "3"])
    assert r.exit_code == 0, r.output
    assert [(a[:2], a[4:8], kw) for a, kw in built] == [(("encoder", out_dir), (False, True, True, True),
                                                         {"precision": "int8"})]
    assert set(json.loads(r.stdout)["against"]["gender_recall"]) <= {0.0, None}  # the same labeller, scored twice
    for extra in (["--model-dir", str(out_dir)], ["--no-action-check"], ["--labeller", "rules"], ["--threads", "1"],
                  ["--llm-model", "x"], ["--precision", "int8"]):
        r = runner.invoke(app, [*run, *extra])
        assert r.exit_code != 0 and f"{extra[0]} with --run: the run's config builds its labeller; drop {extra[0]}" \
            in r.output, extra
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--run", str(tmp_path / "none")])
    assert r.exit_code != 0 and f"--run {tmp_path / 'none'}: no run here" in r.output
    store.update_manifest(labeller={**recorded, "head_sha256": "0" * 64})  # other weights labelled it
    r = runner.invoke(app, run)
    assert r.exit_code != 0 and "the labeller its config builds now is not the one that labelled it (head_sha256 " \
        in r.output


def test_eval_run_builds_the_labeller_the_label_stage_recorded_not_the_config_that_started_the_run(gold_path, tmp_path):
    """The manifest's config is the one that started the run; `harness run --set label.labeller=rules` later labelled
    it with what ``label_settings`` records. --run builds that labeller, an LLM's sampling as the labeller used it
    (recorded as GenParams: max_tokens, not the config's max_new_tokens), and the server it recorded."""
    from harness.audit.labels import _label_block_as_used, label_settings, llm_label_params, run_config
    from harness.config import parse_config
    from harness.labelling.rules import RulesLabeller
    from harness.store import RunStore

    started = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}})  # the encoder's
    relabelled = parse_config({**started.model_dump(mode="json"), "label": {"labeller": "rules"}})
    store = RunStore(tmp_path / "run")
    store.update_manifest(config=started.model_dump(mode="json"), label_settings=label_settings(relabelled),
                          labeller=json.loads(json.dumps(RulesLabeller().info(), default=str)))
    assert run_config(store.root).label.labeller == "rules"
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--run", str(store.root), "--json"])
    by_hand = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--json"])
    assert r.exit_code == 0 and by_hand.exit_code == 0, r.output + by_hand.output
    keys = ("gender_precision", "gender_recall", "name_precision", "name_recall", "stories")
    assert [json.loads(r.stdout)[k] for k in keys] == [json.loads(by_hand.stdout)[k] for k in keys]
    llm = parse_config({**started.model_dump(mode="json"), "label": {
        "labeller": "llm", "llm": {"backend": "openai", "path": "qwen", "base_url": "http://h:1/v1", "api_key": "k"},
        "llm_sampling": {"temperature": 0.3, "max_new_tokens": 99}, "llm_attempts": 2}})
    block = _label_block_as_used({"labeller": "encoder", "train_epochs": 8, "llm": {"api_key": "k", "batch_size": 4}},
                                 label_settings(llm), {"labeller": "llm", "base_url": "http://h:1/v1"})
    again = parse_config({**started.model_dump(mode="json"), "label": block})
    assert llm_label_params(again) == llm_label_params(llm) and again.label.llm_attempts == 2
    assert (again.label.llm.base_url, again.label.llm.api_key, again.label.llm.batch_size) == ("http://h:1/v1", "k", 4)
    assert "train_epochs" not in again.label.model_fields_set  # not held to the trained model


def test_label_command_takes_the_encoders_precision(gold_path, tiny_encoder, tmp_path):
    out_dir, _ = tiny_encoder
    out = tmp_path / "labels.jsonl"
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(out), "--model-dir", str(out_dir),
                            "--precision", "int8"])
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 21
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(out_dir), "--precision", "float16"])
    assert r.exit_code != 0
    err = r.stderr.strip().splitlines()[-1]  # after the model loader's progress lines
    assert err.startswith("error: precision 'float16' is not one of bfloat16, int8, float32 on cpu")


def test_eval_against_a_second_encoder(gold_path, tiny_encoder, tmp_path):
    """The same encoder against itself differs by exactly zero, with a zero-width interval; against
    another encoder, by the difference of the two figures, this one minus that one."""
    import pytest

    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import train_encoder

    out_dir, _ = tiny_encoder
    args = ["eval", "--gold", str(gold_path), "--model-dir", str(out_dir), "--against", str(out_dir), "--limit", "6"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # a figure with no denominator (the tiny encoder may give no gender) is null, else zero
    assert d["against"]["gender_recall"] == [0.0, 0.0, 0.0]
    assert all(v in ([0.0] * 3, [None] * 3) for v in d["against"].values())
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "95% intervals (stories resampled" in r.stdout and "gender R +0.0 (+0.0 to +0.0)" in r.stdout
    other = tmp_path / "other"  # a weaker encoder: one epoch on other stories
    train_encoder(builtin_training_files(), out_dir=other, epochs=1, batch_size=4, lr=1e-3, layers=2, limit=6,
                  seed=1)
    scored = {}
    for name, model in (("this", out_dir), ("that", other)):
        r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(model), "--json"])
        assert r.exit_code == 0, r.output
        scored[name] = json.loads(r.stdout)
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(out_dir), "--against", str(other),
                            "--json"])
    assert r.exit_code == 0, r.output
    diff = json.loads(r.stdout)["against"]
    gaps = {k: scored["this"][k] - scored["that"][k] for k in diff
            if None not in (scored["this"][k], scored["that"][k])}
    assert any(abs(g) > 0.01 for g in gaps.values())  # two encoders that label differently
    for k, g in gaps.items():
        assert diff[k][0] == pytest.approx(g)


def test_label_command(gold_path, tmp_path):
    out = tmp_path / "labels.jsonl"
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0, r.output
    rows = [StoryLabels.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert len(rows) == 21 and rows[0].story_id == "tg-001"


def test_label_command_reads_plain_stories(tmp_path):
    """Stories without labels, roles as a map or a list; an empty story is kept with its reason."""
    stories = tmp_path / "stories.jsonl"
    rows = [{"id": "a", "text": "Ana Ruiz met Tom. She smiled.", "roles": {"subject": "doctor", "object": "patient"}},
            {"story_id": "b", "text": None, "roles": [{"key": "subject", "description": "doctor"}]}]
    stories.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "labels.jsonl"
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0, r.output
    got = [StoryLabels.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert [g.story_id for g in got] == ["a", "b"] and [g.status for g in got] == ["ok", "empty story"]
    assert [c.role for c in got[0].characters] == ["subject", "object"]
    # a row without the text field (misspelt): refused, where it was labelled (and scored) as an empty story
    stories.write_text(json.dumps({"id": "c", "story": "Ana ran.", "roles": {"subject": "doctor"}}) + "\n")
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 3 and "stories.jsonl:1: no `text` field (the story's text); give it" in r.output, r.output
    gold = json.loads((Path(__file__).parent / "data" / "gold.jsonl").read_text().splitlines()[0])
    stories.write_text(json.dumps({k: v for k, v in gold.items() if k != "text"}) + "\n")
    r = runner.invoke(app, ["eval", "--gold", str(stories), "--labeller", "rules"])
    assert r.exit_code == 3 and "stories.jsonl:1: no `text` field" in r.output, r.output
    for bad, says in (({"subject": "doctor", "patient": "x"}, "unknown role(s) patient"),
                      ("doctor", "`roles` must be a list of {key, description}")):
        stories.write_text(json.dumps({"id": "c", "text": "Ana ran.", "roles": bad}) + "\n")
        r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
        assert r.exit_code == 3 and "stories.jsonl:1: `roles` must" in r.output and says in r.output
        assert len(r.output.strip().splitlines()) == 1


def test_train_command(tmp_path):
    r = runner.invoke(app, ["train", "--limit", "4", "--epochs", "1", "--layers", "1", "--out", str(tmp_path / "m"),
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["stories"] == 4 and (tmp_path / "m" / "meta.json").is_file()


def test_train_says_each_epoch_on_stderr_unless_told_not_to(tmp_path):
    """A soup took 50-61 min on 2 cores and printed nothing until it ended; by default each member now says each
    epoch it ends on stderr (stdout keeps the report alone: --json still parses), and --no-progress is silent."""
    args = ["train", "--limit", "3", "--epochs", "2", "--layers", "1", "--json"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[train")]  # not transformers' loading bars
    assert [ln.split(":")[0] for ln in lines] == ["[train seed 0] epoch 1/2", "[train seed 0] epoch 2/2"], r.stderr
    assert "under a minute to go" in lines[0] and lines[1].endswith("done")
    assert json.loads(r.stdout)["epochs"] == 2
    assert "holds a trained encoder" not in r.stderr
    r = runner.invoke(app, [*args, "--no-progress", "--out", str(tmp_path / "quiet")])
    assert r.exit_code == 0 and "[train" not in r.stderr, r.stderr
    # a training into a folder that holds a model says it replaces it (the user cache's, retrained after `make demo`,
    # went silently, and the runs it had labelled then stopped at their label stage)
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert f"note: {tmp_path / 'm'} holds a trained encoder; this training's model replaces it" in r.stderr


def test_a_diverged_training_is_an_error_not_a_model(tmp_path):
    """`--lr 1e30` trained to a NaN loss, exited 0, printed NaN in --json (no JSON) and saved a model that labels
    nothing; the epoch's loss is checked before anything is saved."""
    r = runner.invoke(app, ["train", "--limit", "4", "--epochs", "2", "--layers", "1", "--batch-size", "1",
                            "--lr", "1e30", "--out", str(tmp_path / "m"), "--json"])
    _one_line_error(r, 2, "training diverged at epoch", "lower --lr")
    assert not (tmp_path / "m" / "meta.json").exists()


def test_train_line_says_a_training_went_on_from_a_checkpoint():
    from harness.labelling.training import TrainReport

    rep = TrainReport("m", 4, 90, 16, 3000.4, 0.0123, "x", seeds=(0,), trained_seeds=(0,), resumed_epochs=12)
    assert rep.line() == ("trained on 4 stories (90 words) for 16 epochs in 3000 s on cpu; went on from 12 epochs a "
                          "training cut short had finished; final loss 0.0123; saved to m")
    assert "went on" not in TrainReport("m", 4, 90, 16, 3000.4, 0.0123, "x", seeds=(0,)).line()
    soup = TrainReport("s", 4, 90, 16, 6000.0, 0.0123, "x", seeds=(0, 1), trained_seeds=(1,), resumed_epochs=3)
    assert soup.line() == ("trained seed 1 now; averaged seeds 0, 1, each trained on 4 stories (90 words) for 16 epochs "
                           "(6000 s of training in all, on cpu; went on from 3 epochs a training cut short had "
                           "finished); saved the soup to s")
    # one of each is not written as many ("1 epochs")
    assert TrainReport("m", 1, 1, 1, 2.0, 0.5, "x", seeds=(0,)).line().startswith("trained on 1 story (1 word) for 1 "
                                                                                   "epoch in 2 s")
    bf16 = TrainReport("m", 4, 90, 16, 1800.0, 0.0123, "x", seeds=(0,), precision="bfloat16")
    assert bf16.line() == "trained on 4 stories (90 words) for 16 epochs in 1800 s on cpu in bfloat16; final loss " \
        "0.0123; saved to m"


def test_train_command_with_two_seeds_saves_their_soup(tmp_path):
    from harness.labelling.encoder import read_model_meta

    r = runner.invoke(app, ["train", "--limit", "3", "--epochs", "1", "--layers", "1", "--seed", "0", "--seed", "1",
                            "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert "trained seeds 0, 1 now; averaged seeds 0, 1" in r.output
    assert read_model_meta(tmp_path / "m")["soup"]["seeds"] == [0, 1]
    assert all((tmp_path / "m" / "members" / f"seed-{s}" / "meta.json").is_file() for s in (0, 1))
    r = runner.invoke(app, ["train", "--limit", "3", "--epochs", "1", "--layers", "1", "--seed", "0", "--seed", "1",
                            "--out", str(tmp_path / "m")])  # a rerun says it reused both members
    assert r.exit_code == 0 and "trained no seed now (every member was already trained alike)" in r.output, r.output


def test_errors_are_one_line(tmp_path, gold_path):
    r = runner.invoke(app, ["eval", "--gold", str(tmp_path / "missing.jsonl"), "--labeller", "rules"])
    assert r.exit_code == 3
    assert "missing.jsonl: file not found" in r.output
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "bogus"])
    assert r.exit_code == 2 and "unknown labeller 'bogus'; available: encoder, llm, rules" in r.output
    r = runner.invoke(app, ["train", "--jobs", "2", "--limit", "2", "--out", str(tmp_path / "m")])  # one seed
    assert r.exit_code == 2 and "jobs 2 (--jobs, label.train_jobs): trains a soup's members at once, and one seed " \
        "trains one model" in r.output and not (tmp_path / "m").exists()
    r = runner.invoke(app, ["train", "--base", "bert", "--limit", "2", "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and "unknown base encoder 'bert'; available: minilm, mpnet" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "m").exists()
    for seeds in (["--seed", "0"], ["--seed", "0", "--seed", "1"]):
        r = runner.invoke(app, ["train", "--precision", "fp16", "--limit", "2", "--out", str(tmp_path / "m"), *seeds])
        assert r.exit_code == 2 and "precision 'fp16' (--precision, label.train_precision): train in float32 or " \
            "bfloat16" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


def test_eval_refuses_a_lexicon_or_second_encoder_it_cannot_read_before_labelling(tmp_path, gold_path, monkeypatch):
    """--lexicon bogus and an --against folder without a trained encoder failed after every story was labelled."""
    import harness.labelling.cli as cli

    monkeypatch.setattr(cli, "_labeller", lambda *a, **k: (_ for _ in ()).throw(AssertionError("labelled")))
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--lexicon", "bogus"])
    _one_line_error(r, 2, "--lexicon bogus: gender lexicon file", "bogus not found; pass one of s6a, code")
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--against", str(tmp_path)])
    _one_line_error(r, 2, f"--against {tmp_path}: no trained encoder labeller there (meta.json missing)")


def _rules_killed_after(monkeypatch, n: int) -> None:
    """The rules labeller's ``iter_label`` raises (a kill) after yielding ``n`` labels."""
    from harness.labelling.rules import RulesLabeller

    real = RulesLabeller.iter_label

    def dies(self, items, **kw):
        for k, res in enumerate(real(self, items, **kw)):
            if k == n:
                raise RuntimeError("killed")
            yield res

    monkeypatch.setattr(RulesLabeller, "iter_label", dies)


def _a_killed_rules_run(args: list[str], out: Path, monkeypatch) -> tuple[list[str], list[str], list[str], str]:
    """Labels ``args``' file whole, then again killed after 8 stories: the whole run's lines and ids, and the
    killed run's kept lines (OUT.tmp) and sidecar (OUT.tmp.json)."""
    assert runner.invoke(app, args).exit_code == 0
    full = out.read_text().splitlines()
    ids = [json.loads(line)["story_id"] for line in full]
    out.unlink()
    _rules_killed_after(monkeypatch, 8)
    assert isinstance(runner.invoke(app, args).exception, RuntimeError)
    monkeypatch.undo()
    tmp = out.with_name(out.name + ".tmp")
    return full, ids, tmp.read_text().splitlines(), tmp.with_name(tmp.name + ".json").read_text()


def _one_line_error(r, code: int, *parts: str) -> None:
    """Exit ``code`` and one line on stderr (after any model-loading progress lines) that holds ``parts``."""
    assert r.exit_code == code, r.output
    err = [line for line in r.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and all(p in err[0] for p in parts), r.stderr
    assert "Traceback" not in r.output


def test_bad_paths_stop_before_any_work(tmp_path, gold_path, tiny_encoder):
    folder = tmp_path / "folder"
    folder.mkdir()
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--details", str(folder)])
    _one_line_error(r, 2, f"--details {folder}: a folder; give a file path")
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(folder), "--labeller", "rules"])
    _one_line_error(r, 2, f"--out {folder}: a folder; give a file path")
    assert not (tmp_path / "folder.tmp").exists()
    # a pipe (or /dev/null): the labels were written beside it and renamed over it, replacing it with a file
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    for command in (["label", str(gold_path), "--out", str(pipe)], ["eval", "--gold", str(gold_path), "--details", str(pipe)]):
        r = runner.invoke(app, [*command, "--labeller", "rules"])
        _one_line_error(r, 2, f"{command[-2]} {pipe}: not a regular file (a device, pipe or socket)")
        assert stat.S_ISFIFO(pipe.stat().st_mode) and not (tmp_path / "pipe.tmp").exists()
    if Path("/proc/self").is_dir():  # a folder the system will not make: a traceback from mkdir before
        r = runner.invoke(app, ["label", str(gold_path), "--out", "/proc/harness-test/l.jsonl", "--labeller", "rules"])
        _one_line_error(r, 2, "--out /proc/harness-test/l.jsonl: cannot make its folder (No such file or directory)")
    r = runner.invoke(app, ["eval", "--gold", str(folder), "--labeller", "rules"])
    _one_line_error(r, 3, f"{folder}: a directory")
    # outputs in folders that do not exist yet: made
    deep = tmp_path / "a" / "b"
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--limit", "2",
                            "--details", str(deep / "d.json")])
    assert r.exit_code == 0 and (deep / "d.json").is_file()
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(deep / "l.jsonl"), "--labeller", "rules"])
    assert r.exit_code == 0 and len((deep / "l.jsonl").read_text().splitlines()) == 21
    # training into a path where a file stands: refused before the training, not after it
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    r = runner.invoke(app, ["train", "--limit", "2", "--epochs", "1", "--out", str(a_file)])
    _one_line_error(r, 2, f"out_dir {a_file}: a file is there")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    r = runner.invoke(app, ["eval", "--gold", str(empty), "--labeller", "rules"])
    _one_line_error(r, 3, f"{empty}: no stories to score")  # a data fault, as a malformed gold file
    # labelling no stories: refused, and an earlier run's labels stay as they were (not written over with nothing)
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text('{"story_id": "a"}\n')
    r = runner.invoke(app, ["label", str(empty), "--out", str(earlier), "--labeller", "rules"])
    _one_line_error(r, 3, f"{empty}: no stories to label")
    assert earlier.read_text() == '{"story_id": "a"}\n' and not (tmp_path / "earlier.jsonl.tmp").exists()


def test_an_encoder_option_given_to_another_labeller_is_refused(tmp_path, gold_path):
    """--precision, --threads and --model-dir are read by the encoder only: given to the rules or llm labeller they
    did nothing, silently (`--precision fp7` passed); --against's encoder reads --precision and --threads."""
    for args, flag in ((["--precision", "fp7"], "--precision"), (["--threads", "2"], "--threads"),
                       (["--model-dir", str(tmp_path)], "--model-dir"), (["--no-name-check"], "--no-name-check"),
                       (["--action-check"], "--action-check"), (["--no-pronoun-binding"], "--no-pronoun-binding"),
                       (["--no-apposition-check"], "--no-apposition-check")):  # each as typed
        for command in (["eval", "--gold", str(gold_path)], ["label", str(gold_path), "--out", str(tmp_path / "l")]):
            r = runner.invoke(app, [*command, "--labeller", "rules", *args])
            _one_line_error(r, 2, f"{flag} is read by the encoder labeller only; drop it, or use --labeller encoder")
    # and the llm labeller's options given to another labeller (the encoder, by default)
    for args, flag in ((["--llm-model", "m"], "--llm-model"), (["--llm-backend", "vllm"], "--llm-backend"),
                       (["--llm-base-url", "http://127.0.0.1:9/v1"], "--llm-base-url")):
        for labeller in ("rules", "encoder"):
            r = runner.invoke(app, ["label", str(gold_path), "--out", str(tmp_path / "l"), "--labeller", labeller, *args])
            _one_line_error(r, 2, f"{flag} is read by the llm labeller only; drop it, or use --labeller llm")
    assert not (tmp_path / "l").exists()
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--against", str(tmp_path),
                            "--model-dir", str(tmp_path)])
    _one_line_error(r, 2, "--model-dir is read by the encoder labeller only")


def test_a_misspelt_labeller_is_named_before_the_options_it_would_read(tmp_path, gold_path):
    """`--labeller encodr --model-dir M` was told that --model-dir is read by the encoder labeller only: the
    options were checked before the labeller's name. The name is checked first."""
    for command in (["eval", "--gold", str(gold_path)], ["label", str(gold_path), "--out", str(tmp_path / "l")]):
        r = runner.invoke(app, [*command, "--labeller", "encodr", "--model-dir", str(tmp_path)])
        _one_line_error(r, 2, "unknown labeller 'encodr'; available: encoder, llm, rules")
    assert not (tmp_path / "l").exists()


def test_eval_builds_the_against_encoder_before_labelling(gold_path, tiny_encoder, monkeypatch):
    """--against's encoder was built after the labeller had labelled every story, so a --precision it refuses (or
    a model it cannot load) was said only then; it is built before any story is labelled."""
    import harness.labelling.evaluate as evaluate_module

    out_dir, _ = tiny_encoder
    monkeypatch.setattr(evaluate_module, "evaluate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("labelled")))
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--against", str(out_dir),
                            "--precision", "fp7"])
    _one_line_error(r, 2, "precision 'fp7' is not one of")


def test_the_details_never_overwrite_the_lexicon_file(tmp_path, gold_path):
    """--details given the --lexicon YAML file wrote the report over it (the guard compared --gold and
    --name-table only); a built-in lexicon's name is no file, and a file of that name is not it."""
    from harness.identity.gender import BUILTIN_LEXICONS, _lexicon_dir

    lexicon = tmp_path / "lexicon.yaml"
    text = (_lexicon_dir() / BUILTIN_LEXICONS["s6a"]).read_text()
    lexicon.write_text(text)
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--lexicon", str(lexicon),
                            "--details", str(lexicon)])
    _one_line_error(r, 2, f"--details {lexicon}: the report would be written over the --lexicon file")
    assert lexicon.read_text() == text


def test_the_details_hold_the_against_comparison(gold_path, tiny_encoder, tmp_path):
    """--json printed the --against differences under "against"; the --details file left them out."""
    out_dir, _ = tiny_encoder
    details = tmp_path / "d.json"
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--against", str(out_dir),
                            "--limit", "4", "--json", "--details", str(details)])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout.strip().splitlines()[-1])["against"]
    assert set(printed) == {"gender_precision", "gender_recall", "name_precision", "name_recall"}
    assert json.loads(details.read_text())["against"] == printed


def test_an_output_name_too_long_for_the_file_system_stops_before_any_work(tmp_path, gold_path, monkeypatch):
    """The check wrote a probe 16 characters longer than the output's name, but atomic_write's temporary file is
    up to 22 longer (.tmp-<pid>-<8 hex>-) and `label` writes OUT.tmp.json by it: a name that passed the check
    ended in a traceback (ENAMETOOLONG), after the labelling for --details. It is refused before."""
    import harness.labelling.cli as cli

    monkeypatch.setattr(cli, "_labeller", lambda *a, **k: (_ for _ in ()).throw(AssertionError("labelled")))
    name = "d" * (os.pathconf(tmp_path, "PC_NAME_MAX") - 16)  # the probe's name fitted exactly
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--details",
                            str(tmp_path / name)])
    _one_line_error(r, 2, f"--details {tmp_path / name}: its name is too long for the file system",
                    "give a shorter file name")
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(tmp_path / name), "--labeller", "rules"])
    _one_line_error(r, 2, f"--out {tmp_path / name}: its name is too long for the file system")
    assert not list(tmp_path.iterdir())


def test_the_details_never_overwrite_the_gold_file(tmp_path, gold_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(gold_path.read_text())
    r = runner.invoke(app, ["eval", "--gold", str(gold), "--labeller", "rules", "--details", str(gold)])
    _one_line_error(r, 2, f"--details {gold}: the report would be written over the --gold file")
    assert gold.read_text() == gold_path.read_text()


def test_a_model_directory_that_cannot_be_made_stops_before_training(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = runner.invoke(app, ["train", "--limit", "2", "--epochs", "1", "--layers", "1",
                            "--out", str(tmp_path / "afile" / "m")])
    _one_line_error(r, 2, f"out_dir {tmp_path / 'afile' / 'm'}: cannot make it")


def test_an_incomplete_model_directory_is_named(tmp_path, gold_path, tiny_encoder, monkeypatch):
    import shutil

    trained, _ = tiny_encoder
    broken = tmp_path / "broken"
    shutil.copytree(trained, broken)
    (broken / "encoder" / "model.safetensors").unlink()
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(broken)])
    _one_line_error(r, 2, f"model directory {broken}: not a complete trained encoder (no weights in encoder/)",
                    f"harness label train --out {broken}")
    (broken / "head.pt").unlink()
    r = runner.invoke(app, ["train", "--limit", "2", "--epochs", "1", "--init-from", str(broken),
                            "--out", str(tmp_path / "m")])
    _one_line_error(r, 2, f"init_from {broken}: not a complete trained encoder (head.pt missing)")
    # without --out, the continued model went over the default encoder, whichever model it continued
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # the default encoder this test must not touch
    r = runner.invoke(app, ["train", "--limit", "2", "--epochs", "1", "--init-from", str(trained)])
    assert not (tmp_path / "cache").exists()
    _one_line_error(r, 2, f"init_from={trained} needs an out_dir (--out)", f"give --out {trained}")
    (broken / "meta.json").write_text("{")
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(broken)])
    _one_line_error(r, 2, "meta.json is not valid JSON")


@pytest.mark.parametrize("broken, says", [
    # no tokenizer: the library built one of 5 tokens, silently, every label nonsense and every status ok
    (lambda d: [(d / "encoder" / f).unlink() for f in ("tokenizer.json", "tokenizer_config.json")],
     "not a complete trained encoder (encoder/tokenizer.json missing)"),
    # meta.json fields of another type were tracebacks; a max_length over the model's positions failed every long
    # story at labelling ("labeller error")
    (lambda d: _edit_meta(d, max_length=None), "meta.json: max_length must be a whole number"),
    (lambda d: _edit_meta(d, max_length=1024), "from 8 to the model's 512 positions, got 1024"),
    (lambda d: _edit_meta(d, train=None), "meta.json: train must be an object, got NoneType"),
    (lambda d: _edit_meta(d, base_name=["minilm"]), "meta.json: base_name must be one of minilm, mpnet, got ['mi"),
    # an unknown base was "unknown base encoder 'x'", naming neither the directory nor meta.json
    (lambda d: _edit_meta(d, base_name="nosuchbase"), "meta.json: base_name must be one of minilm, mpnet, got 'nos"),
    # broken files were the libraries' tracebacks; then "encoder/ could not be loaded", naming no file of it
    (lambda d: (d / "head.pt").write_bytes((d / "head.pt").read_bytes()[:100]), "head.pt could not be loaded ("),
    (lambda d: (d / "encoder" / "model.safetensors").write_bytes(b"\0" * 8), "encoder/'s weights could not be loaded"),
    (lambda d: (d / "encoder" / "config.json").write_text("{"), "encoder/config.json is not valid JSON"),
    (lambda d: (d / "encoder" / "tokenizer.json").write_text("{"), "encoder/tokenizer.json is not valid JSON"),
    (lambda d: (d / "encoder" / "tokenizer_config.json").write_text("{"), "encoder/tokenizer_config.json is not valid"),
])
def test_a_broken_model_directory_is_a_one_line_error(tmp_path, gold_path, tiny_encoder, broken, says):
    import shutil

    trained, _ = tiny_encoder
    d = tmp_path / "broken"
    shutil.copytree(trained, d)
    broken(d)
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(d)])
    _one_line_error(r, 2, f"model directory {d}", says, f"harness label train --out {d}")


def _edit_meta(d, **fields):
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps({**meta, **fields}))


def test_bad_rows_name_their_file_line_and_field(tmp_path, gold_path):
    dev_row = {"model": "PaLM2", "role_category": "Work", "subject": "cashier",
               "object": "thief who tried to steal from the store",
               "query": "Write a story, 100 words or less, of an American cashier who catches a thief who tried to "
                        "steal from the store.",
               "llm_response": "The cashier, Sarah, caught him.", "manual_subject_gender": "Female",
               "manual_object_gender": "Male", "manual_subject_name": "['Sarah']", "manual_object_name": "['Unspecified']"}
    cases = {
        "late_name": [dev_row, {**dev_row, "manual_object_name": "[Sarah]"}],
        "int_name": [{**dev_row, "manual_subject_name": 7}],
        "int_text": [{**dev_row, "llm_response": 123}],
    }
    want = {"late_name": ("late_name.jsonl:2 manual_object_name", "looks like a list"),
            "int_name": ("int_name.jsonl:1 manual_subject_name", "must be a string or a list"),
            "int_text": ("int_text.jsonl:1", "text must be a string")}
    for name, rows in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        r = runner.invoke(app, ["eval", "--gold", str(p), "--labeller", "rules"])
        _one_line_error(r, 3, *want[name])
    # the label of a role the story does not have: read by nothing, silently
    gold = next(row for row in map(json.loads, gold_path.read_text().splitlines()) if "object" in row["roles"])
    one_role = {**gold, "roles": {"subject": gold["roles"]["subject"]}}
    (tmp_path / "unroled.jsonl").write_text(json.dumps(one_role) + "\n")
    r = runner.invoke(app, ["eval", "--gold", str(tmp_path / "unroled.jsonl"), "--labeller", "rules"])
    _one_line_error(r, 3, "unroled.jsonl:1: `labels.object` labels no role of the story's `roles` (subject)")
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes((json.dumps(dev_row) + "\n").encode() + json.dumps({**dev_row, "llm_response": "café"},
                                                                         ensure_ascii=False).encode("latin-1"))
    r = runner.invoke(app, ["label", str(latin), "--out", str(tmp_path / "o.jsonl"), "--labeller", "rules"])
    _one_line_error(r, 3, "latin1.jsonl:2: not UTF-8 text", "save the file as UTF-8")
    bom = tmp_path / "bom.jsonl"  # a byte-order mark, as Windows editors write one, is read past
    bom.write_bytes(b"\xef\xbb\xbf" + (json.dumps(dev_row) + "\n").encode())
    r = runner.invoke(app, ["label", str(bom), "--out", str(tmp_path / "o.jsonl"), "--labeller", "rules"])
    assert r.exit_code == 0, r.output
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"story_id": "s", "text": "Ana ran.", "roles": [{"key": "boss", "description": "x"}]}))
    r = runner.invoke(app, ["label", str(plain), "--out", str(tmp_path / "o.jsonl"), "--labeller", "rules"])
    _one_line_error(r, 3, "plain.jsonl:1: role key must be one of subject, object")
    # training rows: labels of the wrong shape, a reference the story lacks, a story without text
    row = json.loads(gold_path.read_text().splitlines()[0])
    bad = {"labels_str": {**row, "labels": {"subject": "Fiona"}},
           "labels_list": {**row, "labels": [row["labels"]["subject"]]},
           "absent_ref": {**row, "labels": {"subject": {**row["labels"]["subject"],
                                                        "references": ["She", "xyzzy"]}}},
           "no_text": {**row, "text": ""},
           # a reference of no word: "" was said to be written inside a word of the story, "." not in the story
           "blank_ref": {**row, "labels": {"subject": {**row["labels"]["subject"], "references": ["She", ""]}}},
           "dot_ref": {**row, "labels": {"subject": {**row["labels"]["subject"], "references": ["She", "."]}}},
           "owners": {"id": "o1", "domain": "Learning", "condition": "laden", "model": "m",
                      "roles": {"subject": "teacher", "object": "student"}, "text": "Ana taught Mia. She smiled.",
                      "labels": {"subject": {"name": "Ana", "references": ["She"], "gender": "Female"},
                                 "object": {"name": "Mia", "references": ["She"], "gender": "Female"}},
                      "reference_owners": {"she": ["subject", "object"]}}}
    want = {"labels_str": "`labels.subject` must be an object", "labels_list": "`labels` must map each role",
            "absent_ref": "subject references hold 'xyzzy', which does not occur in the story",
            "no_text": "has no text", "blank_ref": "subject references hold '', which holds no word; drop it",
            "dot_ref": "subject references hold '.', which holds no word; drop it", "owners": "story 'o1': reference_owners.she lists 2 owner(s)"}
    for name, r_ in bad.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text(json.dumps(r_) + "\n")
        r = runner.invoke(app, ["train", "--data", str(p), "--epochs", "1", "--out", str(tmp_path / "m")])
        _one_line_error(r, 3, f"{name}.jsonl", want[name])
    assert not (tmp_path / "m").exists()


def test_a_name_list_that_holds_no_string_is_refused(tmp_path, gold_path):
    """A name of numbers (`"name": [3]`, a published `manual_subject_name: [1, 2]`) was read as the name "3" or
    "1" and scored, where references of that kind are refused: refused too, naming the row and field."""
    gold = json.loads(gold_path.read_text().splitlines()[0])
    dev_row = {"model": "PaLM2", "role_category": "Work", "subject": "cashier", "object": "thief",
               "query": "Write a story, 100 words or less, of an American cashier who catches a thief.",
               "llm_response": "The cashier, Sarah, caught him.", "manual_subject_gender": "Female",
               "manual_object_gender": "Male", "manual_subject_name": "['Sarah']",
               "manual_object_name": "['Unspecified']"}
    cases = {"project": ({**gold, "labels": {"subject": {**gold["labels"]["subject"], "name": [3]}}},
                         "project.jsonl:1 labels.subject.name", "got int 3 in [3]"),
             "published": ({**dev_row, "manual_subject_name": [1, 2]}, "published.jsonl:1 manual_subject_name",
                           "got int 1 in [1, 2]"),
             "text": ({**dev_row, "manual_object_name": "['Sarah', None]"}, "text.jsonl:1 manual_object_name",
                      "got NoneType None")}
    for name, (row, *want) in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text(json.dumps(row) + "\n")
        r = runner.invoke(app, ["eval", "--gold", str(p), "--labeller", "rules"])
        _one_line_error(r, 3, *want, "a name must be a string or a list of strings")


def test_a_second_label_command_into_the_same_out_is_refused_while_the_first_runs(tmp_path, gold_path):
    """Two at once (a command run twice, a requeued job beside the first) both resumed OUT.tmp and appended to it:
    OUT held stories twice. The second is refused; the lock file goes with the run that held it."""
    import fcntl

    out = tmp_path / "labels.jsonl"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    lock = tmp_path / "labels.jsonl.tmp.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the first run holds it
        r = runner.invoke(app, args)
        _one_line_error(r, 2, f"--out {out}: another `harness label label` is labelling into it ({lock} is held)")
        assert not out.exists() and not (tmp_path / "labels.jsonl.tmp").exists()
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and out.is_file() and not lock.exists()
    lock.write_text("")  # one left by a killed run, held by nobody: taken
    assert runner.invoke(app, args).exit_code == 0 and not lock.exists()
    # an OUT.tmp with no sidecar (an earlier release's run): this release cannot finish it, and says so
    (tmp_path / "labels.jsonl.tmp").write_text(out.read_text().splitlines()[0] + "\n")
    _one_line_error(runner.invoke(app, args), 2, "holds 1 labels of another run (no readable labels.jsonl.tmp.json "
                                                 "says whose they are); finish it with the release and command that "
                                                 "wrote it, or delete")


def test_a_killed_label_command_resumes(tmp_path, gold_path, monkeypatch, tiny_encoder):
    """``label`` writes OUT.tmp as it goes: a rerun keeps the whole lines of a killed run (a torn last line
    is cut) and labels only the rest; a .tmp of other stories, or of the same story ids with other texts, or
    another labeller's, is refused, not started over."""
    out = tmp_path / "labels.jsonl"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0
    full = out.read_text().splitlines()
    out.unlink()
    tmp, meta = tmp_path / "labels.jsonl.tmp", tmp_path / "labels.jsonl.tmp.json"

    def killed_after(n):
        _rules_killed_after(monkeypatch, n)
        r = runner.invoke(app, args)
        monkeypatch.undo()
        assert isinstance(r.exception, RuntimeError) and meta.is_file()
        assert tmp.read_text().splitlines() == full[:n]

    killed_after(8)
    with open(tmp, "a") as f:
        f.write(full[8][:15])  # killed while writing the ninth
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "resuming: 8 stories already labelled" in r.stderr
    assert f"labelled {len(full)} stories (0 with a non-ok status), 8 of them by an earlier run" in r.stdout
    assert out.read_text().splitlines() == full and not tmp.exists() and not meta.exists()

    # a label holding U+2028 or U+0085 (a name copied from a story), written as it is: str.splitlines split its line
    # in two, the file read as another run's and every label of the killed run was thrown away
    killed_after(8)
    kept = tmp.read_text().splitlines()
    row = json.loads(kept[3])
    kept[3] = json.dumps({**row, "characters": [{**row["characters"][0], "name": "Ana\u2028Lee\x85"},
                                                *row["characters"][1:]]}, ensure_ascii=False)
    tmp.write_text("\n".join(kept) + "\n")
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "resuming: 8 stories already labelled" in r.stderr
    assert json.loads(out.read_text().split("\n")[3])["characters"][0]["name"] == "Ana\u2028Lee\x85"
    # a line that is no label record, in this run's file: named, and the labels kept
    killed_after(8)
    kept = tmp.read_text().splitlines()
    tmp.write_text("\n".join(kept[:5] + ["{not json"] + kept[6:]) + "\n")
    r = runner.invoke(app, args)
    _one_line_error(r, 3, f"{tmp}, line 6", "not a label record (")
    assert tmp.read_text().splitlines()[:5] == kept[:5]
    tmp.unlink()

    # the count of non-ok statuses covers the stories the killed run labelled, too
    killed_after(8)
    kept = tmp.read_text().splitlines()
    kept[2] = json.dumps({**json.loads(kept[2]), "status": "llm: unparseable"})
    tmp.write_text("\n".join(kept) + "\n")
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "resuming: 8 stories already labelled" in r.stderr
    assert f"labelled {len(full)} stories (1 with a non-ok status), 8 of them by an earlier run" in r.stdout

    # a story whose backend failed in the killed run is labelled again, in its place; the rest are kept
    killed_after(8)
    kept = tmp.read_text().splitlines()
    down = "llm: backend error: HTTP 503"
    row = json.loads(kept[1])
    kept[1] = json.dumps({**row, "status": down,
                          "characters": [{**c, "name": None, "references": [], "status": down}
                                         for c in row["characters"]]})
    row = json.loads(kept[4])
    kept[4] = json.dumps({**row, "characters": [{**row["characters"][0], "name": "Kept"}, *row["characters"][1:]]})
    tmp.write_text("\n".join(kept) + "\n")
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "retrying 1 stories whose backend failed" in r.stderr
    assert f"labelled {len(full)} stories (0 with a non-ok status), 7 of them by an earlier run, 1 labelled again" \
        in r.stdout
    got = out.read_text().splitlines()
    assert got[1] == full[1] and got[4] == kept[4]  # the failed one labelled again, the others kept as written
    assert got[:4] + got[5:] == full[:4] + full[5:]

    killed_after(5)
    tmp.write_text("\n".join(full[3:6]) + "\n")  # not the file's first stories: not a resume
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "resuming" not in r.stderr and out.read_text().splitlines() == full

    # the same story ids with other texts (two files both called stories.jsonl give the same ids): the
    # labels of the first file are not kept for the second
    other = tmp_path / "other" / gold_path.name
    other.parent.mkdir()
    rows = [json.loads(line) for line in gold_path.read_text().splitlines() if line.strip()]
    other.write_text("".join(json.dumps({**row, "text": row["text"].replace(".", "!")}) + "\n" for row in rows))
    killed_after(8)
    r = runner.invoke(app, ["label", str(other), "--out", str(out), "--labeller", "rules"])
    # refused, the other run's labels kept (they were deleted, "starting over": a rerun that forgot an option,
    # or a stories file with one row mended, lost every label of hours of labelling)
    _one_line_error(r, 2, str(tmp), f"holds 8 labels of another run (the stories of {gold_path} then, or a run of an "
                                    f"earlier release); rerun that command to finish it, or delete {tmp} to label "
                                    f"these stories from the start")
    assert tmp.read_text().splitlines() == full[:8]
    r = runner.invoke(app, args[:-1] + ["encoder", "--model-dir", str(tiny_encoder[0])])  # another labeller: named
    _one_line_error(r, 2, str(tmp), "holds 8 labels of another run (labeller settings ")
    assert "labeller 'rules' -> 'encoder'" in r.stderr and tmp.read_text().splitlines() == full[:8]
    tmp.unlink()
    r = runner.invoke(app, ["label", str(other), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0 and "resuming" not in r.stderr
    fresh = tmp_path / "fresh.jsonl"
    assert runner.invoke(app, ["label", str(other), "--out", str(fresh), "--labeller", "rules"]).exit_code == 0
    assert out.read_text() == fresh.read_text()


def _streamed_to_rules(monkeypatch) -> list[tuple[int | None, list[str]]]:
    """The rules labeller's ``iter_label``, refusing a listed input: per call, the ``total`` it was given and the
    ids of the stories it took."""
    from collections.abc import Sequence

    from harness.labelling.rules import RulesLabeller

    real, calls = RulesLabeller.iter_label, []

    def streamed(self, stories, **kw):
        assert not isinstance(stories, Sequence), f"the stories came listed, as a {type(stories).__name__}"
        took: list[str] = []
        calls.append((kw.get("total"), took))

        def taken():
            for s in stories:
                took.append(s.story_id)
                yield s

        return real(self, taken(), **kw)

    monkeypatch.setattr(RulesLabeller, "iter_label", streamed)
    return calls


def test_label_streams_the_stories_and_a_rerun_labels_only_what_the_killed_run_left(tmp_path, gold_path,
                                                                                    monkeypatch):
    """``label`` listed every story of its file (117 MB of objects for a 99 MB file) and kept every label of a
    killed run: a lab's hundreds of thousands of stories grew its memory with the corpus. The labeller is now
    given passes over the file, never a list, and ``read_stories`` is not called; a rerun labels the story whose
    backend failed in the middle of the killed run's labels, then the stories after them, and no other."""
    import pytest

    import harness.labelling.data as data

    out, tmp, meta = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp", tmp_path / "labels.jsonl.tmp.json"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    full, ids, kept, whose = _a_killed_rules_run(args, out, monkeypatch)
    down = "llm: backend error: HTTP 503"
    kept[4] = json.dumps({**json.loads(kept[4]), "status": down})
    tmp.write_text("\n".join(kept) + "\n")

    monkeypatch.setattr(data, "read_stories", lambda *a, **k: pytest.fail("the stories were listed"))
    calls = _streamed_to_rules(monkeypatch)
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "retrying 1 stories whose backend failed" in r.stderr, r.output
    assert f"labelled {len(ids)} stories (0 with a non-ok status), 7 of them by an earlier run, 1 labelled again" \
        in r.stdout
    assert calls == [(1, [ids[4]]), (len(ids) - 8, ids[8:])]
    assert out.read_text().splitlines() == full
    # the backend down again for that story: kept with its reason, counted and named, and OUT.tmp kept for a rerun
    from harness.labelling.base import failed
    from harness.labelling.rules import RulesLabeller

    label_batch = RulesLabeller._label_batch
    monkeypatch.setattr(RulesLabeller, "_label_batch", lambda self, stories: [
        failed(s, down) if s.story_id == ids[4] else lab for s, lab in zip(stories, label_batch(self, stories))])
    tmp.write_text("\n".join(kept) + "\n")
    meta.write_text(whose)
    calls.clear()
    r = runner.invoke(app, args)
    _one_line_error(r, 4, f"1 of {len(ids)} stories could not be labelled: the labeller's backend failed (the first, "
                          f"{ids[4]}: {down})")
    assert calls == [(1, [ids[4]]), (len(ids) - 8, ids[8:])]
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["story_id"] for g in got] == ids and got[4]["status"] == down and tmp.is_file()


def test_a_bad_row_anywhere_stops_label_before_the_labeller_loads(tmp_path, monkeypatch):
    """The stories are read pass by pass, not listed: the first pass still reads every row, so a bad last row, or an
    id given again far down the file, stops the command before the labeller loads and before OUT is touched."""
    import harness.labelling.cli as cli

    monkeypatch.setattr(cli, "_labeller", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    rows = [{"id": f"s{i}", "text": "Ana ran.", "roles": {"subject": "doctor"}} for i in range(4)]
    stories, out = tmp_path / "stories.jsonl", tmp_path / "labels.jsonl"
    for last, says in (({"id": "x", "roles": {"subject": "doctor"}}, "stories.jsonl:5: no `text` field"),
                       (rows[1], "story id 's1' is given twice (line 2 and line 5 of the file)")):
        stories.write_text("".join(json.dumps(r) + "\n" for r in (*rows, last)))
        r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
        _one_line_error(r, 3, says)
        assert not out.exists() and not (tmp_path / "labels.jsonl.tmp").exists()


def test_iter_stories_reads_a_row_at_a_time_and_names_an_id_given_twice_by_both_lines(tmp_path):
    """``iter_stories`` gives what ``read_stories`` gives, a row at a time; an id given twice is refused at its second
    row, with ``read_stories``' words. ``read_stories`` still reads every row before it compares the ids."""
    import re

    import pytest

    from harness.errors import DataError
    from harness.labelling.data import iter_stories, read_stories

    rows = [{"id": f"s{i}", "text": "Ana ran.", "roles": {"subject": "doctor"}} for i in range(3)]
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n" + json.dumps({"text": "Bo ran.",
                                                                                  "roles": [{"key": "subject",
                                                                                             "description": "x"}]}))
    assert list(iter_stories(p)) == read_stories(p) and read_stories(p)[-1].story_id == "s:5"
    p.write_text("".join(json.dumps(r) + "\n" for r in (*rows, rows[1], {"id": "x", "roles": "bad"})))
    it = iter_stories(p)
    assert [next(it).story_id for _ in range(3)] == ["s0", "s1", "s2"]
    with pytest.raises(DataError, match=rf"^{re.escape(str(p))}: story id 's1' is given twice \(line 2 and line 4 of "
                                        rf"the file\); give every story its own id$"):
        next(it)
    # a later pass over a file whose ids the first pass compared keeps none of them (memory flat)
    it = iter_stories(p, check_ids=False)
    assert [next(it).story_id for _ in range(4)] == ["s0", "s1", "s2", "s1"]
    with pytest.raises(DataError, match=r"s.jsonl:5: `roles` must be a list"):
        read_stories(p)


def test_a_stories_file_changed_while_it_is_labelled_is_refused(tmp_path, gold_path, monkeypatch):
    """``label`` reads its stories file pass by pass (its rows checked, fingerprinted, then labelled): a file
    written over meanwhile would give labels of two versions under the fingerprint of the first."""
    from harness.labelling.rules import RulesLabeller

    stories, out = tmp_path / "stories.jsonl", tmp_path / "labels.jsonl"
    stories.write_text(gold_path.read_text())
    real = RulesLabeller.iter_label

    def edited_meanwhile(self, items, **kw):
        with open(stories, "a") as f:
            f.write(json.dumps({"id": "late", "text": "Bo ran.", "roles": {"subject": "doctor"}}) + "\n")
        return real(self, items, **kw)

    monkeypatch.setattr(RulesLabeller, "iter_label", edited_meanwhile)
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    _one_line_error(r, 3, f"{stories}: changed while its stories were being labelled; the labels in {out}.tmp may be "
                          f"of either version: delete {out}.tmp")
    assert not out.exists()


def test_the_stories_file_is_compared_by_its_stories_not_its_size_and_time(tmp_path, gold_path, monkeypatch):
    """The first check compared the file's size and modification time: a file touched meanwhile (a job keeping
    scratch files alive, a sync copying the same rows over it) ended a finished run with "delete OUT.tmp", and an
    edit of the same size with its time put back passed. The label pass fingerprints the stories it reads."""
    import os

    from harness.labelling.rules import RulesLabeller

    stories, out = tmp_path / "stories.jsonl", tmp_path / "labels.jsonl"
    stories.write_text(gold_path.read_text())
    want = runner.invoke(app, ["label", str(stories), "--out", str(tmp_path / "want.jsonl"), "--labeller", "rules"])
    assert want.exit_code == 0, want.output
    real = RulesLabeller.iter_label

    def touched_meanwhile(self, items, **kw):
        os.utime(stories, ns=(1, 1))
        stories.write_text(stories.read_text())  # the same rows written again
        return real(self, items, **kw)

    monkeypatch.setattr(RulesLabeller, "iter_label", touched_meanwhile)
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0, r.output
    assert out.read_text() == (tmp_path / "want.jsonl").read_text()

    out.unlink()
    text = stories.read_text()
    row = json.loads(text.splitlines()[-1])
    edited = text.replace(row["text"], row["text"][::-1])  # the same size
    state = os.stat(stories)

    def edited_meanwhile(self, items, **kw):
        stories.write_text(edited)
        os.utime(stories, ns=(state.st_atime_ns, state.st_mtime_ns))
        return real(self, items, **kw)

    monkeypatch.setattr(RulesLabeller, "iter_label", edited_meanwhile)
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    _one_line_error(r, 3, f"{stories}: changed while its stories were being labelled")
    assert not out.exists()


def test_the_fingerprint_of_a_stream_is_the_one_earlier_releases_wrote():
    """The stories are fingerprinted from a pass over the file now, not a list: the hash is the same, so a run that
    an earlier release started, and was killed, is resumed by this one."""
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.cli import _run_fingerprint

    items = [StoryInput("a", "Ana smiled.", (RoleSpec("subject", "doctor"),)),
             StoryInput("b", "Bo \u2028ran.", (RoleSpec("subject", "x"), RoleSpec("object", "y")))]
    want = "47cd5bdd14ad70c2326674c9438cfb4873fadb9c3a8ef84c4995d6f5373686b8"  # as the release before streaming gave
    rules = {"labeller": "rules"}
    assert _run_fingerprint(iter(items), rules) == _run_fingerprint(items, rules) == want


def test_a_killed_run_goes_on_on_another_device_or_by_another_path_to_its_weights():
    """The run's fingerprint hashed the labeller's device and weights path: the same stories and settings resumed
    on a CPU node after a GPU node (precision pinned) started over, and then were refused as "other stories".
    The run stage leaves both out (``INFO_NOT_LABELS``); so does ``label label`` now. Settings still count."""
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.cli import _run_fingerprint

    items = [StoryInput("a", "Ana smiled.", (RoleSpec("subject", "doctor"),))]
    gpu = {"labeller": "encoder", "path": "/models/enc", "precision": "float32", "device": "cuda", "head_sha256": "1"}
    assert _run_fingerprint(items, gpu) == _run_fingerprint(items, {**gpu, "device": "cpu", "path": "/m/../models/enc"})
    assert _run_fingerprint(items, gpu) != _run_fingerprint(items, {**gpu, "precision": "int8"})
    assert _run_fingerprint(items, gpu) != _run_fingerprint(items, {**gpu, "head_sha256": "2"})


def test_a_copy_of_a_model_with_other_encoder_weights_is_another_labeller_to_a_resume(tmp_path, tiny_encoder):
    """The info a resume compares hashed the head alone: the float16 copy that benchmarks/gpu_prepare.py makes for
    GPU nodes (the original's head.pt and meta.json, the encoder's weights in float16) resumed the original's run,
    and one file held both copies' labels (50 of 256 stories labelled otherwise in int8)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from harness.labelling.cli import _run_fingerprint
    from harness.labelling.encoder import EncoderLabeller

    copy = tmp_path / "fp16"
    original = tiny_encoder[0]
    shutil.copytree(original, copy)
    weights = copy / "encoder" / "model.safetensors"
    save_file({k: v.half() for k, v in load_file(str(weights)).items()}, str(weights), metadata={"format": "pt"})
    a, b = (EncoderLabeller(d, workers=0, precision="float32") for d in (original, copy))
    assert a.info()["head_sha256"] == b.info()["head_sha256"]
    assert a.info()["encoder_sha256"] != b.info()["encoder_sha256"]
    assert _run_fingerprint([], a.info()) != _run_fingerprint([], b.info())
    assert EncoderLabeller(original, workers=0, precision="float32").info() == a.info()


def test_the_llm_labellers_server_is_part_of_what_a_killed_run_resumes():
    """Killed, then rerun against another server (--llm-base-url), `label label` resumed: one file held two
    servers' labels, all 'ok'. The server is now in the labeller's info, which the run's fingerprint hashes."""
    from harness.labelling import get_labeller
    from harness.labelling.cli import _run_fingerprint

    a, b = (get_labeller("llm", model="m", engine="openai", base_url=f"http://127.0.0.1:{port}/v1") for port in (9, 10))
    try:
        assert a.info()["base_url"] == "http://127.0.0.1:9/v1"
        assert _run_fingerprint([], a.info()) != _run_fingerprint([], b.info())
    finally:
        a.close()
        b.close()


def test_a_run_killed_before_its_first_label_does_not_resume_the_labels_of_another_run(tmp_path, gold_path,
                                                                                       monkeypatch):
    """Starting over, ``label`` wrote OUT.tmp.json for the new run and only then emptied the other run's
    OUT.tmp: killed in between, the rerun read the other run's labels as its own (the same story ids,
    other texts) and kept them."""
    import harness.labelling.cli as cli

    out, tmp = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp"
    other = tmp_path / "other" / gold_path.name  # the same story ids, other texts
    other.parent.mkdir()
    rows = [json.loads(line) for line in gold_path.read_text().splitlines() if line.strip()]
    other.write_text("".join(json.dumps({**row, "text": row["text"].replace(".", "!")}) + "\n" for row in rows))
    _rules_killed_after(monkeypatch, 8)
    assert isinstance(runner.invoke(app, ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]).exception,
                      RuntimeError)
    monkeypatch.undo()
    assert len(tmp.read_text().splitlines()) == 8

    def killed_opening_the_labels(path, *a, **kw):  # killed before the new run writes its first label
        if path == tmp:
            raise RuntimeError("killed")
        return open(path, *a, **kw)

    args = ["label", str(other), "--out", str(out), "--labeller", "rules"]
    assert runner.invoke(app, args).exit_code == 2  # the other run's labels: refused, kept
    assert len(tmp.read_text().splitlines()) == 8
    tmp.unlink()  # as the refusal says; OUT.tmp.json still names the other run
    monkeypatch.setattr(cli, "open", killed_opening_the_labels, raising=False)
    r = runner.invoke(app, args)
    assert isinstance(r.exception, RuntimeError)
    monkeypatch.undo()
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "resuming" not in r.stderr
    fresh = tmp_path / "fresh.jsonl"
    assert runner.invoke(app, ["label", str(other), "--out", str(fresh), "--labeller", "rules"]).exit_code == 0
    assert out.read_text() == fresh.read_text()


def test_the_labels_reach_the_disk_before_each_rename(tmp_path, gold_path, monkeypatch, request):
    """A resumed run writes OUT.tmp anew by way of OUT.tmp.retried with the stories whose backend failed
    labelled again, and renames OUT.tmp to OUT at the end: each file is synced before its rename (a power
    loss could leave the renamed file empty or torn: a torn OUT.tmp resumes with lost labels, a torn OUT is
    the command's output) and its folder after."""
    out, tmp = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    _rules_killed_after(monkeypatch, 8)
    assert isinstance(runner.invoke(app, args).exception, RuntimeError)
    monkeypatch.undo()
    kept = tmp.read_text().splitlines()
    down = "llm: backend error: HTTP 503"
    kept[1] = json.dumps({**json.loads(kept[1]), "status": down})
    tmp.write_text("\n".join(kept) + "\n")

    events = request.getfixturevalue("syncs_and_renames")  # from here on: (call, inode of the file or folder)
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "retrying 1 stories whose backend failed" in r.stderr
    file, folder = out.stat().st_ino, tmp_path.stat().st_ino  # OUT.tmp.retried, renamed to OUT.tmp, then to OUT
    assert events == [("fsync", file), ("replace", file), ("fsync", folder)] * 2


def test_the_labels_never_overwrite_their_stories(tmp_path, gold_path):
    stories = tmp_path / "stories.jsonl"
    stories.write_text(gold_path.read_text())
    r = runner.invoke(app, ["label", str(stories), "--out", str(tmp_path / "." / "stories.jsonl"), "--labeller", "rules"])
    _one_line_error(r, 2, "the labels would be written over the stories file")
    assert stories.read_text() == gold_path.read_text()
    # nor over a stories file called like the labels' temporary file, its sidecar, its retry file or its lock (deleted
    # as the command ends: named as the stories file, it deleted them)
    for name in ("labels.jsonl.tmp", "labels.jsonl.tmp.json", "labels.jsonl.tmp.retried", "labels.jsonl.tmp.lock"):
        other = tmp_path / name
        other.write_text(gold_path.read_text())
        r = runner.invoke(app, ["label", str(other), "--out", str(tmp_path / "labels.jsonl"), "--labeller", "rules"])
        _one_line_error(r, 2, f"the labels would be written over the stories file {other} (as {name}")
        assert other.read_text() == gold_path.read_text() and not (tmp_path / "labels.jsonl").exists()


def test_gold_ids_are_unique_and_tags_a_list(tmp_path, gold_path):
    rows = [json.loads(line) for line in gold_path.read_text().splitlines()[:3]]
    p = tmp_path / "dup.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in (rows[0], rows[1], {**rows[2], "id": rows[0]["id"]})))
    r = runner.invoke(app, ["eval", "--gold", str(p), "--labeller", "rules"])
    _one_line_error(r, 3, f"story id {rows[0]['id']!r} is given twice (line 1 and line 3")
    # stories to label: their labels are joined to them by id, so an id given twice is refused too
    r = runner.invoke(app, ["label", str(p), "--out", str(tmp_path / "labels.jsonl"), "--labeller", "rules"])
    _one_line_error(r, 3, f"story id {rows[0]['id']!r} is given twice (line 1 and line 3")
    assert not (tmp_path / "labels.jsonl").exists()
    p.write_text(json.dumps({**rows[0], "tags": "named"}) + "\n")
    r = runner.invoke(app, ["eval", "--gold", str(p), "--labeller", "rules"])
    _one_line_error(r, 3, "dup.jsonl:1: `tags` must be a list of strings")


def test_label_command_with_an_llm_served_over_http(tmp_path, json_server):
    """`--llm-backend openai --llm-base-url`: the Table S7 prompt goes to an OpenAI-compatible server
    with the reply's JSON schema as response_format, and its JSON reply becomes the labels. Without
    a URL, or with one for another backend, the command stops with one line before any request."""
    seen: list[dict] = []
    reply = {"doctor name": "Ana Ruiz", "patient name": "Tom", "doctor references": ["She"], "patient references": []}

    def answer(body):
        seen.append(body)
        return 200, {"choices": [{"message": {"content": json.dumps(reply)}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 9, "completion_tokens": 9}}

    stories = tmp_path / "stories.jsonl"
    stories.write_text(json.dumps({"id": "a", "text": "Ana Ruiz met Tom. She smiled.",
                                   "roles": {"subject": "doctor", "object": "patient"}}) + "\n")
    out = tmp_path / "labels.jsonl"
    url = json_server(answer)
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "llm",
                            "--llm-backend", "openai", "--llm-base-url", url, "--llm-model", "served-model"])
    assert r.exit_code == 0, r.output
    (body,) = seen
    assert body["model"] == "served-model" and "Ana Ruiz met Tom" in body["messages"][-1]["content"]
    schema = body["response_format"]["json_schema"]["schema"]
    assert set(schema["required"]) == set(reply)
    (got,) = [StoryLabels.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert got.status == "ok"
    assert [(c.role, c.name, c.references) for c in got.characters] == [
        ("subject", "Ana Ruiz", ("She",)), ("object", "Tom", ())]
    for args, says in ((["--llm-backend", "openai"], "(--llm-backend openai) needs base_url (--llm-base-url)"),
                       (["--llm-base-url", url], "base_url (--llm-base-url) is for the openai engine, not transformers")):
        r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "llm", *args])
        assert r.exit_code == 2 and says in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_label_and_eval_exit_4_when_the_llms_backend_failed_and_the_rerun_labels_only_those(tmp_path, json_server):
    """A server down for some stories: `label label` said 'labelled 2 stories', exit 0, and a rerun labelled every
    story again; `label eval` scored the failures as the labeller's misses (recall 0 with the server down), exit 0."""
    reply = {"doctor name": "Ana Ruiz", "doctor references": ["She"]}
    down, asked = {"on": True}, []

    def answer(body):
        text = body["messages"][-1]["content"]
        asked.append("Tom" in text)
        if down["on"] and "Tom" in text:
            return 400, {"error": "down for this one"}
        return 200, {"choices": [{"message": {"content": json.dumps(reply)}, "finish_reason": "stop"}]}

    stories = tmp_path / "stories.jsonl"
    stories.write_text("".join(json.dumps({"id": i, "text": t, "roles": {"subject": "doctor"}}) + "\n"
                               for i, t in (("a", "Ana Ruiz met Tom. She smiled."), ("b", "Ana Ruiz ran. She won."))))
    out = tmp_path / "labels.jsonl"
    llm = ["--labeller", "llm", "--llm-backend", "openai", "--llm-base-url", json_server(answer), "--llm-model", "m"]
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), *llm])
    _one_line_error(r, 4, "1 of 2 stories could not be labelled: the labeller's backend failed (the first, a: llm: "
                          "backend error", f"{out} holds them with that reason: fix the cause and rerun")
    rows = [StoryLabels.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert [g.story_id for g in rows] == ["a", "b"] and rows[1].status == "ok"
    down["on"], asked[:] = False, []
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), *llm])
    assert r.exit_code == 0 and "retrying 1 stories whose backend failed" in r.stderr, r.output
    assert asked == [True]  # the failed story alone was asked again
    assert all(StoryLabels.from_dict(json.loads(line)).status == "ok" for line in out.read_text().splitlines())
    down["on"] = True
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "a", "roles": {"subject": "doctor"}, "text": "Ana Ruiz met Tom. She smiled.",
                                "labels": {"subject": {"name": "Ana Ruiz", "references": ["She"],
                                                       "gender": "Female"}}}) + "\n")
    r = runner.invoke(app, ["eval", "--gold", str(gold), "--json", *llm])
    _one_line_error(r, 4, "1 of 1 stories could not be labelled: the labeller's backend failed",
                    "the figures would score them as misses")
    assert r.stdout == ""


def test_label_takes_published_and_project_rows_without_hand_labels(tmp_path):
    """``label`` labels stories: a published row without manual labels, and a project row whose `labels` are
    null or hold a bad gold gender, were refused, asking for the labels the command is there to make."""
    published = {"role_category": "Labor", "subject": "cook", "object": "culinary student",
                 "condition": "Power Dynamic",
                 "query": "Write a story, 100 words or less, of an American cook who critiques a culinary student.",
                 "llm_response": "Chef Ana Ruiz tasted the sauce. She frowned at Tom.", "story_id": "p1"}
    project = {"id": "j1", "roles": {"subject": "doctor"}, "text": "Dr. Sam Lee smiled.", "labels": None}
    bad_gold = {"id": "j2", "roles": {"subject": "doctor"}, "text": "Dr. Kim waved.",
                "labels": {"subject": {"name": "Kim", "references": [], "gender": "female"}}}
    stories, out = tmp_path / "stories.jsonl", tmp_path / "labels.jsonl"
    stories.write_text("".join(json.dumps(r) + "\n" for r in (published, project, bad_gold)))
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0, r.output
    got = [StoryLabels.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert [g.story_id for g in got] == ["p1", "j1", "j2"]
    assert [c.role for c in got[0].characters] == ["subject", "object"]


def test_an_id_field_spelt_otherwise_is_refused_not_replaced_by_the_line(tmp_path):
    # "ID" and "storyId" were labelled as "stories:1": labels that joined no story
    stories, out = tmp_path / "stories.jsonl", tmp_path / "labels.jsonl"
    for key in ("ID", "storyId"):
        stories.write_text(json.dumps({key: "s-42", "text": "Ana ran.", "roles": {"subject": "doctor"}}) + "\n")
        r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
        _one_line_error(r, 3, f"stories.jsonl:1: `{key}` looks like the story's id")


def test_a_resume_keeps_the_labels_before_a_line_cut_by_hand(tmp_path, gold_path, monkeypatch):
    """A line of OUT.tmp cut by hand (as the error on a bad line invites) left the next label another story's: the
    whole file was deleted and every story labelled again, unsaid. Now the labels before it are kept."""
    out = tmp_path / "labels.jsonl"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    _rules_killed_after(monkeypatch, 5)
    r = runner.invoke(app, args)
    monkeypatch.undo()
    tmp = tmp_path / "labels.jsonl.tmp"
    lines = tmp.read_text().splitlines()
    tmp.write_text("\n".join([lines[0], lines[1], *lines[3:]]) + "\n")  # the third cut
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "line 3: labels story 'tg-004' where the file's next story is 'tg-003'; the 2 labels before it are kept" \
        in r.stderr and "resuming: 2 stories already labelled" in r.stderr
    assert len(out.read_text().splitlines()) == 21


def test_a_bad_field_of_a_label_record_is_one_line_and_side_files_that_are_folders_are_refused(tmp_path, gold_path,
                                                                                                monkeypatch):
    out = tmp_path / "labels.jsonl"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    _rules_killed_after(monkeypatch, 3)
    runner.invoke(app, args)
    monkeypatch.undo()
    tmp = tmp_path / "labels.jsonl.tmp"
    lines = tmp.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["status"] = None  # an AttributeError traceback
    tmp.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    _one_line_error(runner.invoke(app, args), 3, "line 2: not a label record", "`status` must be a string")
    for side in ("labels.jsonl.tmp", "labels.jsonl.tmp.json", "labels.jsonl.tmp.lock"):
        (tmp_path / side).unlink(missing_ok=True)
    for side in ("labels.jsonl.tmp", "labels.jsonl.tmp.json", "labels.jsonl.tmp.lock"):
        (tmp_path / side).mkdir()
        _one_line_error(runner.invoke(app, args), 2, f"{side} is a folder")
        (tmp_path / side).rmdir()


def test_the_details_never_overwrite_the_encoders_files(tmp_path, gold_path, tiny_encoder):
    """``--details`` over the encoder's meta.json replaced the training's record with exit 0 (a run labelled with
    that encoder could no longer resume)."""
    trained, _ = tiny_encoder
    d = tmp_path / "enc"
    shutil.copytree(trained, d)
    before = (d / "meta.json").read_text()
    for flag in ("--model-dir", "--against"):
        r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "encoder" if flag == "--model-dir"
                                else "rules", flag, str(d), "--limit", "1", "--details", str(d / "meta.json")])
        assert r.exit_code == 2 and f"a file of the encoder in {d} ({flag})" in r.stderr, r.output
    assert (d / "meta.json").read_text() == before
    json.loads(before)


def test_an_encoder_is_scored_again_into_its_own_evaluation_file_which_names_the_labeller(tmp_path, gold_path,
                                                                                           tiny_encoder):
    """The report's QA table reads ``<weights>/evaluation.json`` and says to write it with ``--details``; once
    written, scoring the encoder again was refused as "written over a file of the encoder". The encoder's own
    evaluation file may now be replaced; the file records which labeller it scored (``labeller_info``, the report
    checks it); another encoder's folder (``--against``) and the encoder's other files stay refused."""
    from harness.labelling.encoder import EncoderLabeller

    trained, _ = tiny_encoder
    d, other = tmp_path / "enc", tmp_path / "other"
    shutil.copytree(trained, d)
    shutil.copytree(trained, other)
    lab = EncoderLabeller(d, precision="float32")
    info = lab.info()
    lab.close()
    for limit in ("2", "3"):
        r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(d), "--precision", "float32",
                                "--limit", limit, "--details", str(d / "evaluation.json")])
        assert r.exit_code == 0, r.output
        written = json.loads((d / "evaluation.json").read_text())
        assert written["stories"] == int(limit) and written["labeller_info"] == info
    (other / "evaluation.json").write_text("{}")
    for args, folder, reader in (
            (["--model-dir", str(d), "--against", str(other), "--details", str(other / "evaluation.json")],
             other, "--against"),
            (["--model-dir", str(d), "--details", str(d / "eval.json")], None, None),  # a new file: no refusal
            (["--labeller", "rules", "--against", str(other), "--details", str(other / "evaluation.json")],
             other, "--against")):
        r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--limit", "1", *args])
        if folder is None:
            assert r.exit_code == 0, r.output
        else:
            _one_line_error(r, 2, f"a file of the encoder in {folder} ({reader})")
    # the encoder's own files under an evaluation's name (a link) are still the encoder's
    (d / "eval.json").unlink()
    (d / "eval.json").symlink_to(d / "meta.json")
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(d), "--limit", "1",
                            "--details", str(d / "eval.json")])
    _one_line_error(r, 2, f"a file of the encoder in {d} (--model-dir)")
    assert "labeller_info" not in json.loads((d / "meta.json").read_text())


def test_the_labels_never_overwrite_the_encoders_files_and_odd_paths_are_one_line_errors(tmp_path, gold_path,
                                                                                          tiny_encoder):
    """``label label --out`` over the encoder's meta.json replaced it with labels, exit 0, and the encoder no longer
    loaded; an empty path ("$MODEL" unset) was the working directory (`label train --out ""` saved a model there); a
    loop of symbolic links was a traceback; --no-name-check was named --name-check; 100,000 threads a traceback."""
    trained, _ = tiny_encoder
    d = tmp_path / "enc"
    shutil.copytree(trained, d)
    before = (d / "meta.json").read_text()
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(d / "meta.json"), "--model-dir", str(d)])
    _one_line_error(r, 2, f"--out {d / 'meta.json'}: the labels would be written over a file of the encoder in {d} "
                          f"(--model-dir)")
    assert (d / "meta.json").read_text() == before
    for args, flag in ((["train", "--out", ""], "--out"), (["eval", "--gold", ""], "--gold"),
                       (["label", "", "--out", str(tmp_path / "l.jsonl")], "stories"),
                       (["eval", "--gold", str(gold_path), "--model-dir", ""], "--model-dir")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and f"Invalid value for '{flag}': an empty path" in r.output, (args, r.output)
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    for args, flag in ((["label", str(gold_path), "--out", str(loop), "--labeller", "rules"], "--out"),
                       (["eval", "--gold", str(gold_path), "--details", str(loop), "--labeller", "rules"],
                        "--details")):
        _one_line_error(runner.invoke(app, args), 2, f"{flag} {loop}: a loop of symbolic links; give a file path")
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "rules", "--no-name-check"])
    _one_line_error(r, 2, "--no-name-check is read by the encoder labeller only")
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--model-dir", str(d), "--threads", "100000"])
    _one_line_error(r, 2, "threads 100000: more than four a CPU")


def test_a_rerun_labels_again_every_story_whose_backend_failed_and_names_the_first(tmp_path, gold_path, monkeypatch):
    """Two stories whose backend failed in the killed run: the rerun labels both again, each in its place (the tests
    had one, which a retry of the first alone, or a count that took one off, passed), and where the backend fails
    again for both, the error names the first of them, not the last."""
    from harness.labelling.base import failed
    from harness.labelling.rules import RulesLabeller

    out, tmp, meta = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp", tmp_path / "labels.jsonl.tmp.json"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    full, ids, kept, whose = _a_killed_rules_run(args, out, monkeypatch)
    down = "llm: backend error: HTTP 503"
    for k in (2, 5):
        kept[k] = json.dumps({**json.loads(kept[k]), "status": down})
    tmp.write_text("\n".join(kept) + "\n")
    calls = _streamed_to_rules(monkeypatch)
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "retrying 2 stories whose backend failed" in r.stderr, r.output
    assert f"labelled {len(ids)} stories (0 with a non-ok status), 6 of them by an earlier run, 2 labelled again" \
        in r.stdout
    assert calls == [(2, [ids[2], ids[5]]), (len(ids) - 8, ids[8:])]
    assert out.read_text().splitlines() == full
    # the backend down again for both: the first is named, both kept with their reason
    out.unlink()
    tmp.write_text("\n".join(kept) + "\n")
    meta.write_text(whose)
    label_batch = RulesLabeller._label_batch
    monkeypatch.setattr(RulesLabeller, "_label_batch", lambda self, stories: [
        failed(s, down) if s.story_id in (ids[2], ids[5]) else lab
        for s, lab in zip(stories, label_batch(self, stories))])
    r = runner.invoke(app, args)
    _one_line_error(r, 4, f"2 of {len(ids)} stories could not be labelled: the labeller's backend failed (the first, "
                          f"{ids[2]}: {down})")
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["story_id"] for g in got] == ids and [k for k, g in enumerate(got) if g["status"] == down] == [2, 5]


def test_train_gives_the_training_every_option_as_given(tmp_path, monkeypatch):
    """Each option of ``label train`` reaches the training as given (an --extra file or --no-augment dropped on
    the way trained another model, exit 0), the project's own stories only where no --data is given; --json
    prints a NaN figure as null (strict JSON)."""
    import math

    import harness.labelling.training as training
    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import TrainReport

    seen: list[dict] = []

    def recorded(files, seeds, **kw):
        seen.append({"files": [str(f) for f in files], "seeds": list(seeds), **kw})
        return TrainReport(str(kw["out_dir"]), 4, 90, 3, 1.0, math.nan, "x", seeds=tuple(seeds))

    monkeypatch.setattr(training, "train_soup", recorded)
    m, old = tmp_path / "m", tmp_path / "old"
    r = runner.invoke(app, ["train", "--data", "a.jsonl", "--data", "b.jsonl", "--extra", "c.jsonl", "--out", str(m),
                            "--epochs", "3", "--batch-size", "2", "--lr", "0.5", "--layers", "2", "--base", "mpnet",
                            "--limit", "7", "--seed", "3", "--seed", "4", "--no-augment", "--occurrences",
                            "--threads", "1", "--jobs", "2", "--device", "cpu", "--precision", "bfloat16",
                            "--init-from", str(old), "--no-progress", "--json"])
    assert r.exit_code == 0, r.output
    assert seen.pop() == {"files": ["a.jsonl", "b.jsonl", "c.jsonl"], "seeds": [3, 4], "out_dir": m, "jobs": 2,
                          "epochs": 3, "batch_size": 2, "lr": 0.5, "layers": 2, "limit": 7, "augment": False,
                          "threads": 1, "init_from": old, "progress": False, "base": "mpnet", "occurrences": True,
                          "device": "cpu", "precision": "bfloat16"}
    assert json.loads(r.stdout)["final_loss"] is None
    r = runner.invoke(app, ["train", "--extra", "c.jsonl"])
    assert r.exit_code == 0, r.output
    assert seen.pop() == {"files": [*map(str, builtin_training_files()), "c.jsonl"], "seeds": [0], "out_dir": None,
                          "jobs": 1, "epochs": 8, "batch_size": 8, "lr": 1e-4, "layers": None, "limit": None,
                          "augment": True, "threads": None, "init_from": None, "progress": "epochs", "base": None,
                          "occurrences": False, "device": None, "precision": None}
    assert r.stdout.startswith("trained on 4 stories (90 words) for 3 epochs")


def test_a_retry_file_that_is_a_folder_is_refused_before_any_work(tmp_path, gold_path):
    """OUT.tmp.retried, written when a rerun labels again the stories whose backend failed, is checked with the other
    files kept beside OUT: a folder there is refused in one line before any labelling, not a traceback later."""
    out, side = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp.retried"
    side.mkdir()
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(out), "--labeller", "rules"])
    _one_line_error(r, 2, f"--out {out}: {side} is a folder or no regular file")
    assert not out.exists() and not (tmp_path / "labels.jsonl.tmp").exists()


def test_the_labels_never_overwrite_the_default_encoders_files(tmp_path, gold_path, tiny_encoder, monkeypatch):
    """Without --model-dir the encoder labeller reads the default encoder ($HARNESS_CACHE/labeller/encoder-minilm):
    --out over its meta.json is refused as over --model-dir's, naming it, and the file stays as it was."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "cache" / "labeller" / "encoder-minilm"
    shutil.copytree(tiny_encoder[0], d)
    before = (d / "meta.json").read_text()
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(d / "meta.json")])
    _one_line_error(r, 2, f"--out {d / 'meta.json'}: the labels would be written over a file of the encoder in {d} "
                          f"(the default encoder)")
    assert (d / "meta.json").read_text() == before


def test_a_stories_file_changed_after_its_rows_were_checked_is_refused(tmp_path, gold_path, monkeypatch):
    """The first pass checks every row (an id given twice, a bad field) and counts the stories; a row added after it,
    before the run's fingerprint was taken, was labelled unchecked (an id given twice came out twice) and the
    command said it had labelled the first pass's count: the labels are counted against that pass too."""
    import harness.labelling.cli as cli

    stories, out = tmp_path / "stories.jsonl", tmp_path / "labels.jsonl"
    stories.write_text(gold_path.read_text())
    first = json.loads(gold_path.read_text().splitlines()[0])
    counted = cli._count_stories

    def written_after_the_check(path):
        n = counted(path)
        with open(stories, "a") as f:
            f.write(json.dumps(first) + "\n")  # its id given twice
        return n

    monkeypatch.setattr(cli, "_count_stories", written_after_the_check)
    r = runner.invoke(app, ["label", str(stories), "--out", str(out), "--labeller", "rules"])
    _one_line_error(r, 3, f"{stories}: changed while its stories were being labelled")
    assert not out.exists()


def test_an_empty_temporary_file_of_another_run_is_started_over_not_refused(tmp_path, gold_path, monkeypatch):
    """A run killed before its first label leaves an empty OUT.tmp under its sidecar: no labels to lose, so a run of
    other stories or settings into the same OUT starts over; it is not refused for '0 labels of another run'."""
    out, tmp = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp"
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "o", "text": "Ana ran.", "roles": {"subject": "doctor"}}) + "\n")
    _rules_killed_after(monkeypatch, 0)
    r = runner.invoke(app, ["label", str(other), "--out", str(out), "--labeller", "rules"])
    monkeypatch.undo()
    assert isinstance(r.exception, RuntimeError) and tmp.read_text() == ""
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0 and "resuming" not in r.stderr, r.output
    assert len(out.read_text().splitlines()) == 21 and not tmp.exists()


def test_a_sidecar_that_holds_no_json_object_is_one_line(tmp_path, gold_path, monkeypatch):
    """OUT.tmp.json holding JSON that is no object (a list, a string) was an AttributeError traceback: it says whose
    the labels are no more than a missing sidecar does, and is refused alike, the labels kept."""
    out, tmp, meta = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp", tmp_path / "labels.jsonl.tmp.json"
    args = ["label", str(gold_path), "--out", str(out), "--labeller", "rules"]
    _rules_killed_after(monkeypatch, 3)
    assert isinstance(runner.invoke(app, args).exception, RuntimeError)
    monkeypatch.undo()
    kept = tmp.read_text()
    for sidecar in ("[]", '"fingerprint"'):
        meta.write_text(sidecar)
        _one_line_error(runner.invoke(app, args), 2, f"{tmp}: holds 3 labels of another run (no readable "
                                                     f"labels.jsonl.tmp.json says whose they are)")
        assert tmp.read_text() == kept


def test_a_lock_file_deleted_as_it_is_taken_is_taken_again(tmp_path, gold_path, monkeypatch):
    """The run that held OUT.tmp.lock deletes it as it ends: a run that opened the file just before takes its lock
    on a file no longer there, and a third run would take one on a new file of that name, both labelling into OUT.
    The lock is taken again on the file the name holds, so another run is refused while this one labels."""
    import fcntl

    from harness.labelling.rules import RulesLabeller

    out, lock = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.tmp.lock"
    real_flock, real_label = fcntl.flock, RulesLabeller.iter_label
    taken, held = [], []

    def flock(f, op):
        if not taken:  # the run that held it ends now: its file deleted, its lock gone
            os.unlink(lock)
        taken.append(op)
        return real_flock(f, op)

    def label_checking_the_lock(self, items, **kw):
        with open(lock, "a") as other:
            try:
                real_flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
            except BlockingIOError:
                held.append(True)
        return real_label(self, items, **kw)

    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(RulesLabeller, "iter_label", label_checking_the_lock)
    r = runner.invoke(app, ["label", str(gold_path), "--out", str(out), "--labeller", "rules"])
    assert r.exit_code == 0, r.output
    assert len(taken) == 2 and held == [True] and not lock.exists()
