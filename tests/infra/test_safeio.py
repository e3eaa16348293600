"""safeio: output written atomically, never through a symlink, never over a file unasked."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from vllm_pd_doctor.infra import procs, safeio
from vllm_pd_doctor.infra.errors import BadInput


def _no_temps(d: Path) -> None:
    assert [p.name for p in d.iterdir() if ".part" in p.name] == []
    assert procs.registered()[1] == ()


def test_write_file_new_existing_and_force(tmp_path: Path) -> None:
    dest = tmp_path / "a" / "report.md"
    safeio.write_file(dest, "one")
    assert dest.read_text() == "one"
    with pytest.raises(BadInput, match="exists"):
        safeio.write_file(dest, "two")
    assert dest.read_text() == "one"
    safeio.write_file(dest, "two", force=True)
    assert dest.read_text() == "two"
    assert oct(dest.stat().st_mode & 0o777) != "0o600"  # not left at the temp file's mode
    _no_temps(dest.parent)


def test_never_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "out.zip"
    os.symlink(victim, link)
    for force in (False, True):
        with pytest.raises(BadInput, match="symlink"):
            safeio.write_zip(link, {"a.txt": "x"}, force=force)
    assert victim.read_text() == "keep"
    dangling = tmp_path / "d.zip"
    os.symlink(tmp_path / "nowhere", dangling)
    with pytest.raises(BadInput, match="symlink"):
        safeio.write_zip(dangling, {"a.txt": "x"})
    assert not (tmp_path / "nowhere").exists()


def test_planted_part_symlink_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, tmp_path / "bundle.zip.part")
    with pytest.raises(BadInput, match="symlink"):
        safeio.write_zip(tmp_path / "bundle.zip", {"a.txt": "x"})
    assert victim.read_text() == "keep" and not (tmp_path / "bundle.zip").exists()


def test_zip_entries_checked_and_written(tmp_path: Path) -> None:
    dest = safeio.write_zip(tmp_path / "b.zip", {"report.md": "x", "raw/logs/p.log": b"y"})
    with zipfile.ZipFile(dest) as z:
        assert sorted(z.namelist()) == ["raw/logs/p.log", "report.md"]
    for bad in ("../x", "/etc/passwd", "a/../../b", "", "a\\b"):
        with pytest.raises(BadInput):
            safeio.write_zip(tmp_path / "c.zip", {bad: "x"})
    assert not (tmp_path / "c.zip").exists()
    _no_temps(tmp_path)


def test_write_tree(tmp_path: Path) -> None:
    files = {"report.md": "m", "report.json": "{}", "raw/logs/x.log": "l"}
    dest = safeio.write_tree(tmp_path / "bundle", files)
    assert (dest / "raw" / "logs" / "x.log").read_text() == "l"
    assert oct(dest.stat().st_mode & 0o777) != "0o700"
    with pytest.raises(BadInput, match="not empty"):
        safeio.write_tree(dest, files)
    empty = tmp_path / "empty"
    empty.mkdir()
    safeio.write_tree(empty, files)  # an existing empty directory is fine
    assert (empty / "report.md").read_text() == "m"
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(victim, tmp_path / "linked")
    with pytest.raises(BadInput, match="symlink"):
        safeio.write_tree(tmp_path / "linked", files)
    assert list(victim.iterdir()) == []
    _no_temps(tmp_path)


def test_write_bundle_picks_the_form(tmp_path: Path) -> None:
    assert safeio.write_bundle(tmp_path / "x.zip", {"a": "b"}).is_file()
    assert safeio.write_bundle(tmp_path / "x", {"a": "b"}).is_dir()
