"""``harness run`` on a homogeneity config: generate -> embed -> statistics -> report.

Each stage is resumable and skipped when current, like the laissez-faire stages
(``harness.audit.stages``):

* generate: the run store generates only missing keys; then refused or empty samples are
  topped up (``generate_homogeneity``) until each prompt has ``target`` usable texts. When
  every prompt already has its samples and its usable texts, no backend is loaded.
* embed: the included texts go through the embedding cache (``embeddings/<embedder>/``), which
  embeds only missing (key, text) rows; ``embeddings/_stage.json`` records the fingerprint.
* statistics: ``homogeneity/<embedder>/`` tables (``analyse_embeddings``), plus
  ``homogeneity/texts.parquet`` and ``homogeneity/refusals.csv``; fingerprint in
  ``homogeneity/_stage.json`` over the generations, the cached embeddings and the options.
* report: ``report/index.html`` (``harness.report.homogeneity``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import HOMOGENEITY_STAGES, STAGES, RunConfig, check_kernel_backend
from harness.errors import ConfigError
from harness.homogeneity.embed import EMBEDDERS, PREPROCESSORS, EmbedderSpec, EmbeddingCache, get_spec, resolve_path
from harness.store import RunStore

SUITE = "homogeneity"
EMBED_DIR, STATS_DIR = "embeddings", "homogeneity"


def is_homogeneity(cfg: RunConfig) -> bool:
    """Whether ``cfg`` runs the homogeneity suite (any wording)."""
    return cfg.suite == SUITE


def embedder_spec(cfg: RunConfig) -> EmbedderSpec:
    """The config's ``embedding:`` block as a spec. A preprocessing or length override renames
    the spec (``minilm-l6+simple_prep``), so its cache never mixes with the preset's."""
    e = cfg.embedding
    if e.embedder not in EMBEDDERS:
        raise ConfigError(f"field 'embedding.embedder': must be one of {', '.join(EMBEDDERS)}, got {e.embedder!r}")
    if e.preprocess and e.preprocess not in PREPROCESSORS:
        raise ConfigError(f"field 'embedding.preprocess': must be one of {', '.join(PREPROCESSORS)}, got {e.preprocess!r}")
    base = EMBEDDERS[e.embedder]
    if not (e.path or base.path):
        raise ConfigError(f"field 'embedding.path': embedder {e.embedder} needs path, a local model directory "
                          "(no model hub here)")
    over: dict[str, Any] = {}
    if e.path:
        over["path"] = e.path
    if e.preprocess and e.preprocess != base.preprocess:
        over["preprocess"] = e.preprocess
    if e.max_length and e.max_length != base.max_length:
        over["max_length"] = e.max_length
    name = base.name + "".join(f"+{over[k]}" for k in ("preprocess", "max_length") if k in over)
    spec = get_spec(e.embedder, **over)
    return replace(spec, name=name) if name != spec.name else spec


def target_of(cfg: RunConfig) -> int:
    return cfg.homogeneity.target or cfg.samples_per_prompt


def check_homogeneity(cfg: RunConfig, path: Path | str) -> None:
    """Stop at load, naming the config file, on what a homogeneity run would refuse only after generating: an
    embedder that cannot be built or found, fewer than two texts per prompt, a single bootstrap replicate."""
    if cfg.homogeneity.target is None and cfg.samples_per_prompt < 2:
        raise ConfigError(f"{path}: field 'samples_per_prompt': a homogeneity run compares pairs of one prompt's texts, "
                          f"so it needs at least 2, got {cfg.samples_per_prompt}; raise it or set homogeneity.target")
    if cfg.statistics.n_boot == 1:
        raise ConfigError(f"{path}: field 'statistics.n_boot': a text bootstrap needs at least 2 replicates (0 skips "
                          "it), got 1")
    if cfg.homogeneity.n_perm and not cfg.statistics.n_boot:  # written as asked in summary.json, and never run
        raise ConfigError(f"{path}: field 'homogeneity.n_perm': the permutations run within the text bootstrap, which "
                          f"statistics.n_boot: 0 skips; set n_boot to 2 or more, or drop n_perm")
    try:
        resolve_path(embedder_spec(cfg).path)
    except ConfigError as e:
        msg = str(e)
        if msg.startswith("embedder: model directory"):
            msg = "field 'embedding.path': " + msg.removeprefix("embedder: ")
        raise ConfigError(f"{path}: {msg}") from None


def _suite_and_ids(cfg: RunConfig):
    from harness.pipeline import select_prompts
    from harness.suites import get_suite

    suite = get_suite(cfg.suite, cfg.wording)
    return suite, [p.id for p in select_prompts(cfg, suite)]


def included_texts(cfg: RunConfig) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
    """(every generation of the selected prompts with refusal flags, the included texts, suite)."""
    from harness.errors import DataError
    from harness.homogeneity.stage import load_texts

    suite, ids = _suite_and_ids(cfg)
    allt = load_texts(cfg.output_dir, refusal=cfg.homogeneity.refusal, target=target_of(cfg), suite=suite)
    allt = allt[allt["prompt_id"].isin(ids)].reset_index(drop=True)
    texts = allt[allt["included"]].reset_index(drop=True)
    if texts.empty:
        raise DataError(f"{cfg.output_dir}: no usable texts after the refusal filter; run the generate stage")
    return allt, texts, suite


def _tree_listing(d: Path) -> list[tuple[str, int]]:
    if not d.is_dir():
        return []
    return sorted((p.relative_to(d).as_posix(), p.stat().st_size) for p in d.rglob("*")
                  if p.is_file() and not p.name.startswith((".", "_")))


def _options(cfg: RunConfig, spec: EmbedderSpec) -> dict[str, Any]:
    return {"suite": [cfg.suite, cfg.wording, cfg.prompts], "target": target_of(cfg),
            "refusal": cfg.homogeneity.refusal, "embedder": spec.to_dict(), "cache_dtype": cfg.embedding.cache_dtype}


# ---------------------------------------------------------------------------------------------
def stage_generate(cfg: RunConfig, store: RunStore, *, shard: tuple[int, int], progress: bool):
    from harness.audit.stages import StageResult
    from harness.pipeline import GENERATIONS, generate_run
    from harness.homogeneity.refusal import flag_refusals, plan_topup
    from harness.homogeneity.stage import generate_homogeneity

    t = time.perf_counter()
    if shard != (0, 1):  # one job of an array: its keys only; the unsharded run tops up
        s = generate_run(cfg, shard=shard, progress=progress)
        return StageResult("generate", "done" if s.generated else "skipped (current)", time.perf_counter() - t,
                           f"shard {shard[0]}/{shard[1]}: {s.generated} generated, {s.already_done} on disk; "
                           "top-up runs unsharded")
    _, ids = _suite_and_ids(cfg)
    target = target_of(cfg)
    df = store.read_stage(GENERATIONS)
    if not df.empty:
        df = df[df["prompt_id"].isin(ids)]
    if not df.empty:
        rows = df.groupby("prompt_id").size()
        complete = all(int(rows.get(p, 0)) >= cfg.samples_per_prompt for p in ids)
        if complete and plan_topup(flag_refusals(df, cfg.homogeneity.refusal), target, ids).done:
            return StageResult("generate", "skipped (current)", time.perf_counter() - t,
                               f"{len(df)} texts on disk; every prompt has {target} usable")
    s = generate_homogeneity(cfg, target=target, refusal=cfg.homogeneity.refusal,
                             max_rounds=cfg.homogeneity.max_topup_rounds, progress=progress)
    short = f"; still short: {s.still_short}" if s.still_short else f"; every prompt has {target} usable"
    return StageResult("generate", "done" if s.generated else "skipped (current)", time.perf_counter() - t,
                       f"{s.generated} generated, {s.rounds} top-up round(s){short}", outputs=s.to_dict())


def stage_embed(cfg: RunConfig, store: RunStore, *, progress: bool = False, **_: Any):
    from harness.audit.stages import StageResult, fingerprint, is_current, mark_current
    from harness.pipeline import GENERATIONS

    t = time.perf_counter()
    spec = embedder_spec(cfg)
    options = _options(cfg, spec)
    fp = fingerprint(store, [GENERATIONS], options)
    cache = EmbeddingCache(store.root, spec, dtype=cfg.embedding.cache_dtype)
    if is_current(store, EMBED_DIR, fp) and cache.shards():
        return StageResult("embed", "skipped (current)", time.perf_counter() - t)
    texts = included_texts(cfg)[1]
    cb = (lambda i, n: print(f"embedded {i}/{n}", flush=True)) if progress else None
    n = cache.embed(texts, texts["text_clean"].tolist(), device=cfg.embedding.device,
                    batch_size=cfg.embedding.batch_size, progress=cb)
    secs = time.perf_counter() - t
    mark_current(store, EMBED_DIR, fp, {"embedded": n, "texts": len(texts), "seconds": round(secs, 3), **options})
    rate = f", {n / secs:.1f} texts/s" if n else ""
    return StageResult("embed", "done" if n else "skipped (current)", secs,
                       f"{n} texts embedded now, {len(texts)} in all ({spec.name}{rate})")


def stage_statistics(cfg: RunConfig, store: RunStore, **_: Any):
    from harness.audit.stages import StageResult, fingerprint, is_current, mark_current, mark_stale, writing_alone
    from harness.homogeneity.stage import FACTORS, analyse_embeddings, suite_levels, write_texts
    from harness.pipeline import GENERATIONS

    t = time.perf_counter()
    spec = embedder_spec(cfg)
    h = cfg.homogeneity
    options = {**_options(cfg, spec), "statistics": cfg.statistics.model_dump(), "n_perm": h.n_perm,
               "top_k": h.top_k, "alpha": h.alpha,
               "embeddings": _tree_listing(store.stage_dir(EMBED_DIR) / spec.name)}
    out = store.stage_dir(STATS_DIR)
    with writing_alone(store, STATS_DIR):  # a second job stops, as at the audit's whole-table stages
        fp = fingerprint(store, [GENERATIONS], options)
        if is_current(store, STATS_DIR, fp) and (out / spec.name / "summary.json").exists():
            return StageResult("statistics", "skipped (current)", time.perf_counter() - t)
        allt, texts, suite = included_texts(cfg)
        mark_stale(store, STATS_DIR)  # killed while it writes, a rerun with the recorded options must not skip it
        write_texts(allt, out)
        x = EmbeddingCache(store.root, spec, dtype=cfg.embedding.cache_dtype).load(texts, texts["text_clean"].tolist())
        levels, refs = suite_levels(suite)
        files, secs = analyse_embeddings(
            x, texts, out / spec.name, levels=levels, refs=refs, n_boot=cfg.statistics.n_boot, n_perm=h.n_perm,
            seed=cfg.statistics.seed, backend=cfg.statistics.backend, top_k=h.top_k, alpha=h.alpha,
            cell_order=[tuple(p.meta[k] for k in FACTORS) for p in suite],
            selection={"target": target_of(cfg), "refusal": cfg.homogeneity.refusal},
        )
        n_pairs = int(pd.read_csv(out / spec.name / "cells.csv")["n_pairs"].sum())
        mark_current(store, STATS_DIR, fp, {"embedder": spec.name, "texts": len(texts), "generated": len(allt),
                                            "refusals": int(allt["refusal"].sum()), "pairs": n_pairs, "files": files,
                                            "seconds": {k: round(v, 3) for k, v in secs.items()}, **options})
    return StageResult("statistics", "done", time.perf_counter() - t,
                       f"{len(texts)} texts, {n_pairs} pairs, {int(allt['refusal'].sum())} refusals flagged; "
                       f"{len(files)} files in {out / spec.name}")


def stage_report(cfg: RunConfig, store: RunStore, **_: Any):
    from harness.audit.stages import fingerprint, run_report_stage
    from harness.report.homogeneity import build_homogeneity_report

    t = time.perf_counter()
    fp = fingerprint(store, [STATS_DIR], {"manifest": store.read_manifest().get("config"),
                                          "tables": _tree_listing(store.stage_dir(STATS_DIR))})
    return run_report_stage(store, fp, build_homogeneity_report, t)


RUNNERS: dict[str, Callable[..., Any]] = {
    "generate": stage_generate,
    "embed": stage_embed,
    "statistics": stage_statistics,
    "report": stage_report,
}


def wanted_stages(cfg: RunConfig, stages: list[str] | None) -> list[str]:
    """The homogeneity stages to run, in order. The config's default stage list (the
    laissez-faire one) means all four; a list naming label or identities is an error."""
    if stages is None and list(cfg.stages) == list(STAGES):
        return list(HOMOGENEITY_STAGES)
    wanted = list(stages or cfg.stages)
    unknown = [s for s in wanted if s not in RUNNERS]
    if unknown:
        raise ConfigError(f"stages: {', '.join(unknown)} do not apply to a homogeneity run; "
                          f"choose from {', '.join(HOMOGENEITY_STAGES)}")
    return [s for s in HOMOGENEITY_STAGES if s in wanted]


def run_homogeneity_stages(cfg: RunConfig, stages: list[str] | None = None, *, shard: tuple[int, int] = (0, 1),
                           progress: bool = True, echo: Callable[[str], None] = print) -> list:
    """Run the homogeneity stages of ``cfg`` (see the module docstring)."""
    from harness.audit.stages import check_run_config

    wanted = wanted_stages(cfg, stages)
    if shard != (0, 1) and any(s != "generate" for s in wanted):
        raise ConfigError("--shard applies to generate only on a homogeneity run; run embed, statistics and report once, unsharded")
    if "statistics" in wanted:
        check_kernel_backend(cfg.statistics.backend)  # before generating and embedding, not after
    store = RunStore(cfg.output_dir)
    check_run_config(cfg, store)
    results = []
    for stage in wanted:
        r = RUNNERS[stage](cfg, store, shard=shard, progress=progress)
        echo(f"[{stage}] {r.status} in {r.seconds:.1f}s" + (f": {r.detail}" if r.detail else ""))
        results.append(r)
    return results


__all__ = ["HOMOGENEITY_STAGES", "check_homogeneity", "embedder_spec", "included_texts", "is_homogeneity",
           "run_homogeneity_stages", "wanted_stages"]
