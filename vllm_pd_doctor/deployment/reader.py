"""The one reader of a deployment: the --config file, --prefill-cmd / --decode-cmd and --set -> the
typed servers (`Server`: the parsed `ServeConfig` and where it runs). check-config, triage, status
and report read a deployment here and nowhere else."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.deployment.parse.loader import launch_from_command
from vllm_pd_doctor.infra import limits
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.readers.serve_flags import BUILTIN, FlagTable
from vllm_pd_doctor.results.launch import LaunchCommand, Server

NON_ENGINE = "not checked as a P/D engine: "
"""The prefix of a note naming a process of the input that starts no engine."""


def check_config_file(config: Path) -> None:
    """Refuse a --config file before any work: it exists, is regular, bounded, UTF-8, no alias bomb."""
    limits.check_input_file(config, f"--config {config}", max_bytes=limits.MAX_CONFIG_BYTES, yaml_text=True)


def server_from(
    cmd: LaunchCommand, name: str | None = None, *, table: FlagTable = BUILTIN, what: str | None = None
) -> Server:
    """A parsed server, keeping where the parser says it runs."""
    if what is None:
        cfg = parse.parse_launch(cmd, table=table)
    else:
        cfg = parse.parse_args(
            list(cmd.args),
            dict(cmd.env),
            role=cmd.role,
            what=what,
            machine=cmd.host,
            source=cmd.source,
            table=table,
        )
    return Server(
        name=name or cmd.name or cmd.role,
        config=cfg,
        network=cmd.network,
        network_evidence=cmd.network_evidence,
        role_source=cmd.role_source,
        launcher=cmd.launcher,
        image=cmd.image,
        phase=cmd.phase,
    )


def _server_or_why(cmd: LaunchCommand, name: str, table: FlagTable) -> Server:
    """server_from, naming where a `$(VAR)` the input cannot tell comes from when it is refused."""
    try:
        return server_from(cmd, name, table=table)
    except BadInput as exc:
        hit = [(v, o) for v, o in cmd.unknowns if f"$({v})" in exc.message]
        if not hit:
            raise
        var, origin = hit[0]
        raise BadInput(
            f"{exc.message.split(': the value comes from')[0]}: $({var}) comes from {origin}, "
            "which the files do not hold",
            hint=f"give its value: --set {var}=VALUE",
        ) from None


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        cand, i = n, 1
        while cand in out:
            cand, i = f"{n}-{i}", i + 1
        out.append(cand)
    return out


def gather_servers(
    prefill_cmd: str | None,
    decode_cmd: str | None,
    config: Path | None,
    variables: Mapping[str, str] | None = None,
    python: str | None = None,
    notes: list[str] | None = None,
) -> tuple[tuple[Server, ...], dict[str, str]]:
    """Parse every server of the deployment (any number: xPyD); returns them and the text each
    came from. A --prefill-cmd / --decode-cmd replaces the config file's server of that name.
    `notes` (when given) receives the processes that start no engine and the values the input
    cannot tell, one line each."""
    variables = variables or {}
    table = parse.for_python(python)
    others: list[str] = []
    launches = list(parse.load_config_file(config, variables=variables, others=others)) if config else []
    names = _unique([c.name or c.role for c in launches])
    servers = [_server_or_why(c, n, table) for c, n in zip(launches, names, strict=True)]
    if notes is not None:
        notes.extend(NON_ENGINE + o for o in others)
        notes.extend(
            f"{n}: $({var}) comes from {origin}: its value is not known here, left as written "
            f"(--set {var}=VALUE gives it)"
            for c, n in zip(launches, names, strict=True)
            for var, origin in c.unknowns
        )
    given = {s.name: f"{config} ({s.name})" for s in servers}
    for role, text in (("prefill", prefill_cmd), ("decode", decode_cmd)):
        if text is None:
            continue
        what = f"--{role}-cmd"
        launch = launch_from_command(text, what=what, role=role, variables=variables)
        servers = [s for s in servers if s.name != role]
        servers.append(server_from(launch, role, table=table, what=what))
        given[role] = what
    order = {"prefill": 0, "decode": 1}
    servers.sort(key=lambda s: order.get(s.role, 2))
    return tuple(servers), given


def prefill_connector(servers: tuple[Server, ...]) -> str | None:
    """The KV connector the deployment's prefill servers name (else any server's), or None."""
    prefill = [s for s in servers if s.role == "prefill"] or list(servers)
    return next((s.config.kv_connector for s in prefill if s.config.kv_connector), None)


__all__ = ["NON_ENGINE", "check_config_file", "gather_servers", "prefill_connector", "server_from"]
