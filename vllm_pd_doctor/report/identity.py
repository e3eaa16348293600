"""Names a public bundle shows as written, and names it never shows, decided before any text is
made public.

- Model ids that are public: a Hugging Face id whose config.json sits in the Hub's own cache
  (downloaded from huggingface.co, not a mirror or a local path), or one of the model families
  pd-doctor bundles (assets/models/). A maintainer needs the model; a private repo or a local
  path stays a placeholder.
- File names: the logs' and the config's names are public text too (a host or a cluster can be
  named only there); each is rebuilt from known words (`public.public_file_name`) and every
  mention of it in the bundle's text is replaced by that form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from vllm_pd_doctor.knowledge.models import resolve as hfmodel
from vllm_pd_doctor.report.gather import Gathered, ReportInputs
from vllm_pd_doctor.report.public import Placeholders, SafeText, public_file_name

HUB = "https://huggingface.co"
_LOG_MODEL = re.compile(r"""\bmodel=['"]([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)['"]""")
"""`model='Qwen/Qwen3-0.6B'` in vLLM's "Initializing a V1 LLM engine ... with config:" line."""


def _families() -> frozenset[str]:
    try:
        from vllm_pd_doctor.repro.live.options import families

        return frozenset(families())
    except (OSError, ImportError):
        return frozenset()


def _on_hub_cache(model_id: str) -> bool:
    """config.json of `model_id` in the Hub cache, and that cache fed by huggingface.co itself."""
    if not hfmodel.looks_like_hf_id(model_id) or hfmodel.endpoint() != HUB:
        return False
    snapshots = hfmodel.hf_cache_dir() / ("models--" + model_id.replace("/", "--")) / "snapshots"
    try:
        return any((d / "config.json").is_file() for d in snapshots.iterdir())
    except OSError:
        return False


def candidates(g: Gathered) -> set[str]:
    """Model ids the deployment names: its launch commands, check-config's resolved model, the
    engine's own config line in the logs."""
    out = {s.config.model.rstrip("/") for s in g.servers if s.config.model}
    for _, got in g.logs:
        if got.ok:
            out.update(_LOG_MODEL.findall(str(got.value[0])[:2_000_000]))
    return out


def public_models(g: Gathered) -> frozenset[str]:
    """The ids among `candidates(g)` a public bundle keeps as written."""
    fams = _families()
    keep = set()
    for m in candidates(g):
        if m in fams or _on_hub_cache(m):
            keep.add(m)
    return frozenset(keep)


def file_names(inputs: ReportInputs, ph: Placeholders) -> dict[str, str]:
    """Each input file's name (the logs, the config) -> its public form."""
    paths: Iterable[Path] = [*inputs.logs, *([inputs.config] if inputs.config else [])]
    out: dict[str, str] = {}
    for p in paths:
        for name in (p.name, str(p)):
            out.setdefault(name, public_file_name(p.name, ph))
    return out


def prepare(safe: SafeText, inputs: ReportInputs, g: Gathered) -> None:
    """Tell the bundle's `SafeText` the public model ids and the input files' public names."""
    safe.keep = safe.keep | public_models(g)
    safe.rename = {**safe.rename, **file_names(inputs, safe.ph)}
