"""One input (a file or a command string) -> the LaunchCommands of every vLLM server in it.

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
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_pd_doctor.checkconfig.parse import bounded, manifests, paste, platforms, pyserve
from vllm_pd_doctor.checkconfig.parse.shell import Interp, LimitReached
from vllm_pd_doctor.checkconfig.parse.shellexpand import Scope, expand
from vllm_pd_doctor.checkconfig.parse.shellwords import ShellSyntaxError, tokenize
from vllm_pd_doctor.checkconfig.parse.wrappers import Found
from vllm_pd_doctor.errors import BadInput
from vllm_pd_doctor.results.launch import LaunchCommand

ROLES = ("prefill", "decode")
"""Roles of the KV transfer; an encoder instance (E/P/D) has role `encoder`."""
_LABEL = re.compile(r"^(\s*)(prefill|decode)\s*[:=]\s*", re.IGNORECASE | re.MULTILINE)
_YAML_START = re.compile(
    r"^(---\s*$|apiVersion\s*:|kind\s*:|services\s*:|roles\s*:"
    r"|(prefill|decode)\s*:\s*($|[|>]|\{|\[))"
)


def load_config_file(path: Path, *, variables: Mapping[str, str] | None = None) -> tuple[LaunchCommand, ...]:
    """Every vLLM server a file starts: shell script, text, YAML/JSON, Kubernetes, compose."""
    label = f"--config {path}"
    text = bounded.read_text(path, label)
    return parse_config_text(
        text, label=label, suffix=path.suffix.lower(), variables=variables or {}, base=path.parent
    )


def parse_config_text(
    text: str,
    *,
    label: str,
    suffix: str = "",
    variables: Mapping[str, str] | None = None,
    base: Path | None = None,
) -> tuple[LaunchCommand, ...]:
    try:
        return _parse_config_text(text, label, suffix, dict(variables or {}), base)
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
    text: str, label: str, suffix: str, variables: dict[str, str], base: Path | None
) -> tuple[LaunchCommand, ...]:
    proxy: dict[str, str] = {}
    found: list[Found] | None = None
    text = paste.line_ends(text)
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith(("{", "[")):
        doc = bounded.load_json(text, label)
        found = manifests.from_docs([doc], label, variables)
        if found is None:
            raise BadInput(
                f"{label}: expected a mapping with prefill: and decode: entries, got {type(doc).__name__}"
            )
    elif suffix in (".yaml", ".yml") or _looks_like_yaml(text):
        try:
            docs = bounded.load_yaml_all(text, label)
        except BadInput:
            if suffix in (".yaml", ".yml"):
                raise
            docs = []  # text that only starts like YAML (a Justfile): read it as shell
        if any(isinstance(d, (dict, list)) for d in docs):
            docs = platforms.prepare(docs)
            found = platforms.from_docs(docs, label, variables)
            if found is None:
                found = manifests.from_docs(docs, label, variables)
        if found is None and suffix in (".yaml", ".yml"):
            raise BadInput(f"{label}: YAML without prefill: / decode: entries or containers")
    if found is None and (suffix == ".py" or pyserve.looks_like(text)):
        found = pyserve.from_python(text, label)
        if found is None and suffix == ".py":
            raise BadInput(
                f"{label}: no vLLM server in this Python file (read with ast, not run): neither "
                "Ray Serve LLMConfig(...) nor a `vllm serve` command list or string",
                hint="give the launch commands with --prefill-cmd / --decode-cmd",
            )
    if found is None and _YAML_FENCE.search(text) and not _FENCE.search(text):
        found = _yaml_fences(text, label, variables) or None  # a page of manifests
    if found is None:
        found, proxy, modules = _from_shell(text, label, variables)
        if not found and modules:
            raise BadInput(
                f"{label}: no launch command found: `python -m ${modules[0]}` starts a module the "
                "file does not name",
                hint=f"give it: --set {modules[0]}={_module_named(text)}",
            )
    if not found and not proxy:
        found = _yaml_fences(text, label, variables)
    if not found:
        if stripped.startswith(("{", "[")) or suffix in (".json", ".yaml", ".yml"):
            raise BadInput(
                f"{label}: no prefill: or decode: entry, and no container or command that starts vLLM",
                hint="write prefill: {args: [...], env: {...}} and decode: {...}",
            )
        raise BadInput(
            f"{label}: no launch command found (neither text with `vllm serve` lines "
            "nor YAML/JSON with prefill:/decode: or containers)"
        )
    for f in found:
        merge_vllm_config(f, base)
    return tuple(_assign(found, proxy, label))


def _yaml_fences(text: str, label: str, variables: dict[str, str]) -> list[Found]:
    """A page whose commands are all in ```yaml blocks (a manifest, a values file, a Serve config)."""
    blocks = [textwrap.dedent(m.group(1)) for m in _YAML_FENCE.finditer(text)]
    docs: list[Any] = []
    for b in blocks:
        try:
            docs += [d for d in bounded.load_yaml_all(b, f"{label} (yaml block)") if isinstance(d, dict)]
        except BadInput:
            continue
    if not docs:
        return []
    docs = platforms.prepare(docs)
    got = platforms.from_docs(docs, label, variables)
    return got if got is not None else (manifests.from_docs(docs, label, variables) or [])


def _module_named(text: str) -> str:
    """The server module a file's text names (for the `--set WORKER_MODULE=...` hint)."""
    m = re.search(r"\b(dynamo\.vllm|vllm\.entrypoints\.openai\.api_server)\b", text)
    if m:
        return m.group(1)
    return "vllm.entrypoints.openai.api_server" if re.search(r"vllm[ \t]+serve", text) else "MODULE"


def _looks_like_yaml(text: str) -> bool:
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return bool(_YAML_START.match(s))
    return False


_FENCE = re.compile(
    r"^[ \t]*```[ \t]*(bash|sh|shell|console|zsh|text)?[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL
)
_YAML_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:yaml|yml)[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
_PROMPT_CONT = re.compile(r"(\\\r?\n)[ \t]*> ")
_PROMPT = re.compile(r"^([ \t]*)\$ (?=\S)", re.MULTILINE)
_COMMENT = re.compile(r"^([ \t]*)#(?!!)(.*)$", re.MULTILINE)


def _prepare(text: str) -> str:
    """What people paste: Markdown code fences, `$ ` prompts, `> ` continuation prompts;
    labels (`prefill:`) and comments naming a role become hints for the next server."""
    text = paste.normalise(text)
    blocks = [textwrap.dedent(m.group(2)) for m in _FENCE.finditer(text)]
    if blocks:
        text = "\n".join(blocks)
    text = _PROMPT_CONT.sub(lambda m: m.group(1), text)
    text = _PROMPT.sub(lambda m: m.group(1), text)
    text = _LABEL.sub(lambda m: f"{m.group(1)}__pdd_role {m.group(2).lower()}; ", text)

    def comment(m: re.Match[str]) -> str:
        r = manifests.role_from_name(m.group(2))
        return f"{m.group(1)}__pdd_comment {r}" if r else m.group(0)

    return _COMMENT.sub(comment, text)


def _from_shell(
    text: str, label: str, variables: Mapping[str, str]
) -> tuple[list[Found], dict[str, str], list[str]]:
    text = _prepare(text)
    it = Interp(variables, pinned=variables)
    try:
        it.run_text(paste.without_prose(text))
    except ShellSyntaxError as exc:
        raise BadInput(
            f"{label}: cannot split the command ({exc})",
            hint="check the quotes around JSON values such as --kv-transfer-config",
        ) from None
    except RecursionError:
        raise BadInput(f"{label}: shell text nested too deeply") from None
    return it.found, it.proxy_roles, it.unresolved_modules


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
        it.run_text(_prepare(text))
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


def _assign(found: list[Found], proxy: dict[str, str], label: str) -> list[LaunchCommand]:
    for f in found:
        if f.role is not None:
            continue
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
            r = manifests.role_from_name(re.sub(r"[^A-Za-z_]+", " ", f.raw))
            if r:
                f.role, f.role_source = r, "names in the command"
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
        host = f.network[5:] if f.network and f.network.startswith("host:") else None
        out.append(
            LaunchCommand(
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
            )
        )
    return out


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
