"""Pure functions from model types to text: one format per module, chosen by `OutputFormat`."""

from __future__ import annotations

from enum import Enum


class OutputFormat(str, Enum):
    """Values of every command's --format option."""

    table = "table"
    json = "json"
    markdown = "markdown"
