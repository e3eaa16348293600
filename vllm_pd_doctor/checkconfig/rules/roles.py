"""Roles and connectors: kv_role per server (and per MultiConnector child), connectors present,
the same on both sides, and known to the installed vLLM."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_pd_doctor.checkconfig.rules import unregistered
from vllm_pd_doctor.checkconfig.rules.catalog import E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import (
    KV_ROLES,
    Context,
    connector_entries,
    connector_key,
    connector_names,
    label,
    pair_label,
)
from vllm_pd_doctor.results.checkconfig import Finding
from vllm_pd_doctor.results.launch import Server


@rule(
    id="kv-role-invalid",
    severity=E,
    title="kv_role missing, unknown, or wrong for the engine's role",
    fix="set kv_role to kv_producer on prefill and kv_consumer on decode",
    refs=("vllm RFC #43807", "vllm PR #52779"),
)
def roles(ctx: Context) -> Iterator[Finding]:
    valid = ctx.vllm.kv_roles if ctx.vllm and ctx.vllm.kv_roles else KV_ROLES
    src = " (from the installed vLLM)" if valid != KV_ROLES else ""
    for s in ctx.servers:
        for e in connector_entries(s.config):
            who = f"{label(s)}: " + (f"MultiConnector child {e.name}: " if e.child else "")
            r = e.kv_role
            if r is None:
                yield finding(
                    "kv-role-invalid", f"{who}kv_connector {e.name} without kv_role (vLLM refuses to start)"
                )
            elif r not in valid:
                yield finding("kv-role-invalid", f"{who}kv_role {r!r} is not one of {', '.join(valid)}{src}")
            elif s.role == "prefill" and r == "kv_consumer":
                yield finding("kv-role-invalid", f"{who}kv_role kv_consumer cannot send KV")
            elif s.role == "decode" and r == "kv_producer":
                yield finding("kv-role-invalid", f"{who}kv_role kv_producer cannot receive KV")


@rule(
    id="kv-role-both",
    severity=W,
    title="kv_role kv_both is being deprecated (and PCP rejects it)",
    fix="use kv_producer on prefill and kv_consumer on decode",
    refs=("vllm RFC #43807", "vllm PR #52779"),
)
def role_both(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        if any(e.kv_role == "kv_both" for e in connector_entries(s.config)):
            pcp = s.config.prefill_context_parallel_size
            sev = E if pcp > 1 else None
            extra = f" with --prefill-context-parallel-size {pcp} (rejected)" if sev else ""
            yield finding("kv-role-both", f"{label(s)}: kv_role kv_both{extra}", severity=sev)


@rule(
    id="connector-missing",
    severity=E,
    title="No KV connector on one side: decode silently recomputes",
    fix="pass the same --kv-transfer-config connector on both sides",
    refs=("kserve#5987",),
)
def connector_missing(ctx: Context) -> Iterator[Finding]:
    if (
        ctx.servers
        and all(s.config.kv_connector is None for s in ctx.servers)
        and ctx.prefills
        and ctx.decodes
    ):
        yield finding("connector-missing", "no server has --kv-transfer-config: this is not a P/D deployment")
        return
    for p, d in ctx.pairs():
        if (p.config.kv_connector is None) != (d.config.kv_connector is None):
            missing, other = (p, d) if p.config.kv_connector is None else (d, p)
            yield finding(
                "connector-missing",
                f"{label(missing)} has no --kv-transfer-config "
                f"connector; {label(other)} uses {other.config.kv_connector}",
            )


@rule(
    id="connector-mismatch",
    severity=E,
    title="P and D use different KV connectors",
    fix="use the same kv_connector (and transfer mode) on both sides",
    refs=("vllm docs nixl_connector_compatibility",),
)
def connector_mismatch(ctx: Context) -> Iterator[Finding]:
    for p, d in ctx.pairs():
        if p.config.kv_connector is None or d.config.kv_connector is None:
            continue
        fp = {connector_key(n) or n for n in connector_names(p.config)}
        fd = {connector_key(n) or n for n in connector_names(d.config)}
        if not fp & fd:
            yield finding(
                "connector-mismatch",
                f"{pair_label(ctx, p, d)}prefill "
                f"{p.config.kv_connector} ({', '.join(sorted(fp))}) vs decode "
                f"{d.config.kv_connector} ({', '.join(sorted(fd))})",
            )


@rule(
    id="connector-unregistered",
    severity=E,
    title="kv_connector is not registered in the vLLM release (it refuses to start)",
    fix="use a connector name the release registers (see its kv_connector/factory.py), "
    "or give kv_connector_module_path for an external one",
    refs=("vllm kv_connector/factory.py",),
)
def connector_unregistered(ctx: Context) -> Iterator[Finding]:
    """A kv_connector name the release's `KVConnectorFactory` cannot load: not registered and not
    loaded from `kv_connector_module_path`. The deployment's own vLLM when it was read, else the
    release its image names or every release pd-doctor has provisioned (read by `ast`)."""
    for s in ctx.servers:
        for name, child, external in _connector_names(s):
            verdict = unregistered.check(ctx.vllm, name, external=external)
            if verdict is not None:
                who = f"{label(s)}: {'MultiConnector child ' if child else ''}"
                yield finding("connector-unregistered", who + verdict.evidence, severity=verdict.severity)


def _connector_names(s: Server) -> list[tuple[str, bool, bool]]:
    """(name, is a MultiConnector child, has kv_connector_module_path) of every connector."""
    outer = s.config.kv_connector
    out = [(outer, False, bool(s.config.kv_connector_module_path))] if outer else []
    return out + [(e.name, True, e.external) for e in connector_entries(s.config) if e.child]


@rule(
    id="ec-connector-unregistered",
    severity=E,
    title="ec_connector is not registered in the vLLM release (encoder and prefill fail at start-up)",
    fix="use an encoder-cache connector name the release registers (its ec_connector/factory.py), "
    "or give ec_connector_module_path for an external one",
    refs=("vllm ec_transfer/ec_connector/factory.py",),
)
def ec_connector_unregistered(ctx: Context) -> Iterator[Finding]:
    """An `--ec-transfer-config` ec_connector the release's `ECConnectorFactory` cannot load,
    read from the release's source like the KV connector names."""
    for s in ctx.servers:
        ec = s.config.values.get("ec-transfer-config")
        if not isinstance(ec, dict) or not isinstance(ec.get("ec_connector"), str):
            continue
        external = bool(ec.get("ec_connector_module_path"))
        verdict = unregistered.check_ec(ctx.vllm, ec["ec_connector"], external=external)
        if verdict is not None:
            yield finding("ec-connector-unregistered", f"{label(s)}: {verdict.evidence}")


@rule(
    id="no-kv-consumer",
    severity=E,
    title="Servers produce KV but none consumes it",
    fix="give the decode engines kv_role kv_consumer (prefill: kv_producer)",
    refs=("vllm#11490",),
)
def no_consumer(ctx: Context) -> Iterator[Finding]:
    """Two or more servers run a connector, some produce, none consumes: every transfer has no
    destination (vLLM #11490's setup: both instances launched as kv_producer)."""
    with_conn = [s for s in ctx.servers if connector_entries(s.config)]
    if len(with_conn) < 2:
        return
    roles = {e.kv_role for s in with_conn for e in connector_entries(s.config)}
    if "kv_producer" in roles and not roles & {"kv_consumer", "kv_both"}:
        names = ", ".join(label(s) for s in with_conn)
        yield finding(
            "no-kv-consumer",
            f"{len(with_conn)} servers ({names}) all have kv_role kv_producer; no kv_consumer",
        )


@rule(
    id="kv-transfer-config-key",
    severity=E,
    title="--kv-transfer-config has a key the installed vLLM's KVTransferConfig rejects",
    fix="remove or rename the key (connector options belong in kv_connector_extra_config)",
    refs=("vllm config/kv_transfer.py",),
)
def unknown_kv_keys(ctx: Context) -> Iterator[Finding]:
    """Keys of --kv-transfer-config that are no field of KVTransferConfig, where the class forbids
    other keys (read from the installed vLLM: pydantic `extra="forbid"`)."""
    v = ctx.vllm
    if v is None or not v.kv_transfer_fields or v.kv_transfer_forbids_extra is not True:
        return
    fields = set(v.kv_transfer_fields)
    for s in ctx.servers:
        extra = sorted(k for k in (s.config.kv_transfer_config or {}) if k not in fields)
        if extra:
            close = {k: _closest(k, fields) for k in extra}
            said = ", ".join(f"{k!r}" + (f" (did you mean {c!r}?)" if c else "") for k, c in close.items())
            ev = (
                f"{label(s)}: {said} not a field of vLLM {v.version or '?'}'s KVTransferConfig "
                f"({v.kv_transfer_location}); vLLM {v.version or '?'} refuses to start (extra fields "
                "are forbidden)"
            )
            if any(close.values()):  # a misspelt field: wrong on every release
                yield finding("kv-transfer-config-key", ev)
            else:  # a field this release lacks: the setup may be written for another vLLM (branch)
                yield finding(
                    "kv-transfer-config-key",
                    ev + "; the key may be a field of the vLLM release or branch the setup was written "
                    "for: run it with that release",
                    severity=W,
                )


def _closest(key: str, fields: set[str]) -> str | None:
    import difflib

    got = difflib.get_close_matches(key, sorted(fields), n=1, cutoff=0.75)
    return got[0] if got else None
