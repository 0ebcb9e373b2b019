"""How long a soup of the encoder labeller takes to train on this CPU: its members one after the other, with
every usable CPU's thread in each (``harness label train --seed 0 --seed 1``), against the members at once, a
process and a thread each (``--jobs 2``), in one run.

    python benchmarks/soup_training.py [--epochs 2] [--seeds 0,1] [--extra FILE ...] [--limit N] [--json F]

Both layouts train the same members (the project's own training stories in ``harness/data/labelling``,
plus ``--extra`` files) from the same seeds for ``--epochs`` epochs into temporary directories; the wall
time of each, the ratio, and the last epoch's loss of every member (the layouts round alike but not to
the bit: their thread counts differ) are written to section ``soup-training`` of ``RESULTS.md``. A full
soup (16 epochs) scales with the epochs; the ratio is what the layout is worth.
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

from _results import machine_description, write_section  # noqa: E402


def run(files: list[Path], seeds: list[int], epochs: int, jobs: int, limit: int | None) -> dict:
    """Train the soup of ``seeds`` with ``jobs`` members at once (1: in turn, every usable CPU's thread each)."""
    import torch

    from harness.labelling.encoder import read_model_meta, usable_cpus
    from harness.labelling.training import train_soup

    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "soup"
        t0 = time.perf_counter()
        try:
            rep = train_soup(files, seeds, out_dir=out, epochs=epochs, limit=limit, jobs=jobs, device="cpu",
                             threads=None if jobs > 1 else usable_cpus())
        finally:
            torch.set_num_threads(threads)
        wall = time.perf_counter() - t0
        losses = [read_model_meta(out / "members" / f"seed-{s}")["report"]["final_loss"] for s in seeds]
    return {"jobs": jobs, "seconds": round(wall, 1), "stories": rep.stories, "epochs": rep.epochs,
            "final_losses": losses}


def report(alone: dict, together: dict, seeds: list[int], machine: str) -> str:
    """The section's markdown: both layouts, their ratio, and the members' losses."""
    ratio = alone["seconds"] / together["seconds"]
    lines = [
        "## Soup training: members in turn vs at once (`benchmarks/soup_training.py`)", "",
        f"Machine: {machine}.", "",
        f"A soup of seeds {', '.join(map(str, seeds))}, {alone['stories']} training stories, {alone['epochs']} "
        f"epochs per member, float32 on the CPU.", "",
        "| layout | wall s | last-epoch loss per member |", "|---|---|---|",
        f"| in turn, every usable CPU's thread each (`--seed ...`) | {alone['seconds']} | "
        f"{', '.join(f'{x:.4f}' for x in alone['final_losses'])} |",
        f"| at once, a process and a thread each (`--jobs {together['jobs']}`) | {together['seconds']} | "
        f"{', '.join(f'{x:.4f}' for x in together['final_losses'])} |", "",
        f"At once vs in turn: **{ratio:.2f}x** the speed ({'faster' if ratio > 1 else 'not faster'} in this run).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2, help="epochs per member")
    ap.add_argument("--seeds", default="0,1", help="comma list: the soup's members")
    ap.add_argument("--extra", type=Path, action="append", default=[], help="more training JSONL (e.g. train150)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N training stories (quick checks)")
    ap.add_argument("--no-write", action="store_true", help="print, leave RESULTS.md alone")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from harness.labelling.data import builtin_training_files

    seeds = [int(s) for s in args.seeds.split(",")]
    files = list(builtin_training_files()) + list(args.extra)
    alone = run(files, seeds, args.epochs, 1, args.limit)
    together = run(files, seeds, args.epochs, len(seeds), args.limit)
    text = report(alone, together, seeds, machine_description())
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"in_turn": alone, "at_once": together}, indent=2))
    if not args.no_write:
        write_section("soup-training", text)


if __name__ == "__main__":
    main()
