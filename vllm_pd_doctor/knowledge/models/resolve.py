"""The one model resolver: a directory, a config.json, a bundled family name, or a Hugging Face id.

Every command's `--model` goes through `resolve` (check-config, triage, report, and both repro
engines; tool process, no vLLM import). A bundled family name (`nemotron-h`, `jamba`, ...: the
directories of `assets/models/` with a config.json, `families()`) names pd-doctor's own config of
that family; a path that exists wins over it, and the models a launch command names are never
taken for one (`bundled=False`). A Hugging Face id
is resolved as vLLM itself would fetch it, through `huggingface_hub` (imported only then), and
only `config.json` (a few KB): first the local Hugging Face cache (`HF_HUB_CACHE`, else
`HF_HOME/hub`, else `~/.cache/huggingface/hub`), then `hf_hub_download` from `HF_ENDPOINT`
(default huggingface.co) with the user's token (`HF_TOKEN` or the saved login), stored in that
same cache. `HF_HUB_OFFLINE=1` means the local cache only. `ResolvedModel.source` says which.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun

_HF_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's config.json was found."""

    given: str
    """The model argument as the user gave it."""
    config_path: Path
    """The config.json file."""
    source: str
    """'directory', 'file', 'family' (bundled under assets/models/), 'hf-cache' (the local Hugging
    Face cache) or 'hub' (downloaded)."""
    hf_id: str | None = None
    endpoint: str | None = None
    """For 'hub': the endpoint it came from."""

    @property
    def described(self) -> str:
        """Where config.json came from, for the report."""
        if self.source == "hub":
            return f"downloaded from {self.endpoint} (huggingface_hub)"
        if self.source == "hf-cache":
            return "local HF cache" + (" (HF_HUB_OFFLINE)" if offline() else "")
        if self.source == "family":
            return f"bundled family {self.given}"
        return self.source

    @property
    def directory(self) -> Path:
        return self.config_path.parent


class ModelNotResolved(BadInput):
    """The model argument names nothing readable here; `hint` says where to put config.json."""


def assets_dir() -> Path:
    """pd-doctor's repro assets (models, scripts): installed beside the package, or at the
    repository's top level."""
    here = Path(__file__).resolve().parents[2]
    for cand in (here / "_assets", here.parent / "assets"):
        if cand.is_dir():
            return cand
    raise CouldNotRun(
        "pd-doctor's repro assets are missing (assets/ or vllm_pd_doctor/_assets/)",
        hint="reinstall pd-doctor",
    )


def families() -> tuple[str, ...]:
    """The family configs bundled under assets/models/ (the names `--model` takes)."""
    root = assets_dir() / "models"
    return tuple(sorted(d.name for d in root.iterdir() if (d / "config.json").is_file()))


def _family(name: str) -> Path | None:
    """assets/models/NAME/config.json for a bare name (no path separator), if bundled."""
    if "/" in name or "\\" in name or name in (".", "..") or Path(name).name != name:
        return None
    cfg = assets_dir() / "models" / name / "config.json"
    return cfg if cfg.is_file() else None


def looks_like_hf_id(name: str) -> bool:
    """`org/name` with no path that exists locally."""
    return bool(_HF_ID_RE.match(name)) and not Path(name).expanduser().exists()


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set to a true value, read now (not at import)."""
    v = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return v.strip().upper() in ("1", "ON", "YES", "TRUE")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _from_hf_cache(hf_id: str) -> Path | None:
    if not (hf_cache_dir() / ("models--" + hf_id.replace("/", "--"))).is_dir():
        return None  # the Hub cache's own layout: no folder, no cached file (and no 0.3-1 s import)
    from huggingface_hub import try_to_load_from_cache  # lazy: ~0.3 s, only for cached ids

    found = try_to_load_from_cache(hf_id, "config.json", cache_dir=str(hf_cache_dir()))
    return Path(found) if isinstance(found, str) and os.path.isfile(found) else None


def _download(hf_id: str, what: str) -> Path:
    """config.json through hf_hub_download (its cache, token and timeouts); one clear error."""
    import huggingface_hub as hub
    from huggingface_hub import errors as hub_errors

    url = endpoint()
    try:
        # one HEAD without retries first: hf_hub_download retries an unreachable hub with
        # backoff for ~20 s, too long for a check that works without the model too
        hub.get_hf_file_metadata(hub.hf_hub_url(hf_id, "config.json", endpoint=url), timeout=10)
        got = hub.hf_hub_download(
            hf_id, "config.json", cache_dir=str(hf_cache_dir()), endpoint=url, etag_timeout=10
        )
    except hub_errors.GatedRepoError:
        raise ModelNotResolved(
            f"{what} {hf_id}: gated on {url}; config.json needs an accepted licence and a token",
            hint="accept the model's terms on the Hub and set HF_TOKEN (or `hf auth login`), "
            "or pass --model DIR holding its config.json",
        ) from None
    except hub_errors.RepositoryNotFoundError:
        raise ModelNotResolved(
            f"{what} {hf_id}: no such model on {url} (or it is private)",
            hint="check the id; for a private model set HF_TOKEN; or pass --model DIR",
        ) from None
    except hub_errors.EntryNotFoundError:
        raise ModelNotResolved(
            f"{what} {hf_id}: the repository on {url} has no config.json",
            hint="pass --model DIR holding the model's config.json",
        ) from None
    except Exception as exc:  # the HTTP layer's errors (httpx) are not OSError
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelNotResolved(
            f"{what} {hf_id}: config.json could not be fetched from {url} ({first})",
            hint=f"run where {url} is reachable (HF_ENDPOINT for a mirror), or `hf download {hf_id} "
            "config.json` there and set HF_HUB_OFFLINE=1 to use the local cache only, or pass --model DIR",
        ) from None
    return Path(got)


def resolve(name: str, *, what: str = "--model", bundled: bool = True) -> ResolvedModel:
    """A directory holding config.json, a config.json file, a bundled family name (with
    `bundled`), or a Hugging Face id (the local HF cache, else the Hub)."""
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
    family = _family(raw) if bundled else None
    if family is not None:
        return ResolvedModel(raw, family, "family")
    if looks_like_hf_id(raw):
        found = _from_hf_cache(raw)
        if found is not None:
            return ResolvedModel(raw, found, "hf-cache", hf_id=raw)
        if not offline():
            return ResolvedModel(raw, _download(raw, what), "hub", hf_id=raw, endpoint=endpoint())
        target = hf_cache_dir() / ("models--" + raw.replace("/", "--"))
        raise ModelNotResolved(
            f"{what} {raw}: not in the local Hugging Face cache ({hf_cache_dir()}; HF_HUB_OFFLINE is set)",
            hint=f"unset HF_HUB_OFFLINE where the hub is reachable, or run `hf download {raw} "
            f"config.json` there, or save its config.json into a directory and pass --model DIR "
            f"(pd-doctor looks under {target})",
        )
    known = f", a bundled family ({', '.join(families())})" if bundled else ""
    raise ModelNotResolved(
        f"{what} {raw}: no such file or directory",
        hint=f"give a directory with config.json, a config.json{known}, or a Hugging Face model id",
    )
