"""The generation stage: prompts x samples -> stories in the run store, resumably.

``generate_run(config)`` plans every (prompt id, sample index) of the config, keeps those of
this shard that are not on disk yet (or whose row is a failed request, finish_reason "error"),
and streams them through the backend, committing a
Parquet shard every ``shard_rows`` stories. Killing it at any moment loses at most the
stories of the shard being filled; rerunning does only what is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from harness import __version__
from harness.config import RunConfig
from harness.errors import BackendError, ConfigError
from harness.generation import Backend, GenRequest, load_backend
from harness.provenance import git_commit, host_info, package_versions
from harness.store import KEY, RunStore, sample_seed, shard_of, utcnow
from harness.suites import Prompt, Suite, get_suite

GENERATIONS = "generations"

GENERATION_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("sample_idx", pa.int32()),
        ("seed", pa.int64()),
        ("suite", pa.string()),
        ("domain", pa.string()),
        ("condition", pa.string()),
        ("love_type", pa.string()),
        ("scenario", pa.string()),
        ("prompt", pa.string()),
        ("model", pa.string()),
        ("backend", pa.string()),
        ("text", pa.string()),  # as the engine returned it
        ("text_clean", pa.string()),  # whitespace trimmed
        ("empty", pa.bool_()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("error", pa.string()),
        ("created_at", pa.string()),
    ]
)

# Config fields that change what is generated: a rerun into the same directory must match them.
#: What a run's stories depend on: a rerun whose config differs in any is refused (``check_resumable``), or one run
#: would hold stories of two settings (float32 and bfloat16, a context cut at two lengths).
IDENTITY_FIELDS = ("model.backend", "model.path", "model.gguf_file", "model.chat_template", "model.system_message",
                   "model.dtype", "model.max_model_len", "model.engine_kwargs", "sampling", "suite", "wording", "seed")


@dataclass
class WorkItem:
    prompt: Prompt
    sample_idx: int
    seed: int

    @property
    def request_id(self) -> str:
        return f"{self.prompt.id}#{self.sample_idx}"


def gen_request(item: WorkItem, system_message: str = "turn") -> GenRequest:
    """The request of one story: the prompt, its seed, and its system message where ``model.system_message`` puts
    it (its own turn; the start of the user turn, for a chat template without a system role; or nowhere)."""
    text, system = item.prompt.text, item.prompt.meta.get("system")
    if system and system_message == "in_user_turn":
        text, system = f"{system}\n\n{text}", None
    elif system_message == "drop":
        system = None
    return GenRequest(item.request_id, text, item.seed, system)


@dataclass
class GenerationSummary:
    run_dir: Path
    planned: int
    already_done: int
    generated: int
    errors: int
    seconds: float
    output_tokens: int
    total_rows: int
    extra: dict[str, Any] = field(default_factory=dict)
    first_error: str | None = None  # the reason of this call's first failed request, if any failed

    @property
    def stories(self) -> int:
        """Stories this call wrote: its requests less the failed ones (kept as error rows, retried by a rerun)."""
        return self.generated - self.errors

    @property
    def stories_per_s(self) -> float:
        return self.stories / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0


def one_line(reason: str, limit: int = 300) -> str:
    """A failed request's reason as one line of at most ``limit`` characters, for an error message (a server's
    reply can hold newlines).

    >>> one_line("HTTP 500: <html>\\n<body>oops</body>")
    'HTTP 500: <html> <body>oops</body>'
    """
    flat = " ".join(reason.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def raise_for_failed(summary: GenerationSummary) -> None:
    """A BackendError (exit 4) where requests of this generation failed: a job array's scheduler, or a script,
    sees the shard as not done, and ``harness run`` goes no further than the stories that came."""
    if summary.errors:
        raise BackendError(f"{summary.errors} of {summary.generated} requests failed (the first: "
                           f"{one_line(summary.first_error or '')}); the stories that finished are on disk, kept as "
                           f"they are: fix the cause and rerun the same command, which retries only the failed ones")


def select_prompts(cfg: RunConfig, suite: Suite) -> list[Prompt]:
    if cfg.prompts is None:
        return list(suite.prompts)
    by_id = suite.by_id()
    unknown = [p for p in cfg.prompts if p not in by_id]
    if unknown:
        raise ConfigError(
            f"prompts: unknown prompt id(s) {', '.join(unknown)} in suite {suite.name}; "
            "see `harness prompts list`"
        )
    return [by_id[p] for p in dict.fromkeys(cfg.prompts)]  # an id listed twice is one prompt, not two samplings


def plan(cfg: RunConfig, suite: Suite, shard: tuple[int, int] = (0, 1)) -> list[WorkItem]:
    """Every (prompt, sample) of this shard, with its deterministic seed."""
    i, n = shard
    return [
        WorkItem(p, s, sample_seed(cfg.seed, p.id, s))
        for p in select_prompts(cfg, suite)
        for s in range(cfg.samples_per_prompt)
        if n == 1 or shard_of(p.id, s, n) == i
    ]


def _get(cfg: RunConfig, dotted: str) -> Any:
    node: Any = cfg.model_dump()
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def prompt_hash(prompts: list[Prompt]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(f"{p.id}\0{p.text}\n".encode())
    return h.hexdigest()


def check_resumable(store: RunStore, cfg: RunConfig, suite: Suite | None = None) -> None:
    """Refuse to mix stories of two different configs in one run directory, or (given ``suite``) of two
    texts of one prompt: the config names the suite, not its texts, which a new version of the suite (a
    wording fixed in a later release) changes under the same prompt ids."""
    old = store.read_manifest().get("config")
    if not old:
        return
    try:
        old_cfg = RunConfig.model_validate(old)
    except ValidationError as err:  # written by another version of harness, or edited by hand
        e = err.errors()[0]
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        raise ConfigError(f"{store.manifest_path}: its config does not read as this version's (field '{field}': "
                          f"{e['msg']}), so this run's settings cannot be checked against it; use a new output_dir, "
                          f"or finish the run with the harness version that started it") from None
    for f in IDENTITY_FIELDS:
        if _get(old_cfg, f) != _get(cfg, f):
            if f == "model.system_message" and not any(
                    p.meta.get("system") for p in (suite or get_suite(cfg.suite, cfg.wording)).prompts):
                continue  # no prompt of the suite has one (laissez-faire): the stories do not depend on it
            if f == "wording" and _same_prompts(old_cfg, cfg):
                continue  # the suite's default wording written out, or left out: the same prompts
            raise ConfigError(
                f"{store.manifest_path}: this run was made with a different {f} "
                f"({_get(old_cfg, f)!r} vs {_get(cfg, f)!r}); use a new output_dir to start another run"
            )
    if suite is None:
        return
    texts = {p.id: p.text for p in suite.prompts}
    for pid, text in sorted(store.read_keys(GENERATIONS, ("prompt_id", "prompt"))):
        if pid in texts and texts[pid] != text:
            was = store.read_manifest().get("suite", {}).get("version")
            raise ConfigError(
                f"{store.stage_dir(GENERATIONS)}: prompt {pid} was generated from another text than suite "
                f"{suite.name} {suite.version} gives it ({'version ' + str(was) if was else 'an earlier version'} "
                f"of the suite); use a new output_dir to start another run"
            )


def _same_prompts(a: RunConfig, b: RunConfig) -> bool:
    """Whether two configs' suite and wording give the same prompts (ids and texts)."""
    try:
        return a.suite == b.suite and ({p.id: p.text for p in get_suite(a.suite, a.wording).prompts}
                                       == {p.id: p.text for p in get_suite(b.suite, b.wording).prompts})
    except ConfigError:  # a wording the suite does not have: not the same
        return False


def _row(item: WorkItem, res, model: str, backend: str) -> dict[str, Any]:
    p = item.prompt
    clean = res.text.strip()
    return {
        "prompt_id": p.id,
        "sample_idx": item.sample_idx,
        "seed": item.seed,
        "suite": p.suite,
        "domain": p.domain,
        "condition": p.condition,
        "love_type": p.love_type,
        "scenario": p.scenario,
        "prompt": p.text,
        "model": model,
        "backend": backend,
        "text": res.text,
        "text_clean": clean,
        "empty": not clean,
        "finish_reason": res.finish_reason,
        "prompt_tokens": res.prompt_tokens,
        "output_tokens": res.output_tokens,
        "error": res.error,
        "created_at": utcnow(),
    }


def generate_run(
    cfg: RunConfig,
    *,
    shard: tuple[int, int] = (0, 1),
    backend: Backend | None = None,
    progress: bool = True,
    on_shard: Callable[[Path, int], None] | None = None,
    plan_config: RunConfig | None = None,
) -> GenerationSummary:
    """Generate every missing story of ``cfg`` (this shard only) into ``cfg.output_dir``.

    ``plan_config``: the run's own config where ``cfg`` generates a part of it (a homogeneity top-up: some
    prompts' extra samples); run.json's plan (suite block, expected_rows) and its complete status are of it,
    not of the part (default ``cfg``)."""
    suite = get_suite(cfg.suite, cfg.wording)
    store = RunStore(cfg.output_dir)
    shard_tag = f"{shard[0]}of{shard[1]}"
    items = plan(cfg, suite, shard)
    done = store.read_keys(GENERATIONS, KEY)
    todo = [it for it in items if (it.prompt.id, it.sample_idx) not in done]
    started = utcnow()
    provenance = {"packages": package_versions(), "git_commit": git_commit(), "host": host_info()}
    run_cfg = plan_config or cfg
    prompts = select_prompts(run_cfg, suite)

    def claim(manifest: dict[str, Any], alone: bool) -> None:
        # under the run's lock: checked before it, two jobs started together both passed and wrote stories of
        # two configs
        check_resumable(store, cfg, suite)
        if not manifest:
            manifest.update(harness_version=__version__, created_at=started, config=run_cfg.model_dump(mode="json"))
        # the plan as this rerun asks it: a top-up (more samples per prompt, more prompts) plans more rows
        manifest.update(
            suite={
                "name": suite.name,
                "version": suite.version,
                "wording": suite.wording,
                "prompts": len(prompts),
                "prompt_sha256": prompt_hash(prompts),
            },
            expected_rows=len(prompts) * run_cfg.samples_per_prompt,
            status="running",
            updated_at=started,
            **provenance,
        )

    with store.writing(GENERATIONS, claim, shard=shard):
        buffer: list[dict[str, Any]] = []  # stories not yet in a shard
        writing: list[bool] = []  # non-empty while a shard is written (a failure there is not written again)
        generated = errors = out_tokens = 0
        first_error: str | None = None
        seconds = 0.0
        info_extra: dict[str, Any] = {}
        if todo:
            own_backend = backend is None
            t_load = time.perf_counter()
            backend = backend or load_backend(cfg.model, seed=cfg.seed)
            load_s = time.perf_counter() - t_load
            try:
                info = backend.info()
                from harness import models

                weights = None
                if cfg.model.backend != "openai":
                    weights = models.weights_identity(models.resolve(cfg.model.backend, cfg.model.path, cfg.model.gguf_file).weights_path)
                store.update_manifest(model={"backend": info.backend, "name": info.model, **info.extra, "weights": weights})
                by_id = {it.request_id: it for it in todo}
                requests = [gen_request(it, cfg.model.system_message) for it in todo]

                def flush(rows: list[dict[str, Any]]) -> None:
                    """Write ``rows`` as a shard (none: nothing), empty them, then hand the shard on."""
                    if rows:
                        n = len(rows)
                        writing.append(True)
                        path = store.write_shard(GENERATIONS, rows, f"gen-{shard_tag}", GENERATION_SCHEMA)
                        writing.clear()
                        rows.clear()  # written: a failure after this (in on_shard) must not write them again
                        if on_shard:
                            on_shard(path, n)

                bar = _progress(len(todo), enabled=progress)
                t0 = time.perf_counter()
                for res in backend.generate(requests, cfg.sampling.to_params()):
                    item = by_id[res.request_id]
                    buffer.append(_row(item, res, cfg.model.path, cfg.model.backend))
                    generated += 1
                    errors += res.finish_reason == "error"
                    if res.finish_reason == "error" and first_error is None:
                        first_error = res.error or "no reason given"
                    out_tokens += res.output_tokens
                    bar.advance(res.output_tokens, time.perf_counter() - t0)
                    if len(buffer) >= cfg.shard_rows:
                        flush(buffer)
                flush(buffer)
                seconds = time.perf_counter() - t0
                bar.close()
                info_extra = {"load_seconds": round(load_s, 2)}
                if hasattr(backend, "retries"):  # counted as the requests went (it read 0, taken before them)
                    info_extra["retries"] = int(backend.retries)
            except BaseException:  # Ctrl-C, a kill the process sees, a crash: not "running" for ever
                with contextlib.suppress(Exception):  # the stories that came are kept (a rerun asks the rest)
                    if buffer and not writing:
                        store.write_shard(GENERATIONS, buffer, f"gen-{shard_tag}", GENERATION_SCHEMA)
                with contextlib.suppress(Exception):
                    store.update_manifest(status="interrupted", updated_at=utcnow())
                raise
            finally:
                if own_backend:
                    backend.close()
    summary = GenerationSummary(
        store.root, len(items), len(items) - len(todo), generated, errors, seconds, out_tokens, 0, info_extra,
        first_error,
    )
    ended = utcnow()
    throughput = {
        "stories": generated - errors,  # a failed request is no story: the rate counted them (268 stories/s)
        "failed_requests": errors,
        "seconds": round(seconds, 3),
        "stories_per_s": round(summary.stories_per_s, 3),
        "output_tokens": out_tokens,
        "output_tokens_per_s": round(summary.tokens_per_s, 2),
        **info_extra,
    }
    store.record_invocation(
        {
            "invocation_id": uuid.uuid4().hex[:12],
            "stage": "generate",
            "shard": shard_tag,
            "started_at": started,
            "ended_at": ended,
            "planned": len(items),
            "already_done": len(items) - len(todo),
            "generated": generated,
            "errors": errors,
            "throughput": throughput,
            "host": host_info(),
        }
    )
    with store.edit_manifest() as manifest:
        # the rows on disk are counted under the lock: of two jobs of an array ending at once, the one that
        # writes the status last has counted the other's shards too, so a whole run never reads "partial"
        on_disk = store.read_keys(GENERATIONS, KEY)
        summary.total_rows = total = len(on_disk)
        # complete: every story of the plan on disk (rows of an earlier plan do not stand in for them)
        complete = all((p.id, s) in on_disk for p in prompts for s in range(run_cfg.samples_per_prompt))
        manifest.update(status="complete" if complete else "partial", updated_at=ended, rows=total,
                        throughput=throughput)
    return summary


class _progress:
    """A rich progress bar showing stories/s and tokens/s (silent when disabled)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.tokens = 0
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("generating"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("gen", total=total, rate="")

    def advance(self, tokens: int, elapsed: float) -> None:
        self.tokens += tokens
        if self.enabled:
            done = self.bar.tasks[0].completed + 1
            rate = f"{done / elapsed:.2f} stories/s, {self.tokens / elapsed:.1f} tok/s" if elapsed > 0 else ""
            self.bar.update(self.task, advance=1, rate=rate)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
