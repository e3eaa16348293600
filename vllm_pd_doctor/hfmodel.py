"""Resolve a model argument the way a user gives it: a directory, a config.json, or a Hugging Face id.

Shared by `repro --model` and `check-config` (tool process; no vLLM import). Hugging Face ids are
resolved offline, from the local Hugging Face cache only (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`), through `huggingface_hub`'s own cache lookup: pd-doctor never downloads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.errors import BadInput

_HF_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's config.json was found."""

    given: str
    """The model argument as the user gave it."""
    config_path: Path
    """The config.json file."""
    source: str
    """'directory', 'file' or 'hf-cache' (offline Hugging Face cache)."""
    hf_id: str | None = None

    @property
    def directory(self) -> Path:
        return self.config_path.parent


class ModelNotResolved(BadInput):
    """The model argument names nothing readable here; `hint` says where to put config.json."""


def looks_like_hf_id(name: str) -> bool:
    """`org/name` with no path that exists locally."""
    return bool(_HF_ID_RE.match(name)) and not Path(name).expanduser().exists()


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _from_hf_cache(hf_id: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache  # lazy: ~0.3 s, only for ids

    found = try_to_load_from_cache(hf_id, "config.json", cache_dir=str(hf_cache_dir()))
    return Path(found) if isinstance(found, str) and os.path.isfile(found) else None


def resolve(name: str, *, what: str = "--model") -> ResolvedModel:
    """A directory holding config.json, a config.json file, or an HF id in the local HF cache."""
    raw = name.strip()
    if not raw:
        raise ModelNotResolved(
            f"{what}: empty model name", hint="give a directory, a config.json or a Hugging Face model id"
        )
    p = Path(raw).expanduser()
    if p.is_dir():
        cfg = p / "config.json"
        if cfg.is_file():
            return ResolvedModel(raw, cfg, "directory")
        raise ModelNotResolved(
            f"{what} {raw}: no config.json in that directory",
            hint="point at the model directory that holds config.json",
        )
    if p.is_file():
        return ResolvedModel(raw, p, "file")
    if looks_like_hf_id(raw):
        found = _from_hf_cache(raw)
        if found is not None:
            return ResolvedModel(raw, found, "hf-cache", hf_id=raw)
        target = hf_cache_dir() / ("models--" + raw.replace("/", "--"))
        raise ModelNotResolved(
            f"{what} {raw}: not in the local Hugging Face cache ({hf_cache_dir()})",
            hint=f"run `huggingface-cli download {raw} config.json` where the hub is reachable, or "
            f"save its config.json into a directory and pass --model DIR "
            f"(pd-doctor looks under {target}, offline)",
        )
    raise ModelNotResolved(
        f"{what} {raw}: no such file or directory",
        hint="give a directory with config.json, a config.json, or a Hugging "
        "Face model id present in the local HF cache",
    )
