"""Read deployments as people have them, and `vllm serve` arguments as vLLM would.

No import of vLLM. `load_config_file` turns one input (shell script, text, YAML/JSON, Kubernetes
manifests, docker compose) into a LaunchCommand per vLLM server (any number: xPyD);
`parse_launch` reads one LaunchCommand's arguments into a ServeConfig. Every failure is a
`BadInput` with one clear line.

Modules: symbolic (the symbolic shell run of `vllm_pd_doctor.infra.shell`, recording servers),
wrappers (srun, docker run, dynamo.vllm ...), manifests (YAML/JSON formats), bounded (size and
alias caps), args (ServeConfig; the flag table is `knowledge.serve_flags`),
loader (roles, names, vLLM's own --config).
"""

from __future__ import annotations

from collections.abc import Mapping

from vllm_pd_doctor.deployment.parse.args import parse_args
from vllm_pd_doctor.deployment.parse.loader import (
    ROLES,
    launch_from_command,
    load_config_file,
    parse_config_text,
)
from vllm_pd_doctor.knowledge.readers.serve_flags import BUILTIN, FLAGS, SHORT, FlagTable, for_python
from vllm_pd_doctor.results.launch import LaunchCommand, ServeConfig


def parse_launch(cmd: LaunchCommand, *, table: FlagTable = BUILTIN) -> ServeConfig:
    """One server's arguments -> ServeConfig (role, env and machine from the LaunchCommand)."""
    what = f"{cmd.source} ({cmd.name or cmd.role})"
    return parse_args(
        list(cmd.args),
        dict(cmd.env),
        role=cmd.role,
        what=what,
        machine=cmd.host,
        source=cmd.source,
        table=table,
    )


def parse_command(
    text: str,
    *,
    role: str,
    what: str | None = None,
    variables: Mapping[str, str] | None = None,
    table: FlagTable = BUILTIN,
) -> ServeConfig:
    """Parse one launch command (a string, wrappers allowed) for a role."""
    what = what or f"--{role}-cmd"
    launch = launch_from_command(text, what=what, role=role, variables=variables)
    return parse_args(list(launch.args), dict(launch.env), role=role, what=what, table=table)


def split_command(text: str, what: str) -> tuple[list[str], dict[str, str]]:
    """A command string -> (vLLM server arguments, environment)."""
    launch = launch_from_command(text, what=what, role="prefill")
    return list(launch.args), dict(launch.env)


__all__ = [
    "FLAGS",
    "ROLES",
    "SHORT",
    "FlagTable",
    "for_python",
    "load_config_file",
    "parse_args",
    "parse_command",
    "parse_config_text",
    "parse_launch",
    "split_command",
]
