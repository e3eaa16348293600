"""Benchmark: the CLI's start-up cost, as a user pays it (one process per run).

    .venv/bin/python benchmarks/bench_cli_start.py [--repeat N]

Prints the median wall time over N runs (default 5, after one warm-up run) of
  - `pd-doctor --help`,
  - `pd-doctor check-config --prefill-cmd P --decode-cmd D` without --python (no vLLM read; the
    pair is the NIXL P/D pair of tests/fixtures/check_config/corpus/vllm_issue22093_pasted.sh,
    a real launch script from vLLM issue #22093, with its shell variables filled in
    and the closing quote the paste lost; model id
    resolved offline: HF_HUB_OFFLINE=1, so the timing does not depend on the network),
  - `python -X importtime -c "import vllm_pd_doctor.cli"` (the cumulative import time of the CLI),
and the machine's load average beside them (the figures are only comparable at a similar load).
and the import budget of one check-config run (`-X importtime` self time per package, pd-doctor
per module), and the CPU time (user + system) of check-config, less sensitive to other load.
Bytecode: the runs write and reuse `__pycache__` (as an installed package has; a process started
with PYTHONDONTWRITEBYTECODE=1 compiles every module on each run: ~0.5 s more).
Targets (issue 28): check-config median <= 0.3 s on an idle 2-core box, --help instant.
Exits 1 when check-config's median misses 0.5 s (a loaded shared box).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIR_SOURCE = ROOT / "tests" / "fixtures" / "check_config" / "corpus" / "vllm_issue22093_pasted.sh"
FILL = {"HOST_MODEL_PATH": "Qwen", "MODEL_NAME": "Qwen3-0.6B", "MAX_MODEL_LEN": "4096", "BLOCK_SIZE": "16"}


def pair() -> tuple[str, str]:
    """The prefill and decode `vllm serve` commands of the fixture, variables filled in."""
    text = PAIR_SOURCE.read_text().replace("\\\n", " ")
    cmds = [" ".join(line.split()) for line in text.splitlines() if "vllm serve" in line]
    filled = [re.sub(r"\$\{(\w+)\}", lambda m: FILL[m.group(1)], c) for c in cmds]
    filled = [c + "'" if c.count("'") % 2 else c for c in filled]  # the paste lost its last quote
    prefill = next(c for c in filled if "kv_producer" in c)
    decode = next(c for c in filled if "kv_consumer" in c)
    return prefill, decode


def _env() -> dict[str, str]:
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")  # bytecode cached, as installed
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("COLUMNS", "120")
    return env


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL
    )
    return time.perf_counter() - t0, proc.returncode, proc.stderr


def _median(cmd: list[str], env: dict[str, str], repeat: int, ok: tuple[int, ...]) -> float:
    _time(cmd, env)  # warm: bytecode, the OS file cache
    times = []
    for _ in range(repeat):
        t, rc, err = _time(cmd, env)
        if rc not in ok:
            raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {rc}): {err.strip()[-400:]}")
        times.append(t)
    return statistics.median(times)


def _cpu_median(cmd: list[str], env: dict[str, str], repeat: int) -> float:
    """Median CPU time (user + system) of the child: what the command itself costs, less
    sensitive to other load on the machine than the wall time."""
    out = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(out)


def import_budget(cmd: list[str], env: dict[str, str], top: int = 25) -> list[tuple[str, float]]:
    """`-X importtime` of one run of `cmd`: self time per module of pd-doctor and per top-level
    package of the rest, in ms, largest first."""
    err = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    ).stderr
    per: dict[str, float] = {}
    for ln in err.splitlines():
        if not ln.startswith("import time:") or "self [us]" in ln:
            continue
        self_us, _, name = ln[len("import time:") :].split("|")
        name = name.strip()
        key = name if name.startswith("vllm_pd_doctor") else name.split(".")[0]
        per[key] = per.get(key, 0.0) + int(self_us) / 1000
    return sorted(per.items(), key=lambda kv: -kv[1])[:top]


def _import_time(env: dict[str, str], repeat: int) -> float:
    """Median cumulative `-X importtime` of vllm_pd_doctor.cli, in seconds."""
    cmd = [sys.executable, "-X", "importtime", "-c", "import vllm_pd_doctor.cli"]
    out = []
    for _ in range(repeat):
        err = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120).stderr
        line = next(ln for ln in err.splitlines() if ln.rstrip().endswith("| vllm_pd_doctor.cli"))
        out.append(int(line.split("|")[1]) / 1e6)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    env = _env()
    exe = [sys.executable, "-m", "vllm_pd_doctor"]
    prefill, decode = pair()
    load = os.getloadavg()
    check = [*exe, "check-config", "--prefill-cmd", prefill, "--decode-cmd", decode, "--format", "json"]
    res = {
        "help_s": _median([*exe, "--help"], env, a.repeat, (0,)),
        "check_config_s": _median(check, env, a.repeat, (0, 1)),
        "check_config_cpu_s": _cpu_median(check, env, a.repeat),
        "import_cli_s": _import_time(env, a.repeat),
        "loadavg_before": [round(x, 2) for x in load],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "repeat": a.repeat,
    }
    print(f"load average (1/5/15 min): {res['loadavg_before']} on {res['cpus']} CPUs")
    print(f"pd-doctor --help                    median {res['help_s']:.3f} s")
    print(f"pd-doctor check-config (no --python) median {res['check_config_s']:.3f} s  (target <= 0.5 s)")
    print(f"pd-doctor check-config CPU (user+sys) median {res['check_config_cpu_s']:.3f} s")
    print(f"import vllm_pd_doctor.cli            median {res['import_cli_s']:.3f} s")
    budget = import_budget(check, env)
    res["import_budget_ms"] = {k: round(v, 1) for k, v in budget}
    print("import budget of one check-config run (self time per package / pd-doctor module, ms):")
    for name, ms in budget:
        print(f"  {ms:7.1f}  {name}")
    print(json.dumps(res))
    return 0 if res["check_config_s"] <= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
