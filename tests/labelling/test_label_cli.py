"""`harness label` commands through Typer's runner."""

from __future__ import annotations

import json

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
    d = json.loads(details.read_text())
    assert d["stories"] == 5 and set(JSON_KEYS) <= set(d)


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


def test_errors_are_one_line(tmp_path, gold_path):
    r = runner.invoke(app, ["eval", "--gold", str(tmp_path / "missing.jsonl"), "--labeller", "rules"])
    assert r.exit_code == 3
    assert "missing.jsonl: file not found" in r.output
    r = runner.invoke(app, ["eval", "--gold", str(gold_path), "--labeller", "bogus"])
    assert r.exit_code == 2 and "unknown labeller 'bogus'; available: encoder, llm, rules" in r.output
    r = runner.invoke(app, ["train", "--base", "bert", "--limit", "2", "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and "unknown base encoder 'bert'; available: minilm, mpnet" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "m").exists()
