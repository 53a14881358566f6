"""Remake docs/images/report.png: `hpq report` over the real samples (tests/report_samples.demo), shot by
headless Chromium (Debian's chromium package).

    python3 dev/report_screenshot.py [OUT.png]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests are not installed: their samples import from the checkout

from tests import report_samples  # noqa: E402

WIDTH, HEIGHT = 1100, 3250  # the verdict lines, the bandwidth chart, the sweep's heat map, nanoGPT's charts


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images" / "report.png"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = report_samples.demo(folder)
        page = folder / "report.html"
        subprocess.run([sys.executable, "-m", "hpq", "report", *map(str, files), "-o", str(page), "--title",
                        "hpq report of real samples (AWS's published p5 run, seed 004, a sweep, an H200 nanoGPT run)"],
                       check=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["chromium", "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                        f"--user-data-dir={folder / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
                        f"--screenshot={out}", page.as_uri()], check=True, capture_output=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
