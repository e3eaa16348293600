"""Which `vllm serve` flags take a value and which are switches: read from the installed vLLM's
source with `ast` (never imported), falling back to a hand-written table.

The hand-written table also carries the value types the rules need (int, JSON); the installed
source decides, for every other flag, whether the next word is its value or a positional.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

INT = "int"
STR = "str"
JSON = "json"
BOOL = "bool"
"""BooleanOptionalAction or store_true: `--x`, `--no-x`, `--x true|false`."""

FLAGS: dict[str, str] = {
    "model": STR,
    "port": INT,
    "host": STR,
    "tensor-parallel-size": INT,
    "pipeline-parallel-size": INT,
    "data-parallel-size": INT,
    "data-parallel-size-local": INT,
    "data-parallel-rank": INT,
    "data-parallel-start-rank": INT,
    "data-parallel-address": STR,
    "data-parallel-rpc-port": INT,
    "prefill-context-parallel-size": INT,
    "decode-context-parallel-size": INT,
    "block-size": INT,
    "dtype": STR,
    "kv-cache-dtype": STR,
    "attention-backend": STR,
    "speculative-config": JSON,
    "kv-transfer-config": JSON,
    "ec-transfer-config": JSON,
    "compilation-config": JSON,
    "attention-config": JSON,
    "enable-prefix-caching": BOOL,
    "mamba-cache-mode": STR,
    "async-scheduling": BOOL,
    "enforce-eager": BOOL,
    "max-model-len": STR,
    "max-num-seqs": INT,
    "max-num-batched-tokens": INT,
    "gpu-memory-utilization": STR,
    "served-model-name": STR,
    "trust-remote-code": BOOL,
    "tokenizer": STR,
    "seed": INT,
    "quantization": STR,
    "enable-chunked-prefill": BOOL,
    "disable-log-requests": BOOL,
    "enable-log-requests": BOOL,
    "disable-log-stats": BOOL,
    "uvicorn-log-level": STR,
    "load-format": STR,
    "download-dir": STR,
    "revision": STR,
    "hf-overrides": JSON,
    "kv-events-config": JSON,
    "enable-expert-parallel": BOOL,
    "api-key": STR,
    "disable-hybrid-kv-cache-manager": BOOL,
    "max-num-partial-prefills": INT,
    "swap-space": STR,
    "cpu-offload-gb": STR,
    "distributed-executor-backend": STR,
    "num-gpu-blocks-override": INT,
    "limit-mm-per-prompt": JSON,
    "headless": BOOL,
    "api-server-count": INT,
    "prefix-caching-hash-algo": STR,
    "mamba-ssm-cache-dtype": STR,
    "structured-outputs-config": JSON,
    "generation-config": STR,
    "chat-template": STR,
    "enable-auto-tool-choice": BOOL,
    "tool-call-parser": STR,
    "reasoning-parser": STR,
    "config": STR,
    "kv-sharing-fast-prefill": BOOL,
    "max-logprobs": INT,
    "long-prefill-token-threshold": INT,
    "scheduling-policy": STR,
    "ssl-keyfile": STR,
    "ssl-certfile": STR,
    "root-path": STR,
    "override-generation-config": JSON,
    "enable-dbo": BOOL,
    "no-enable-prefix-caching": BOOL,
    "disable-uvicorn-access-log": BOOL,
    "enable-sleep-mode": BOOL,
    "skip-tokenizer-init": BOOL,
    "enable-lora": BOOL,
    "disable-custom-all-reduce": BOOL,
    "enable-eplb": BOOL,
    "mm-processor-cache-gb": STR,
    "max-num-batched-tokens-per-step": INT,
    "data-parallel-hybrid-lb": BOOL,
    "data-parallel-external-lb": BOOL,
    "data-parallel-backend": STR,
    "all2all-backend": STR,
    "max-cudagraph-capture-size": INT,
    "disable-cascade-attn": BOOL,
}
SHORT = {
    "tp": "tensor-parallel-size",
    "pp": "pipeline-parallel-size",
    "dp": "data-parallel-size",
    "dpl": "data-parallel-size-local",
    "dcp": "decode-context-parallel-size",
    "pcp": "prefill-context-parallel-size",
    "q": "quantization",
    "O": "compilation-config",
    "ac": "attention-config",
    "asc": "api-server-count",
    "dpa": "data-parallel-address",
    "dpp": "data-parallel-rpc-port",
    "dpb": "data-parallel-backend",
    "ep": "enable-expert-parallel",
    "sc": "structured-outputs-config",
}

_VERSION = 3
"""Bump when the reader changes (invalidates cached tables)."""
_FILES = ("engine/arg_utils.py", "entrypoints/openai/cli_args.py", "entrypoints/cli/serve.py")
_CLASSES = {"EngineArgs", "AsyncEngineArgs", "BaseFrontendArgs", "FrontendArgs"}
DATA_FILE = Path(__file__).parent.parent / "facts" / "serve_flags.json"
"""Each release's flags as its own parser has them (`scripts/build_flag_tables.py`)."""


@dataclass(frozen=True)
class FlagTable:
    """Flag kinds: what a release's parser says (arity, booleans), with the hand-written value types
    (int, JSON) the rules need on top."""

    installed: dict[str, str] = field(default_factory=dict)
    """Long name -> BOOL, INT or STR, from a release's parser (empty: not read)."""
    aliases: dict[str, str] = field(default_factory=dict)
    source: str = "built-in table"
    release: str | None = None
    """The vLLM release whose own parser this is: a flag not in it makes that engine exit."""
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def kind(self, name: str) -> str | None:
        k = FLAGS.get(name)
        if not self.installed:
            return k
        inst = self.installed.get(name)
        if inst is None:
            return None if self.release else k
        if inst == BOOL:
            return BOOL
        if k in (INT, JSON):
            return k
        return INT if inst == INT else STR

    def known(self, name: str) -> bool:
        return self.kind(name) is not None

    def abbreviation(self, name: str) -> str | None:
        """The one flag `name` abbreviates, as argparse accepts it (`allow_abbrev`, vLLM's parser
        keeps the default): a unique prefix of a long option (`--no-` forms of booleans too)."""
        if not self.installed or len(name) < 2:
            return None
        hits = [k for k in self.installed if k.startswith(name)]
        hits += [f"no-{k}" for k, v in self.installed.items() if v == BOOL and f"no-{k}".startswith(name)]
        return hits[0] if len(hits) == 1 else None

    def short(self, name: str) -> str:
        return self.aliases.get(name) or SHORT.get(name) or name


def encode_flag(d: Mapping[str, object]) -> str:
    """One flag of `invllm/serve_parser.py`'s answer, compactly: `b` (--x/--no-x), `s` (a switch),
    else its type (`int`, `float`, `str`, `v` for a converter), nargs when not one, `|choices`."""
    if d.get("bool") == "optional":
        return "b"
    if d.get("bool"):
        return "s"
    t = str(d.get("type") or "str")
    code = t if t in ("int", "float", "str") else "v"
    nargs = d.get("nargs", 1)
    if nargs != 1:
        code += str(nargs)
    choices = d.get("choices")
    if isinstance(choices, list) and choices:
        code += "|" + "|".join(str(c) for c in choices)
    return code


def _decode(code: str) -> str:
    if code in ("b", "s"):
        return BOOL
    return INT if code.startswith("int") else STR


def _table(release: str, entry: Mapping[str, object], source: str) -> FlagTable:
    flags = entry["flags"]
    aliases = entry["aliases"]
    assert isinstance(flags, dict) and isinstance(aliases, dict)
    return FlagTable(
        installed={k: _decode(v) for k, v in flags.items()},
        aliases=dict(aliases),
        source=source,
        release=release,
        choices={k: tuple(v.split("|")[1:]) for k, v in flags.items() if "|" in v},
    )


@functools.lru_cache(maxsize=1)
def stored() -> dict[str, dict[str, object]]:
    """The releases pd-doctor keeps the parser's flags of (knowledge/facts/serve_flags.json)."""
    try:
        doc = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    rel = doc.get("releases") if isinstance(doc, dict) else None
    return rel if isinstance(rel, dict) else {}


def for_release(version: str) -> FlagTable | None:
    """The table of a release pd-doctor keeps (None: not kept)."""
    entry = stored().get(version)
    if entry is None:
        return None
    return _table(version, entry, f"vLLM {version}'s parser (pd-doctor's data)")


def _union() -> FlagTable:
    """Every flag of the releases kept, each as the newest release that has it reads it: the table
    when the deployment's vLLM is not known (a flag outside all of them is only noted)."""
    installed: dict[str, str] = {}
    aliases: dict[str, str] = {}
    rel = stored()
    for v in rel:  # oldest first: newer releases win
        t = _table(v, rel[v], "")
        installed.update(t.installed)
        aliases.update(t.aliases)
    if not installed:
        return FlagTable()
    names = list(rel)
    source = f"flags of vLLM {names[0]} to {names[-1]} (pd-doctor's data)"
    return FlagTable(installed=installed, aliases=aliases, source=source)


BUILTIN = _union()


def site_packages_vllm(python: str | None) -> Path | None:
    """The vllm package beside an interpreter of a venv (bin/python -> lib/python*/site-packages)."""
    if not python:
        return None
    root = Path(python).expanduser().parent.parent
    for lib in ("lib", "lib64", "Lib"):
        for cand in sorted((root / lib).glob("python*/site-packages/vllm")):
            if (cand / "engine" / "arg_utils.py").is_file():
                return cand
    cand = root / "Lib" / "site-packages" / "vllm"
    return cand if (cand / "engine" / "arg_utils.py").is_file() else None


def for_python(python: str | None) -> FlagTable:
    """The table of the vLLM beside `python` (default: this interpreter): its release's parser as
    pd-doctor keeps it; for a release not kept, its parser asked in that interpreter (cached); the
    union of the kept releases when no vLLM is found there."""
    vdir = site_packages_vllm(python or sys.executable)
    if vdir is None:
        return BUILTIN
    version = dist_version(vdir)
    kept = for_release(version) if version else None
    if kept is not None:
        return kept
    return _read(str(vdir), python or sys.executable, version)


def dist_version(vdir: Path) -> str | None:
    """The installed vLLM's version from its dist-info beside the package (never imported)."""
    for meta in sorted(vdir.parent.glob("vllm*.dist-info/METADATA")):
        try:
            with open(meta, encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip().split("+", 1)[0]
                    if not line.strip():
                        break
        except OSError:
            continue
    return None


def _splat_field(node: ast.expr) -> str | None:
    """The field of `**kwargs["field"]` or `**{**kwargs["field"], ...}`."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=False):
            if k is None:
                got = _splat_field(v)
                if got:
                    return got
    return None


def _is_switch(kw: ast.keyword, fields: dict[str, bool]) -> bool:
    """An add_argument keyword that makes the flag take no value."""
    if kw.arg == "action":
        txt = ast.unparse(kw.value)
        return any(x in txt for x in ("store_true", "store_false", "BooleanOptional", "store_const"))
    if kw.arg == "nargs":
        return ast.unparse(kw.value) == "0"
    return kw.arg is None and bool(fields.get(_splat_field(kw.value) or ""))


def _cache_file(vdir: str) -> Path | None:
    try:
        st = (Path(vdir) / "engine" / "arg_utils.py").stat()
    except OSError:
        return None
    key = hashlib.sha256(f"{_VERSION}:{vdir}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()
    from vllm_pd_doctor.infra import safeio
    from vllm_pd_doctor.infra.errors import BadInput

    try:
        base = safeio.user_cache_base()  # an empty HOME: no cache (never /.cache)
    except BadInput:
        return None
    return base / "pd-doctor" / "flag-tables" / f"{key[:32]}.json"


@functools.lru_cache(maxsize=8)
def _read(vdir: str, python: str, version: str | None) -> FlagTable:
    """A release pd-doctor does not keep: its own parser, asked in its interpreter once (seconds;
    then a small JSON cache keyed by the parser file's mtime and size); where that interpreter
    cannot build it, the flags read from its source with `ast`."""
    cache = _cache_file(vdir)
    if cache is not None:
        try:
            doc = json.loads(cache.read_text(encoding="utf-8"))
            return _table(str(doc["release"]), doc, f"{vdir}: vLLM {doc['release']}'s parser (cached)")
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            pass
    entry = _ask_parser(python)
    if entry is None:
        return _read_source(vdir)
    release = str(entry.pop("vllm", None) or version or "installed")
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"release": release, **entry}), encoding="utf-8")
            os.replace(tmp, cache)
        except OSError:
            pass
    return _table(release, entry, f"{vdir}: vLLM {release}'s parser")


def _ask_parser(python: str) -> dict[str, object] | None:
    """`invllm/serve_parser.py`'s answer, encoded; None when the interpreter cannot build it."""
    from vllm_pd_doctor.infra import targetrun
    from vllm_pd_doctor.infra.errors import PdDoctorError

    try:
        run = targetrun.run_module(python, "serve_parser", [], timeout=120, what="vllm serve's parser")
        flags = run.answer["flags"]
        return {
            "vllm": run.answer.get("vllm"),
            "flags": {k: encode_flag(v) for k, v in flags.items()},
            "aliases": dict(run.answer["aliases"]),
        }
    except (PdDoctorError, KeyError, TypeError, AttributeError):
        return None


def _parser_files(vdir: str) -> list[Path]:
    """The files that define `vllm serve`'s arguments, found by what they hold (the frontend moved
    from entrypoints/openai/cli_args.py to entrypoints/launchers/cli_args.py in 0.31): the known
    ones, and any entrypoints module defining one of the argument classes."""
    root = Path(vdir)
    found = [root / rel for rel in _FILES if (root / rel).is_file()]
    marks = tuple(f"class {c}" for c in _CLASSES)
    for p in sorted((root / "entrypoints").rglob("*.py")):
        if p in found or "__pycache__" in p.parts:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if any(m in text for m in marks):
            found.append(p)
    return found


def _read_source(vdir: str) -> FlagTable:
    kinds: dict[str, str] = {}
    aliases: dict[str, str] = {}
    trees = []
    for p in _parser_files(vdir):
        try:
            trees.append(ast.parse(p.read_text(encoding="utf-8")))
        except (OSError, SyntaxError, ValueError):
            continue
    if not trees:
        return BUILTIN
    fields: dict[str, bool] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in _CLASSES:
                for st in node.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        ann = ast.unparse(st.annotation).replace(" ", "")
                        is_bool = ann in ("bool", "bool|None", "Optional[bool]", "None|bool")
                        fields[st.target.id] = is_bool
                        if not st.target.id.startswith("_"):
                            kinds[st.target.id.replace("_", "-")] = BOOL if is_bool else STR
    for tree in trees:
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                continue
            opts = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
            ]
            longs = [o[2:] for o in opts if o.startswith("--")]
            if not longs:
                continue
            kind = STR
            if any(_is_switch(kw, fields) for kw in node.keywords):
                kind = BOOL
            for lo in longs:
                kinds[lo] = kind
            for o in opts:
                if o.startswith("-") and not o.startswith("--"):
                    aliases[o[1:]] = longs[0]
                elif o.startswith("--") and o[2:] != longs[0]:
                    aliases.setdefault(o[2:], longs[0])
    if not kinds:
        return BUILTIN
    return FlagTable(installed=kinds, aliases=aliases, source=f"{vdir} (ast)")
