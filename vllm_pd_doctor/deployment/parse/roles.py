"""Roles of the servers no format labelled, and their names.

Roles come, in this order, from: explicit labels (our `prefill:` entries and `prefill: cmd`
lines, dynamo's `--is-prefill-worker` / `--disaggregation-mode`, a Dynamo `subComponentType`), the
kv_role of the kv-transfer-config (producer/consumer), resource and compose service names, the
ports a proxy in the same script sends prefill and decode traffic to, dynamo.vllm workers beside
prefill workers (decode), a comment naming the role right before the command, the names in the
command (`$PREFILL_PORT`, `start_decode`), and last the order in the file. `role_source` says which.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import role_from_name
from vllm_pd_doctor.results.launch import LaunchCommand

ROLES = ("prefill", "decode")
"""Roles of the KV transfer; an encoder instance (E/P/D) has role `encoder`."""


def _kv(args: list[str]) -> tuple[str | None, str | None]:
    """(kv_role, port) read from arguments without judging them (no errors)."""
    role = port = None
    for k, a in enumerate(args):
        name, eq, val = a.partition("=")
        n = name.replace("_", "-")
        if not eq:
            val = args[k + 1] if k + 1 < len(args) else ""
        if n == "--kv-transfer-config":
            try:
                d: Any = json.loads(val)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(d, dict) and isinstance(d.get("kv_role"), str):
                role = d["kv_role"]
        elif n == "--kv-transfer-config.kv-role":
            role = val
        elif n == "--port":
            port = val
    return role, port


def _encoder(args: list[str]) -> bool:
    """An encoder instance of an E/P/D setup: it hands encoder outputs on (`--ec-transfer-config`
    with ec_role ec_producer) and has no KV connector: neither prefill nor decode."""
    if any(a.split("=")[0].replace("_", "-").startswith("--kv-transfer-config") for a in args):
        return False
    for k, a in enumerate(args):
        name, eq, val = a.partition("=")
        if name.replace("_", "-") == "--ec-transfer-config":
            raw = val if eq else (args[k + 1] if k + 1 < len(args) else "")
            try:
                d: Any = json.loads(raw)
            except (json.JSONDecodeError, RecursionError):
                return '"ec_producer"' in raw
            return isinstance(d, dict) and d.get("ec_role") == "ec_producer"
    return False


def assign(found: list[Found], label: str) -> list[LaunchCommand]:
    """Every server's role (those no format gave), then its LaunchCommand with a unique name."""
    proxy = _proxy_roles(found)
    for f in found:
        if f.role is None:
            _role(f, found, proxy)
    for phase in sorted({f.phase for f in found}):
        _by_order([f for f in found if f.phase == phase])
    out: list[LaunchCommand] = []
    used: dict[str, int] = {}
    for f in found:
        role = f.role or "prefill"
        name = f.name or role
        if sum(1 for g in found if (g.name or g.role) == name) > 1:
            used[name] = used.get(name, -1) + 1
            name = f"{name}-{used[name]}"
        out.append(_launch(f, role, name, label))
    return out


def _proxy_roles(found: list[Found]) -> dict[str, str]:
    """port -> role, from the `proxy-role:PORT:ROLE` notes the shell format leaves."""
    out: dict[str, str] = {}
    for f in found:
        for n in f.notes:
            if n.startswith("proxy-role:"):
                _, port, role = n.split(":", 2)
                out.setdefault(port, role)
    return out


def _role(f: Found, found: list[Found], proxy: dict[str, str]) -> None:
    kv, port = _kv(f.args)
    named = [n.split(":", 2) for n in f.notes if n.startswith("name-role:")]
    if _encoder(f.args):
        f.role, f.role_source = "encoder", "ec_role ec_producer without a KV connector (encoder instance)"
    elif kv in ("kv_producer", "kv_consumer"):
        f.role = "prefill" if kv == "kv_producer" else "decode"
        f.role_source = f"kv_role {kv}"
    elif named:
        f.role, f.role_source = named[0][1], named[0][2]
    elif port and proxy.get(port):
        f.role, f.role_source = proxy[port], f"proxy sends {proxy[port]} to port {port}"
    elif f.launcher.endswith("dynamo.vllm") and any(
        g.launcher.endswith("dynamo.vllm") and g.role == "prefill" for g in found
    ):
        f.role, f.role_source = "decode", "dynamo.vllm worker without a prefill flag"
    elif any(n.startswith("comment-role:") for n in f.notes):
        hint = next(n for n in f.notes if n.startswith("comment-role:")).split(":", 1)[1]
        f.role, f.role_source = hint, "comment before the command"
    else:
        r = role_from_name(re.sub(r"[^A-Za-z_]+", " ", f.raw))
        if r:
            f.role, f.role_source = r, "names in the command"


def _launch(f: Found, role: str, name: str, label: str) -> LaunchCommand:
    host = f.network[5:] if f.network and f.network.startswith("host:") else None
    return LaunchCommand(
        role=role,
        args=tuple(f.args),
        env=tuple(f.env.items()),
        host=host,
        source=label,
        name=name,
        role_source=f.role_source,
        network=f.network,
        network_evidence=f.network_evidence,
        launcher=f.launcher,
        image=f.image,
        phase=f.phase,
        unknowns=tuple(
            (n.split(":", 2)[1], n.split(":", 2)[2]) for n in f.notes if n.startswith("k8s-unknown:")
        ),
    )


def _by_order(found: list[Found]) -> None:
    """Roles nothing else gave: the first half prefill, the rest decode (per phase)."""
    rest = [f for f in found if f.role is None]
    have = {f.role for f in found if f.role}
    for k, f in enumerate(rest):
        if "prefill" not in have and "decode" not in have:
            f.role = "prefill" if k < max(1, len(rest) // 2) else "decode"
        elif "decode" not in have:
            f.role = "decode"
        elif "prefill" not in have:
            f.role = "prefill"
        else:
            f.role = ROLES[k % 2]
        f.role_source = "order in the file"
