"""Build the origin index of the software around vLLM's P/D path: NIXL's C++ core and plugins, UCX,
Mooncake (transfer engine, store and its Python), llm-d's routing sidecar (Go), LMCache, vllm-ascend's
KV connectors and Dynamo's vLLM worker. Writes vllm_pd_doctor/knowledge/origins/others.json.gz
(`origins.load()` merges every `*.json.gz` beside it; index.json.gz, vLLM's own, is not touched).

    python scripts/build_origin_others.py                  # every project and release in PROJECTS
    python scripts/build_origin_others.py --only ucx        # one project (the others kept as they are)
    python scripts/build_origin_others.py --git openucx/ucx=/path/to/ucx.git

Sources: native projects from a git repository (bare or not) at their release tags, read with
`git ls-tree` and `git cat-file --batch` (nothing checked out or built): by default the snapshot the
`fetch` tool leaves in /work/.mirror/<owner>+<name>/repo, else any clone named with --git (e.g.
`git clone --bare https://github.com/openucx/ucx`). Python projects from their PyPI sdist or wheel,
downloaded once into ~/.cache/pd-doctor/sources/ (as scripts/build_origin_index.py does). C, C++ and
Go files are read by `extract_native`, Python files by `extract` (ast).

Add a release: append it to its project's `releases` and rerun with `--only PACKAGE`. Add a project:
a `Project` row (package name, repository or PyPI project, releases, path prefixes of its P/D code).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from build_origin_index import fetch  # noqa: E402

from vllm_pd_doctor.knowledge.origins import build, extract, extract_native  # noqa: E402
from vllm_pd_doctor.knowledge.origins.extract import Statement  # noqa: E402

DATA = ROOT / "vllm_pd_doctor" / "knowledge" / "origins" / "others.json.gz"
MIRRORS = Path("/work/.mirror")


@dataclass(frozen=True)
class Project:
    package: str
    """The name the index files it under (`ucx`, `libnixl`)."""
    source: str
    """`owner/name` of a GitHub repository, or `pypi:<project>` (sdist) / `pypi-wheel:<project>`."""
    releases: tuple[tuple[str, str], ...]
    """(release, git tag) oldest first; for PyPI the tag is the release."""
    scope: tuple[str, ...]
    """Path prefixes (in the repository; for PyPI: relative to the package, see build.SCOPE)."""
    skip: tuple[str, ...] = ("test", "bench", "example", "/mock")
    """A path holding one of these is left out."""


PROJECTS: tuple[Project, ...] = (
    Project(
        "libnixl",
        "ai-dynamo/nixl",
        # the NIXL Python releases index.json.gz holds (vLLM 0.2x pins >= 0.7.1), the newest tag, and
        # 1.3.1: what vllm-openai 0.26.0 ships (ai-dynamo/nixl#2119), the telemetry-bug release
        # (ai-dynamo/dynamo#12952) whose statements 1.3.2 reverted
        (
            ("0.7.1", "0.7.1"),
            ("0.10.1", "0.10.1"),
            ("1.0.1", "v1.0.1"),
            ("1.3.1", "v1.3.1"),
            ("1.3.2", "v1.3.2"),
            ("1.4.0", "v1.4.0"),
        ),
        (
            "src/core/",
            "src/infra/",
            "src/api/cpp/",
            "src/utils/common/",
            "src/utils/ucx/",
            "src/utils/libfabric/",
            "src/plugins/ucx",
            "src/plugins/libfabric/",
            "src/plugins/mooncake/",
            "src/plugins/uccl/",
            "src/plugins/gds_mt/",
            "src/plugins/cuda_gds/",
            "src/plugins/posix/",
            "src/plugins/telemetry/",
        ),
    ),
    Project(
        "ucx",
        "openucx/ucx",
        # what NIXL's wheels bundled through 2025-2026 (1.18 - 1.20, 1.22 per ai-dynamo/nixl#2119)
        (("1.18.1", "v1.18.1"), ("1.19.1", "v1.19.1"), ("1.20.1", "v1.20.1"), ("1.22.0", "v1.22.0")),
        (
            "src/ucp/core/",
            "src/ucp/wireup/",
            "src/ucp/rndv/",
            "src/ucp/proto/",
            "src/uct/base/",
            "src/uct/ib/",
            "src/uct/cuda/",
            "src/uct/tcp/",
            "src/uct/sm/",
            "src/ucs/sys/",
            "src/ucs/config/",
            "src/ucs/memory/",
            "src/ucs/async/",
        ),
    ),
    Project(
        "mooncake",
        "kvcache-ai/Mooncake",
        (("0.3.7.post2", "v0.3.7.post2"), ("0.3.9", "v0.3.9"), ("0.3.12.post1", "v0.3.12.post1")),
        (
            "mooncake-transfer-engine/src/",
            "mooncake-store/src/",
            "mooncake-integration/",
            "mooncake-wheel/mooncake/mooncake_connector",
            "mooncake-wheel/mooncake/mooncake_store_service.py",
            "mooncake-wheel/mooncake/mooncake_config.py",
            "mooncake-wheel/mooncake/vllm_v1_proxy_server.py",
        ),
    ),
    Project(
        "llm-d-routing-sidecar",
        "llm-d/llm-d-routing-sidecar",
        (("0.2.0", "v0.2.0"), ("0.3.0", "v0.3.0")),
        ("cmd/", "internal/"),
    ),
    Project(
        "llm-d-inference-scheduler",
        "llm-d/llm-d-inference-scheduler",
        # the sidecar moved here (cmd/pd-sidecar); with the P/D profile handler and filters
        (("0.5.1", "v0.5.1"), ("0.8.0", "v0.8.0")),
        (
            "cmd/pd-sidecar/",
            "pkg/sidecar/",
            "pkg/plugins/profile/pd_",
            "pkg/plugins/filter/pd_",
            "pkg/plugins/pre-request/pd_",
            "pkg/epp/framework/plugins/scheduling/profilehandler/disagg/",
        ),
    ),
    Project("lmcache", "pypi:lmcache", (("0.4.5", "0.4.5"), ("0.5.2", "0.5.2"), ("0.5.6", "0.5.6")), ()),
    Project("vllm_ascend", "pypi:vllm-ascend", (("0.18.0", "0.18.0"), ("0.23.0", "0.23.0")), ()),
    Project("dynamo", "pypi-wheel:ai-dynamo", (("1.3.1", "1.3.1"), ("1.6.1", "1.6.1")), ()),
)
"""What is indexed: a few releases per project, the newest and those vLLM 0.2x-0.33 users run."""


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _wanted(p: Project, path: str) -> bool:
    if not path.startswith(p.scope) or any(s in path.lower() for s in p.skip):
        return False
    return path.endswith((*extract_native.SUFFIXES, ".py"))


def git_files(git_dir: Path, ref: str, p: Project) -> Iterator[tuple[str, str]]:
    """(path, text) of every in-scope file at `ref`, read through one `git cat-file --batch`."""
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run([*git, "ls-tree", "-r", ref], capture_output=True, text=True, check=True)
    blobs = []
    for row in listing.stdout.splitlines():
        meta, _, path = row.partition("\t")
        _mode, kind, sha = meta.split()
        if kind == "blob" and _wanted(p, path):
            blobs.append((path, sha))
    with subprocess.Popen(
        [*git, "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        for path, sha in blobs:
            proc.stdin.write(f"{sha}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            size = int(header[2])
            data = proc.stdout.read(size + 1)[:size]
            yield path, data.decode("utf-8", errors="replace")
        proc.stdin.close()


def statements_of(files: Iterator[tuple[str, str]]) -> Iterator[tuple[str, Statement]]:
    """Each file's statements; C/C++ files with the logging macros the release's headers define
    (NIXL's `NIXL_ERROR`... in src/utils/common/nixl_log.h), read from the headers first."""
    todo = list(files)
    macros: dict[str, extract_native.Macro] = {}
    for path, text in todo:
        if path.endswith((".h", ".hpp")) and "#" in text:
            macros = extract_native.stream_macros(text, macros)
    for path, text in todo:
        if path.endswith(".py"):
            found = extract.statements(text, path)
        else:
            found = extract_native.statements(text, path, macros)
        for s in found:
            yield path, s


def add_project(doc: dict[str, Any], p: Project, git: dict[str, Path]) -> None:
    for release, ref in p.releases:
        t0 = time.perf_counter()
        if p.source.startswith("pypi"):
            kind = "wheel" if p.source.startswith("pypi-wheel:") else "sdist"
            archive = fetch(p.source.split(":", 1)[1], release, kind)
            found = statements_of(build.from_archive(archive, p.package))
            where = archive.name
        else:
            git_dir = git.get(p.source) or MIRRORS / p.source.replace("/", "+") / "repo"
            if not git_dir.exists():
                raise SystemExit(f"{p.source}: no git repository at {git_dir}; clone it and pass --git")
            found = statements_of(git_files(git_dir, ref, p))
            where = f"{p.source}@{ref}"
        n = build.add_statements(doc, p.package, release, found)
        _say(f"{p.package} {release}: {n} statements from {where} in {time.perf_counter() - t0:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="PACKAGE to (re)build (repeatable)")
    ap.add_argument("--git", action="append", default=[], help="OWNER/NAME=PATH of a git repository")
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args()
    git = {k: Path(v) for k, _, v in (s.partition("=") for s in args.git)}
    doc: dict[str, Any] = build.loads(args.out.read_bytes()) if args.only and args.out.exists() else {}
    t0 = time.perf_counter()
    for p in PROJECTS:
        if args.only and p.package not in args.only:
            continue
        doc.get("packages", {}).pop(p.package, None)
        add_project(doc, p, git)
    build.sort_releases(doc)
    data = build.dumps(doc)
    args.out.write_bytes(data)
    n = sum(len(p["origins"]) for p in doc["packages"].values())
    print(f"{args.out}: {n} origins, {len(data) / 1e6:.2f} MB, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
