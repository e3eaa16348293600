"""What every rule sees: the servers of one deployment and the facts read about them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.results.checkconfig import Exposure, ModelInfo, ModelProblem, NixlInfo, VllmSource
from vllm_pd_doctor.results.launch import ServeConfig, Server

KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
PRODUCING = ("kv_producer", "kv_both")


@dataclass(frozen=True)
class Context:
    servers: tuple[Server, ...]
    model: ModelInfo | None
    vllm: VllmSource | None
    nixl: NixlInfo | None
    exposure: Exposure | None = None
    """Computed before the rules run (the n1-* rules report it)."""
    model_problem: ModelProblem | None = None

    @property
    def prefills(self) -> tuple[Server, ...]:
        return tuple(s for s in self.servers if s.role == "prefill")

    @property
    def decodes(self) -> tuple[Server, ...]:
        return tuple(s for s in self.servers if s.role == "decode")

    def pairs(self) -> Iterator[tuple[Server, Server]]:
        """Every prefill x decode pair (xPyD: a router may send any P's KV to any D) that runs
        at the same time (same phase of a script that kills and relaunches)."""
        for p in self.prefills:
            for d in self.decodes:
                if p.phase == d.phase:
                    yield p, d

    @property
    def hybrid(self) -> bool | None:
        return self.model.hybrid if self.model else None

    @property
    def many(self) -> bool:
        return len(self.servers) > 2 or len({s.name for s in self.servers}) < len(self.servers)


def label(s: Server) -> str:
    return s.name or s.role


def pair_label(ctx: Context, p: Server, d: Server) -> str:
    """Prefix for pair evidence: empty for a plain 1P1D, the names for xPyD."""
    return f"{label(p)} -> {label(d)}: " if ctx.many else ""


@dataclass(frozen=True)
class ConnectorEntry:
    """One connector a server runs: the outer one, or each child of a MultiConnector."""

    name: str
    kv_role: str | None
    config: dict[str, Any]
    child: bool = False

    @property
    def extra(self) -> dict[str, Any]:
        e = self.config.get("kv_connector_extra_config")
        return e if isinstance(e, dict) else {}

    @property
    def external(self) -> bool:
        """Loaded from kv_connector_module_path, not from vLLM's registry."""
        return bool(self.config.get("kv_connector_module_path"))


def connector_entries(s: ServeConfig) -> list[ConnectorEntry]:
    """The connectors a server runs; a MultiConnector's children each with their own kv_role
    (vLLM builds a KVTransferConfig per child from the child's dict alone)."""
    ktc = s.kv_transfer_config or {}
    c = s.kv_connector
    if c is None:
        return []
    if c == "MultiConnector":
        out: list[ConnectorEntry] = []
        for child in s.extra_config.get("connectors", []) or []:
            if isinstance(child, dict) and child.get("kv_connector"):
                r = child.get("kv_role")
                out.append(
                    ConnectorEntry(
                        str(child["kv_connector"]), str(r) if r is not None else None, child, child=True
                    )
                )
        if out:
            return out
    return [ConnectorEntry(c, s.kv_role, ktc)]


def connector_names(s: ServeConfig) -> list[str]:
    """kv_connector names, unfolding MultiConnector."""
    return [e.name for e in connector_entries(s)]


def connector_key(name: str) -> str | None:
    """Registry key of a kv_connector name (None: it does not truncate on the P side)."""
    c = connectors.by_vllm_name(name)
    return c.key if c else None


def uses_nixl(s: ServeConfig | Server) -> bool:
    """A connector whose transfer library is NIXL (the registry says which)."""
    cfg = s.config if isinstance(s, Server) else s
    return any(
        (c := connectors.by_vllm_name(n)) is not None and c.library == connectors.NIXL_LIBRARY
        for n in connector_names(cfg)
    )


def extra_truthy(v: Any) -> bool:
    """A kv_connector_extra_config value as vLLM reads it: `get_from_extra_config` returns the
    raw JSON value and the connector tests it with `if value`, so only false, 0, "" and null
    are off; the string "False" is a non-empty string, hence on."""
    return bool(v)


def field_bool(v: Any) -> bool | None:
    """A boolean KVTransferConfig field as pydantic (lax mode) coerces it; None: rejected."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("1", "on", "t", "true", "y", "yes"):
            return True
        if low in ("0", "off", "f", "false", "n", "no"):
            return False
    return None


def compat_disabled(s: ServeConfig) -> tuple[bool, Any]:
    """(True, value) when enforce_handshake_compat turns the handshake check off."""
    for ex in [e.extra for e in connector_entries(s)] + [s.extra_config]:
        if "enforce_handshake_compat" in ex and not extra_truthy(ex["enforce_handshake_compat"]):
            return True, ex["enforce_handshake_compat"]
    return False, None


def compat_enforced(*servers: Server) -> bool:
    return not any(compat_disabled(s.config)[0] for s in servers)
