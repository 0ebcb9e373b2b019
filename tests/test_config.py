import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import load_config
from harness.errors import ConfigError
from harness.generation.base import GenParams

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_configs_validate(monkeypatch, tmp_path):
    cfg = load_config(ROOT / "configs" / "smoke.yaml")
    assert cfg.model.backend == "vllm" and cfg.model.path == "smollm2-135m"
    assert cfg.sampling.to_params() == GenParams(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=160)
    # The replication config resolves its preset through include: and ${HARNESS_MODEL_DIR}.
    (tmp_path / "Meta-Llama-3.1-8B-Instruct").mkdir()
    (tmp_path / "Meta-Llama-3.1-8B-Instruct" / "config.json").write_text("{}")
    monkeypatch.setenv("HARNESS_MODEL_DIR", str(tmp_path))
    rep = load_config(ROOT / "configs" / "laissez_faire_replication.yaml")
    assert rep.samples_per_prompt == 1000
    assert rep.model.path == f"{tmp_path}/Meta-Llama-3.1-8B-Instruct"
    assert rep.model.dtype == "bfloat16"


@pytest.mark.parametrize(
    "body, pattern",
    [
        ("model: {backend: vllm, path: smollm2-135m}\nsampels_per_prompt: 3\n", r"unknown key 'sampels_per_prompt'"),
        ("model: {backend: vllm, path: smollm2-135m}\nsampling: {top_p: 1.5}\n", r"field 'sampling.top_p'"),
        ("model: {backend: vllm, path: smollm2-135m}\nsamples_per_prompt: lots\n", r"field 'samples_per_prompt'.*valid integer"),
        ("model: {backend: llamafile, path: smollm2-135m}\n", r"field 'model.backend': unknown backend 'llamafile'; choose one of openai, transformers, vllm"),
        ("model: {backend: vllm, path: /no/such/model}\n", r"model.path: '/no/such/model' does not exist"),
        ("model: {backend: openai, path: m}\n", r"'model.base_url' is required"),
        # a field its backend does not read would do nothing: refused, naming the backends that read it
        ("model: {backend: vllm, path: smollm2-135m, device: cuda}\n",
         r"model\.device: the vllm backend does not read it \(vLLM places the model itself\); remove it, or use "
         r"backend transformers$"),
        ("model: {backend: vllm, path: smollm2-135m, base_url: 'http://127.0.0.1:8000/v1'}\n",
         r"model\.base_url: the vllm backend does not read it .*; remove it, or use backend openai$"),
        ("model: {backend: openai, path: m, base_url: 'http://127.0.0.1:8000/v1', dtype: bfloat16}\n",
         r"model\.dtype: the openai backend does not read it \(the server chose it\); remove it, or use backend "
         r"transformers or vllm$"),
        ("model: {backend: transformers, path: smollm2-135m, concurrency: 4}\n",
         r"model\.concurrency: the transformers backend does not read it .*or use backend openai$"),
        ("sampling: {temperature: 1}\n", r"missing required field 'model'"),
        ("model: [1, 2\n", r"invalid YAML at line"),
        ("model: {backend: vllm, path: smollm2-135m}\nsuite: nope\n",
         r"field 'suite': unknown suite 'nope'; choose one of .*laissez-faire"),
        ("model: {backend: vllm, path: smollm2-135m}\nwording: tabloid\n",
         r"field 'wording': .*one of released, paper, got 'tabloid'; use one of those"),
        ("model: {backend: vllm, path: smollm2-135m}\nprompts: [learning-neutral-01, nope-99]\n",
         r"field 'prompts': unknown prompt id\(s\) 'nope-99' in suite laissez-faire; list the ids with `harness prompts list"),
    ],
)
def test_bad_configs_name_file_field_and_fix(tmp_path, body, pattern):
    p = write(tmp_path, body)
    with pytest.raises(ConfigError, match=pattern) as e:
        load_config(p)
    assert str(p) in str(e.value)
    assert "\n" not in str(e.value)


def test_a_config_that_cannot_be_read_as_text_or_repeats_a_key_is_named_in_one_line(tmp_path):
    """A directory, a file that is not UTF-8 or a key written twice (which YAML would read as its last value,
    silently) stop in one line naming the file; a merge key ("<<: *defaults") still works."""
    folder = tmp_path / "folder"
    folder.mkdir()
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("model: {backend: vllm, path: smollm2-135m}\nname: caf\xe9\n".encode("latin-1"))
    twice = write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\nseed: 0\nseed: 1\n", "twice.yaml")
    nested = write(tmp_path, "model: {backend: vllm, path: smollm2-135m, path: other}\n", "nested.yaml")
    for path, pattern in ((folder, "a directory, not a config file; give the path of a YAML file"),
                          (latin, r"not UTF-8 text \(at byte offset 52\); save the config as UTF-8"),
                          (twice, r"key 'seed' is written twice in one mapping \(line 3\); keep one of them"),
                          (nested, r"key 'path' is written twice in one mapping \(line 1\)")):
        with pytest.raises(ConfigError, match=pattern) as e:
            load_config(path)
        assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    cfg = load_config(write(tmp_path, "model: &m {backend: vllm, path: smollm2-135m}\nlabel:\n  llm:\n    <<: *m\n"
                                      "    max_model_len: 512\n", "merge.yaml"))
    assert (cfg.label.llm.backend, cfg.label.llm.max_model_len, cfg.model.max_model_len) == ("vllm", 512, 1024)


def test_an_output_dir_where_a_file_stands_is_refused_before_any_work(tmp_path):
    """`harness generate|run -o FILE` (or a folder under a file) stops at the config, in one line, instead of a
    NotADirectoryError when the first shard is written."""
    a_file = tmp_path / "stories.jsonl"
    a_file.write_text("{}\n")
    config = write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\n")
    for out, pattern in ((a_file, rf"field 'output_dir': {a_file} cannot be a run's folder \(a file is there\); "
                                  r"give a folder path \(-o DIR\)$"),
                         (a_file / "run", rf"{a_file / 'run'} cannot be a run's folder \({a_file} above it is a "
                                          r"file\); give a folder path")):
        with pytest.raises(ConfigError, match=pattern) as e:
            load_config(config, {"output_dir": str(out)})
        assert str(e.value).startswith(f"{config}: ")
    assert load_config(config, {"output_dir": str(tmp_path / "new" / "run")}).output_dir.endswith("new/run")


def test_a_field_its_backend_does_not_read_passes_at_its_default(tmp_path):
    """Only a value that would change something is refused: a preset written out in full ("device: auto") loads
    with any backend, and every field set is read by the backend that reads it."""
    cfg = load_config(write(tmp_path, "model: {backend: vllm, path: smollm2-135m, device: auto, concurrency: 8, "
                                      "engine_kwargs: {}}\n"))
    assert cfg.model.device == "auto"
    cfg = load_config(write(tmp_path, "model: {backend: transformers, path: smollm2-135m, device: cpu, "
                                      "dtype: float32, max_model_len: 512}\n"))
    assert cfg.model.device == "cpu"
    cfg = load_config(write(tmp_path, "model: {backend: openai, path: m, base_url: 'http://127.0.0.1:8000/v1', "
                                      "concurrency: 4, timeout_s: 5, max_retries: 0}\n"))
    assert cfg.model.concurrency == 4


def test_gguf_refused_for_vllm(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match="vLLM cannot read the GGUF"):
        load_config(write(tmp_path, f"model: {{backend: vllm, path: {gguf}}}\n"))


def test_unset_environment_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match=r"\$\{NOT_SET_ANYWHERE\} but NOT_SET_ANYWHERE is not set"):
        load_config(write(tmp_path, "model: {backend: vllm, path: '${NOT_SET_ANYWHERE}/x'}\n"))


def test_include_and_overrides(tmp_path):
    write(tmp_path, "model: {backend: transformers, path: smollm2-135m, batch_size: 4}\n", "preset.yaml")
    p = write(tmp_path, "include: preset.yaml\nmodel: {batch_size: 8}\nsamples_per_prompt: 3\n")
    cfg = load_config(p, {"seed": 7, "model.chat_template": False})
    assert (cfg.model.backend, cfg.model.batch_size, cfg.samples_per_prompt, cfg.seed, cfg.model.chat_template) == (
        "transformers", 8, 3, 7, False)


@pytest.mark.parametrize("kw, msg", [({"top_p": 0.0}, "top_p must be in"), ({"temperature": -1}, "temperature"), ({"max_tokens": 0}, "max_new_tokens")])
def test_gen_params_validate(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        GenParams(**kw)
    assert GenParams(top_k=0).top_k == -1 and GenParams(stop="END").stop == ("END",)


def test_cli_exits_nonzero_with_one_line(tmp_path):
    p = write(tmp_path, "model: {backend: vllm, path: smollm2-135m}\nbogus: 1\n")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "generate", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {p}: unknown key 'bogus'; remove it or check its spelling"]
