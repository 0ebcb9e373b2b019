"""Memory of `harness run`'s label stage against the size of the run.

The label stage used to read every generated story whole (``RunStore.read_stage`` with the texts) and list them as
``StoryInput`` before labelling; it now reads the generations a shard at a time, keeps each story's text hash and
where its row is, and hands the labeller a stream (``harness.audit.labels.label_run``). This benchmark builds runs
of synthetic generations (120-word stories, 5,000 a shard) at two sizes and measures, each in a fresh process, the
growth of peak resident memory of

* ``stage``: ``label_run`` labelling every story with a stand-in labeller (instant, one name and one word per
  role), so the memory is the stage's own, not a model's;
* ``rerun``: ``label_run`` again over the labelled run (nothing to label: the resume check alone);
* ``whole`` (the baseline, in the same run): the stories read whole as the stage read them before, the generations
  with their texts and a ``StoryInput`` list of them.

The per-story cost is the slope between the two sizes, so fixed costs (imports, a window of labels) drop out.

Usage: ``python benchmarks/label_stage_memory.py [--sizes 20000,100000] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_description, write_section  # noqa: E402

SHARD = 5_000
PROMPTS = 50
MODES = ("whole", "stage", "rerun")


def _config(root: Path, n: int):
    from harness.config import parse_config
    from harness.suites import get_suite

    pids = [p.id for p in get_suite("laissez-faire").prompts][:PROMPTS]
    return parse_config({"model": {"backend": "transformers", "path": "smollm2-135m"}, "prompts": pids,
                         "samples_per_prompt": n // PROMPTS, "output_dir": str(root),
                         "label": {"labeller": "rules", "shard_rows": 5_000}})


def build(root: Path, n: int) -> None:
    """``n`` synthetic generations of ``PROMPTS`` prompts in shards of ``SHARD`` rows (``n`` a multiple of
    ``PROMPTS``: ``main`` checks)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.pipeline import GENERATION_SCHEMA, GENERATIONS
    from harness.store import RunStore

    cfg = _config(root, n)
    rng = random.Random(0)
    words = "the a of story student teacher she he they went to class and learned math with her his friend".split()
    d = RunStore(root).stage_dir(GENERATIONS)
    d.mkdir(parents=True)
    rows, k = [], 0
    for idx in range(cfg.samples_per_prompt):
        for pid in cfg.prompts:
            text = " ".join(rng.choice(words) for _ in range(120))
            rows.append({"prompt_id": pid, "sample_idx": idx, "text": text, "text_clean": text, "empty": False,
                         "finish_reason": "stop"})
            k += 1
            if len(rows) == SHARD or k == n:
                pq.write_table(pa.Table.from_pylist(rows, schema=GENERATION_SCHEMA), d / f"gen-0of1-{k:08d}.parquet")
                rows = []


def child(mode: str, root: Path, n: int) -> dict:
    """One measurement in this (fresh) process: peak resident memory growth in MiB and seconds."""
    import gc

    import harness.audit.labels as L
    from harness.labelling.base import CharacterLabel, Labeller, StoryInput, StoryLabels, RoleSpec
    from harness.pipeline import GENERATIONS
    from harness.store import RunStore
    from harness.suites import get_suite

    class Instant(Labeller):
        name = "rules"

        def _label_batch(self, stories):
            return [StoryLabels(s.story_id, tuple(CharacterLabel(r.key, "Ana", ("she",), "ok") for r in s.roles), "ok")
                    for s in stories]

        def info(self):
            return {"labeller": "rules"}

    cfg, store = _config(root, n), RunStore(root)
    prompts = get_suite("laissez-faire").by_id()
    L.make_labeller = lambda cfg, echo=print, **kw: Instant()  # kw: progress
    L.check_labeller = lambda *a, **kw: None  # the stand-in has no weights to record
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    if mode == "whole":
        gens = store.read_stage(GENERATIONS, columns=["prompt_id", "sample_idx", "text_clean", "finish_reason", "error"])
        stories = [StoryInput(f"{pid}#{idx}", text or "", tuple(RoleSpec(r.key, r.description) for r in prompts[pid].roles))
                   for pid, idx, text in zip(gens.prompt_id, gens.sample_idx, gens.text_clean)]
        assert len(stories) == n
    else:
        labelled, total = L.label_run(cfg, store, progress=False)[:2]
        assert (labelled, total) == ((n if mode == "stage" else 0), n), (labelled, total)
    seconds = time.perf_counter() - t0
    return {"mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20000,100000", help="two run sizes (stories), comma-separated")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "ROOT", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), int(args.child[2]))))
        return
    try:
        small, large = (int(s) for s in args.sizes.split(","))
    except ValueError:
        ap.error(f"--sizes: two whole numbers of stories, comma-separated, got {args.sizes!r}")
    if not 0 < small < large:
        ap.error(f"--sizes: the smaller size first, both above 0, got {args.sizes!r} (the slope is taken between them)")
    if small % PROMPTS or large % PROMPTS:
        ap.error(f"--sizes: multiples of {PROMPTS} (the runs sample each of {PROMPTS} prompts alike), "
                 f"got {args.sizes!r}")
    got: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (small, large):
            root = Path(tmp) / f"run-{n}"
            build(root, n)
            for mode in MODES:  # stage before rerun: the rerun reads the labels the stage wrote
                done = subprocess.run([sys.executable, __file__, "--child", mode, str(root), str(n)],
                                      capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"label_stage_memory: the {mode} measurement of {n:,} stories failed:\n{done.stderr}")
                out = done.stdout
                got[mode, n] = json.loads(out.strip().splitlines()[-1])
                print(f"{mode:6s} {n:>8,d} stories: +{got[mode, n]['mib']:.0f} MiB, {got[mode, n]['seconds']:.1f} s",
                      flush=True)
    per_story = {m: (got[m, large]["mib"] - got[m, small]["mib"]) * 2**20 / (large - small) for m in MODES}
    lines = [f"Machine: {machine_description()}. `python benchmarks/label_stage_memory.py --sizes {small},{large}`; "
             f"synthetic runs of 120-word stories in shards of {SHARD:,}, a stand-in labeller, each measurement in a "
             f"fresh process (growth of peak resident memory).", "",
             f"| measured | {small:,} stories | {large:,} stories | per story (slope) |", "|---|---|---|---|"]
    names = {"whole": "baseline: the stories read whole, as the stage did before",
             "stage": "label stage, every story labelled", "rerun": "label stage rerun, nothing left to label"}
    for m in MODES:
        lines.append(f"| {names[m]} | +{got[m, small]['mib']:.0f} MiB | +{got[m, large]['mib']:.0f} MiB | "
                     f"{per_story[m]:,.0f} bytes |")
    lines += ["", f"Per story, the label stage holds {per_story['stage'] / per_story['whole']:.2f}x what reading the "
                  f"stories whole held (the rerun {per_story['rerun'] / per_story['whole']:.2f}x): what is left is "
                  f"each story's text hash and where its row is, which resuming needs."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("label-stage-memory", "## Label stage memory (`benchmarks/label_stage_memory.py`)\n\n" + text)


if __name__ == "__main__":
    main()
