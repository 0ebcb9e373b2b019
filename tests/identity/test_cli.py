"""`harness names build|lookup` through Typer's CliRunner (synthetic table unless stated)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

from typer.testing import CliRunner

from harness.identity import RACES
from harness.identity.cli import app

runner = CliRunner()


def test_lookup_json(synthetic_table):
    r = runner.invoke(app, ["lookup", "--table", str(synthetic_table), "--json", "--min-population", "0",
                            "Dr. Samir Haddad", "Mom", "Nobody"])
    assert r.exit_code == 0, r.output
    recs = json.loads(r.output)  # one JSON array, as `harness prompts list --json`
    assert isinstance(recs, list) and all(isinstance(x, dict) for x in recs)
    assert [x["name"] for x in recs] == ["Dr. Samir Haddad", "Mom", "Nobody"]
    assert [x["first_name"] for x in recs] == ["Samir", None, "Nobody"]
    assert set(RACES) <= set(recs[0])
    assert recs[0]["white"] == 0.6 and recs[0]["mena"] == 0.5 and recs[0]["matched"] is True
    assert recs[2]["matched"] is False and recs[2]["white"] is None


def test_lookup_withholds_rare_names(synthetic_table):
    args = ["lookup", "--table", str(synthetic_table), "--json", "Rare", "Samir"]
    recs = json.loads(runner.invoke(app, args).output)
    assert recs[0]["withheld"] and recs[0]["aian"] is None          # 20 bearers < 100 (default)
    assert not recs[1]["withheld"] and recs[1]["white"] == 0.6
    text = runner.invoke(app, ["lookup", "--table", str(synthetic_table), "Rare", "Samir", "--mode", "renormalised"])
    assert "Rare -> Rare: withheld" in text.output and "White 31.6%" in text.output   # .3/.95
    # the cut is --min-population's: 10 shows RARE's 20 bearers, 2000 withholds SAMIR's 1000
    args = ["lookup", "--table", str(synthetic_table), "--json", "Rare", "Samir", "--min-population"]
    rare, samir = json.loads(runner.invoke(app, [*args, "10"]).output)
    assert not rare["withheld"] and rare["aian"] == 0.5 and not samir["withheld"]
    rare, samir = json.loads(runner.invoke(app, [*args, "2000"]).output)
    assert rare["withheld"] and samir["withheld"] and samir["white"] is None


def test_lookup_no_fallback_drops_the_voter_file(synthetic_table):
    """--no-fallback: a name missing from the Census (TALIA, voter file only) keeps only its names-dataset shares;
    without it the voter file gives its White/Black/Latine/Asian."""
    args = ["lookup", "--table", str(synthetic_table), "--json", "--min-population", "0", "Talia"]
    (with_voter,) = json.loads(runner.invoke(app, args).output)
    (without,) = json.loads(runner.invoke(app, [*args, "--no-fallback"]).output)
    assert with_voter["white"] == 0.5 and with_voter["black"] == 0.2 and with_voter["nhpi"] == 0.4
    assert without["matched"] and without["nhpi"] == 0.4
    assert [without[r] for r in ("white", "black", "latine", "asian")] == [None] * 4

def test_lookup_errors(tmp_path, synthetic_table):
    r = runner.invoke(app, ["lookup", "--table", str(tmp_path / "missing.parquet"), "John"])
    assert r.exit_code == 3 and "not found" in r.output
    r = runner.invoke(app, ["lookup", "--table", str(synthetic_table), "--mode", "nope", "John"])
    assert r.exit_code == 2 and "mode" in r.output
    r = runner.invoke(app, ["lookup", "--table", str(synthetic_table), "--min-population", "-5", "John"])
    assert r.exit_code == 2 and "--min-population" in r.output  # a negative count withheld nothing, silently
    jsonl = tmp_path / "names.jsonl"
    jsonl.write_text('{"name": "John"}\n')
    r = runner.invoke(app, ["lookup", "--table", str(jsonl), "John"])
    assert r.exit_code == 3 and f"{jsonl}: not a Parquet name table" in r.output and "Traceback" not in r.output
    # an empty name printed ': no first name', exit 0; a byte the locale could not decode matched another name
    for name, says in (("", "name 2: empty; give the names to look up"),
                       ("Mar\udce9a", "name 2 b'Mar\\xe9a': not UTF-8 text; give the name in UTF-8")):
        r = runner.invoke(app, ["lookup", "--table", str(synthetic_table), "John", name])
        assert r.exit_code == 2 and r.output == f"error: {says}\n", r.output


def test_a_harness_cache_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    """HARNESS_CACHE pointing at a file: a NotADirectoryError traceback when the first table or model was stored."""
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    monkeypatch.setenv("HARNESS_CACHE", str(a_file))
    r = runner.invoke(app, ["lookup", "John"])
    assert r.exit_code == 2 and r.output == (f"error: HARNESS_CACHE {a_file}: {a_file} is a file, where harness keeps "
                                             f"its cache folder; point HARNESS_CACHE at a folder\n"), r.output


def test_build_reports_coverage(synthetic_table, tmp_path):
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"manual_subject_name": "[\'Samir\']", "manual_object_name": "[\'Zed\']"}\n'
                  '{"manual_subject_name": "[\'Talia\']", "manual_object_name": null}\n')
    r = runner.invoke(app, ["build", "--out", str(synthetic_table), "--coverage", str(jl)])
    assert r.exit_code == 0, r.output
    assert "table exists" in r.output
    assert "2/3 distinct names (66.67%), 2/3 occurrences (66.67%)" in r.output and "unmatched: Zed" in r.output


def test_build_coverage_follows_mode(synthetic_table, tmp_path):
    """--mode reaches the coverage report: ZAYNAB (names-dataset only) is matched in paper mode, unmatched in
    renormalised mode (no U.S. source, no seven-way distribution)."""
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"manual_subject_name": "[\'Samir\']", "manual_object_name": "[\'Zaynab\']"}\n')
    args = ["build", "--out", str(synthetic_table), "--coverage", str(jl)]
    paper = runner.invoke(app, args)
    assert paper.exit_code == 0 and "(paper): 2/2 distinct names (100.00%)" in paper.output, paper.output
    ren = runner.invoke(app, [*args, "--mode", "renormalised"])
    assert ren.exit_code == 0 and "(renormalised): 1/2 distinct names (50.00%)" in ren.output, ren.output
    assert "unmatched: Zaynab" in ren.output


def test_build_force_rebuilds_an_existing_table(synthetic_table, tmp_path, monkeypatch):
    """An existing table is kept ("table exists") unless --force, which rebuilds it at --out; a missing one is
    built."""
    import shutil

    import harness.identity.build as b

    out = tmp_path / "t.parquet"
    shutil.copy(synthetic_table, out)
    built = []

    def fake_build(path):
        built.append(path)
        return SimpleNamespace(path=path, rows=1, census_names=1, voter_names=1, nd_names=1, seconds=0.0,
                               provenance={"sources": {"census": {"file": "c", "sha256": "0" * 64}}})

    monkeypatch.setattr(b, "build_table", fake_build)
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"manual_subject_name": "[\'Samir\']"}\n')
    cov = ["--coverage", str(jl), "--field", "manual_subject_name"]
    r = runner.invoke(app, ["build", "--out", str(out), *cov])
    assert r.exit_code == 0 and "table exists" in r.output and built == [], r.output
    r = runner.invoke(app, ["build", "--out", str(out), *cov, "--force"])
    assert r.exit_code == 0 and built == [out] and f"wrote {out}" in r.output, r.output
    assert "table exists" not in r.output and "1/1 distinct names" in r.output
    new = tmp_path / "new.parquet"  # a missing table is built without --force
    monkeypatch.setattr(b, "build_table", lambda path: shutil.copy(synthetic_table, path) and fake_build(path))
    r = runner.invoke(app, ["build", "--out", str(new), *cov])
    assert r.exit_code == 0 and built == [out, new] and f"wrote {new}" in r.output, r.output

def test_build_reports_coverage_by_default(synthetic_table, tmp_path):
    """Without --coverage: the project's labelled stories, plus ../shared's dev file when it exists."""
    from harness.identity.names import PROJECT_NAME_FIELDS, NameTable, default_coverage_sources, first_names_from_jsonl

    repo = tmp_path / "repo"
    repo.mkdir()
    r = runner.invoke(app, ["build", "--out", str(synthetic_table), "--repo-root", str(repo)])
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if x.startswith("coverage on ")]
    assert len(lines) == 1 and "project_train.jsonl" in lines[0]
    project = default_coverage_sources(repo)[0][0]
    names = first_names_from_jsonl(project, PROJECT_NAME_FIELDS)
    assert len(names) > 50 and "Priya" in names  # "Priya Raman" -> Priya
    cov = NameTable.load(synthetic_table).coverage(names)
    assert f"{cov.distinct_matched}/{cov.distinct} distinct names" in lines[0]
    assert f"{cov.occurrences_matched}/{cov.occurrences} occurrences" in lines[0]

    dev = tmp_path / "shared" / "data" / "laissez_faire_audit_dev.jsonl"
    dev.parent.mkdir(parents=True)
    dev.write_text('{"manual_subject_name": "[\'Samir\']", "manual_object_name": "[\'Zed\']"}\n')
    r = runner.invoke(app, ["build", "--out", str(synthetic_table), "--repo-root", str(repo)])
    lines = [x for x in r.output.splitlines() if x.startswith("coverage on ")]
    assert len(lines) == 2 and "laissez_faire_audit_dev.jsonl" in lines[1]
    assert "1/2 distinct names (50.00%), 1/2 occurrences (50.00%)" in lines[1]


def test_build_refuses_its_options_before_building(tmp_path, synthetic_table, monkeypatch):
    """A folder or a path under a file as --out, an unknown --mode: one line before the build (which takes a
    minute and printed 'wrote ...' before failing, or failed after it); a --field no row has: refused, not a
    0/0 coverage of nan%."""
    import harness.identity.build as b

    monkeypatch.setattr(b, "build_table", lambda *a, **k: (_ for _ in ()).throw(AssertionError("built")))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    pipe = tmp_path / "pipe"  # renamed over, as /dev/null would have been
    os.mkfifo(pipe)
    for args, says in ((["--out", str(tmp_path)], f"--out {tmp_path}: a folder; give the path of the Parquet file"),
                       (["--out", str(a_file / "t.parquet")], f"--out {a_file / 't.parquet'}: {a_file} above it is a file"),
                       (["--out", str(pipe)], f"--out {pipe}: not a regular file (a device, pipe or socket)"),
                       (["--out", str(tmp_path / "new.parquet"), "--mode", "bogus"], "--mode 'bogus': use one of paper, renormalised")):
        r = runner.invoke(app, ["build", *args])
        assert r.exit_code == 2 and r.output.startswith(f"error: {says}"), r.output
        assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "new.parquet").exists()
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"manual_subject_name": "[\'Samir\']"}\n')
    r = runner.invoke(app, ["build", "--out", str(synthetic_table), "--coverage", str(jl), "--field", "subject_name"])
    assert r.exit_code == 3 and f"{jl}: no row gives a value for field 'subject_name' (the first row has " \
        "manual_subject_name)" in r.output and "nan" not in r.output
    # checked before the build: they failed (exit 3) after the table was written
    for args in (["--coverage", str(jl), "--field", "subject_name"], ["--coverage", str(tmp_path / "none.jsonl")]):
        r = runner.invoke(app, ["build", "--out", str(tmp_path / "new.parquet"), *args])
        assert r.exit_code == 3 and "built" not in r.output and not (tmp_path / "new.parquet").exists(), r.output
