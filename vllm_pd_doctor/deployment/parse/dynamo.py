"""`python -m dynamo.vllm`: its own flags stripped, its role flags and `--connector` read (the
kv-transfer-config dynamo builds from them)."""

from __future__ import annotations

import json

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.knowledge.facts import connectors as registry

DYNAMO_BOOL = {
    "--is-prefill-worker",
    "--is-decode-worker",
    "--enable-local-indexer",
    "--use-vllm-tokenizer",
    "--multimodal-processor",
    "--multimodal-worker",
    "--multimodal-encode-worker",
    "--multimodal-decode-worker",
    "--multimodal-encode-prefill-worker",
    "--mm-prompt-template",
    "--enable-multimodal",
    "--no-kv-events",
    "--dyn-tool-call-parser",
    "--dyn-reasoning-parser",
    "--dump-config-to",
    "--store-kv",
    "--request-plane",
    "--event-plane",
    "--discovery-backend",
    "--custom-jinja-template",
    "--migration-limit",
    "--endpoint",
    "--disaggregation-mode",
    "--dynamo-port-min",
    "--dynamo-port-max",
    "--kv-port",
    "--worker-type",
}
"""Flags of `python -m dynamo.vllm` that vLLM does not have (values taken when given)."""
_DYNAMO_VALUE = DYNAMO_BOOL - {
    "--is-prefill-worker",
    "--is-decode-worker",
    "--enable-local-indexer",
    "--use-vllm-tokenizer",
    "--multimodal-processor",
    "--multimodal-worker",
    "--multimodal-encode-worker",
    "--multimodal-decode-worker",
    "--multimodal-encode-prefill-worker",
    "--enable-multimodal",
    "--no-kv-events",
}


def strip_dynamo(args: list[str]) -> tuple[list[str], str | None, str, list[str]]:
    """Remove dynamo.vllm's own flags; return (vLLM args, role, role_source, connectors)."""
    out: list[str] = []
    role: str | None = None
    source = ""
    connectors: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        if name == "--is-prefill-worker":
            role, source = "prefill", "--is-prefill-worker"
        elif name == "--is-decode-worker":
            role, source = "decode", "--is-decode-worker"
        elif name == "--connector":
            vals = [val] if eq else []
            while not eq and i + 1 < len(args) and not args[i + 1].startswith("-"):
                vals.append(args[i + 1])
                i += 1
            connectors.extend(vals)
        elif name in _DYNAMO_VALUE:
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                val = args[i + 1]
                i += 1
            if name in ("--disaggregation-mode", "--worker-type") and val in ("prefill", "decode"):
                role, source = val, f"--disaggregation-mode {val}"
        elif name in DYNAMO_BOOL:
            pass
        else:
            out.append(a)
        i += 1
    return out, role, source, connectors


LAUNCHER = "dynamo.vllm"
"""Its entry in the connector registry's launcher tables (`knowledge.connectors.LAUNCHER_CONNECTORS`)."""


def dynamo(args: list[str], env: dict[str, str], launcher: str) -> Found:
    rest, role, source, connectors = strip_dynamo(args)
    f = Found(rest, env, launcher + "dynamo.vllm", role=role, role_source=source)
    has_ktc = any(a.split("=")[0].replace("_", "-").startswith("--kv-transfer-config") for a in rest)
    names = [registry.launcher_connector(LAUNCHER, c) for c in connectors if c.lower() != "none"]
    if not has_ktc and (names or not connectors):
        default = registry.LAUNCHER_DEFAULT[LAUNCHER]
        names = names or [registry.launcher_connector(LAUNCHER, default)]
        ktc = (
            {"kv_connector": names[0], "kv_role": "kv_both"}
            if len(names) == 1
            else {
                "kv_connector": "MultiConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": {
                    "connectors": [{"kv_connector": n, "kv_role": "kv_both"} for n in names]
                },
            }
        )
        f.args = [*rest, "--kv-transfer-config", json.dumps(ktc)]
        given = " ".join(connectors) or f"(default {default})"
        f.notes.append(f"kv-transfer-config from dynamo.vllm's --connector {given}")
    return f
