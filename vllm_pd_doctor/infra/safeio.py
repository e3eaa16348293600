"""Writing output files safely: never through a symlink, never over a file unasked, atomically.

Every output (a file, a zip, a directory tree) is first written under a temporary name in the
destination's own directory, created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, or mkdtemp), and
only then moved into place: with `os.link` when nothing may be replaced (fails if the name exists,
whatever it is), with `os.replace` when `force=True`. A destination that is a symlink is refused,
and so is a `<dest>.part` symlink planted next to it (the name other tools use for a temporary).
Temporary names are registered with `procs`, so a signal removes them.

Refusals are `BadInput` (exit 2); other OS errors propagate as `OSError`.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path, PurePosixPath

from vllm_pd_doctor.infra import procs, reaper
from vllm_pd_doctor.infra.errors import BadInput

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
FILE_MODE = 0o644
DIR_MODE = 0o755


def _umasked(mode: int) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


NAME_MAX = 255
PATH_MAX = 4096
_TEMP_EXTRA = len(".part-") + 8 + 13
"""The temporary name next to an output (`.NAME.part-XXXXXXXXXXXX`) is this much longer."""


def check_output_name(dest: Path) -> None:
    """Refuse an output name no file system takes, or that names no new entry: `-` (stdout),
    `.`, `..`, `/`, an empty name, a NUL, a name or path longer than the system allows."""
    raw = str(dest)
    if raw in ("-", ""):
        raise BadInput(
            f"output {raw!r}: pd-doctor writes a bundle to a file or a directory, not to stdout",
            hint="give a name such as report.zip or report-dir",
        )
    if dest.name in ("", ".", ".."):
        raise BadInput(
            f"output {raw!r}: names an existing directory, not a new file or directory",
            hint=f"give a new name inside it, e.g. {os.path.join(raw, 'report.zip')}",
        )
    if "\x00" in raw:
        raise BadInput("output name contains a NUL byte")
    if len(os.fsencode(dest.name)) + _TEMP_EXTRA > NAME_MAX:
        raise BadInput(
            f"output name is {len(os.fsencode(dest.name))} bytes long; at most "
            f"{NAME_MAX - _TEMP_EXTRA} bytes are allowed",
            hint="give a shorter name",
        )
    too_long = [p for p in dest.parts if len(os.fsencode(p)) > NAME_MAX]
    if too_long or len(os.fsencode(os.path.abspath(raw))) + _TEMP_EXTRA >= PATH_MAX:
        raise BadInput(
            f"output path is longer than the system allows ({NAME_MAX} bytes a name, "
            f"{PATH_MAX} bytes in all)",
            hint="give a shorter path",
        )


def _check_dest(dest: Path, *, force: bool, is_dir: bool = False) -> None:
    check_output_name(dest)
    part = dest.with_name(dest.name + ".part")
    if part.is_symlink():
        raise BadInput(
            f"{part}: is a symlink next to the output; refusing to write there",
            hint=f"remove {part} (someone may be redirecting pd-doctor's output)",
        )
    if dest.is_symlink():
        raise BadInput(
            f"{dest}: is a symlink; pd-doctor does not write through links",
            hint="give the real path, or remove the link",
        )
    if not dest.exists():
        return
    if is_dir:
        if not dest.is_dir():
            raise BadInput(f"{dest}: exists and is not a directory", hint="give a new directory")
        if any(dest.iterdir()):
            raise BadInput(f"{dest}: directory is not empty", hint="give a new or empty directory")
        return
    if dest.is_dir():
        raise BadInput(f"{dest}: is a directory", hint="give a new file name")
    if not force:
        raise BadInput(f"{dest}: exists", hint="give a new name, or pass --force to replace it")
    if not stat.S_ISREG(os.lstat(dest).st_mode):
        raise BadInput(f"{dest}: exists and is not a regular file; not replacing it")


def _parent(dest: Path) -> Path:
    parent = dest.parent
    if parent.is_symlink() and not parent.is_dir():
        raise BadInput(f"{parent}: is a dangling symlink")
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def _temp_file(dest: Path) -> tuple[int, Path]:
    """A new file next to `dest`, created exclusively, never through a link."""
    with suppress(OSError):  # what a SIGKILLed run left next to this output
        reaper.sweep(str(dest.parent), prefix=f".{dest.name}.part-")
    for _ in range(100):
        tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            fd = os.open(tmp, _FLAGS, 0o600)
        except FileExistsError:
            continue
        procs.register_tempdir(str(tmp))
        return fd, tmp
    raise BadInput(f"{dest}: cannot create a temporary file next to it")  # pragma: no cover


def _commit(tmp: Path, dest: Path, *, force: bool) -> None:
    """Move a finished temporary into place: link (no replace) or replace (force)."""
    if force:
        if dest.is_symlink():
            raise BadInput(f"{dest}: became a symlink while writing; not replacing it")
        os.replace(tmp, dest)
        return
    try:
        os.link(tmp, dest, follow_symlinks=False)
    except FileExistsError:
        raise BadInput(f"{dest}: exists", hint="give a new name, or pass --force to replace it") from None
    except OSError:  # a file system without hard links: rename (checked just before)
        if os.path.lexists(dest):
            raise BadInput(f"{dest}: exists") from None
        os.rename(tmp, dest)
        return
    os.unlink(tmp)


def write_file(
    dest: str | os.PathLike[str], data: bytes | str, *, force: bool = False, mode: int = FILE_MODE
) -> Path:
    """Write one file atomically (see the module docstring). Returns its path."""
    dest = Path(dest)
    _check_dest(dest, force=force)
    _parent(dest)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = _temp_file(dest)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _umasked(mode))  # our own new file, not a link
        _commit(tmp, dest, force=force)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        procs.unregister_tempdir(str(tmp))
    return dest


def entry_name(name: str) -> str:
    """A safe relative POSIX name for a zip entry / a file in a tree (BadInput otherwise)."""
    p = PurePosixPath(name)
    if (
        not name
        or p.is_absolute()
        or any(part in ("", ".", "..") for part in p.parts)
        or "\\" in name
        or "\x00" in name
    ):
        raise BadInput(f"unsafe file name in the output: {name!r}")
    return str(p)


def zip_bytes(files: Mapping[str, str | bytes]) -> bytes:
    """The zip archive of `files` (name -> content), entries sorted, names checked."""
    import zipfile  # only where a bundle is written (not on check-config's path)

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            z.writestr(entry_name(name), files[name])
    return buf.getvalue()


def write_zip(dest: str | os.PathLike[str], files: Mapping[str, str | bytes], *, force: bool = False) -> Path:
    """Write a zip archive atomically (see the module docstring)."""
    return write_file(dest, zip_bytes(files), force=force)


def write_tree(dest: str | os.PathLike[str], files: Mapping[str, str | bytes]) -> Path:
    """Write a directory of files: built in a new private directory next to `dest`, then
    renamed to `dest` (which must not exist, or be an empty directory). Never replaces a
    non-empty directory, with or without --force."""
    dest = Path(dest)
    _check_dest(dest, force=False, is_dir=True)
    parent = _parent(dest)
    names = {entry_name(n): files[n] for n in files}
    with suppress(OSError):  # what a SIGKILLed run left next to this output
        reaper.sweep(str(parent), prefix=f".{dest.name}.part-")
    tmp = tempfile.mkdtemp(prefix=f".{dest.name}.part-{os.getpid()}-", dir=parent)  # exclusive, 0700
    procs.register_tempdir(tmp)
    try:
        for name in sorted(names):
            target = Path(tmp, *PurePosixPath(name).parts)
            for d in reversed(target.relative_to(tmp).parents[:-1]):
                with suppress(FileExistsError):
                    os.mkdir(Path(tmp) / d, _umasked(DIR_MODE))
            content = names[name]
            raw = content.encode("utf-8") if isinstance(content, str) else content
            fd = os.open(target, _FLAGS, _umasked(FILE_MODE))
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
        os.chmod(tmp, _umasked(DIR_MODE))
        if dest.is_symlink():
            raise BadInput(f"{dest}: became a symlink while writing; not writing there")
        os.rename(tmp, dest)  # over an empty directory only (ENOTEMPTY otherwise)
    except OSError as exc:
        raise BadInput(f"{dest}: cannot write there ({exc.strerror or exc})") from None
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        procs.unregister_tempdir(tmp)
    return dest


def check_bundle_dest(dest: str | os.PathLike[str], *, force: bool = False) -> None:
    """The refusals `write_bundle` would make, checked up front (before minutes of work)."""
    dest = Path(dest)
    _check_dest(dest, force=force, is_dir=dest.suffix.lower() != ".zip")


def write_bundle(
    dest: str | os.PathLike[str], files: Mapping[str, str | bytes], *, force: bool = False
) -> Path:
    """A zip when `dest` ends in .zip, else a directory tree. report.md and report.json are
    made safe to print first (no terminal control sequences from the inputs: infra/sanitize.py)."""
    from vllm_pd_doctor.infra import sanitize

    dest = Path(dest)
    files = {name: sanitize.bundle_file(name, content) for name, content in files.items()}
    if dest.suffix.lower() == ".zip":
        return write_zip(dest, files, force=force)
    return write_tree(dest, files)


# --- the standard streams -----------------------------------------------------------------------


class _ClosedStream(io.TextIOBase):
    """Stands in for a stdout that was closed when pd-doctor started: writing is an error."""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


_STDIO: dict[str, bool] = {"stdout_closed": False}


def prepare_stdio() -> None:
    """Make the standard streams safe to use, once, at the entry point.

    A closed descriptor 0, 1 or 2 gets /dev/null (so no file pd-doctor opens later lands on it
    and no child inherits a closed one); a closed stdout makes writing the result an error
    (exit 3), a closed stderr is silent. stdout and stderr write what their encoding cannot
    (PYTHONIOENCODING=ascii, a C locale) as backslash escapes instead of failing.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if fd == 1:
                _STDIO["stdout_closed"] = True
                sys.stdout = _ClosedStream()
            elif fd == 2:
                sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with suppress(Exception):
                reconfigure(errors="backslashreplace")


def write_stdout(text: str) -> None:
    """The output sink of every command: the result on stdout, or CouldNotRun (exit 3) when
    stdout cannot take it (closed, a full disk, a reader that went away)."""
    from vllm_pd_doctor.infra.errors import CouldNotRun

    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        raise CouldNotRun("stdout was closed by its reader before the result was written") from None
    except OSError as exc:
        _silence_stdout()
        raise CouldNotRun(
            f"cannot write the result to stdout ({exc.strerror or exc})",
            hint="redirect stdout to a file on a disk with room, or use -o where the command has it",
        ) from None


def _silence_stdout() -> None:
    """After a failed write: point fd 1 at /dev/null so the interpreter's own flush at exit
    (of what is still buffered) does not fail again with a second message."""
    with suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)


def finish_stdout(rc: int) -> int:
    """Flush stdout at the end of a command; a failed flush (typer's own --help or --version
    on a full disk) turns an exit 0 into 3, with one line."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError) as exc:
        _silence_stdout()
        with suppress(OSError, ValueError):
            print(
                f"pd-doctor: error: cannot write to stdout ({getattr(exc, 'strerror', None) or exc})",
                file=sys.stderr,
                flush=True,
            )
        return rc if rc not in (0, 1) else 3
    return rc


# --- where pd-doctor keeps its cache -------------------------------------------------------------


def user_cache_base() -> Path:
    """The user's cache directory: $XDG_CACHE_HOME when it is an absolute path (the XDG spec
    ignores a relative one), else $HOME/.cache. An empty, relative or unknown home is bad input
    (exit 2): pd-doctor never falls back to `/.cache` or to the current directory."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    home = os.environ.get("HOME")
    if home is None:
        with suppress(KeyError, ImportError):
            import pwd

            home = pwd.getpwuid(os.getuid()).pw_dir
    if not home or not os.path.isabs(home):
        raise BadInput(
            f"HOME is {home!r}: no home directory to keep pd-doctor's cache in",
            hint="set HOME, or PD_DOCTOR_HOME to a writable directory",
        )
    return Path(home) / ".cache"


def check_home_dir(path: Path, variable: str) -> Path:
    """`path` (given by `variable`), made absolute, if it can be pd-doctor's cache directory:
    a directory or not there yet, not in /proc, /sys or /dev, not `~user` of a user that does
    not exist. BadInput (exit 2) otherwise, before anything is written."""
    raw = str(path)
    if raw.startswith("~"):
        expanded = os.path.expanduser(raw)
        if expanded.startswith("~"):
            raise BadInput(f"{variable}={raw}: no such user", hint=f"give an absolute path in {variable}")
        path = Path(expanded)
    path = Path(os.path.abspath(path))  # children run elsewhere: never relative to a cwd
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise BadInput(
            f"{variable}={raw}: {probe} is not a directory", hint=f"give a directory in {variable}"
        )
    if str(path.resolve()).startswith(("/proc/", "/sys/", "/dev/")) or str(path.resolve()) in (
        "/proc",
        "/sys",
        "/dev",
    ):
        raise BadInput(
            f"{variable}={raw}: a kernel file system, not a place for a cache",
            hint=f"give a directory on disk in {variable}",
        )
    return path
