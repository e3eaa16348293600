"""`pd-doctor hotfix` (`hotfix.Status`, `hotfix.Change`) in every format."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from vllm_pd_doctor.results import hotfix
from vllm_pd_doctor.results.base import SCHEMA_VERSION

# --- plain text shared by the table and Markdown


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
        else f"no: {hotfix.ENV} does not name {hotfix.ISSUE} here; start the prefill engine with "
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
    rows.extend(fix_row(f) for f in st.fixes)
    if st.available:
        rows.append(("fixes", available_text(st.available)))
    return rows


def fix_row(f: hotfix.FixState) -> tuple[str, str]:
    """One Scheduler fix: (`fix abort-race (not merged upstream)`, what it would do, enabled or not)."""
    where = f" {f.function} ({f.at})" if f.function else ""
    on = {True: f"; enabled ({hotfix.ENV} names it)", False: f"; not enabled ({hotfix.ENV}=...,{f.fix})"}
    status = "needed: would patch" if f.status == "patch" else f.status
    enabled = on[f.enabled] if f.enabled is not None else ""
    return (f"fix {f.title}", f"{status}{where}: {f.reason}{enabled}")


def available_text(available: tuple[str, ...]) -> str:
    """Which fixes PD_DOCTOR_HOTFIX can name."""
    return f"{', '.join(available)}: enable with {hotfix.ENV}=NAME[,NAME...] in the engine's environment"


def hotfix_change_text(c: hotfix.Change) -> str:
    """What `hotfix install` / `uninstall` wrote or removed, one path a line."""
    done = "installed" if c.action == "install" else "removed"
    where = "into" if c.action == "install" else "from"
    text = f"{done} {hotfix.DIST} {where} {c.site_packages}:\n" + "".join(f"  {f}\n" for f in c.files)
    if c.available:
        text += f"fixes: {available_text(c.available)}\n"
    return text


# --- table (rich, for people)


def hotfix_status_table(st: hotfix.Status) -> RenderableType:
    table = Table(title=f"pd-doctor hotfix #{hotfix.ISSUE}", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for k, v in hotfix_status_lines(st):
        table.add_row(k, v)
    return table


# --- JSON (documents with schema_version)


def hotfix_status_obj(st: hotfix.Status) -> dict[str, Any]:
    inst = st.installed
    return {
        "schema_version": SCHEMA_VERSION,
        "python": st.python,
        "site_packages": st.site_packages,
        "vllm_version": st.vllm_version,
        "installed": inst is not None,
        "dist_info": str(inst.dist_info) if inst else None,
        "current": inst.current if inst else None,
        "other_plugins": list(st.other_plugins),
        "enabled": st.enabled,
        "enable_with": hotfix.ENV_SETTING,
        "needed": st.needed,
        "plan_error": st.plan_error,
        "plan": [dataclasses.asdict(p) for p in st.plan],
        "fixes": [dataclasses.asdict(f) | {"applied": f.applied} for f in st.fixes],
        "available": list(st.available),
    }


def hotfix_change_obj(c: hotfix.Change) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "action": c.action,
        "distribution": hotfix.DIST,
        "python": c.python,
        "site_packages": c.site_packages,
        "files": list(c.files),
        "available": list(c.available),
    }


# --- Markdown


def hotfix_status_md(st: hotfix.Status) -> str:
    return "\n".join(f"- **{k}**: {v}" for k, v in hotfix_status_lines(st)) + "\n"


def hotfix_change_md(c: hotfix.Change) -> str:
    head = hotfix_change_text(c).splitlines()[0]
    tail = f"\nFixes: {available_text(c.available)}\n" if c.available else ""
    return head + "\n\n" + "".join(f"- `{f}`\n" for f in c.files) + tail
