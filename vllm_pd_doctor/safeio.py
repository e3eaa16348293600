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

import io
import os
import secrets
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path, PurePosixPath

from vllm_pd_doctor import procs
from vllm_pd_doctor.errors import BadInput

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
FILE_MODE = 0o644
DIR_MODE = 0o755


def _umasked(mode: int) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


def _check_dest(dest: Path, *, force: bool, is_dir: bool = False) -> None:
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
    for _ in range(100):
        tmp = dest.with_name(f".{dest.name}.part-{secrets.token_hex(6)}")
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
    tmp = tempfile.mkdtemp(prefix=f".{dest.name}.part-", dir=parent)  # exclusive, mode 0700
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
    """A zip when `dest` ends in .zip, else a directory tree."""
    dest = Path(dest)
    if dest.suffix.lower() == ".zip":
        return write_zip(dest, files, force=force)
    return write_tree(dest, files)
