"""Whether the GPU labeller's host work scales with processes on this machine.

    python benchmarks/host_scaling.py --model-dir DIR [--workers 1,4,8,15] [--seconds 6] [--name-table FILE]

For each W, W independent processes start together and each, for ``--seconds``, tokenises and decodes the dev
stories in batches of ``--batch-size`` in its own process, as a worker of the GPU layout does, but with nothing
sent between processes (the model's real probabilities of each story are computed once, first, and every process
reads its own copy). Then the same W processes run a pure-Python loop. Printed per W (JSON lines): the mean and
lowest stories/s of a process, the loop's iterations/s per process relative to W = 1, and ``all_at_once``: the share
of a process's timed work during which all W were at it (near 1; far less where they did not run together).

If a process's stories/s fall as W grows while the layout moves nothing between them, the machine's cores slow one
another (shared caches, memory, clock limits), and the GPU layout's worker count cannot buy the rest; if they hold,
what the layout loses (``labelling.py --host-layout``) is its own (transfers, the order of its tasks).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import pickle
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _host_work(state_file: str, seconds: float, batch_size: int, start, out) -> None:
    """One process: tokenise and decode the stories in batches until ``seconds`` have passed."""
    from transformers import AutoTokenizer

    from harness.labelling import role_agent
    from harness.labelling.encoder import _encode_many

    with open(state_file, "rb") as f:
        tokenizer_dir, decoder, stories, probs = pickle.load(f)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    if decoder.action_check:
        role_agent.load()

    def one_pass(limit: float) -> int:
        done = 0
        for k in range(0, len(stories), batch_size):
            batch = stories[k:k + batch_size]
            enc = _encode_many(tok, batch, None, decoder.max_length)
            decoder.decode_many(batch, enc, [probs[k + i][: len(e.input_ids)] for i, e in enumerate(enc)])
            done += len(batch)
            if time.perf_counter() > limit:
                break
        return done

    one_pass(float("inf"))  # warm: every word's pieces remembered, spaCy loaded
    start.wait()
    t0, began = time.perf_counter(), time.monotonic()  # (monotonic: one clock for every process of the host)
    n = 0
    while time.perf_counter() - t0 < seconds:
        n += one_pass(t0 + seconds)
    work, ended = n / (time.perf_counter() - t0), time.monotonic()
    start.wait()
    t0, i, x = time.perf_counter(), 0, 0
    while time.perf_counter() - t0 < seconds / 2:
        for j in range(10_000):
            x += j * j % 7
        i += 10_000
    out.put((work, i / (time.perf_counter() - t0), began, ended))


def scaling(model_dir, stories, workers: list[int], seconds: float, batch_size: int, **labeller_kwargs) -> list[dict]:
    """One row per W of ``workers``: the host work's stories/s per process with W processes at once, and the
    Python loop's iterations/s per process relative to W = 1 (which ``workers`` must hold)."""
    if 1 not in workers:
        raise ValueError(f"--workers {','.join(map(str, workers))}: include 1, the baseline of the loop's rate")
    from harness.labelling import get_labeller
    from harness.labelling.encoder import _encode_many

    lab = get_labeller("encoder", path=model_dir, workers=0, **labeller_kwargs)
    enc = _encode_many(lab.tokenizer, stories, None, lab.max_length)
    probs = [p for k in range(0, len(enc), 64) for p in lab._probs(enc[k:k + 64])]
    state = Path(tempfile.mkdtemp(prefix="host-scaling-")) / "state.pkl"
    state.write_bytes(pickle.dumps((str(lab.path / "encoder"), lab.decoder, stories, probs)))
    ctx = mp.get_context("spawn")
    rows = []
    for w in workers:
        start, out = ctx.Barrier(w), ctx.Queue()
        procs = [ctx.Process(target=_host_work, args=(str(state), seconds, batch_size, start, out)) for _ in range(w)]
        for p in procs:
            p.start()
        res = [out.get() for _ in procs]
        for p in procs:
            p.join()
        work = [r[0] for r in res]
        span = sum(r[3] - r[2] for r in res) / w
        rows.append({"processes": w, "stories_per_s_per_process": sum(work) / w, "lowest": min(work),
                     "all_processes_per_s": sum(work), "python_loop": sum(r[1] for r in res) / w,
                     # the share of a process's timed work during which all W ran it: near 1 where they ran at once
                     "all_at_once": max(0.0, min(r[3] for r in res) - max(r[2] for r in res)) / span})
    loop1 = next(r["python_loop"] for r in rows if r["processes"] == 1)
    for r in rows:
        r["python_loop_vs_one_process"] = r.pop("python_loop") / loop1
    state.unlink()
    state.parent.rmdir()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", type=Path, default=ROOT.parent / "shared" / "data" / "laissez_faire_audit_dev.jsonl")
    ap.add_argument("--model-dir", type=Path, default=None, help="encoder weights (default: the user cache)")
    ap.add_argument("--name-table", type=Path, default=None)
    ap.add_argument("--workers", default="1,4,8,15")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from harness.labelling.data import load_gold

    stories = [g.story for g in load_gold(args.dev) if g.story.text]
    try:
        workers = [int(x) for x in args.workers.split(",")]
    except ValueError:
        ap.error(f"--workers: whole numbers of processes, comma-separated, got {args.workers!r}")
    if 1 not in workers:
        ap.error(f"--workers {args.workers}: include 1, the baseline of the loop's rate")
    rows = scaling(args.model_dir, stories, workers, args.seconds, args.batch_size, name_table=args.name_table)
    from _results import machine_description

    machine = machine_description()
    print(json.dumps({"machine": machine}), flush=True)
    for row in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
