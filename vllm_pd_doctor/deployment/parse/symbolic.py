"""The symbolic shell run (`vllm_pd_doctor.infra.shell`) as check-config uses it: every command that
starts a vLLM server, through any wrapper (`wrappers.unwrap`), is recorded as a `Found`; `sh -c`
texts run nested with the wrapper's env and network; the ports a P/D proxy names, labels and
comments naming a role, and kills between launches (phases) become hints for the roles.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from vllm_pd_doctor.deployment.parse.wrappers import Found, Script, unwrap
from vllm_pd_doctor.infra.shell.builtins import QUIET
from vllm_pd_doctor.infra.shell.interp import Interp as ShellInterp
from vllm_pd_doctor.infra.shell.interp import LimitReached
from vllm_pd_doctor.knowledge.readers.serve_flags import BUILTIN, INT, JSON

MAX_SERVERS = 128
"""Most servers one input may start."""
_KILL = {"kill", "pkill", "killall", "fuser"}
_PROXY_FLAGS = {
    "--prefiller-ports": "prefill",
    "--prefiller-port": "prefill",
    "--prefill-ports": "prefill",
    "--decoder-ports": "decode",
    "--decoder-port": "decode",
    "--decode-ports": "decode",
    "--prefill": "prefill",
    "--decode": "decode",
    "--prefiller-hosts": "",
    "--decoder-hosts": "",
}


@dataclass
class _Ctx:
    env: dict[str, str] = field(default_factory=dict)
    launcher: str = ""
    network: str | None = None
    network_evidence: str = ""
    image: str | None = None


class Interp(ShellInterp):
    """One script's symbolic run; `found` holds the servers, `proxy_roles` port -> role hints."""

    def __init__(self, variables: Mapping[str, str], pinned: Collection[str] = ()) -> None:
        super().__init__(variables, pinned)
        self.phase = 0
        self.unresolved_modules: list[str] = []
        self.found: list[Found] = []
        self.others: list[str] = []
        """Python processes the script starts that are no vLLM engine (a frontend, a proxy, a router)."""
        self.proxy_roles: dict[str, str] = {}
        self.role_hint: str | None = None
        self.comment_hint: str | None = None
        self.ctx: list[_Ctx] = [_Ctx()]
        self.applied: list[tuple[str, str]] = []
        """(where, text) of each manifest `kubectl apply -f` sends (a file the script wrote, `-`)."""

    def run_text(self, text: str) -> None:
        """Run script text; a pasted function that is never called is read when nothing else starts
        a server. Raises ShellSyntaxError for text that cannot be split."""
        super().run_text(text)
        if not self.found:
            self.run_uncalled()

    def keep_empty(self, before: list[str]) -> bool:
        """An empty `$PORT` after `--port` (a flag that takes a typed value) stays `${PORT}`, so the
        arguments are not shifted and the missing value is named with a `--set PORT=...` hint."""
        if not before or not before[-1].startswith("--") or "=" in before[-1]:
            return False
        name = before[-1][2:].replace("_", "-")
        return BUILTIN.kind(BUILTIN.aliases.get(name, name)) in (INT, JSON)

    def reached(self) -> int:
        return len(self.found)

    def external(self, argv: list[str], prefix: dict[str, str], raw: str) -> bool | None:
        cmd = argv[0]
        if cmd == "__pdd_comment":
            self.comment_hint = argv[1] if len(argv) > 1 else None
            return True
        if cmd == "__pdd_role":
            self.role_hint = argv[1] if len(argv) > 1 and argv[1] != "-" else None
            return True
        if self._kubectl_apply(argv):
            return True
        for port, role in proxy_ports(argv):
            self.proxy_roles.setdefault(port, role)
        if self._stops(argv):
            self.phase += 1  # what runs after a kill does not run beside what it killed
            return True
        if cmd in QUIET:
            return True
        return self._launch(argv, prefix, raw)

    def _launch(self, argv: list[str], prefix: dict[str, str], raw: str) -> bool | None:
        ctx = self.ctx[-1]
        env = {**ctx.env, **self.exported_env(), **prefix}
        got = unwrap(
            argv, env, launcher=ctx.launcher, network=ctx.network, network_evidence=ctx.network_evidence
        )
        if isinstance(got, Script):
            self.ctx.append(_Ctx(got.env, got.launcher, got.network, got.network_evidence, got.image))
            saved = self.sc.positional
            self.sc.positional = got.positional
            try:
                self._nested(got.text)
            finally:
                self.sc.positional = saved
                self.ctx.pop()
            return None
        if got is None:
            self._unresolved_module(argv)
            self._other(argv)
            return None
        self._record(got, ctx, raw)
        return True

    def _record(self, got: Found, ctx: _Ctx, raw: str) -> None:
        if len(self.found) >= MAX_SERVERS:
            raise LimitReached(f"more than {MAX_SERVERS} servers")
        got.phase = self.phase
        got.image = got.image or ctx.image
        got.raw = " ".join([*self.raw, raw])
        if self.role_hint:
            got.role, got.role_source = self.role_hint, "label in the file"
            self.role_hint = None
        elif self.comment_hint:
            got.notes.append("comment-role:" + self.comment_hint)
        self.comment_hint = None
        self.found.append(got)

    def _kubectl_apply(self, argv: list[str]) -> bool:
        """`kubectl|oc apply|create|replace -f X`: X (`-`: the standard input, else a file the
        script wrote) is remembered as a manifest that is deployed."""
        if argv[0].rsplit("/", 1)[-1] not in ("kubectl", "oc") or not {"apply", "create", "replace"} & set(
            argv[1:3]
        ):
            return False
        for k, a in enumerate(argv):
            name, eq, val = a.partition("=")
            if name in ("-f", "--filename"):
                target = val if eq else (argv[k + 1] if k + 1 < len(argv) else "")
                text = self.stdin if target == "-" else self.files.get(target)
                if text is not None:
                    self.applied.append(("standard input" if target == "-" else target, text))
        return True

    def manifests(self) -> list[tuple[str, str]]:
        """(where, text) of the manifests the script deploys: what `kubectl apply` sends, else every
        YAML/JSON file it writes."""
        if self.applied:
            return list(self.applied)
        return [(p, t) for p, t in self.files.items() if p.lower().endswith((".yaml", ".yml", ".json"))]

    def _stops(self, argv: list[str]) -> bool:
        """A command that stops servers this phase started (kill, pkill, docker stop ...)."""
        if not any(f.phase == self.phase for f in self.found):
            return False
        cmd = argv[0].rsplit("/", 1)[-1]
        if cmd == "kill":
            return not ({"-0", "-s0"} & set(argv) or argv[1:3] == ["-s", "0"])  # -0: a liveness check
        if cmd in ("pkill", "killall"):  # by name: only names that are the engines
            return any(re.search(r"vllm|python|pt_main_thread|EngineCore", a) for a in argv[1:])
        if cmd in _KILL:
            return cmd != "fuser" or "-k" in argv
        return cmd in ("docker", "podman") and argv[1:2] in (["stop"], ["kill"], ["rm"])

    def _other(self, argv: list[str]) -> None:
        """A Python module or script the file starts that is no vLLM engine (`python -m
        dynamo.frontend`, a P/D proxy): shown, never checked."""
        exe = argv[0].rsplit("/", 1)[-1]
        if not exe.startswith("python") or len(argv) < 2 or len(self.others) >= MAX_SERVERS:
            return
        shown = " ".join(argv[:3] if argv[1] == "-m" else argv[:2])
        if argv[1] == "-m" or argv[1].endswith(".py"):
            line = f"{shown}: not a vLLM engine"
            if line not in self.others:
                self.others.append(line)

    def _unresolved_module(self, argv: list[str]) -> None:
        """`python3 -m "$WORKER_MODULE"` with the variable unknown: remembered for the hint."""
        for k, a in enumerate(argv[:-1]):
            if a == "-m" and argv[0].rsplit("/", 1)[-1].startswith("python"):
                m = re.fullmatch(r"\$\{?([A-Za-z_]\w*)\}?", argv[k + 1])
                if m:
                    self.unresolved_modules.append(m.group(1))
                return


def proxy_ports(argv: list[str]) -> list[tuple[str, str]]:
    """(port, role) pairs a P/D proxy command line names (`--prefiller-ports 8100 8101`)."""
    out: list[tuple[str, str]] = []
    role = ""
    for a in argv[1:]:
        name, eq, val = a.partition("=")
        if name in _PROXY_FLAGS:
            role = _PROXY_FLAGS[name]
            if eq and role:
                out += [(p, role) for p in _ports(val)]
            continue
        if a.startswith("-"):
            role = ""
            continue
        if role:
            out += [(p, role) for p in _ports(a)]
    return out


def _ports(val: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"(?::|^|,)(\d{2,5})\b", val)]


__all__ = ["Interp", "LimitReached", "proxy_ports"]
