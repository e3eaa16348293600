"""The one `--model` adapter of the commands that read a deployment: --model through the one
resolver (`knowledge.models.resolve`), else the first server model found offline, as the typed
`ModelInfo` (or the `ModelProblem` that says why none)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.models import resolve as models
from vllm_pd_doctor.knowledge.models.info import load_model
from vllm_pd_doctor.results.checkconfig import ModelInfo, ModelProblem
from vllm_pd_doctor.results.launch import Server


def _quiet(_msg: str) -> None:
    """A warning nobody reads (triage and report: the logs decide without the model)."""


def resolve_model(
    model: Path | None, servers: tuple[Server, ...] = (), warn: Callable[[str], None] = _quiet
) -> tuple[ModelInfo | None, str | None, ModelProblem | None]:
    """--model, else the first server model found offline (dir, config.json, HF cache)."""
    if model is not None:
        found = models.resolve(str(model), what="--model")
        info = replace(load_model(found.config_path), resolved_from=found.described)
        return info, "--model" + (f" ({found.described})" if found.hf_id else ""), None
    problem: ModelProblem | None = None
    seen: set[str] = set()
    for s in servers:
        name = s.config.model
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            found = models.resolve(name, what=f"{s.name} model", bundled=False)
            info = replace(
                load_model(found.config_path, what=f"{s.name} model"), resolved_from=found.described
            )
            return info, f"{s.name} command" + (f" ({found.described})" if found.hf_id else ""), None
        except models.ModelNotResolved as exc:
            hint = exc.hint or ""
            if "--model" not in hint:
                hint = (hint + "; " if hint else "") + (
                    "or pass --model DIR holding a copy of its config.json"
                )
            problem = problem or ModelProblem(given=name, message=exc.message, hint=hint)
        except BadInput as exc:
            warn(f"{s.name} model {name}: {exc.message}; hybrid or not is unknown")
            problem = problem or ModelProblem(
                given=name, message=exc.message, hint=exc.hint or "pass --model DIR"
            )
    return None, None, problem


__all__ = ["resolve_model"]
