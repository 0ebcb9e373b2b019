"""Generation benchmark: raw backend vs harness pipeline, vLLM vs transformers.

    python benchmarks/generation.py [--samples 32] [--max-new-tokens 64] [--backends vllm,transformers]
                                    [--model smollm2-135m] [--repeats 3] [--no-write]

Same as `harness bench generate`; writes its section of benchmarks/RESULTS.md.
"""

import argparse

from harness.bench import run_generation_benchmark
from harness.models import offline_env

if __name__ == "__main__":  # vLLM's engine may spawn processes: keep the guard
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--backends", default="vllm,transformers")
    ap.add_argument("--model", default="smollm2-135m", help="embedded alias or local model directory")
    ap.add_argument("--repeats", type=int, default=3, help="alternating raw/pipeline repeats (median reported)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    offline_env()
    run_generation_benchmark(samples=a.samples, max_new_tokens=a.max_new_tokens, backends=a.backends.split(","),
                             model_path=a.model, repeats=a.repeats, write=not a.no_write)
