"""GPU benchmark of the homogeneity and sweep kernels: time, achieved TFLOP/s, % of measured peak.

Run on a CUDA machine from the repository root::

    python benchmarks/kernels_gpu.py --out gpu.md          # paper and 500k sizes, d = 384 and 768
    python benchmarks/kernels_gpu.py --quick --out gpu.md  # small sizes, a smoke run

The two ceilings are measured first, in the same run: a 8192^3 bf16 matrix product through
torch (cuBLAS) and a large device-to-device copy. Kernel rows are timed with CUDA events
(``triton.testing.do_bench``, median) on inputs already on the device; "API" rows time the
public functions end to end (host preparation, transfers and the result's copy back included).
FLOP counts are the useful arithmetic of each computation (2 n d^2 per Gram, counted on the full
d x d although the kernel computes the upper triangle only; 2 d per pair; 4 B m^2 for the fused
replicate GEMM pair W C, W (C o C)), so achieved rates are honest lower bounds.
Every row is checked against the float64 closed form (relative error of the per-group sums).
Writes a markdown section; ``--write`` also stores it as section ``kernels-gpu`` of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from _results import machine_description, write_section  # noqa: E402

from harness.kernels import homogeneity as H  # noqa: E402
from harness.kernels import sweep as S  # noqa: E402


def ceilings(torch, triton):
    """(bf16 TFLOP/s of a 8192^3 product, device copy GB/s counting read + write)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")
    tflops = 2 * 8192**3 / ms / 1e9
    src = torch.randn(1 << 29, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    ms_c = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    gbs = 2 * src.numel() * 4 / ms_c / 1e6
    del a, b, src, dst
    return tflops, gbs


def make_embeddings(n_groups, n, d, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_groups, d)).astype(np.float32)
    g = np.sort(rng.integers(0, n_groups, n))
    x = centers[g] + 2.0 * rng.normal(size=(n, d)).astype(np.float32)
    return x, g


def naive_torch(xs, g, G, chunk, torch):
    """Naive path on the GPU: full (chunk x N) bf16 products, same-group i < j mask, reduce."""
    N = xs.shape[0]
    s = torch.zeros(G, dtype=torch.float64, device="cuda")
    ss = torch.zeros_like(s)
    cols = torch.arange(N, device="cuda")
    for r0 in range(0, N, chunk):
        r1 = min(r0 + chunk, N)
        c = (xs[r0:r1] @ xs.T).float()
        m = (g[r0:r1, None] == g[None, :]) & (cols[r0:r1, None] < cols[None, :])
        c = c * m
        s.index_add_(0, g[r0:r1], c.sum(1).double())
        ss.index_add_(0, g[r0:r1], (c * c).sum(1).double())
    return s, ss


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def bench_homogeneity(torch, triton, N, d, G, peak, rows, quick):
    from harness.kernels._triton_homogeneity import segmented_gram

    x, g = make_embeddings(G, N, d)
    t0 = time.perf_counter()
    ref = H.reference(x, g, n_groups=G)
    ref_s = time.perf_counter() - t0
    counts = np.bincount(g, minlength=G)
    gram_flop = 2.0 * N * d * d
    pair_flop = 2.0 * d * float((counts * (counts - 1) // 2).sum())
    tag = f"N={N:,}, d={d}, {G} groups"

    def add(path, dtype, ms, flop, err, mem=None, note=""):
        tf = flop / ms / 1e9 if flop else None
        rows.append({"size": tag, "path": path, "dtype": dtype, "ms": ms, "tflops": tf,
                     "pct_peak": 100 * tf / peak if tf else None, "rel_err": err,
                     "peak_mem_gib": mem, "note": note})
        print(json.dumps(rows[-1]), flush=True)

    add("closed form, NumPy float64 (CPU reference)", "float64", 1e3 * ref_s, gram_flop, 0.0,
        note="host CPU")
    gt = torch.as_tensor(g, device="cuda")
    xs32 = torch.as_tensor(x, device="cuda")
    xs32 = xs32 / xs32.norm(dim=1, keepdim=True)
    xs16 = xs32.to(torch.bfloat16).contiguous()

    # naive path (materialises chunk x N blocks of the N x N matrix)
    chunk = 4096 if N <= 100_000 else 2048
    naive_torch(xs16[:chunk], gt[:chunk], G, chunk, torch)  # warm-up: cuBLAS handles, allocator
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    s, ss = naive_torch(xs16, gt, G, chunk, torch)
    torch.cuda.synchronize()
    naive_ms = 1e3 * (time.perf_counter() - t0)
    add(f"naive: bf16 (chunk x N) products, mask, reduce; chunk {chunk}", "bfloat16", naive_ms, 2.0 * N * N * d,
        rel(s.cpu().numpy(), ref.sum), torch.cuda.max_memory_allocated() / 2**30,
        "FLOPs of the full N x N product")

    # API rows: public functions end to end
    for name, fn, dt in (
        ("API group_stats, Triton, bf16", lambda: H.triton_group_stats(x, g, n_groups=G, dtype="bfloat16"), "bfloat16"),
        ("API group_stats, Triton, fp32 (ieee)", lambda: H.triton_group_stats(x, g, n_groups=G), "float32"),
        ("API group_stats, CuPy (cuBLAS fp32)", lambda: H.cupy_group_stats(x, g, n_groups=G), "float32"),
    ):
        try:
            fn()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            ms = 1e3 * (time.perf_counter() - t0)
            add(name, dt, ms, gram_flop, max(rel(out.sum, ref.sum), rel(out.sumsq, ref.sumsq)),
                torch.cuda.max_memory_allocated() / 2**30,
                f"vs naive {naive_ms / ms:.2g}x; incl. host prep and transfers")
        except Exception as e:  # keep measuring the other rows
            add(name, dt, float("nan"), 0, float("nan"), note=f"failed: {type(e).__name__}: {str(e)[:120]}")

    # the whole closed form on embeddings already on the GPU (unsorted, unnormalised fp32), as the
    # naive row: sort, normalise, sums, segmented Gram, merge; results copied back
    xdev = torch.as_tensor(x, device="cuda")
    for dt in ("bfloat16", "float32"):
        run = lambda: H.triton_group_stats(xdev, g, n_groups=G, dtype=dt)  # noqa: E731
        out = run()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        ms = triton.testing.do_bench(run, warmup=3, rep=30, return_mode="median")
        add(f"group_stats, Triton {dt}, input already on the GPU", dt, ms, gram_flop,
            max(rel(out.sum, ref.sum), rel(out.sumsq, ref.sumsq)), (torch.cuda.max_memory_allocated() - base) / 2**30,
            f"vs naive {naive_ms / ms:.3g}x (both device-resident); memory beyond the input")
    del xdev

    # kernel only: segmented Gram on device-resident sorted rows
    order, cnt, offs = H._segments(g, G)
    starts, ends = [], []
    for k in range(G):
        for s0 in range(int(offs[k]), int(offs[k + 1]), 4096):
            starts.append(s0)
            ends.append(min(s0 + 4096, int(offs[k + 1])))
    st = torch.as_tensor(starts, device="cuda")
    en = torch.as_tensor(ends, device="cuda")
    for dt, xsd, prec in (("bfloat16", xs16, "tf32"), ("float32", xs32, "tf32"), ("float32", xs32, "ieee")):
        segmented_gram(xsd, st, en, input_precision=prec)
        ms = triton.testing.do_bench(lambda: segmented_gram(xsd, st, en, input_precision=prec),
                                     warmup=25, rep=200, return_mode="median")
        add(f"kernel segmented Gram ({dt}, {prec})", dt, ms, gram_flop, None,
            note="kernel time only; half the products (upper-triangular tiles)")
    # torch reference point: per-group Grams with cuBLAS (one bmm when groups are equal is not possible here)
    ms = triton.testing.do_bench(
        lambda: [xs16[int(offs[k]):int(offs[k + 1])].T @ xs16[int(offs[k]):int(offs[k + 1])] for k in range(G)],
        warmup=10, rep=100, return_mode="median")
    add("cuBLAS per-group X_g^T X_g (torch, bf16), for comparison", "bfloat16", ms, gram_flop, None)

    # pair-level, kernel only: histograms (+ top-k) on device-resident sorted rows
    from harness.kernels._triton_homogeneity import launch_pair_tiles

    plan = H.pair_tile_plan(cnt, 128, 0)
    tiles = {k: v for k, v in plan.items() if k.startswith("tile_")}
    for dt, xsd, k, hm in (("bfloat16", xs16, 5, "tl"), ("bfloat16", xs16, 0, "tl"), ("bfloat16", xs16, 0, "atomic"),
                           ("float32", xs32, 0, "tl")):
        prec = "tf32"
        run = lambda: launch_pair_tiles(  # noqa: E731
            xsd, **tiles, offsets=offs, counts=cnt, pair_off=plan["pair_off"], total_pairs=0, n_groups=G,
            n_bins=2048, top_k=k, block=128, block_k=64, input_precision=prec, hist_mode=hm)
        try:
            run()
            ms = triton.testing.do_bench(run, warmup=10, rep=100, return_mode="median")
            tile_flop = 2.0 * d * 128 * 128 * plan["tile_group"].size
            add(f"kernel pair tiles ({dt}, 2048-bin hist {hm}, top-{k})", dt, ms, pair_flop, None,
                note=f"kernel only; {tile_flop / ms / 1e9:.0f} TFLOP/s counting whole tiles")
        except Exception as e:
            add(f"kernel pair tiles ({dt}, hist {hm}, top-{k})", dt, float("nan"), 0, float("nan"),
                note=f"failed: {type(e).__name__}: {str(e)[:120]}")

    # pair-level: histograms + top-k, end to end
    variants = [("bfloat16", 5, None)]
    for dt, k, hm in variants:
        name = f"API pair_stats, Triton, {dt}, 2048 bins, top-{k}" + (f", hist {hm}" if hm else "")
        try:
            kw = dict(n_groups=G, dtype=dt, n_bins=2048, top_k=k, explicit_max_n=0, hist_mode=hm)
            out = H.triton_pair_stats(x, g, **kw)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            out = H.triton_pair_stats(x, g, **kw)
            torch.cuda.synchronize()
            ms = 1e3 * (time.perf_counter() - t0)
            add(name, dt, ms, pair_flop, max(rel(out.sum, ref.sum), rel(out.sumsq, ref.sumsq)),
                torch.cuda.max_memory_allocated() / 2**30, "end to end")
        except Exception as e:
            add(name, dt, float("nan"), 0, float("nan"), note=f"failed: {type(e).__name__}: {str(e)[:120]}")

    # replicates: bootstrap of every group, B = 1000 (API), and the fused kernel on one pool
    for backend, dt in (("triton", "bfloat16"), ("cupy", None)) if N <= 100_000 else ():
        B = 200 if quick else 1000
        kw = {"dtype": dt} if dt else {}
        name = f"API group_replicates bootstrap B={B}, {backend}" + (f", {dt}" if dt else " (fp32)")
        try:
            H.group_replicates(x[: min(N, 20_000)], g[: min(N, 20_000)], kind="bootstrap", n_rep=4, n_groups=G,
                               backend=backend, **kw)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            H.group_replicates(x, g, kind="bootstrap", n_rep=B, n_groups=G, backend=backend, **kw)
            torch.cuda.synchronize()
            ms = 1e3 * (time.perf_counter() - t0)
            flop = 4.0 * B * float((counts.astype(np.float64) ** 2).sum())
            add(name, dt or "float32", ms, flop, None, note="end to end, one pool per group")
        except Exception as e:
            add(name, dt or "float32", float("nan"), 0, float("nan"), note=f"failed: {type(e).__name__}: {str(e)[:120]}")
    return x, g


def bench_replicate_kernel(torch, triton, peak, rows, quick):
    from harness.kernels._triton_homogeneity import fused_replicates

    for B, m in ((1024, 2048), (4096, 4096)) if quick else ((4096, 4096), (8192, 8192), (16384, 8192)):
        W = torch.poisson(torch.ones(B, m, device="cuda")).to(torch.bfloat16)
        X = torch.nn.functional.normalize(torch.randn(m, 384, device="cuda"), dim=1)
        C = (X @ X.T).to(torch.bfloat16)
        ref1 = (W.double() @ C.double() * W.double()).sum(1)
        o1, _ = fused_replicates(W, C, input_precision="tf32")
        err = rel(o1.cpu().numpy(), ref1.cpu().numpy())
        ms = triton.testing.do_bench(lambda: fused_replicates(W, C, input_precision="tf32"),
                                     warmup=25, rep=200, return_mode="median")
        tf = 4.0 * B * m * m / ms / 1e9
        rows.append({"size": f"B={B:,}, m={m:,}", "path": "kernel fused replicates W C, W (C o C) (bf16)",
                     "dtype": "bfloat16", "ms": ms, "tflops": tf, "pct_peak": 100 * tf / peak,
                     "rel_err": err, "peak_mem_gib": None, "note": "kernel time only"})
        print(json.dumps(rows[-1]), flush=True)
        ms2 = triton.testing.do_bench(lambda: (W @ C, W @ (C * C)), warmup=25, rep=200, return_mode="median")
        tf2 = 4.0 * B * m * m / ms2 / 1e9
        rows.append({"size": f"B={B:,}, m={m:,}", "path": "cuBLAS W C and W (C o C), unfused (torch bf16)",
                     "dtype": "bfloat16", "ms": ms2, "tflops": tf2, "pct_peak": 100 * tf2 / peak,
                     "rel_err": None, "peak_mem_gib": None, "note": "baseline: materialises C o C and both products"})
        print(json.dumps(rows[-1]), flush=True)


def bench_sweep(torch, triton, rows, quick):
    n = 50_000 if quick else 500_000
    rng = np.random.default_rng(0)
    lik = rng.dirichlet(np.ones(7) * 0.3, size=n).astype(np.float32)
    lik[rng.random(n) < 0.3] = np.nan
    role = rng.integers(0, 2, n).astype(np.int8)
    group = rng.integers(-1, 5, n).astype(np.int32)
    story = np.arange(n, dtype=np.int64) // 2
    thr = np.arange(1, 100, dtype=np.int32)
    t0 = time.perf_counter()
    ref = S.numpy_sweep_counts(lik, role, group, story, thr, n_groups=5, n_boot=20, seed=1)
    cpu_ms = 1e3 * (time.perf_counter() - t0)
    rows.append({"size": f"{n:,} characters, 99 thresholds", "path": "vectorised NumPy sweep, B=20 (host CPU)",
                 "dtype": "int64", "ms": cpu_ms, "tflops": None, "pct_peak": None, "rel_err": None,
                 "peak_mem_gib": None, "note": f"{cpu_ms / 21:.1f} ms per replicate"})
    print(json.dumps(rows[-1]), flush=True)
    from harness.kernels._triton_sweep import launch_sweep_hist

    lk, rl, gg, ss, _, G5, _, _ = S._validate(lik, role, group, story, thr, 5, 0, 1)
    key, sto, K = S._items(lk, rl, gg, ss, G5)
    kt, st_t = torch.as_tensor(key, device="cuda"), torch.as_tensor(sto, device="cuda")
    cdf = torch.as_tensor(S.POISSON1_CDF_U32.astype(np.int64), device="cuda")
    seed_h = int(S.mix32(np.asarray([1], dtype=np.uint32))[0])
    for B in (1_000, 10_000):
        launch_sweep_hist(kt, st_t, K, B, seed_h, cdf)
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(lambda: launch_sweep_hist(kt, st_t, K, B, seed_h, cdf), warmup=5, rep=50,
                                     return_mode="median")
        rows.append({"size": f"{n:,} characters ({key.size:,} items), 99 thresholds",
                     "path": f"kernel Triton sweep histogram, B={B:,}", "dtype": "int32 hist", "ms": ms,
                     "tflops": None, "pct_peak": None, "rel_err": None, "peak_mem_gib": None,
                     "note": f"kernel only; {key.size * (B + 1) / ms / 1e6:.0f} G item-replicates/s"})
        print(json.dumps(rows[-1]), flush=True)
    for name, fn, B in (
        ("Triton sweep", lambda B: S.triton_sweep_counts(lik, role, group, story, thr, n_groups=5, n_boot=B, seed=1), 10_000),
        ("CuPy sweep", lambda B: S.cupy_sweep_counts(lik, role, group, story, thr, n_groups=5, n_boot=B, seed=1), 1_000),
    ):
        try:
            small = fn(20)
            same = bool(np.array_equal(small.above, ref.above) and np.array_equal(small.totals, ref.totals))
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(B)
            torch.cuda.synchronize()
            ms = 1e3 * (time.perf_counter() - t0)
            note = f"{ms / (B + 1):.3f} ms per replicate; counts {'identical' if same else 'DIFFER'} to NumPy at B=20"
        except Exception as e:
            ms, note = float("nan"), f"failed: {type(e).__name__}: {str(e)[:120]}"
        rows.append({"size": f"{n:,} characters, 99 thresholds", "path": f"{name}, B={B:,}", "dtype": "int32 hist",
                     "ms": ms, "tflops": None, "pct_peak": None, "rel_err": None, "peak_mem_gib": None, "note": note})
        print(json.dumps(rows[-1]), flush=True)


def fmt(v, f):
    return "-" if v is None or v != v else f.format(v)


def render(rows, peak, gbs, args):
    md = ["## Kernels on the GPU (`benchmarks/kernels_gpu.py`" + (" --quick)" if args.quick else ")"), "",
          f"Machine: {machine_description()}. Measured ceilings in this run: bf16 matrix product "
          f"8192^3 through cuBLAS {peak:.0f} TFLOP/s; device copy {gbs:.0f} GB/s (read + write). "
          "% of peak is against the measured bf16 product. Synthetic clustered vectors, groups of "
          "unequal size (uniform group ids).", "",
          "| size | path | dtype | time | TFLOP/s | % of bf16 peak | rel. error vs fp64 | peak GPU memory | note |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['size']} | {r['path']} | {r['dtype']} | {fmt(r['ms'], '{:.2f} ms')} | "
                  f"{fmt(r['tflops'], '{:.1f}')} | {fmt(r['pct_peak'], '{:.1f}%')} | {fmt(r['rel_err'], '{:.1e}')} | "
                  f"{fmt(r['peak_mem_gib'], '{:.2f} GiB')} | {r['note']} |")
    return "\n".join(md)


def profile_group_stats(torch, N: int, d: int, G: int, out: Path | None) -> None:
    """Where one call of ``triton_group_stats`` spends its time, on embeddings already on the GPU:
    wall and CUDA-event medians for bf16 and fp32, then ``torch.profiler`` tables (5 calls, bf16) by
    host time and by device time. The closed form is host-bound at N = 100,000 (RESULTS.md,
    kernels-gpu): the first table says which launches and waits cost."""
    import triton
    from torch.profiler import ProfilerActivity, profile

    x, g = make_embeddings(G, N, d)
    xdev = torch.as_tensor(x, device="cuda")
    lines = [f"triton_group_stats, N={N:,}, d={d}, {G} groups, input on the GPU"]
    for dt in ("bfloat16", "float32"):
        run = lambda: H.triton_group_stats(xdev, g, n_groups=G, dtype=dt)  # noqa: E731
        run()
        ms = triton.testing.do_bench(run, warmup=3, rep=30, return_mode="median")
        walls = []
        for _ in range(20):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            walls.append(1e3 * (time.perf_counter() - t0))
        lines.append(f"{dt}: do_bench median {ms:.3f} ms, wall median {np.median(walls):.3f} ms")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            H.triton_group_stats(xdev, g, n_groups=G, dtype="bfloat16")
        torch.cuda.synchronize()
    table = prof.key_averages()
    for key in ("self_cpu_time_total", "self_device_time_total"):
        lines.append(table.table(sort_by=key, row_limit=20, max_name_column_width=60))
    text = "\n".join(lines)
    if out:  # first: a reader that stops early (| head) must not cost the file
        out.write_text(text + "\n")
    print(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="write the markdown section here")
    p.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    p.add_argument("--write", action="store_true", help="store the section in benchmarks/RESULTS.md")
    p.add_argument("--only", default="homogeneity,replicates,sweep")
    p.add_argument("--profile", default=None, metavar="N,d,G",
                   help="only profile triton_group_stats at this size (e.g. 100000,384,104), print the tables")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("kernels_gpu.py: no CUDA device here; run benchmarks/kernels_cpu.py for the CPU figures")
    if args.profile:
        N, d, G = (int(v) for v in args.profile.split(","))
        return profile_group_stats(torch, N, d, G, args.out)
    import triton

    peak, gbs = ceilings(torch, triton)
    print(f"ceilings: bf16 {peak:.0f} TFLOP/s, copy {gbs:.0f} GB/s", flush=True)
    rows = []
    only = set(args.only.split(","))
    sizes = [(20_000, 384, 40)] if args.quick else [(52_000, 384, 104), (52_000, 768, 104), (100_000, 384, 104),
                                                     (500_000, 384, 104), (500_000, 768, 104)]
    if "homogeneity" in only:
        for N, d, G in sizes:
            bench_homogeneity(torch, triton, N, d, G, peak, rows, args.quick)
    if "replicates" in only:
        bench_replicate_kernel(torch, triton, peak, rows, args.quick)
    if "sweep" in only:
        bench_sweep(torch, triton, rows, args.quick)
    text = render(rows, peak, gbs, args)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"peak_tflops": peak, "copy_gbs": gbs, "rows": rows}, indent=1))
    if args.write:
        write_section("kernels-gpu", text)


if __name__ == "__main__":
    main()
