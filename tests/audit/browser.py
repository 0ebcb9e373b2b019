"""Opening a report in headless Chromium (Debian's ``chromium``) and checking what it shows."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def render_in_chromium(index: Path, out: Path) -> tuple[str, str, Path]:
    """Open ``index`` in headless Chromium: the DOM after load (scripts run), the browser log and a
    full-height screenshot at ``out / "report.png"``. Skips when Chromium is absent."""
    chromium = next((c for c in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")) if c and Path(c).exists()), None)
    if not chromium:
        pytest.skip("Debian's chromium is not installed (`make test` installs it where apt-get can: apt-get install chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--enable-logging=stderr", "--v=0", f"--user-data-dir={out / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", index.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = out / "report.png"
    r = subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1280,6000", index.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return dom.stdout, dom.stderr + r.stderr, shot


def check_rendered(index: Path, dom: str, log: str, shot: Path, copy_as: str | None = None) -> None:
    """No console errors, every figure loaded in the browser and decodes as a PNG, a real screenshot.

    With ``HARNESS_SCREENSHOTS`` set to a directory, the screenshot is also copied there as
    ``copy_as`` for a reviewer's look."""
    console = [ln for ln in log.splitlines() if ":CONSOLE" in ln]
    errors = [ln for ln in console if "Uncaught" in ln or "ERROR:CONSOLE" in ln or "failed to load" in ln]
    assert not errors, "console errors:\n" + "\n".join(errors)
    assert "Table S13a-c" in dom and "Labeller used and its evaluation" in dom
    srcs = re.findall(r"<img src='([^']+)'", index.read_text())
    assert srcs, "the report has no figures"
    loaded = dict(re.findall(r'<img src="([^"]+)"[^>]*data-loaded="(yes|no)"', dom))
    for src in srcs:
        assert loaded.get(src) == "yes", f"{src}: not loaded in Chromium ({loaded.get(src)})"
        data = (index.parent / src).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 5_000, f"{src}: not a real PNG ({len(data)} bytes)"
        width, height = struct.unpack(">II", data[16:24])
        assert width > 200 and height > 100, f"{src}: {width}x{height}"
    png = shot.read_bytes()
    assert png[:8] == PNG_SIGNATURE and len(png) > 50_000, f"screenshot {len(png)} bytes"
    keep = os.environ.get("HARNESS_SCREENSHOTS")
    if keep and copy_as:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(keep) / copy_as)
