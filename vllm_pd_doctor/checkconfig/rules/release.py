"""What the installed release itself says: #53514 exposure, advisories, flags it does not know."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_pd_doctor.checkconfig.rules.catalog import INFO, E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import Context, label
from vllm_pd_doctor.knowledge.facts import advisories as advisory_facts
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.results.checkconfig import Finding, Verdict
from vllm_pd_doctor.results.launch import Server


@rule(
    id="n1-truncation",
    severity=E,
    title="Prefill EngineCore dies on `assert num_new_tokens > 0` (N-1 truncation after the "
    "prefix-cache lookup)",
    fix="upgrade vLLM to a release that truncates in on_new_request, or "
    "--no-enable-prefix-caching on the prefill side",
    refs=("vllm#53514", "vllm PR #53523", "vllm PR #53663"),
)
def n1_truncation(ctx: Context) -> Iterator[Finding]:
    e = ctx.exposure
    if e is None or e.verdict is not Verdict.exposed:
        return
    ev = "; ".join(
        f"{x.server or x.role}/{x.connector}: " + ", ".join(x.evidence or x.reasons)
        for x in e.sides
        if x.verdict is Verdict.exposed
    )
    yield finding("n1-truncation", ev or (e.probe.detail if e.probe else ""), fix="; ".join(e.fixes) or None)


@rule(
    id="n1-truncation-unknown",
    severity=W,
    title="Exposure to vLLM #53514 could not be decided",
    fix="give the missing input (model dir, vLLM interpreter) or run with --probe",
    refs=("vllm#53514",),
)
def n1_unknown(ctx: Context) -> Iterator[Finding]:
    e = ctx.exposure
    if e is None or e.verdict is not Verdict.unknown or not ctx.servers:
        return
    parts: list[str] = []
    fixes: list[str] = []
    for x in e.sides:
        if x.verdict is not Verdict.unknown:
            continue
        missing = [r for r in x.why if r.kind.unknown]
        parts.append(f"{x.server or x.role}/{x.connector}: " + ", ".join(r.text for r in missing))
        fixes.extend(r.fix for r in missing if r.fix and r.fix not in fixes)
    yield finding(
        "n1-truncation-unknown",
        "; ".join(parts),
        fix="; ".join(fixes) + "; or run with --probe" if fixes else None,
    )


@rule(
    id="vllm-advisory",
    severity=W,
    title="Installed vLLM has advisories that kill the engine on P/D traffic",
    fix=advisory_facts.upgrade_advice(),
    refs=tuple(a.id for a in advisory_facts.ADVISORIES),
)
def advisories(ctx: Context) -> Iterator[Finding]:
    if ctx.vllm is None:
        return
    v = connectors.release_version(ctx.vllm.version)
    if v is None:
        return
    hits = [f"{a.id} ({a.what})" for a in advisory_facts.ADVISORIES if a.affects(v)]
    if hits and (not ctx.servers or any(s.config.kv_connector for s in ctx.servers)):
        yield finding("vllm-advisory", f"vLLM {ctx.vllm.version}: " + "; ".join(hits))


@rule(
    id="unknown-flag",
    severity=INFO,
    title="Flag of no vLLM release pd-doctor knows (passed through unchecked)",
    fix="check the spelling against `vllm serve --help`",
)
def unknown_flags(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        if not s.config.unknown_flags:
            continue
        if not s.config.flags_release:
            yield finding("unknown-flag", f"{label(s)}: {', '.join(s.config.unknown_flags)}")
        elif _own_parser(s):
            yield finding(
                "unknown-flag",
                f"{label(s)}: {', '.join(s.config.unknown_flags)}: not a flag of vLLM "
                f"{s.config.flags_release}; {_own_parser(s)} adds flags of its own to vLLM's",
            )


_LAUNCHERS_WITH_OWN_FLAGS = ("dynamo.vllm",)
"""Launchers whose parser extends vLLM's with flags pd-doctor does not enumerate (their known ones
are taken off before vLLM's are read: `deployment.parse.dynamo`)."""


def _own_parser(s: Server) -> str | None:
    return next((x for x in _LAUNCHERS_WITH_OWN_FLAGS if x in (s.launcher or "")), None)


@rule(
    id="flag-not-in-release",
    severity=E,
    title="Not a flag of the vLLM release checked: the engine exits with `unrecognized arguments`",
    fix="drop or rename the flag (`vllm serve --help` of that release), or check against the release "
    "the deployment runs (--vllm X / --python)",
)
def flag_not_in_release(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        rel = s.config.flags_release
        if s.config.unknown_flags and rel and not _own_parser(s):
            yield finding(
                "flag-not-in-release",
                f"{label(s)}: {', '.join(s.config.unknown_flags)}: not a flag of vLLM {rel}: the engine "
                "exits with `vllm serve: error: unrecognized arguments`",
            )


@rule(
    id="image-release-mismatch",
    severity=W,
    title="Container image tags name another vLLM release than the one checked (or P and D differ)",
    fix="check with --vllm X for the release the images run (or --python of that environment); "
    "run P and D on the same vLLM release",
    refs=("vllm docs nixl_connector_compatibility",),
)
def image_release_mismatch(ctx: Context) -> Iterator[Finding]:
    from vllm_pd_doctor.knowledge.readers import image_release

    named = image_release.vllm_versions(ctx.servers)
    if len(named) > 1:
        said = "; ".join(f"{', '.join(names)}: {v}" for v, names in sorted(named.items()))
        yield finding(
            "image-release-mismatch",
            f"the images run different vLLM releases ({said}); "
            "NIXL's handshake expects the same release on both sides",
        )
    v = ctx.vllm
    if v is None or v.path is None or not v.version:
        return
    checked = _base(v.version)
    for version, names in sorted(named.items()):
        if _base(version) != checked:
            images = ", ".join(r.image for r in image_release.releases(ctx.servers) if r.server in names)
            yield finding(
                "image-release-mismatch",
                f"{', '.join(names)}: image {images} names vLLM {version}, but the vLLM checked "
                f"({v.python}) is {v.version}: the source-based verdicts describe {v.version}",
            )


def _base(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).base_version
    except InvalidVersion:
        return version
