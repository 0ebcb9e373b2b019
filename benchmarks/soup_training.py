"""How long a soup of the encoder labeller takes to train on this CPU: its members one after the other, with
every usable CPU's thread in each (``harness label train --seed 0 --seed 1``), against the members at once, a
process each sharing the usable CPUs' threads (``--jobs 2``; a thread each on 2 cores), both in float32; then the
members at once in bfloat16 (``--precision bfloat16``: torch's autocast, faster on a CPU with AVX512-BF16 or AMX),
in one run.

    python benchmarks/soup_training.py [--epochs 2] [--seeds 0,1] [--extra FILE ...] [--limit N] [--no-bfloat16]
                                       [--json F]

Every run trains the same members (the project's own training stories in ``harness/data/labelling``, plus
``--extra`` files) from the same seeds for ``--epochs`` epochs into temporary directories; the wall time of
each, the ratios, and the last epoch's loss of every member (the layouts round alike but not to the bit: their
thread counts differ) are written to section ``soup-training`` of ``RESULTS.md``. A full soup (16 epochs)
scales with the epochs; the ratios are what the layout and the arithmetic are worth. Whether a bfloat16 soup
labels as well is measured by training one and scoring it (``harness label eval --against``), not here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import machine_description, run_main, seed_list, write_section  # noqa: E402


def run(files: list[Path], seeds: list[int], epochs: int, jobs: int, limit: int | None,
        precision: str = "float32") -> dict:
    """Train the soup of ``seeds`` with ``jobs`` members at once (1: in turn, every usable CPU's thread each; else
    the usable CPUs' threads shared out, as ``harness label train --jobs`` does) in ``precision``."""
    import torch

    from harness.labelling.encoder import read_model_meta, usable_cpus
    from harness.labelling.training import train_soup

    threads = torch.get_num_threads()
    each = usable_cpus() if jobs == 1 else max(1, usable_cpus() // jobs)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "soup"
        t0 = time.perf_counter()
        try:
            rep = train_soup(files, seeds, out_dir=out, epochs=epochs, limit=limit, jobs=jobs, device="cpu",
                             threads=each, precision=precision)
        finally:
            torch.set_num_threads(threads)
        wall = time.perf_counter() - t0
        losses = [read_model_meta(out / "members" / f"seed-{s}")["report"]["final_loss"] for s in seeds]
    return {"jobs": jobs, "threads": each, "precision": precision, "seconds": round(wall, 1), "stories": rep.stories,
            "epochs": rep.epochs, "final_losses": losses}


def _threads(run: dict) -> str:
    """How many threads each member of a run at once had (runs written before it was recorded: one)."""
    n = run.get("threads", 1)
    return "a thread" if n == 1 else f"{n} threads"


def report(alone: dict, together: dict, seeds: list[int], machine: str, bf16: dict | None = None) -> str:
    """The section's markdown: both layouts, their ratio, and the members' losses; with ``bf16`` (the members at
    once in bfloat16) its row and its ratio to float32 at once."""
    ratio = alone["seconds"] / together["seconds"]
    lines = [
        "## Soup training: members in turn vs at once (`benchmarks/soup_training.py`)", "",
        f"Machine: {machine}.", "",
        f"A soup of seeds {', '.join(map(str, seeds))}, {alone['stories']} training stories, {alone['epochs']} "
        f"epochs per member, on the CPU.", "",
        "| layout | wall s | last-epoch loss per member |", "|---|---|---|",
        f"| in turn, every usable CPU's thread each, float32 (`--seed ... --precision float32`) | {alone['seconds']} | "
        f"{', '.join(f'{x:.4f}' for x in alone['final_losses'])} |",
        f"| at once, a process and {_threads(together)} each, float32 (`--jobs {together['jobs']} "
        f"--precision float32`) | "
        f"{together['seconds']} | {', '.join(f'{x:.4f}' for x in together['final_losses'])} |",
    ]
    if bf16 is not None:
        lines.append(f"| at once, a process and {_threads(bf16)} each, bfloat16 (`--jobs {bf16['jobs']} --precision "
                     f"bfloat16`) | {bf16['seconds']} | {', '.join(f'{x:.4f}' for x in bf16['final_losses'])} |")
    lines += ["", f"At once vs in turn: **{ratio:.2f}x** the speed ({'faster' if ratio > 1 else 'not faster'} in this "
                  f"run)."]
    if bf16 is not None:
        faster = together["seconds"] / bf16["seconds"]
        said = "faster" if faster > 1 else "not faster"
        lines.append(f"bfloat16 vs float32, at once: **{faster:.2f}x** the speed ({said} in this run).")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2, help="epochs per member")
    ap.add_argument("--seeds", default="0,1", help="comma list: the soup's members")
    ap.add_argument("--extra", type=Path, action="append", default=[], help="more training JSONL (e.g. train150)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N training stories (quick checks)")
    ap.add_argument("--no-bfloat16", action="store_true", help="leave out the members at once in bfloat16")
    ap.add_argument("--no-write", action="store_true", help="print, leave RESULTS.md alone")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from harness.labelling.data import builtin_training_files

    seeds = seed_list(ap, args.seeds)
    if len(seeds) < 2:  # one seed trains one model, not a soup: its members' losses were not there to read
        ap.error(f"--seeds: a soup needs two seeds or more, got {args.seeds!r}")
    files = list(builtin_training_files()) + list(args.extra)
    alone = run(files, seeds, args.epochs, 1, args.limit)
    together = run(files, seeds, args.epochs, len(seeds), args.limit)
    bf16 = None if args.no_bfloat16 else run(files, seeds, args.epochs, len(seeds), args.limit, "bfloat16")
    text = report(alone, together, seeds, machine_description(), bf16)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"in_turn": alone, "at_once": together, "at_once_bfloat16": bf16}, indent=2))
    if not args.no_write:
        write_section("soup-training", text)


if __name__ == "__main__":
    run_main(main, "soup_training.py")
