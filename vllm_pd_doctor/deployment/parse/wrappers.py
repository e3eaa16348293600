"""An argv as a shell would run it -> the vLLM server inside it, through the wrappers people use.

`env`, `nohup`, `exec`, `timeout`, `numactl`, `taskset`, `srun`, `uv run`, `docker run IMAGE ARGS`,
`sh -c` / `bash -c` (handed back as a script), `vllm serve`, `python -m vllm.entrypoints...` and
`python -m dynamo.vllm` (its prefill/decode flags give the role).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_pd_doctor.deployment.parse.dynamo import dynamo
from vllm_pd_doctor.deployment.parse.found import Found, Script

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
API_MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.api_server",
    "vllm.entrypoints.cli.main",
)
_PREFIX = {
    "nohup",
    "exec",
    "time",
    "setsid",
    "command",
    "builtin",
    "stdbuf",
    "nice",
    "ionice",
    "chrt",
    "sudo",
    "xargs",
    "unbuffer",
    "catchsegv",
}
_VALUE_OPTS = {
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "numactl": {
        "-N",
        "-m",
        "-C",
        "-i",
        "-p",
        "--cpunodebind",
        "--membind",
        "--physcpubind",
        "--interleave",
        "--preferred",
        "--cpubind",
    },
    "taskset": set(),
    "srun": {
        "-N",
        "-n",
        "-c",
        "-w",
        "-p",
        "-t",
        "-J",
        "-o",
        "-e",
        "-A",
        "-G",
        "--nodes",
        "--ntasks",
        "--nodelist",
        "--gres",
        "--partition",
        "--jobid",
        "--container-image",
        "--container-mounts",
        "--container-workdir",
        "--container-name",
        "--mpi",
        "--export",
        "--cpus-per-task",
        "--ntasks-per-node",
        "--gpus",
        "--gpus-per-node",
        "--time",
        "--job-name",
        "--output",
        "--error",
        "--mem",
        "--account",
        "--het-group",
        "--cpu-bind",
        "--distribution",
        "--exclude",
        "-x",
        "-r",
        "--relative",
    },
    "uv": {
        "--with",
        "--python",
        "-p",
        "--project",
        "--directory",
        "--env-file",
        "--extra",
        "--group",
        "--index-url",
        "--index",
    },
    "docker": {
        "-e",
        "--env",
        "--env-file",
        "-p",
        "--publish",
        "-v",
        "--volume",
        "--name",
        "--network",
        "--net",
        "--gpus",
        "--ipc",
        "--shm-size",
        "--ulimit",
        "-w",
        "--workdir",
        "--entrypoint",
        "--runtime",
        "--device",
        "--cap-add",
        "--cap-drop",
        "--security-opt",
        "-u",
        "--user",
        "--hostname",
        "-h",
        "--label",
        "-l",
        "--mount",
        "--memory",
        "-m",
        "--cpus",
        "--cpuset-cpus",
        "--pid",
        "--uts",
        "--add-host",
        "--platform",
        "--restart",
        "--log-driver",
        "--log-opt",
        "--group-add",
        "--pull",
        "--stop-signal",
        "--health-cmd",
        "--tmpfs",
        "--dns",
        "--sysctl",
        "--device-cgroup-rule",
        "--cgroupns",
        "--userns",
        "--expose",
        "--cidfile",
    },
}


def _skip_opts(argv: list[str], i: int, value_opts: set[str]) -> int:
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        a = argv[i]
        i += 1
        if a == "--":
            break
        if "=" not in a and (a in value_opts or (len(a) == 2 and a in value_opts)):
            i += 1
    return i


@dataclass
class _At:
    """What the wrappers so far give the command they run."""

    env: dict[str, str]
    launcher: str
    network: str | None
    network_evidence: str


def unwrap(
    argv: list[str],
    env: dict[str, str],
    *,
    launcher: str = "",
    network: str | None = None,
    network_evidence: str = "",
) -> Found | Script | None:
    """Find the vLLM server in argv; None when it starts none."""
    at = _At(dict(env), launcher, network, network_evidence)
    i = 0
    while i < len(argv):
        nxt = _prefix(argv, i, at)
        if nxt is None:
            return _start(argv, i, at)
        i = nxt
    return None


def _prefix(argv: list[str], i: int, at: _At) -> int | None:
    """Where the command after the wrapper at argv[i] starts (the wrapper's own settings go to
    `at`); None when argv[i] is no prefix wrapper."""
    a = argv[i]
    exe = a.rsplit("/", 1)[-1]
    if exe == "env":
        return _env_cmd(argv, i + 1, at)
    if _ENV_RE.match(a) and i == 0:
        k, _, v = a.partition("=")
        at.env[k] = v
        return i + 1
    if exe in _PREFIX:
        return _skip_opts(argv, i + 1, {"-n", "-o", "-e", "-i", "-c", "-u", "-g"})
    if exe == "timeout":
        return _skip_opts(argv, i + 1, _VALUE_OPTS["timeout"]) + 1
    if exe in ("numactl", "taskset"):
        at.launcher += exe + " > "
        return _pinning(argv, i, exe)
    if exe == "srun":
        return _srun(argv, i + 1, at)
    if exe in ("uv", "pixi", "poetry", "conda", "micromamba") and argv[i + 1 : i + 2] == ["run"]:
        at.launcher += f"{exe} run > "
        return _skip_opts(argv, i + 2, _VALUE_OPTS["uv"] | {"-n", "--name", "-e"})
    return None


def _env_cmd(argv: list[str], i: int, at: _At) -> int:
    while i < len(argv) and (argv[i].startswith("-") or _ENV_RE.match(argv[i])):
        if _ENV_RE.match(argv[i]):
            k, _, v = argv[i].partition("=")
            at.env[k] = v
        elif argv[i] in ("-u", "--unset", "-C", "--chdir", "-S"):
            i += 1
        i += 1
    at.launcher += "env > "
    return i


def _pinning(argv: list[str], i: int, exe: str) -> int:
    """numactl / taskset: past their options (and taskset's mask)."""
    i = _skip_opts(argv, i + 1, _VALUE_OPTS[exe])
    if (
        exe == "taskset"
        and i < len(argv)
        and not argv[i - 1].startswith("-c")
        and re.fullmatch(r"(0x)?[0-9a-fA-F,\-]+", argv[i])
    ):
        return i + 1  # the mask
    if exe == "taskset" and i < len(argv) and re.fullmatch(r"[0-9,\-]+", argv[i]):
        return i + 1
    return i


def _srun(argv: list[str], j: int, at: _At) -> int:
    node = None
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "--":
        name, eq, val = argv[j].partition("=")
        takes = name in _VALUE_OPTS["srun"] and not eq
        if name in ("-w", "--nodelist"):
            node = val if eq else (argv[j + 1] if j + 1 < len(argv) else None)
        elif name.startswith("-w") and not name.startswith("--") and len(name) > 2:
            node = name[2:]
        j += 2 if takes else 1
    at.launcher += "srun > "
    if node and at.network is None:
        at.network, at.network_evidence = f"host:{node}", f"srun --nodelist {node}"
    return j


def _start(argv: list[str], i: int, at: _At) -> Found | Script | None:
    """The command at argv[i], past every prefix wrapper: a shell, a container, or vLLM."""
    exe = argv[i].rsplit("/", 1)[-1]
    if exe in ("sh", "bash", "dash", "zsh"):
        j = i + 1
        while j < len(argv) and argv[j].startswith("-") and "c" not in argv[j]:
            j += 1
        if j < len(argv) and argv[j].startswith("-") and "c" in argv[j] and j + 1 < len(argv):
            return Script(
                argv[j + 1],
                argv[j + 3 :],
                at.env,
                at.launcher + f"{exe} -c > ",
                at.network,
                at.network_evidence,
            )
        return None
    if exe in ("docker", "podman", "nerdctl"):
        return _docker(argv[i:], at.env, at.launcher, at.network, at.network_evidence)
    if exe == "vllm":
        if argv[i + 1 : i + 2] == ["serve"]:
            return _found(argv[i + 2 :], at, "vllm serve")
        return None
    if exe.startswith("python") or exe == "uvx":
        return _python(argv, i, at)
    return _shim(argv, i, at)


def _shim(argv: list[str], i: int, at: _At) -> Found | Script | None:
    """A command pd-doctor does not know whose arguments, after its own options, start vLLM with
    arguments (`vendor_entrypoint.sh vllm serve M ...`, `tini -- vllm serve M`, `/opt/run.sh
    python3 -m vllm.entrypoints.openai.api_server ...`): a launcher that execs its argv, whatever
    its name."""
    exe = argv[i].rsplit("/", 1)[-1]
    j = i + 1
    while j < len(argv) and argv[j].startswith("-"):  # the shim's own options (`tini --`)
        j += 1
    if j >= len(argv) or not _is_exe(argv[j]):
        return None
    got = unwrap(
        argv[j:],
        at.env,
        launcher=at.launcher + f"{exe} > ",
        network=at.network,
        network_evidence=at.network_evidence,
    )
    return got if isinstance(got, Script) or (got is not None and got.args) else None


def _found(args: list[str], at: _At, how: str) -> Found:
    return Found(args, at.env, at.launcher + how, network=at.network, network_evidence=at.network_evidence)


def _python(argv: list[str], i: int, at: _At) -> Found | None:
    """`python -m` one of vLLM's API server modules, or Dynamo's vLLM worker."""
    j = i + 1
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "-m":
        j += 2 if argv[j] in ("-W", "-X") else 1
    if not (j + 1 < len(argv) and argv[j] == "-m"):
        return None
    mod, rest = argv[j + 1], argv[j + 2 :]
    if mod in API_MODULES:
        if mod == "vllm.entrypoints.cli.main":
            if rest[:1] != ["serve"]:
                return None
            rest = rest[1:]
        return _found(rest, at, f"python -m {mod}")
    if mod in ("dynamo.vllm", "dynamo.vllm.unified_main"):
        f = dynamo(rest, at.env, at.launcher)
        f.network, f.network_evidence = at.network, at.network_evidence
        return f
    return None


def _docker(
    argv: list[str], env: dict[str, str], launcher: str, network: str | None, network_evidence: str
) -> Found | Script | None:
    if len(argv) < 2 or argv[1] not in ("run", "create"):
        return None
    i = 2
    denv: dict[str, str] = {}
    name = None
    net = None
    entry: str | None = None
    while i < len(argv) and argv[i].startswith("-"):
        opt, eq, val = argv[i].partition("=")
        takes = opt in _VALUE_OPTS["docker"]
        if takes and not eq:
            val = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        i += 1
        if opt in ("-e", "--env"):
            k, e2, v = val.partition("=")
            denv[k] = v if e2 else env.get(k, "${" + k + "}")
        elif opt == "--name":
            name = val
        elif opt in ("--network", "--net"):
            net = val
        elif opt == "--entrypoint":
            entry = val
    if i >= len(argv):
        return None
    image, rest = argv[i], argv[i + 1 :]
    cenv = dict(denv)  # the host's environment does not reach the container
    if net == "host":
        cnet, cev = network, network_evidence or "docker run --network host (the host's network)"
    else:
        cnet = f"container:{name or image}"
        cev = f"docker run{' --network ' + net if net else ''}: own network namespace"
    lab = launcher + f"docker run {image} > "
    if entry:
        rest = [*entry.split(), *rest]
    elif not rest or rest[0].startswith("-") or not _is_exe(rest[0]):
        if "vllm" not in image.lower() and "dynamo" not in image.lower():
            return None
        f = Found(
            rest,
            cenv,
            lab + "vllm serve (image entrypoint)",
            network=cnet,
            network_evidence=cev,
            name=name or "",
            image=image,
        )
        return f
    found = unwrap(rest, cenv, launcher=lab, network=cnet, network_evidence=cev)
    if isinstance(found, Script):
        found.image = found.image or image
    if isinstance(found, Found):
        found.image = found.image or image
        if name and not found.name:
            found.name = name
    return found


def _is_exe(tok: str) -> bool:
    exe = tok.rsplit("/", 1)[-1]
    return exe in (
        "vllm",
        "sh",
        "bash",
        "env",
        "python",
        "python3",
        "numactl",
        "taskset",
        "uv",
        "nohup",
        "exec",
        "timeout",
    ) or exe.startswith("python")


__all__ = ["API_MODULES", "Found", "Script", "unwrap"]
