"""`harness run` from the command line: the stages it runs, in which order, and the exit code and one line a
stage's error ends it with (what a job array's scheduler reads)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.config import parse_config


DOC = {"model": {"backend": "transformers", "path": "smollm2-135m"}, "prompts": ["learning-neutral-01"],
       "samples_per_prompt": 2, "label": {"labeller": "rules"}}


def _config(tmp_path) -> Path:
    """A run config file of one prompt, two samples and the rules labeller, its run in ``tmp_path / "run"``."""
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**DOC, "output_dir": str(tmp_path / "run")}))
    return path


def _echo_backend(**kw):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from test_store import EchoBackend

    return EchoBackend(**kw)


def _main(monkeypatch, capsys, *args) -> tuple[int, list[str]]:
    """``harness ARGS`` through ``harness.cli.main``, as the shell runs it: (exit code, stderr lines)."""
    import harness.cli as cli

    monkeypatch.setattr(sys, "argv", ["harness", *args])
    with pytest.raises(SystemExit) as e:
        cli.main()
    return e.value.code, capsys.readouterr().err.strip().splitlines()


def test_a_stage_s_error_ends_harness_run_with_its_own_exit_code_and_one_line(tmp_path, monkeypatch, capsys):
    """main exits with the error's code (2 for a config, 3 for data, 4 for a backend), as its docstring says:
    a job array's scheduler tells a shard whose requests failed (4, rerun it) from a stage run before the one it
    reads (3). Guards the code through main itself (CliRunner stops at the exception), a one-line message each."""
    import harness.pipeline as P
    from harness.pipeline import generate_run

    config = _config(tmp_path)
    real = P.generate_run
    monkeypatch.setattr(P, "generate_run", lambda c, **kw: real(c, backend=_echo_backend(
        fail_ids={"learning-neutral-01#1"}), **kw))
    code, err = _main(monkeypatch, capsys, "run", str(config), "--no-progress")
    assert code == 4 and len(err) == 1 and err[0].startswith("error: 1 of 2 requests failed (the first: HTTP 503")
    monkeypatch.undo()

    generate_run(parse_config({**DOC, "output_dir": str(tmp_path / "run")}), backend=_echo_backend(), progress=False)
    code, err = _main(monkeypatch, capsys, "run", str(config), "--stages", "identities", "--no-progress")
    assert code == 3 and err == [f"error: {tmp_path / 'run' / 'labels'}: nothing there, and the identities stage "
                                 f"reads it; run the label stage first (`harness run CONFIG --stages label`)"]
    code, err = _main(monkeypatch, capsys, "run", str(config), "--stages", "identities,embed", "--no-progress")
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --stages: unknown stage(s) embed; choose from")


def test_harness_run_runs_the_stages_named_in_pipeline_order_whatever_order_they_are_given_in(tmp_path, monkeypatch):
    """`--stages report,statistics,identities` runs identities, then statistics, then the report, as the run's
    order (generate -> label -> identities -> statistics -> report) is: in the given order the report would be
    built from the statistics of before, and those from the characters of before. The report's page is printed
    only when the report stage ran."""
    from typer.testing import CliRunner

    from harness.audit import stages
    from harness.audit.stages import StageResult
    from harness.cli import app

    ran = []
    for name in stages.RUNNERS:
        monkeypatch.setitem(stages.RUNNERS, name,
                            lambda cfg, store, name=name, **kw: ran.append(name) or StageResult(name, "done", 0.0))
    config = _config(tmp_path)
    r = CliRunner().invoke(app, ["run", str(config), "--stages", "report,statistics,identities", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert ran == ["identities", "statistics", "report"]
    lines = r.output.splitlines()
    assert [line.split("]")[0] for line in lines[:3]] == ["[identities", "[statistics", "[report"]
    assert lines[3:] == [f"run directory: {tmp_path / 'run'}", f"report: {tmp_path / 'run' / 'report' / 'index.html'}"]
    r = CliRunner().invoke(app, ["run", str(config), "--stages", "statistics", "--no-progress"])
    assert r.exit_code == 0 and ran[3:] == ["statistics"] and "report:" not in r.output
