"""Build `vllm_pd_doctor/knowledge/facts/serve_flags.json`: `vllm serve`'s flags per vLLM release, read from
each release's own argument parser (`make_arg_parser` on its `FlexibleArgumentParser`, built in that
release's interpreter by `invllm/serve_parser.py`; nothing is started).

Per flag: `b` a boolean with a --no- form (BooleanOptionalAction), `s` a switch (store_true/false,
store_const), else the value's type (`int`, `float`, `str`, or `v` for a converter such as a JSON
parser) with `|choice|choice` when the parser restricts it, and `+`/`*`/`?` for nargs other than one.

    .venv/bin/python scripts/build_flag_tables.py              # every provisioned environment
    .venv/bin/python scripts/build_flag_tables.py 0.28.0 0.32.0  # these releases (added)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import envs, targetrun
from vllm_pd_doctor.knowledge.readers.serve_flags import DATA_FILE, encode_flag


def pythons(versions: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d in sorted((envs.home() / "envs").glob("vllm-*-*")):
        py = d / "bin" / "python"
        v = d.name.rsplit("-", 1)[-1]
        if py.is_file() and (not versions or v in versions):
            out[v] = py
    return out


def describe(python: Path) -> dict[str, Any]:
    run = targetrun.run_module(str(python), "serve_parser", [], timeout=300, what="vllm serve's parser")
    flags = {k: encode_flag(v) for k, v in sorted(run.answer["flags"].items())}
    return {
        "vllm": run.answer["vllm"],
        "flags": flags,
        "aliases": dict(sorted(run.answer["aliases"].items())),
    }


def main(argv: list[str]) -> int:
    doc = json.loads(DATA_FILE.read_text(encoding="utf-8")) if DATA_FILE.is_file() else {"releases": {}}
    for v, py in pythons(argv).items():
        got = describe(py)
        if got["vllm"] != v:
            print(f"{py}: vLLM {got['vllm']}, expected {v}: skipped", file=sys.stderr)
            continue
        doc["releases"][v] = {"flags": got["flags"], "aliases": got["aliases"]}
        print(f"{v}: {len(got['flags'])} flags from {py}", file=sys.stderr)
    doc["schema_version"] = 1
    doc["releases"] = dict(
        sorted(doc["releases"].items(), key=lambda kv: tuple(int(x) for x in kv[0].split(".")))
    )
    DATA_FILE.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
