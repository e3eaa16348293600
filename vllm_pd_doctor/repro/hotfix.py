"""`pd-doctor hotfix`: put the opt-in #53514 backport into a vLLM environment, say where it stands.

The same plugin carries the Scheduler fixes of knowledge/facts/hotfixes.py (`hybrid-load-failure`,
`abort-race`: not merged upstream), each enabled by name in PD_DOCTOR_HOTFIX's comma list and
planned from the installed source (`invllm/hotfix_scheduler.py`).

The backport itself is `invllm/hotfix.py` (stdlib + vLLM only, runs inside vLLM). `install` copies
it, with the connector registry it reads, into the environment's site-packages as a small
distribution of its own (`pd-doctor-hotfix`: a package, a dist-info with a `vllm.general_plugins`
entry point and a RECORD of every file), without any of pd-doctor's dependencies. It stays
inert until an engine starts with PD_DOCTOR_HOTFIX=53514 in its environment. `uninstall` removes
exactly the files its RECORD lists (and the bytecode Python compiled from them). `status` says
whether it is installed, enabled in the environment it is asked from, and needed by the
installed release (observed: the same plan the plugin would follow, run in that interpreter).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from vllm_pd_doctor import __version__
from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.invllm import hotfix_scheduler
from vllm_pd_doctor.knowledge.facts import advice as wording
from vllm_pd_doctor.knowledge.facts import hotfixes
from vllm_pd_doctor.knowledge.facts.hotfix_env import ENV as ENV  # re-exported (defined light for --help)
from vllm_pd_doctor.knowledge.facts.hotfix_env import ENV_SETTING as ENV_SETTING
from vllm_pd_doctor.knowledge.facts.hotfix_env import ISSUE as ISSUE
from vllm_pd_doctor.results.hotfix import APPLIED as APPLIED
from vllm_pd_doctor.results.hotfix import DIST as DIST
from vllm_pd_doctor.results.hotfix import Change as Change
from vllm_pd_doctor.results.hotfix import FixState as FixState
from vllm_pd_doctor.results.hotfix import Installed as Installed
from vllm_pd_doctor.results.hotfix import Status as Status
from vllm_pd_doctor.results.repro import HotfixPatch

PACKAGE = "pd_doctor_hotfix"
INSTALLER = "pd-doctor"
ENTRY_POINT = f"{PACKAGE}.hotfix:register"
SOURCES = (
    "hotfix.py",
    "hotfix_plan.py",
    "hotfix_scheduler.py",
    "hotfix_source.py",
    "hotfix_abort_race.py",
    "hotfix_load_failure.py",
    "connectors.py",
    "hotfixes.py",
)
"""Files of the target package the installed plugin needs (stdlib + vLLM only; `targetrun.target_sources`)."""

_INIT = '''"""pd-doctor's opt-in runtime backports (installed by `pd-doctor hotfix install`): the vLLM
#53514 fix and the Scheduler fixes of hotfixes.py; inert unless the engine's environment names them in
PD_DOCTOR_HOTFIX (a comma list, e.g. PD_DOCTOR_HOTFIX=53514). Remove it with
`pd-doctor hotfix uninstall --python <this environment's python>`."""
'''

_WHERE = (
    "import json, os, sys, sysconfig, importlib.util, importlib.metadata as md\n"
    "eps = []\n"
    "for ep in md.entry_points(group='vllm.general_plugins'):\n"
    "    dist = getattr(getattr(ep, 'dist', None), 'name', None)\n"
    "    eps.append({'name': ep.name, 'value': ep.value, 'dist': dist})\n"
    "p = sysconfig.get_paths()['purelib']\n"
    "print(json.dumps({'purelib': p, 'writable': os.access(p, os.W_OK),"
    " 'vllm': importlib.util.find_spec('vllm') is not None, 'plugins': eps}))\n"
)


# ----------------------------------------------------------------------------- environment


def _source(name: str) -> Path:
    """The file shipped as `name` in the plugin (invllm/'s, or knowledge/'s connector registry)."""
    return targetrun.target_sources()[name]


def site_packages(python: str) -> tuple[Path, bool, bool, list[dict[str, Any]]]:
    """(purelib, writable, has vllm, vllm.general_plugins entry points) of the interpreter."""
    info = targetrun.ask(python, _WHERE, timeout=60)
    purelib = info.get("purelib")
    if not isinstance(purelib, str):
        raise CouldNotRun(f"--python {python}: did not say where its site-packages is")
    return Path(purelib), bool(info.get("writable")), bool(info.get("vllm")), list(info.get("plugins") or [])


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _dist_info_name() -> str:
    return f"{PACKAGE}-{__version__}.dist-info"


def _payload() -> dict[str, bytes]:
    """Relative path -> content of every file install writes, RECORD excluded."""
    files: dict[str, bytes] = {f"{PACKAGE}/__init__.py": _INIT.encode()}
    for name in SOURCES:
        files[f"{PACKAGE}/{name}"] = _source(name).read_bytes()
    di = _dist_info_name()
    files[f"{di}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {__version__}\n"
        f"Summary: pd-doctor's opt-in runtime backport of the vLLM #{ISSUE} fix "
        f"(active only with {ENV_SETTING})\n"
    ).encode()
    files[f"{di}/entry_points.txt"] = f"[vllm.general_plugins]\npd_doctor_hotfix = {ENTRY_POINT}\n".encode()
    files[f"{di}/INSTALLER"] = f"{INSTALLER}\n".encode()
    files[f"{di}/top_level.txt"] = f"{PACKAGE}\n".encode()
    return files


def find_installed(purelib: Path) -> Installed | None:
    found = sorted(purelib.glob(f"{PACKAGE}-*.dist-info"))
    if not found:
        return None
    di = found[-1]
    record = di / "RECORD"
    files: list[Path] = []
    current = True
    want = _payload()
    try:
        lines = record.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        rel, _, rest = line.partition(",")
        if not rel:
            continue
        path = _inside(purelib, rel)
        files.append(path)
        if rel.startswith(f"{PACKAGE}/") and rel in want:
            current = current and rest.split(",")[0] == _record_hash(want[rel])
    version = di.name[len(PACKAGE) + 1 : -len(".dist-info")]
    return Installed(dist_info=di, version=version, files=tuple(files), current=current)


def _inside(purelib: Path, rel: str) -> Path:
    path = (purelib / rel).resolve()
    root = purelib.resolve()
    if root not in path.parents:
        raise CouldNotRun(f"{DIST}'s RECORD names {rel!r}, outside {purelib}: not touching it")
    return path


# ----------------------------------------------------------------------------- commands


def install(python: str) -> Change:
    """Write the plugin distribution into the interpreter's site-packages (replacing ours)."""
    purelib, writable, has_vllm, _ = site_packages(python)
    if not has_vllm:
        raise CouldNotRun(
            f"no vLLM in {python}: the hotfix is a vLLM plugin",
            hint="point --python at the interpreter of your vLLM environment",
        )
    if not writable:
        raise CouldNotRun(f"cannot write to {purelib}", hint="run as the environment's owner")
    if find_installed(purelib) is not None:
        uninstall(python)
    files = _payload()
    di = _dist_info_name()
    record_rows = [f"{rel},{_record_hash(data)},{len(data)}" for rel, data in files.items()]
    record_rows.append(f"{di}/RECORD,,")
    files[f"{di}/RECORD"] = ("\n".join(record_rows) + "\n").encode()
    written: list[str] = []
    try:
        for rel, data in files.items():
            path = purelib / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append(rel)
    except OSError as exc:
        _remove(purelib, written)
        raise CouldNotRun(f"cannot install {DIST} into {purelib}: {exc}") from None
    return Change(
        "install", python=python, site_packages=str(purelib), files=tuple(written), available=available()
    )


def available() -> tuple[str, ...]:
    """Every fix PD_DOCTOR_HOTFIX can name, with its label (`abort-race (not merged upstream)`)."""
    return tuple(h.title for h in hotfixes.HOTFIXES)


def fix_from_dict(d: dict[str, Any], enabled: tuple[str, ...] | None = None) -> FixState:
    """A Scheduler fix's plan entry (hotfix_scheduler.plan) as a result."""
    fix = str(d.get("fix", "?"))
    return FixState(
        fix=fix,
        status=str(d.get("status", "?")),
        reason=str(d.get("reason") or ""),
        label=str(d.get("label") or ""),
        function=d.get("function"),
        at=d.get("at"),
        sites=tuple(str(x) for x in d.get("sites") or ()),
        enabled=None if enabled is None else fix in enabled,
    )


def uninstall(python: str) -> Change:
    """Remove exactly what install wrote (RECORD) and the bytecode compiled from it."""
    purelib, _, _, _ = site_packages(python)
    inst = find_installed(purelib)
    if inst is None:
        raise BadInput(
            f"{DIST} is not installed in {purelib}", hint=f"pd-doctor hotfix status --python {python}"
        )
    try:
        who = (inst.dist_info / "INSTALLER").read_text(encoding="utf-8").strip()
    except OSError:
        who = ""
    if who != INSTALLER:
        raise CouldNotRun(
            f"{inst.dist_info} was not installed by pd-doctor (INSTALLER "
            f"{who or 'missing'}): not removing it",
            hint=f"remove it with the tool that installed it (pip uninstall {DIST})",
        )
    rels = [p.relative_to(purelib.resolve()).as_posix() for p in inst.files]
    removed = _remove(purelib, rels)
    return Change("uninstall", python=python, site_packages=str(purelib), files=tuple(removed))


def _remove(purelib: Path, rels: list[str]) -> list[str]:
    removed: list[str] = []
    dirs: set[Path] = set()
    for rel in rels:
        path = purelib / rel
        if path.suffix == ".py":
            cache = path.parent / "__pycache__"
            for pyc in sorted(cache.glob(f"{path.stem}.*.pyc")):
                pyc.unlink()
                removed.append(pyc.relative_to(purelib).as_posix())
            dirs.add(cache)
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(rel)
        dirs.add(path.parent)
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        if d != purelib and d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return removed


class SourceSite(Protocol):
    """A call of a P-side truncation helper in the installed source (check-config's
    `TruncationSite`: the caller hands its source reader to `status`)."""

    @property
    def connector(self) -> str: ...
    @property
    def helper(self) -> str: ...
    @property
    def caller(self) -> str: ...
    @property
    def caller_class(self) -> str | None: ...
    @property
    def location(self) -> str: ...
    @property
    def before_lookup(self) -> bool | None: ...


SiteReader = Callable[[Path], Iterable[SourceSite]]
"""Reads the truncation sites of an installed vLLM (`knowledge.inspect_vllm.find_sites`)."""


def status(
    python: str,
    find_sites: SiteReader,
    environ: dict[str, str] | None = None,
    *,
    deep: bool = False,
    timeout: float = 300.0,
) -> Status:
    """Installed? enabled (PD_DOCTOR_HOTFIX in `environ`)? needed by that release?

    Needed is read from the installed source with `ast` (`find_sites`: no import, a second), or
    with `deep` from the plan the plugin itself would follow, run in `python` (imports vLLM).
    """
    env = os.environ if environ is None else environ
    purelib, _, has_vllm, plugins = site_packages(python)
    inst = find_installed(purelib)
    others = tuple(
        f"{p['name']} = {p['value']}"
        for p in plugins
        if str(p.get("value", "")).startswith("vllm_pd_doctor.")
    )
    plan: tuple[HotfixPatch, ...] = ()
    fixes: list[dict[str, Any]] = []
    err: str | None = None
    version: str | None = None
    interp = targetrun.probe_interpreter(python)
    version = interp.vllm_version
    if not has_vllm or interp.vllm_path is None:
        err = "no vLLM in this interpreter"
    elif deep:
        run = targetrun.run_module(python, "hotfix", [], timeout=timeout, what="the hotfix plan")
        version = (run.answer.get("vllm") or {}).get("version") or version
        err = run.answer.get("error")
        plan = tuple(patch_from_dict(d) for d in run.answer.get("plan") or ())
        fixes = list(run.answer.get("fixes") or ())
    else:
        plan = plan_from_sites(find_sites(Path(interp.vllm_path)))
        fixes = _scheduler_plan(Path(interp.vllm_path))
    on = hotfixes.parse(env.get(ENV))[0]
    return Status(
        python=python,
        site_packages=str(purelib),
        installed=inst,
        other_plugins=others,
        enabled=ISSUE in on,
        vllm_version=version,
        plan=plan,
        plan_error=err,
        fixes=tuple(fix_from_dict(d, on) for d in fixes),
        available=available(),
    )


def _scheduler_plan(vllm_dir: Path) -> list[dict[str, Any]]:
    """The Scheduler fixes' plan read from the installed source with `ast` (no vLLM import)."""
    try:
        return hotfix_scheduler.plan_file(hotfix_scheduler.scheduler_file(vllm_dir))
    except (OSError, SyntaxError, ValueError) as exc:
        return [
            {
                "fix": h.name,
                "label": h.label,
                "status": "refused",
                "reason": f"cannot read the scheduler: {exc}",
            }
            for h in hotfixes.HOTFIXES
            if h.scheduler
        ]


def plan_from_sites(sites: Iterable[SourceSite]) -> tuple[HotfixPatch, ...]:
    """Each truncation call site of the installed source, as the plan would word it (ast)."""
    out = []
    for s in sites:
        if s.before_lookup is None:
            continue
        late = s.before_lookup is False
        out.append(
            HotfixPatch(
                connector=s.connector,
                class_name=s.caller_class or "?",
                status="patch" if late else "not needed",
                reason=f"{s.caller} calls {s.helper} "
                f"{'after' if late else 'before'} the local prefix-cache lookup (source)",
                helper=s.helper,
                scheduler_class=s.caller_class,
                late_call_at=s.location if late else None,
                early_call_at=None if late else s.location,
            )
        )
    return tuple(out)


# ----------------------------------------------------------------------------- repro glue


def patch_from_dict(d: dict[str, Any]) -> HotfixPatch:
    return HotfixPatch(
        connector=str(d.get("connector", "?")),
        class_name=str(d.get("class") or d.get("kv_connector") or "?"),
        status=str(d.get("status", "?")),
        reason=str(d.get("reason", "")),
        kv_connectors=tuple(d.get("kv_connectors") or ()),
        hook=d.get("hook"),
        scheduler_class=d.get("scheduler_class"),
        helper=d.get("helper"),
        helper_at=d.get("helper_at"),
        late_call_at=d.get("late_call_at"),
        early_call_at=d.get("early_call_at"),
        guard=d.get("guard"),
        guard_source=d.get("guard_source"),
    )


def patches_by_connector(entries: list[dict[str, Any]] | None) -> dict[str, tuple[HotfixPatch, ...]] | None:
    """The harness's `hotfix` answer grouped by connector key (None: no hotfix was asked)."""
    if entries is None:
        return None
    out: dict[str, list[HotfixPatch]] = {}
    for d in entries:
        out.setdefault(str(d.get("connector")), []).append(patch_from_dict(d))
    return {k: tuple(v) for k, v in out.items()}


def advice(python: str | None) -> str:
    """The alternative to upgrading, with the exact commands (worded in `advice.hotfix`)."""
    return wording.hotfix(python)
