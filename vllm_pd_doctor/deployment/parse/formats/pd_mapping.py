"""pd-doctor's own mapping: `prefill:` and `decode:` entries (or names containing them, a list of
entries for xPyD), each a command string, an argument list, or a mapping with `command`/`cmd`,
`args`, `env`, `model`, `host`; optionally under `roles:`.

```yaml
prefill: {args: [vllm, serve, MODEL, --kv-transfer-config, '{...}'], env: {...}, host: node-a}
decode: vllm serve MODEL --kv-transfer-config '{...}'
```
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import ROLES, env_map, role_from_name, run_argv, scalar
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.deployment.parse.symbolic import Interp
from vllm_pd_doctor.infra.errors import BadInput

_NOT_VLLM_HINT = (
    "use `vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server --model MODEL ...`"
)


def sniff(src: Source) -> bool:
    d = src.single()
    return d is not None and any(k in d for k in ROLES) and "kind" not in d and "services" not in d


def read(src: Source) -> list[Found]:
    doc = src.single() or {}
    out: list[Found] = []
    for key, entry in doc.items():
        role = role_from_name(str(key)) if str(key).lower() not in ROLES else str(key).lower()
        if role is None or entry is None:
            continue
        entries = (
            entry
            if isinstance(entry, list) and entry and all(isinstance(e, dict) for e in entry)
            else [entry]
        )
        for k, e in enumerate(entries):
            f = _entry(e, f"{src.label} ({key})", src.variables)
            f.role, f.role_source = role, f"{key}: entry"
            f.name = str(key) if len(entries) == 1 else f"{key}-{k}"
            out.append(f)
    if not out:
        raise BadInput(
            f"{src.label}: no prefill: or decode: entry",
            hint="write prefill: {args: [...], env: {...}} and decode: {...}",
        )
    return out


FORMAT = DeploymentFormat("pd-doctor-mapping", sniff, read)


def _entry(entry: Any, what: str, variables: Mapping[str, str]) -> Found:
    if isinstance(entry, str):
        found = _run_text(entry, variables)
        if not found:
            raise BadInput(f"{what}: not a vLLM server command ({entry.strip()[:40]!r})", hint=_NOT_VLLM_HINT)
        return found[0]
    if isinstance(entry, list):
        entry = {"args": entry}
    if not isinstance(entry, dict):
        raise BadInput(
            f"{what}: expected a command string or a mapping with args/env, got {type(entry).__name__}"
        )
    env = env_map(entry.get("env"), what)
    f = _command(
        entry.get("command", entry.get("cmd")), _args(entry.get("args", []), what), env, variables, what
    )
    if not f.args and "model" not in entry:
        raise BadInput(f"{what}: empty command (no args)")
    if entry.get("model") is not None:
        f.args = [*f.args, "--model", scalar(entry["model"])]
    host = entry.get("host") or entry.get("node")
    if host is not None:
        f.network, f.network_evidence = f"host:{scalar(host)}", "host: entry"
        f.name = scalar(host)
    return f


def _args(raw: Any, what: str) -> list[str]:
    if isinstance(raw, str):
        try:
            return shlex.split(raw)
        except ValueError as exc:
            raise BadInput(f"{what}: cannot split the arguments ({exc})") from None
    if isinstance(raw, list):
        return [scalar(a) for a in raw]
    raise BadInput(f"{what}: args must be a list or a string")


def _command(
    cmd: Any, extra: list[str], env: dict[str, str], variables: Mapping[str, str], what: str
) -> Found:
    """The server an entry's `command` (string or list) + `args` starts; bare args are vLLM's."""
    if isinstance(cmd, str) and cmd.strip():
        got = _run_text(cmd, {**variables, **env})
        if not got:
            raise BadInput(f"{what}: not a vLLM server command ({cmd.strip()[:40]!r})")
        f = got[0]
        f.args = f.args + extra
        f.env = {**f.env, **env}
        return f
    if isinstance(cmd, list) and cmd:
        got = run_argv([scalar(c) for c in cmd] + extra, env, variables)
        if not got:
            raise BadInput(f"{what}: not a vLLM server command ({' '.join(map(str, cmd[:3]))!r})")
        return got[0]
    if extra and (extra[0].rsplit("/", 1)[-1] in ("vllm", "python", "python3")):
        got = run_argv(extra, env, variables)
        if not got:
            raise BadInput(f"{what}: not a vLLM server command ({' '.join(extra[:3])!r})")
        return got[0]
    return Found(extra[1:] if extra[:1] == ["serve"] else extra, env, "args")


def _run_text(text: str, variables: Mapping[str, str]) -> list[Found]:
    it = Interp(variables)
    it.run_text(text)
    return it.found
