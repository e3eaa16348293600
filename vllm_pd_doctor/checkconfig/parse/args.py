"""`vllm serve` arguments -> ServeConfig, as vLLM's argument parser would read them.

Unknown flags are kept (and warned about), never fatal, and never take the model name: a flag
the installed vLLM does not know takes the next word only when that word cannot be the model.
Values still holding what the file could not tell (`${PORT}`) fail with the variable's name.
"""

from __future__ import annotations

import json
from typing import Any

from vllm_pd_doctor.checkconfig.parse.flags import BOOL, BUILTIN, INT, JSON, FlagTable
from vllm_pd_doctor.checkconfig.parse.shellwords import unresolved_names
from vllm_pd_doctor.errors import BadInput
from vllm_pd_doctor.results.launch import ServeConfig

_MODEL_JSON = ("kv-transfer-config", "speculative-config")


def _unresolved(what: str, flag: str, raw: str, expected: str) -> BadInput | None:
    names = unresolved_names(raw)
    if not names:
        return None
    vars_ = [n for n in names if not n.startswith("$(")]
    if vars_:
        return BadInput(
            f"{what}: --{flag} {raw!r}: ${vars_[0]} is not set in the file (needs {expected})",
            hint=f"give its value: --set {vars_[0]}=VALUE",
        )
    return BadInput(
        f"{what}: --{flag} {raw!r}: the value comes from {names[0]}, which "
        f"pd-doctor does not run (needs {expected})",
        hint="assign it to a variable in the script and give that one with "
        "--set VAR=VALUE, or write the value into the command",
    )


def _json_value(what: str, flag: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        err = _unresolved(what, flag, raw, "a JSON object")
        if err is not None:
            raise err from None
        raise BadInput(
            f"--{flag}: malformed JSON at line {exc.lineno} column {exc.colno} "
            f"(position {exc.pos}): {exc.msg.lower()}",
            hint=f"{_near(raw, exc.pos)}; expected a JSON object such as "
            '\'{"kv_connector":"NixlConnector","kv_role":"kv_producer"}\'',
        ) from None
    except RecursionError:
        raise BadInput(f"--{flag}: JSON nested too deeply") from None


def _near(raw: str, pos: int) -> str:
    lo = max(0, pos - 15)
    return f"near {raw[lo : pos + 15]!r}"


def _bool(what: str, flag: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    err = _unresolved(what, flag, raw, "true or false")
    if err is not None:
        raise err
    raise BadInput(f"--{flag}: expected true or false, got {raw!r}")


def _int(what: str, flag: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        err = _unresolved(what, flag, raw, "an integer")
        if err is not None:
            raise err from None
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


def parse_args(
    args: list[str],
    env: dict[str, str],
    *,
    role: str,
    what: str,
    machine: str | None = None,
    source: str = "command line",
    table: FlagTable = BUILTIN,
) -> ServeConfig:
    """Parse `vllm serve` arguments into a ServeConfig."""
    values: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    unknown: list[str] = []
    positional: list[str] = []
    after_unknown: list[int] = []
    """Indexes into `positional` of words right after an unknown switch-or-value flag."""
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
        if tok.startswith("---"):
            raise BadInput(
                f"{what}: {tok.split('=')[0]!r} has three dashes: vLLM's parser rejects it "
                "(unrecognized arguments)",
                hint=f"write --{tok.lstrip('-').split('=')[0]}",
            )
        name, eq, inline = tok.lstrip("-").partition("=")
        base, dot, sub = name.partition(".")
        if not tok.startswith("--"):
            base = table.short(base)
        else:
            base = base.replace("_", "-")
            base = table.aliases.get(base, base)
        negated = False
        if base.startswith("no-") and table.kind(base[3:]) == BOOL:
            base, negated = base[3:], True
        kind = table.kind(base)
        if kind is None:
            unknown.append("--" + base if tok.startswith("--") else tok.split("=")[0])
            if not eq and i < len(args) and not args[i].startswith("-"):
                after_unknown.append(len(positional))
            continue
        if kind == BOOL:
            if negated:
                values[base] = False
            elif eq:
                values[base] = _bool(what, base, inline)
            elif i < len(args) and args[i].lower() in ("true", "false"):
                values[base] = _bool(what, base, args[i])
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
            if kind in (INT, BOOL):
                raise BadInput(f"{what}: --{name}: --{base} takes no dotted sub-keys")
            parts = sub.split(".")
            if any(not p for p in parts):
                raise BadInput(f"{what}: --{name}: empty key in the dotted form")
            _set_dotted(dotted.setdefault(base, {}), parts, _dotted_value(raw))
            continue
        if kind == INT and raw.startswith("$((") and raw.endswith("))"):
            values[base] = raw  # arithmetic on what the file cannot tell: left symbolic (unknown)
        elif kind == INT:
            values[base] = _int(what, base, raw)
        elif kind == JSON:
            v = _json_value(what, base, raw)
            if base in _MODEL_JSON and not isinstance(v, dict):
                raise BadInput(
                    f"--{base}: expected a JSON object, got {type(v).__name__}",
                    hint='e.g. \'{"kv_connector":"NixlConnector","kv_role":"kv_both"}\'',
                )
            values[base] = v
        else:
            values[base] = raw
    for base, tree in dotted.items():
        cur = values.get(base)
        merged = dict(cur) if isinstance(cur, dict) else {}
        _merge(merged, tree)
        values[base] = merged
    # vLLM takes one positional (the model): words after unknown flags beyond it were values
    extra = len(positional) - 1
    drop = set(after_unknown[: max(0, extra)]) if extra > 0 else set()
    if "model" in values and after_unknown:
        drop = set(after_unknown)
    positional = [p for k, p in enumerate(positional) if k not in drop]
    model = positional[0] if positional else values.get("model")
    if "config" in values:
        unknown.append(
            f"--config {values['config']} (vLLM config file not found here: its settings are not checked)"
        )
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
        role=role,
        model=str(model) if model is not None else None,
        port=opt_int("port"),
        host=opt_str("host"),
        machine=machine,
        tensor_parallel_size=geti("tensor-parallel-size", 1),
        pipeline_parallel_size=geti("pipeline-parallel-size", 1),
        data_parallel_size=geti("data-parallel-size", 1),
        data_parallel_size_local=opt_int("data-parallel-size-local"),
        data_parallel_rank=opt_int("data-parallel-rank"),
        prefill_context_parallel_size=geti("prefill-context-parallel-size", 1),
        block_size=opt_int("block-size"),
        dtype=opt_str("dtype"),
        kv_cache_dtype=opt_str("kv-cache-dtype"),
        attention_backend=opt_str("attention-backend") or env.get("VLLM_ATTENTION_BACKEND"),
        speculative_config=values.get("speculative-config"),
        enable_prefix_caching=opt_bool("enable-prefix-caching"),
        mamba_cache_mode=opt_str("mamba-cache-mode"),
        async_scheduling=opt_bool("async-scheduling"),
        kv_transfer_config=ktc if isinstance(ktc, dict) else None,
        env=dict(env),
        unknown_flags=tuple(unknown),
        source=source,
        values=values,
        argv=tuple(args),
    )
