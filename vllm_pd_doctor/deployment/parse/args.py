"""`vllm serve` arguments -> ServeConfig, as vLLM's argument parser would read them.

Unknown flags are kept (and warned about), never fatal, and never take the model name: a flag
the installed vLLM does not know takes the next word only when that word cannot be the model.
Values still holding what the file could not tell (`${PORT}`) fail with the variable's name.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.infra.shell.words import unresolved_names
from vllm_pd_doctor.knowledge.readers.serve_flags import BOOL, BUILTIN, INT, JSON, FlagTable
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
    r = _Reader(args, what, table)
    r.read()
    values = r.values
    if "config" in values:
        r.unknown.append(
            f"--config {values['config']} (vLLM config file not found here: its settings are not checked)"
        )
    cfg = _serve_config(
        values, r.model(), env, role=role, machine=machine, source=source, unknown=r.unknown, args=args
    )
    return replace(cfg, flags_release=table.release) if table.release else cfg


class _Reader:
    """One pass over the arguments, as vLLM's FlexibleArgumentParser reads them."""

    def __init__(self, args: list[str], what: str, table: FlagTable) -> None:
        self.args, self.what, self.table = args, what, table
        self.values: dict[str, Any] = {}
        self.dotted: dict[str, dict[str, Any]] = {}
        self.unknown: list[str] = []
        self.positional: list[str] = []
        self.after_unknown: list[int] = []
        """Indexes into `positional` of words right after an unknown switch-or-value flag."""
        self.i = 0

    def read(self) -> None:
        args = self.args
        while self.i < len(args):
            tok = args[self.i]
            self.i += 1
            if tok == "--":
                self.positional.extend(args[self.i :])
                break
            if not tok.startswith("-") or tok == "-" or _is_number(tok):
                self.positional.append(tok)
                continue
            self._flag(tok)
        for base, tree in self.dotted.items():
            cur = self.values.get(base)
            merged = dict(cur) if isinstance(cur, dict) else {}
            _merge(merged, tree)
            self.values[base] = merged

    def model(self) -> Any:
        """vLLM takes one positional (the model): words after unknown flags beyond it were values."""
        positional, after_unknown = self.positional, self.after_unknown
        extra = len(positional) - 1
        drop = set(after_unknown[: max(0, extra)]) if extra > 0 else set()
        if "model" in self.values and after_unknown:
            drop = set(after_unknown)
        positional = [p for k, p in enumerate(positional) if k not in drop]
        return positional[0] if positional else self.values.get("model")

    def _name(self, tok: str) -> tuple[str, str, str, str, str]:
        """(canonical flag, flag as written, '=' or '', inline value, dotted sub-key)."""
        if tok.startswith("---"):
            raise BadInput(
                f"{self.what}: {tok.split('=')[0]!r} has three dashes: vLLM's parser rejects it "
                "(unrecognized arguments)",
                hint=f"write --{tok.lstrip('-').split('=')[0]}",
            )
        name, eq, inline = tok.lstrip("-").partition("=")
        base, _, sub = name.partition(".")
        if not tok.startswith("--"):
            base = self.table.short(base)
        else:
            base = base.replace("_", "-")
            base = self.table.aliases.get(base, base)
        return base, name, eq, inline, sub

    def _flag(self, tok: str) -> None:
        args, what = self.args, self.what
        base, name, eq, inline, sub = self._name(tok)
        negated = False
        if base.startswith("no-") and self.table.kind(base[3:]) == BOOL:
            base, negated = base[3:], True
        kind = self.table.kind(base)
        full = self.table.abbreviation(base) if kind is None and tok.startswith("--") else None
        if full is not None:  # argparse takes a unique prefix for the flag
            base, negated = (full[3:], True) if full.startswith("no-") else (full, False)
            kind = self.table.kind(base)
            name = base + name[len(name.partition(".")[0]) :]
        if kind is None:
            self.unknown.append("--" + base if tok.startswith("--") else tok.split("=")[0])
            if not eq and self.i < len(args) and not args[self.i].startswith("-"):
                self.after_unknown.append(len(self.positional))
            return
        if kind == BOOL:
            self._bool_flag(base, negated, eq, inline)
            return
        if eq:
            raw = inline
        elif self.i < len(args):
            raw = args[self.i]
            if self._is_flag(raw):
                raise BadInput(
                    f"{what}: --{name} has no value (the next word is the flag {raw.split('=')[0]}): "
                    "an empty template value or variable",
                    hint=f"give --{name} its value (--set VAR=VALUE for a variable the file leaves empty)",
                )
            self.i += 1
        else:
            raise BadInput(f"{what}: --{name} needs a value")
        if "." in name:
            if kind in (INT, BOOL):
                raise BadInput(f"{what}: --{name}: --{base} takes no dotted sub-keys")
            parts = sub.split(".")
            if any(not p for p in parts):
                raise BadInput(f"{what}: --{name}: empty key in the dotted form")
            _set_dotted(self.dotted.setdefault(base, {}), parts, _dotted_value(raw))
            return
        self.values[base] = _typed(what, base, kind, raw)

    def _is_flag(self, word: str) -> bool:
        """A word that is one of vLLM's flags (`--data-parallel-size`), not a value."""
        if not word.startswith("--") or len(word) < 3 or _is_number(word):
            return False
        base = word[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
        base = self.table.aliases.get(base, base)
        return self.table.kind(base[3:] if base.startswith("no-") else base) is not None

    def _bool_flag(self, base: str, negated: bool, eq: str, inline: str) -> None:
        if negated:
            self.values[base] = False
        elif eq:
            self.values[base] = _bool(self.what, base, inline)
        elif self.i < len(self.args) and self.args[self.i].lower() in ("true", "false"):
            self.values[base] = _bool(self.what, base, self.args[self.i])
            self.i += 1
        else:
            self.values[base] = True


def _typed(what: str, base: str, kind: str, raw: str) -> Any:
    """A flag's value as vLLM's parser types it."""
    if kind == INT and raw.startswith("$((") and raw.endswith("))"):
        return raw  # arithmetic on what the file cannot tell: left symbolic (unknown)
    if kind == INT:
        return _int(what, base, raw)
    if kind == JSON:
        v = _json_value(what, base, raw)
        if base in _MODEL_JSON and not isinstance(v, dict):
            raise BadInput(
                f"--{base}: expected a JSON object, got {type(v).__name__}",
                hint='e.g. \'{"kv_connector":"NixlConnector","kv_role":"kv_both"}\'',
            )
        return v
    return raw


def _serve_config(
    values: dict[str, Any],
    model: Any,
    env: dict[str, str],
    *,
    role: str,
    machine: str | None,
    source: str,
    unknown: list[str],
    args: list[str],
) -> ServeConfig:
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
