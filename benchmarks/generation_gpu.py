"""GPU generation throughput on a real architecture with random weights: raw engine vs pipeline.

    python benchmarks/generation_gpu.py --tokenizer DIR [--arch llama-3-8b] [--samples 256]
                                        [--batch-sizes 64,256] [--max-new-tokens 128] [--out FILE]

No checkpoint can reach the GPU machine, so the model is built from its configuration with
random weights (bf16, on the GPU) and wrapped in the transformers backend
(``TransformersBackend.from_loaded``); the speed of a forward pass does not depend on the weight
values. Random weights almost never emit the end-of-sequence token, so every story runs to
``--max-new-tokens`` (a fixed output length); the table counts the tokens actually generated.
The tokenizer (any chat tokenizer on disk, e.g. SmolLM2's saved with ``save_pretrained``) sets
the vocabulary size, so the embedding and output layers follow it, not the original vocabulary;
the figure says so. Each row is ``harness.bench.measure``: the engine's own batched ``generate``
vs ``generate_run`` (planning, seeded sampling, chat template, Parquet shards, manifest) with the
same sampling settings, warmed up on the full workload first.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_description, write_section  # noqa: E402

#: Published shapes (config.json of the original checkpoints); vocab_size comes from the tokenizer.
ARCHS = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0, rms_norm_eps=1e-5,
                         max_position_embeddings=8192, tie_word_embeddings=True),
    "llama-3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, rms_norm_eps=1e-5,
                       max_position_embeddings=8192, tie_word_embeddings=False),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, rms_norm_eps=1e-5,
                         max_position_embeddings=8192, tie_word_embeddings=True),
}


def build(arch: str | dict, tokenizer_dir: Path, where: Path, device: str = "cuda", dtype: str = "bfloat16"):
    """(model with random weights on ``device``, tokenizer, parameter count); ``where`` receives its
    config and tokenizer. ``arch``: a name of ``ARCHS`` or a shape of the same form."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    shape = dict(ARCHS[arch] if isinstance(arch, str) else arch)
    shape.pop("model_type")
    cfg = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, **shape)
    where.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(where)
    tok.save_pretrained(where)
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    model.generation_config.eos_token_id = tok.eos_token_id
    return model.eval(), tok, sum(p.numel() for p in model.parameters())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--arch", default="llama-3-8b", choices=sorted(ARCHS))
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch-sizes", default="64,256")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--write", action="store_true", help="store the section in benchmarks/RESULTS.md")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("generation_gpu.py: no CUDA device here; use `harness bench generate` on CPU")
    from harness.bench import measure
    from harness.config import ModelConfig
    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        model, tok, n_params = build(args.arch, args.tokenizer, Path(tmp) / args.arch)
        build_s = time.perf_counter() - t0
        ref = ResolvedModel(str(Path(tmp) / args.arch), Path(tmp) / args.arch)
        rows = []
        for bs in (int(b) for b in args.batch_sizes.split(",")):
            cfg = ModelConfig(backend="transformers", path=str(ref.path), batch_size=bs, max_model_len=1024)
            backend = TransformersBackend.from_loaded(model, tok, ref, batch_size=bs, max_model_len=1024)
            raw, pipe = measure(cfg, args.samples, args.max_new_tokens, args.repeats, backend=backend)
            row = {"batch_size": bs, "stories": raw.stories, "raw_s": raw.seconds, "raw_tokens": raw.output_tokens,
                   "pipe_s": pipe.seconds, "pipe_tokens": pipe.output_tokens,
                   "raw_tok_s": raw.tokens_per_s, "pipe_tok_s": pipe.tokens_per_s,
                   "ratio": pipe.stories_per_s / raw.stories_per_s}
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = [
        "## Generation on the GPU (`benchmarks/generation_gpu.py`)", "",
        f"Machine: {machine_description()}. Model: {args.arch} shapes ({n_params / 1e9:.2f} B parameters with the "
        f"tokenizer's {len(tok):,}-token vocabulary), random bf16 weights built on the GPU in {build_s:.0f} s, "
        f"transformers backend (eager `generate`, SDPA attention). {rows[0]['stories'] if rows else 0} stories "
        f"of the laissez-faire suite per row (prompts spread over the suite), T = 1.0, top_p = 1.0, max_new_tokens = {args.max_new_tokens} (random weights run every "
        f"story to the limit); raw = the engine's own batched `generate`, pipeline = `generate_run` with the "
        f"harness's seeded per-request sampler; warmed up on the full workload; {args.repeats} repeat(s).", "",
        "| batch size | stories | raw s | raw output tok/s | pipeline s | pipeline output tok/s | pipeline / raw |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['batch_size']} | {r['stories']} | {r['raw_s']:.2f} | {r['raw_tok_s']:.0f} | "
                     f"{r['pipe_s']:.2f} | {r['pipe_tok_s']:.0f} | {r['ratio']:.3f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.write:
        write_section("generation-gpu", text)


if __name__ == "__main__":
    main()
