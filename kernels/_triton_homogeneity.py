"""Triton kernels of the homogeneity statistics (imported only when the Triton backend is used).

Kernels, each with a thin launcher that allocates outputs:

- ``_prep_rows_kernel``, ``_chunk_sums_kernel``, ``_text_means_kernel``: the O(N d) terms around
  the segmented Gram (rows gathered into group order, normalised and cast in one pass; chunk sums
  of rows and squared norms; each text's mean cosine to its group, written back in input order),
  one pass over the rows each instead of a chain of torch operations and host synchronisations.
- ``_seg_gram_kernel``: segmented d x d Gram, one program per (row chunk of one group,
  upper-triangular d-tile); the transposed copy of an off-diagonal tile is stored from the
  same accumulator, so no product is computed twice.
- ``_pair_tile_kernel``: a group's upper triangle tile by tile, one program per row block of
  tiles; each tile's epilogue reduces it into the histogram (kept in registers across the row
  block), sums, row sums, top-k / bottom-k candidates and explicit pairs.
- ``_replicate_kernel``: W C and W (C o C) from the same C tile, reduced against W.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ._common import triton_interpreting


def _row_block(d: int, elements: int = 8192) -> tuple[int, int]:
    """(rows, padded columns) of a row-wise program: whole rows of 2^k >= d columns, about
    ``elements`` elements a program."""
    bd = triton.next_power_of_2(d)
    return max(1, elements // bd), bd


@triton.jit
def _prep_rows_kernel(
    x_ptr, order_ptr, out_ptr, sq_ptr, flag_ptr, N, D, stride_x, stride_o,
    NORMALIZE: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr,
):
    """out[r] = x[order[r]] (normalised when NORMALIZE) cast to out's dtype; sq[r] = ||out[r]||^2 of
    the cast values; flag[r] = 2 for a NaN or infinite value, 1 for an all-zero row, else 0."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    mr = r < N
    src = tl.load(order_ptr + r, mask=mr, other=0).to(tl.int64)
    c = tl.arange(0, BD)
    m = mr[:, None] & (c < D)[None, :]
    v = tl.load(x_ptr + src[:, None] * stride_x + c[None, :], mask=m, other=0.0).to(tl.float32)
    finite = (v == v) & (tl.abs(v) < float("inf"))
    bad = tl.sum(tl.where(finite, 0, 1), axis=1)
    nrm2 = tl.sum(v * v, axis=1)
    flag = tl.where(bad > 0, 2, 0)
    if NORMALIZE:
        flag = tl.where((bad == 0) & (nrm2 == 0.0), 1, flag)
        v = v / tl.sqrt(tl.where((bad == 0) & (nrm2 > 0.0), nrm2, 1.0))[:, None]  # flagged rows left as they are
    y = v.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + r.to(tl.int64)[:, None] * stride_o + c[None, :], y, mask=m)
    yf = y.to(tl.float32)
    tl.store(sq_ptr + r, tl.sum(yf * yf, axis=1), mask=mr)
    tl.store(flag_ptr + r, flag.to(tl.int8), mask=mr)


def prep_rows(x: torch.Tensor, order: torch.Tensor, dtype, normalize: bool):
    """Rows ``x[order]`` in ``dtype`` (normalised in fp32 first when ``normalize``), their squared
    norms after the cast (fp32), and a per-row flag (int8: 2 = NaN or infinite, 1 = all zeros)."""
    if x.stride(1) != 1:
        x = x.contiguous()
    n, d = order.numel(), x.shape[1]
    out = torch.empty((n, d), dtype=dtype, device=x.device)
    sq = torch.empty(n, dtype=torch.float32, device=x.device)
    flag = torch.empty(n, dtype=torch.int8, device=x.device)
    br, bd = _row_block(d)
    if n:
        _prep_rows_kernel[(triton.cdiv(n, br),)](x, order, out, sq, flag, n, d, x.stride(0), out.stride(0),
                                                 NORMALIZE=bool(normalize), BR=br, BD=bd)
    return out, sq, flag


@triton.jit
def _chunk_sums_kernel(
    x_ptr, sq_ptr, start_ptr, end_ptr, out_ptr, D, stride_x, stride_o, BR: tl.constexpr, BD: tl.constexpr,
):
    """out[c, :D] = sum of rows start[c]..end[c] (fp32, stored as fp64), one program per (chunk,
    column block), rows added in order (deterministic); the first column block also stores the
    chunk's sum of sq and of sq^2 (fp64) in out[c, D] and out[c, D + 1]."""
    pid_c = tl.program_id(0)
    pid_d = tl.program_id(1)
    cols = pid_d * BD + tl.arange(0, BD)
    mc = cols < D
    start = tl.load(start_ptr + pid_c)
    end = tl.load(end_ptr + pid_c)
    acc = tl.zeros((BD,), dtype=tl.float32)
    s1 = tl.zeros((BR,), dtype=tl.float64)
    s2 = tl.zeros((BR,), dtype=tl.float64)
    for r0 in range(start, end, BR):
        r = r0 + tl.arange(0, BR)
        mr = r < end
        v = tl.load(x_ptr + r.to(tl.int64)[:, None] * stride_x + cols[None, :], mask=mr[:, None] & mc[None, :],
                    other=0.0)
        acc += tl.sum(v.to(tl.float32), axis=0)
        if pid_d == 0:
            q = tl.load(sq_ptr + r, mask=mr, other=0.0).to(tl.float64)
            s1 += q
            s2 += q * q
    base = out_ptr + pid_c.to(tl.int64) * stride_o
    tl.store(base + cols, acc.to(tl.float64), mask=mc)
    if pid_d == 0:
        tl.store(base + D, tl.sum(s1, axis=0))
        tl.store(base + D + 1, tl.sum(s2, axis=0))


def chunk_sums(xs: torch.Tensor, sq: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor):
    """(n_chunks, d + 2) fp64: chunk c's row sum X[starts[c]:ends[c]].sum(0), then the sums of
    ``sq`` and ``sq**2`` over its rows."""
    n_chunks, d = starts.numel(), xs.shape[1]
    out = torch.empty((n_chunks, d + 2), dtype=torch.float64, device=xs.device)
    if n_chunks:
        _chunk_sums_kernel[(n_chunks, triton.cdiv(d, 64))](xs, sq, starts, ends, out, d, xs.stride(0), out.stride(0),
                                                           BR=64, BD=64)
    return out


@triton.jit
def _text_means_kernel(
    x_ptr, gid_ptr, s_ptr, sq_ptr, cnt_ptr, order_ptr, out_ptr, N, D, stride_x, stride_s,
    BR: tl.constexpr, BD: tl.constexpr,
):
    """out[order[r]] = (x[r] . s[gid[r]] - sq[r]) / (cnt[gid[r]] - 1) (the dot in fp32, the rest fp64), NaN for a text
    alone in its group: each text's mean cosine to the other texts of its group."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    mr = r < N
    gid = tl.load(gid_ptr + r, mask=mr, other=0).to(tl.int64)
    c = tl.arange(0, BD)
    m = mr[:, None] & (c < D)[None, :]
    # products in fp32 (as the einsum before): fp64 tiles of whole rows spilled registers (143 of the
    # 600 us of GPU work at N = 100,000 on an H200, 2026-11-25)
    v = tl.load(x_ptr + r.to(tl.int64)[:, None] * stride_x + c[None, :], mask=m, other=0.0).to(tl.float32)
    s = tl.load(s_ptr + gid[:, None] * stride_s + c[None, :], mask=m, other=0.0).to(tl.float32)
    dot = tl.sum(v * s, axis=1).to(tl.float64)
    others = tl.load(cnt_ptr + gid, mask=mr, other=1).to(tl.float64) - 1.0
    q = tl.load(sq_ptr + r, mask=mr, other=0.0).to(tl.float64)
    mean = tl.where(others > 0.0, (dot - q) / tl.where(others > 0.0, others, 1.0), float("nan"))
    dst = tl.load(order_ptr + r, mask=mr, other=0).to(tl.int64)
    tl.store(out_ptr + dst, mean, mask=mr)


def text_means(xs, gid, sums, sq, counts, order, out):
    """Fill ``out`` (fp64, input order) at ``order`` with each sorted row's mean cosine to the rest of
    its group, from its group's sum (row ``gid`` of ``sums``, fp64, the first d columns), its squared
    norm ``sq`` and the group ``counts``."""
    n, d = xs.shape
    br, bd = _row_block(d, 4096)
    if n:
        _text_means_kernel[(triton.cdiv(n, br),)](xs, gid, sums, sq, counts, order, out, n, d, xs.stride(0),
                                                  sums.stride(0), BR=br, BD=bd)
    return out


def _gram_configs():
    if triton_interpreting():  # one config: the interpreter would "benchmark" each one
        return [triton.Config({"BD": 64, "BK": 64})]
    return [
        triton.Config({"BD": bd, "BK": bk}, num_warps=w, num_stages=s)
        for bd, bk, w, s in ((128, 64, 8, 3), (128, 32, 8, 4), (64, 64, 4, 4), (64, 128, 4, 3), (128, 128, 8, 3))
    ]


@triton.autotune(configs=_gram_configs(), key=["D", "PREC"])
@triton.jit
def _seg_gram_kernel(
    x_ptr, start_ptr, end_ptr, out_ptr, D, stride_xn, stride_oc,
    BD: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):
    pid_c = tl.program_id(0)
    pid_t = tl.program_id(1)
    nb = tl.cdiv(D, BD)
    bi = pid_t // nb
    bj = pid_t % nb
    if bi <= bj:
        start = tl.load(start_ptr + pid_c)
        end = tl.load(end_ptr + pid_c)
        oi = bi * BD + tl.arange(0, BD)
        oj = bj * BD + tl.arange(0, BD)
        mi = oi < D
        mj = oj < D
        acc = tl.zeros((BD, BD), dtype=tl.float32)
        for k0 in range(start, end, BK):
            rows = k0 + tl.arange(0, BK)
            mr = rows < end
            a = tl.load(x_ptr + rows[:, None] * stride_xn + oi[None, :], mask=mr[:, None] & mi[None, :], other=0.0)
            b = tl.load(x_ptr + rows[:, None] * stride_xn + oj[None, :], mask=mr[:, None] & mj[None, :], other=0.0)
            acc = tl.dot(tl.trans(a), b, acc, input_precision=PREC)
        base = out_ptr + pid_c.to(tl.int64) * stride_oc
        tl.store(base + oi[:, None] * D + oj[None, :], acc, mask=mi[:, None] & mj[None, :])
        if bi < bj:
            tl.store(base + oj[:, None] * D + oi[None, :], tl.trans(acc), mask=mj[:, None] & mi[None, :])


def segmented_gram(xs: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, *, input_precision="ieee"):
    """Partial Gram matrices (n_chunks, d, d) fp32: chunk c is X[starts[c]:ends[c]]^T X[...]."""
    n_chunks = starts.numel()
    D = xs.shape[1]
    # every (upper tile, its transpose) pair is stored, so no element needs zeroing first
    out = torch.empty((n_chunks, D, D), dtype=torch.float32, device=xs.device)
    grid = lambda META: (n_chunks, triton.cdiv(D, META["BD"]) ** 2)  # noqa: E731
    _seg_gram_kernel[grid](xs, starts, ends, out, D, xs.stride(0), out.stride(0), PREC=input_precision)
    return out


@triton.jit
def _pair_tile_kernel(
    x_ptr, stride_xn, D,
    pg_ptr, pbi_ptr, pt0_ptr, gstart_ptr, gn_ptr, poff_ptr,
    hist_ptr, tsum_ptr, tsq_ptr, rowsum_ptr, topv_ptr, topp_ptr, botv_ptr, botp_ptr, pairs_ptr,
    BM: tl.constexpr, BK: tl.constexpr, NBINS: tl.constexpr, TOPK: tl.constexpr,
    PREC: tl.constexpr, TL_HIST: tl.constexpr,
):
    # one program per (group, row block bi): it walks the tiles (bi, bj), bj >= bi, of its row
    # block, keeps the histogram and its rows' sums in registers, and flushes them once at the end
    pid = tl.program_id(0)
    g = tl.load(pg_ptr + pid)
    bi = tl.load(pbi_ptr + pid)
    t0 = tl.load(pt0_ptr + pid)  # index of tile (bi, bi) in the tile list
    start = tl.load(gstart_ptr + g)
    n = tl.load(gn_ptr + g)
    off = tl.load(poff_ptr + g)
    nb = tl.cdiv(n, BM)
    li = bi * BM + tl.arange(0, BM)
    mi = li < n
    row_acc = tl.zeros((BM,), dtype=tl.float32)
    if TL_HIST:
        h_acc = tl.zeros((NBINS,), dtype=tl.int32)
    for bj in range(bi, nb):
        t = t0 + (bj - bi)
        lj = bj * BM + tl.arange(0, BM)
        mj = lj < n
        acc = tl.zeros((BM, BM), dtype=tl.float32)
        for k0 in range(0, D, BK):
            kk = k0 + tl.arange(0, BK)
            mk = kk < D
            a = tl.load(x_ptr + (start + li)[:, None] * stride_xn + kk[None, :], mask=mi[:, None] & mk[None, :],
                        other=0.0)
            b = tl.load(x_ptr + (start + lj)[:, None] * stride_xn + kk[None, :], mask=mj[:, None] & mk[None, :],
                        other=0.0)
            acc = tl.dot(a, tl.trans(b), acc, input_precision=PREC)
        valid = mi[:, None] & mj[None, :] & (li[:, None] < lj[None, :])
        cz = tl.where(valid, acc, 0.0)
        # sums per tile (merged in float64 on the host) and per-text row sums
        tl.store(tsum_ptr + t, tl.sum(tl.sum(cz, axis=1), axis=0))
        tl.store(tsq_ptr + t, tl.sum(tl.sum(cz * cz, axis=1), axis=0))
        row_acc += tl.sum(cz, axis=1)
        tl.atomic_add(rowsum_ptr + start + lj, tl.sum(cz, axis=0), mask=mj)
        # histogram on fixed bins over [-1, 1]
        binf = tl.floor((acc + 1.0) * (NBINS * 0.5))
        bins = tl.minimum(tl.maximum(binf, 0.0), NBINS - 1.0).to(tl.int32)
        if TL_HIST:
            h_acc += tl.histogram(tl.reshape(bins, [BM * BM]), NBINS, mask=tl.reshape(valid, [BM * BM]))
        else:
            tl.atomic_add(hist_ptr + g * NBINS + bins, tl.full([BM, BM], 1, tl.int32), mask=valid)
        # explicit pair values (triangular order) for small groups
        if off >= 0:
            li64 = li.to(tl.int64)[:, None]
            lj64 = lj.to(tl.int64)[None, :]
            n64 = n.to(tl.int64)
            idx = li64 * n64 - li64 * (li64 + 1) // 2 + (lj64 - li64 - 1)
            tl.store(pairs_ptr + off + idx, acc, mask=valid)
        # top-k / bottom-k candidates of this tile (ties: smallest position first)
        if TOPK > 0:
            flat = tl.arange(0, BM)[:, None] * BM + tl.arange(0, BM)[None, :]
            ct = tl.where(valid, acc, float("-inf"))
            cb = tl.where(valid, acc, float("inf"))
            for k in tl.static_range(TOPK):
                m = tl.max(tl.max(ct, axis=1), axis=0)
                p = tl.min(tl.min(tl.where(ct == m, flat, BM * BM), axis=1), axis=0)
                tl.store(topv_ptr + t * TOPK + k, m)
                tl.store(topp_ptr + t * TOPK + k, p)
                ct = tl.where(flat == p, float("-inf"), ct)
                m2 = tl.min(tl.min(cb, axis=1), axis=0)
                p2 = tl.min(tl.min(tl.where(cb == m2, flat, BM * BM), axis=1), axis=0)
                tl.store(botv_ptr + t * TOPK + k, m2)
                tl.store(botp_ptr + t * TOPK + k, p2)
                cb = tl.where(flat == p2, float("inf"), cb)
    tl.atomic_add(rowsum_ptr + start + li, row_acc, mask=mi)
    if TL_HIST:
        tl.atomic_add(hist_ptr + g * NBINS + tl.arange(0, NBINS), h_acc, mask=h_acc > 0)


def launch_pair_tiles(
    xs, *, tile_group, tile_bi, tile_bj, offsets, counts, pair_off, total_pairs, n_groups,
    n_bins, top_k, block, block_k, input_precision, hist_mode,
):
    """Launch the pair-tile kernel on device-resident rows; return its device buffers."""
    dev = xs.device
    n_tiles = int(tile_group.numel()) if isinstance(tile_group, torch.Tensor) else int(np.asarray(tile_group).size)
    G = n_groups
    t = lambda a, dt=torch.int64: torch.as_tensor(np.asarray(a) if not isinstance(a, torch.Tensor) else a,  # noqa: E731
                                                  dtype=dt, device=dev)
    buf = {
        "hist": torch.zeros((G, n_bins), dtype=torch.int32, device=dev),
        "tsum": torch.zeros(max(n_tiles, 1), dtype=torch.float32, device=dev),
        "tsq": torch.zeros(max(n_tiles, 1), dtype=torch.float32, device=dev),
        "rowsum": torch.zeros(xs.shape[0], dtype=torch.float32, device=dev),
        "topv": torch.full((max(n_tiles, 1), max(top_k, 1)), float("nan"), dtype=torch.float32, device=dev),
        "botv": torch.full((max(n_tiles, 1), max(top_k, 1)), float("nan"), dtype=torch.float32, device=dev),
        "topp": torch.zeros((max(n_tiles, 1), max(top_k, 1)), dtype=torch.int32, device=dev),
        "botp": torch.zeros((max(n_tiles, 1), max(top_k, 1)), dtype=torch.int32, device=dev),
        "pairs": torch.zeros(max(total_pairs, 1), dtype=torch.float32, device=dev),
    }
    if n_tiles:
        # programs: the (group, bi) of every tile with bj == bi, and that tile's index
        tg, tbi, tbj = (np.asarray(a.cpu() if isinstance(a, torch.Tensor) else a) for a in (tile_group, tile_bi, tile_bj))
        first = np.flatnonzero(tbi == tbj)
        _pair_tile_kernel[(first.size,)](
            xs, xs.stride(0), xs.shape[1],
            t(tg[first]), t(tbi[first]), t(first), t(offsets[:-1]), t(counts), t(pair_off),
            buf["hist"], buf["tsum"], buf["tsq"], buf["rowsum"], buf["topv"], buf["topp"], buf["botv"],
            buf["botp"], buf["pairs"],
            BM=block, BK=block_k, NBINS=n_bins, TOPK=top_k, PREC=input_precision,
            TL_HIST=hist_mode == "tl", num_warps=8 if block >= 128 else 4,
        )
    return buf


def pair_tiles(
    xs, *, tile_group, tile_bi, tile_bj, offsets, counts, pair_off, total_pairs, n_groups,
    n_bins, top_k, block, block_k, input_precision, hist_mode,
):
    """Launch the pair-tile kernel; return host arrays (sorted-row positions for the pairs)."""
    n_tiles = int(tile_group.size)
    buf = launch_pair_tiles(
        xs, tile_group=tile_group, tile_bi=tile_bi, tile_bj=tile_bj, offsets=offsets, counts=counts,
        pair_off=pair_off, total_pairs=total_pairs, n_groups=n_groups, n_bins=n_bins, top_k=top_k,
        block=block, block_k=block_k, input_precision=input_precision, hist_mode=hist_mode,
    )
    hist, tsum, tsq, rowsum, pairs = (buf[k] for k in ("hist", "tsum", "tsq", "rowsum", "pairs"))
    topv, topp, botv, botp = (buf[k] for k in ("topv", "topp", "botv", "botp"))
    res = {
        "tile_group": np.asarray(tile_group, dtype=np.int64),
        "hist": hist.cpu().numpy(), "tile_sum": tsum[:n_tiles].double().cpu().numpy(),
        "tile_sumsq": tsq[:n_tiles].double().cpu().numpy(), "row_sum": rowsum.cpu().numpy(),
        "pairs": pairs[:total_pairs].cpu().numpy(),
    }
    starts = np.asarray(offsets)[np.asarray(tile_group, dtype=np.int64)][:, None]
    for name, v, p in (("top", topv, topp), ("bot", botv, botp)):
        p = p[:n_tiles, :top_k].cpu().numpy().astype(np.int64)
        res[f"{name}_val"] = v[:n_tiles, :top_k].cpu().numpy()
        res[f"{name}_ij"] = (
            starts + np.asarray(tile_bi)[:, None] * block + p // block,
            starts + np.asarray(tile_bj)[:, None] * block + p % block,
        )
    return res


def _replicate_configs():
    if triton_interpreting():  # small tiles: the tests' pools still span several tiles in every direction
        return [triton.Config({"BB": 16, "BJ": 16, "BK": 16})]
    return [
        triton.Config({"BB": bb, "BJ": bj, "BK": bk}, num_warps=w, num_stages=s)
        for bb, bj, bk, w, s in ((128, 128, 64, 8, 3), (128, 128, 32, 8, 4), (128, 64, 64, 4, 3),
                                 (64, 128, 64, 4, 3), (64, 64, 64, 4, 4))
    ]


_REPLICATE_CONFIGS = _replicate_configs()
_MIN_BJ = min(c.kwargs["BJ"] for c in _REPLICATE_CONFIGS)


# tuned once per power-of-two size class, not once per pool size (a bootstrap has a pool per group)
@triton.autotune(configs=_REPLICATE_CONFIGS, key=["B_CLASS", "M_CLASS", "PREC"])
@triton.jit
def _replicate_kernel(
    w_ptr, c_ptr, out1_ptr, out2_ptr, B, M, stride_w, stride_c, NJ, B_CLASS, M_CLASS,
    BB: tl.constexpr, BJ: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, MIN_BJ: tl.constexpr,
):
    pid_b = tl.program_id(0)
    pid_j = tl.program_id(1)
    ob = pid_b * BB + tl.arange(0, BB)
    oj = pid_j * BJ + tl.arange(0, BJ)
    mb = ob < B
    mj = oj < M
    acc1 = tl.zeros((BB, BJ), dtype=tl.float32)
    acc2 = tl.zeros((BB, BJ), dtype=tl.float32)
    for k0 in range(0, M, BK):
        ok = k0 + tl.arange(0, BK)
        mk = ok < M
        w = tl.load(w_ptr + ob[:, None] * stride_w + ok[None, :], mask=mb[:, None] & mk[None, :], other=0.0)
        c = tl.load(c_ptr + ok[:, None] * stride_c + oj[None, :], mask=mk[:, None] & mj[None, :], other=0.0)
        acc1 = tl.dot(w, c, acc1, input_precision=PREC)
        acc2 = tl.dot(w, c * c, acc2, input_precision=PREC)
    wj = tl.load(w_ptr + ob[:, None] * stride_w + oj[None, :], mask=mb[:, None] & mj[None, :], other=0.0).to(tl.float32)
    # The partials have one column per MIN_BJ columns of C, whatever BJ the autotuner picked: this
    # program owns columns col .. col + BJ/MIN_BJ - 1, stores its partial in the first and zeros in
    # the others, so no column keeps a value from a configuration tried while tuning.
    col = pid_j * (BJ // MIN_BJ)
    tl.store(out1_ptr + ob * NJ + col, tl.sum(acc1 * wj, axis=1), mask=mb)
    tl.store(out2_ptr + ob * NJ + col, tl.sum(acc2 * wj, axis=1), mask=mb)
    for z in tl.static_range(1, BJ // MIN_BJ):
        mz = mb & (tl.full((BB,), z, tl.int32) + col < NJ)
        tl.store(out1_ptr + ob * NJ + col + z, tl.zeros((BB,), dtype=tl.float32), mask=mz)
        tl.store(out2_ptr + ob * NJ + col + z, tl.zeros((BB,), dtype=tl.float32), mask=mz)


def fused_replicates(W, C, *, input_precision="ieee"):
    """(w_b^T C w_b, w_b^T (C o C) w_b) for every row b of W, in float64 (per-tile fp32 partials).

    Tile sizes are autotuned per size class of (B, M); the partials have one column per column
    block of the narrowest tile and every configuration writes every column, so the buffer needs
    no initialisation and a configuration tried while tuning leaves nothing behind.
    """
    B, M = W.shape
    nj = triton.cdiv(M, _MIN_BJ)
    out1 = torch.empty((B, nj), dtype=torch.float32, device=W.device)
    out2 = torch.empty_like(out1)
    grid = lambda META: (triton.cdiv(B, META["BB"]), triton.cdiv(M, META["BJ"]))  # noqa: E731
    _replicate_kernel[grid](W, C, out1, out2, B, M, W.stride(0), C.stride(0), nj,
                            max(B - 1, 1).bit_length(), max(M - 1, 1).bit_length(), PREC=input_precision,
                            MIN_BJ=_MIN_BJ)
    return out1.double().sum(1), out2.double().sum(1)
