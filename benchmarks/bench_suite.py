"""The test suite's time per tier and its ten slowest tests.

    python benchmarks/bench_suite.py                      # run every tier (fast, vllm, live), then report
    python benchmarks/bench_suite.py --tier fast --tier vllm --jobs 2
    python benchmarks/bench_suite.py --junit fast=a.xml --junit vllm=b.xml   # read reports, run nothing

Each tier is one `pytest -m EXPR --junitxml=...` run (the same selections as `make check`,
`make test-vllm`, `make test-live`); its wall time is measured here, the per-test times come from the
JUnit report (call time plus fixture setup: a session fixture's child is charged to the first test
that needs it). Prints a table per tier, the ten slowest tests overall, and one JSON line (`--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    "fast": "not vllm and not live",
    "vllm": "vllm and not live",
    "live": "live",
}
SERIAL = {"live"}  # an engine pair takes both cores


@dataclass
class Tier:
    name: str
    wall_s: float | None = None
    rc: int | None = None
    tests: int = 0
    failed: int = 0
    skipped: int = 0
    tests_s: float = 0.0
    cases: list[tuple[float, str]] = field(default_factory=list)


def read_junit(path: Path, tier: Tier) -> Tier:
    """Fill `tier` from a JUnit XML report (pytest's --junitxml)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for suite in suites:
        for case in suite.iter("testcase"):
            t = float(case.get("time") or 0.0)
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            tier.cases.append((t, name))
            tier.tests_s += t
            tier.tests += 1
            if case.find("failure") is not None or case.find("error") is not None:
                tier.failed += 1
            elif case.find("skipped") is not None:
                tier.skipped += 1
        if tier.wall_s is None and suite.get("time"):
            tier.wall_s = float(suite.get("time") or 0.0)
    return tier


def run_tier(name: str, jobs: int, out: Path, extra: list[str]) -> Tier:
    cmd = [sys.executable, "-m", "pytest", "-m", TIERS[name], "-q", "-p", "no:cacheprovider"]
    if jobs > 0 and name not in SERIAL:
        cmd += ["-n", str(jobs), "--dist", "loadgroup"]
    cmd += [f"--junitxml={out}", *extra]
    print(f"bench_suite: {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    tier = Tier(name, rc=proc.returncode)
    if out.exists():
        read_junit(out, tier)
    tier.wall_s = wall  # the measured wall time, not the report's
    return tier


def render(tiers: list[Tier], top: int) -> str:
    lines = [f"{'tier':<6} {'wall':>9} {'tests':>6} {'failed':>6} {'skipped':>7} {'sum(test)':>10}  exit"]
    for t in tiers:
        wall = f"{t.wall_s:8.1f}s" if t.wall_s is not None else "        -"
        rc = "-" if t.rc is None else str(t.rc)
        lines.append(f"{t.name:<6} {wall} {t.tests:>6} {t.failed:>6} {t.skipped:>7} {t.tests_s:>9.1f}s  {rc}")
    total = sum(t.wall_s or 0.0 for t in tiers)
    lines.append(f"{'total':<6} {total:8.1f}s")
    slow = sorted(((s, f"[{t.name}] {n}") for t in tiers for s, n in t.cases), reverse=True)[:top]
    lines.append("")
    lines.append(f"{top} slowest tests:")
    lines += [f"  {s:8.1f}s  {n}" for s, n in slow]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", action="append", choices=sorted(TIERS), help="tiers to run (default all)")
    ap.add_argument("--jobs", type=int, default=2, help="xdist workers for fast/vllm (0: serial)")
    ap.add_argument("--junit", action="append", default=[], metavar="TIER=FILE", help="read, do not run")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="also print one JSON line")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    a = ap.parse_args()
    tiers: list[Tier] = []
    if a.junit:
        for spec in a.junit:
            name, _, path = spec.partition("=")
            if not path:
                name, path = Path(spec).stem, spec
            tiers.append(read_junit(Path(path), Tier(name)))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-suite-") as d:
            for name in a.tier or list(TIERS):
                tiers.append(run_tier(name, a.jobs, Path(d) / f"{name}.xml", a.pytest_args))
    print(render(tiers, a.top))
    if a.json:
        print(json.dumps([{k: v for k, v in asdict(t).items() if k != "cases"} for t in tiers]))
    return max((t.rc or 0 for t in tiers), default=0)


if __name__ == "__main__":
    sys.exit(main())
