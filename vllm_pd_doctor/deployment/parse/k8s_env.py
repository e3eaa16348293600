"""A container's environment and its `$(VAR)` references, as the kubelet makes them.

The kubelet builds the environment (`makeEnvironmentVariables`): `envFrom` sources first, in order
(every key of a ConfigMap or Secret, with the source's `prefix`), then `env` entries in order, each
`value` expanded against the variables defined before it; `command` and `args` are then expanded
against the whole environment. The expansion (`third_party/forked/golang/expansion/expand.go` in
kubernetes) reads `$$` as a literal `$`, `$(NAME)` as the variable's value when NAME is defined and
as written otherwise, an unclosed `$(` and a `$` before any other character as written.

Values the files cannot tell (a Secret, the downward API, a ConfigMap not in the files) are
known-unknowns: the variable is left undefined, so `$(NAME)` stays as written, and its origin is
kept to be named in the output.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
"""A valid environment variable name (the kubelet skips envFrom keys that are not)."""


def expand(text: str, mapping: Callable[[str], str | None]) -> str:
    """`text` with its `$(NAME)` references replaced, exactly as the kubelet's Expand does."""
    out: list[str] = []
    i, n = 0, len(text)
    start = 0
    while i < n:
        if text[i] == "$" and i + 1 < n:
            out.append(text[start:i])
            nxt = text[i + 1]
            if nxt == "$":  # escaped operator
                out.append("$")
                i += 2
            elif nxt == "(":
                close = text.find(")", i + 2)
                if close < 0:  # incomplete reference: as written, scanning on after the `(`
                    out.append("$(")
                    i += 2
                else:
                    name = text[i + 2 : close]
                    got = mapping(name)
                    out.append(got if got is not None else f"$({name})")
                    i = close + 1
            else:
                out.append("$" + nxt)
                i += 2
            start = i
            continue
        i += 1
    out.append(text[start:])
    return "".join(out)


@dataclass(frozen=True)
class Resources:
    """The ConfigMaps and Secrets the given files define, by name."""

    configmaps: dict[str, dict[str, str]] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, docs: list[Any]) -> Resources:
        cms: dict[str, dict[str, str]] = {}
        secrets: dict[str, dict[str, str]] = {}
        for d in docs:
            if not isinstance(d, dict) or not isinstance(d.get("metadata"), dict):
                continue
            name = str(d["metadata"].get("name", ""))
            if d.get("kind") == "ConfigMap":
                cms[name] = {str(k): _text(v) for k, v in (d.get("data") or {}).items()}
            elif d.get("kind") == "Secret":
                secrets[name] = _secret_data(d)
        return cls(cms, secrets)


def _secret_data(d: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's keys: `data` (base64) and `stringData` (which wins, as the API server merges)."""
    out: dict[str, str] = {}
    for k, v in (d.get("data") or {}).items():
        try:
            out[str(k)] = base64.b64decode(str(v), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
    out.update({str(k): _text(v) for k, v in (d.get("stringData") or {}).items()})
    return out


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return "" if v is None else str(v)


@dataclass
class ContainerEnv:
    """A container's environment as the kubelet builds it: the values known, and where each
    variable the files cannot tell comes from."""

    values: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)

    def lookup(self, overrides: Mapping[str, str]) -> Callable[[str], str | None]:
        """The mapping for command/args: --set values first, then the environment."""

        def get(name: str) -> str | None:
            if name in overrides:
                return overrides[name]
            return self.values.get(name)

        return get

    def process_env(self) -> dict[str, str]:
        """What the process sees, a value the files cannot tell as `<origin>` (never loopback,
        never a value)."""
        out = dict(self.values)
        for name, origin in self.unknown.items():
            if not name.endswith("*"):
                out[name] = f"<{origin}>"
        return out


def container_env(c: Mapping[str, Any], res: Resources, overrides: Mapping[str, str]) -> ContainerEnv:
    """`envFrom` then `env` of one container, in the kubelet's order."""
    env = ContainerEnv()
    env_from, env_list = c.get("envFrom"), c.get("env")
    for src in env_from if isinstance(env_from, list) else []:
        if isinstance(src, dict):
            _env_from(src, res, env)
    if isinstance(env_list, dict):  # a compose-style mapping some formats hand on
        env_list = [{"name": k, "value": v} for k, v in env_list.items()]
    for item in env_list if isinstance(env_list, list) else []:
        if isinstance(item, str) and "=" in item:
            k, _, v = item.partition("=")
            item = {"name": k, "value": v}
        if not isinstance(item, dict) or "name" not in item:
            continue
        name = str(item["name"])
        if item.get("value") is not None or "valueFrom" not in item:
            value = expand(_text(item.get("value")), env.lookup(overrides))
            env.values[name] = value
            env.unknown.pop(name, None)
            continue
        known, origin = _value_from(item.get("valueFrom"), res)
        if name in overrides:
            env.values[name] = overrides[name]
        elif known is not None:
            env.values[name] = known
            env.unknown.pop(name, None)
        else:
            env.values.pop(name, None)
            env.unknown[name] = origin
    return env


def _env_from(src: Mapping[str, Any], res: Resources, env: ContainerEnv) -> None:
    prefix = str(src.get("prefix") or "")
    for kind, key, table in (
        ("ConfigMap", "configMapRef", res.configmaps),
        ("Secret", "secretRef", res.secrets),
    ):
        ref = src.get(key)
        if not isinstance(ref, dict):
            continue
        name = str(ref.get("name", ""))
        data = table.get(name)
        if data is None:
            env.unknown[f"{prefix}*"] = f"envFrom {kind} {name} (not in the files)"
            continue
        for k, v in data.items():
            if _ENV_NAME.match(prefix + k):
                env.values[prefix + k] = v
                env.unknown.pop(prefix + k, None)


def _value_from(vf: Any, res: Resources) -> tuple[str | None, str]:
    """(the value when the files tell it, where it comes from)."""
    if not isinstance(vf, dict):
        return None, "valueFrom"
    for kind, key, table in (
        ("ConfigMap", "configMapKeyRef", res.configmaps),
        ("Secret", "secretKeyRef", res.secrets),
    ):
        ref = vf.get(key)
        if isinstance(ref, dict):
            name, k = str(ref.get("name", "")), str(ref.get("key", ""))
            data = table.get(name)
            if data is not None and k in data:
                return data[k], f"{kind} {name} key {k}"
            where = "not in the files" if data is None else "no such key in it"
            return None, f"{kind} {name} key {k} ({where})"
    ref = vf.get("fieldRef")
    if isinstance(ref, dict):
        return None, f"fieldRef:{ref.get('fieldPath', '?')}"
    ref = vf.get("resourceFieldRef")
    if isinstance(ref, dict):
        return None, f"resourceFieldRef:{ref.get('resource', '?')}"
    return None, "valueFrom " + ", ".join(str(k) for k in vf)
