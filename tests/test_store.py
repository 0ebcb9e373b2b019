"""Run store and pipeline logic, with a deterministic in-process backend standing in for an
engine (the real engines have their own tests); the kill-and-resume test uses a real model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pytest

from harness.config import parse_config
from harness.errors import ConfigError, DataError
from harness.generation.base import Backend, GenParams, GenRequest, GenResult
from harness.labelling.rules import RULES_VERSION
from harness.pipeline import GENERATIONS, generate_run, plan, prompt_hash
from harness.store import RunStore, parse_shard, sample_seed, shard_of
from harness.suites import get_suite


class EchoBackend(Backend):
    """Returns a story that is a pure function of the request seed."""

    name = "echo"

    def __init__(self, fail_after: int | None = None, fail_ids: set[str] = frozenset()) -> None:
        self.seen: list[str] = []
        self.fail_after = fail_after
        self.fail_ids = fail_ids  # request ids answered as a server error

    def generate(self, requests: Sequence[GenRequest], params: GenParams, *, progress=False) -> Iterator[GenResult]:
        for r in requests:
            if self.fail_after is not None and len(self.seen) >= self.fail_after:
                raise KeyboardInterrupt  # what a killed run looks like from inside
            self.seen.append(r.request_id)
            if r.request_id in self.fail_ids:
                yield GenResult(r.request_id, "", "error", 0, 0, error="HTTP 503: server unavailable")
                continue
            yield GenResult(r.request_id, f"  story {r.seed}  ", "stop", 10, 3)


def cfg(tmp_path, **kw):
    doc = {
        "model": {"backend": "transformers", "path": "smollm2-135m"},
        "prompts": ["learning-neutral-01", "labor-laden-02", "love-neutral-01"],
        "samples_per_prompt": 4,
        "seed": 11,
        "output_dir": str(tmp_path / "run"),
        "shard_rows": 3,
    }
    doc.update(kw)
    return parse_config(doc)


def test_seeds_and_shards_are_pure_functions():
    assert sample_seed(0, "p", 1) == sample_seed(0, "p", 1)
    assert len({sample_seed(0, "p", i) for i in range(1000)}) == 1000
    assert sample_seed(0, "p", 1) != sample_seed(1, "p", 1)
    assert 0 <= sample_seed(5, "x", 3) < 2**31
    owners = [shard_of("p", i, 4) for i in range(400)]
    assert set(owners) == {0, 1, 2, 3} and min(owners.count(k) for k in range(4)) > 60
    assert parse_shard("2/4") == (2, 4) and parse_shard(None) == (0, 1)
    for bad in ("4/4", "x", "1/0", ""):  # "" (an unset variable in a job script) was no shard at all
        with pytest.raises(ConfigError):
            parse_shard(bad)


def test_generate_writes_every_key_once_with_metadata(tmp_path):
    c = cfg(tmp_path)
    s = generate_run(c, backend=EchoBackend(), progress=False)
    assert (s.generated, s.total_rows, s.planned) == (12, 12, 12)
    store = RunStore(c.output_dir)
    df = store.read_stage(GENERATIONS)
    assert len(df) == 12 and not df.duplicated(["prompt_id", "sample_idx"]).any()
    assert len(store.shard_paths(GENERATIONS)) == 4  # 12 rows, 3 per shard
    row = df[(df.prompt_id == "labor-laden-02") & (df.sample_idx == 2)].iloc[0]
    assert row.seed == sample_seed(11, "labor-laden-02", 2)
    assert row.text == f"  story {row.seed}  " and row.text_clean == f"story {row.seed}"
    assert (row.domain, row.condition, row.scenario) == ("Labor", "laden", "labor-02")
    m = json.loads((Path(c.output_dir) / "run.json").read_text())
    assert m["status"] == "complete" and m["rows"] == 12 and m["expected_rows"] == 12
    assert m["config"]["seed"] == 11 and m["suite"]["wording"] == "released" and len(m["suite"]["prompt_sha256"]) == 64
    assert {"torch", "pandas"} <= set(m["packages"]) and "cpu" in m["host"]
    assert m["throughput"]["stories"] == 12


def _labeller_that(make, change):
    """``make`` (the label stage's ``make_labeller``) whose labeller passes each of its results through
    ``change(index, story, labels)``, which may raise (a kill) or return other labels (a failure)."""
    def made(cfg, echo=print, **kw):
        lab = make(cfg, echo=echo, **kw)
        inner = lab.iter_label

        def iter_label(stories, **kw):  # the stage hands its stories over as a stream, a shard's texts at a time
            seen = []

            def tapped():
                for story in stories:
                    seen.append(story)
                    yield story
            for k, res in enumerate(inner(tapped(), **kw)):
                yield change(k, seen[k], res)
        lab.iter_label = iter_label
        return lab
    return made


def _hashes(store):
    from harness.audit.labels import text_sha1

    gens = store.read_stage(GENERATIONS, columns=["prompt_id", "sample_idx", "text_clean"])
    return {k: text_sha1(t) for k, t in zip(zip(gens.prompt_id, gens.sample_idx.astype(int)), gens.text_clean)}


def test_the_label_stage_reads_the_stories_a_shard_at_a_time_and_labels_the_rows_a_whole_read_keeps(tmp_path,
                                                                                                     monkeypatch):
    """The label stage read every story whole, texts included, and listed them before labelling: about 3.4 KB a
    story for the stage's length, 693 MiB at 200,000 stories (benchmarks/label_stage_memory.py). It reads the
    generations a shard at a time and streams the stories to the labeller, never reading the texts whole, and each
    story is labelled from the row ``read_stage`` keeps: the first written, a good row over a failed one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import harness.audit.labels as L
    from harness.pipeline import GENERATION_SCHEMA

    c = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 4})
    generate_run(c, backend=EchoBackend(fail_ids={"labor-laden-02#3"}), progress=False)
    generate_run(c, backend=EchoBackend(), progress=False)  # the failed story retried, in a later shard
    store = RunStore(c.output_dir)
    d = store.stage_dir(GENERATIONS)

    def shard(name, rows):
        full = [{"text": r["text_clean"], "empty": False, "finish_reason": "stop", **r} for r in rows]
        pq.write_table(pa.Table.from_pylist(full, schema=GENERATION_SCHEMA), d / name)

    # written before every other shard (their names sort after it): a failed row of a story generated later
    shard("gen-0of1-0000-early.parquet", [{"prompt_id": "learning-neutral-01", "sample_idx": 2, "text_clean": None,
                                           "finish_reason": "error", "error": "HTTP 503"}])
    # and after: a second row of a story, which a whole read does not keep, and a story only this shard holds
    shard("gen-0of1-zzzz-late.parquet", [
        {"prompt_id": "love-neutral-01", "sample_idx": 1, "text_clean": "a second text of that story"},
        {"prompt_id": "love-neutral-01", "sample_idx": 4, "text_clean": "Mia and Leo met at a concert."}])
    real_read_stage = RunStore.read_stage
    kept = real_read_stage(store, GENERATIONS, columns=["prompt_id", "sample_idx", "text_clean"])
    assert len(kept) == 13

    def no_whole_read(self, stage, *a, **kw):
        assert stage != GENERATIONS, "the label stage read the generations whole"
        return real_read_stage(self, stage, *a, **kw)

    handed = []
    monkeypatch.setattr(RunStore, "read_stage", no_whole_read)
    monkeypatch.setattr(L, "make_labeller", _labeller_that(L.make_labeller, lambda k, story, res: handed.append(
        story) or res))
    assert L.label_run(c, store, progress=False)[:2] == (13, 13)
    assert len(handed) == 13
    want = {(p, int(i)): L.text_sha1(t) for p, i, t in zip(kept.prompt_id, kept.sample_idx, kept.text_clean)}
    assert {s.story_id: s.text for s in handed}["love-neutral-01#1"] == kept.set_index(
        ["prompt_id", "sample_idx"]).text_clean[("love-neutral-01", 1)]  # the first row, not the later one
    rows = real_read_stage(store, L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert {(p, int(i)): h for p, i, h in zip(rows.prompt_id, rows.sample_idx, rows[L.TEXT_SHA1])} == want
    assert L.labelled_keys(store, want) == set(want)
    assert L.label_run(c, store, progress=False)[:2] == (0, 13)  # resumed: nothing left


def test_a_generations_shard_changed_or_lacking_a_column_between_the_label_stages_two_reads(tmp_path, monkeypatch):
    """The label stage reads the generations twice (hashes, then texts). A shard without a text column was a
    traceback; one written over between the reads had its new rows labelled and stamped with the old rows' text hash
    (taken for labels of the current text), and one deleted meanwhile was called unreadable, "delete it". Now: one
    line naming the shard, the labels made before it kept, and rows stamped with the text they were made from."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import harness.audit.labels as L

    from harness.labelling.base import Labeller

    c = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 1, "batch_size": 1})
    monkeypatch.setattr(Labeller, "window_batches", 1)  # a story read is a story labelled
    generate_run(c, backend=EchoBackend(), progress=False)
    store = RunStore(c.output_dir)
    paths = store.shard_paths(GENERATIONS)
    real_read_shards, reads = RunStore.read_shards, []

    def then(change):
        def read_shards(self, stage, columns, paths=None, required=("prompt_id", "sample_idx")):
            if stage == GENERATIONS:
                reads.append(stage)
                if len(reads) == 2:  # the second read, of the texts: the shard changes first
                    change(paths[-1])
            yield from real_read_shards(self, stage, columns, paths, required)
        return read_shards

    def reversed_rows(path):
        pq.write_table(pa.Table.from_pandas(pq.read_table(path).to_pandas().iloc[::-1], preserve_index=False), path)

    monkeypatch.setattr(RunStore, "read_shards", then(reversed_rows))
    with pytest.raises(DataError, match=r"^\S+\.parquet: changed while the label stage read it; rerun, which labels "
                                        r"what is left$"):
        L.label_run(c, store, progress=False)
    kept = len(L.labelled_keys(store, _hashes(store)))
    assert 0 < kept < 12  # the shards before it were labelled and kept

    def new_texts(path):
        t = pq.read_table(path).to_pandas()
        pq.write_table(pa.Table.from_pandas(t.assign(text_clean=t.text_clean + " (written over)"),
                                            preserve_index=False), path)

    reads.clear()
    monkeypatch.setattr(RunStore, "read_shards", then(new_texts))
    labelled, total = L.label_run(c, store, progress=False)[:2]
    # not counted as labels of the texts the first read hashed; they are of the texts now in the file
    assert labelled == 12 - kept and total == 12 - len(pq.read_table(paths[-1]))
    monkeypatch.setattr(RunStore, "read_shards", real_read_shards)
    assert L.label_run(c, store, progress=False)[:2] == (0, 12)
    rows = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert set(rows[L.TEXT_SHA1]) == set(_hashes(store).values())

    lacking = store.stage_dir(GENERATIONS) / "gen-0of1-zzzz.parquet"
    pq.write_table(pq.read_table(paths[0]).drop(["text_clean"]), lacking)
    with pytest.raises(DataError, match=rf"^{lacking}: unreadable shard \(no column text_clean\); delete it"):
        L.label_run(c, store, progress=False)
    # a null key (a shard written by hand or another tool) was a ValueError or TypeError traceback
    for column in ("sample_idx", "prompt_id"):
        t = pq.read_table(paths[0])
        pq.write_table(t.set_column(t.schema.get_field_index(column), column,
                                    pa.array([None] * len(t), t.schema.field(column).type)), lacking)
        with pytest.raises(DataError, match=rf"^{lacking}: row 0: prompt_id .*, sample_idx .*; every story needs "
                                            r"both: mend the row, or delete the shard"):
            L.label_run(c, store, progress=False)
    lacking.unlink()
    reads.clear()
    monkeypatch.setattr(RunStore, "read_shards", then(lambda path: path.unlink()))
    generate_run(c.model_copy(update={"samples_per_prompt": 5}), backend=EchoBackend(), progress=False)
    with pytest.raises(DataError, match=r"^\S+\.parquet: deleted while it was read \(by another job\?\); rerun$"):
        L.label_run(c.model_copy(update={"samples_per_prompt": 5}), store, progress=False)


def _sleep_once_started(started, seconds: float) -> None:
    started.set()
    time.sleep(seconds)


def test_a_process_forked_inside_a_job_does_not_keep_its_shard_after_it_ends(tmp_path):
    """A flock belongs to the open file, and a child forked while a job writes (vLLM's engine workers fork) holds a
    copy: an engine process outliving its job kept the job's shard, and a requeued task was refused while it lived.
    A forked child closes its copies of the stage locks. The check waits for the child to run (its at-fork handlers
    run before its target): checked before, on a loaded machine, the child had not yet closed its copy."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    started = ctx.Event()
    store = RunStore(tmp_path / "run")
    with store.writing(GENERATIONS, shard=(0, 1)):
        child = ctx.Process(target=_sleep_once_started, args=(started, 30), daemon=True)
        child.start()
        assert started.wait(30)
        with pytest.raises(DataError, match="another job is writing every story"):
            store.check_share(GENERATIONS, (0, 1))
    try:
        assert child.is_alive()
        store.check_share(GENERATIONS, (0, 1))  # free, though the child lives
        with store.writing(GENERATIONS, shard=(0, 1)):
            pass
    finally:
        child.terminate()
        child.join(10)


def test_a_shard_lock_the_probe_could_not_see_is_refused_after_a_moment_not_waited_for(tmp_path, monkeypatch):
    """Where the probe of the running jobs' locks fails (a file system that refuses it), taking the job's own lock
    waited for the running job to end, hours, under the run's lock that every other job's update needs. It is tried
    for a moment (a probe holds it only that long), then the job stops."""
    import harness.store as S

    store = RunStore(tmp_path / "run")
    monkeypatch.setattr(S, "_held_share", lambda d, shard: None)
    with store.writing(GENERATIONS, shard=(1, 2)):
        t0 = time.monotonic()
        with pytest.raises(DataError, match=r"another job is writing shard 1/2 of this stage now \(this job's shard "
                                            r"1/2 would do its stories again\)"):
            with store.writing(GENERATIONS, shard=(1, 2)):
                pass
        assert time.monotonic() - t0 < 30
        store.update_manifest(rows=1)  # the run's lock is free again
        with store.writing(GENERATIONS, shard=(0, 2)):  # another shard goes on
            pass


def test_the_label_stage_labels_retried_generations_and_resumes(tmp_path, monkeypatch):
    """A failed generation (no story) is not labelled but counted; once generate has retried it, the label
    stage labels it. A killed label stage keeps its committed shards and a rerun labels only the rest."""
    import harness.audit.labels as L
    from harness.errors import DataError

    c = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 4})
    store = RunStore(c.output_dir)
    with pytest.raises(DataError, match="no generated stories to label; run the generate stage first"):
        L.label_run(c, store, progress=False)
    generate_run(c, backend=EchoBackend(fail_ids={"labor-laden-02#1"}), progress=False)
    assert L.label_run(c, store, progress=False) == (11, 11, 0, 1)
    assert L.label_run(c, store, progress=False) == (0, 11, 0, 1)
    generate_run(c, backend=EchoBackend(), progress=False)  # the retry
    assert L.label_run(c, store, progress=False) == (1, 12, 0, 0)
    labels = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert len(labels[(labels.prompt_id == "labor-laden-02") & (labels.sample_idx == 1)]) == 2  # both roles

    # another labeller over these labels: refused, not mixed in or called current; the same settings pass
    from harness.errors import ConfigError

    other = cfg(tmp_path, label={"labeller": "encoder", "shard_rows": 4, "name_check": False})
    with pytest.raises(ConfigError, match=r"12 stories were labelled with other label settings \(labeller 'rules' "
                                          r"-> 'encoder'; name_check True -> False\); restore them, or delete that "
                                          r"folder"):
        L.label_run(other, store, progress=False)
    assert L.label_run(cfg(tmp_path, label={"labeller": "rules", "shard_rows": 9}), store, progress=False)[:2] == (0, 12)

    # a story whose labelling failed in the backend (an LLM server down) keeps its reason and is labelled
    # again by the next run; the identities stage then reads the retry's rows. The stage says so as generate does:
    # exit 4 (a BackendError), so neither a job array's scheduler nor `harness run` takes the shard for done
    from harness.errors import BackendError
    from harness.labelling.base import failed

    c3 = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 4}, output_dir=str(tmp_path / "run3"))
    generate_run(c3, backend=EchoBackend(), progress=False)
    real_make = L.make_labeller
    server_down_for_one = _labeller_that(real_make, lambda k, s, res: failed(
        s, "llm: backend error: HTTP 503 in 3 attempt(s)") if s.story_id == "labor-laden-02#1" else res)
    monkeypatch.setattr(L, "make_labeller", server_down_for_one)
    store3 = RunStore(c3.output_dir)
    with pytest.raises(BackendError, match=r"labels: the labelling of 1 of 12 stories failed in the LLM backend \(the "
                                           r"first: llm: backend error: HTTP 503 in 3 attempt\(s\)\); the labels that "
                                           r"came are on disk: fix the cause and rerun the same command"):
        L.label_run(c3, store3, progress=False)
    assert len(L.labelled_keys(store3, _hashes(store3))) == 11  # and the failed story waits for the rerun
    monkeypatch.setattr(L, "make_labeller", real_make)
    # the retry is labelled by the labeller as resolved now, which must be the one of the first labelling
    first = store3.read_manifest()["labeller"]
    store3.update_manifest(labeller={**first, "spacy_version": "0.0"})
    with pytest.raises(ConfigError, match=r"11 stories were labelled with other label settings \(spacy_version"):
        L.label_run(c3, store3, progress=False)
    # labelled by other rules (an earlier release): not mixed with this release's labels
    store3.update_manifest(labeller={**first, "rules_version": "1"})
    with pytest.raises(ConfigError, match=rf"other label settings \(rules_version '1' -> '{RULES_VERSION}'\)"):
        L.label_run(c3, store3, progress=False)
    store3.update_manifest(labeller=first)
    assert L.label_run(c3, store3, progress=False) == (1, 12, 0, 0)
    assert L.label_run(c3, store3, progress=False) == (0, 12, 0, 0)
    # a whole run labelled by an earlier release's rules, or parsed with other name lists, is not called current
    # when no story is left to label (it went on over them, and refused the same run once a story was left)
    for changed in ({"rules_version": "1"}, {"name_parsing": "0.1"}):
        store3.update_manifest(labeller={**first, **changed})
        key = next(iter(changed))
        with pytest.raises(ConfigError, match=rf"12 stories were labelled with other label settings \({key} "):
            L.label_run(c3, store3, progress=False)
    store3.update_manifest(labeller=first)
    assert L.label_run(c3, store3, progress=False) == (0, 12, 0, 0)
    got = store3.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    retried = got[(got.prompt_id == "labor-laden-02") & (got.sample_idx == 1)]
    assert len(got) == 20 and not got.duplicated(["prompt_id", "sample_idx", "role"]).any()
    assert list(retried.status) == ["ok", "ok"]

    # killed after 7 stories: the shards committed before then stay, and so do the stories labelled since the
    # last of them (written on the way out, as generate's: an LLM labeller's shard_rows are an hour), whole
    # stories only; the rerun labels the rest
    c2 = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 4}, output_dir=str(tmp_path / "run2"))
    generate_run(c2, backend=EchoBackend(), progress=False)
    real = L.make_labeller

    def kill_at_7(k, story, res):
        if k == 7:
            raise KeyboardInterrupt
        return res

    killed_after_7 = _labeller_that(real, kill_at_7)

    monkeypatch.setattr(L, "make_labeller", killed_after_7)
    store2 = RunStore(c2.output_dir)
    with pytest.raises(KeyboardInterrupt):
        L.label_run(c2, store2, progress=False)
    kept = len(store2.read_keys(L.LABELS))
    assert kept == 7
    rows = store2.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    roles = {p.id: len(p.roles) for p in get_suite(c2.suite).by_id().values()}
    assert all(len(g) == roles[pid] for (pid, _), g in rows.groupby(["prompt_id", "sample_idx"]))  # whole stories
    monkeypatch.setattr(L, "make_labeller", real)
    assert L.label_run(c2, store2, progress=False)[:2] == (12 - kept, 12)
    every = store2.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert len(pd.concat([pd.read_parquet(p) for p in store2.shard_paths(L.LABELS)])) == len(every)  # none twice
    # a generations shard that does not read: named, with the fix
    store2.shard_paths(GENERATIONS)[0].write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"generations/.*\.parquet: unreadable shard .*delete it and rerun"):
        L.label_run(c2, store2, progress=False)


def test_a_label_shard_whose_write_fails_keeps_its_stories_for_the_write_on_the_way_out(tmp_path, monkeypatch):
    """A disk quota hit once in a shard's write: its rows were taken out before the write, so the write on the
    way out had nothing left to keep and up to shard_rows rows (an hour of an LLM labeller) were lost."""
    import harness.audit.labels as L

    c = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 4})
    generate_run(c, backend=EchoBackend(), progress=False)
    store = RunStore(c.output_dir)
    real, calls = RunStore.write_shard, []

    def quota_once(self, stage, rows, tag, schema=None):
        calls.append(len(rows))
        if stage == L.LABELS and len(calls) == 2:
            raise OSError(122, "Disk quota exceeded")
        return real(self, stage, rows, tag, schema)

    monkeypatch.setattr(RunStore, "write_shard", quota_once)
    with pytest.raises(OSError, match="Disk quota"):
        L.label_run(c, store, progress=False)
    rows = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert calls[1] == calls[2] and len(rows) == calls[0] + calls[2]
    monkeypatch.setattr(RunStore, "write_shard", real)
    assert L.label_run(c, store, progress=False)[1] == 12


def test_a_story_made_again_with_another_text_is_labelled_again_and_read_with_its_new_labels(tmp_path):
    """A generations shard that does not read is deleted and made again, as its error says; an engine that does
    not reproduce a story from its seed writes other texts. Their labels of the old texts are no labels of the
    new ones: the label stage labels those stories again and the identities stage reads the new labels."""
    import numpy as np

    import harness.audit.labels as L
    from harness.audit.characters import build_characters
    from harness.identity import RACES

    class OtherDraw(EchoBackend):
        def generate(self, requests, params, *, progress=False):
            for r in requests:
                self.seen.append(r.request_id)
                yield GenResult(r.request_id, f"Maria Lopez taught Wei. She smiled. {r.seed}", "stop", 10, 3)

    class Names:
        def lookup(self, first):
            return pd.DataFrame({r: np.nan for r in RACES}, index=first.index)

    c = cfg(tmp_path, label={"labeller": "rules"})
    generate_run(c, backend=EchoBackend(), progress=False)
    store = RunStore(c.output_dir)
    assert L.label_run(c, store, progress=False)[:2] == (12, 12)
    store.shard_paths(GENERATIONS)[-1].unlink()
    again = OtherDraw()
    generate_run(c, backend=again, progress=False)
    assert len(again.seen) == 3
    from harness.errors import DataError

    with pytest.raises(DataError, match=r"labels: \d+ label rows \(story .*#\d and others\) were made from an earlier "
                                        r"text of their story; rerun the label stage"):  # not read as no characters
        build_characters(store.read_stage(GENERATIONS), store.read_stage(L.LABELS, key=("prompt_id", "sample_idx",
                         "role", L.TEXT_SHA1)), get_suite(c.suite, c.wording), model="m", names=Names())
    assert L.label_run(c, store, progress=False)[:2] == (3, 12)
    assert L.label_run(c, store, progress=False)[:2] == (0, 12)
    labels = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role", L.TEXT_SHA1))
    chars = build_characters(store.read_stage(GENERATIONS), labels, get_suite(c.suite, c.wording), model="m",
                             names=Names())
    assert not chars.duplicated(["prompt_id", "sample_idx", "role"]).any() and len(chars) == 20
    made_again = chars[chars.story_id.isin(again.seen) & chars.role.eq("subject")]
    assert len(made_again) == 3 and made_again.name.eq("Maria Lopez").all()


def test_the_label_settings_that_change_labels_are_checked_and_no_others(tmp_path):
    """Of an LLM labeller's model block only what changes its replies counts: a run resumed after a server
    outage with another URL, key, timeout or concurrency goes on, and no key is ever recorded or printed;
    nor does a setting the labeller does not read. The labeller as resolved counts too: the encoder's
    precision, chosen per device where the config leaves it unset, cannot change between two labellings of
    one run; its device and weight path can."""
    import harness.audit.labels as L

    llm = {"backend": "openai", "path": "qwen", "base_url": "http://a:8000/v1", "api_key": "sk-OLD"}
    first = cfg(tmp_path, label={"labeller": "llm", "llm": llm})
    store = RunStore(first.output_dir)
    store.update_manifest(label_settings=L.label_settings(first))
    assert "sk-OLD" not in json.dumps(store.read_manifest())
    resumed = {**llm, "base_url": "http://b:9000/v1", "api_key": "sk-NEW", "concurrency": 2, "timeout_s": 600}
    L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": resumed}), 5)
    with pytest.raises(ConfigError, match=r"5 stories were labelled with other label settings \(llm .*'qwen'.* -> "
                                          r".*'llama'.*\); restore them") as e:
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": {**resumed, "path": "llama"}}), 5)
    assert "sk-" not in str(e.value)
    # a manifest written before the llm fields were picked (the whole block) is read the same way
    store.update_manifest(label_settings={**L.label_settings(first), "llm": first.label.llm.model_dump(mode="json")})
    L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": resumed}), 5)
    # a setting the run's labeller does not read changes none of its labels: the encoder's checks for the LLM
    # labeller, an llm block left in the config of a rules or encoder run
    L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": resumed, "name_check": False}), 5)
    # the LLM labeller's sampling and attempts change its replies: checked without stories to label too (the
    # identities stage took labels of other sampling as the config's), and not where an earlier release's manifest
    # did not record them
    store.update_manifest(label_settings=L.label_settings(first))
    with pytest.raises(ConfigError, match=r"other label settings \(llm_sampling \{'temperature': 0\.0, .*'max_tokens': "
                                          r"256, .* -> \{'temperature': 0\.7"):
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": resumed,
                                                           "llm_sampling": {"temperature": 0.7}}), 5)
    # compared as the labeller uses them: the fields given over its own greedy 256 tokens. The block was recorded with
    # the stories' defaults filled in: {top_p: 0.9} (greedy) and {top_p: 0.9, temperature: 1, max_new_tokens: 200}
    # were recorded alike and passed; the labeller's own temperature 0, given, was refused
    def sampled(**given):
        return cfg(tmp_path, label={"labeller": "llm", "llm": resumed, "llm_sampling": given})

    L.check_label_settings(store, sampled(temperature=0.0, max_new_tokens=256), 5)
    store.update_manifest(label_settings=L.label_settings(sampled(top_p=0.9)))
    with pytest.raises(ConfigError, match=r"llm_sampling \{'temperature': 0\.0, 'top_p': 0\.9, 'top_k': -1, 'max_tokens': "
                                          r"256, 'stop': \[\]\} -> \{'temperature': 1\.0, 'top_p': 0\.9, 'top_k': -1, "
                                          r"'max_tokens': 200, 'stop': \[\]\}"):
        L.check_label_settings(store, sampled(top_p=0.9, temperature=1.0, max_new_tokens=200), 5)
    # an earlier release's manifest: no block (None) is the labeller's own sampling; a block with the stories' defaults
    # filled in (max_new_tokens) does not say what the labeller used, and is left to check_labeller's info()
    store.update_manifest(label_settings={**L.label_settings(first), "llm_sampling": None})
    L.check_label_settings(store, sampled(temperature=0.0), 5)
    with pytest.raises(ConfigError, match=r"llm_sampling \{'temperature': 0\.0, .* -> \{'temperature': 0\.7"):
        L.check_label_settings(store, sampled(temperature=0.7), 5)
    store.update_manifest(label_settings={**L.label_settings(first), "llm_sampling": sampled(top_p=0.9).label.llm_sampling
                                          .model_dump(mode="json")})
    L.check_label_settings(store, sampled(top_p=0.9, temperature=1.0, max_new_tokens=200), 5)
    with pytest.raises(ConfigError, match=r"other label settings \(llm_attempts 3 -> 5\)"):
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": resumed, "llm_attempts": 5}), 5)
    earlier = {k: v for k, v in L.label_settings(first).items() if k not in ("llm_sampling", "llm_attempts")}
    store.update_manifest(label_settings=earlier)
    L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": resumed, "llm_attempts": 5}), 5)
    rules = cfg(tmp_path, label={"labeller": "rules"})
    store.update_manifest(label_settings=L.label_settings(rules))
    L.check_label_settings(store, cfg(tmp_path, label={"labeller": "rules", "llm": llm, "action_check": False}), 5)
    with pytest.raises(ConfigError, match=r"\(labeller 'rules' -> 'llm'; llm None -> .*'qwen'"):
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "llm", "llm": llm}), 5)

    class Labeller:
        def __init__(self, precision):
            self.precision = precision

        def info(self):
            return {"labeller": "encoder", "path": "/cpu/cache", "device": "cpu", "precision": self.precision,
                    "head_sha256": "ab"}

    store.update_manifest(labeller={"labeller": "encoder", "path": "/gpu/cache", "device": "cuda",
                                    "precision": "float16", "head_sha256": "ab"})
    L.check_labeller(store, Labeller("float16"), 5)  # another machine and cache: the same labels
    L.check_labeller(store, Labeller("int8"), 0)     # nothing labelled yet
    with pytest.raises(ConfigError, match=r"5 stories were labelled with other label settings \(precision 'float16' "
                                          r"-> 'int8'\); set label.precision: float16 to resume, or delete"):
        L.check_labeller(store, Labeller("int8"), 5)
    # doing as it says was refused in turn (the run recorded precision unset); so was the same model folder spelt
    # with a trailing slash. A precision pinned otherwise, or another folder, still is
    encoder = cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "m")})
    store.update_manifest(label_settings=L.label_settings(encoder))
    pinned = cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "m") + "/", "precision": "float16"})
    L.check_label_settings(store, pinned, 5)
    L.check_labeller(store, Labeller("float16"), 5)
    with pytest.raises(ConfigError, match=r"\(precision None -> 'int8'\)"):
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "m"),
                                                           "precision": "int8"}), 5)
    with pytest.raises(ConfigError, match=r"\(model_dir .* -> .*other'\)"):
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "other")}),
                               5)
    # another folder holding the weights that labelled the run (a copy on a node's local disk) goes on: the labeller's
    # own check ignores the path, and this one refused it; other weights there are still refused
    import hashlib
    import shutil

    from harness.labelling.encoder import _weights_sha256

    (tmp_path / "m" / "encoder").mkdir(parents=True)
    (tmp_path / "m" / "head.pt").write_bytes(b"head")
    (tmp_path / "m" / "encoder" / "model.safetensors").write_bytes(b"weights")
    store.update_manifest(labeller={"labeller": "encoder", "path": str(tmp_path / "m"), "precision": "int8",
                                    "head_sha256": hashlib.sha256(b"head").hexdigest(),
                                    "encoder_sha256": _weights_sha256(tmp_path / "m" / "encoder")})
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    L.check_label_settings(store, cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "copy")}), 5)
    (tmp_path / "copy" / "encoder" / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(ConfigError, match=r"\(model_dir .* -> .*copy'\)"):
        L.check_label_settings(store, cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "copy")}),
                               5)


def test_a_whole_run_is_not_current_once_its_encoders_folder_holds_other_weights(tmp_path, monkeypatch):
    """A run labelled by the encoder in the user cache (no ``label.model_dir``), that cache trained again since (the
    README's recipe after `make demo`'s first-use model), went on "skipped (current)" over the first model's labels
    where no story was left to label, and was refused as soon as one was (``check_labeller``). Now it is refused
    both ways; the same weights, or a folder that holds no model now, still go on."""
    import hashlib

    import harness.audit.labels as L
    from harness.labelling.encoder import _weights_sha256

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "labeller" / "encoder-minilm"
    rules = cfg(tmp_path, label={"labeller": "rules"})
    generate_run(rules, backend=EchoBackend(), progress=False)
    store = RunStore(rules.output_dir)
    assert L.label_run(rules, store, progress=False)[:2] == (12, 12)
    # the labels on disk recorded as the cache encoder's (a stand-in: no encoder loads while none is left to label)
    c = cfg(tmp_path, label={"labeller": "encoder"})
    store.update_manifest(label_settings=L.label_settings(c), labeller={
        "labeller": "encoder", **L.release_versions("encoder"), "head_sha256": hashlib.sha256(b"head").hexdigest(),
        "encoder_sha256": _weights_sha256(_encoder_folder(folder, b"weights"))})
    assert L.label_run(c, store, progress=False) == (0, 12, 0, 0)  # the same weights
    _encoder_folder(folder, b"weights trained again")
    with pytest.raises(ConfigError, match=rf"labels: these 12 stories were labelled with other label settings \(the "
                                          rf"encoder in {folder} is not the one that labelled them: encoder_sha256 "
                                          r"'[0-9a-f]{12}' -> '[0-9a-f]{12}'\); restore its weights, or delete that"):
        L.label_run(c, store, progress=False)
    (folder / "head.pt").unlink()  # no model there now: nothing says the next one differs
    assert L.label_run(c, store, progress=False) == (0, 12, 0, 0)
    # a model_dir named by the config is read, not the cache
    named = cfg(tmp_path, label={"labeller": "encoder", "model_dir": str(tmp_path / "m")})
    store.update_manifest(label_settings=L.label_settings(named))
    _encoder_folder(tmp_path / "m", b"other weights")
    with pytest.raises(ConfigError, match=rf"the encoder in {tmp_path / 'm'} is not the one"):
        L.label_run(named, store, progress=False)


def _encoder_folder(folder: Path, weights: bytes) -> Path:
    """An encoder folder of a head and one weight file (enough for the weights' hashes); its encoder folder."""
    (folder / "encoder").mkdir(parents=True, exist_ok=True)
    (folder / "head.pt").write_bytes(b"head")
    (folder / "encoder" / "model.safetensors").write_bytes(weights)
    return folder / "encoder"


def test_interrupted_run_resumes_only_missing_keys(tmp_path):
    c = cfg(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        generate_run(c, backend=EchoBackend(fail_after=7), progress=False)
    store = RunStore(c.output_dir)
    before = store.read_stage(GENERATIONS)
    assert len(before) == 7  # two whole shards, and the story of the third that came before the kill
    b2 = EchoBackend()
    s = generate_run(c, backend=b2, progress=False)
    assert len(b2.seen) == 5 and s.already_done == 7
    after = store.read_stage(GENERATIONS)
    assert len(after) == 12
    pd.testing.assert_frame_equal(
        after.merge(before[["prompt_id", "sample_idx"]]).sort_values(["prompt_id", "sample_idx"]).reset_index(drop=True),
        before.sort_values(["prompt_id", "sample_idx"]).reset_index(drop=True),
    )
    assert generate_run(c, backend=EchoBackend(), progress=False).generated == 0


def test_generations_that_all_failed_stop_the_label_stage_with_their_reason(tmp_path):
    """Every generation failed (a server down from the start): the label stage says so, with the first reason
    on one line, and that a rerun generates them again, not that the labels lack columns (the stage records
    no labels at all). One good story is labelled and the failed ones are counted, as before."""
    import harness.audit.labels as L
    from harness.errors import BackendError

    c = cfg(tmp_path, label={"labeller": "rules"})
    store = RunStore(c.output_dir)
    every = {it.request_id for it in plan(c, get_suite(c.suite), (0, 1))}

    class Outage(EchoBackend):
        def generate(self, requests, params, *, progress=False):
            for r in requests:
                yield GenResult(r.request_id, "", "error", 0, 0, error="ConnectError: [Errno 111]\nConnection refused")

    s = generate_run(c, backend=Outage(), progress=False)
    assert (s.generated, s.errors, s.first_error) == (12, 12, "ConnectError: [Errno 111]\nConnection refused")
    with pytest.raises(BackendError) as e:
        L.label_run(c, store, progress=False)
    assert str(e.value) == (f"{store.stage_dir(GENERATIONS)}: every one of its 12 generations failed (the first: "
                            "ConnectError: [Errno 111] Connection refused), so there is nothing to label; fix the "
                            "cause and rerun, which generates them again")
    assert not store.shard_paths(L.LABELS)
    generate_run(c, backend=EchoBackend(fail_ids=every - {"love-neutral-01#0"}), progress=False)
    assert L.label_run(c, store, progress=False) == (1, 1, 0, 11)
    # a job of an array: its own stories decide, and the message says they are its shard's, not the folder's
    # (a shard whose generations all failed passed where another shard had labelled a story, and said "every
    # one of its K generations" of a folder with good ones)
    key = ("love-neutral-01", 0)  # the one good story
    other = next(s for s in range(2) if shard_of(*key, 2) != s)
    mine = sum(shard_of(r.split("#")[0], int(r.split("#")[1]), 2) == other for r in every)
    with pytest.raises(BackendError) as e:
        L.label_run(c, store, shard=(other, 2), progress=False)
    assert str(e.value).startswith(f"{store.stage_dir(GENERATIONS)}: every one of the {mine} generations of shard "
                                   f"{other}/2 failed (the first: ")
    assert L.label_run(c, store, shard=(1 - other, 2), progress=False)[:2] == (0, 1)  # its own story is labelled


def test_generate_command_exits_4_when_requests_failed_and_names_the_first_reason(tmp_path, monkeypatch):
    """`harness generate` over a server that fails some requests: the stories that finished are written, the
    command exits 4 (a job array's scheduler sees the shard as not done) with one line giving the count and
    the first reason, and the rerun that retries them exits 0."""
    import harness.pipeline as P
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.errors import BackendError

    config = tmp_path / "c.yaml"
    config.write_text(f"model: {{backend: transformers, path: smollm2-135m}}\nprompts: [learning-neutral-01]\n"
                      f"samples_per_prompt: 3\noutput_dir: {tmp_path / 'run'}\n")
    backends = iter([EchoBackend(fail_ids={"learning-neutral-01#1"}), EchoBackend()])
    real = P.generate_run
    monkeypatch.setattr(P, "generate_run", lambda cfg, **kw: real(cfg, backend=next(backends), **kw))
    r = CliRunner().invoke(app, ["generate", str(config), "--no-progress"])
    # the error reaches harness.cli.main, which prints it as one line and exits with its code, 4
    assert isinstance(r.exception, BackendError) and BackendError.exit_code == 4 and str(r.exception) == (
        "1 of 3 requests failed (the first: HTTP 503: server unavailable); the stories that finished are on disk, "
        "kept as they are: fix the cause and rerun the same command, which retries only the failed ones")
    assert len(RunStore(tmp_path / "run").read_keys(GENERATIONS)) == 2
    r = CliRunner().invoke(app, ["generate", str(config), "--no-progress"])
    assert r.exit_code == 0 and "generated 1 stories (2 already on disk, 0 requests failed)" in r.output


def test_run_command_with_an_empty_stages_list_is_refused_not_run_whole(tmp_path):
    """`harness run CONFIG --stages "$STAGES"` with the variable unset ran every stage; now it is a one-line
    error and nothing is made."""
    from typer.testing import CliRunner

    from harness.cli import app

    config = tmp_path / "c.yaml"
    config.write_text(f"model: {{backend: transformers, path: smollm2-135m}}\noutput_dir: {tmp_path / 'run'}\n")
    for empty in ("", " , "):
        r = CliRunner().invoke(app, ["run", str(config), "--stages", empty, "--no-progress"])
        assert isinstance(r.exception, ConfigError) and str(r.exception).startswith("--stages: empty; name the stages")
    assert not (tmp_path / "run").exists()


def test_error_rows_are_retried_and_the_retry_wins(tmp_path):
    c = cfg(tmp_path)
    failing = {"labor-laden-02#1", "love-neutral-01#3"}
    s = generate_run(c, backend=EchoBackend(fail_ids=failing), progress=False)
    assert (s.generated, s.errors, s.total_rows) == (12, 2, 10)
    assert s.first_error == "HTTP 503: server unavailable"  # what `harness generate` prints as it exits 4
    store = RunStore(c.output_dir)
    assert json.loads((Path(c.output_dir) / "run.json").read_text())["status"] == "partial"
    assert len(store.read_keys(GENERATIONS)) == 10
    first = store.read_stage(GENERATIONS)
    assert len(first) == 12 and first.finish_reason.eq("error").sum() == 2  # nothing else to read yet
    retry = EchoBackend()
    s2 = generate_run(c, backend=retry, progress=False)
    assert sorted(retry.seen) == sorted(failing) and (s2.already_done, s2.generated, s2.total_rows) == (10, 2, 12)
    after = store.read_stage(GENERATIONS)
    assert len(after) == 12 and not after.finish_reason.eq("error").any()
    row = after[(after.prompt_id == "labor-laden-02") & (after.sample_idx == 1)].iloc[0]
    assert row.text_clean == f"story {sample_seed(11, 'labor-laden-02', 1)}"
    # columns= still prefers the good row even when finish_reason is not asked for
    texts = store.read_stage(GENERATIONS, columns=["prompt_id", "sample_idx", "text_clean"])
    assert list(texts.columns) == ["prompt_id", "sample_idx", "text_clean"] and texts.text_clean.ne("").all()
    assert json.loads((Path(c.output_dir) / "run.json").read_text())["status"] == "complete"
    assert generate_run(c, backend=EchoBackend(), progress=False).generated == 0


def test_a_shard_not_yet_renamed_is_not_read_and_another_jobs_start_does_not_delete_it(tmp_path, monkeypatch):
    """A shard is committed by its rename: the hidden file before it (a writer killed between writing and
    renaming, or another job of the array still writing) is no story of the run for the label stage, which
    would otherwise label stories the next generate deletes and makes again. A job starting while another
    shard's job commits cleans only its own leftovers."""
    import harness.audit.labels as L
    import harness.store as S

    c = cfg(tmp_path, label={"labeller": "rules"})
    real_replace, renames = S.os.replace, []

    def killed_before_the_second_rename(src, dst):
        if ".tmp-gen-" in str(src):
            renames.append(src)
            if len(renames) == 2:
                raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(S.os, "replace", killed_before_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        generate_run(c, backend=EchoBackend(), progress=False)
    monkeypatch.setattr(S.os, "replace", real_replace)
    store = RunStore(c.output_dir)
    assert len(list(store.stage_dir(GENERATIONS).glob(".tmp-gen-*"))) == 1
    assert len(store.read_keys(GENERATIONS)) == 3 and len(store.read_stage(GENERATIONS)) == 3
    assert L.label_run(c, store, progress=False)[:2] == (3, 3)
    b = EchoBackend()
    generate_run(c, backend=b, progress=False)
    assert not set(b.seen) & {f"{p}#{i}" for p, i in store.read_keys(L.LABELS)}  # nothing labelled is made again

    c2 = cfg(tmp_path, output_dir=str(tmp_path / "run2"))
    real_write, started = S.pq.write_table, []

    def job_1_starts_while_job_0_commits(table, where, *a, **kw):
        real_write(table, where, *a, **kw)
        if "gen-0of2" in str(where) and not started:
            started.append(True)
            generate_run(c2, shard=(1, 2), backend=EchoBackend(), progress=False)

    monkeypatch.setattr(S.pq, "write_table", job_1_starts_while_job_0_commits)
    generate_run(c2, shard=(0, 2), backend=EchoBackend(), progress=False)
    assert started and len(RunStore(c2.output_dir).read_keys(GENERATIONS)) == 12


def test_a_killed_jobs_temporary_file_of_another_shard_count_is_deleted_by_the_next_job_alone(tmp_path):
    """Each job deleted only its own tag's temporary files, so those of a job killed mid-write and rerun with
    another shard count (4 jobs, then 2 or one) stayed for ever. A job that starts while no other writes the stage
    deletes every one; beside a running job (here the store's lock held as that job holds it), none: a job of the
    same tag (a requeued array task beside the one still running) deleted the shard the other was committing."""
    import harness.audit.labels as L

    c = cfg(tmp_path, label={"labeller": "rules"})
    store = RunStore(c.output_dir)
    generate_run(c, shard=(0, 4), backend=EchoBackend(), progress=False)
    killed = store.stage_dir(GENERATIONS) / ".tmp-gen-1of4-x.parquet"
    killed.write_bytes(b"half a parquet")
    generate_run(c, backend=EchoBackend(), progress=False)  # rerun as one job
    assert not killed.exists() and len(store.read_keys(GENERATIONS)) == 12
    killed = store.stage_dir(L.LABELS) / ".tmp-labels-2of3-x.parquet"
    killed.parent.mkdir()
    killed.write_bytes(b"half a parquet")
    assert L.label_run(c, store, progress=False)[:2] == (12, 12)
    assert not killed.exists()

    other, own = (store.stage_dir(GENERATIONS) / f".tmp-gen-{t}-x.parquet" for t in ("3of4", "1of2"))
    with store.writing(GENERATIONS):  # a job of the same tag, still running, and its shard half written
        for p in (other, own):
            p.write_bytes(b"half a parquet")
        generate_run(c, shard=(1, 2), backend=EchoBackend(), progress=False)
        assert other.exists() and own.exists()
    generate_run(c, shard=(1, 2), backend=EchoBackend(), progress=False)  # alone: every leftover goes
    assert not other.exists() and not own.exists()


def test_a_shard_reaches_the_disk_before_its_rename_and_its_rename_after(tmp_path, syncs_and_renames):
    """A shard is committed by its rename: renamed before its data reached the disk, a power loss can leave
    it empty or torn under its committed name, which every rerun reads as done (or cannot read). The
    whole-stage tables are synced the same way before the _stage.json that calls them current, and run.json
    before its rename; each rename is synced by its folder."""
    from harness.audit.stages import write_table

    events = syncs_and_renames
    store = RunStore(tmp_path / "run")
    shard = store.write_shard(GENERATIONS, [{"prompt_id": "p", "sample_idx": 0}], "gen-0of1")
    file, folder = shard.stat().st_ino, shard.parent.stat().st_ino
    assert events == [("fsync", file), ("replace", file), ("fsync", folder)]
    events.clear()
    table = write_table(store, "identities", "characters", pd.DataFrame({"a": [1]}))
    file, csv, folder = table.stat().st_ino, table.with_suffix(".csv").stat().st_ino, table.parent.stat().st_ino
    assert events == [("fsync", file), ("replace", file), ("fsync", folder), ("fsync", csv), ("replace", csv),
                      ("fsync", folder)]
    events.clear()
    store.update_manifest(status="running")
    file = store.manifest_path.stat().st_ino
    assert events == [("fsync", file), ("replace", file), ("fsync", store.root.stat().st_ino)]


def test_files_written_by_rename_get_the_mode_a_plain_write_gives(tmp_path):
    """run.json, stage records and meta.json came through mkstemp, whose file is 0600: the other users of a shared
    run folder could read the shards but not the manifest. New, they get the umask's mode; rewritten, their own
    (a report's page too, written by the same ``atomic_write``); a write that raises leaves no temporary file."""
    from harness.store import atomic_write, atomic_write_text

    old = os.umask(0o022)
    try:
        store = RunStore(tmp_path / "run")
        store.update_manifest(status="running")
        assert store.manifest_path.stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        atomic_write_text(tmp_path / "new.json", "{}")
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o600
        store.manifest_path.chmod(0o640)
        store.update_manifest(status="complete")
        assert store.manifest_path.stat().st_mode & 0o777 == 0o640
        page = tmp_path / "index.html"
        atomic_write(page, lambda tmp: tmp.write_text("old"))
        page.chmod(0o604)
        atomic_write(page, lambda tmp: tmp.write_text("new"))
        assert page.stat().st_mode & 0o777 == 0o604 and page.read_text() == "new"
    finally:
        os.umask(old)

    with pytest.raises(UnicodeEncodeError):  # a lone surrogate fails once the temporary file is open
        atomic_write_text(tmp_path / "new.json", '{"name": "\ud800"}')
    assert (tmp_path / "new.json").read_text() == "{}"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_job_alone_at_a_stage_keeps_a_record_another_job_is_renaming(tmp_path):
    """A job that finds no other writer of a stage deletes every temporary shard there, those of killed jobs too.
    A stage's record (``_stage.json``) and an embedder's ``spec.json`` are written through a temporary file of the
    same ``.tmp-`` kind outside that lock (the embed stage records itself after its writers are done): deleted
    while another job renames it, that job's rename would fail. Temporary shards and tables go; records stay."""
    store = RunStore(tmp_path / "run")
    d = store.stage_dir("embeddings/minilm")
    d.mkdir(parents=True)
    shards = [d / f".tmp-{t}" for t in ("emb-0of1-emb-x.npy", "emb-0of1-emb-x.keys.parquet", "4242-ab-table.csv")]
    record = d / ".tmp-4242-ab-_stage.json"
    for p in [*shards, record]:
        p.write_text("half")
    with store.writing("embeddings/minilm"):
        pass
    assert record.exists() and not any(p.exists() for p in shards)


def test_two_writers_of_one_file_at_once_each_write_their_own_temporary_file(tmp_path):
    """Two ``harness report --out`` into one folder wrote the same ``.tmp-<name>``: the second renamed the first's
    half-written file away, and the first then failed. Each writer now has its own; the last to commit wins, and a
    write that raises leaves no temporary file behind."""
    from harness.store import atomic_write

    path = tmp_path / "index.html"

    def first(tmp):
        tmp.write_text("first, part one ")
        atomic_write(path, lambda other: other.write_text("second"))  # another writer commits meanwhile
        with tmp.open("a") as f:
            f.write("and part two")

    atomic_write(path, first)
    assert path.read_text() == "first, part one and part two"

    def broken(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, broken)
    assert path.read_text() == "first, part one and part two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html"]


def test_shards_partition_the_work_and_are_stable(tmp_path):
    c = cfg(tmp_path, samples_per_prompt=10)
    suite = get_suite("laissez-faire")
    parts = [{(w.prompt.id, w.sample_idx) for w in plan(c, suite, (i, 3))} for i in range(3)]
    assert sum(map(len, parts)) == 30 and len(set().union(*parts)) == 30
    for i in range(3):
        generate_run(c, shard=(i, 3), backend=EchoBackend(), progress=False)
    df = RunStore(c.output_dir).read_stage(GENERATIONS)
    assert len(df) == 30
    single = cfg(tmp_path / "one", samples_per_prompt=10)
    generate_run(single, backend=EchoBackend(), progress=False)
    pd.testing.assert_series_equal(df.text, RunStore(single.output_dir).read_stage(GENERATIONS).text)


def test_jobs_updating_the_manifest_at_once_lose_no_update(tmp_path):
    """The jobs of an array update run.json at the same time; each reading it and writing it back unlocked
    wrote over the updates the others made in between (about 70 of these 100 were lost)."""
    store = RunStore(tmp_path / "run")
    store.update_manifest(status="running")

    def job(t):
        for j in range(25):
            store.update_manifest(**{f"job{t}-{j}": j})

    jobs = [threading.Thread(target=job, args=(t,)) for t in range(4)]
    for th in jobs:
        th.start()
    for th in jobs:
        th.join()
    m = store.read_manifest()
    assert m["status"] == "running" and sorted(k for k in m if k.startswith("job")) == sorted(
        f"job{t}-{j}" for t in range(4) for j in range(25))


def test_the_manifest_edited_again_inside_its_own_edit_is_an_error_not_a_hang(tmp_path):
    """flock taken twice by one thread waits for itself: an update_manifest inside edit_manifest hung for ever.
    It raises instead, and the outer edit writes nothing; another thread still waits its turn (the test above)."""
    store = RunStore(tmp_path / "run")
    store.update_manifest(status="running")
    got = []

    def nested():
        try:
            with store.edit_manifest() as manifest:
                manifest["status"] = "complete"
                store.update_manifest(rows=1)
        except RuntimeError as e:
            got.append(str(e))

    t = threading.Thread(target=nested, daemon=True)  # on a hang, left blocked and reported
    t.start()
    t.join(30)
    assert not t.is_alive(), "edit_manifest inside edit_manifest waits for its own lock"
    assert got == [f"{store.manifest_path}: edit_manifest entered again inside itself, which would wait for its own "
                   f"lock forever; change the manifest the outer edit_manifest gives instead"]
    assert store.read_manifest() == {"status": "running"}
    store.update_manifest(rows=1)  # the lock is free again
    assert store.read_manifest() == {"status": "running", "rows": 1}


def test_the_last_shard_job_to_end_records_the_run_complete(tmp_path, monkeypatch):
    """Job 0 of two counts the rows on disk (its own only), job 1 then writes its shards and records the
    run complete, and job 0 records what it counted: the status must still say complete. The count is made
    under the manifest's lock, so job 1 waits for job 0 to record its status and counts after it."""
    import fcntl

    c = cfg(tmp_path)
    main, moved, failures = threading.current_thread(), threading.Event(), []
    real_flock, real_read_keys = fcntl.flock, RunStore.read_keys

    def flock(f, op):  # job 1 says when it has to wait for the lock
        if threading.current_thread() is not main:
            try:
                return real_flock(f, op | fcntl.LOCK_NB)
            except BlockingIOError:
                moved.set()
        return real_flock(f, op)

    def job_1():
        try:
            generate_run(c, shard=(1, 2), backend=EchoBackend(), progress=False)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)
        finally:
            moved.set()

    other = threading.Thread(target=job_1)
    calls = []

    def read_keys(self, stage, *a, **kw):
        keys = real_read_keys(self, stage, *a, **kw)
        if threading.current_thread() is main:
            calls.append(stage)
            if len(calls) == 2:  # job 0's count at its end: job 1 runs now, or until it waits for the lock
                other.start()
                assert moved.wait(120)
        return keys

    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(RunStore, "read_keys", read_keys)
    generate_run(c, shard=(0, 2), backend=EchoBackend(), progress=False)
    other.join(120)
    assert not failures and not other.is_alive()
    m = RunStore(c.output_dir).read_manifest()
    assert (m["status"], m["rows"]) == ("complete", 12)


@pytest.mark.parametrize(("running", "this", "refused"), [
    ((0, 1), (0, 1), "every story of this stage now (this job would"),  # `harness run` started twice
    ((1, 4), (1, 4), "shard 1/4 of this stage now (this job's shard 1/4 would"),  # a requeued task beside the first
    ((0, 1), (2, 4), "every story of this stage now (this job's shard 2/4 would"),  # an array beside a whole run
    ((2, 4), (0, 1), "shard 2/4 of this stage now (this job would"),
    ((0, 2), (1, 4), "shard 0/2 of this stage now (this job's shard 1/4 would"),  # two shard counts
    ((0, 4), (1, 4), None),  # the array's other jobs: theirs alone
])
def test_a_job_whose_stories_a_running_job_is_generating_stops_before_its_model_loads(tmp_path, monkeypatch, running,
                                                                                     this, refused):
    """Two jobs without --shard (a command started twice), a requeued array task beside the one still running, or
    jobs of two shard counts each generated their whole share again, GPU hours for rows the reads then dropped.
    A job now holds its shard while it writes a stage, and a job whose share overlaps a running one's stops with one
    line, before its backend loads and with nothing written; once the other ends, the same command runs."""
    c = cfg(tmp_path)
    store = RunStore(c.output_dir)
    loads = []

    import harness.pipeline as P

    monkeypatch.setattr(P, "load_backend", lambda *a, **kw: loads.append(1) or EchoBackend())
    planned = len(plan(c, get_suite(c.suite), this))
    with store.writing(GENERATIONS, shard=running):  # the other job, writing that share of the stage
        if refused:
            with pytest.raises(DataError) as err:
                generate_run(c, shard=this, progress=False)
            assert str(err.value) == (f"{store.stage_dir(GENERATIONS)}: another job is writing {refused} do its "
                                      f"stories again); let it finish, or give each job of an array its own "
                                      f"--shard i/N of one N")
            assert not loads and not store.shard_paths(GENERATIONS)
            assert "status" not in store.read_manifest()  # nothing recorded for the refused job
        else:
            assert generate_run(c, shard=this, progress=False).generated == planned
    generate_run(c, shard=this, progress=False)  # the other job ended: its lock is free
    assert len(store.read_keys(GENERATIONS)) == planned


def test_a_label_job_beside_one_labelling_the_same_stories_stops_before_its_labeller_loads(tmp_path, monkeypatch):
    """The label stage's share is held the same way: a second label job of the same stories stops before it loads
    (or trains) its labeller, checked again under the run's lock where a job that passed the first check meanwhile
    is found; a job of another shard labels its own."""
    import harness.audit.labels as L
    from harness.errors import DataError

    c = cfg(tmp_path, label={"labeller": "rules"})
    generate_run(c, backend=EchoBackend(), progress=False)
    store = RunStore(c.output_dir)
    made, real_make = [], L.make_labeller
    monkeypatch.setattr(L, "make_labeller",
                        lambda cfg, echo=print, **kw: made.append(1) or real_make(cfg, echo=echo, **kw))
    with store.writing(L.LABELS, shard=(0, 1)):
        with pytest.raises(DataError, match=r"^\S+/labels: another job is writing every story of this stage now "
                                            r"\(this job would do its stories again\)"):
            L.label_run(c, store, progress=False)
        assert not made
    real_check = RunStore.check_share

    def passes_then_another_starts(self, stage, shard):  # the other job takes its share after this one's first check
        real_check(self, stage, shard)
        other.__enter__()

    other = store.writing(L.LABELS, shard=(1, 2))
    monkeypatch.setattr(RunStore, "check_share", passes_then_another_starts)
    try:
        with pytest.raises(DataError, match=r"another job is writing shard 1/2 of this stage now \(this job would"):
            L.label_run(c, store, progress=False)
    finally:
        other.__exit__(None, None, None)
    assert made == [1] and not store.shard_paths(L.LABELS)
    monkeypatch.setattr(RunStore, "check_share", real_check)
    with store.writing(L.LABELS, shard=(1, 2)):
        labelled, total = L.label_run(c, store, shard=(0, 2), progress=False)[:2]
    assert labelled == total == sum(shard_of(p, i, 2) == 0 for p, i in _hashes(store))
    assert L.label_run(c, store, progress=False)[:2] == (12 - labelled, 12)


def test_a_job_of_another_config_started_with_this_one_is_refused_not_mixed_in(tmp_path, monkeypatch):
    """The config was checked before the run's lock was taken: two jobs of two configs started at once into a new
    directory both found none recorded, the first to take the lock recorded its own and both generated, stories
    of two seeds in one run. The check is made under the lock, where the later job finds the other's config."""
    c, other = cfg(tmp_path), cfg(tmp_path, seed=12)
    real_edit, started = RunStore.edit_manifest, []

    def other_job_first(self):  # the other job runs while this one goes for the lock
        if not started:
            started.append(True)
            generate_run(other, backend=EchoBackend(), progress=False)
        return real_edit(self)

    monkeypatch.setattr(RunStore, "edit_manifest", other_job_first)
    with pytest.raises(ConfigError, match=r"different seed \(12 vs 11\)"):
        generate_run(c, backend=EchoBackend(), progress=False)
    store = RunStore(c.output_dir)
    assert started and store.read_manifest()["config"]["seed"] == 12
    rows = pd.concat([pd.read_parquet(p) for p in store.shard_paths(GENERATIONS)])
    assert len(rows) == 12
    assert list(rows.seed) == [sample_seed(12, p, i) for p, i in zip(rows.prompt_id, rows.sample_idx)]


def test_a_label_job_of_other_settings_than_one_running_or_done_since_it_started_is_refused(tmp_path, monkeypatch):
    """The label settings were checked when a job started and recorded once its labeller had started (the
    encoder's load, minutes more to train it): a job of other settings that labelled the run in between was not
    seen, nor one started at the same time (neither had labelled anything when they checked), and both jobs'
    labels were mixed in the run. They are checked again under the run's lock, where the stories labelled since
    and a job labelling the run now (one holding the labels' writer lock) bind as the labels done before did."""
    import harness.audit.labels as L

    rules = cfg(tmp_path, label={"labeller": "rules", "shard_rows": 4})
    encoder = cfg(tmp_path, label={"labeller": "encoder"})
    generate_run(rules, backend=EchoBackend(), progress=False)
    store = RunStore(rules.output_dir)
    real_make, real_edit = L.make_labeller, RunStore.edit_manifest
    b_started, b_labelling, b_go, failures = [], threading.Event(), threading.Event(), []

    def encoder_job(k, story, res):  # its labeller waits at its first story, with nothing committed, when told to
        if threading.current_thread() is not threading.main_thread() and k == 0:
            b_labelling.set()
            assert b_go.wait(60)
        return res

    monkeypatch.setattr(L, "make_labeller", _labeller_that(lambda c, echo=print, **kw: real_make(rules, echo=echo, **kw),
                                                           encoder_job))  # the rules labeller stands in for the encoder

    def b_runs_first(self):  # the encoder job labels the run while the rules job goes for the lock
        if not b_started:
            b_started.append(True)
            L.label_run(encoder, store, progress=False)
        return real_edit(self)

    monkeypatch.setattr(RunStore, "edit_manifest", b_runs_first)
    with pytest.raises(ConfigError, match=r"labels: these 12 stories were labelled with other label settings "
                                          r"\(labeller 'encoder' -> 'rules'\); restore them, or delete"):
        L.label_run(rules, store, progress=False)
    assert b_started and len(store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))) == 20

    # started together: the encoder job labels (and holds the lock) but has committed nothing yet
    generate_run(cfg(tmp_path, output_dir=str(tmp_path / "run2")), backend=EchoBackend(), progress=False)
    store = RunStore(tmp_path / "run2")
    encoder, b_started = encoder.model_copy(update={"output_dir": str(tmp_path / "run2")}), []

    def b_job():
        try:
            L.label_run(encoder, store, progress=False)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    b = threading.Thread(target=b_job, daemon=True)

    def b_labels_meanwhile(self):
        if not b_started:
            b_started.append(True)
            b.start()
            assert b_labelling.wait(60)
        return real_edit(self)

    monkeypatch.setattr(RunStore, "edit_manifest", b_labels_meanwhile)
    try:
        with pytest.raises(ConfigError, match=r"labels: another job is labelling these stories with other label "
                                              r"settings \(labeller 'encoder' -> 'rules'\); restore them, or stop "
                                              r"that job and delete that folder"):
            L.label_run(rules.model_copy(update={"output_dir": str(tmp_path / "run2")}), store, progress=False)
    finally:
        b_go.set()
        b.join(60)
    assert not failures and not b.is_alive()
    labels = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert len(labels) == 20 and store.read_manifest()["label_settings"]["labeller"] == "encoder"


def test_partial_files_are_cleaned_and_a_changed_config_is_refused(tmp_path):
    c = cfg(tmp_path)
    generate_run(c, backend=EchoBackend(), progress=False)
    junk = Path(c.output_dir) / GENERATIONS / ".tmp-gen-0of1-x.parquet"
    junk.write_bytes(b"half a parquet")
    generate_run(cfg(tmp_path, samples_per_prompt=5), backend=EchoBackend(), progress=False)
    assert not junk.exists()
    assert len(RunStore(c.output_dir).read_stage(GENERATIONS)) == 15  # topped up to 5 samples
    with pytest.raises(ConfigError, match="different seed"):
        generate_run(cfg(tmp_path, seed=12), backend=EchoBackend(), progress=False)


def test_a_top_up_records_the_rows_it_plans_and_is_complete_once_all_are_on_disk(tmp_path):
    """A rerun asking for more samples per prompt, or other prompts, plans other rows: the manifest records
    them (expected_rows stayed at the first run's), and the run is complete only when every planned story is
    on disk, however many rows of the earlier plan there are."""
    generate_run(cfg(tmp_path), backend=EchoBackend(), progress=False)
    store = RunStore(tmp_path / "run")
    generate_run(cfg(tmp_path, samples_per_prompt=5), backend=EchoBackend(fail_ids={"labor-laden-02#4"}),
                 progress=False)
    m = store.read_manifest()
    assert (m["expected_rows"], m["rows"], m["status"]) == (15, 14, "partial")
    generate_run(cfg(tmp_path, samples_per_prompt=5), backend=EchoBackend(), progress=False)
    m = store.read_manifest()
    assert (m["expected_rows"], m["rows"], m["status"]) == (15, 15, "complete")

    other = ["learning-neutral-01", "love-laden-07"]  # one prompt done, one new whose every request fails
    generate_run(cfg(tmp_path, prompts=other), backend=EchoBackend(fail_ids={f"love-laden-07#{i}" for i in range(4)}),
                 progress=False)
    m = store.read_manifest()
    assert (m["expected_rows"], m["rows"], m["status"]) == (8, 15, "partial")
    assert m["suite"]["prompts"] == 2 and m["suite"]["prompt_sha256"] == prompt_hash(
        [get_suite("laissez-faire").by_id()[p] for p in other])


def test_a_prompt_id_listed_twice_is_generated_once(tmp_path):
    c = cfg(tmp_path, prompts=["labor-laden-02", "labor-laden-02"], samples_per_prompt=2)
    b = EchoBackend()
    s = generate_run(c, backend=b, progress=False)
    assert b.seen == ["labor-laden-02#0", "labor-laden-02#1"] and s.planned == 2
    store = RunStore(c.output_dir)
    assert len(pd.concat([pd.read_parquet(p) for p in store.shard_paths(GENERATIONS)])) == 2  # no row twice
    m = store.read_manifest()
    assert (m["expected_rows"], m["rows"], m["status"]) == (2, 2, "complete")


def test_unknown_prompt_id(tmp_path):
    with pytest.raises(ConfigError, match="unknown prompt id.*nope"):
        generate_run(cfg(tmp_path, prompts=["nope"]), backend=EchoBackend(), progress=False)


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_with_a_real_model(tmp_path, smollm2_dir):
    """Kill -9 a real generation after its second shard, rerun, and end with exactly
    prompts x samples unique rows, the rows written before the kill unchanged."""
    out = tmp_path / "run"
    conf = tmp_path / "c.yaml"
    conf.write_text(
        "model: {backend: transformers, path: smollm2-135m, batch_size: 2, max_model_len: 256}\n"
        "sampling: {temperature: 1.0, max_new_tokens: 24}\n"
        "prompts: [learning-neutral-06, labor-laden-06, love-neutral-01, love-laden-07]\n"
        f"samples_per_prompt: 4\nseed: 3\nshard_rows: 2\noutput_dir: {out}\n"
    )
    cmd = [sys.executable, "-m", "harness.cli", "generate", str(conf), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    gen = out / GENERATIONS
    # committed shards only: pathlib's glob matches the hidden ".tmp-" file of a shard still being written, and the
    # kill then left one shard (a flaky "assert 4 <= 2")
    while time.time() < deadline and len([p for p in gen.glob("*.parquet") if not p.name.startswith(".")]) < 2:
        assert proc.poll() is None, "generation ended before it could be killed"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = RunStore(out)
    before = store.read_stage(GENERATIONS)
    assert 4 <= len(before) < 16, len(before)
    assert json.loads((out / "run.json").read_text())["status"] == "running"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{len(before)} already on disk" in r.stdout
    after = store.read_stage(GENERATIONS)
    assert len(after) == 16 and not after.duplicated(["prompt_id", "sample_idx"]).any()
    kept = after.merge(before[["prompt_id", "sample_idx", "created_at"]], on=["prompt_id", "sample_idx", "created_at"])
    assert len(kept) == len(before)
    assert (after.finish_reason != "error").all() and after.text_clean.str.len().gt(0).all()
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


class SystemEcho(EchoBackend):
    def generate(self, requests, params, *, progress=False):
        self.systems = [r.system for r in requests]
        yield from super().generate(requests, params, progress=progress)


def test_pipeline_sends_the_suites_system_message(tmp_path):
    """Homogeneity prompts carry the authors' system message; laissez-faire prompts have none."""
    hom = get_suite("homogeneity", "released").prompts[:2]
    b = SystemEcho()
    generate_run(cfg(tmp_path, suite="homogeneity", prompts=[p.id for p in hom], samples_per_prompt=1),
                 backend=b, progress=False)
    assert b.systems == [hom[0].meta["system"]] * 2 and b.systems[0]
    b = SystemEcho()
    generate_run(cfg(tmp_path / "lf", samples_per_prompt=1), backend=b, progress=False)
    assert b.systems == [None] * 3


def test_a_prompt_whose_text_changed_since_its_stories_is_refused_on_resume(tmp_path, monkeypatch):
    """The config names the suite, not its texts: a later version of the suite with a prompt's wording fixed
    resumed the run under the same prompt ids, mixing stories of both texts. It is refused, naming the prompt;
    a prompt the run holds no story of, and an unchanged suite, resume as before."""
    from dataclasses import replace

    import harness.pipeline as P

    c = cfg(tmp_path, samples_per_prompt=2)
    generate_run(c, backend=EchoBackend(), progress=False)
    real = get_suite(c.suite, c.wording)

    def reworded(pid):
        prompts = tuple(replace(p, text=p.text + " Make it short.") if p.id == pid else p for p in real.prompts)
        return lambda *a, **k: replace(real, version=real.version + 1, prompts=prompts)

    monkeypatch.setattr(P, "get_suite", reworded("labor-laden-02"))
    with pytest.raises(ConfigError, match=r"generations: prompt labor-laden-02 was generated from another text than "
                                          r"suite laissez-faire \d+ gives it \(version \d+ of the suite\)"):
        generate_run(cfg(tmp_path, samples_per_prompt=3), backend=EchoBackend(), progress=False)
    monkeypatch.setattr(P, "get_suite", reworded("labor-laden-01"))  # not in this run: nothing to mix
    assert generate_run(cfg(tmp_path, samples_per_prompt=3), backend=EchoBackend(), progress=False).generated == 3


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no folder can be made")
def test_a_run_folder_the_system_will_not_make_is_one_line(tmp_path):
    """`harness run -o /proc/x` (or a read-only disk): a FileNotFoundError traceback from the first mkdir before."""
    c = cfg(tmp_path).model_copy(update={"output_dir": "/proc/harness-test/run"})
    with pytest.raises(ConfigError) as e:
        generate_run(c, backend=EchoBackend(), progress=False)
    assert str(e.value) == ("output_dir /proc/harness-test/run: cannot make this folder (No such file or directory); "
                            "give a folder you can write to")


def test_a_stage_run_before_the_stage_it_reads_is_one_line_and_makes_no_folder(tmp_path):
    """`harness run --stages identities` on a run without labels named a missing column ('labels table lacks
    column(s) name, ...'); statistics without identities was a FileNotFoundError traceback; each left its folder."""
    from harness.audit.stages import run_stages
    from harness.errors import DataError

    c = cfg(tmp_path)
    generate_run(c, backend=EchoBackend(), progress=False)
    run = Path(c.output_dir)
    for stage, folder, before in (("identities", "labels", "label"), ("statistics", "identities", "identities"),
                                  ("report", "statistics", "statistics")):
        with pytest.raises(DataError) as e:
            run_stages(c, [stage], progress=False, echo=lambda line: None)
        assert str(e.value) == (f"{run / folder}: nothing there, and the {stage} stage reads it; run the {before} "
                                f"stage first (`harness run CONFIG --stages {before}`)")
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["generations", "invocations"]


def test_every_stage_refuses_a_run_made_by_another_config(tmp_path):
    """The generate stage compared the config with the run's only when it had stories to write: a second config
    (another sampling) on a finished run, or a run of the later stages only, went on over the first one's stories
    with exit 0. Now any stage list is refused first, laissez-faire and homogeneity alike."""
    from harness.audit.stages import run_stages

    c = cfg(tmp_path)
    generate_run(c, backend=EchoBackend(), progress=False)
    other = cfg(tmp_path, sampling={"temperature": 0.3})
    for stages in (["generate"], ["identities", "statistics"]):
        with pytest.raises(ConfigError, match=r"run.json: this run was made with a different sampling "):
            run_stages(other, stages, progress=False, echo=lambda line: None)
    assert sorted(p.name for p in Path(c.output_dir).iterdir() if p.is_dir()) == ["generations", "invocations"]
    hom = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}, "suite": "homogeneity",
                        "samples_per_prompt": 2, "output_dir": str(tmp_path / "hom")})
    RunStore(hom.output_dir).write_manifest({"config": hom.model_copy(update={"seed": 5}).model_dump(mode="json")})
    with pytest.raises(ConfigError, match=r"run.json: this run was made with a different seed \(5 vs 0\)"):
        run_stages(hom, ["report"], progress=False, echo=lambda line: None)


def test_a_file_where_the_run_keeps_a_folder_is_one_line(tmp_path):
    """generations/, a stage's folder or embeddings/ replaced by a file: a FileExistsError or NotADirectoryError
    traceback before; now one line naming the file."""
    from harness.audit.stages import run_stages
    from harness.errors import DataError
    from harness.homogeneity.embed import EmbeddingCache, get_spec

    c = cfg(tmp_path)
    run = Path(c.output_dir)
    (run / "generations").parent.mkdir(parents=True)
    (run / "generations").write_text("hi\n")
    with pytest.raises(DataError) as e:
        generate_run(c, backend=EchoBackend(), progress=False)
    assert str(e.value) == (f"{run / 'generations'}: a file where the run keeps a folder ({run / 'generations'}); "
                            "move the file away and rerun")
    (run / "generations").unlink()
    generate_run(c, backend=EchoBackend(), progress=False)
    (run / "labels").write_text("hi\n")
    with pytest.raises(DataError, match=rf"^{run / 'labels'}: a file where the run keeps a folder"):
        run_stages(c.model_copy(update={"label": c.label.model_copy(update={"labeller": "rules"})}), ["label"],
                   progress=False, echo=lambda line: None)
    (run / "embeddings").write_text("hi\n")
    with pytest.raises(DataError, match=rf"^{run / 'embeddings'}: a file where the run keeps a folder "
                                        rf"\({run / 'embeddings' / 'minilm-l6'}\)"):
        EmbeddingCache(run, get_spec("minilm-l6"))


def test_a_rerun_with_another_dtype_context_or_engine_setting_is_refused(tmp_path):
    """model.dtype, max_model_len and engine_kwargs were not compared: a rerun in bfloat16 added its stories to a
    float32 run, and run.json's model block then named the second setting only."""
    c = cfg(tmp_path, samples_per_prompt=1)
    generate_run(c, backend=EchoBackend(), progress=False)
    for field, value in (("dtype", "bfloat16"), ("max_model_len", 64), ("engine_kwargs", {"enforce_eager": True})):
        other = cfg(tmp_path, samples_per_prompt=2, model={**c.model.model_dump(), field: value})
        with pytest.raises(ConfigError, match=rf"this run was made with a different model\.{field} "):
            generate_run(other, backend=EchoBackend(), progress=False)
    assert len(RunStore(c.output_dir).read_keys(GENERATIONS)) == 3
    # model.system_message changes the stories of a suite with system messages only (homogeneity's, not these)
    gemma_style = cfg(tmp_path, samples_per_prompt=2, model={**c.model.model_dump(), "system_message": "in_user_turn"})
    assert generate_run(gemma_style, backend=EchoBackend(), progress=False).generated == 3
    hom = cfg(tmp_path, suite="homogeneity", prompts=None, samples_per_prompt=1, output_dir=str(tmp_path / "hom"))
    hom = hom.model_copy(update={"prompts": [get_suite("homogeneity").prompts[0].id]})
    generate_run(hom, backend=EchoBackend(), progress=False)
    moved = hom.model_copy(update={"model": hom.model.model_copy(update={"system_message": "in_user_turn"})})
    with pytest.raises(ConfigError, match=r"this run was made with a different model\.system_message "):
        generate_run(moved, backend=EchoBackend(), progress=False)


def test_a_generation_stopped_by_ctrl_c_says_interrupted_not_running(tmp_path):
    """run.json kept "running" after a Ctrl-C or a crash; nothing read it as anything else."""
    c = cfg(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        generate_run(c, backend=EchoBackend(fail_after=2), progress=False)
    assert json.loads((Path(c.output_dir) / "run.json").read_text())["status"] == "interrupted"
    generate_run(c, backend=EchoBackend(), progress=False)  # the rerun finishes it
    assert json.loads((Path(c.output_dir) / "run.json").read_text())["status"] == "complete"


def test_a_backend_that_raises_mid_stream_keeps_the_stories_that_came(tmp_path):
    """A backend that stops the run (an openai server called down, a Ctrl-C) lost the stories not yet in a whole
    shard: up to shard_rows of them, generated again by the rerun."""
    from harness.errors import BackendError

    class Dies(EchoBackend):
        def generate(self, requests, params, *, progress=False):
            for i, res in enumerate(super().generate(requests, params)):
                if i == 5:
                    raise BackendError("http://127.0.0.1:1/v1: the server looks down")
                yield res

    c = cfg(tmp_path, shard_rows=100)
    with pytest.raises(BackendError, match="looks down"):
        generate_run(c, backend=Dies(), progress=False)
    store = RunStore(c.output_dir)
    assert len(store.read_stage(GENERATIONS)) == 5
    assert json.loads((Path(c.output_dir) / "run.json").read_text())["status"] == "interrupted"
    rest = EchoBackend()
    assert generate_run(c, backend=rest, progress=False).already_done == 5 and len(rest.seen) == 7


_SIGTERM_CHILD = '''
import sys, time
import harness.audit.labels as L
from harness.config import parse_config
from harness.generation.base import Backend, GenResult
from harness.pipeline import generate_run
import harness.cli as cli

class Fake(Backend):
    name = "fake"
    def generate(self, requests, params, *, progress=False):
        for r in requests:
            yield GenResult(r.request_id, f"Maria Lopez taught Wei Chen. She smiled at him. {r.seed}", "stop", 10, 3)
    def info(self):
        from harness.generation.base import BackendInfo
        return BackendInfo("fake", "canned")

cfg = parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"},
                    "prompts": ["learning-neutral-01", "labor-laden-02"], "samples_per_prompt": 4, "seed": 11,
                    "output_dir": sys.argv[2], "label": {"labeller": "rules", "shard_rows": 100}})
generate_run(cfg, backend=Fake(), progress=False)
real = L.make_labeller
def make(cfg, echo=print, **kw):
    lab = real(cfg, echo=echo, **kw)
    inner = lab.iter_label
    def slow(stories, **kw):
        for k, r in enumerate(inner(stories, **kw)):
            yield r
            print("labelled", k + 1, flush=True)
            time.sleep(0.2)
    lab.iter_label = slow
    return lab
L.make_labeller = make
sys.argv = ["harness", "run", sys.argv[1], "--stages", "label"]
cli.main()
'''


def test_sigterm_mid_label_stage_keeps_the_stories_labelled_and_a_rerun_goes_on(tmp_path):
    """SIGTERM (scancel, a time limit, preemption, `timeout`) ended the process on the spot: the label stage's rows
    since its last shard (up to shard_rows, an hour of an LLM labeller) were lost, where Ctrl-C keeps them. It stops
    the command as Ctrl-C does, with one line and exit 143."""
    import os
    import signal
    import subprocess
    import sys

    import yaml

    from harness.store import RunStore

    out = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": {"backend": "transformers", "path": "smollm2-135m"},
                                      "prompts": ["learning-neutral-01", "labor-laden-02"], "samples_per_prompt": 4,
                                      "seed": 11, "output_dir": str(out),
                                      "label": {"labeller": "rules", "shard_rows": 100}}))
    script = tmp_path / "child.py"
    script.write_text(_SIGTERM_CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(script), str(config), str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    for line in child.stdout:
        if line.startswith("labelled 3"):
            child.send_signal(signal.SIGTERM)
            break
    _, err = child.communicate(timeout=120)
    assert child.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == ("error: stopped by SIGTERM; the work done so far is kept: rerun the same "
                                            "command to go on")
    kept = RunStore(out).read_keys("labels")
    assert 3 <= len(kept) < 8
    from harness.audit.labels import label_run
    from harness.config import parse_config

    label_run(parse_config(yaml.safe_load(config.read_text())), RunStore(out), progress=False)  # the rerun
    assert len(RunStore(out).read_keys("labels")) == 8


def test_stories_of_a_prompt_the_suite_has_not_are_named_before_the_labeller_loads(tmp_path, monkeypatch):
    """A generation whose prompt id the suite has not (renamed or dropped by another suite version) was a KeyError
    traceback in the label stage, after the labeller had loaded and the run's manifest had recorded it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import harness.audit.labels as L
    from harness.errors import DataError

    c = cfg(tmp_path, label={"labeller": "rules"})
    generate_run(c, backend=EchoBackend(), progress=False)
    store = RunStore(c.output_dir)
    shard = store.shard_paths(GENERATIONS)[0]
    table = pq.read_table(shard)
    ids = table.column("prompt_id").to_pylist()
    ids[0] = "learning-neutral-99"
    pq.write_table(table.set_column(table.schema.get_field_index("prompt_id"), "prompt_id",
                                    pa.array(ids, pa.string())), shard)
    monkeypatch.setattr(L, "make_labeller", lambda *a, **k: pytest.fail("the labeller loaded"))
    with pytest.raises(DataError, match=r"stories of prompt id\(s\) learning-neutral-99, which suite laissez-faire "):
        L.label_run(c, store, progress=False)


def test_the_label_stage_counts_the_stories_with_a_failure_reason_not_their_characters(tmp_path, monkeypatch):
    """The stage's line says "N stories labelled now, ..., F with a failure reason": F counted characters, so a failed
    story of two roles was two. It counts stories: those with a character of a failure status, a story whose one
    role alone could not be labelled among them."""
    from dataclasses import replace

    import harness.audit.labels as L
    from harness.labelling.base import failed

    c = cfg(tmp_path, label={"labeller": "rules"})
    generate_run(c, backend=EchoBackend(), progress=False)
    monkeypatch.setattr(L, "make_labeller", _labeller_that(L.make_labeller, lambda k, story, res: failed(
        story, "empty story") if k % 2 else res))
    n_new, _, n_failed, _ = L.label_run(c, store := RunStore(c.output_dir), progress=False)
    rows = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    assert n_failed == n_new // 2 and rows.status.ne("ok").sum() > n_failed  # two-role stories among them

    def object_unlabelled(k, story, res):  # of a two-role story, the object alone could not be labelled
        if len(res.characters) < 2:
            return res
        return replace(res, characters=(res.characters[0], replace(res.characters[1], name=None, references=(),
                                                                   status="no object found")))

    c2 = cfg(tmp_path, label={"labeller": "rules"}, output_dir=str(tmp_path / "run2"))
    generate_run(c2, backend=EchoBackend(), progress=False)
    monkeypatch.setattr(L, "make_labeller", _labeller_that(L.make_labeller, object_unlabelled))
    n_new, _, n_failed, _ = L.label_run(c2, store := RunStore(c2.output_dir), progress=False)
    rows = store.read_stage(L.LABELS, key=("prompt_id", "sample_idx", "role"))
    statuses = rows.groupby(["prompt_id", "sample_idx"]).status
    assert statuses.apply(lambda s: set(s) == {"ok", "no object found"}).any()  # half-labelled stories
    assert n_failed == statuses.apply(lambda s: s.ne("ok").any()).sum() > 0


def test_the_label_stage_memory_benchmark_runs_and_refuses_sizes_it_cannot_take_a_slope_between():
    """benchmarks/label_stage_memory.py failed at every size once ``make_labeller`` took ``progress``: its stand-in
    labeller's signature no longer matched, and no figure could be measured."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "label_stage_memory.py"
    r = subprocess.run([sys.executable, str(script), "--sizes", "100,200", "--no-write"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| label stage, every story labelled |" in r.stdout and "per story (slope)" in r.stdout
    for sizes in ("200,100", "100", "a,b", "120,5020"):  # 120: its prompts not sampled alike
        r = subprocess.run([sys.executable, str(script), "--sizes", sizes, "--no-write"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and "--sizes" in r.stderr and "Traceback" not in r.stderr


def test_a_prompts_system_message_goes_where_model_system_message_puts_it_and_a_blank_story_is_empty():
    """gen_request: "turn" keeps the system message as its own turn, "in_user_turn" puts it before the prompt (a
    chat template without a system role), "drop" leaves it out; a prompt without one is sent as it is. _row: a
    story of only whitespace is empty, as a story of no text is."""
    from harness.pipeline import WorkItem, _row, gen_request

    prompt = next(p for p in get_suite("homogeneity").prompts if p.meta.get("system"))
    item = WorkItem(prompt, 0, 7)
    system = prompt.meta["system"]
    assert gen_request(item) == GenRequest(item.request_id, prompt.text, 7, system)
    assert gen_request(item, "in_user_turn") == GenRequest(item.request_id, f"{system}\n\n{prompt.text}", 7, None)
    assert gen_request(item, "drop") == GenRequest(item.request_id, prompt.text, 7, None)
    plain = WorkItem(get_suite("laissez-faire").prompts[0], 1, 3)
    assert {gen_request(plain, mode) for mode in ("turn", "in_user_turn", "drop")} == {
        GenRequest(plain.request_id, plain.prompt.text, 3, None)}
    for text, empty in (("", True), (" \n\t ", True), (" Once. ", False)):
        row = _row(item, GenResult(item.request_id, text, "stop", 5, 1), "m", "echo")
        assert (row["empty"], row["text_clean"]) == (empty, text.strip())


def test_the_progress_bar_counts_each_story_and_its_rates(tmp_path, capsys):
    """``progress=True`` (the CLI's default): the bar ends at every story planned, with stories/s and tok/s."""
    from harness.pipeline import _progress

    bar = _progress(3, enabled=True)
    for i, tokens in enumerate((10, 20, 30), 1):
        bar.advance(tokens, elapsed=float(i))
    task = bar.bar.tasks[0]
    assert (task.completed, task.total, bar.tokens) == (3, 3, 60)
    assert task.fields["rate"] == "1.00 stories/s, 20.0 tok/s"  # 3 stories and 60 tokens in 3 s
    bar.close()
    quiet = _progress(3, enabled=False)
    quiet.advance(5, elapsed=1.0)
    quiet.close()
    assert quiet.tokens == 5 and not hasattr(quiet, "bar")
    s = generate_run(cfg(tmp_path), backend=EchoBackend(), progress=True)  # the whole run with the bar on
    assert s.generated == 12 and "generating" in capsys.readouterr().out
