"""`pd-doctor envs` (`EnvListing`, `EnvChange`) in every format."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table

from vllm_pd_doctor.results.base import SCHEMA_VERSION
from vllm_pd_doctor.results.envs import EnvChange, EnvListing

# --- plain text shared by the table and Markdown


def env_change_text(c: EnvChange) -> str:
    """One line a path: the interpreter made ready (create) or `removed DIR` (rm)."""
    return "".join(f"{p}\n" if c.action == "create" else f"removed {p}\n" for p in c.paths)


# --- table (rich, for people)


def envs_table(e: EnvListing) -> RenderableType:
    table = Table(title=f"environments in {e.envs_dir}", title_justify="left")
    for col in ("name", "package", "version", "extras", "installed in", "python"):
        table.add_column(col)
    for m in e.envs:
        table.add_row(
            m.name,
            m.package,
            m.version,
            ",".join(m.extras) or "-",
            f"{m.install_s:.0f} s" if m.install_s else "?",
            str(m.python),
        )
    return table


# --- JSON (documents with schema_version)


def envs_obj(e: EnvListing) -> dict[str, Any]:
    """`pd-doctor envs list --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "home": str(e.home),
        "envs": [
            {
                "name": m.name,
                "package": m.package,
                "version": m.version,
                "python": str(m.python),
                "extras": list(m.extras),
                "install_s": m.install_s,
                "created": m.created,
            }
            for m in e.envs
        ],
    }


def env_change_obj(c: EnvChange) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "action": c.action, "paths": list(c.paths)}


# --- Markdown


def envs_md(e: EnvListing) -> str:
    rows = "".join(
        f"| {m.name} | {m.package} | {m.version} | {','.join(m.extras) or '-'} | "
        f"{f'{m.install_s:.0f} s' if m.install_s else '?'} | `{m.python}` |\n"
        for m in e.envs
    )
    return (
        f"## pd-doctor environments in `{e.envs_dir}`\n\n"
        "| name | package | version | extras | installed in | python |\n"
        "|---|---|---|---|---|---|\n" + rows
    )


def env_change_md(c: EnvChange) -> str:
    done = "ready" if c.action == "create" else "removed"
    return f"## pd-doctor environments {done}\n\n" + "".join(f"- `{p}`\n" for p in c.paths)
