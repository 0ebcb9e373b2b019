"""The report from synthetic runs (no model): labelling QA shows the labeller and its scores where
known, the figures are real PNGs, and the page renders in headless Chromium without errors."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pandas as pd
import pytest

from browser import check_rendered, render_in_chromium
from synthetic import synthetic_characters, write_synthetic_runs

from harness.audit.statistics import compute_tables
from harness.config import StatsConfig
from harness.report import build_report
from harness.report.qa import labeller_summary

SCORES = {"gender_precision": 0.898, "gender_recall": 0.866, "name_precision": 0.911, "name_recall": 0.917, "stories": 1000}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    weights = tmp / "encoder-weights"
    weights.mkdir()
    (weights / "meta.json").write_text(json.dumps({"files": ["project_train.jsonl"], "report": {
        "stories": 75, "epochs": 8, "seconds": 120.5, "final_loss": 0.01234, "data_sha256": "ab" * 32}}))
    (weights / "evaluation.json").write_text(json.dumps({**SCORES, "labeller": "encoder", "by_model": {}}))
    chars = synthetic_characters(240, models=("model-a", "model-b", "model-c"))
    tables = compute_tables(chars, StatsConfig())
    labellers = {"model-a": {"labeller": "encoder", "path": str(weights), "threshold": 0.5, "quantized": True},
                 "model-b": {"labeller": "rules", "spacy_model": "en_core_web_sm"}}
    runs = write_synthetic_runs(tmp / "runs", chars, tables, labellers=labellers)
    index = build_report(runs, tmp / "report")
    return index, tmp


def _table(html: str) -> pd.DataFrame:
    """The first HTML table in ``html`` as text cells (tags stripped, entities unescaped)."""
    table = html[:html.index("</table>")]
    cell = lambda c: unescape(re.sub(r"<[^>]+>", "", c)).strip()  # noqa: E731
    rows = [re.findall(r"<t[hd]>(.*?)</t[hd]>", r, flags=re.S) for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)]
    return pd.DataFrame([[cell(c) for c in r] for r in rows[1:]], columns=[cell(c) for c in rows[0]])


def test_labeller_summary_reads_scores_and_training(tmp_path):
    s = labeller_summary({"labeller": "llm", "model": "x", "evaluation": SCORES})
    assert s["labeller"] == "llm" and s["evaluation"]["name_recall"] == 0.917 and s["evaluation_source"] == "run manifest"
    assert s["settings"] == {"model": "x"}
    # an encoder's training, read from the meta.json beside its weights
    (tmp_path / "meta.json").write_text(json.dumps({"files": ["a.jsonl"], "report": {
        "stories": 75, "epochs": 8, "seconds": 120.5, "final_loss": 0.01234, "data_sha256": "ab" * 32}}))
    enc = labeller_summary({"labeller": "encoder", "path": str(tmp_path), "evaluation": SCORES})
    assert enc["training"] == {"files": ["a.jsonl"], "stories": 75, "epochs": 8, "seconds": 120.5,
                               "final_loss": 0.01234, "data_sha256": "ab" * 32}
    none = labeller_summary(None)
    assert none["labeller"] is None and none["evaluation"] is None and none["training"] is None
    # where the scores are looked for, in order: the run manifest, the meta.json beside the weights, then the
    # evaluation.json there ("evaluation" or "eval" in each); a later source never overrides an earlier one
    w = tmp_path / "scored"
    w.mkdir()
    meta_scores, file_scores = {**SCORES, "stories": 50}, {**SCORES, "stories": 60}
    (w / "meta.json").write_text(json.dumps({"files": ["a.jsonl"], "eval": meta_scores}))
    (w / "evaluation.json").write_text(json.dumps(file_scores))
    s = labeller_summary({"labeller": "encoder", "path": str(w), "eval": SCORES})
    assert (s["evaluation"], s["evaluation_source"], s["settings"]) == (SCORES, "run manifest", {"path": str(w)})
    s = labeller_summary({"labeller": "encoder", "path": str(w)})
    assert (s["evaluation"], s["evaluation_source"]) == (meta_scores, str(w / "meta.json"))
    (w / "meta.json").write_text(json.dumps({"files": ["a.jsonl"]}))
    s = labeller_summary({"labeller": "encoder", "path": str(w)})
    assert (s["evaluation"], s["evaluation_source"]) == (file_scores, str(w / "evaluation.json"))


def test_labelling_qa_shows_labeller_and_scores_where_known(report):
    index, tmp = report
    html = index.read_text()
    qa = html[html.index("<h2 id=t-labelling_qa>"):html.index("<h2 id=t-cue_counts>")]
    by_run = _table(qa[qa.index("<table class='tbl labeller'>"):]).set_index("run")
    a, b, c = by_run.loc["model-a"], by_run.loc["model-b"], by_run.loc["model-c"]
    assert a["labeller"] == "encoder"
    # each score in its own column, and the size of the set it was scored on
    assert [a[k] for k in ("gender P", "gender R", "name P", "name R", "scored on")] == [
        "89.8%", "86.6%", "91.1%", "91.7%", "1000 stories"]
    assert "evaluation.json" in a["scores from"] and "epochs=8" in a["training"] and "stories=75" in a["training"]
    assert b["labeller"] == "rules" and b["gender P"] == "n/a" and "no evaluation scores recorded" in b["scores from"]
    assert "harness label eval" in b["scores from"]
    assert "not recorded" in c["labeller"]
    assert "Table S8" in qa and "98.0%" in qa


def test_a_labeller_without_scores_is_told_the_command_that_scores_it(tmp_path):
    """Where no scores are recorded, the QA table gives the command that scores the labeller: ``--run`` with the run's
    folder, which builds the run's own labeller (options can miss a setting), with --details into its weights folder
    (where the report reads evaluation.json), or into the run's folder for a labeller that has none. Without a run
    folder, the options that build it, and no --details (not a path of "None")."""
    from harness.report.qa import how_to_score, labeller_table_html

    encoder = {"labeller": "encoder", "path": str(tmp_path)}  # its weights folder, with no scores in it
    manifests = [(tmp_path / "a", {"config": {"name": "a"}, "labeller": encoder}),
                 (tmp_path / "b", {"config": {"name": "b"}, "labeller": {"labeller": "rules"}})]
    by_run = _table(labeller_table_html(manifests)).set_index("run")
    how = "score it with harness label eval --gold laissez_faire_audit_dev.jsonl --run"
    assert by_run.loc["a", "scores from"].endswith(f"{how} {tmp_path}/a --details {tmp_path}/evaluation.json")
    assert by_run.loc["b", "scores from"].endswith(
        f"{how} {tmp_path}/b --details {tmp_path}/b/labeller_evaluation.json")
    assert how_to_score(labeller_summary(encoder)).endswith(
        f"--labeller encoder --model-dir {tmp_path} --details {tmp_path}/evaluation.json")


def test_a_labeller_with_no_weights_folder_keeps_its_scores_in_the_run_folder(tmp_path):
    """The rules and the LLM labeller have no weights folder, and the report's command for them wrote no scores
    anywhere it reads: their runs could show none. ``--details <run>/labeller_evaluation.json`` is read now, checked
    like the weights' files, and the command for an LLM labeller names its backend, model and server, which
    ``label eval`` otherwise takes as its defaults (another labeller)."""
    from harness.report.qa import how_to_score, labeller_table_html

    rules = {"labeller": "rules", "rules_version": "8", "spacy_model": "en_core_web_sm"}
    llm = {"labeller": "llm", "parser_version": 10, "backend": "openai", "model": "Qwen/Qwen2.5 7B",
           "base_url": "http://127.0.0.1:8000/v1", "temperature": 0.0, "max_attempts": 3}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "labeller_evaluation.json").write_text(json.dumps({**SCORES, "labeller_info": rules}))
    (tmp_path / "l").mkdir()  # scored at another temperature: another labeller
    (tmp_path / "l" / "labeller_evaluation.json").write_text(json.dumps(
        {**SCORES, "labeller_info": {**llm, "temperature": 1.0}}))
    manifests = [(tmp_path / "r", {"config": {"name": "r"}, "labeller": rules}),
                 (tmp_path / "l", {"config": {"name": "l"}, "labeller": llm})]
    by_run = _table(labeller_table_html(manifests)).set_index("run")
    assert by_run.loc["r", "gender P"] == "89.8%" and by_run.loc["r", "scores from"] == str(
        tmp_path / "r" / "labeller_evaluation.json")
    assert by_run.loc["l", "gender P"] == "n/a" and by_run.loc["l", "scores from"].startswith(
        f"{tmp_path / 'l' / 'labeller_evaluation.json'}: scores another labeller (temperature 1.0, not 0.0)")
    assert by_run.loc["l", "scores from"].endswith(
        f"--run {tmp_path}/l --details {tmp_path}/l/labeller_evaluation.json")
    assert how_to_score(labeller_summary(llm)).endswith(  # no run folder: the options that build it
        "--labeller llm --llm-backend openai --llm-model 'Qwen/Qwen2.5 7B' --llm-base-url http://127.0.0.1:8000/v1")
    assert labeller_summary(rules)["evaluation"] is None  # no run folder given: not looked for
    assert how_to_score(labeller_summary(rules)).endswith("--labeller rules")


def test_scores_beside_the_weights_count_only_for_the_labeller_they_record(tmp_path):
    """``evaluation.json`` beside an encoder's weights was shown as the run's labeller's whatever it scored: the
    report's own command (it had no --model-dir) scored the default encoder and wrote those scores into another
    encoder's folder, and a retrained encoder or a newer decoder kept the old scores. Scores that record another
    labeller (``labeller_info``, written by ``--details``) are passed over, with why, and the command names the
    weights, the checks the run turned off and its arithmetic; scores without a record are read as before."""
    from harness.report.qa import how_to_score, labeller_table_html

    run = {"labeller": "encoder", "path": str(tmp_path), "encoder_sha256": "e1", "head_sha256": "h1",
           "decoder_version": 22, "threshold": 0.5, "name_check": False, "action_check": True, "precision": "bfloat16"}
    # where it ran and where its weights lay are no other labeller (base.INFO_NOT_LABELS, as a resume reads them)
    scored = {**run, "device": "cuda", "path": "/elsewhere/copy"}
    (tmp_path / "evaluation.json").write_text(json.dumps({**SCORES, "labeller_info": scored}))
    assert labeller_summary({**run, "device": "cpu"})["evaluation"]["gender_precision"] == SCORES["gender_precision"]
    for key, value, why in (("encoder_sha256", "e0", "encoder_sha256 e0, not e1"),
                            ("decoder_version", 21, "decoder_version 21, not 22"),
                            ("name_check", True, "name_check True, not False"),
                            ("precision", "int8", "precision int8, not bfloat16"),
                            ("labeller", "rules", "labeller rules, not encoder")):
        (tmp_path / "evaluation.json").write_text(json.dumps({**SCORES, "labeller_info": {**scored, key: value}}))
        s = labeller_summary(run)
        assert s["evaluation"] is None and s["passed_over"] == [
            f"{tmp_path / 'evaluation.json'}: scores another labeller ({why})"]
        manifests = [(tmp_path / "a", {"config": {"name": "a"}, "labeller": run})]
        cell = _table(labeller_table_html(manifests))["scores from"][0]
        assert cell.startswith(s["passed_over"][0] + "; no evaluation scores recorded")
        assert cell.endswith(f"--run {tmp_path}/a --details {tmp_path}/evaluation.json")
        assert how_to_score(s).endswith(f"--labeller encoder --no-name-check --precision bfloat16 "
                                        f"--model-dir {tmp_path} --details {tmp_path}/evaluation.json")
    # meta.json's scores are checked alike, and a later file that records this labeller is read
    meta_scores = {**SCORES, "labeller_info": {**scored, "head_sha256": "h0"}}
    (tmp_path / "meta.json").write_text(json.dumps({"eval": meta_scores}))
    (tmp_path / "eval.json").write_text(json.dumps({**SCORES, "stories": 7, "labeller_info": scored}))
    s = labeller_summary(run)
    assert (s["evaluation"]["stories"], s["evaluation_source"]) == (7, str(tmp_path / "eval.json"))
    assert [p.split(": ")[0] for p in s["passed_over"]] == [str(tmp_path / f) for f in ("meta.json", "evaluation.json")]
    (tmp_path / "eval.json").write_text(json.dumps({**SCORES, "stories": 8}))  # written before the record: read
    assert labeller_summary(run)["evaluation"]["stories"] == 8
    # the scores with their 95% intervals, where the evaluation holds them
    intervals = {"gender_precision": [0.880, 0.915], "gender_recall": [0.845, 0.886], "name_precision": [None, 0.93]}
    (tmp_path / "eval.json").write_text(json.dumps({**SCORES, "intervals": intervals}))
    manifests = [(tmp_path / "a", {"config": {"name": "a"}, "labeller": run})]
    row = _table(labeller_table_html(manifests)).iloc[0]
    assert [row[k] for k in ("gender P", "gender R", "name P", "name R")] == [
        "89.8% (88.0-91.5%)", "86.6% (84.5-88.6%)", "91.1%", "91.7%"]
    assert how_to_score(labeller_summary({"labeller": "rules"})).endswith("--labeller rules")
    assert how_to_score(labeller_summary(None)) == ""


def test_report_renders_in_chromium_without_errors(report, tmp_path):
    index, _ = report
    dom, log, shot = render_in_chromium(index, tmp_path)
    check_rendered(index, dom, log, shot, copy_as="report_synthetic.png")


def test_every_report_file_reaches_the_disk_before_its_rename_and_the_stage_record_after(
        tmp_path, report_written_durably):
    """The report wrote index.html, its figures, their data and its tables in place and unsynced: a power loss after
    the report stage's _stage.json recorded them current could leave the page or a figure empty or cut under its
    name, and every rerun skipped the stage as current. Each is written under a temporary name, synced, renamed and
    its folder synced (the store's atomic_write), all before the record."""
    from harness.store import RunStore

    chars = synthetic_characters(60, models=("model-a",))
    (run,) = write_synthetic_runs(tmp_path / "runs", chars, compute_tables(chars, StatsConfig()))
    report_written_durably(RunStore(run), build_report, {
        "index.html", "figures/fig1a_representation_race.png", "figures/fig1a_representation_race.svg",
        "figures/fig1a_representation_race.csv", "tables/representation.parquet", "tables/coding_sheet.csv"})


def test_a_report_rebuilt_into_its_folder_keeps_none_of_the_earlier_files_and_spares_another_site(tmp_path):
    """`harness report A -o DIR` then `harness report B -o DIR` (another kind of audit, other runs) left the first
    build's figures and tables beside the second's; an index.html of another site in DIR was written over."""
    import os
    import time

    from harness.errors import ConfigError

    chars = synthetic_characters(60, models=("model-a",))
    (run,) = write_synthetic_runs(tmp_path / "runs", chars, compute_tables(chars, StatsConfig()))
    out = tmp_path / "rep"
    build_report([run], out)
    stale = [out / "figures" / "hom1_group_means.png", out / "tables" / "hom_coefficients.csv"]
    for f in stale:  # as an earlier homogeneity report into the same folder left them
        f.write_text("old")
        os.utime(f, (time.time() - 60, time.time() - 60))
    kept = out / "notes.txt"  # the report's own folders only: a file the user put beside them stays
    kept.write_text("mine")
    build_report([run], out)
    assert not any(f.exists() for f in stale) and kept.exists()
    assert (out / "figures" / "fig1a_representation_race.png").is_file() and (out / "tables" / "rmrs.csv").is_file()
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>my page</html>")
    with pytest.raises(ConfigError, match=re.escape(f"--out {site}: holds an index.html that is no harness report's")):
        build_report([run], site)
    assert (site / "index.html").read_text() == "<html>my page</html>" and not (site / "figures").exists()


def test_a_run_given_twice_or_two_runs_of_one_name_are_refused_not_merged(tmp_path):
    """`harness report A A`, or two runs whose configs share a name: the report keys every table and figure by that
    name, so it drew the two as one model (twice the stories). Refused in one line, nothing written."""
    import shutil

    from harness.errors import DataError
    from harness.report.homogeneity import build_homogeneity_report
    from harness.store import RunStore

    chars = synthetic_characters(60, models=("model-a", "model-b"))
    a, b = write_synthetic_runs(tmp_path / "runs", chars, compute_tables(chars, StatsConfig()))
    copy = tmp_path / "copy-of-a"
    shutil.copytree(a, copy)
    out = tmp_path / "out"
    again = tmp_path / "runs" / ".." / "runs" / "model-a"  # another spelling of a (pathlib drops a "." itself)
    for build in (build_report, build_homogeneity_report):
        with pytest.raises(DataError, match=re.escape(f"{again}: given twice (as {a} too); give each run once")):
            build([a, again], out)
        with pytest.raises(DataError, match=re.escape(f"{copy} and {a} are both named 'model-a' in their run.json")):
            build([a, b, copy], out)
        assert not out.exists()
    RunStore(copy).update_manifest(config={**RunStore(copy).read_manifest()["config"], "name": "model-a-again"})
    assert build_report([a, b, copy], out).is_file()


def test_report_inputs_that_are_no_runs_and_an_output_where_a_file_stands_are_named_in_one_line(report, tmp_path):
    """`harness report` over a path that is missing, a file, a folder without run.json or with an empty or
    non-UTF-8 one, or into --out where a file stands: one error naming the path (no traceback), and no
    empty report folders left by a report that failed on its inputs."""
    from harness.errors import ConfigError, DataError
    from harness.report.homogeneity import build_homogeneity_report

    _, tmp = report
    run = next(p for p in sorted((tmp / "runs").iterdir()) if (p / "run.json").is_file())
    a_file = tmp_path / "stories.jsonl"
    a_file.write_text("{}\n")
    bare, empty, latin, listed = (tmp_path / n for n in ("bare", "empty", "latin", "listed"))
    for d in (bare, empty, latin, listed):
        d.mkdir()
    (empty / "run.json").write_text("{}")
    (latin / "run.json").write_bytes(b"\xff{}")
    (listed / "run.json").write_text("[]")
    cases = [(tmp_path / "nowhere", "not found; give a run directory (the output_dir of `harness run`)"),
             (a_file, "a file, not a run directory; give the folder a run writes (its output_dir)"),
             (bare, "no run.json, so it is no run directory; give the output_dir of `harness run`"),
             (empty, "an empty run.json, so it is no run directory"),
             (latin, "run.json: not valid JSON; restore it or start a new output_dir"),
             (listed, "run.json: not a run's record (a JSON object)")]
    for build, good in ((build_report, [run]), (build_homogeneity_report, [])):
        for bad, message in cases:
            out = tmp_path / "out"
            with pytest.raises(DataError) as e:
                build([*good, bad], out)
            assert message in str(e.value) and str(bad) in str(e.value) and "\n" not in str(e.value)
            assert not out.exists()
    for out, message in ((a_file, f"--out {a_file}: a file is there; give a folder path"),
                         (a_file / "report", f"--out {a_file / 'report'}: {a_file} above it is a file")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            build_report([run], out)
    if Path("/proc/self").is_dir():  # a folder the system will not make: FileNotFoundError's traceback before
        with pytest.raises(ConfigError, match=re.escape("--out /proc/harness-test: cannot make this folder (")):
            build_report([run], "/proc/harness-test")


def test_the_report_takes_q_bh_over_every_run_it_stacks(tmp_path):
    """Each run adjusted over its own cells: a report of three models set three families side by side, and its
    q_bh read as one table's."""
    from statsmodels.stats.multitest import multipletests

    chars = synthetic_characters(120, models=("model-a", "model-b", "model-c"))
    per_run = [compute_tables(g, StatsConfig(mode="principled", n_boot=30)) for _, g in chars.groupby("model")]
    tables = {k: pd.concat([t[k] for t in per_run], ignore_index=True) for k in per_run[0]}  # as each run made them
    runs = write_synthetic_runs(tmp_path / "runs", chars, tables)
    build_report(runs, tmp_path / "report")
    for name in ("representation", "orientation", "subordination", "rmrs"):
        got = pd.read_csv(tmp_path / "report" / "tables" / f"{name}.csv")
        p = [row[src] if isinstance(src, str) else float("nan") for src, (_, row) in zip(got.q_bh_from, got.iterrows())]
        p = pd.Series(p, dtype=float)
        want = pd.Series(float("nan"), index=p.index)
        want[p.notna()] = multipletests(p[p.notna()], method="fdr_bh")[1]
        pd.testing.assert_series_equal(got.q_bh, want, check_names=False, rtol=1e-9)
