"""Backend discovery shared by the kernel modules.

Nothing here imports triton or cupy at module import time: the checks run when a kernel is
asked for, so ``import harness.kernels`` works on a machine without a GPU, triton or cupy.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os

from harness.errors import BackendError, ConfigError

BACKENDS = ("numpy", "torch", "triton", "cupy", "auto")


def triton_interpreting() -> bool:
    """True when Triton runs kernels in its NumPy interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def cuda_available() -> bool:
    """True when torch sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def triton_runnable() -> bool:
    """Triton is installed and can launch: on a CUDA device, or on the CPU interpreter."""
    if importlib.util.find_spec("triton") is None:
        return False
    return cuda_available() or triton_interpreting()


def cupy_runnable() -> bool:
    """CuPy is installed and a CUDA device answers."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # a broken CUDA driver install reads as "not runnable", never as a crash
        return False


def resolve_backend(backend: str, *, what: str) -> str:
    """Map ``backend`` (one of BACKENDS) to a runnable one; raise with the reason otherwise.

    ``"auto"`` picks Triton on a CUDA device, then CuPy, then NumPy (a dispatcher with a faster
    CPU path, ``group_stats``'s torch one, takes that instead). ``"torch"`` is that CPU path where
    a computation has one, NumPy otherwise. The Triton interpreter is never picked automatically:
    it is a correctness tool, thousands of times slower.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"{what}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        if cuda_available() and importlib.util.find_spec("triton") is not None:
            return "triton"
        if cupy_runnable():
            return "cupy"
        return "numpy"
    if backend == "triton" and not triton_runnable():
        raise BackendError(
            f"{what}: backend='triton' needs triton and a CUDA device (or TRITON_INTERPRET=1 for the "
            "CPU interpreter); use backend='numpy' or 'auto'"
        )
    if backend == "torch":  # a hard dependency: always runnable (CPU cores, or CUDA where present)
        return backend
    if backend == "cupy" and not cupy_runnable():
        raise BackendError(
            f"{what}: backend='cupy' needs cupy and a CUDA device; use backend='numpy' or 'auto'"
        )
    return backend


def torch_device():
    """The device Triton kernels run on: CUDA when present, else CPU (interpreter)."""
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


@functools.lru_cache(maxsize=1)
def _numpy_blas():
    """threadpoolctl controller of NumPy's own BLAS library (not torch's, which may be linked apart)."""
    import numpy as np  # noqa: F401  (loads NumPy's BLAS before the scan)
    from threadpoolctl import ThreadpoolController

    ctl = ThreadpoolController()
    paths = [c.filepath for c in ctl.lib_controllers if c.user_api == "blas" and "numpy" in c.filepath]
    return ctl.select(filepath=paths) if paths else None


@contextlib.contextmanager
def numpy_blas_single_thread():
    """Hold NumPy's BLAS to one thread while torch's threads work in between its calls.

    A loop that alternates torch ops (OpenMP threads) with NumPy BLAS calls (OpenBLAS's own
    threads) on few cores makes the two pools spin against each other. Measured on 2 cores, one
    interleaved run: ``torch_group_stats`` at N = 52,000 took 150 ms against 103 ms for one GEMM of
    the same shape, and 93 ms against 87 ms once NumPy's GEMVs ran on one thread (they are small;
    one thread is enough)."""
    ctl = _numpy_blas()
    if ctl is None:
        yield
        return
    with ctl.limit(limits=1):
        yield
