"""Target-side check: the installed pd-doctor-hotfix plugin applies the Scheduler fixes PD_DOCTOR_HOTFIX
names, through vLLM's own plugin loader.

`python scheduler_fixes_loaded.py SPEC_JSON` with `vllm_pd_doctor_target` importable and the hotfix
installed in this interpreter's environment. Calls `vllm.plugins.load_general_plugins()` (what every
vLLM process does at start), then runs the scenario runner WITHOUT asking it for the hotfix: only the
installed plugin can change the verdicts. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

from vllm.plugins import load_general_plugins
from vllm_pd_doctor_target.scenarios import runner

METHODS = ("_update_from_kv_xfer_finished", "_update_requests_with_invalid_blocks")


def main() -> int:
    load_general_plugins()
    from vllm.v1.core.sched.scheduler import Scheduler

    out = runner.run(json.loads(sys.argv[1]))
    verdicts = {}
    for r in out.get("results", []):
        ran = r.get("status") == "ran" and not (r.get("control") or {}).get("failed")
        failed = bool((r.get("recipe") or {}).get("failed"))
        verdicts[r["scenario"]] = ("fails" if failed else "holds") if ran else str(r.get("status"))
    marked = {m: getattr(Scheduler.__dict__.get(m), "_pd_doctor_hotfix", None) for m in METHODS}
    print(
        json.dumps(
            {
                "marked": {k: v for k, v in marked.items() if v},
                "verdicts": verdicts,
                "error": out.get("error"),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
