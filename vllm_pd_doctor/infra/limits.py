"""Input limits: bounded reads of user files, finite numbers, YAML with bounded aliases.

Every refusal is a `BadInput` (exit 2) naming the input and what is wrong with it, so hostile or
odd input (a device, a FIFO, a 10 GB log, a billion-laughs YAML, `--timeout nan`) is answered in
well under a second with one clear line.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # yaml is imported where used: `import vllm_pd_doctor.cli` stays light
    import yaml

from vllm_pd_doctor.infra.errors import BadInput

MAX_CONFIG_BYTES = 5 * 1024 * 1024
"""Largest launch config / model config.json read (a real one is a few kB)."""
MAX_LOG_BYTES = 256 * 1024 * 1024
"""Largest log read for a report (the bundle keeps a capped part of it)."""
ANY_SIZE = 1 << 62
"""For check_input_file: no size limit (the reader itself reads a bounded part, e.g. logs)."""
MAX_YAML_ALIASES = 1000
"""Alias uses allowed in one YAML stream (a launch config uses a handful, if any)."""
MAX_YAML_NODES = 200_000
"""Nodes allowed in one YAML stream after alias expansion."""

_KIND = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _what_it_is(mode: int) -> str:
    for test, name in _KIND:
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(
    path: str | os.PathLike[str],
    max_bytes: int,
    what: str,
    *,
    truncate: bool = False,
    size_limit: int | None = None,
) -> tuple[bytes, int]:
    """Read a regular file, at most `max_bytes` of it; return (data, size on disk).

    Devices, FIFOs, sockets and directories are refused without blocking (the file is opened
    with O_NONBLOCK and checked with fstat before any read); a missing or unreadable file is
    refused too. Files larger than `max_bytes` (or `size_limit`, when only checking with
    max_bytes=0) are refused, or cut at `max_bytes` with `truncate=True`. Every
    refusal is a BadInput naming `what` (e.g. "--log app.log").
    """
    fd = _open_nonblocking(os.fspath(path), what)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(
                f"{what}: is {_what_it_is(st.st_mode)}, not a regular file",
                hint="give a file saved on disk (copy a stream to a file first)",
            )
        cap = max(max_bytes, size_limit or 0)
        if st.st_size > cap and not truncate:
            raise BadInput(
                f"{what}: {st.st_size / 1e6:.1f} MB is more than the {cap / 1e6:.0f} MB pd-doctor reads",
                hint="cut the file down to the part that matters",
            )
        os.set_blocking(fd, True)
        return _read_at_most(fd, max_bytes, what), st.st_size
    finally:
        os.close(fd)


def _open_nonblocking(p: str, what: str) -> int:
    """The file opened read-only without blocking (a FIFO or a device cannot hang the open); a
    BadInput naming `what` for one that cannot be opened."""
    try:
        return os.open(
            p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        )
    except FileNotFoundError:
        raise BadInput(f"{what}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{what}: is a directory, not a file") from None
    except PermissionError:
        raise BadInput(f"{what}: permission denied (not readable)") from None
    except OSError as exc:  # e.g. ENXIO for a socket: say what it is
        try:
            mode = os.stat(p).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise BadInput(
                f"{what}: is {_what_it_is(mode)}, not a regular file",
                hint="give a file saved on disk (copy a stream to a file first)",
            ) from None
        raise BadInput(f"{what}: cannot be opened ({exc.strerror or exc})") from None


def _read_at_most(fd: int, max_bytes: int, what: str) -> bytes:
    chunks: list[bytes] = []
    left = max_bytes
    while left > 0:
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except OSError as exc:
            if exc.errno == errno.EISDIR:
                raise BadInput(f"{what}: is a directory, not a file") from None
            raise BadInput(f"{what}: cannot be read ({exc.strerror or exc})") from None
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_text_bounded(path: str | os.PathLike[str], max_bytes: int, what: str) -> str:
    """A bounded read decoded as UTF-8 (a BOM allowed); other encodings are bad input."""
    data, _size = read_bounded(path, max_bytes, what)
    return decode_utf8(data, what)


def decode_utf8(data: bytes, what: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) > 1 and b"\x00" in data[:64]):
        raise BadInput(
            f"{what}: binary or UTF-16 file, neither text nor YAML/JSON in UTF-8",
            hint="save it as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8`)",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{what}: is not UTF-8 text (byte {exc.start})", hint="save it as UTF-8") from None


def finite(value: float, name: str, lo: float | None = None, hi: float | None = None) -> float:
    """`value` if it is a finite number within [lo, hi]; BadInput otherwise."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{name} {value!r}: not a number") from None
    if math.isnan(f) or math.isinf(f):
        raise BadInput(f"{name} {value}: must be a finite number")
    if lo is not None and f < lo:
        raise BadInput(f"{name} {value}: must be at least {lo:g}")
    if hi is not None and f > hi:
        raise BadInput(f"{name} {value}: must be at most {hi:g}")
    return value


def positive_seconds(name: str, hi: float = 7 * 86400.0) -> Callable[[float], float]:
    """A typer option callback: a finite number of seconds > 0 and at most `hi`."""
    import typer

    def check(value: float) -> float:
        if value is None:
            return value
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise typer.BadParameter(f"{value}: must be a finite number of seconds")
        if value <= 0:
            raise typer.BadParameter(f"{value}: must be a positive number of seconds")
        if value > hi:
            raise typer.BadParameter(f"{value}: must be at most {hi:g} seconds")
        return value

    check.__name__ = f"check_{name.strip('-').replace('-', '_')}"
    return check


# --- YAML with bounded alias expansion ----------------------------------------------------------


@functools.cache
def _bounded_loader() -> type[Any]:
    """The SafeLoader subclass below (built on first use: yaml is imported lazily)."""
    import yaml

    class _BoundedLoader(yaml.SafeLoader):
        """A SafeLoader that counts alias uses and constructed nodes (billion laughs is refused)."""

        max_aliases = MAX_YAML_ALIASES
        max_nodes = MAX_YAML_NODES
        label = "YAML"

        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self._aliases = 0
            self._nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self._aliases += 1
                if self._aliases > self.max_aliases:
                    raise BadInput(
                        f"{self.label}: more than {self.max_aliases} YAML aliases",
                        hint="write the values out; a launch config needs few aliases",
                    )
            return super().compose_node(parent, index)

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            self._nodes += 1
            if self._nodes > self.max_nodes:
                raise BadInput(
                    f"{self.label}: more than {self.max_nodes} YAML nodes once aliases are expanded",
                    hint="is this a launch config? (alias bomb)",
                )
            return super().construct_object(node, deep=deep)

    return _BoundedLoader


def _expanded_size(node: yaml.Node, limit: int, memo: dict[int, int]) -> int:
    """Number of nodes `node` expands to (aliases counted again at each use), capped."""
    import yaml

    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a cycle counts as too big
    n = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            n += _expanded_size(child, limit, memo)
            if n > limit:
                break
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            n += _expanded_size(k, limit, memo) + _expanded_size(v, limit, memo)
            if n > limit:
                break
    memo[key] = min(n, limit + 1)
    return memo[key]


def load_yaml_documents(
    text: str,
    label: str,
    *,
    max_bytes: int = MAX_CONFIG_BYTES,
    max_aliases: int = MAX_YAML_ALIASES,
    max_nodes: int = MAX_YAML_NODES,
) -> list[Any]:
    """All documents of a YAML stream, safely: size, alias uses and expanded nodes bounded.

    The expanded size is computed on the composed graph (shared nodes counted once per use,
    memoised), before anything is constructed, so a billion-laughs document is refused in
    milliseconds. Syntax errors are BadInput with the line number.
    """
    if len(text) > max_bytes:
        raise BadInput(f"{label}: {len(text) / 1e6:.1f} MB of YAML is more than {max_bytes / 1e6:.0f} MB")
    import yaml

    loader = type(
        "Loader", (_bounded_loader(),), {"max_aliases": max_aliases, "max_nodes": max_nodes, "label": label}
    )(text)
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            if _expanded_size(node, max_nodes, {}) > max_nodes:
                raise BadInput(
                    f"{label}: more than {max_nodes} YAML nodes once aliases are expanded",
                    hint="is this a launch config? (alias bomb)",
                )
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"{label}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise BadInput(f"{label}: YAML nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits, a date out of range
        raise BadInput(f"{label}: a value YAML cannot convert ({str(exc).split(';')[0][:120]})") from None
    finally:
        loader.dispose()
    return docs


def check_yaml_bounds(
    text: str, label: str, *, max_aliases: int = MAX_YAML_ALIASES, max_nodes: int = MAX_YAML_NODES
) -> None:
    """Refuse an alias bomb before a YAML parser that has no bounds sees the text; syntax
    errors are left to that parser (the text may be a plain-text config, not YAML)."""
    if "*" not in text:
        return  # no alias use, nothing can expand
    try:
        load_yaml_documents(
            text, label, max_bytes=len(text) + 1, max_aliases=max_aliases, max_nodes=max_nodes
        )
    except BadInput as exc:
        if "YAML aliases" in exc.message or "YAML nodes" in exc.message or "nested too deeply" in exc.message:
            raise


def check_input_file(
    path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None, yaml_text: bool = False
) -> None:
    """Check a user's input file before anything reads it: it exists, is a regular file
    (not a device, FIFO, socket or directory), is not larger than `max_bytes`; with
    `yaml_text`, it is UTF-8 and no YAML alias bomb. BadInput (exit 2) otherwise."""
    limit = max_bytes if max_bytes is not None else MAX_LOG_BYTES
    data, _size = read_bounded(path, limit if yaml_text else 0, what, size_limit=limit)
    if yaml_text:
        check_yaml_bounds(decode_utf8(data, what), what)


def load_yaml(text: str, label: str, **kwargs: Any) -> Any:
    """The first document of a YAML stream (None when empty), with the same bounds."""
    docs = load_yaml_documents(text, label, **kwargs)
    return docs[0] if docs else None


def read_config_text(path: Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """A small text config (launch config, config.json): bounded, UTF-8, else BadInput."""
    return read_text_bounded(path, max_bytes, what)
