"""Benchmark `pd-doctor matrix` with cached environments, and optionally a cold provisioning.

    python benchmarks/bench_matrix.py [--releases 0.28.0,0.32.0] [--provision 0.29.0]

1. Times `pd-doctor repro --vllm V --connector all` for each release on its own (the per-release
   repro time), then `pd-doctor matrix --vllm <releases>` with --jobs 1 and --jobs 2; prints the
   ratio to the repro sum (target <= 1.2) and --jobs 2 over --jobs 1 (target <= 0.7 on 3 releases).
2. --provision V: provisions V into a fresh, temporary PD_DOCTOR_HOME (the uv cache stays
   warm, so this is "empty environment cache") and reports the time; the directory is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_pd_doctor", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0, proc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", default="0.28.0,0.32.0")
    ap.add_argument("--provision", default=None, help="a release to provision from scratch")
    a = ap.parse_args()
    results: dict[str, object] = {}
    per: dict[str, float] = {}
    for v in a.releases.split(","):
        wall, proc = _cli("repro", "--vllm", v, "--connector", "all", "--quiet", "--format", "json")
        if proc.returncode not in (0, 1):
            print(proc.stderr, file=sys.stderr)
            return 3
        per[v] = round(wall, 2)
    walls: dict[int, float] = {}
    for jobs in (1, 2):
        wall, proc = _cli("matrix", "--vllm", a.releases, "--jobs", str(jobs), "--quiet", "--format", "json")
        doc = json.loads(proc.stdout)
        walls[jobs] = wall
    total = sum(per.values())
    results["repro_wall_s"] = per
    results["repro_wall_sum_s"] = round(total, 2)
    results["matrix_wall_s"] = round(walls[2], 2)
    results["matrix_jobs1_wall_s"] = round(walls[1], 2)
    results["matrix_internal"] = doc["timings"]
    results["ratio"] = round(walls[2] / total, 3)
    results["jobs2_over_jobs1"] = round(walls[2] / walls[1], 3)  # issue 20 target <= 0.7 (3 releases)
    if a.provision:
        home = tempfile.mkdtemp(prefix="pd-doctor-bench-")
        try:
            wall, proc = _cli("envs", "create", a.provision, env={"PD_DOCTOR_HOME": home})
            results["provision"] = {
                "release": a.provision,
                "wall_s": round(wall, 2),
                "ok": proc.returncode == 0,
                "error": None if proc.returncode == 0 else proc.stderr[-500:],
            }
        finally:
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
