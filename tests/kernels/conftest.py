"""Kernel tests: Triton runs in its CPU interpreter unless a CUDA device is present.

``TRITON_INTERPRET`` must be set before any Triton kernel is defined; the kernel modules import
triton lazily, so setting it here (collection time) is early enough. On a GPU machine the
variable is left alone and the same tests run the compiled kernels.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

try:
    import torch

    _CUDA = bool(torch.cuda.is_available())
except ImportError:  # torch is a hard dependency; this only keeps collection alive
    _CUDA = False

if not _CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def triton_ok():
    """Skip unless Triton can launch here (CUDA, or the interpreter)."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (pip install 'harness[kernels]')")
    if not _CUDA and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip("no CUDA device and TRITON_INTERPRET is off")


@pytest.fixture
def cupy_ok():
    """Skip unless CuPy is installed and a CUDA device answers."""
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed (pip install cupy-cuda12x on a CUDA machine)")
    import cupy

    try:
        ok = cupy.cuda.is_available()
    except Exception:
        ok = False
    if not ok:
        pytest.skip("cupy is installed but cupy.cuda.is_available() is False: no CUDA device")
