"""Placeholder: this subcommand is being built in its own issue."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this subcommand to the app (nothing yet)."""
