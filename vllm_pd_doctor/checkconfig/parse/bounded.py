"""Reading untrusted input within bounds: a size cap, and YAML whose aliases cannot blow up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vllm_pd_doctor.errors import BadInput

MAX_BYTES = 5 * 1024 * 1024
MAX_NODES = 200_000
"""YAML nodes after alias expansion (a billion-laughs document has ~10^9)."""


def read_text(path: Path, label: str) -> str:
    if not path.exists():
        raise BadInput(f"{label}: no such file")
    if not path.is_file():
        raise BadInput(f"{label}: not a file")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise BadInput(f"{label}: {size} bytes, more than the {MAX_BYTES // (1024 * 1024)} "
                           "MB pd-doctor reads", hint="give the file with the launch commands "
                           "or the manifests of the vLLM servers only")
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise BadInput(f"{label}: cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in data:
        raise BadInput(f"{label}: binary file, neither text nor YAML/JSON",
                       hint="give a shell script, a text file with one launch command per role, "
                            "or YAML/JSON (prefill:/decode: entries, Kubernetes manifests)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{label}: not UTF-8 text (byte {exc.start}), neither text nor YAML/JSON"
                       ) from None


def _expanded_size(node: yaml.Node, memo: dict[int, int], depth: int = 0) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    if depth > 200:
        raise BadInput("YAML nested more than 200 levels deep")
    memo[key] = 1  # a recursive alias counts once while it is being sized
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            total += _expanded_size(child, memo, depth + 1)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1)
    memo[key] = total
    return total


def load_yaml_all(text: str, label: str) -> list[Any]:
    """All documents of a YAML stream (safe loader); aliases bounded by MAX_NODES."""
    loader = yaml.SafeLoader(text)
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            size = _expanded_size(node, {})
            if size > MAX_NODES:
                raise BadInput(f"{label}: YAML expands to more than {MAX_NODES} nodes through "
                               "its aliases (refused)", hint="write the values out instead of "
                               "nesting anchors and aliases")
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise BadInput(f"{label}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise BadInput(f"{label}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    return docs


def load_json(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{label}: malformed JSON at line {exc.lineno} column {exc.colno}: "
                       f"{exc.msg.lower()}") from None
    except RecursionError:
        raise BadInput(f"{label}: JSON nested too deeply") from None
