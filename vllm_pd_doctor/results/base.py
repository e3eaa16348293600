"""The base of every result a command prints, and the version of every JSON document."""

from __future__ import annotations

SCHEMA_VERSION = 1
"""Version of every JSON document pd-doctor prints (`schema_version`)."""


class Result:
    """Base of every result a command prints (a frozen dataclass).

    `formats.emit` renders only these; `tests/test_formats.py` finds every subclass in the
    package and fails on one without a formatter in every format.
    """

    __slots__ = ()
