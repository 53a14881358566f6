"""`hpq report`'s page in a real browser: Debian's chromium, headless, offline.

Chromium builds the DOM from the file (`--dump-dom`) and draws it (`--screenshot`); the checks read what it
built and drew: the verdict lines, the axis labels, the expected-figure line, the slow node's mark, the
number of SVG charts and points, and in the picture the FAIL and PASS badges' colours. Its network is a
closed port (--proxy-server), so a page that needed anything from outside would show it missing. Inputs:
tests/report_samples.demo (AWS's published p5 run, a sweep over the stand-in fabric, a real H200 nanoGPT
run, seed 004's g5 run). Slow (a browser start takes seconds); dev/test.sh installs the chromium package,
without it this fails (never skips).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests import report_samples
from tests.views.test_views_report import Dom

pytestmark = pytest.mark.slow
WIDTH, HEIGHT = 1000, 700  # the title, the verdict lines and the first chart's top


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed (dev/test.sh installs Debian's chromium package)")
    return subprocess.run([exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                           "--hide-scrollbars", "--proxy-server=127.0.0.1:9", f"--user-data-dir={tmp / 'profile'}",
                           f"--window-size={WIDTH},{HEIGHT}", *args], capture_output=True, text=True, timeout=120,
                          env={"HOME": str(tmp), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    files = report_samples.demo(folder)
    res = subprocess.run([sys.executable, "-m", "hpq", "report", *map(str, files), "-o", str(folder / "r.html")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return folder / "r.html"


def test_chromium_builds_the_page_we_meant(report, tmp_path):
    res = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert res.returncode == 0 and "</html>" in res.stdout, res.stderr[-2000:]
    dom = Dom(res.stdout)
    rows = dom.find("tr", "verdict")
    assert [(r["data-test"], r["class"].split()[1]) for r in rows] == [
        ("nccl", "PASS"), ("sweep", "FAIL"), ("nanogpt", "PASS"), ("nccl", "PASS")]
    assert dom.text_in("td", "expectation")[0] == "487.09 GB/s published for 2 x ml.p5.48xlarge"
    assert dom.text_in("td", "number")[1].startswith("1 slow node(s): ip-10-1-0-14")
    labels = dom.text_in("text", "axis-label")
    assert labels.count("Message size (bytes, log scale)") == 2 and labels.count("Bus bandwidth (GB/s)") == 2
    assert {"Iteration", "Loss", "Tokens per second"} <= set(labels)
    expected = [float(g["data-value"]) for g in dom.find("g", "expected")]
    assert expected == [487.09, 3.0], "one expected line per bandwidth chart: the catalog's figures"
    assert "expected 487.09 GB/s (published, 2 node(s))" in dom.text_in("text", "ref-label")
    assert [g["data-node"] for g in dom.find("g", "slow-node")] == ["ip-10-1-0-14"]
    assert [t for t in dom.text_in("text", "slow") if "SLOW" in t] == ["ip-10-1-0-14 \u25b2 SLOW"]
    charts = [s["data-chart"] for s in dom.find("svg", "chart")]
    assert charts == ["busbw-1", "sweep-2", "loss-3", "tokens-3", "busbw-4"]
    assert len([c for c in dom.find("rect", "cell") if "data-a" in c]) == 8 * 7
    assert [int(g["data-points"]) for g in dom.find("g", "series")] == [32, 60, 60, 2]


def test_chromium_draws_it(report, tmp_path):
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, f"--screenshot={shot}", report.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    width, height, pixels = read_png(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    red = count(pixels, (0xC6, 0x28, 0x28))  # the FAIL badge (page CSS --fail)
    green = count(pixels, (0x1A, 0x7F, 0x37))  # the PASS badges (--pass)
    assert red > 500 and green > 1500, (red, green)


def count(pixels: list[bytes], rgb: tuple[int, int, int], tol: int = 6) -> int:
    return sum(1 for row in pixels for i in range(0, len(row), 4)
               if all(abs(row[i + k] - rgb[k]) <= tol for k in range(3)))


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGBA rows of an 8-bit RGB/RGBA PNG (what Chromium writes), standard library only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(line) if channels == 4 else b"".join(bytes(line[i:i + 3]) + b"\xff"
                                                              for i in range(0, stride, 3)))
    return width, height, rows
