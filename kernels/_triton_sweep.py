"""Triton kernel of the threshold sweep (imported only when the Triton backend is used)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _mix32(x):
    # lowbias32 on uint32 lanes; multiplication wraps mod 2**32
    x ^= x >> 16
    x = x * 0x7FEB352D
    x ^= x >> 15
    x = x * 0x846CA68B
    x ^= x >> 16
    return x


@triton.jit
def _sweep_hist_kernel(
    key_ptr, story_ptr, cdf_ptr, hist_ptr,
    n_items, n_reps, K,
    BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr, N_CDF: tl.constexpr,
):
    pid_i = tl.program_id(0)
    pid_r = tl.program_id(1)
    lane = tl.arange(0, BLOCK_I)
    offs = pid_i * BLOCK_I + lane
    imask = offs < n_items
    reps = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = reps < n_reps

    key = tl.load(key_ptr + offs, mask=imask, other=-1)
    # key of the next item inside this block (-1 past the block or the array): marks run ends
    key_next = tl.load(key_ptr + offs + 1, mask=(offs + 1 < n_items) & (lane < BLOCK_I - 1), other=-1)
    sto = tl.load(story_ptr + offs, mask=imask, other=0).to(tl.uint32)

    seed32 = tl.load(cdf_ptr + N_CDF).to(tl.uint32)  # mix32(seed), stored after the CDF table
    h1 = _mix32(reps.to(tl.uint32) ^ seed32)
    h = _mix32(h1[:, None] ^ sto[None, :])  # uint32: unsigned 32-bit compares below, no int64 lanes
    w = tl.zeros([BLOCK_R, BLOCK_I], dtype=tl.int32)
    for k in tl.static_range(N_CDF):
        c = tl.load(cdf_ptr + k).to(tl.uint32)  # thresholds < 2**32: exact
        w += (h >= c).to(tl.int32)
    w = tl.where(reps[:, None] == 0, 1, w)  # replicate 0 is the observed data
    w = tl.where(rmask[:, None] & imask[None, :], w, 0)

    cs = tl.cumsum(w, axis=1)
    is_end = imask & (key != key_next)
    base = reps.to(tl.int64)[:, None] * K
    m_end = rmask[:, None] & is_end[None, :]
    # run total = running sum at its end minus running sum at the previous run's end
    tl.atomic_add(hist_ptr + base + key[None, :], cs, mask=m_end)
    tl.atomic_add(hist_ptr + base + key_next[None, :], -cs, mask=m_end & (key_next >= 0)[None, :])


def launch_sweep_hist(key, sto, K, B, seed_h, cdf, *, block_rep=16, block_items=1024):
    """Weighted histogram (B+1, K) int32 of key-sorted items; weights from (seed, replicate, story).

    ``cdf``: the 16 Poisson(1) CDF thresholds as int64; ``seed_h`` = mix32(seed) travels in the
    same buffer (a scalar argument equal to 1 would be specialised into a constant).
    """
    n = key.numel()
    table = torch.cat([cdf.to(torch.int64), torch.tensor([seed_h], dtype=torch.int64, device=cdf.device)])
    hist = torch.zeros((B + 1, K), dtype=torch.int32, device=key.device)
    if n == 0:
        return hist
    grid = (triton.cdiv(n, block_items), triton.cdiv(B + 1, block_rep))
    _sweep_hist_kernel[grid](
        key, sto, table, hist, n, B + 1, K,
        BLOCK_R=block_rep, BLOCK_I=block_items, N_CDF=cdf.numel(),
    )
    return hist
