"""Issue 31 ("The house, round 3"): every module, package and folder move of the package, in one table.

    .venv/bin/python scripts/house_moves.py --move                # git mv every old path still present
    .venv/bin/python scripts/house_moves.py --rewrite FILE...     # rewrite references to old locations
    .venv/bin/python scripts/house_moves.py --rewrite-all         # ... in every tracked text file
    .venv/bin/python scripts/house_moves.py --check               # exit 1 while an old reference is left

`MOVES` maps each old path to its new one (a module, a package or a folder, repository-relative).
`--move` performs them with `git mv` and is idempotent: run again after a merge, it moves what another
branch added at an old place (a new test in an old test folder, a module that became a package) to
the new one. `--rewrite` is idempotent too: it rewrites what names an old location (`import` and
`from ... import` lines, dotted module strings in import-linter contracts, entry points, monkeypatch
targets and `python -m`, file paths in code, docs, Makefile and CI) and leaves new names alone, then
lets ruff sort and format the Python files it changed. Recorded fixtures (tests/fixtures/) are data
and are never rewritten.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "vllm_pd_doctor"

_P = f"{PKG}/"
_K = f"{_P}knowledge/"
MOVES: tuple[tuple[str, str], ...] = (
    # the repro feature: request, engines, scenario runner, matrix/bisect, hotfix
    (f"{_P}scenarios/cli.py", f"{_P}commands/_scenarios.py"),  # command code, filed with the commands
    (f"{_P}scenarios/", f"{_P}repro/scenarios/"),
    (f"{_P}live/", f"{_P}repro/live/"),
    (f"{_P}scenario.py", f"{_P}repro/request.py"),
    (f"{_P}inprocess.py", f"{_P}repro/inprocess.py"),
    (f"{_P}matrix.py", f"{_P}repro/matrix.py"),
    (f"{_P}hotfix.py", f"{_P}repro/hotfix.py"),
    # code that runs inside the target vLLM: a name no tool reads as build output
    (f"{_P}target/", f"{_P}invllm/"),
    # infrastructure
    (f"{_P}errors.py", f"{_P}infra/errors.py"),
    (f"{_P}procs.py", f"{_P}infra/procs.py"),
    (f"{_P}reaper.py", f"{_P}infra/reaper.py"),
    (f"{_P}early.py", f"{_P}infra/early.py"),
    (f"{_P}safeio.py", f"{_P}infra/safeio.py"),
    (f"{_P}limits.py", f"{_P}infra/limits.py"),
    (f"{_P}sanitize.py", f"{_P}infra/sanitize.py"),
    (f"{_P}progress.py", f"{_P}infra/progress.py"),
    (f"{_P}jsoncache.py", f"{_P}infra/jsoncache.py"),
    (f"{_P}targetrun.py", f"{_P}infra/targetrun.py"),
    (f"{_P}uvinstall.py", f"{_P}infra/uvinstall.py"),
    (f"{_P}tracebacks.py", f"{_P}infra/tracebacks.py"),
    (f"{_P}envs.py", f"{_P}infra/envs.py"),
    (f"{_P}shell/", f"{_P}infra/shell/"),
    # knowledge/: facts (static data), readers (of an installed release or its source), models
    (f"{_P}hotfix_env.py", f"{_K}facts/hotfix_env.py"),
    (f"{_P}advice.py", f"{_K}facts/advice.py"),  # the one wording of #53514's fixes (facts only)
    (f"{_K}advisories.py", f"{_K}facts/advisories.py"),
    (f"{_K}connectors.py", f"{_K}facts/connectors.py"),
    (f"{_K}examples.py", f"{_K}facts/examples.py"),
    (f"{_K}fixes.py", f"{_K}facts/fixes.py"),
    (f"{_K}hotfixes.py", f"{_K}facts/hotfixes.py"),
    (f"{_K}metrics.py", f"{_K}facts/metrics.py"),
    (f"{_K}metrics_index.json", f"{_K}facts/metrics_index.json"),
    (f"{_K}origin_scenarios.py", f"{_K}facts/origin_scenarios.py"),
    (f"{_K}releases.py", f"{_K}facts/releases.py"),
    (f"{_K}scenario_exposure.py", f"{_K}facts/scenario_exposure.py"),
    (f"{_K}scenario_outcomes.json", f"{_K}facts/scenario_outcomes.json"),
    (f"{_K}scenarios.py", f"{_K}facts/scenarios.py"),
    (f"{_K}connector_registry.py", f"{_K}readers/connector_registry.py"),
    (f"{_K}facts.py", f"{_K}readers/facts.py"),
    (f"{_K}image_release.py", f"{_K}readers/image_release.py"),
    (f"{_K}inspect_config.py", f"{_K}readers/inspect_config.py"),
    (f"{_K}inspect_vllm.py", f"{_K}readers/inspect_vllm.py"),
    (f"{_K}metrics_source.py", f"{_K}readers/metrics_source.py"),
    (f"{_K}nixl_compat.py", f"{_K}readers/nixl_compat.py"),
    (f"{_K}nixl_info.py", f"{_K}readers/nixl_info.py"),
    (f"{_K}serve_flags.py", f"{_K}readers/serve_flags.py"),
    (f"{_K}source_cache.py", f"{_K}readers/source_cache.py"),
    (f"{_K}models.py", f"{_K}models/resolve.py"),
    (f"{_K}model_info.py", f"{_K}models/info.py"),
    (f"{_K}model_family.py", f"{_K}models/family.py"),
    # the one reader of a deployment (issue 31 item 4), below the features that read one
    (f"{_P}checkconfig/parse/", f"{_P}deployment/parse/"),
    # the repository's data folder: models and the scripts that make them
    ("repro/", "assets/"),
    # tests mirror the package
    ("tests/inprocess/", "tests/repro/inprocess/"),
    ("tests/live/", "tests/repro/live/"),
    ("tests/scenarios/", "tests/repro/scenarios/"),
    ("tests/hotfix/", "tests/repro/hotfix/"),
    ("tests/test_advice.py", "tests/knowledge/test_advice.py"),
    ("tests/test_matrix.py", "tests/repro/test_matrix.py"),
    ("tests/shell/", "tests/infra/shell/"),
    ("tests/test_safeio.py", "tests/infra/test_safeio.py"),
    ("tests/test_signals.py", "tests/infra/test_signals.py"),
    ("tests/target/", "tests/invllm/"),
    ("tests/target_scripts/", "tests/invllm_scripts/"),
)
"""Old path -> new path. A folder ends with `/`. Order matters only where one old path is inside
another (the more specific first)."""

NEW_PACKAGES = {
    f"{_P}repro/": "The repro feature: the request, the in-process and live engines, the scenario runner, "
    "matrix/bisect and the hotfix.\n\nEvery engine takes one request (request.py) and answers one "
    "`ReproReport` (results/repro.py); the code that runs inside vLLM is invllm/.",
    f"{_P}infra/": "Infrastructure every layer uses: errors and their exit codes, processes and their "
    "reaper, safe I/O, input limits, sanitizing, progress, caches, the run of invllm/ code in another "
    "interpreter, provisioned environments and the shell reader.",
    f"{_K}facts/": "What pd-doctor knows as data (stdlib only): releases and their fixes, connectors, "
    "advisories, hotfixes, scenarios with their advice and exposure, metric names per release.",
    f"{_K}readers/": "Readers of an installed vLLM release or its source (by `ast`, or in a child of its "
    "interpreter), and the facts they return.",
    f"{_K}models/": "Models: one resolver for `--model` (a directory, a config.json, a bundled family or "
    "a Hugging Face id), what a config.json says, and the family through the installed vLLM.",
    f"{_P}deployment/": "The one reader of a deployment, below the features that read one: the --config "
    "file, --prefill-cmd / --decode-cmd and --set -> the typed servers (reader.py), --model or the "
    "servers' model -> what config.json says (model.py), the engines given by URL (urls.py). "
    "check-config, triage, status and report call it.",
}
"""`__init__.py` of the packages the moves create (their docstrings feed the README's tree)."""

REWRITE_SUFFIXES = (".py", ".toml", ".md", ".cfg", ".ini", ".sh", ".yaml", ".yml", ".txt")
REWRITE_NAMES = ("Makefile", "run")
NEVER = ("tests/fixtures/", ".git/", ".venv/")


def _module(path: str) -> str | None:
    """The dotted module of a package or test path (`vllm_pd_doctor/live/` -> `vllm_pd_doctor.live`,
    `tests/live/test_live.py` -> `tests.live.test_live`: tests import each other's helpers)."""
    if not path.startswith((_P, "tests/")):
        return None
    if path.endswith("/"):
        return path.rstrip("/").replace("/", ".")
    if path.endswith(".py"):
        return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return None


MODULES: tuple[tuple[str, str], ...] = tuple(
    sorted(
        ((o, n) for o, n in ((_module(a), _module(b)) for a, b in MOVES) if o and n),
        key=lambda p: -len(p[0]),
    )
)
"""Old dotted module -> new dotted module, longest first."""


CLASHES: dict[str, frozenset[str]] = {
    pkg: frozenset(n.rsplit(".", 1)[-1] for _, n in MODULES if n.rsplit(".", 1)[0] == pkg)
    for pkg in (f"{PKG}.knowledge.facts", f"{PKG}.knowledge.models")
}
"""New packages with the name of an old module (`knowledge/facts.py`, the readers' types, now
`knowledge/readers/facts.py`; `knowledge/models.py`, now `knowledge/models/resolve.py`): a name inside
such a package is new and stays; the bare name stays too, except as the module of a `from` import."""


def _map_module(name: str) -> str:
    for pkg, inside in CLASHES.items():
        if name.startswith(pkg + ".") and name[len(pkg) + 1 :].split(".")[0] in inside:
            return name
    for old, new in MODULES:
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return name


def _path_rules() -> list[tuple[re.Pattern[str], str]]:
    rules: list[tuple[str, str]] = []
    for old, new in MOVES:
        rules.append((old, new))
        if old.startswith(_P):  # package-relative spelling (`target/hotfix.py`, `knowledge/fixes.py`)
            rules.append((old[len(_P) :], new[len(_P) :]))
        if old == "repro/":
            rules.extend((f'"repro" / "{d}"', f'"assets" / "{d}"') for d in ("models", "scripts"))
        if old == f"{_P}target/":
            rules.append((f'"{PKG}" / "target"', f'"{PKG}" / "invllm"'))
    rules.sort(key=lambda r: -len(r[0]))
    out = []
    for old, new in rules:
        if old == "repro/":  # the data folder only where it is named with its contents
            pattern = r"(?<![\w./-])repro/(?=(?:models|scripts)(?![\w.]))"
        elif old.startswith('"'):
            pattern = re.escape(old)
        elif "/" not in old.rstrip("/") and not old.startswith("tests/"):  # a bare name: `envs.py`, live/x
            after = r"(?=`)" if old.endswith(".py") else r"(?=`|\w)"  # (vLLM has an envs.py too)
            pattern = (
                r"(?<![\w./-])(?<=`)" + re.escape(old) + after
                if old.endswith(".py")
                else (r"(?<![\w./-])" + re.escape(old) + after)
            )
        else:
            pattern = r"(?<![\w./-])" + re.escape(old) + (r"" if old.endswith("/") else r"(?![\w])")
        out.append((re.compile(pattern), new))
    out.append((re.compile(r"(?<![\w./-])target_scripts\b"), "invllm_scripts"))
    return out


PATH_RULES = _path_rules()
DOTTED = re.compile(r"(?<![\w.])" + re.escape(PKG) + r"(?:\.\w+)+")
FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from[ \t]+(?P<base>(?:" + re.escape(PKG) + r"|tests)(?:\.\w+)*)[ \t]+import[ \t]+"
    r"(?P<names>\([^)]*\)|[^\n#]*?(?:\\\n[^\n#]*?)*)(?P<comment>[ \t]*#[^\n]*)?$",
    re.M,
)


def _rewrite_from(m: re.Match[str]) -> str:
    """`from PKG.x import a, b as c` with every imported module at its new place (one statement per
    new parent package)."""
    base, indent, comment = m["base"], m["indent"], m["comment"] or ""
    raw = m["names"].strip().strip("()").replace("\\\n", " ")
    try:
        names = ast.parse(f"from {base} import ({raw})").body[0].names  # type: ignore[attr-defined]
    except SyntaxError:
        return m[0]
    groups: dict[str, list[str]] = {}
    new_base = _map_module(base)
    for alias in names:
        full = f"{base}.{alias.name}"
        moved = _map_module(full)
        if alias.name in CLASHES.get(base, ()):
            parent, leaf = base, alias.name  # the new package's module
        elif moved != full and alias.name != "*":
            parent, leaf = moved.rsplit(".", 1)
        else:
            parent, leaf = new_base, alias.name
        asname = alias.asname or (alias.name if leaf != alias.name else None)  # the code keeps its name
        groups.setdefault(parent, []).append(leaf + (f" as {asname}" if asname else ""))
    if list(groups) == [base]:
        return m[0]
    lines = [f"{indent}from {parent} import {', '.join(items)}" for parent, items in groups.items()]
    lines[0] += comment
    return "\n".join(lines)


IN_STRING = re.compile(
    r"(?:(?<=[\"'])|(?<=\\n))from (?P<base>" + re.escape(PKG) + r"(?:\.\w+)*) "
    r"import (?P<names>[\w, ]+?)(?=\\n|[\"'])"
)
"""`from PKG import x` inside a string of code a test runs in a child (`"...\\nfrom PKG import x\\n"`):
rewritten where its names keep one parent (a split would need a line break inside the string)."""


def _rewrite_in_string(m: re.Match[str]) -> str:
    out = FROM_IMPORT.sub(_rewrite_from, f"from {m['base']} import {m['names']}")
    return m[0] if "\n" in out else out


PROVISIONER = re.compile(
    r"\benvs(?:_mod)?\.(?:ensure|ensure_or_clean|listing|validate|PACKAGES|CONNECTORS_EXTRA|NIXL_EXTRA|"
    r"uv_binary|pip_settings|CPU_EXCLUDES|_create|_keep_log|_write_marker)\b"
)
"""What of the old envs.py is provisioning, now `repro/envs.py` (which re-exports infra/envs.py, the
layout): a file that uses it imports `envs` from repro/, any other from infra/."""
INFRA_ENVS = re.compile(
    r"^(?P<indent>[ \t]*)from vllm_pd_doctor\.infra import (?P<names>[\w, ]*\benvs\b[\w, ]*)$", re.M
)


def _provisioner(m: re.Match[str]) -> str:
    names = [n.strip() for n in m["names"].split(",")]
    mine = [n for n in names if n == "envs" or n.startswith("envs ")]
    rest = [n for n in names if n not in mine]
    lines = [f"{m['indent']}from vllm_pd_doctor.repro import {', '.join(mine)}"]
    if rest:
        lines.append(f"{m['indent']}from vllm_pd_doctor.infra import {', '.join(rest)}")
    return "\n".join(lines)


def rewrite_text(text: str) -> str:
    text = FROM_IMPORT.sub(_rewrite_from, text)
    text = IN_STRING.sub(_rewrite_in_string, text)
    if PROVISIONER.search(text):
        text = INFRA_ENVS.sub(_provisioner, text)
    text = DOTTED.sub(lambda m: m[0] if m[0] in CLASHES else _map_module(m[0]), text)
    for pattern, new in PATH_RULES:
        text = pattern.sub(new, text)
    return text


def _tracked(paths: Iterable[str] = ()) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *paths], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def _rewritable(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if path.startswith(NEVER) or path in ("scripts/house_moves.py", "tests/test_house_moves.py"):
        return False
    return name.endswith(REWRITE_SUFFIXES) or name in REWRITE_NAMES


def rewrite(files: Iterable[str]) -> list[str]:
    """Rewrite the files in place; return the ones that changed (then ruff sorts and formats them)."""
    changed = []
    for f in files:
        rel = str(Path(f).resolve().relative_to(ROOT)) if Path(f).is_absolute() else f
        p = ROOT / rel
        if not p.is_file() or not _rewritable(rel):
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text)
        if new != text:
            p.write_text(new, encoding="utf-8")
            changed.append(rel)
    py = [c for c in changed if c.endswith(".py")]
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if py and ruff:
        subprocess.run([ruff, "check", "-q", "--select", "I", "--fix", *py], cwd=ROOT, check=False)
        subprocess.run([ruff, "format", "-q", *py], cwd=ROOT, check=False)
    return changed


_PARENTS = re.compile(r"(Path\(__file__\)\.resolve\(\)\.parents\[)(\d+)(\])")


def _git_mv(old: str, new: str) -> None:
    (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    if old.startswith("tests/") and new.endswith(".py"):  # a test at another depth: its ROOT, FIXTURES
        delta = new.count("/") - old.count("/")
        p = ROOT / new
        text = p.read_text(encoding="utf-8")
        fixed = _PARENTS.sub(lambda m: f"{m[1]}{int(m[2]) + delta}{m[3]}", text) if delta else text
        if fixed != text:
            p.write_text(fixed, encoding="utf-8")


def move() -> list[tuple[str, str]]:
    """git mv every tracked file still at an old path; return (old, new) per file moved."""
    done: list[tuple[str, str]] = []
    for old, new in MOVES:
        olds = [(old, new)]
        as_dir = old.removesuffix(".py") + "/"
        if old.endswith(".py") and not any(n.startswith(as_dir) for _, n in MOVES):
            olds.append((as_dir, new.removesuffix(".py") + "/"))  # a module another branch made a package
        for o, n in olds:
            files = [f for f in _tracked([o]) if f == o or (o.endswith("/") and f.startswith(o))]
            for f in files:
                dest = n + f[len(o) :] if o.endswith("/") else n
                if (ROOT / f).exists():
                    _git_mv(f, dest)
                    done.append((f, dest))
    for pkg, doc in NEW_PACKAGES.items():
        init = ROOT / pkg / "__init__.py"
        if (ROOT / pkg).is_dir() and not init.exists():
            paras = [textwrap.fill(p, 104) for p in doc.split("\n\n")]
            init.write_text('"""' + "\n\n".join(paras) + '\n"""\n', encoding="utf-8")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    return done


def stale(files: Iterable[str]) -> list[str]:
    """Files whose text still names an old location."""
    out = []
    for f in files:
        p = ROOT / f
        if _rewritable(f) and p.is_file():
            text = p.read_text(encoding="utf-8", errors="replace")
            if rewrite_text(text) != text:
                out.append(f)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--move", action="store_true", help="git mv every old path still present")
    ap.add_argument("--rewrite", nargs="+", metavar="FILE", help="rewrite references in these files")
    ap.add_argument("--rewrite-all", action="store_true", help="rewrite references in every tracked file")
    ap.add_argument("--check", action="store_true", help="exit 1 while a tracked file names an old location")
    a = ap.parse_args()
    if a.move:
        for old, new in move():
            print(f"moved {old} -> {new}", file=sys.stderr)
    files = _tracked() if a.rewrite_all else (a.rewrite or [])
    for f in rewrite(files):
        print(f"rewrote {f}", file=sys.stderr)
    if a.check:
        left = stale(_tracked())
        for f in left:
            print(f"names an old location: {f}", file=sys.stderr)
        return 1 if left else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
