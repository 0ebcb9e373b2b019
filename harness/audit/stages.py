"""``harness run``: generate -> label -> identities -> statistics -> report, each resumable.

* generate and label work story by story and commit Parquet shards; a rerun does only the
  stories that are missing.
* identities, statistics and report are whole-table stages: each records a fingerprint of its
  inputs (the upstream shard listing and the options that change its output) in
  ``<stage>/_stage.json`` and is skipped when the fingerprint still matches. Each checks and writes holding
  the stage's writer lock alone (``writing_alone``): a second job in the stage at once stops with an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.audit.labels import LABELS, TEXT_SHA1
from harness.config import STAGES, RunConfig, check_kernel_backend
from harness.errors import ConfigError, DataError
from harness.pipeline import GENERATIONS
from harness.store import ERROR, STATUS, RunStore, atomic_write, atomic_write_text, run_folder, utcnow

IDENTITIES, STATISTICS, REPORT = "identities", "statistics", "report"


@dataclass
class StageResult:
    stage: str
    status: str  # "done", "skipped (current)", "resumed"
    seconds: float
    detail: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)


def _listing(store: RunStore, stage: str) -> list[tuple[str, int]]:
    d = store.stage_dir(stage)
    if not d.is_dir():
        return []
    return sorted((p.name, p.stat().st_size) for p in d.iterdir() if p.is_file() and not p.name.startswith((".", "_")))


def fingerprint(store: RunStore, upstream: list[str], options: dict[str, Any]) -> str:
    """A hash of the upstream stages' listings and ``options``; an upstream whole-table stage (one with a
    ``_stage.json``) adds the fingerprint it was made with: its tables keep their names when made again,
    and may keep their sizes (other likelihoods, same floats), so the listing alone would not change."""
    h = hashlib.sha256()
    for stage in upstream:
        made_with = recorded_fingerprint(store, stage)
        h.update(json.dumps([stage, _listing(store, stage)] + ([made_with] if made_with else [])).encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _state_path(store: RunStore, stage: str) -> Path:
    return store.stage_dir(stage) / "_stage.json"


def recorded(store: RunStore, stage: str) -> dict[str, Any]:
    """What ``stage`` last recorded as current: its fingerprint and info ({}: nothing recorded)."""
    try:
        return json.loads(_state_path(store, stage).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def recorded_fingerprint(store: RunStore, stage: str) -> str | None:
    """The fingerprint ``stage`` last recorded as current (None: none recorded)."""
    return recorded(store, stage).get("fingerprint")


def is_current(store: RunStore, stage: str, fp: str, tables: Iterable[str] = (),
               suffixes: tuple[str, ...] = (".parquet",), files: Iterable[str] = ()) -> bool:
    """Whether ``stage`` recorded ``fp`` and each of its ``tables`` (``write_table`` names, in each of ``suffixes``)
    and ``files`` (paths in its folder) is still on disk: a table, its CSV or a report's figure deleted (to have it
    made again, as for a shard that does not read) is not skipped as current."""
    d = store.stage_dir(stage)
    return recorded_fingerprint(store, stage) == fp and all(
        (d / f"{name}{suffix}").is_file() for name in tables for suffix in suffixes) and all(
        (d / f).is_file() for f in files)


def mark_current(store: RunStore, stage: str, fp: str, info: dict[str, Any]) -> None:
    run_folder(store.stage_dir(stage))
    atomic_write_text(_state_path(store, stage), json.dumps({"fingerprint": fp, "finished_at": utcnow(), **info}, indent=2, default=str))


def mark_stale(store: RunStore, stage: str) -> None:
    """Forget the fingerprint ``stage`` recorded, before it writes over its outputs: killed while it writes
    them, a rerun with the options it recorded (a changed config put back) must not skip it as current."""
    _state_path(store, stage).unlink(missing_ok=True)


@contextlib.contextmanager
def writing_alone(store: RunStore, stage: str) -> Iterator[None]:
    """Held by a whole-table stage while it checks and writes its tables: the stage's writer lock
    (``RunStore.writing``), which it takes only when no other job holds it. A second job (``harness run`` started
    twice) stops with a one-line error rather than wait: waiting for the lock where a job tests it (under run.json's)
    would hold every other job's manifest update, and behind a stopped job it waits silently for ever; rerun once
    the first ends, it skips as current what that one made."""
    def claim(manifest: dict[str, Any], alone: bool) -> None:
        if not alone:
            raise DataError(f"{store.stage_dir(stage)}: another job is writing this stage now (harness run started "
                            f"twice?); let it finish, then rerun: what it made is skipped as current")

    with store.writing(stage, claim):
        yield


def require(store: RunStore, folder: str, stage: str, present: bool, needed_by: str) -> None:
    """A DataError in one line where the ``needed_by`` stage finds nothing in the ``folder`` the earlier ``stage``
    writes (``present`` False), raised before it makes its own folder: it named a missing column or gave a
    FileNotFoundError traceback, and left an empty folder."""
    if not present:
        raise DataError(f"{store.stage_dir(folder)}: nothing there, and the {needed_by} stage reads it; run the {stage} "
                        f"stage first (`harness run CONFIG --stages {stage}`)")


def write_table(store: RunStore, stage: str, name: str, df: pd.DataFrame, csv: bool = True) -> Path:
    """Write one whole-stage table as Parquet (and CSV for people), atomically and synced to disk: the
    stage's ``_stage.json``, written next, must not call a table current that a power loss left empty."""
    d = run_folder(store.stage_dir(stage))
    atomic_write(d / f"{name}.parquet", lambda tmp: df.to_parquet(tmp, index=False))
    if csv:
        atomic_write(d / f"{name}.csv", lambda tmp: df.to_csv(tmp, index=False))
    return d / f"{name}.parquet"


# ---------------------------------------------------------------------------------------------
def stage_generate(cfg: RunConfig, store: RunStore, *, shard: tuple[int, int], progress: bool) -> StageResult:
    from harness.pipeline import generate_run, raise_for_failed

    t = time.perf_counter()
    s = generate_run(cfg, shard=shard, progress=progress)
    raise_for_failed(s)  # as `harness generate`: exit 4, and no later stage over the stories that did come
    return StageResult("generate", "done" if s.generated else "skipped (current)", time.perf_counter() - t,
                       f"{s.stories} generated, {s.already_done} on disk, {s.total_rows} rows; "
                       f"{s.stories_per_s:.2f} stories/s, {s.tokens_per_s:.1f} tokens/s")


def stage_label(cfg: RunConfig, store: RunStore, *, shard: tuple[int, int], progress: bool) -> StageResult:
    from harness.audit.labels import label_run

    t = time.perf_counter()
    n_new, n_total, failed, unretried = label_run(cfg, store, shard=shard, progress=progress)
    retry = f"; {unretried} failed generations not labelled (rerun generate to retry them)" if unretried else ""
    return StageResult("label", "done" if n_new else "skipped (current)", time.perf_counter() - t,
                       f"{n_new} stories labelled now, {n_total} in all, {failed} with a failure reason{retry}")


def planned_keys(cfg: RunConfig, suite: Any) -> set[tuple[str, int]]:
    """The (prompt id, sample index) of every story ``cfg`` plans: its prompts times its samples_per_prompt."""
    from harness.pipeline import plan

    return {(item.prompt.id, item.sample_idx) for item in plan(cfg, suite, (0, 1))}


def planned_stories(store: RunStore, generations: pd.DataFrame, keys: set[tuple[str, int]]) -> tuple[pd.DataFrame, int]:
    """The generations of the planned ``keys`` and how many of those failed. The stages after generate read all
    the run held: a config narrowed to fewer prompts or samples got the earlier tables, called current, and a
    run missing a shard (job arrays of different N) its part, exit 0. A planned story not on disk is a DataError
    naming the counts; one that failed (an error row, retried by each generate) is left out and counted."""
    on_disk = [(pid, int(i)) in keys for pid, i in zip(generations["prompt_id"], generations["sample_idx"])]
    mine = generations[on_disk]
    if missing := len(keys) - len(mine):
        raise DataError(f"{store.stage_dir(GENERATIONS)}: {missing} of the {len(keys)} stories the config plans are "
                        f"not generated (a shard not run, or run with another N?); run `harness generate CONFIG` "
                        f"(each shard) until none is left, or narrow prompts or samples_per_prompt")
    failed = int(mine[STATUS].eq(ERROR).sum()) if STATUS in mine.columns else 0
    return mine, failed


def stage_identities(cfg: RunConfig, store: RunStore, **_: Any) -> StageResult:
    from harness.audit.characters import build_characters
    from harness.identity import RACES
    from harness.identity.gender import INFERENCE_VERSION, load_lexicon
    from harness.identity.names import NameTable, name_lists
    from harness.suites import get_suite

    t = time.perf_counter()
    for folder, before in ((GENERATIONS, "generate"), (LABELS, "label")):
        require(store, folder, before, bool(store.shard_paths(folder)), IDENTITIES)
    names = NameTable.load(mode=cfg.identity.name_mode)
    lexicon = load_lexicon(cfg.identity.lexicon)
    suite = get_suite(cfg.suite, cfg.wording)
    # the model's name and the suite's roles are written into every character row too
    options = {"identity": cfg.identity.model_dump(), "names": names.provenance, "lexicon": lexicon.provenance(),
               "name_parsing": name_lists().version, "gender_inference": INFERENCE_VERSION, "model": cfg.name,
               "suite": [suite.name, suite.version, suite.wording]}
    keys = planned_keys(cfg, suite)
    options["plan"] = {"prompts": sorted({pid for pid, _ in keys}), "samples_per_prompt": cfg.samples_per_prompt}
    # what a U.S.-representative set of names scores per race: the statistics stage leaves unmeasured the races
    # the name table cannot measure (its NH/PI source lacks the group's names)
    options["representative_shares"] = {r: round(v, 9) for r, v in names.representative_shares().items()}
    with writing_alone(store, IDENTITIES):
        fp = fingerprint(store, [GENERATIONS, LABELS], options)
        if is_current(store, IDENTITIES, fp, ["characters"]):
            return StageResult("identities", "skipped (current)", time.perf_counter() - t)
        generations, failed = planned_stories(store, store.read_stage(GENERATIONS), keys)
        labels = store.read_stage(LABELS, key=("prompt_id", "sample_idx", "role", TEXT_SHA1))  # build_characters picks
        chars = build_characters(
            generations, labels, suite, model=cfg.name, names=names, lexicon=cfg.identity.lexicon
        )
        mark_stale(store, IDENTITIES)
        write_table(store, IDENTITIES, "characters", chars, csv=False)
        named = chars.first_name.notna()
        matched = chars[list(RACES)].notna().any(axis=1) & named  # as NameTable: any source has the name
        info = {
            "failed_generations": failed,
            "characters": len(chars),
            "named": int(named.sum()),
            "matched": int(matched.sum()),
            "gender_counts": chars.gender.value_counts().to_dict(),
            **options,
        }
        mark_current(store, IDENTITIES, fp, info)
    left_out = f"; {failed} planned stories failed to generate and are left out" if failed else ""
    return StageResult("identities", "done", time.perf_counter() - t,
                       f"{len(chars)} characters, {int(named.sum())} named, {int(matched.sum())} matched to the name "
                       f"table{left_out}")


def stage_statistics(cfg: RunConfig, store: RunStore, **_: Any) -> StageResult:
    from harness.audit.statistics import compute_tables
    from harness.stats import METHODS_VERSION

    t = time.perf_counter()
    options = {"statistics": cfg.statistics.model_dump(), "min_population": cfg.identity.min_population,
               "methods": METHODS_VERSION}
    require(store, IDENTITIES, IDENTITIES, (store.stage_dir(IDENTITIES) / "characters.parquet").is_file(), STATISTICS)
    with writing_alone(store, STATISTICS):
        fp = fingerprint(store, [IDENTITIES], options)
        if is_current(store, STATISTICS, fp, recorded(store, STATISTICS).get("tables", {}), (".parquet", ".csv")):
            return StageResult("statistics", "skipped (current)", time.perf_counter() - t)
        chars = pd.read_parquet(store.stage_dir(IDENTITIES) / "characters.parquet")
        shares = recorded(store, IDENTITIES).get("representative_shares")
        if shares is None:  # identities of an earlier release, not made again (--stages statistics): NH/PI measured
            from harness.identity.names import NameTable

            shares = NameTable.load(mode=cfg.identity.name_mode).representative_shares()
        tables = compute_tables(chars, cfg.statistics, min_population=cfg.identity.min_population,
                                representative=shares)
        mark_stale(store, STATISTICS)
        for name, df in tables.items():
            write_table(store, STATISTICS, name, df)
        mark_current(store, STATISTICS, fp, {"tables": {k: len(v) for k, v in tables.items()}, **options})
    return StageResult("statistics", "done", time.perf_counter() - t, f"{len(tables)} tables")


def run_report_stage(store: RunStore, fp: str, build: Callable[[list[Path], Path], Path], t: float) -> StageResult:
    """The report stage of any audit: skipped when its fingerprint ``fp`` is current and the page
    exists, else ``build([run], out)`` and recorded; ``t`` is when the stage started. The version of the
    report's code is part of the fingerprint: a report made by another version is made again."""
    from harness.report import REPORT_VERSION

    fp = f"{fp}+report{REPORT_VERSION}"
    out = store.root / REPORT
    with writing_alone(store, REPORT):
        if is_current(store, REPORT, fp, files=recorded(store, REPORT).get("files", ["index.html"])):
            return StageResult("report", "skipped (current)", time.perf_counter() - t, str(out / "index.html"))
        mark_stale(store, REPORT)
        index = build([store.root], out)
        written = sorted(f.relative_to(out).as_posix() for f in out.rglob("*") if f.is_file()
                         and not f.name.startswith((".", "_")))  # a figure deleted since is made again
        mark_current(store, REPORT, fp, {"index": str(index), "files": written})
    return StageResult("report", "done", time.perf_counter() - t, str(index))


def stage_report(cfg: RunConfig, store: RunStore, **_: Any) -> StageResult:
    """The report of the run's tables; made again when they, the config, the report's code or the labeller's scores
    change: scores written after the report (``harness label eval --details``, the command its labelling QA table
    gives) left it 'skipped (current)' without them."""
    from harness.report import build_report
    from harness.report.qa import labeller_summary

    t = time.perf_counter()
    require(store, STATISTICS, STATISTICS, bool(recorded(store, STATISTICS)), REPORT)
    manifest = store.read_manifest()
    qa = labeller_summary(manifest.get("labeller"), store.root)
    fp = fingerprint(store, [STATISTICS, IDENTITIES], {
        "manifest": manifest.get("config"),
        "labeller_scores": [qa["evaluation_source"], qa["evaluation"], qa["passed_over"]]})
    return run_report_stage(store, fp, build_report, t)


RUNNERS: dict[str, Callable[..., StageResult]] = {
    "generate": stage_generate,
    "label": stage_label,
    "identities": stage_identities,
    "statistics": stage_statistics,
    "report": stage_report,
}


def check_run_config(cfg: RunConfig, store: RunStore) -> None:
    """Refuse, before any stage, a config other than the one that made the run in ``store`` (another model,
    sampling, suite or seed: ``pipeline.check_resumable``; other label settings than its labels':
    ``labels.check_label_settings``): the generate and label stages check them only when they have stories to
    write, so a run whose stories were all there, or a run of the later stages only, went on with the other
    config's settings over the first one's stories and labels."""
    from harness.audit.labels import check_label_settings
    from harness.pipeline import check_resumable
    from harness.suites import get_suite

    check_resumable(store, cfg, get_suite(cfg.suite, cfg.wording))
    if store.shard_paths(LABELS):  # the label stage checks its settings; run without it, identities took the labels
        # another labeller made as this config's
        check_label_settings(store, cfg, len(store.read_keys(LABELS, ("prompt_id", "sample_idx"))))


def run_stages(
    cfg: RunConfig,
    stages: list[str] | None = None,
    *,
    shard: tuple[int, int] = (0, 1),
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> list[StageResult]:
    """Run ``stages`` (default: the config's) in pipeline order. A homogeneity config (suite
    ``homogeneity``) runs generate -> embed -> statistics -> report instead
    (``harness.homogeneity.stages``)."""
    from harness.homogeneity.stages import is_homogeneity, run_homogeneity_stages

    if is_homogeneity(cfg):
        return run_homogeneity_stages(cfg, stages, shard=shard, progress=progress, echo=echo)
    wanted = stages or list(cfg.stages)
    unknown = [s for s in wanted if s not in RUNNERS]
    if unknown:
        raise ConfigError(f"--stages: unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    if shard != (0, 1) and any(s in wanted for s in ("identities", "statistics", "report")):
        raise ConfigError("--shard applies to generate and label only; run identities, statistics and report once, unsharded")
    if "label" in wanted and cfg.label.labeller == "encoder":
        from harness.audit.labels import encoder_dir

        encoder_dir(cfg)  # a mistyped label.model_dir stops the run before generation, not after it
    if "label" in wanted and cfg.label.labeller == "llm":
        from harness.audit.labels import check_llm

        check_llm(cfg)  # so does a missing or mistyped label.llm
    if "statistics" in wanted:
        check_kernel_backend(cfg.statistics.backend)  # cupy without a GPU stopped the run after generating and labelling
    if "identities" in wanted:
        from harness.identity.gender import load_lexicon

        load_lexicon(cfg.identity.lexicon)  # and a mistyped identity.lexicon (a few ms: a small YAML file)
    store = RunStore(cfg.output_dir)
    check_run_config(cfg, store)
    results = []
    for stage in STAGES:
        if stage not in wanted:
            continue
        r = RUNNERS[stage](cfg, store, shard=shard, progress=progress)
        echo(f"[{stage}] {r.status} in {r.seconds:.1f}s" + (f": {r.detail}" if r.detail else ""))
        results.append(r)
    return results
