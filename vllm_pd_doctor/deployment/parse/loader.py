"""One input (a file or a command string) -> the LaunchCommands of every vLLM server in it.

The input is tried against each `DeploymentFormat` of `formats.FORMATS` in order (`registry`);
the roles nobody labelled are given by `roles.assign`; vLLM's own `--config FILE` is merged into
the arguments as vLLM does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from vllm_pd_doctor.deployment.parse import bounded, manifests, paste, placeholders, roles
from vllm_pd_doctor.deployment.parse.formats import FORMATS
from vllm_pd_doctor.deployment.parse.formats.shell import prepare
from vllm_pd_doctor.deployment.parse.registry import Source, walk
from vllm_pd_doctor.deployment.parse.symbolic import Interp, LimitReached
from vllm_pd_doctor.deployment.parse.wrappers import Found
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.infra.shell.expand import Scope, expand
from vllm_pd_doctor.infra.shell.words import ShellSyntaxError, tokenize
from vllm_pd_doctor.results.launch import LaunchCommand

ROLES = roles.ROLES


def load_config_file(
    path: Path, *, variables: Mapping[str, str] | None = None, others: list[str] | None = None
) -> tuple[LaunchCommand, ...]:
    """Every vLLM server a file starts: shell script, text, YAML/JSON, Kubernetes, compose; the
    processes that start no engine are added to `others` (when given)."""
    label = f"--config {path}"
    text = bounded.read_text(path, label)
    return parse_config_text(
        text,
        label=label,
        suffix=path.suffix.lower(),
        variables=variables or {},
        base=path.parent,
        others=others,
    )


def parse_config_text(
    text: str,
    *,
    label: str,
    suffix: str = "",
    variables: Mapping[str, str] | None = None,
    base: Path | None = None,
    others: list[str] | None = None,
) -> tuple[LaunchCommand, ...]:
    try:
        return _parse_config_text(text, label, suffix, dict(variables or {}), base, others)
    except RecursionError:
        raise BadInput(f"{label}: nested too deeply") from None
    except LimitReached as exc:
        raise BadInput(
            f"{label}: not read: {exc} (a bound of pd-doctor's symbolic run)",
            hint="give the launch commands themselves (--prefill-cmd / --decode-cmd) or a smaller file",
        ) from None
    except ShellSyntaxError as exc:  # a command string inside YAML/JSON
        raise BadInput(
            f"{label}: cannot split a command ({exc})",
            hint="check the quotes around JSON values such as --kv-transfer-config",
        ) from None


def _parse_config_text(
    text: str, label: str, suffix: str, variables: dict[str, str], base: Path | None, others: list[str] | None
) -> tuple[LaunchCommand, ...]:
    src = Source(paste.line_ends(text), label, suffix, variables, base)
    hit = walk(src, FORMATS)
    found = hit[1] if hit else []
    if others is not None:
        others.extend(src.others)
    if not found:
        if src.is_json or src.is_yaml_file:
            raise BadInput(
                f"{label}: no prefill: or decode: entry, and no container or command that starts vLLM",
                hint="write prefill: {args: [...], env: {...}} and decode: {...}",
            )
        raise BadInput(
            f"{label}: no launch command found (neither text with `vllm serve` lines "
            "nor YAML/JSON with prefill:/decode: or containers)"
        )
    placeholders.check(found, label)
    for f in found:
        merge_vllm_config(f, base)
    return tuple(roles.assign(found, label))


def launch_from_command(
    text: str, *, what: str, role: str, variables: Mapping[str, str] | None = None
) -> LaunchCommand:
    """One command string (--prefill-cmd) -> its LaunchCommand (role as given)."""
    if not text.strip():
        raise BadInput(
            f"{what}: empty command", hint='give the full launch command, e.g. "vllm serve MODEL ..."'
        )
    it = Interp(variables or {}, pinned=variables or {})
    try:
        it.run_text(prepare(text))
    except ShellSyntaxError as exc:
        raise BadInput(
            f"{what}: cannot split the command ({exc})",
            hint="check the quotes around JSON values such as --kv-transfer-config",
        ) from None
    except RecursionError:
        raise BadInput(f"{what}: nested too deeply") from None
    except LimitReached as exc:
        raise BadInput(f"{what}: not read: {exc} (a bound of pd-doctor's symbolic run)") from None
    f = it.found[0] if it.found else _bare(text, what, variables or {})
    placeholders.check([f], what)
    merge_vllm_config(f, Path.cwd())
    return LaunchCommand(
        role=role,
        args=tuple(f.args),
        env=tuple(f.env.items()),
        source=what,
        name=role,
        role_source="given as " + what,
        network=f.network,
        network_evidence=f.network_evidence,
        launcher=f.launcher,
        image=f.image,
    )


def _bare(text: str, what: str, variables: Mapping[str, str]) -> Found:
    sc = Scope(vars=dict(variables))
    words: list[str] = []
    for t in tokenize(text):
        if t.kind != "w":
            break
        words.extend(expand(t.text, sc))
    env: dict[str, str] = {}
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    while words and words[0] in ("env", "nohup", "exec", "time"):
        words.pop(0)
    if not words:
        raise BadInput(
            f"{what}: empty command",
            hint='give e.g. "vllm serve MODEL --kv-transfer-'
            'config \'{\\"kv_connector\\":\\"NixlConnector\\",\\"kv_role\\":\\"kv_both\\"}\'"',
        )
    if words[0].startswith("-") or words[0] == "serve":
        return Found(words[1:] if words[0] == "serve" else words, env, "arguments")
    if words[0].rsplit("/", 1)[-1] == "vllm":
        raise BadInput(
            f"{what}: not a `vllm serve` command ({' '.join(words[:2])!r})",
            hint="give the command that starts the engine: vllm serve MODEL ...",
        )
    raise BadInput(
        f"{what}: not a vLLM server command (starts with {words[0]!r})",
        hint="use `vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server"
        " --model MODEL ...` or `python -m dynamo.vllm ...`",
    )


def merge_vllm_config(f: Found, base: Path | None) -> None:
    """Insert the flags of `--config FILE` where vLLM does (after the model; the CLI wins)."""
    args = f.args
    idx = next((k for k, a in enumerate(args) if a == "--config" or a.startswith("--config=")), None)
    if idx is None:
        return
    if args[idx] == "--config":
        if idx + 1 >= len(args):
            return
        name, end = args[idx + 1], idx + 2
    else:
        name, end = args[idx].split("=", 1)[1], idx + 1
    p = Path(name).expanduser()
    cands = [p] if p.is_absolute() else [*([base / p] if base else []), Path.cwd() / p]
    path = next((c for c in cands if c.is_file()), None)
    if path is None:
        return  # parse_args reports the file as not read
    text = bounded.read_text(path, f"--config {name} (vLLM config)")
    docs = bounded.load_yaml_all(text, f"--config {name} (vLLM config)")
    cfg = docs[0] if docs else None
    if not isinstance(cfg, dict):
        raise BadInput(f"--config {name}: a vLLM config file must be a YAML mapping of flags")
    cfg_args = manifests.config_args(cfg)
    rest = args[:idx] + args[end:]
    if rest and not rest[0].startswith("-"):
        f.args = [rest[0], *cfg_args, *rest[1:]]
    else:
        f.args = [*cfg_args, *rest]
    f.launcher += f" + --config {name}"
