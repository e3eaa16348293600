"""Target-side check: vLLM's own plugin loader picks up the installed pd-doctor-hotfix plugin.

`python plugin_loaded.py SPEC_JSON` with `vllm_pd_doctor_target` importable and the hotfix
installed in this interpreter's environment. Calls `vllm.plugins.load_general_plugins()` (what
every vLLM process does at start), then runs the in-process harness WITHOUT asking it for the
hotfix: only the installed plugin can change the verdict. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

from vllm.plugins import load_general_plugins
from vllm_pd_doctor_target import harness


def main() -> int:
    load_general_plugins()
    from vllm.v1.core.sched.scheduler import Scheduler

    wrapped = bool(getattr(Scheduler.__init__, "_pd_doctor_hotfix", False))
    out = harness.run(json.loads(sys.argv[1]))
    results = [
        {
            "connector": r.get("connector"),
            "fired": r.get("assertion", {}).get("fired"),
            "hook": r.get("truncation", {}).get("hook"),
            "before_lookup": r.get("truncation", {}).get("before_lookup"),
            "tokens_removed": r.get("truncation", {}).get("tokens_removed"),
            "error": r.get("error"),
        }
        for r in out.get("results", [])
    ]
    mods = sorted(m for m in sys.modules if m.startswith("pd_doctor_hotfix"))
    print(
        json.dumps({"init_wrapped": wrapped, "modules": mods, "results": results, "error": out.get("error")})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
