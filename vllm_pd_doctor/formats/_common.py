"""What every format module shares: rich rendering to a string, the JSON writer, Markdown
table cells, vLLM locations shortened."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported where a table is rendered (a JSON run never loads it)
    from rich.console import RenderableType

CONNECTOR_PREFIX = "vllm/distributed/kv_transfer/kv_connector/v1/"


def short_location(location: str) -> str:
    """`vllm/distributed/kv_transfer/kv_connector/v1/nixl/x.py:9` -> `nixl/x.py:9` (table only)."""
    return location[len(CONNECTOR_PREFIX) :] if location.startswith(CONNECTOR_PREFIX) else location


def render(renderable: RenderableType, *, width: int = 110, color: bool = False) -> str:
    """Render to a string (formatters are pure functions returning text)."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=False,
        markup=False,
    )
    console.print(renderable)
    return buf.getvalue()


def yes_no(v: bool | None) -> str:
    return "?" if v is None else ("yes" if v else "no")


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"


def md_cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def md_cell_br(v: object) -> str:
    """A table cell whose line breaks stay visible."""
    return str(v).replace("|", "\\|").replace("\n", "<br>")
