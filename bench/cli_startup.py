"""How long `hpq --help` takes (target: well under 0.5 s) and which heavy SDKs it imports (none).

    python3 bench/cli_startup.py [RUNS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

HEAVY = ("boto3", "botocore", "troposphere", "cfnlint", "kubernetes", "paramiko", "jinja2", "rich", "torch")


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hpq", "--help"], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    probe = ("import sys; from hpq.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    heavy = out.strip().splitlines()[-1]
    print(f"hpq --help: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
          f"over {runs} runs; heavy modules imported: {heavy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
