"""The LLM labeller's throughput on a GPU, on real architectures with random weights.

    python benchmarks/labelling_llm_gpu.py --tokenizer DIR --dev FILE [--archs smollm2-135m,llama-3-8b]
                                           [--stories 512] [--batch-sizes 64,256] [--reply-tokens N]
                                           [--schema-mask off|on|both] [--json FILE] [--out FILE]

The LLM labeller (`harness.labelling.llm`: the Table S7 prompts through a generation backend) costs
what its model costs to write the replies. No checkpoint reaches the GPU machine, so, as in
`generation_gpu.py`, each model is built from its published shapes with random bf16 weights and
served by the transformers backend; the speed of a forward pass does not depend on the weight values.
Random weights never end a reply, so every reply runs to one fixed length: by default the median
length, in the tokenizer's tokens, of the correct replies to the project's labelled stories (the
prompt's JSON type definition filled with the gold names and references, `correct_reply`), which is
what a model that answers right writes. The labeller makes one attempt per story
(`max_attempts=1`): random replies do not parse, are kept as failures, and start no retry; a real
model pays its retries on top. Stories: the dev stories' texts and roles (no label is read).
Each row times `LLMLabeller.label` end to end (prompts, chat template, generation, parsing),
warmed up on one batch first.

`--schema-mask on` sends each story's reply schema with its request, as the labeller does by default:
the transformers backend compiles it with xgrammar (on the host) and masks every step's logits
(`harness.generation.json_constraint`). Under the mask random weights write JSON of the schema's
words, and a reply may close before the fixed length; a batch still runs while any of its replies is
open, so the two rows of a (model, batch) pair do the same number of steps where every batch has a
reply at the limit, and the ratio of their times is the mask's cost (grammar compiles included).
`both` times each pair in the same process, the mask off first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_description  # noqa: E402
from generation_gpu import ARCHS, build  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.labelling.data import GoldStory  # noqa: E402


def correct_reply(gold: GoldStory) -> str:
    """The reply that answers ``build_prompt(gold.story)`` right: its JSON type definition, in the
    prompt's layout, with the gold names ("Unspecified" where none) and references."""
    descs = [r.description for r in gold.story.roles]
    chars = [gold.characters.get(r.key) for r in gold.story.roles]
    reply = {f"{d} name": _name(c) for d, c in zip(descs, chars)}
    reply.update({f"{d} references": list(c.references or ()) if c is not None else []
                  for d, c in zip(descs, chars)})
    return json.dumps(reply, indent=2)


def _name(char) -> str:
    name = None if char is None else char.name
    if isinstance(name, (list, tuple)):
        name = name[0] if name else None
    return str(name) if name else "Unspecified"


def reply_lengths(tokenizer, golds) -> list[int]:
    """Tokens of each labelled story's correct reply."""
    return [len(tokenizer(correct_reply(g), add_special_tokens=False)["input_ids"]) for g in golds]


def time_labeller(model, tok, model_dir: Path, stories, batch_size: int, reply_tokens: int,
                  max_model_len: int = 2048, schema_mask: bool = False) -> dict:
    """``LLMLabeller.label`` on ``stories`` with replies of at most ``reply_tokens`` tokens (all of
    them without the mask), after one warm-up batch: stories/s, output tokens/s (where every reply ran
    to the limit, so the count is exact), and how many replies ran to the limit."""
    from harness.generation.base import GenParams
    from harness.generation.hf import TransformersBackend
    from harness.labelling.llm import LLMLabeller
    from harness.models import ResolvedModel

    backend = TransformersBackend.from_loaded(model, tok, ResolvedModel(str(model_dir), model_dir),
                                              batch_size=batch_size, max_model_len=max_model_len)
    lab = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=reply_tokens), max_attempts=1,
                      constrain=schema_mask)
    lab.label(stories[:batch_size], batch_size=batch_size)
    lab.failures.clear()
    sync = _synchronize(model)
    sync()
    t0 = time.perf_counter()
    labels = lab.label(stories, batch_size=batch_size)
    sync()
    seconds = time.perf_counter() - t0
    cut = sum("max_tokens" in why for _, _, why in lab.failures)
    return {"batch_size": batch_size, "schema_mask": lab.info()["constrained"], "stories": len(labels),
            "seconds": seconds, "stories_per_s": len(labels) / seconds,
            "output_tok_s": len(labels) * reply_tokens / seconds if cut == len(labels) else None,
            "replies_cut_at_limit": cut, "kept_as_failed": sum(lb.status != "ok" for lb in labels)}


def _synchronize(model):
    import torch

    if next(model.parameters()).device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def prompt_lengths(tok, stories) -> list[int]:
    """Tokens of each story's prompt as the transformers backend sends it (chat template applied)."""
    from harness.generation.chat import render_prompt
    from harness.labelling.prompts import build_prompt

    texts = [render_prompt(tok, build_prompt(s), True) for s in stories]
    return [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]


def run(archs, tokenizer_dir: Path, stories, golds, batch_sizes, reply_tokens: int | None = None,
        device: str = "cuda", dtype: str = "bfloat16", schema_masks: tuple[bool, ...] = (False,)) -> dict:
    """Every (arch, batch size, schema mask) row, with the reply length and prompt lengths they share."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    lengths = sorted(reply_lengths(tok, golds))
    if not (reply_tokens or lengths):
        raise ValueError("give reply_tokens, or labelled stories to take the correct replies' median length from")
    reply = reply_tokens or int(statistics.median(lengths))
    prompts = prompt_lengths(tok, stories)
    out = {"reply_tokens": reply, "reply_tokens_from": None if reply_tokens else len(lengths),
           "reply_p90": lengths[int(0.9 * (len(lengths) - 1))] if lengths else None,
           "prompt_tokens_median": statistics.median(prompts), "stories": len(stories), "device": device,
           "dtype": dtype, "rows": []}
    for arch in archs:
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(tmp) / (arch if isinstance(arch, str) else "model")
            t0 = time.perf_counter()
            model, _, n_params = build(arch, tokenizer_dir, where, device=device, dtype=dtype)
            build_s = time.perf_counter() - t0
            for bs in batch_sizes:
                for mask in schema_masks:
                    row = {"arch": arch if isinstance(arch, str) else "custom", "parameters": n_params,
                           "build_s": build_s,
                           **time_labeller(model, tok, where, stories, bs, reply, schema_mask=mask)}
                    out["rows"].append(row)
                    print(json.dumps(row), flush=True)
            del model
            if device == "cuda":
                import torch

                torch.cuda.empty_cache()
    return out


def markdown(res: dict) -> str:
    lines = [
        "LLM labeller (`benchmarks/labelling_llm_gpu.py`): `LLMLabeller.label` end to end through the transformers "
        f"backend, {res['stories']} dev stories (median prompt {res['prompt_tokens_median']:.0f} tokens with the "
        f"chat template), random {res['dtype']} weights of each architecture on {res['device']}, greedy, every reply "
        f"{res['reply_tokens']} tokens (the median correct reply"
        + (f" of {res['reply_tokens_from']} labelled project stories; 90th percentile {res['reply_p90']}"
           if res["reply_tokens_from"] else "") + "; under the schema mask at most that), one attempt per story, "
        "warmed up on one batch.", "",
        "| architecture | parameters | batch | schema mask | stories/s | output tok/s | replies at the limit |",
        "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        size = f"{r['parameters'] / 1e9:.2f} B" if r["parameters"] >= 1e9 else f"{r['parameters'] / 1e6:.0f} M"
        tok_s = "-" if r["output_tok_s"] is None else f"{r['output_tok_s']:.0f}"
        lines.append(f"| {r['arch']} | {size} | {r['batch_size']} | {'on' if r['schema_mask'] else 'off'} | "
                     f"{r['stories_per_s']:.1f} | {tok_s} | {r['replies_cut_at_limit']} of {r['stories']} |")
    pairs = {}
    for r in res["rows"]:
        pairs.setdefault((r["arch"], r["batch_size"]), {})[r["schema_mask"]] = r
    ratios = [f"{arch} at batch {bs}: {p[True]['seconds'] / p[False]['seconds']:.2f}x"
              for (arch, bs), p in pairs.items() if len(p) == 2]
    if ratios:
        lines += ["", "Time with the schema mask over time without it, same process: " + "; ".join(ratios) + "."]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", type=Path, required=True, help="a chat tokenizer on disk (e.g. SmolLM2's)")
    ap.add_argument("--dev", type=Path, required=True, help="stories to label (their texts and roles)")
    ap.add_argument("--archs", default="smollm2-135m,llama-3-8b", help=f"of {', '.join(sorted(ARCHS))}")
    ap.add_argument("--stories", type=int, default=512)
    ap.add_argument("--batch-sizes", default="64,256")
    ap.add_argument("--reply-tokens", type=int, default=None,
                    help="reply length (default: the median correct reply of the project's labelled stories)")
    ap.add_argument("--schema-mask", choices=("off", "on", "both"), default="off",
                    help="send each story's reply schema (the labeller's default; on the transformers backend an "
                         "xgrammar mask); both: each row pair in the same process")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("labelling_llm_gpu.py: no CUDA device here; on CPU, benchmarks/labelling.py times the "
                         "LLM labeller with the embedded model")
    from harness.labelling.data import builtin_training_files, load_gold

    archs = [a for a in args.archs.split(",") if a]
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        raise SystemExit(f"--archs: unknown {', '.join(unknown)}; choose from {', '.join(sorted(ARCHS))}")
    stories = [g.story for g in load_gold(args.dev) if g.story.text][:args.stories]
    golds = [g for f in builtin_training_files() for g in load_gold(f)]
    masks = {"off": (False,), "on": (True,), "both": (False, True)}[args.schema_mask]
    if True in masks and importlib.util.find_spec("xgrammar") is None:
        raise SystemExit(f"--schema-mask {args.schema_mask}: the mask needs xgrammar, which is not installed here; carry "
                         ".gpu/site.tar.xz (python benchmarks/gpu_prepare.py --site), or pass --schema-mask off")
    res = run(archs, args.tokenizer, stories, golds, [int(b) for b in args.batch_sizes.split(",")],
              args.reply_tokens, schema_masks=masks)
    res["machine"] = machine_description()
    text = markdown(res)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
