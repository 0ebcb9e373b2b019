"""The generation benchmark's bookkeeping, without engines: the raw baseline gets exactly the
pipeline's sampling settings, and the report states the target verdict per backend."""

from __future__ import annotations

import pytest
import torch

from harness import bench
from harness.config import parse_config
from harness.generation.base import GenParams


class _Tok:
    pad_token_id = 0

    def __call__(self, texts, **kw):
        ids = torch.ones(len(texts), 5, dtype=torch.long)

        class Enc(dict):
            def to(self, device):
                return self

        return Enc(input_ids=ids, attention_mask=torch.ones_like(ids))


class _Model:
    def __init__(self):
        self.calls = []

    def generate(self, **kw):
        self.calls.append(kw)
        ids = kw["input_ids"]
        return torch.cat([ids, torch.full((ids.shape[0], 3), 7)], dim=1)


class _Backend:
    batch_size, device, max_model_len = 2, "cpu", 512

    def __init__(self):
        self.tokenizer, self.model = _Tok(), _Model()

    def _eos_ids(self):
        return {0}  # end of sequence is the pad token, as in SmolLM2


def test_raw_transformers_baseline_sets_every_sampling_knob_from_the_pipeline_params():
    cfg = parse_config({"model": {"path": "smollm2-135m"}, "sampling": {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 12}})
    params = cfg.sampling.to_params()  # what the pipeline passes its backend
    b = _Backend()
    _, tokens = bench._raw(b, "transformers", ["a", "b", "c"], [1, 2, 3], params)
    assert tokens == 9 and len(b.model.calls) == 2
    for kw in b.model.calls:
        # top_k=None would fall back to the model's generation_config (top_k=50 in many models)
        assert (kw["do_sample"], kw["temperature"], kw["top_p"], kw["top_k"], kw["max_new_tokens"]) == (True, 0.7, 0.9, 0, 12)
    b2 = _Backend()
    bench._raw(b2, "transformers", ["a"], [1], GenParams(top_k=40, max_tokens=5))
    assert b2.model.calls[0]["top_k"] == 40


def test_raw_transformers_baseline_counts_no_padding_and_caps_new_tokens_as_the_backend():
    """A reply that ends early is padded to its batch's longest: the padding is no output token (counted, the raw
    side's tokens/s grew), its end-of-sequence token is, as the backend counts it (where pad is EOS, a count of
    tokens other than pad missed it), and the call ends a reply on the backend's EOS tokens; where a prompt nears
    max_model_len the new tokens are capped as the backend caps them (at least 1); and stop strings, which the raw
    call has none of, are refused rather than timed without them."""

    class Padded(_Model):
        def generate(self, **kw):
            self.calls.append(kw)
            ids = kw["input_ids"]
            return torch.cat([ids, torch.tensor([[7, 7, 7], [7, 0, 0]])[: ids.shape[0]]], dim=1)

    b = _Backend()
    b.model = Padded()
    _, tokens = bench._raw(b, "transformers", ["a", "b", "c"], [1, 2, 3], GenParams(max_tokens=12))
    assert tokens == 3 + 2 + 3  # batches [a, b] and [c]; b's reply is 7 and its EOS
    assert all(kw["eos_token_id"] == [0] for kw in b.model.calls)
    for max_model_len, capped in ((8, 3), (5, 1), (4, 1)):  # the prompts are 5 tokens
        b = _Backend()
        b.max_model_len = max_model_len
        bench._raw(b, "transformers", ["a"], [1], GenParams(max_tokens=12))
        assert b.model.calls[0]["max_new_tokens"] == capped, max_model_len
    with pytest.raises(ValueError, match="the raw transformers baseline has no stop strings"):
        bench._raw(_Backend(), "transformers", ["a"], [1], GenParams(stop=("THE END",)))


def test_raw_vllm_baseline_gives_each_request_its_seed_and_every_sampling_knob(monkeypatch):
    """vLLM's side: one SamplingParams per prompt, with that prompt's seed (the pipeline seeds each request) and
    the pipeline's temperature, top_p, top_k, max_tokens and stop strings; its tokens are the outputs' token ids."""
    import sys
    from types import ModuleType, SimpleNamespace

    vllm = ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", vllm)

    class LLM:
        def generate(self, prompts, sps, use_tqdm):
            self.seen = (prompts, sps)
            return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1] * (i + 2))]) for i in range(len(prompts))]

    b = SimpleNamespace(llm=LLM())
    params = GenParams(temperature=0.7, top_p=0.9, top_k=40, max_tokens=12, stop=("THE END",))
    _, tokens = bench._raw(b, "vllm", ["a", "b"], [11, 12], params)
    assert tokens == 2 + 3
    assert b.llm.seen == (["a", "b"], [dict(n=1, temperature=0.7, top_p=0.9, top_k=40, max_tokens=12,
                                            stop=["THE END"], seed=s) for s in (11, 12)])
    bench._raw(b, "vllm", ["a"], [5], GenParams())
    assert b.llm.seen[1] == [dict(n=1, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=200, stop=None, seed=5)]

def test_report_states_the_target_verdict_and_the_missing_gpu(monkeypatch, capsys):
    fake = {
        "vllm": [bench.Measurement("vllm", "raw", 32, 8.0, 2000), bench.Measurement("vllm", "pipeline", 32, 8.1, 2000)],
        "transformers": [bench.Measurement("transformers", "raw", 32, 16.0, 2000),
                         bench.Measurement("transformers", "pipeline", 32, 17.6, 2000)],
    }
    monkeypatch.setattr(bench, "measure", lambda cfg, samples, max_new, repeats: fake[cfg.backend])
    monkeypatch.setattr("harness.provenance.gpu_names", lambda: [])
    bench.run_generation_benchmark(write=False, repeats=5)
    out = capsys.readouterr().out
    assert "- vllm: 98.8% of raw, target met." in out
    assert "- transformers: 90.9% of raw, target MISSED." in out
    assert "GPU (Llama-class) figures: not measured; this session had no GPU" in out
    assert "median of 5 alternating repeats" in out
    # the table: seconds, stories/s, output tokens/s, and pipeline / raw in the pipeline's row
    assert "| vllm | raw | 32 | 8.00 | 4.00 | 250.0 |  |" in out
    assert "| vllm | pipeline | 32 | 8.10 | 3.95 | 246.9 | 0.988 |" in out
    assert "| transformers | pipeline | 32 | 17.60 | 1.82 | 113.6 | 0.909 |" in out
    assert "vLLM / transformers (pipeline, output tokens/s): 2.17x" in out
    # a pipeline at exactly the target meets it
    fake["transformers"] = [bench.Measurement("transformers", "raw", 19, 19.0, 1900),
                            bench.Measurement("transformers", "pipeline", 19, 20.0, 1900)]
    bench.run_generation_benchmark(samples=19, backends=["transformers"], write=False)
    out = capsys.readouterr().out
    assert "- transformers: 95.0% of raw, target met." in out and "vLLM / transformers" not in out


def test_bench_generate_refuses_an_unknown_backend_or_an_empty_workload_before_loading(monkeypatch):
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.errors import ConfigError

    monkeypatch.setattr(bench, "run_generation_benchmark", lambda **k: (_ for _ in ()).throw(AssertionError("ran")))
    for given in ("bogus", "vllm,openai", " , "):
        r = CliRunner().invoke(app, ["bench", "generate", "--backends", given, "--no-write"])
        assert isinstance(r.exception, ConfigError), r.output
        assert str(r.exception).startswith(f"--backends {given!r}: name one or more of vllm, transformers")
    seen = {}
    monkeypatch.setattr(bench, "run_generation_benchmark", lambda **k: seen.update(k))
    assert CliRunner().invoke(app, ["bench", "generate", "--backends", " transformers, vllm", "--no-write"]).exit_code == 0
    assert seen["backends"] == ["transformers", "vllm"]
    # printed only, unless asked: a benchmark on a cluster node rewrote the checkout's RESULTS.md by default
    assert CliRunner().invoke(app, ["bench", "generate"]).exit_code == 0 and seen["write"] is False
    assert CliRunner().invoke(app, ["bench", "generate", "--write"]).exit_code == 0 and seen["write"] is True
    for option in ("--samples", "--max-new-tokens"):
        r = CliRunner().invoke(app, ["bench", "generate", option, "0", "--no-write"])
        assert r.exit_code == 2 and option in r.output
    # 120 stories timed 100 (one of each of the 100 prompts), labelled 120
    r = CliRunner().invoke(app, ["bench", "generate", "--samples", "120", "--no-write"])
    assert isinstance(r.exception, ConfigError) and str(r.exception).startswith(
        "--samples 120: give at most 100 (one story per prompt of the laissez-faire suite) or a multiple of 100")
    assert CliRunner().invoke(app, ["bench", "generate", "--samples", "200", "--no-write"]).exit_code == 0


def test_bench_generate_names_its_model_option_in_the_models_errors(tmp_path):
    """`--model nosuch` said "model.path: 'nosuch' does not exist", a config field the user never wrote, and
    `--model ''` was read as the working directory."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.errors import ConfigError

    r = CliRunner().invoke(app, ["bench", "generate", "--model", str(tmp_path / "nosuch"), "--backends",
                                 "transformers", "--samples", "1", "--no-write"])
    assert isinstance(r.exception, ConfigError) and str(r.exception).startswith("--model: "), r.exception
    r = CliRunner().invoke(app, ["bench", "generate", "--model", "", "--no-write"])
    assert isinstance(r.exception, ConfigError) and str(r.exception).startswith("--model '': give a model folder")


def _fake_measure(monkeypatch, summaries, delay=0.05):
    """measure() with the engine calls replaced: raw takes 1 s, each pipeline call ``delay`` s of wall clock."""
    import time

    from harness.config import ModelConfig
    from harness.pipeline import GenerationSummary

    monkeypatch.setattr(bench, "_raw", lambda *a: (1.0, 30))
    monkeypatch.setattr(bench, "render_prompt", lambda tok, text, template: text)
    calls = iter(summaries)

    def generate_run(cfg, backend, progress):
        time.sleep(delay)
        generated, errors = next(calls)
        return GenerationSummary(Path("."), generated, 0, generated, errors, 0.001, 30, generated,
                                 first_error="HTTP 500" if errors else None)

    from pathlib import Path

    monkeypatch.setattr(bench, "generate_run", generate_run)
    return ModelConfig(backend="transformers", path="smollm2-135m")


def test_pipeline_is_timed_by_the_callers_clock_and_counts_only_stories(monkeypatch):
    """generate_run's own `seconds` starts at its first request (70-100 ms a call were left out of the
    pipeline's time); a failed request is no story."""
    cfg = _fake_measure(monkeypatch, [(3, 0)] * 3)
    raw, pipe = bench.measure(cfg, 3, 8, repeats=3, backend=_Backend())
    assert raw.seconds == 1.0 and pipe.stories == 3
    assert pipe.seconds >= 0.05  # the summary said 0.001 s
    from harness.errors import BackendError

    cfg = _fake_measure(monkeypatch, [(3, 1)])
    try:
        bench.measure(cfg, 3, 8, repeats=1, backend=_Backend())
    except BackendError as e:
        assert str(e).startswith("1 of 3 requests failed (the first: HTTP 500)")
    else:
        raise AssertionError("a benchmark with a failed request gave a rate")


def test_the_raw_baseline_times_the_pipelines_own_workload(monkeypatch):
    """The raw side gets the very prompts (rendered), seeds and GenParams of the stories the pipeline plans (not
    defaults: max_new_tokens 200 timed against 8), warmed up on all of them once, then once per repeat; ``samples``
    above the suite's 100 prompts runs each prompt that many times (100 stories timed, 200 labelled)."""
    from harness.pipeline import plan
    from harness.suites import get_suite

    for samples, prompts in ((3, 3), (200, 100)):
        cfg = _fake_measure(monkeypatch, [(samples, 0)] * 2)
        seen, configs = [], []
        monkeypatch.setattr(bench, "_raw", lambda b, name, *args: seen.append((name, *args)) or (1.0, 30))
        fake_run = bench.generate_run
        monkeypatch.setattr(bench, "generate_run", lambda c, backend, progress: configs.append(c) or fake_run(
            c, backend, progress))
        monkeypatch.setattr(bench, "render_prompt", lambda tok, text, template: f"<rendered>{text}")
        raw, pipe = bench.measure(cfg, samples, 8, repeats=2, backend=_Backend())
        assert raw.stories == samples and len(seen) == 3 and seen[1] == seen[0] and seen[2] == seen[0]
        items = plan(configs[0], get_suite("laissez-faire"))
        assert len(items) == samples and len({it.prompt.id for it in items}) == prompts
        name, rendered, seeds, params = seen[0]
        assert name == "transformers" and rendered == [f"<rendered>{it.prompt.text}" for it in items]
        assert seeds == [it.seed for it in items] and len(set(seeds)) == samples
        assert params == configs[0].sampling.to_params() == GenParams(temperature=1.0, top_p=1.0, max_tokens=8)

def test_median_of_an_even_number_of_repeats_is_the_mean_of_the_middle_two():
    ms = [bench.Measurement("vllm", "raw", 32, s, t) for s, t in ((4.0, 100), (1.0, 90), (3.0, 80), (2.0, 70))]
    m = bench._median(ms)
    assert (m.seconds, m.output_tokens, m.stories) == (2.5, 85, 32)
    assert bench._median(ms[:3]).seconds == 3.0
    # repeats of different workloads have no median (a rate over them would mix two workloads)
    with pytest.raises(ValueError, match=r"repeats timed different workloads: \[31, 32\] stories"):
        bench._median(ms[:2] + [bench.Measurement("vllm", "raw", 31, 2.0, 70)])


def test_writing_a_section_keeps_the_other_sections_and_the_files_mode(benchmark_module, tmp_path):
    """``write_section`` replaced RESULTS.md by a ``mkstemp`` file, whose mode (0600) hid it from other users."""
    import os
    import stat

    results = benchmark_module("_results")
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\nhand-written\n\n<!-- begin a -->\nold\n<!-- end a -->\n\nafter\n")
    os.chmod(path, 0o644)
    results.write_section("a", "new \\1 text", path)
    results.write_section("b", "added", path)
    assert path.read_text() == ("# Benchmark results\n\nhand-written\n\n<!-- begin a -->\nnew \\1 text\n<!-- end a -->"
                                "\n\nafter\n\n<!-- begin b -->\nadded\n<!-- end b -->\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    fresh = tmp_path / "fresh.md"
    results.write_section("a", "x", fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~results._umask()
    assert fresh.read_text().startswith(results.HEADER)  # a new file opens with the title its sections live under


def test_the_gpu_carry_check_counts_the_untracked_files_the_device_tool_carries(benchmark_module, tmp_path):
    """The device tool carries the tracked files and the untracked ones git does not ignore; gpu_prepare.py's 64 MiB
    check counted only the tracked, so a stray untracked file could get the device call refused after it passed."""
    import subprocess

    prep = benchmark_module("gpu_prepare")
    with pytest.raises(RuntimeError, match="git ls-files"):
        prep.carried_bytes(tmp_path)  # not a git checkout
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "tracked.txt").write_bytes(b"x" * 100)
    subprocess.run(["git", "-C", str(tmp_path), "add", ".gitignore", "tracked.txt"], check=True)
    (tmp_path / "untracked.txt").write_bytes(b"y" * 1000)
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big.bin").write_bytes(b"z" * 10_000)
    assert prep.carried_bytes(tmp_path) == 100 + 1000 + len("ignored/\n")


def test_the_gpu_carry_packs_the_stories_and_gpu_sh_unpacks_them(benchmark_module, tmp_path):
    """The dev stories travel xz-compressed (0.16 MB for 0.90: the carry had 0.18 MiB to spare), an earlier plain
    copy is removed so it is not carried too, and gpu.sh's unpacking loop restores the very bytes."""
    import os
    import subprocess
    from pathlib import Path

    prep = benchmark_module("gpu_prepare")
    src = tmp_path / "stories.jsonl"
    src.write_text("".join(f'{{"story": "Story {i} about Maria and her students."}}\n' for i in range(500)))
    out = tmp_path / "remote" / ".gpu"
    out.mkdir(parents=True)
    (out / "stories.jsonl").write_text("stale copy\n")
    prep.pack_jsonl(src, out)
    assert sorted(p.name for p in out.iterdir()) == ["stories.jsonl.xz"]
    assert (out / "stories.jsonl.xz").stat().st_size < src.stat().st_size / 5
    script = (Path(prep.__file__).parent / "gpu.sh").read_text()
    loop = script[script.index("for F in .gpu/*.jsonl.xz"):]
    loop = loop[:loop.index("\ndone\n") + 6]
    for _ in range(2):  # the second pass finds the copy and leaves it
        subprocess.run(["bash", "-c", loop], cwd=out.parent, check=True, env={"PATH": os.environ["PATH"]})
        assert (out / "stories.jsonl").read_bytes() == src.read_bytes()


def test_the_gpu_benchmark_builds_the_shape_on_the_tokenizers_vocabulary_and_reports_pipeline_over_raw(
        benchmark_module, tmp_path, monkeypatch, capsys):
    """generation_gpu.py (run here on the CPU, with a tiny shape): the model's vocabulary is the tokenizer's whole
    length (its added tokens too, or their ids fall outside the embedding), the weights are bf16 while torch's
    default dtype is left as it was, and each batch size's row gives seconds, output tokens/s and pipeline / raw."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    gpu = benchmark_module("generation_gpu")
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")),
                                  unk_token="<unk>", eos_token="</s>", pad_token="</s>")  # </s>: an added token
    tok.save_pretrained(tmp_path / "tok")
    tiny = dict(model_type="llama", hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, tie_word_embeddings=True)
    model, built_tok, n_params = gpu.build(tiny, tmp_path / "tok", tmp_path / "built", device="cpu")
    assert model.config.vocab_size == len(built_tok) == 3 and model.get_input_embeddings().weight.shape == (3, 16)
    assert next(model.parameters()).dtype == torch.bfloat16 and torch.get_default_dtype() == torch.float32
    assert model.generation_config.eos_token_id == model.config.eos_token_id == built_tok.eos_token_id == 2
    assert n_params == sum(p.numel() for p in model.parameters()) and (tmp_path / "built" / "config.json").exists()

    real_build, seen = gpu.build, []
    monkeypatch.setitem(gpu.ARCHS, "tiny", tiny)
    monkeypatch.setattr(gpu, "build", lambda arch, tok_dir, where: real_build(arch, tok_dir, where, device="cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def measure(cfg, samples, max_new, repeats, backend):
        seen.append((cfg.batch_size, backend.batch_size, samples, max_new, repeats))
        return (bench.Measurement("transformers", "raw", 8, 2.0, 800),
                bench.Measurement("transformers", "pipeline", 8, 2.5 * cfg.batch_size / 2, 800))

    monkeypatch.setattr(bench, "measure", measure)
    gpu.main(["--tokenizer", str(tmp_path / "tok"), "--arch", "tiny", "--samples", "8", "--batch-sizes", "2,4",
              "--max-new-tokens", "16", "--out", str(tmp_path / "gpu.md")])
    assert seen == [(2, 2, 8, 16, 1), (4, 4, 8, 16, 1)]
    table = (tmp_path / "gpu.md").read_text()
    assert "| 2 | 8 | 2.00 | 400 | 2.50 | 320 | 0.800 |\n| 4 | 8 | 2.00 | 400 | 5.00 | 160 | 0.400 |" in table
    assert "with the tokenizer's 3-token vocabulary" in table and table in capsys.readouterr().out
