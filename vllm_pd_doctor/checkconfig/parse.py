"""Parse `vllm serve` launch commands and config files, as vLLM's argument parser would.

No import of vLLM: a table of the flags that matter, with their value types. Unknown flags are
kept (and warned about), never fatal. Every failure is a `BadInput` with one clear line.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from vllm_pd_doctor.checkconfig.types import LaunchCommand, ServeConfig
from vllm_pd_doctor.errors import BadInput

_INT = "int"
_STR = "str"
_JSON = "json"
_BOOL = "bool"
"""BooleanOptionalAction: `--x`, `--no-x`, `--x true|false`."""

FLAGS: dict[str, str] = {
    "model": _STR, "port": _INT, "host": _STR, "tensor-parallel-size": _INT,
    "pipeline-parallel-size": _INT, "data-parallel-size": _INT,
    "data-parallel-size-local": _INT, "data-parallel-rank": _INT,
    "data-parallel-start-rank": _INT, "data-parallel-address": _STR,
    "data-parallel-rpc-port": _INT, "prefill-context-parallel-size": _INT,
    "decode-context-parallel-size": _INT, "block-size": _INT, "dtype": _STR,
    "kv-cache-dtype": _STR, "attention-backend": _STR, "speculative-config": _JSON,
    "kv-transfer-config": _JSON, "compilation-config": _JSON, "attention-config": _JSON,
    "enable-prefix-caching": _BOOL, "mamba-cache-mode": _STR, "async-scheduling": _BOOL,
    "enforce-eager": _BOOL, "max-model-len": _STR, "max-num-seqs": _INT,
    "max-num-batched-tokens": _INT, "gpu-memory-utilization": _STR, "served-model-name": _STR,
    "trust-remote-code": _BOOL, "tokenizer": _STR, "seed": _INT, "quantization": _STR,
    "enable-chunked-prefill": _BOOL, "disable-log-requests": _BOOL,
    "enable-log-requests": _BOOL, "disable-log-stats": _BOOL, "uvicorn-log-level": _STR,
    "load-format": _STR, "download-dir": _STR, "revision": _STR, "hf-overrides": _JSON,
    "kv-events-config": _JSON, "enable-expert-parallel": _BOOL, "api-key": _STR,
    "disable-hybrid-kv-cache-manager": _BOOL, "max-num-partial-prefills": _INT,
    "swap-space": _STR, "cpu-offload-gb": _STR, "distributed-executor-backend": _STR,
    "num-gpu-blocks-override": _INT, "limit-mm-per-prompt": _JSON, "headless": _BOOL,
    "api-server-count": _INT, "prefix-caching-hash-algo": _STR, "mamba-ssm-cache-dtype": _STR,
    "structured-outputs-config": _JSON, "generation-config": _STR, "chat-template": _STR,
    "enable-auto-tool-choice": _BOOL, "tool-call-parser": _STR, "reasoning-parser": _STR,
    "config": _STR, "kv-sharing-fast-prefill": _BOOL, "max-logprobs": _INT,
    "long-prefill-token-threshold": _INT, "scheduling-policy": _STR, "ssl-keyfile": _STR,
    "ssl-certfile": _STR, "root-path": _STR, "override-generation-config": _JSON,
}
SHORT = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size",
         "dp": "data-parallel-size", "dpl": "data-parallel-size-local",
         "dcp": "decode-context-parallel-size", "pcp": "prefill-context-parallel-size",
         "q": "quantization", "O": "compilation-config"}
_STOP = {"&", "&&", "||", "|", ";", ">", ">>", "<", "2>", "2>&1", "1>", "&>"}
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_API_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server",
                "vllm.entrypoints.cli.main")
ROLES = ("prefill", "decode")


def split_command(text: str, what: str) -> tuple[list[str], dict[str, str]]:
    """Split a shell command into (vllm serve arguments, env assignments in front)."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise BadInput(f"{what}: cannot split the command ({exc})",
                       hint="check the quotes around JSON values such as --kv-transfer-config"
                       ) from None
    cut: list[str] = []
    for t in tokens:
        if t in _STOP or t.startswith((">", "2>", "1>", "&>")):
            break
        cut.append(t)
    env: dict[str, str] = {}
    i = 0
    while i < len(cut):
        t = cut[i]
        if t in ("env", "exec", "nohup", "time") or (t.startswith("-") and not env and i == 0):
            i += 1
            continue
        if _ENV_RE.match(t):
            k, _, v = t.partition("=")
            env[k] = v
            i += 1
            continue
        break
    rest = cut[i:]
    if not rest:
        raise BadInput(f"{what}: empty command", hint='give e.g. "vllm serve MODEL --kv-transfer-'
                       'config \'{\\"kv_connector\\":\\"NixlConnector\\",\\"kv_role\\":\\"kv_both\\"}\'"')
    exe = rest[0].rsplit("/", 1)[-1]
    if exe in ("uv", "uvx") and len(rest) > 2 and rest[1] == "run":
        rest = rest[2:]
        exe = rest[0].rsplit("/", 1)[-1]
    if exe == "vllm":
        if len(rest) < 2 or rest[1] != "serve":
            raise BadInput(f"{what}: not a `vllm serve` command ({' '.join(rest[:2])})",
                           hint="give the command that starts the engine: vllm serve MODEL ...")
        return rest[2:], env
    if exe.startswith("python"):
        j = 1
        while j < len(rest) and rest[j] != "-m" and rest[j].startswith("-"):
            j += 1
        if j + 1 < len(rest) and rest[j] == "-m" and rest[j + 1] in _API_MODULES:
            args = rest[j + 2:]
            if rest[j + 1] == "vllm.entrypoints.cli.main" and args[:1] == ["serve"]:
                args = args[1:]
            return args, env
        raise BadInput(f"{what}: not a vLLM server command ({' '.join(rest[:3])})",
                       hint="use `vllm serve MODEL ...` or `python -m "
                            "vllm.entrypoints.openai.api_server --model MODEL ...`")
    if exe == "serve":
        return rest[1:], env
    if exe.startswith("-") or exe in FLAGS:
        return rest, env  # bare arguments
    raise BadInput(f"{what}: not a vLLM server command (starts with {rest[0]!r})",
                   hint="use `vllm serve MODEL ...` or `python -m "
                        "vllm.entrypoints.openai.api_server --model MODEL ...`")


def _json_value(flag: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadInput(f"--{flag}: malformed JSON at line {exc.lineno} column {exc.colno} "
                       f"(position {exc.pos}): {exc.msg.lower()}",
                       hint=f"{_near(raw, exc.pos)}; expected a JSON object such as "
                            "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_producer\"}'"
                       ) from None
    except RecursionError:
        raise BadInput(f"--{flag}: JSON nested too deeply") from None


def _near(raw: str, pos: int) -> str:
    lo = max(0, pos - 15)
    return f"near {raw[lo:pos + 15]!r}"


def _bool(flag: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise BadInput(f"--{flag}: expected true or false, got {raw!r}")


def _int(flag: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise BadInput(f"--{flag}: expected an integer, got {raw!r}") from None


def _set_dotted(target: dict[str, Any], path: list[str], value: Any) -> None:
    cur = target
    for key in path[:-1]:
        nxt = cur.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[key] = nxt
        cur = nxt
    cur[path[-1]] = value


def _dotted_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return raw


def parse_args(args: list[str], env: dict[str, str], *, role: str, what: str,
               machine: str | None = None, source: str = "command line") -> ServeConfig:
    """Parse `vllm serve` arguments into a ServeConfig."""
    values: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    unknown: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            positional.extend(args[i:])
            break
        if not tok.startswith("-") or tok == "-" or _is_number(tok):
            positional.append(tok)
            continue
        name, eq, inline = tok.lstrip("-").partition("=")
        base, dot, sub = name.partition(".")
        base = base.replace("_", "-")
        if tok.startswith("-") and not tok.startswith("--"):
            base = SHORT.get(base, base)
        negated = False
        if base.startswith("no-") and FLAGS.get(base[3:]) == _BOOL:
            base, negated = base[3:], True
        kind = FLAGS.get(base)
        if kind is None:
            unknown.append("--" + base if tok.startswith("--") else tok.split("=")[0])
            if not eq and i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        if kind == _BOOL:
            if negated:
                values[base] = False
            elif eq:
                values[base] = _bool(base, inline)
            elif i < len(args) and args[i].lower() in ("true", "false"):
                values[base] = _bool(base, args[i])
                i += 1
            else:
                values[base] = True
            continue
        if eq:
            raw = inline
        elif i < len(args):
            raw = args[i]
            i += 1
        else:
            raise BadInput(f"{what}: --{name} needs a value")
        if dot:
            if kind != _JSON:
                raise BadInput(f"{what}: --{name}: --{base} takes no dotted sub-keys")
            parts = [p for p in sub.split(".")]
            if any(not p for p in parts):
                raise BadInput(f"{what}: --{name}: empty key in the dotted form")
            _set_dotted(dotted.setdefault(base, {}), parts, _dotted_value(raw))
            continue
        if kind == _INT:
            values[base] = _int(base, raw)
        elif kind == _JSON:
            v = _json_value(base, raw)
            if base in ("kv-transfer-config", "speculative-config") and not isinstance(v, dict):
                raise BadInput(f"--{base}: expected a JSON object, got {type(v).__name__}",
                               hint="e.g. '{\"kv_connector\":\"NixlConnector\",\"kv_role\":"
                                    "\"kv_both\"}'")
            values[base] = v
        else:
            values[base] = raw
    for base, tree in dotted.items():
        cur = values.get(base)
        merged = dict(cur) if isinstance(cur, dict) else {}
        _merge(merged, tree)
        values[base] = merged
    model = values.get("model")
    if positional:
        model = positional[0]
    ktc = values.get("kv-transfer-config")

    def geti(key: str, default: int) -> int:
        v = values.get(key)
        return v if isinstance(v, int) else default

    def opt_int(key: str) -> int | None:
        v = values.get(key)
        return v if isinstance(v, int) else None

    def opt_str(key: str) -> str | None:
        v = values.get(key)
        return str(v) if v is not None else None

    def opt_bool(key: str) -> bool | None:
        v = values.get(key)
        return v if isinstance(v, bool) else None

    return ServeConfig(
        role=role, model=str(model) if model is not None else None, port=opt_int("port"),
        host=opt_str("host"), machine=machine,
        tensor_parallel_size=geti("tensor-parallel-size", 1),
        pipeline_parallel_size=geti("pipeline-parallel-size", 1),
        data_parallel_size=geti("data-parallel-size", 1),
        data_parallel_size_local=opt_int("data-parallel-size-local"),
        data_parallel_rank=opt_int("data-parallel-rank"),
        prefill_context_parallel_size=geti("prefill-context-parallel-size", 1),
        block_size=opt_int("block-size"), dtype=opt_str("dtype"),
        kv_cache_dtype=opt_str("kv-cache-dtype"),
        attention_backend=opt_str("attention-backend") or env.get("VLLM_ATTENTION_BACKEND"),
        speculative_config=values.get("speculative-config"),
        enable_prefix_caching=opt_bool("enable-prefix-caching"),
        mamba_cache_mode=opt_str("mamba-cache-mode"),
        async_scheduling=opt_bool("async-scheduling"),
        kv_transfer_config=ktc if isinstance(ktc, dict) else None,
        env=dict(env), unknown_flags=tuple(unknown), source=source, values=values,
        argv=tuple(args),
    )


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def parse_command(text: str, *, role: str, what: str | None = None) -> ServeConfig:
    """Parse one launch command (string) for a role."""
    what = what or f"--{role}-cmd"
    args, env = split_command(text, what)
    return parse_args(args, env, role=role, what=what)


def parse_launch(cmd: LaunchCommand) -> ServeConfig:
    what = f"{cmd.source} ({cmd.role})"
    args = list(cmd.args)
    env = dict(cmd.env)
    return parse_args(args, env, role=cmd.role, what=what, machine=cmd.host, source=cmd.source)


# --- config files -------------------------------------------------------------------------

def load_config_file(path: Path) -> dict[str, LaunchCommand]:
    """Read a file holding the launch commands: plain text, YAML or JSON."""
    label = f"--config {path}"
    if not path.exists():
        raise BadInput(f"{label}: no such file")
    if not path.is_file():
        raise BadInput(f"{label}: not a file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{label}: cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in data:
        raise BadInput(f"{label}: binary file, neither text nor YAML/JSON",
                       hint="give a text file with one launch command per role, or YAML/JSON "
                            "with prefill: and decode: entries")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{label}: not UTF-8 text (byte {exc.start}), neither text nor YAML/JSON"
                       ) from None
    return parse_config_text(text, label=label, suffix=path.suffix.lower())


def parse_config_text(text: str, *, label: str, suffix: str = "") -> dict[str, LaunchCommand]:
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith(("{", "[")):
        try:
            doc: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{label}: malformed JSON at line {exc.lineno} column {exc.colno}: "
                           f"{exc.msg.lower()}") from None
        except RecursionError:
            raise BadInput(f"{label}: JSON nested too deeply") from None
        return _from_mapping(doc, label)
    if suffix in (".yaml", ".yml") or _looks_like_yaml(text):
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or "invalid YAML"
            raise BadInput(f"{label}: malformed YAML{where}: {problem}") from None
        except RecursionError:
            raise BadInput(f"{label}: YAML nested too deeply") from None
        if isinstance(doc, dict):
            return _from_mapping(doc, label)
        if suffix in (".yaml", ".yml"):
            raise BadInput(f"{label}: YAML without prefill: / decode: entries")
    return _from_text(text, label)


def _looks_like_yaml(text: str) -> bool:
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return bool(re.match(r"^(prefill|decode)\s*:\s*($|[|>]|\{|\[)", s))
    return False


def _from_mapping(doc: Any, label: str) -> dict[str, LaunchCommand]:
    if not isinstance(doc, dict):
        raise BadInput(f"{label}: expected a mapping with prefill: and decode: entries, got "
                       f"{type(doc).__name__}")
    if isinstance(doc.get("roles"), dict):
        doc = doc["roles"]
    found: dict[str, LaunchCommand] = {}
    for role in ROLES:
        if role not in doc or doc[role] is None:
            continue
        found[role] = _entry(doc[role], role, label)
    if not found:
        raise BadInput(f"{label}: no prefill: or decode: entry",
                       hint="write prefill: {args: [...], env: {...}} and decode: {...}")
    return found


def _entry(entry: Any, role: str, label: str) -> LaunchCommand:
    what = f"{label} ({role})"
    if isinstance(entry, str):
        a, e = split_command(entry, what)
        return LaunchCommand(role=role, args=tuple(a), env=tuple(e.items()), source=label)
    if isinstance(entry, list):
        entry = {"args": entry}
    if not isinstance(entry, dict):
        raise BadInput(f"{what}: expected a command string or a mapping with args/env, got "
                       f"{type(entry).__name__}")
    env: dict[str, str] = {}
    raw_env = entry.get("env") or {}
    if isinstance(raw_env, list):
        for item in raw_env:
            if isinstance(item, dict) and "name" in item:
                env[str(item["name"])] = _scalar(item.get("value", ""))
            elif isinstance(item, str) and "=" in item:
                k, _, v = item.partition("=")
                env[k] = v
            else:
                raise BadInput(f"{what}: env entries must be NAME=VALUE or name/value mappings")
    elif isinstance(raw_env, dict):
        env = {str(k): _scalar(v) for k, v in raw_env.items()}
    else:
        raise BadInput(f"{what}: env must be a mapping or a list")
    cmd = entry.get("command", entry.get("cmd"))
    raw_args = entry.get("args", [])
    args: list[str]
    if isinstance(cmd, str) and cmd.strip():
        args, cmd_env = split_command(cmd, what)
        env = {**cmd_env, **env}
    elif isinstance(cmd, list) and cmd:
        args, cmd_env = split_command(shlex.join(_scalar(c) for c in cmd), what)
        env = {**cmd_env, **env}
    else:
        args = []
    if isinstance(raw_args, str):
        extra = shlex_split(raw_args, what)
    elif isinstance(raw_args, list):
        extra = [_scalar(a) for a in raw_args]
    else:
        raise BadInput(f"{what}: args must be a list or a string")
    if extra and not args and extra[0].rsplit("/", 1)[-1] in ("vllm", "python", "python3"):
        extra, cmd_env = split_command(shlex.join(extra), what)
        env = {**cmd_env, **env}
    elif extra and extra[0] == "serve":
        extra = extra[1:]
    args = args + extra
    if not args and "model" not in entry:
        raise BadInput(f"{what}: empty command (no args)")
    if "model" in entry and entry["model"] is not None:
        args = [*args, "--model", _scalar(entry["model"])]
    host = entry.get("host") or entry.get("node")
    return LaunchCommand(role=role, args=tuple(args), env=tuple(env.items()),
                         host=_scalar(host) if host is not None else None, source=label)


def shlex_split(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise BadInput(f"{what}: cannot split the arguments ({exc})") from None


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def _from_text(text: str, label: str) -> dict[str, LaunchCommand]:
    joined = re.sub(r"\\\r?\n", " ", text)
    cmds: list[tuple[str | None, str]] = []
    for line in joined.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"^(prefill|decode)\s*[:=]\s*(.*)$", s, re.IGNORECASE)
        role = None
        if m:
            role, s = m.group(1).lower(), m.group(2)
        if role is None and not re.search(r"\bvllm\b", s):
            continue
        cmds.append((role, s))
    if not cmds:
        raise BadInput(f"{label}: no launch command found (neither text with `vllm serve` lines "
                       "nor YAML/JSON with prefill:/decode:)")
    found: dict[str, LaunchCommand] = {}
    unassigned: list[tuple[list[str], dict[str, str]]] = []
    for role, s in cmds:
        what = f"{label} ({role or 'command'})"
        args, env = split_command(s, what)
        if role is None:
            r = _role_from_args(args)
            if r is None or r in found:
                unassigned.append((args, env))
                continue
            role = r
        if role in found:
            raise BadInput(f"{label}: more than one {role} command",
                           hint="keep one command per role")
        found[role] = LaunchCommand(role=role, args=tuple(args), env=tuple(env.items()),
                                    source=label)
    for args, env in unassigned:
        free = [r for r in ROLES if r not in found]
        if not free:
            raise BadInput(f"{label}: more than two launch commands",
                           hint="keep one command per role (prefill, decode)")
        found[free[0]] = LaunchCommand(role=free[0], args=tuple(args), env=tuple(env.items()),
                                       source=label)
    return found


def _role_from_args(args: list[str]) -> str | None:
    text = " ".join(args)
    if "kv_producer" in text:
        return "prefill"
    if "kv_consumer" in text:
        return "decode"
    return None
