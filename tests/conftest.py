"""Shared fixtures: the embedded model, prepared once per session, and run directories."""

from __future__ import annotations

import os
import socket

import pytest

from harness.models import offline_env

offline_env()


@pytest.fixture(scope="session")
def benchmark_module():
    """A function that imports a script of ``benchmarks/`` by name ("seeds" for benchmarks/seeds.py)."""
    import importlib.util
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"bench_{name}", bench / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load


@pytest.fixture(scope="session")
def smollm2_dir():
    """SmolLM2-135M-Instruct as safetensors (converted from the packaged GGUF once, cached)."""
    from harness.models import prepare

    return prepare("smollm2-135m")


@pytest.fixture
def syncs_and_renames(monkeypatch) -> list[tuple[str, int]]:
    """Records each ``os.fsync`` and ``os.replace`` as (call, inode of the file or folder synced or renamed),
    in order; a file keeps its inode through its rename."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


@pytest.fixture
def stage_written_durably(syncs_and_renames):
    """``check(out, run, want)``: calls ``run()`` (a whole-table stage writing the folder ``out``; it must return a
    result whose status is "done") and checks that every file it wrote there (``want``, paths in ``out``, among
    them) was synced, renamed and its folder synced, all before the stage's ``_stage.json`` recorded them current.
    Returns the recorded syncs and renames and the files."""

    def check(out, run, want: set[str]) -> tuple[list, list]:
        events = syncs_and_renames
        events.clear()
        assert run().status == "done"
        recorded_at = events.index(("replace", (out / "_stage.json").stat().st_ino))
        files = sorted(p for p in out.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        assert want <= {p.relative_to(out).as_posix() for p in files}
        for p in files:
            file, folder = p.stat().st_ino, p.parent.stat().st_ino
            assert ("replace", file) in events, f"{p.name} written in place"
            i = events.index(("replace", file))
            assert events[i - 1:i + 2] == [("fsync", file), ("replace", file), ("fsync", folder)], p.name
            assert i < recorded_at, p.name
        return events, files

    return check


@pytest.fixture
def report_written_durably(stage_written_durably):
    """``check(store, build, want)``: ``stage_written_durably`` for the report stage of ``store`` built by ``build``."""
    from harness.audit.stages import REPORT, run_report_stage

    def check(store, build, want: set[str]) -> None:
        stage_written_durably(store.stage_dir(REPORT), lambda: run_report_stage(store, "fp", build, 0.0), want)

    return check


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def json_server():
    """Starts loopback HTTP servers that answer each POST with ``answer(body) -> (status, json
    object or raw bytes[, headers])``, ``body`` being the request's parsed JSON; returns each server's
    ``http://127.0.0.1:PORT/v1``. Servers stop when the test ends."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    servers = []

    def start(answer) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                status, obj, *headers = answer(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()  # bytes: a body sent as is
                self.send_response(status)
                for k, v in (headers[0] if headers else {}).items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


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


@pytest.fixture
def results_untouched():
    """Fails a test that changed benchmarks/RESULTS.md (a benchmark run with ``--no-write`` must leave it alone)."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "RESULTS.md"
    before = results.read_bytes()
    yield
    assert results.read_bytes() == before
