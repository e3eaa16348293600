"""Plain-text pieces shared by the table and Markdown formats (no rich, no escaping)."""

from __future__ import annotations

from vllm_pd_doctor import hotfix
from vllm_pd_doctor.checkconfig.types import CheckReport
from vllm_pd_doctor.matrix import (
    FIRED,
    NOT_FIRED,
    NOT_PRESENT,
    NOT_PROVISIONED,
    NOT_PUBLISHED,
    NOT_RUN,
    BisectReport,
    MatrixCell,
    ReleaseRow,
)
from vllm_pd_doctor.results import EnvChange, NotAffected, ReproReport

ROW_LABEL = {
    NOT_PUBLISHED: "not a published release",
    NOT_PROVISIONED: "could not provision",
    NOT_RUN: "could not run",
}

CONNECTOR_PREFIX = "vllm/distributed/kv_transfer/kv_connector/v1/"


def short_location(location: str) -> str:
    """`vllm/distributed/kv_transfer/kv_connector/v1/nixl/x.py:9` -> `nixl/x.py:9` (table only)."""
    return location[len(CONNECTOR_PREFIX) :] if location.startswith(CONNECTOR_PREFIX) else location


def cell_text(c: MatrixCell | None, *, short: bool = False) -> str:
    """One line per matrix cell: `FIRED: get_num_new_matched_tokens @ file:line`."""
    if c is None or c.status == NOT_PRESENT:
        return "not present"
    if c.status in (FIRED, NOT_FIRED):
        head = "FIRED" if c.status == FIRED else "not fired"
        loc = c.call_site.location if c.call_site else ""
        where = f" @ {short_location(loc) if short else loc}" if loc else ""
        return f"{head}: {c.hook or 'none'}{where}"
    return f"not runnable: {c.reason or '?'}"


def row_reason(r: ReleaseRow) -> str:
    """Why a matrix row has no cells."""
    return f"{ROW_LABEL.get(r.status, r.status)}: {r.reason or '?'}"


def bisect_lines(b: BisectReport) -> list[str]:
    """The bisection, step by step, then its answer."""
    res = b.result
    lines = [
        f"bisect {b.package} on {b.connector} firing: good {b.good}, bad {b.bad}; "
        f"{len(res.candidates)} release(s) in range"
        + (" (only those with a cached environment are tested)" if b.only_cached else "")
    ]
    for s in res.steps:
        if s.verdict is None and s.row is not None and s.row.cached is False and b.only_cached:
            lines.append(f"  skipped {s.release}: {s.row.reason}")
            continue
        v = "could not test" if s.verdict is None else ("FIRED" if s.verdict else "not fired")
        why = f" ({s.row.reason})" if s.verdict is None and s.row and s.row.reason else ""
        lines.append(f"  tested {s.release}: {v}{why}")
    if res.endpoint_failed:
        lines.append(f"no answer: endpoint {res.endpoint_failed} could not be tested")
    elif res.same_verdict:
        lines.append(f"no change: {res.before} and {res.after} give the same verdict")
    else:
        for label, rel in (
            ("last with the old verdict", res.before),
            ("first with the new verdict", res.after),
        ):
            row = b.rows.get(rel or "")
            cell = row.cell(b.connector) if row else None
            lines.append(f"{label}: {rel}  {cell_text(cell)}")
        if res.untested_between:
            lines.append(
                "releases between them that were not tested: "
                + ", ".join(res.untested_between)
                + " (the change is in one of them or at "
                + f"{res.after})"
            )
    lines.append(f"environments created: {', '.join(b.provisioned) or 'none'}; wall {b.wall_s:.1f} s")
    return lines


def check_inputs_lines(r: CheckReport) -> list[str]:
    """What check-config read (and what it was not given)."""
    i = r.inputs
    lines = [
        f"prefill command: {i.prefill or 'not given'}",
        f"decode command: {i.decode or 'not given'}",
        f"model: {i.model + ' (' + str(i.model_source) + ')' if i.model else 'not given'}"
        + (f", hybrid: {'yes' if r.model.hybrid else 'no'}" if r.model else ""),
        f"vLLM: {_vllm_line(r)} ({i.python})",
    ]
    if r.nixl is not None:
        d = ", ".join(f"{n}=={v}" for n, v in r.nixl.dists) or "none"
        lines.append(f"NIXL: {d}")
    lines.append(f"probe: {'run' if i.probe else 'not run (--probe)'}")
    return lines


def _vllm_line(r: CheckReport) -> str:
    if r.vllm is None or r.vllm.path is None:
        return "not found"
    return f"{r.vllm.version or '?'} at {r.vllm.path}"


def not_affected_line(report: ReproReport, na: NotAffected) -> str:
    """One line: why #53514 cannot happen with this model, with vLLM's own evidence."""
    return (
        f"not affected: {na.reason} (vLLM {report.vllm.version}: "
        f"{na.architecture} -> {na.model_class}, is_hybrid={na.is_hybrid}, "
        f"is_attention_free={na.is_attention_free}, Mamba state classmethods="
        f"{na.has_mamba_state_classmethods})"
    )


def hotfix_status_lines(st: hotfix.Status) -> list[tuple[str, str]]:
    """`hotfix status` as (what, state) rows: installed, enabled, needed, then the plan."""
    inst = st.installed
    if inst is not None:
        installed = f"yes: {hotfix.DIST} {inst.version} ({inst.dist_info})" + (
            "" if inst.current else "; OUTDATED, reinstall with pd-doctor hotfix install"
        )
    elif st.other_plugins:
        installed = "through pd-doctor's own plugin: " + ", ".join(st.other_plugins)
    else:
        installed = f"no (pd-doctor hotfix install --python {st.python})"
    enabled = (
        f"yes: {hotfix.ENV_SETTING} is set here"
        if st.enabled
        else f"no: {hotfix.ENV} is not {hotfix.ISSUE} here; start the prefill engine with "
        f"{hotfix.ENV_SETTING} in its environment"
    )
    if st.needed is None:
        needed = f"unknown: {st.plan_error or 'no P/D connector found'}"
    elif st.needed:
        needed = "yes: this release truncates after the prefix-cache lookup"
    else:
        needed = "no: this release already truncates in on_new_request"
    rows = [
        ("vLLM", f"{st.vllm_version or '?'} ({st.python})"),
        ("installed", installed),
        ("enabled", enabled),
        ("needed", needed),
    ]
    for p in st.plan:
        where = p.late_call_at or p.early_call_at or ""
        helper = f" -> {p.scheduler_class}.{p.helper}" if p.helper else ""
        helper += f" ({p.helper_at})" if p.helper_at else ""
        rows.append(
            (
                f"{p.connector} {p.class_name}",
                f"{p.status}{helper}; {p.reason}{'; call at ' + where if where else ''}",
            )
        )
    return rows


def hotfix_change_text(c: hotfix.Change) -> str:
    """What `hotfix install` / `uninstall` wrote or removed, one path a line."""
    done = "installed" if c.action == "install" else "removed"
    where = "into" if c.action == "install" else "from"
    return f"{done} {hotfix.DIST} {where} {c.site_packages}:\n" + "".join(f"  {f}\n" for f in c.files)


def env_change_text(c: EnvChange) -> str:
    """One line a path: the interpreter made ready (create) or `removed DIR` (rm)."""
    return "".join(f"{p}\n" if c.action == "create" else f"removed {p}\n" for p in c.paths)
