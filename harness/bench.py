"""Generation throughput: the raw engine call vs the harness pipeline around it, per backend.

On the same prompts, seeds and sampling settings, for each backend:
(a) raw: the engine's own batch call (vLLM ``LLM.generate`` with per-request SamplingParams;
    transformers ``model.generate`` with its own sampling), on prompts rendered once;
(b) pipeline: ``harness.pipeline.generate_run`` with the same engine already loaded, i.e.
    planning, seeding, chat templates, Parquet shards, manifest and progress accounting;
and the ratio (b)/(a) (target >= 0.95). Engines load once and are warmed up before timing.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.config import ModelConfig, parse_config
from harness.generation import load_backend
from harness.generation.base import GenParams
from harness.generation.chat import render_prompt
from harness.pipeline import generate_run, plan, raise_for_failed
from harness.suites import get_suite


@dataclass
class Measurement:
    backend: str
    mode: str
    stories: int
    seconds: float
    output_tokens: int

    @property
    def stories_per_s(self) -> float:
        return self.stories / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def _raw(backend, name: str, prompts: list[str], seeds: list[int], params: GenParams) -> tuple[float, int]:
    """The engine's own batch call with exactly the sampling settings of ``params`` (what the
    pipeline passes too): every knob is set explicitly, so no model default leaks into one side."""
    if name == "vllm":
        from vllm import SamplingParams

        sps = [
            SamplingParams(n=1, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
                           max_tokens=params.max_tokens, stop=list(params.stop) or None, seed=s)
            for s in seeds
        ]
        t0 = time.perf_counter()
        outs = backend.llm.generate(prompts, sps, use_tqdm=False)
        return time.perf_counter() - t0, sum(len(o.outputs[0].token_ids) for o in outs)
    import torch

    from harness.generation.hf import first_eos

    if params.stop:
        raise ValueError("the raw transformers baseline has no stop strings; benchmark without them")
    tok, model = backend.tokenizer, backend.model
    eos_ids = backend._eos_ids()  # a reply ends on any of them, as in the backend
    replies = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(prompts), backend.batch_size):
            enc = tok(prompts[i : i + backend.batch_size], return_tensors="pt", padding=True, add_special_tokens=False).to(backend.device)
            prompt_len = enc["input_ids"].shape[1]
            out = model.generate(
                **enc,
                max_new_tokens=min(params.max_tokens, max(1, backend.max_model_len - prompt_len)),  # as the backend
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else 0,  # 0 disables top-k; None would take the model's default
                pad_token_id=tok.pad_token_id,
                eos_token_id=sorted(eos_ids) or None,
            )
            replies.append(out[:, prompt_len:])
    seconds = time.perf_counter() - t0
    # as the backend counts a reply: up to its first end-of-sequence token and that token, none of the padding
    # after it (where pad is EOS, as in SmolLM2, a count of tokens other than pad missed the EOS itself)
    ends = [(first_eos(row, eos_ids), len(row)) for new in replies for row in new.tolist()]
    return seconds, sum(n + (n < length) for n, length in ends)


def measure(model: ModelConfig, samples: int, max_new_tokens: int, repeats: int = 3, backend=None) -> list[Measurement]:
    """Raw engine vs pipeline on ``samples`` stories; ``backend``: one already loaded (kept open)."""
    suite = get_suite("laissez-faire")
    prompt_ids = [p.id for p in suite.prompts][:: max(1, len(suite) // samples)][:samples]
    per_prompt = max(1, samples // len(prompt_ids))
    own = backend is None
    backend = backend or load_backend(model)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def config(i: int):
                return parse_config({
                    "model": model.model_dump(), "prompts": prompt_ids, "samples_per_prompt": per_prompt,
                    "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": max_new_tokens},
                    "output_dir": str(Path(tmp) / f"run{i}"), "shard_rows": 64,
                })
            items = plan(config(0), suite)
            params = config(0).sampling.to_params()  # the pipeline's own settings, for the raw side too
            rendered = [render_prompt(backend.tokenizer, it.prompt.text, model.chat_template) for it in items]
            seeds = [it.seed for it in items]
            # Warm-up on the full workload: the first batches of an engine pay one-off costs.
            _raw(backend, model.backend, rendered, seeds, params)
            raw, pipe = [], []
            for r in range(repeats):  # alternate, so drift on a shared machine hits both modes
                secs, toks = _raw(backend, model.backend, rendered, seeds, params)
                raw.append(Measurement(model.backend, "raw", len(items), secs, toks))
                # The pipeline's clock is the caller's: generate_run's own `seconds` starts at its first request and
                # leaves out what a call pays before it (weights fingerprint, manifest, request building).
                t0 = time.perf_counter()
                s = generate_run(config(r + 1), backend=backend, progress=False)
                secs = time.perf_counter() - t0
                raise_for_failed(s)  # a failed request is no story: a rate over them would flatter the pipeline
                pipe.append(Measurement(model.backend, "pipeline", s.stories, secs, s.output_tokens))
            return [_median(raw), _median(pipe)]
    finally:
        if own:
            backend.close()


def _median(ms: list[Measurement]) -> Measurement:
    """The repeats' median seconds and output tokens (an even count: the mean of the two middle ones)."""
    if len({m.stories for m in ms}) != 1:
        raise ValueError(f"repeats timed different workloads: {sorted({m.stories for m in ms})} stories")
    return Measurement(ms[0].backend, ms[0].mode, ms[0].stories, statistics.median(m.seconds for m in ms),
                       round(statistics.median(m.output_tokens for m in ms)))


TARGET = 0.95  # the pipeline keeps at least this share of the raw backend's stories/s
#: The backends the benchmark loads on this machine.
LOCAL_BACKENDS = ("vllm", "transformers")


def check_samples(samples: int) -> None:
    """A ConfigError where ``samples`` stories cannot be drawn evenly from the laissez-faire suite: above its prompts,
    a multiple of them (one sample each of more prompts than it has; 120 timed 100 stories, labelled 120)."""
    from harness.errors import ConfigError

    n = len(get_suite("laissez-faire"))
    if samples > n and samples % n:
        raise ConfigError(f"--samples {samples}: give at most {n} (one story per prompt of the laissez-faire suite) "
                          f"or a multiple of {n} (as many of each), e.g. {samples // n * n} or {(samples // n + 1) * n}")


def run_generation_benchmark(
    *, samples: int = 32, max_new_tokens: int = 64, backends: list[str] = ("vllm", "transformers"),
    model_path: str = "smollm2-135m", repeats: int = 3, write: bool = True,
) -> list[Measurement]:
    from harness.provenance import gpu_names

    check_samples(samples)
    load_before = _load()
    results: list[Measurement] = []
    for b in backends:
        cfg = ModelConfig(backend=b, path=model_path, dtype="auto", batch_size=samples if b == "vllm" else 16, max_model_len=512)
        results += measure(cfg, samples, max_new_tokens, repeats)
    lines = [
        "## Generation throughput (`harness bench generate`)", "",
        f"Machine: {_machine()}; load average {load_before} before and {_load()} after the run (other jobs shared the cores). "
        f"Model: {model_path}; {samples} stories of the laissez-faire suite per row, "
        f"T = 1.0, top_p = 1.0, top_k off, max_new_tokens = {max_new_tokens}, the same GenParams on both sides; "
        f"engines loaded and warmed up on the full workload; median of {repeats} alternating repeats.", "",
        "| backend | mode | stories | seconds | stories/s | output tokens/s | pipeline / raw |",
        "|---|---|---|---|---|---|---|",
    ]
    raw = {m.backend: m for m in results if m.mode == "raw"}
    pipes = {m.backend: m for m in results if m.mode == "pipeline"}
    for m in results:
        ratio = f"{m.stories_per_s / raw[m.backend].stories_per_s:.3f}" if m.mode == "pipeline" else ""
        lines.append(f"| {m.backend} | {m.mode} | {m.stories} | {m.seconds:.2f} | {m.stories_per_s:.2f} | {m.tokens_per_s:.1f} | {ratio} |")
    lines += ["", f"Target: the pipeline keeps >= {TARGET:.0%} of the raw backend's stories/s."]
    for b, m in pipes.items():
        r = m.stories_per_s / raw[b].stories_per_s
        verdict = "met" if r >= TARGET else "MISSED"
        lines.append(f"- {b}: {r:.1%} of raw, target {verdict}.")
    if {"vllm", "transformers"} <= set(pipes):
        lines += ["", f"vLLM / transformers (pipeline, output tokens/s): "
                      f"{pipes['vllm'].tokens_per_s / pipes['transformers'].tokens_per_s:.2f}x"]
    gpus = gpu_names()
    lines += ["", f"GPU figures: measured on {', '.join(gpus)} with {model_path}." if gpus else
              "GPU (Llama-class) figures: not measured; this session had no GPU. On a GPU machine run "
              "`harness bench generate --write --model /path/to/Meta-Llama-3.1-8B-Instruct`."]
    text = "\n".join(lines)
    print(text)
    if write:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
        try:
            from _results import write_section
        except ImportError:
            print("benchmarks/ not found beside the package: RESULTS.md not written")
        else:
            write_section("generation", text)
    return results


def _load() -> str:
    import os

    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def _machine() -> str:
    from harness.provenance import cpu_name, gpu_names
    import os

    gpus = gpu_names()
    return f"{cpu_name()}, {os.cpu_count()} cores, {', '.join(gpus) if gpus else 'no GPU'}"
