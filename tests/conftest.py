"""Shared fixtures: the embedded model, prepared once per session, and run directories."""

from __future__ import annotations

import os
import socket

import pytest

from harness.models import offline_env

offline_env()


@pytest.fixture(scope="session")
def smollm2_dir():
    """SmolLM2-135M-Instruct as safetensors (converted from the packaged GGUF once, cached)."""
    from harness.models import prepare

    return prepare("smollm2-135m")


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_collection_modifyitems(config, items):
    """GPU tests skip with a reason when no CUDA device is present."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
