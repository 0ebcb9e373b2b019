"""What the per-epoch training checkpoint costs, as a share of the epoch it follows, in one run.

    python benchmarks/training_checkpoint.py [--epochs 2] [--limit N] [--extra ../shared/data/laissez_faire_train150.jsonl]

Trains the encoder labeller (``harness.labelling.training.train_encoder``, the default base) on the project's own
stories (plus ``--extra``) into a temporary folder, timing each checkpoint write (``_save_checkpoint``: weights,
optimiser, schedule, generators) against the mean epoch. Prints JSON; nothing is written to ``RESULTS.md``
(section labelling-layers quotes it by hand).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> dict:
    import harness.labelling.training as training
    from harness.labelling.data import builtin_training_files

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2, help="at least 2: the last epoch writes no checkpoint")
    ap.add_argument("--limit", type=int, default=None, help="stories (default: all)")
    ap.add_argument("--extra", type=Path, action="append", default=[], help="more training JSONL")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.epochs < 2:
        ap.error("--epochs must be at least 2")
    saves: list[tuple[float, int]] = []
    real = training._save_checkpoint

    def timed(path: Path, state: dict) -> None:
        t0 = time.perf_counter()
        real(path, state)
        if not path.exists():  # the writer warns and goes on (a full disk, say); a time without a file is no figure
            raise SystemExit(f"{path}: the checkpoint was not written (see the warning above); free space in "
                             f"{tempfile.gettempdir()} or set TMPDIR to a folder that has some, and rerun")
        saves.append((time.perf_counter() - t0, path.stat().st_size))

    training._save_checkpoint = timed
    try:
        with tempfile.TemporaryDirectory() as d:
            rep = training.train_encoder(builtin_training_files() + args.extra, out_dir=d, epochs=args.epochs,
                                         limit=args.limit, seed=0, threads=args.threads)
    finally:
        training._save_checkpoint = real
    epoch = rep.seconds / rep.epochs  # the epochs' time includes their checkpoints
    save = sum(s for s, _ in saves) / len(saves)
    out = {"stories": rep.stories, "epochs": rep.epochs, "epoch_s": round(epoch, 2), "checkpoint_s": round(save, 3),
           "checkpoint_mib": round(saves[0][1] / 2**20, 1), "checkpoint_share_of_epoch": round(save / epoch, 4)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
