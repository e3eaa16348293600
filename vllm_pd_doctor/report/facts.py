"""Facts for the public bundle, built from typed results whose kinds are known safe.

- Flags: the names of a launch command's flags are kept; a value only when vLLM declares the
  flag's type as a number, a switch, a `Literal` or an enum (read from the installed vLLM's
  `EngineArgs` / `FrontendArgs` annotations with `ast`, never imported) and the value itself
  has a plain shape. A model path, a served name, a host, an API key, a chat template: a
  placeholder.
- JSON values (`--kv-transfer-config`, the model's config.json): keys kept, numbers and booleans
  kept, strings through the redactor and then `public.SafeText`.
- Typed results (check-config's `CheckReport`, the repro's `ReproReport`): every string through
  the same two passes with `dataclasses.replace`, so the report can render them with the very
  formatters the commands use (`formats/`), and report.json embeds what `--format json` prints.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import re
import shlex
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from vllm_pd_doctor.knowledge.readers import serve_flags as _flags
from vllm_pd_doctor.report.public import SafeText
from vllm_pd_doctor.report.redact import Redactor, is_secret_name
from vllm_pd_doctor.results.launch import ServeConfig

_ARG_FILES = {
    "engine/arg_utils.py": ("EngineArgs", "AsyncEngineArgs"),
    "entrypoints/openai/cli_args.py": ("BaseFrontendArgs", "FrontendArgs"),
}
_UNSAFE_TYPES = re.compile(
    r"\b(?:str|Path|dict|list|set|tuple|Any|object|type|bytes|Callable)\b|Config\b|Overrides\b|Path\b"
)
_SAFE_TYPES = re.compile(r"\b(?:int|float|bool|Literal)\b|^[A-Z][A-Za-z0-9_]*$")
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.+\-]{1,40}")
FALLBACK_SAFE = frozenset(k for k, v in _flags.FLAGS.items() if v in (_flags.INT, _flags.BOOL)) | frozenset(
    {
        "dtype",
        "kv-cache-dtype",
        "attention-backend",
        "mamba-cache-mode",
        "mamba-ssm-cache-dtype",
        "load-format",
        "quantization",
        "distributed-executor-backend",
        "prefix-caching-hash-algo",
        "scheduling-policy",
        "uvicorn-log-level",
        "max-model-len",
        "gpu-memory-utilization",
        "swap-space",
        "cpu-offload-gb",
        "data-parallel-backend",
        "all2all-backend",
        "tokenizer-mode",
        "runner",
        "kv-offloading-backend",
    }
)
"""Non-secret flags when the installed vLLM cannot be read: the numbers and switches of
check-config's table, and flags whose values are vLLM's own enumerations."""


_PLACE_KEYS = (
    (
        re.compile(r"(?i).*(?:url|uri|endpoint|host|addr|address|server|master|peer)s?|(?:.*[_\-])?ips?"),
        "host",
    ),
    (re.compile(r"(?i).*(?:path|dir|directory|file|bucket|prefix|root)s?"), "path"),
    (
        re.compile(r"(?i).*(?:user|account|project|namespace|cluster|tenant|org|owner)s?(?:_?(?:id|name))?"),
        "value",
    ),
)
_ORDINARY_PLACE = re.compile(
    r"(?i)|auto|none|null|default|localhost|127\.0\.0\.1|0\.0\.0\.0|::1?|true|false|\d+"
)


def _place_kind(key: str) -> str | None:
    """The kind of place a JSON key names (a URL, a host, a path, an account), if any."""
    key = key.strip()
    return next((kind for rx, kind in _PLACE_KEYS if key and rx.fullmatch(key)), None)


def _annotation_safe(ann: str) -> bool:
    """`int | None`, `bool`, `Literal["a", "b"]`, `MambaDType` (an alias of a Literal or an
    enum): safe. `str | None`, `list[str]`, `dict[str, Any]`, `KVTransferConfig`: not."""
    parts = [p.strip() for p in ann.replace("Optional[", "").rstrip("]").split("|")]
    parts = [p for p in parts if p and p != "None"]
    if "str" in parts and any(re.fullmatch(r"[A-Z][A-Za-z0-9_]*", p) for p in parts):
        parts.remove("str")  # `QuantizationMethods | str`: vLLM's names, or a plugin's
    if not parts or any(_UNSAFE_TYPES.search(p) and not p.startswith("Literal") for p in parts):
        return False
    return all(_SAFE_TYPES.search(p) for p in parts)


@functools.lru_cache(maxsize=8)
def safe_flags(vllm_dir: str | None) -> frozenset[str]:
    """Flags (long names, dashes) whose values are never secret, derived from the installed
    vLLM's argument dataclasses; check-config's table when they cannot be read."""
    if not vllm_dir:
        return FALLBACK_SAFE
    out: set[str] = set()
    for rel, classes in _ARG_FILES.items():
        try:
            tree = ast.parse((Path(vllm_dir) / rel).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ClassDef) and node.name in classes):
                continue
            for st in node.body:
                if (
                    isinstance(st, ast.AnnAssign)
                    and isinstance(st.target, ast.Name)
                    and not st.target.id.startswith("_")
                    and _annotation_safe(ast.unparse(st.annotation))
                ):
                    out.add(st.target.id.replace("_", "-"))
    return frozenset(out) if out else FALLBACK_SAFE


@dataclasses.dataclass
class Public:
    """The two passes every included value goes through: the redactor (what it recognises,
    stable placeholders) and `SafeText` (only words of known-safe kinds survive)."""

    red: Redactor
    safe_flag_names: frozenset[str] = FALLBACK_SAFE

    def __post_init__(self) -> None:
        self.safe = SafeText(self.red.ph, keep_hosts=not self.red.ctx.redact_hosts)

    def text(self, s: str) -> str:
        return self.safe.text(self.red.text(self.renamed(s))) if s else s

    def named(self, name: str, value: str) -> str:
        return self.safe.text(self.red.value(name, self.renamed(value))) if value else value

    def renamed(self, s: str) -> str:
        """The input files' names in their public form, before anything else reads the text (a
        host named only in a log's file name never reaches the redactor as a word)."""
        for raw in sorted(self.safe.rename, key=len, reverse=True):
            if raw in s:
                s = s.replace(raw, self.safe.rename[raw])
        return s

    def placeholder(self, kind: str, value: str) -> str:
        if kind == "model" and value.rstrip("/") in self.safe.keep:
            return value  # a public model id (report/identity.py)
        return str(self.red.ph.get(kind, value))

    # --- JSON-like values ---------------------------------------------------------------

    def json(self, o: Any, name: str = "") -> Any:
        """Keys kept when they are plain names, numbers/booleans/null kept, strings redacted
        and sanitised (by their key's name: values under secret names are placeholders)."""
        if isinstance(o, str):
            kind = _place_kind(name)
            if kind is not None and o and not _ORDINARY_PLACE.fullmatch(o) and "<" not in o:
                return self.placeholder(kind, o)  # {"etcd_endpoint": "etcdhost"}: a place, never shown
            return self.named(name, o) if name else self.text(o)
        if isinstance(o, Mapping):
            out: dict[str, Any] = {}
            for k, v in o.items():
                key = str(k)
                key = key if re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", key) else self.text(key)
                out[key] = self.json(v, str(k))
            return out
        if isinstance(o, (list, tuple)):
            return [self.json(v, name) for v in o]
        return o

    # --- launch commands ----------------------------------------------------------------

    def flag_value(self, flag: str, value: str) -> str:
        name = flag.lstrip("-").split(".")[0]
        name = _flags.SHORT.get(name, name)
        if name in self.safe_flag_names and _PLAIN_VALUE.fullmatch(value) and not is_secret_name(name):
            return self.text(value)  # a placeholder still when the shape is not a known-safe one
        if _flags.FLAGS.get(name) == _flags.JSON:
            try:
                parsed = json.loads(value)
            except ValueError:
                pass
            else:
                return json.dumps(self.json(parsed), sort_keys=False)
        if is_secret_name(name):
            return self.placeholder("secret", value)
        kind = "host" if "host" in name or "address" in name else ("model" if name == "model" else "value")
        if kind == "host" and self.safe.keep_hosts:
            return self.text(value)
        return self.placeholder(kind, value)

    def argv(self, argv: tuple[str, ...] | list[str], model: str | None = None) -> list[str]:
        """A `vllm serve` argv with every value not known safe replaced by a placeholder."""
        out: list[str] = []
        i = 0
        args = list(argv)
        while i < len(args):
            a = args[i]
            if a.startswith("-") and len(a) > 1 and not a[1].isdigit():
                flag, eq, value = a.partition("=")
                shown = (
                    flag if re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_.\-]{0,80}", flag) else self.text(flag)
                )
                if eq:
                    out.append(f"{shown}={self.flag_value(flag, value)}")
                elif i + 1 < len(args) and not self._is_flag(args[i + 1]) and self._takes_value(flag):
                    out += [shown, self.flag_value(flag, args[i + 1])]
                    i += 1
                else:
                    out.append(shown)
            else:
                out.append(self.placeholder("model" if a == model else "value", a))
            i += 1
        return out

    @staticmethod
    def _is_flag(a: str) -> bool:
        return a.startswith("-") and len(a) > 1 and not a[1].isdigit()

    @staticmethod
    def _takes_value(flag: str) -> bool:
        name = flag.lstrip("-").split(".")[0]
        name = _flags.SHORT.get(name, name)
        return _flags.FLAGS.get(name) != _flags.BOOL

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {
            (k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,80}", k) else self.text(k)): self.named(k, v)
            for k, v in env.items()
        }

    def command(self, s: ServeConfig) -> str:
        """The launch command rebuilt from what check-config parsed, public form."""
        head = [f"{k}={shlex.quote(v)}" for k, v in self.env(s.env).items()] + ["vllm", "serve"]
        lines: list[list[str]] = [head]
        for a in self.argv(s.argv, s.model):
            if len(a) > 1 and a.startswith("-") and not a[1].isdigit():
                lines.append([])
            lines[-1].append(a if "<" in a and not a.startswith("{") else shlex.quote(a))
        return " \\\n  ".join(" ".join(x) for x in lines if x)

    def serve_config(self, s: ServeConfig) -> ServeConfig:
        model = self.placeholder("model", s.model) if s.model else None
        base: ServeConfig = redact_typed(s, self.text)
        return dataclasses.replace(
            base,
            model=model,
            host=self.red.ph.get("host", s.host)
            if s.host and s.host not in ("0.0.0.0", "localhost")
            else s.host,
            argv=tuple(self.argv(s.argv, s.model)),
            env=self.env(s.env),
            values={
                k: (v if isinstance(v, (int, float, bool)) or v is None else self.flag_value(k, str(v)))
                for k, v in s.values.items()
            },
            kv_transfer_config=self.json(s.kv_transfer_config) if s.kv_transfer_config is not None else None,
            speculative_config=self.json(s.speculative_config),
        )

    def typed(self, o: Any) -> Any:
        """A typed result (CheckReport, ReproReport) with every string public."""
        return redact_typed(o, self.text, self.serve_config, self.named)


def redact_typed(
    o: Any,
    fn: Callable[[str], str],
    serve: Callable[[ServeConfig], ServeConfig] | None = None,
    named: Callable[[str, str], str] | None = None,
) -> Any:
    """Every string of a frozen dataclass tree through `fn` (`dataclasses.replace`); enums,
    numbers and booleans kept; a `ServeConfig` through `serve`; values under dict keys that
    name a secret through `named`."""
    if isinstance(o, Enum) or o is None or isinstance(o, (bool, int, float)):
        return o
    if isinstance(o, str):
        return fn(o)
    if serve is not None and isinstance(o, ServeConfig):
        return serve(o)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        changes = {
            f.name: redact_typed(getattr(o, f.name), fn, serve, named)
            for f in dataclasses.fields(o)
            if f.init
        }
        return dataclasses.replace(o, **changes)
    if isinstance(o, tuple):
        return tuple(redact_typed(x, fn, serve, named) for x in o)
    if isinstance(o, list):
        return [redact_typed(x, fn, serve, named) for x in o]
    if isinstance(o, Mapping):
        out: dict[Any, Any] = {}
        for k, v in o.items():
            if named is not None and isinstance(k, str) and isinstance(v, str):
                out[k] = named(k, v)
            else:
                out[fn(k) if isinstance(k, str) else k] = redact_typed(v, fn, serve, named)
        return out
    return o
