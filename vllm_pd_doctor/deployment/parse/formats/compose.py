"""docker compose files: every service under `services:` whose entrypoint/command (or the image's
own `vllm serve` entrypoint) starts vLLM. `${VAR}` is interpolated as compose does (`$$` is a
literal `$`); `network_mode: host` shares the host's network, else each service has its own.
"""

from __future__ import annotations

import shlex
from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import env_map, role_from_name, run_argv, scalar
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.infra.shell.expand import Scope, expand_dquoted


def sniff(src: Source) -> bool:
    d = src.single()
    return d is not None and isinstance(d.get("services"), dict) and "apiVersion" not in d


def read(src: Source) -> list[Found]:
    services: dict[str, Any] = (src.single() or {})["services"]
    sc = Scope(vars=dict(src.variables))
    out: list[Found] = []
    for name, svc in services.items():
        if not isinstance(svc, dict):
            continue
        svc = _interpolate(svc, sc)
        image = str(svc.get("image", ""))
        for f in _service(str(name), svc, image, src):
            f.name, f.image = str(name), image or None
            r = role_from_name(str(name))
            if r and f.role is None:
                f.notes.append(f"name-role:{r}:compose service name {name}")
            out.append(f)
    return out


FORMAT = DeploymentFormat("docker-compose", sniff, read)


def _interpolate(v: Any, sc: Scope) -> Any:
    if isinstance(v, str):
        return expand_dquoted(v.replace("$$", "\x00"), sc).replace("\x00", "$")
    if isinstance(v, list):
        return [_interpolate(x, sc) for x in v]
    if isinstance(v, dict):
        return {k: _interpolate(x, sc) for k, x in v.items()}
    return v


def _words(v: Any, what: str) -> list[str]:
    """compose `command:` / `entrypoint:`: a string is split shell-like (not run by a shell)."""
    if isinstance(v, str):
        try:
            return shlex.split(v)
        except ValueError as exc:
            raise BadInput(f"{what}: cannot split ({exc})") from None
    return [scalar(x) for x in v] if isinstance(v, list) else []


def _service(name: str, svc: dict[str, Any], image: str, src: Source) -> list[Found]:
    what = f"{src.label} (service {name})"
    env = env_map(svc.get("environment"), what)
    entry, cmd = _words(svc.get("entrypoint"), what), _words(svc.get("command"), what)
    host_net = svc.get("network_mode") == "host"
    net = None if host_net else f"container:{svc.get('container_name') or name}"
    ev = "compose network_mode: host" if host_net else f"compose service {name}: own network namespace"
    if entry:
        return run_argv(entry + cmd, env, src.variables, network=net, evidence=ev, launcher="compose > ")
    if cmd and not cmd[0].startswith("-"):  # a command (a shim's too) that starts vLLM
        got = run_argv(cmd, env, src.variables, network=net, evidence=ev, launcher="compose > ")
        if got or "vllm" in cmd[0] or "python" in cmd[0] or cmd[0] in ("sh", "bash"):
            return got
    if "vllm" in image.lower() and (cmd or svc.get("command") is not None):
        launcher = f"compose > {image} (image entrypoint vllm serve)"
        return [Found(cmd, env, launcher, network=net, network_evidence=ev)]
    return []
