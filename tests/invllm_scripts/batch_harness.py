"""Target-side: several in-process harness runs in ONE vLLM interpreter (one import of vLLM).

`python batch_harness.py SPECS_JSON_FILE OUT_FILE` with `vllm_pd_doctor_target` importable: runs
`harness.run(spec)` for each spec (the same specs `pd-doctor repro` would send, one per model) and
writes the list of answers to OUT_FILE. Used by tests/repro/inprocess/test_repro_fidelity.py to run every
model family of a release in one child instead of one child per family.
"""

from __future__ import annotations

import json
import sys

from vllm_pd_doctor_target import harness


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as fh:
        specs = json.load(fh)
    answers = [harness.run(spec) for spec in specs]
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(answers, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
