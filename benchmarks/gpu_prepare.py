"""Fill ``.gpu/`` with what ``benchmarks/gpu.sh`` reads on a lent GPU machine, which reaches no model hub
and receives at most 64 MiB of ignored files (the device tool's ``carry``):

    python benchmarks/gpu_prepare.py [--labeller DIR] [--mpnet DIR]

- ``.gpu/laissez_faire_audit_dev.jsonl``: the dev stories (the labeller benchmark's corpus);
- ``.gpu/labeller``: the trained default labeller (MiniLM-L6) with its encoder weights in fp16 (45 MB);
- ``.gpu/labeller-mpnet``: an MPNet-base labeller's settings and tokenizer without weights (0.7 MB;
  its 440 MB of weights cannot travel), for ``--random-weights``;
- ``.gpu/tok``: SmolLM2's tokenizer, for the generation benchmark's randomly initialised models.

Then carry ``.gpu`` (and ``.whl`` when the GPU image lacks a pure-Python dependency) and run
``bash benchmarks/gpu.sh OUT labeller,labeller-mpnet``. Nothing here is committed (``.gpu/`` is ignored).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fp16_copy(src: Path, dst: Path) -> None:
    """A trained labeller directory with its encoder weights stored in fp16 (the GPU runs fp16)."""
    import torch
    from transformers import AutoModel

    if not (src / "meta.json").is_file():
        raise SystemExit(f"{src}: no trained labeller there (meta.json missing); train one with "
                         f"`harness label train` or pass --labeller DIR")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    AutoModel.from_pretrained(str(src / "encoder"), dtype=torch.float16).save_pretrained(str(dst / "encoder"))


def skeleton_copy(src: Path, dst: Path) -> None:
    """A labeller directory without weights: settings, encoder config and tokenizer files."""
    if not (src / "meta.json").is_file() or not (src / "encoder" / "config.json").is_file():
        raise SystemExit(f"{src}: needs meta.json and encoder/config.json (copy them and the tokenizer files "
                         f"from a labeller trained with `harness label train`)")
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "encoder").mkdir(parents=True)
    shutil.copy(src / "meta.json", dst / "meta.json")
    for f in (src / "encoder").iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt"):
            shutil.copy(f, dst / "encoder" / f.name)


def main() -> None:
    from transformers import AutoTokenizer

    from harness.labelling.encoder import default_model_dir
    from harness.models import embedded, offline_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu")
    ap.add_argument("--dev", type=Path, default=ROOT.parent / "shared" / "data" / "laissez_faire_audit_dev.jsonl")
    ap.add_argument("--labeller", type=Path, default=None, help="trained default labeller (default: the user cache)")
    ap.add_argument("--mpnet", type=Path, default=None,
                    help="a labeller trained with --base mpnet (default: the cache's encoder-mpnet, skipped if absent)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.dev.is_file():
        raise SystemExit(f"{args.dev}: dev stories not found; pass --dev FILE")
    shutil.copyfile(args.dev, args.out / args.dev.name)
    fp16_copy(args.labeller or default_model_dir(), args.out / "labeller")
    mpnet = args.mpnet or default_model_dir("encoder-mpnet")
    if args.mpnet or (mpnet / "meta.json").is_file():
        skeleton_copy(mpnet, args.out / "labeller-mpnet")
    else:
        print(f"no MPNet labeller at {mpnet}: .gpu/labeller-mpnet not written")
    model = embedded("smollm2-135m")
    offline_env()
    AutoTokenizer.from_pretrained(str(model.package_dir()), gguf_file=model.gguf_file).save_pretrained(
        str(args.out / "tok"))
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {size / 2**20:.1f} MiB (carry limit 64 MiB)")


if __name__ == "__main__":
    main()
