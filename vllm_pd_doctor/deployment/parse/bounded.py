"""Reading untrusted input within bounds: a size cap, and YAML whose aliases cannot blow up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import limits
from vllm_pd_doctor.infra.errors import BadInput

MAX_BYTES = limits.MAX_CONFIG_BYTES
MAX_NODES = limits.MAX_YAML_NODES


def read_text(path: Path, label: str) -> str:
    """The file as UTF-8 text; devices, FIFOs, huge and binary files refused (exit 2)."""
    data, _size = limits.read_bounded(path, MAX_BYTES, label)
    if b"\x00" in data:
        raise BadInput(
            f"{label}: binary file, neither text nor YAML/JSON",
            hint="give a shell script, a text file with one launch command per role, "
            "or YAML/JSON (prefill:/decode: entries, Kubernetes manifests)",
        )
    return limits.decode_utf8(data, label)


def load_yaml_all(text: str, label: str) -> list[Any]:
    """All documents of a YAML stream (safe loader), bounded by pd-doctor's one YAML loader."""
    return limits.load_yaml_documents(text, label, max_bytes=MAX_BYTES, max_nodes=MAX_NODES)


def load_json(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{label}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg.lower()}"
        ) from None
    except RecursionError:
        raise BadInput(f"{label}: JSON nested too deeply") from None
