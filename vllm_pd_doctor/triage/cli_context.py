"""What the command line adds to the logs: release (--python), model (--model), connector
(--config / --prefill-cmd); and the catalogue as text (`--list`)."""

from __future__ import annotations

from pathlib import Path

from vllm_pd_doctor.results.launch import Server
from vllm_pd_doctor.results.triage import ClassInfo, FailureCatalogue
from vllm_pd_doctor.triage.decide import Context
from vllm_pd_doctor.triage.entries import CLASSES


def build_context(
    *,
    python: str | None,
    model: Path | None,
    config: Path | None,
    prefill_cmd: str | None,
    decode_cmd: str | None,
) -> Context:
    """Read what was given; nothing given: an empty context (the logs alone decide)."""
    from vllm_pd_doctor.deployment import reader
    from vllm_pd_doctor.deployment.model import resolve_model

    connector: str | None = None
    servers: tuple[Server, ...] = ()
    if config is not None or prefill_cmd is not None or decode_cmd is not None:
        if config is not None:
            reader.check_config_file(config)
        servers, _ = reader.gather_servers(prefill_cmd, decode_cmd, config, python=python)
        connector = reader.prefill_connector(servers)
    minfo = None
    if model is not None or servers:  # --model as check-config takes it (dir, config.json, HF id)
        minfo, _, _problem = resolve_model(model, servers)
    release = None
    if python is not None:
        from vllm_pd_doctor.triage import release_from_python

        release = release_from_python(python)
    return Context(release=release, model=minfo, connector=connector)


def catalogue() -> FailureCatalogue:
    """The catalogue as a result (`--list`, printed through formats/ like every result)."""
    return FailureCatalogue(
        tuple(ClassInfo(c.id, c.title, c.side, c.fix, c.references, c.next) for c in CLASSES)
    )
