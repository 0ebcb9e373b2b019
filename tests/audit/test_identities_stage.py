"""The identities stage on a hand-made run (no model): which characters build_characters makes from the
labels, and when the whole-table stages count as current."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.audit.labels import LABEL_SCHEMA, LABELS, text_sha1
from harness.audit.stages import IDENTITIES, STATISTICS, stage_identities, stage_statistics
from harness.config import parse_config
from harness.pipeline import GENERATION_SCHEMA, GENERATIONS
from harness.store import RunStore

STORIES = {  # (prompt_id, sample_idx) -> text, domain, condition, love type, [(role, name, references)]
    ("love-laden-01", 0): ("Maria paid the bill for dinner with her partner Jamal. He smiled.", "Love", "laden",
                           "romantic", [("subject", "Maria", ["her"]), ("object", "Jamal", ["He"])]),
    ("learning-neutral-01", 0): ("Sarah studied hard. She passed.", "Learning", "neutral", None,
                                 [("subject", "Sarah", ["She"])]),
}


def _label_rows(stories=STORIES):
    return [{"prompt_id": p, "sample_idx": i, "role": role, "role_description": "", "name": name,
             "references": refs, "status": "ok", "labeller": "rules", "finish_reason": "ok",
             "text_sha1": text_sha1(text)}
            for (p, i), (text, _, _, _, chars) in stories.items() for role, name, refs in chars]


def _run(tmp_path, stories=STORIES, **identity):
    """A run directory with generations and labels written as the generate and label stages write them."""
    cfg = parse_config({"name": "m1", "model": {"backend": "transformers", "path": "smollm2-135m"},
                        "prompts": sorted({p for p, _ in stories}), "samples_per_prompt": 1,
                        "output_dir": str(tmp_path / "run"),
                        "identity": identity})
    store = RunStore(cfg.output_dir)
    store.write_shard(GENERATIONS, _generation_rows(stories), "gen-0of1", GENERATION_SCHEMA)
    store.write_shard(LABELS, _label_rows(stories), "labels-0of1", LABEL_SCHEMA)
    return cfg, store


def _generation_rows(stories=STORIES):
    return [{"prompt_id": p, "sample_idx": i, "domain": d, "condition": c, "love_type": lt, "text": t,
             "text_clean": t, "finish_reason": "stop"} for (p, i), (t, d, c, lt, _) in stories.items()]


def _representative(store):
    """The name table's representative shares the identities stage recorded (the statistics stage reads them)."""
    from harness.audit.stages import recorded

    return recorded(store, IDENTITIES)["representative_shares"]


def _run_with_failures_of_before_text_hashes(tmp_path):
    """A run whose labels are all backend failures written before label rows held ``text_sha1``."""
    import pyarrow as pa

    cfg, store = _run(tmp_path)
    for p in store.shard_paths(LABELS):
        p.unlink()
    old_schema = pa.schema([f for f in LABEL_SCHEMA if f.name != "text_sha1"])
    failure = [{**{k: v for k, v in r.items() if k != "text_sha1"}, "name": None, "references": [],
                "status": "llm: backend error: HTTP 503 in 3 attempt(s)", "finish_reason": "error"}
               for r in _label_rows()]
    store.write_shard(LABELS, failure, "labels-0of1", old_schema)
    return cfg, store


def test_statistics_are_computed_again_when_the_identities_are(tmp_path):
    """The statistics stage read the identities stage's output by its listing (file name and size) alone:
    characters.parquet made again with other likelihoods (another name mode) had the same size, and the
    statistics of the old characters were kept as current."""
    from harness.audit.statistics import compute_tables

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    assert stage_statistics(cfg, store).status == "done"
    renormalised = parse_config({**cfg.model_dump(), "identity": {"name_mode": "renormalised"}})
    assert stage_identities(renormalised, store).status == "done"
    assert stage_statistics(renormalised, store).status == "done"
    assert stage_statistics(renormalised, store).status == "skipped (current)"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    expected = compute_tables(chars, renormalised.statistics, min_population=renormalised.identity.min_population,
                              representative=_representative(store))
    got = pd.read_parquet(store.stage_dir(STATISTICS) / "representation.parquet")
    pd.testing.assert_frame_equal(got, expected["representation"].reset_index(drop=True), check_dtype=False)


def test_statistics_are_computed_again_by_a_release_that_changes_a_computation(tmp_path, monkeypatch):
    """The statistics stage's fingerprint held the config and the identities only: a harness whose R_mrs sweep
    changed kept the tables of the old one, 'skipped (current)'."""
    import harness.stats

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    assert stage_statistics(cfg, store).status == "done"
    assert stage_statistics(cfg, store).status == "skipped (current)"
    monkeypatch.setattr(harness.stats, "METHODS_VERSION", harness.stats.METHODS_VERSION + "+changed")
    assert stage_statistics(cfg, store).status == "done"


def test_the_characters_are_made_again_under_another_model_name(tmp_path):
    """Every character row carries the config's ``name`` (its ``model`` column): renaming the run's model
    made the identities stage skip as current and keep the old name in every row."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    assert stage_identities(cfg, store).status == "skipped (current)"
    renamed = parse_config({**cfg.model_dump(), "name": "m2"})
    assert stage_identities(renamed, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert set(chars.model) == {"m2"}


def test_the_characters_are_made_again_under_another_wording_of_the_suite(tmp_path):
    """The characters' roles and power roles are the suite's (its name, version and wording): guards a run read
    under another wording of the suite being 'skipped (current)' with the characters the first wording made."""
    from harness.audit.stages import recorded

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    assert stage_identities(cfg, store).status == "skipped (current)"
    paper = parse_config({**cfg.model_dump(), "wording": "paper"})
    assert stage_identities(paper, store).status == "done"
    assert recorded(store, IDENTITIES)["suite"][2] == "paper"


def assert_statistics_tables_are_computed_from_the_characters(store, cfg):
    """The statistics stage's tables are ``compute_tables`` of the run's characters under ``cfg``."""
    import io

    from harness.audit.statistics import compute_tables

    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    for name, df in compute_tables(chars, cfg.statistics, min_population=cfg.identity.min_population,
                                     representative=_representative(store)).items():
        got = pd.read_parquet(store.stage_dir(STATISTICS) / f"{name}.parquet")
        pd.testing.assert_frame_equal(got, pd.read_parquet(io.BytesIO(df.to_parquet(index=False))))


def test_statistics_are_computed_again_under_other_statistics_settings(tmp_path):
    """The statistics stage's fingerprint holds the ``statistics`` settings: guards a rerun with another threshold
    sweep (``threshold_max`` 100, as the paper) keeping the tables of the first settings, 'skipped (current)'."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done" and stage_statistics(cfg, store).status == "done"
    swept = parse_config({**cfg.model_dump(), "statistics": {"threshold_max": 100}})
    assert stage_statistics(swept, store).status == "done"
    assert stage_statistics(swept, store).status == "skipped (current)"
    assert_statistics_tables_are_computed_from_the_characters(store, swept)


def test_the_characters_are_made_again_when_the_labels_change(tmp_path):
    """The characters are made from the labels as much as from the stories: the run's labels deleted and made
    again (another labeller, as a refusal of other label settings says) over the same stories are read anew,
    not 'skipped (current)' with the characters of the labels that are gone."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    assert stage_identities(cfg, store).status == "skipped (current)"
    for p in store.shard_paths(LABELS):
        p.unlink()
    store.write_shard(LABELS, [{**r, "name": None} if r["name"] == "Sarah" else r for r in _label_rows()],
                      "labels-0of1", LABEL_SCHEMA)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").set_index("prompt_id")
    assert pd.isna(chars.first_name["learning-neutral-01"]) and chars.first_name.notna().sum() == 2


def test_a_stage_killed_while_writing_is_not_current_for_the_options_it_recorded_before(tmp_path, monkeypatch):
    """A whole-table stage writes its tables, then records the fingerprint it made them with. Killed in
    between under a renamed model, it kept the first model's record: the rerun with the first config put
    back skipped as current over the renamed model's characters; the statistics, killed after their first
    table, likewise kept a mix of two configs' tables, and the report a page of the other config."""
    import pytest

    import harness.audit.stages as S

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done" and stage_statistics(cfg, store).status == "done"
    renamed = parse_config({**cfg.model_dump(), "name": "m2"})

    def killed(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "mark_current", killed)
    with pytest.raises(KeyboardInterrupt):
        stage_identities(renamed, store)
    monkeypatch.undo()
    assert stage_identities(cfg, store).status == "done"
    assert set(pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").model) == {"m1"}

    assert stage_statistics(cfg, store).status == "skipped (current)"  # the characters they were made of, again
    fewer = parse_config({**cfg.model_dump(), "identity": {"min_population": 10**9}})
    written, real_write = [], S.write_table

    def killed_after_the_first_table(*a, **kw):
        if written:
            raise KeyboardInterrupt
        written.append(real_write(*a, **kw))

    monkeypatch.setattr(S, "write_table", killed_after_the_first_table)
    with pytest.raises(KeyboardInterrupt):
        stage_statistics(fewer, store)
    monkeypatch.undo()
    assert stage_statistics(cfg, store).status == "done"
    assert_statistics_tables_are_computed_from_the_characters(store, cfg)

    def page(text, killed=False):  # a report build that writes its page (and is killed after it)
        def build(runs, out):
            out.mkdir(parents=True, exist_ok=True)
            (out / "index.html").write_text(text)
            if killed:
                raise KeyboardInterrupt
            return out / "index.html"
        return build

    assert S.run_report_stage(store, "fp-1", page("first"), 0.0).status == "done"
    with pytest.raises(KeyboardInterrupt):
        S.run_report_stage(store, "fp-2", page("second", killed=True), 0.0)
    assert S.run_report_stage(store, "fp-1", page("first"), 0.0).status == "done"
    assert (store.root / "report" / "index.html").read_text() == "first"


def test_a_second_job_in_a_whole_table_stage_stops_and_the_first_ones_tables_stand(tmp_path, monkeypatch):
    """The whole-table stages took no lock: `harness run` started twice ran a stage twice at once, and the jobs'
    writes interleaved (here a second job of other options wrote every statistics table once the first had written
    its first; the first then wrote the rest over them, and its record: the representation table was the other
    config's under this one's record). A job holds the stage's writer lock while it checks and writes the stage; a
    second stops with a one-line error naming the stage's folder, rather than wait silently behind a job that may
    be stopped; rerun, it skips what the first made."""
    import pytest

    import harness.audit.stages as S
    from harness.errors import DataError

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    principled = parse_config({**cfg.model_dump(), "statistics": {"mode": "principled", "n_boot": 50}})
    second, real_write = [], S.write_table

    def second_job_starts_once_the_first_wrote_a_table(*a, **kw):
        path = real_write(*a, **kw)
        if not second:
            second.append("started")
            with pytest.raises(DataError) as stopped:
                stage_statistics(principled, store)
            second.append(str(stopped.value))
        return path

    monkeypatch.setattr(S, "write_table", second_job_starts_once_the_first_wrote_a_table)
    assert stage_statistics(cfg, store).status == "done"
    monkeypatch.undo()
    folder = store.stage_dir(STATISTICS)
    assert second[1].startswith(f"{folder}: another job is writing") and "\n" not in second[1]
    assert_statistics_tables_are_computed_from_the_characters(store, cfg)
    assert stage_statistics(cfg, store).status == "skipped (current)"

    # each whole-table stage, beside a job writing it (its lock held as that job holds it)
    def page(runs, out):
        out.mkdir(parents=True, exist_ok=True)
        (out / "index.html").write_text("page")
        return out / "index.html"

    renamed = parse_config({**cfg.model_dump(), "name": "m2"})
    for stage, run_it in ((IDENTITIES, lambda: stage_identities(renamed, store)),
                          (STATISTICS, lambda: stage_statistics(renamed, store)),
                          (S.REPORT, lambda: S.run_report_stage(store, "fp", page, 0.0))):
        with store.writing(stage):
            with pytest.raises(DataError, match=f"^{store.stage_dir(stage)}: another job is writing"):
                run_it()
        assert run_it().status == "done"


def test_a_deleted_table_is_made_again(tmp_path):
    """A whole-table stage whose table was deleted (to have it made again, as for a shard that does not
    read) skipped as current: the statistics then stopped with a FileNotFoundError for characters.parquet."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done" and stage_statistics(cfg, store).status == "done"
    (store.stage_dir(IDENTITIES) / "characters.parquet").unlink()
    assert stage_identities(cfg, store).status == "done"
    assert stage_statistics(cfg, store).status == "skipped (current)"  # the same characters made again
    (store.stage_dir(STATISTICS) / "representation.parquet").unlink()
    assert stage_statistics(cfg, store).status == "done"
    assert (store.stage_dir(STATISTICS) / "representation.parquet").is_file()
    (store.stage_dir(STATISTICS) / "representation.csv").unlink()  # the CSV for people: it stayed missing
    assert stage_statistics(cfg, store).status == "done"
    assert (store.stage_dir(STATISTICS) / "representation.csv").is_file()


def test_a_deleted_figure_or_table_of_the_report_is_made_again(tmp_path):
    """The report stage checked index.html alone: a deleted figure stayed missing, 'skipped (current)', and the page
    pointed at it."""
    from harness.audit.stages import REPORT, stage_report

    cfg, store = _run(tmp_path)
    store.write_manifest({"config": cfg.model_dump(mode="json")})
    for stage in (stage_identities, stage_statistics, stage_report):
        assert stage(cfg, store).status == "done"
    assert stage_report(cfg, store).status == "skipped (current)"
    figure = next((store.stage_dir(REPORT) / "figures").glob("*.png"))
    figure.unlink()
    assert stage_report(cfg, store).status == "done" and figure.is_file()


def test_a_report_made_by_another_version_of_the_report_is_made_again(tmp_path, monkeypatch):
    """The report stage's fingerprint held its inputs only: a harness release that changed the report left a run's
    report 'skipped (current)', as the statistics and identities stages, which record their versions, do not."""
    import harness.report
    from harness.audit.stages import stage_report

    cfg, store = _run(tmp_path)
    store.write_manifest({"config": cfg.model_dump(mode="json")})
    for stage in (stage_identities, stage_statistics, stage_report):
        assert stage(cfg, store).status == "done"
    assert stage_report(cfg, store).status == "skipped (current)"
    monkeypatch.setattr(harness.report, "REPORT_VERSION", harness.report.REPORT_VERSION + "-next")
    assert stage_report(cfg, store).status == "done"
    assert stage_report(cfg, store).status == "skipped (current)"


def test_a_report_is_made_again_once_its_labeller_is_scored(tmp_path):
    """The labelling QA table says how to score the run's labeller and where to write the scores; written, they left
    the run's report 'skipped (current)' without them, since its fingerprint held the tables and the config alone."""
    import json

    from harness.audit.stages import REPORT, stage_report

    cfg, store = _run(tmp_path)
    rules = {"labeller": "rules", "rules_version": "8"}
    store.write_manifest({"config": cfg.model_dump(mode="json"), "labeller": rules})
    for stage in (stage_identities, stage_statistics, stage_report):
        assert stage(cfg, store).status == "done"
    assert "no evaluation scores recorded" in (store.stage_dir(REPORT) / "index.html").read_text()
    scores = {"gender_precision": 0.773, "gender_recall": 0.673, "name_precision": 0.782, "name_recall": 0.69,
              "stories": 1000, "labeller_info": rules}
    (store.root / "labeller_evaluation.json").write_text(json.dumps(scores))
    assert stage_report(cfg, store).status == "done"
    assert "77.3%" in (store.stage_dir(REPORT) / "index.html").read_text()
    assert stage_report(cfg, store).status == "skipped (current)"
    (store.root / "labeller_evaluation.json").write_text(json.dumps({**scores, "gender_precision": 0.8}))
    assert stage_report(cfg, store).status == "done"  # scored again


def test_a_title_that_repeats_the_role_comes_off_as_in_the_labellers_evaluation(tmp_path):
    """An LLM labeller writes the name as the story does ("Nurse Emily" for the nurse). The identities stage
    read it with the seed-000 role filter, which drops a name sharing a word with the role: the nurse was
    unnamed, while the labeller's evaluation (and the encoder's decoder) reads her as Emily."""
    from harness.identity.names import first_name_of

    stories = {
        ("labor-neutral-10", 0): ("Nurse Emily checked on every patient. She smiled.", "Labor", "neutral", None,
                                  [("subject", "Nurse Emily", ["She"])]),
        ("labor-neutral-06", 0): ("Doctor Ana Ruiz read the chart. She nodded.", "Labor", "neutral", None,
                                  [("subject", "Doctor Ana Ruiz", ["She"])]),
    }
    cfg, store = _run(tmp_path, stories)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").set_index("prompt_id")
    assert chars.first_name.to_dict() == {"labor-neutral-10": "Emily", "labor-neutral-06": "Ana"}
    assert chars.white.notna().all()
    # the evaluation's reading of the same names
    assert first_name_of(["Nurse Emily"], "nurse", role_title=False) == "Emily"


def test_a_retried_backend_failure_from_before_text_hashes_is_one_character(tmp_path):
    """Label rows written before rows recorded their text's hash count as current whatever the text. A backend
    failure's rows of then (no hash) and their retry's rows (hashed) have different keys, so the store keeps
    both: every character of the story was counted twice, once unnamed with the failure as its status."""
    from harness.audit.labels import labelled_keys

    cfg, store = _run_with_failures_of_before_text_hashes(tmp_path)
    hashes = {k: text_sha1(v[0]) for k, v in STORIES.items()}
    assert labelled_keys(store, hashes) == set()  # so the label stage labels them again
    store.write_shard(LABELS, _label_rows(), "labels-0of1", LABEL_SCHEMA)
    assert labelled_keys(store, hashes) == set(STORIES)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert len(chars) == 3 and not chars.duplicated(["prompt_id", "sample_idx", "role"]).any()
    assert chars.label_status.eq("ok").all() and chars.first_name.notna().all()


def test_labels_of_before_text_hashes_count_as_labels_of_their_story_whatever_its_text(tmp_path):
    """Label rows written before rows recorded their text's hash count as current whatever the text: a run
    labelled by an earlier release is not labelled again (hours of an LLM labeller) nor refused, and the
    identities stage reads its labels."""
    import pyarrow as pa

    from harness.audit.labels import label_run, labelled_keys

    cfg, store = _run(tmp_path)
    for p in store.shard_paths(LABELS):
        p.unlink()
    store.write_shard(LABELS, [{k: v for k, v in r.items() if k != "text_sha1"} for r in _label_rows()],
                      "labels-0of1", pa.schema([f for f in LABEL_SCHEMA if f.name != "text_sha1"]))
    assert labelled_keys(store, {k: text_sha1(v[0]) for k, v in STORIES.items()}) == set(STORIES)
    assert labelled_keys(store, {k: text_sha1("another text") for k in STORIES}) == set(STORIES)
    rules = parse_config({**cfg.model_dump(), "label": {"labeller": "rules"}})
    assert label_run(rules, store, progress=False) == (0, 2, 0, 0)  # nothing left to label
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert sorted(chars.first_name) == ["Jamal", "Maria", "Sarah"]


def test_a_story_made_again_and_labelled_again_is_read_with_the_labels_of_its_current_text(tmp_path):
    """A story made again with another text and labelled again has rows of both texts under one (story, role):
    the stage reads the labels keyed by their ``text_sha1`` too and builds the story's characters from those of
    its current text. Read by story and role alone, the first rows written (of the earlier text) stood, and the
    stage stopped with "made from an earlier text" however often the label stage ran."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    story = ("learning-neutral-01", 0)
    again = {**STORIES, story: ("Omar studied hard. He passed.", "Learning", "neutral", None,
                                [("subject", "Omar", ["He"])])}
    for p in store.shard_paths(GENERATIONS):
        p.unlink()
    store.write_shard(GENERATIONS, _generation_rows(again), "gen-0of1", GENERATION_SCHEMA)
    store.write_shard(LABELS, _label_rows({story: again[story]}), "labels-1of1", LABEL_SCHEMA)  # the rerun's
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert len(chars) == 3 and not chars.duplicated(["prompt_id", "sample_idx", "role"]).any()
    row = chars.set_index("prompt_id").loc["learning-neutral-01"]
    assert (row.first_name, row.gender) == ("Omar", "Male")


def test_each_character_s_gender_comes_from_its_label_references(tmp_path):
    """The characters' genders are read from the references the labeller found for each of them (Maria's "her",
    Jamal's "He"), one character's not another's: the gender tables count these."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert dict(zip(chars.first_name, chars.gender)) == {"Maria": "Female", "Jamal": "Male", "Sarah": "Female"}


def test_the_configured_gender_lexicon_reads_the_references_and_a_change_of_it_reads_them_again(tmp_path):
    """``identity.lexicon`` chooses the words that make a gender: under the authors' code variant "mister" is no
    male word (Unspecified), under Table S6a it is (Male). Guards the lexicon the config names reaching the
    inference (not Table S6a whatever it names), and a run changed to another lexicon read again, not kept."""
    stories = {("learning-neutral-01", 0): ("Mister Lee studied hard. Lee passed.", "Learning", "neutral", None,
                                            [("subject", "Lee", ["Mister Lee"])])}
    cfg, store = _run(tmp_path, stories)
    assert stage_identities(cfg, store).status == "done"
    assert pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").gender.tolist() == ["Male"]
    code = parse_config({**cfg.model_dump(), "identity": {"lexicon": "code"}})
    assert stage_identities(code, store).status == "done"
    assert pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").gender.tolist() == ["Unspecified"]


def test_each_character_s_power_role_love_type_and_story_are_its_prompt_s(tmp_path):
    """The subordination tables compare a prompt's dominant characters with its subordinate ones, the Love domain's
    tables split by Love type, and the bootstrap resamples stories: each character row carries its own role's power
    (love-laden-01: the partner who pays is dominant, the other subordinate; a neutral prompt's is baseline), its
    prompt's Love type and its story (prompt id and sample), not another role's or prompt's."""
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").set_index("first_name")
    assert chars.power_role.to_dict() == {"Maria": "dominant", "Jamal": "subordinate", "Sarah": "baseline"}
    assert chars.role.to_dict() == {"Maria": "subject", "Jamal": "object", "Sarah": "subject"}
    assert chars.love_type.fillna("-").to_dict() == {"Maria": "romantic", "Jamal": "romantic", "Sarah": "-"}
    assert chars.story_id.to_dict() == {"Maria": "love-laden-01#0", "Jamal": "love-laden-01#0",
                                        "Sarah": "learning-neutral-01#0"}


def test_each_character_s_race_likelihoods_and_name_population_are_the_name_table_s_for_its_first_name(tmp_path):
    """Every representation and subordination figure sums the characters' race likelihoods, and the name tables
    withhold a name rarer than ``min_population``: each character's likelihood columns are the name table's for
    its own first name, each race in its own column (Maria's high in Latine, Jamal's in Black, Sarah's in White),
    and its ``name_population`` the table's count of the name."""
    from harness.identity import RACES
    from harness.identity.names import NameTable

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    table = NameTable.load(mode=cfg.identity.name_mode).lookup(chars.first_name.tolist())
    pd.testing.assert_frame_equal(chars[list(RACES)].reset_index(drop=True),
                                  table[list(RACES)].astype(float).reset_index(drop=True))
    assert chars.name_population.tolist() == table.population.tolist() and chars.name_population.gt(0).all()
    by_name = chars.set_index("first_name")
    assert by_name.latine["Maria"] > 0.7 and by_name.black["Jamal"] > 0.7 and by_name.white["Sarah"] > 0.7


def test_a_story_the_labeller_could_not_handle_is_kept_as_unnamed_characters_with_the_reason(tmp_path):
    """A story the labeller could not handle (an empty story, a reply it could not parse) has label rows with the
    reason as their status: its characters are in the table, unnamed, with that reason as their ``label_status``
    (which the labelling QA counts as failed), not dropped and not counted as labelled."""
    from harness.audit.statistics import labelling_qa

    cfg, store = _run(tmp_path)
    for p in store.shard_paths(LABELS):
        p.unlink()
    rows = [{**r, "name": None, "references": [], "status": "empty story"}
            if r["prompt_id"] == "learning-neutral-01" else r for r in _label_rows()]
    store.write_shard(LABELS, rows, "labels-0of1", LABEL_SCHEMA)
    assert stage_identities(cfg, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet").set_index("prompt_id")
    assert len(chars) == 3
    row = chars.loc["learning-neutral-01"]
    assert row.label_status == "empty story" and pd.isna(row.first_name)
    assert sorted(chars.label_status) == ["empty story", "ok", "ok"]
    qa = labelling_qa(chars.reset_index())
    assert qa[qa.domain.eq("Learning")].share_failed.tolist() == [1.0]
    assert qa[qa.domain.eq("Love")].share_failed.eq(0).all()


def test_a_story_the_labeller_s_backend_failed_on_stops_the_identities_stage(tmp_path):
    """The label stage exits 4 where the labeller's backend failed (a server down) and its rerun labels those
    stories again; an identities stage run meanwhile (a job array) took the failure's rows as labels, and every
    table counted its characters as unnamed and Unspecified, exit 0. It is refused, naming a story and the way out;
    once labelled, the stage runs."""
    import pytest

    from harness.errors import DataError

    cfg, store = _run(tmp_path)
    for p in store.shard_paths(LABELS):
        p.unlink()
    rows = _label_rows()
    down = {**rows[0], "name": None, "references": [], "status": "llm: backend error: HTTP 503 in 3 attempt(s)",
            "finish_reason": "error"}
    store.write_shard(LABELS, [down, *rows[1:]], "labels-0of1", LABEL_SCHEMA)
    with pytest.raises(DataError, match=rf"^labels: 1 stories were not labelled, the labeller's backend failed \(story "
                                        rf"{rows[0]['prompt_id']}#{rows[0]['sample_idx']}: llm: backend error: HTTP 503"):
        stage_identities(cfg, store)
    store.write_shard(LABELS, rows[:1], "labels-1of1", LABEL_SCHEMA)  # the rerun's label
    assert stage_identities(cfg, store).status == "done"


def test_a_name_only_the_mena_source_has_counts_as_matched(tmp_path):
    """The stage's summary counted a named character as matched when its White likelihood was known, so a
    name in names-dataset alone (MENA and NH/PI likelihoods, no U.S. entry) was reported unmatched although
    the name table, and the statistics' labelling QA, match it."""
    import json

    from harness.audit.statistics import labelling_qa
    from harness.identity.names import NameTable

    stories = {("learning-neutral-01", 0): ("Shoroq studied hard. She passed.", "Learning", "neutral", None,
                                            [("subject", "Shoroq", ["She"])])}
    cfg, store = _run(tmp_path, stories)
    shoroq = NameTable.load().lookup(["Shoroq"]).iloc[0]
    assert shoroq.matched and pd.isna(shoroq.white) and shoroq.mena > 0.5
    result = stage_identities(cfg, store)
    assert result.detail == "1 characters, 1 named, 1 matched to the name table"
    assert json.loads((store.stage_dir(IDENTITIES) / "_stage.json").read_text())["matched"] == 1
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert labelling_qa(chars).share_matched.tolist() == [1.0]


def test_a_failure_from_before_text_hashes_does_not_stand_in_for_labels_of_an_earlier_text(tmp_path):
    """A story whose backend failure of before text hashes (no hash) was retried (hashed rows), and whose text
    was made again since: its only labels are of an earlier text, and the label stage labels it again. The
    identities stage took the unhashed failure rows as current (the story had no rows of its current text)
    and built its characters, unnamed, with the failure as their status, instead of stopping."""
    import pytest

    from harness.audit.labels import labelled_keys
    from harness.errors import DataError

    cfg, store = _run_with_failures_of_before_text_hashes(tmp_path)
    earlier = {k: (v[0] + " Then it rained.", *v[1:]) for k, v in STORIES.items()}
    store.write_shard(LABELS, _label_rows(earlier), "labels-0of1", LABEL_SCHEMA)
    assert labelled_keys(store, {k: text_sha1(v[0]) for k, v in STORIES.items()}) == set()
    with pytest.raises(DataError, match="earlier text"):
        stage_identities(cfg, store)


@pytest.mark.parametrize("hashed", [True, False, "the other story's only"])
def test_a_story_whose_generation_failed_since_has_no_characters_and_no_error(tmp_path, hashed):
    """A story made again whose new generation failed (no text; the next generate retries it) still has the
    labels of its earlier text: they are no labels of it, and the label stage skips a failed generation, so
    the error "rerun the label stage" could never clear. The story has no characters until it is generated.
    Labels of before text_sha1 let it back in: one character, "left out" as a failed generation and counted;
    so they did where the run's other labels have the hash (a run labelled across an upgrade)."""
    import pyarrow as pa

    cfg = parse_config({"name": "m1", "model": {"backend": "transformers", "path": "smollm2-135m"},
                        "prompts": sorted({p for p, _ in STORIES}), "samples_per_prompt": 1,
                        "output_dir": str(tmp_path / "run")})
    store = RunStore(cfg.output_dir)
    failed = ("learning-neutral-01", 0)
    store.write_shard(GENERATIONS, [{"prompt_id": p, "sample_idx": i, "domain": d, "condition": c, "love_type": lt,
                                     "text": "" if (p, i) == failed else t, "text_clean": "" if (p, i) == failed else t,
                                     "finish_reason": "error" if (p, i) == failed else "stop"}
                                    for (p, i), (t, d, c, lt, _) in STORIES.items()], "gen-0of1", GENERATION_SCHEMA)
    old_schema = pa.schema([f for f in LABEL_SCHEMA if f.name != "text_sha1"])
    if hashed is True:
        store.write_shard(LABELS, _label_rows(), "labels-0of1", LABEL_SCHEMA)
    elif hashed is False:
        store.write_shard(LABELS, [{k: v for k, v in r.items() if k != "text_sha1"} for r in _label_rows()],
                          "labels-0of1", old_schema)
    else:  # the failed story's labels of before text_sha1, the other story's of since
        rows = _label_rows()
        store.write_shard(LABELS, [{k: v for k, v in r.items() if k != "text_sha1"} for r in rows
                                   if (r["prompt_id"], r["sample_idx"]) == failed], "labels-0of1", old_schema)
        store.write_shard(LABELS, [r for r in rows if (r["prompt_id"], r["sample_idx"]) != failed], "labels-0of1",
                          LABEL_SCHEMA)
    result = stage_identities(cfg, store)
    assert result.status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert set(chars.prompt_id) == {"love-laden-01"} and len(chars) == 2
    # counted: in the stage's line and its record
    from harness.audit.stages import recorded

    assert result.detail.endswith("; 1 planned stories failed to generate and are left out")
    assert recorded(store, IDENTITIES)["failed_generations"] == 1


def test_the_identities_read_the_stories_the_config_plans_and_refuse_a_run_missing_some(tmp_path):
    """The stages after generate read whatever the run held: a config narrowed to one prompt got the earlier
    characters, 'skipped (current)'; a run missing planned stories (a shard of a job array not run, or run with
    another N) was tabled from its part, exit 0."""
    import pytest

    from harness.errors import DataError

    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    narrowed = parse_config({**cfg.model_dump(), "prompts": ["learning-neutral-01"]})
    assert stage_identities(narrowed, store).status == "done"
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    assert set(chars.prompt_id) == {"learning-neutral-01"} and len(chars) == 1
    from harness.report import tabled_stories  # the report's cue search and coding sheet read the same stories

    assert tabled_stories(store, "m1").story_id.tolist() == ["learning-neutral-01#0"]
    more = parse_config({**cfg.model_dump(), "samples_per_prompt": 3})
    with pytest.raises(DataError, match=r"generations: 4 of the 6 stories the config plans are not generated \(a shard "
                                        r"not run, or run with another N\?\); run `harness generate CONFIG`"):
        stage_identities(more, store)


def test_a_story_generated_but_never_labelled_stops_the_identities_stage(tmp_path):
    """A label job of an array killed or never run left its stories out of the characters table (the labels were
    joined to the stories inner), and every stage after it went on, exit 0, over part of the run. Now the stage
    names the count and the way out; labelled once, the same run goes on."""
    import pytest

    from harness.errors import DataError

    cfg, store = _run(tmp_path)
    for p in store.shard_paths(LABELS):
        p.unlink()
    labelled = {k: v for k, v in STORIES.items() if k[0] == "love-laden-01"}
    store.write_shard(LABELS, _label_rows(labelled), "labels-0of2", LABEL_SCHEMA)
    with pytest.raises(DataError, match=r"^labels: 1 of the 2 stories have none \(story learning-neutral-01#0 and "
                                        r"others: a label shard not run, or cut short\?\); run the label stage"):
        stage_identities(cfg, store)
    assert not (store.stage_dir(IDENTITIES) / "characters.parquet").exists()
    store.write_shard(LABELS, _label_rows({k: v for k, v in STORIES.items() if k not in labelled}), "labels-1of2",
                      LABEL_SCHEMA)
    assert stage_identities(cfg, store).status == "done"
    assert len(pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")) == 3


def test_harness_run_stops_after_a_generation_with_failed_requests(tmp_path, monkeypatch):
    """`harness run` went on to label, table and report the stories that came, exit 0, where `harness generate`
    exits 4: a job array running generate and label together saw the shard as done."""
    import sys
    from pathlib import Path

    import pytest

    import harness.pipeline as P
    from harness.audit.stages import run_stages
    from harness.errors import BackendError

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from test_store import EchoBackend

    cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}, "samples_per_prompt": 2,
                        "prompts": ["learning-neutral-01"], "output_dir": str(tmp_path / "run"),
                        "label": {"labeller": "rules"}})
    real = P.generate_run
    monkeypatch.setattr(P, "generate_run", lambda c, **kw: real(c, backend=EchoBackend(fail_ids={"learning-neutral-01#1"}),
                                                               **kw))
    with pytest.raises(BackendError, match=r"^1 of 2 requests failed \(the first: HTTP 503: server unavailable\); the "
                                           r"stories that finished are on disk"):
        run_stages(cfg, progress=False, echo=lambda line: None)
    assert not (tmp_path / "run" / LABELS).exists()


def test_later_stages_refuse_labels_another_labeller_made(tmp_path):
    """A run labelled with rules, rerun with label.labeller llm for identities, statistics and report only: the
    three stages were 'skipped (current)' and the rules labels reported under the llm config, exit 0."""
    import pytest

    from harness.audit.labels import label_settings
    from harness.audit.stages import run_stages
    from harness.errors import ConfigError

    cfg, store = _run(tmp_path)
    rules = parse_config({**cfg.model_dump(), "label": {"labeller": "rules"}})
    store.update_manifest(label_settings=label_settings(rules))
    run_stages(rules, ["identities"], progress=False, echo=lambda line: None)
    llm = parse_config({**cfg.model_dump(), "label": {"labeller": "llm", "llm": {"backend": "openai", "path": "m",
                                                                                 "base_url": "http://127.0.0.1:9/v1"}}})
    with pytest.raises(ConfigError, match=r"labels: these 2 stories were labelled with other label settings "
                                          r"\(labeller 'rules' -> 'llm'"):
        run_stages(llm, ["identities", "statistics"], progress=False, echo=lambda line: None)


def test_a_race_the_name_table_cannot_measure_is_left_unmeasured_not_reported_as_omission(tmp_path):
    """names-dataset, the NH/PI source, holds Fiji alone of Table S6b's NH/PI countries: every name's NH/PI
    likelihood is near 0, so R_rep read 0.001 with p < .001 ('omission') for any model, and R_sub compared
    noise. Those rows are NaN with the reason and out of the FDR family; R_rep's race rows carry the R_rep of a
    model that names characters as the U.S. does."""
    from harness.audit.statistics import MEASURABLE_SHARE, compute_tables, unmeasured_races
    from harness.identity import RACES
    from harness.identity.baselines import load_baselines
    from harness.stats.tables import baseline_map, representation_table

    pstar = baseline_map(load_baselines())
    assert list(unmeasured_races({"nhpi": 4e-6, "white": 0.62, "aian": 0.0066}, pstar)) == ["nhpi"]
    assert unmeasured_races(None, pstar) == {}
    cfg, store = _run(tmp_path)
    assert stage_identities(cfg, store).status == "done"
    shares = _representative(store)
    assert shares["nhpi"] / pstar["nhpi"] < MEASURABLE_SHARE < shares["white"] / pstar["white"]
    assert stage_statistics(cfg, store).status == "done"
    rep = pd.read_parquet(store.stage_dir(STATISTICS) / "representation.parquet")
    races = rep[rep.kind == "race"]
    nhpi = races[races.group == "nhpi"]
    assert len(nhpi) and nhpi.statistic.isna().all() and nhpi.q_bh.isna().all()
    assert (nhpi["flags"] == "not_measured").all() and nhpi.reason.str.startswith("not measured: the name table").all()
    assert races.groupby(["model", "domain"]).group.apply(list).map(lambda g: g == list(RACES)).all()  # in order
    assert abs(races.set_index("group").r_representative["white"].iloc[0] - shares["white"] / pstar["white"]) < 1e-12
    chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
    measured = representation_table(chars, load_baselines(), races=[r for r in RACES if r != "nhpi"])
    kept = rep[rep.group != "nhpi"].drop(columns="r_representative").reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, measured, check_dtype=False)  # the FDR family without the NH/PI rows
    sub = pd.read_parquet(store.stage_dir(STATISTICS) / "subordination.parquet")
    assert sub[sub.group == "nhpi"].statistic.isna().all() and sub[sub.group == "white"].statistic.notna().any()
    # identities recorded by an earlier release (no shares), the statistics stage run alone: still unmeasured
    import json

    from harness.audit.stages import _state_path

    state = json.loads(_state_path(store, IDENTITIES).read_text())
    del state["representative_shares"]
    _state_path(store, IDENTITIES).write_text(json.dumps(state))
    _state_path(store, STATISTICS).unlink()
    assert stage_statistics(cfg, store).status == "done"
    again = pd.read_parquet(store.stage_dir(STATISTICS) / "representation.parquet")
    assert again[again.group == "nhpi"].statistic.isna().all() and again.r_representative.notna().any()
    # every race unmeasured: each still has its NaN rows, with the reason
    every = compute_tables(chars, cfg.statistics, representative=dict.fromkeys(RACES, 0.0))
    for name in ("representation", "subordination"):
        races_of = every[name][every[name].group.isin(RACES)]
        assert set(races_of.group) == set(RACES) and races_of.statistic.isna().all(), name


def test_labels_that_lack_a_column_name_a_prompt_the_suite_lacks_or_a_role_its_prompt_lacks_are_refused_in_a_line():
    from harness.audit.characters import CHARACTER_COLUMNS, build_characters
    from harness.errors import DataError
    from harness.suites import get_suite

    suite = get_suite("laissez-faire", "released")
    gens = pd.DataFrame(_generation_rows())
    labels = pd.DataFrame(_label_rows())

    def build(lab):
        return build_characters(gens, lab, suite, model="m", names=None)

    with pytest.raises(DataError, match=r"^labels table lacks column\(s\) references, status; rerun the label stage$"):
        build(labels.drop(columns=["references", "status"]))
    unknown = labels.assign(prompt_id=labels.prompt_id.replace("learning-neutral-01", "learning-neutral-99"))
    gens_unknown = gens.assign(prompt_id=gens.prompt_id.replace("learning-neutral-01", "learning-neutral-99"))
    with pytest.raises(DataError, match=r"^labels name prompt id\(s\) learning-neutral-99 that suite laissez-faire "):
        build_characters(gens_unknown, unknown, suite, model="m", names=None)
    with pytest.raises(DataError, match=r"^labels: prompt learning-neutral-01 has no role 'object'$"):
        build(labels.assign(role=labels.role.where(labels.prompt_id != "learning-neutral-01", "object")))
    # no label rows at all, for stories whose generation did not fail: refused, not an empty table
    with pytest.raises(DataError, match=r"^labels: 2 of the 2 stories have none"):
        build(labels.iloc[:0])
    failed = gens.assign(finish_reason="error", text_clean="")
    empty = build_characters(failed, labels.iloc[:0], suite, model="m", names=None)  # every generation failed
    assert empty.empty and empty.columns.tolist() == list(CHARACTER_COLUMNS)
