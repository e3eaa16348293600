"""Which platform's config decisions a run takes; a CUDA deployment judged from a CPU box.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). vLLM applies its platform's rules
while it builds the config (`Platform.check_and_update_config`), sizes the blocks with the
platform's `update_block_size_for_backend` and the attention backend the platform picks. On the
platform this interpreter runs, all of that is vLLM's own code. For another platform (`--platform
cuda` on a CPU box) this module takes what it can from vLLM's CUDA-side code and names, in
`decisions`, every decision it could not take from vLLM.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
from collections.abc import Iterator
from typing import Any

# The attention backends each platform's engine would pick, first importable one wins. On CUDA
# the pick depends on the GPU (CudaPlatform.get_attn_backend_cls); these are the Hopper picks.
BACKENDS: dict[str, dict[str, tuple[str, ...]]] = {
    "cpu": {"mha": ("CPU_ATTN",), "mla": ("CPU_MLA", "CPU_ATTN")},
    "cuda": {"mha": ("FLASH_ATTN",), "mla": ("FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")},
}


class PlatformError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def running() -> str:
    """The platform this interpreter's vLLM resolved (its VllmConfig applies that one's rules)."""
    from vllm.platforms import current_platform

    return "cuda" if current_platform.is_cuda() else "cpu"


def is_cuda_build() -> bool:
    """vLLM's own test for a CPU build (its version names cpu), and torch built with CUDA."""
    try:
        import torch

        plat = importlib.import_module("vllm.platforms")
        says_cpu = plat.vllm_version_matches_substr("cpu")
    except Exception:
        return False
    return bool(getattr(torch.version, "cuda", None)) and not says_cpu


def default() -> str:
    """The platform a run judges when none is asked for: cuda for a CUDA build, even without a GPU."""
    return "cuda" if running() == "cuda" or is_cuda_build() else "cpu"


def backend(platform: str, use_mla: bool) -> tuple[Any, str]:
    """The attention backend class the platform's engine would use, and its enum name."""
    reg = importlib.import_module("vllm.v1.attention.backends.registry")
    enum = getattr(reg, "AttentionBackendEnum", None) or getattr(reg, "_Backend", None)
    names = BACKENDS[platform]["mla" if use_mla else "mha"]
    tried = []
    for name in names:
        member = getattr(enum, name, None) if enum is not None else None
        if member is None or not hasattr(member, "get_class"):
            tried.append(f"{name} (no entry)")
            continue
        try:
            return member.get_class(), name
        except Exception as exc:
            tried.append(f"{name} ({type(exc).__name__})")
    raise PlatformError("choose the attention backend", "none of " + ", ".join(tried) + " could be loaded")


def _cuda_module_error() -> str | None:
    try:
        importlib.import_module("vllm.platforms.cuda")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _module_tree(module: str) -> ast.Module | None:
    """A module's source, read and parsed, not imported (None where it cannot be)."""
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec else None
        if not origin:
            return None
        with open(origin, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (ImportError, OSError, SyntaxError, ValueError):
        return None


def _class_defines(module: str, method: str) -> bool | None:
    """Whether a platform module's source (read, not imported) defines `method` itself."""
    tree = _module_tree(module)
    if tree is None:
        return None
    return any(isinstance(n, ast.FunctionDef) and n.name == method for n in ast.walk(tree))


def platform_class(platform: str) -> tuple[Any, list[str]]:
    """The class whose block sizing a `platform` engine runs, and what could not come from vLLM."""
    from vllm.platforms import current_platform

    if platform == running():
        return type(current_platform), []
    if platform == "cpu":
        return importlib.import_module("vllm.platforms.cpu").CpuPlatform, []
    error = _cuda_module_error()
    if error is None:
        return importlib.import_module("vllm.platforms.cuda").CudaPlatform, []
    base = importlib.import_module("vllm.platforms.interface").Platform
    own = _class_defines("vllm.platforms.cuda", "update_block_size_for_backend")
    if own:
        raise PlatformError(
            "size the KV cache blocks as CUDA would",
            "this release's CudaPlatform has its own update_block_size_for_backend and "
            f"vllm.platforms.cuda cannot be imported here ({error})",
        )
    return base, [
        "block sizing: Platform.update_block_size_for_backend, which this release's CudaPlatform "
        f"inherits (its source read, not imported: {error})"
    ]


@contextlib.contextmanager
def config_rules(platform: str) -> Iterator[list[str]]:
    """While VllmConfig is built for `platform`: its rules, or, from another platform, none.

    Yields the decisions that could not be taken from vLLM (empty on the running platform).
    """
    if platform == running():
        yield []
        return
    from vllm.platforms import current_platform

    pcls = type(current_platform)
    base = importlib.import_module("vllm.platforms.interface").Platform
    error = _cuda_module_error() if platform == "cuda" else None
    saved = {name: pcls.__dict__.get(name) for name in ("check_and_update_config", *CAPABILITIES)}
    pcls.check_and_update_config = base.__dict__["check_and_update_config"]  # type: ignore[method-assign]
    target = "CudaPlatform" if platform == "cuda" else f"the {platform} platform"
    notes = [
        f"config rules: {pcls.__qualname__}.check_and_update_config (this box's platform) was not run, "
        f"and {target}'s could not be ({error or 'not imported here'}); the config is VllmConfig's "
        "own (e.g. prefix caching and chunked prefill stay on for MLA, as on CUDA)"
    ]
    try:
        notes += _take_capabilities(pcls, platform, target)
        yield notes
    finally:
        for name, value in saved.items():
            if value is None:
                if name in pcls.__dict__:
                    delattr(pcls, name)
            else:
                setattr(pcls, name, value)


CAPABILITIES = ("support_hybrid_kv_cache",)
"""Platform answers VllmConfig asks while it is built (whether the hybrid KV cache manager may stay
on). Judged as another platform, that platform's answers: a CUDA wheel on a box without a GPU
resolves no platform, whose answer (False) would turn the hybrid KV cache manager off."""


def _take_capabilities(pcls: Any, platform: str, target: str) -> list[str]:
    """Give `pcls` the judged platform's answers to CAPABILITIES (from its class where it imports
    here, else from its source: a method that returns a constant); the ones not taken, named."""
    module = {"cpu": "vllm.platforms.cpu", "cuda": "vllm.platforms.cuda"}.get(platform)
    other = None
    if module is not None and not (platform == "cuda" and _cuda_module_error()):
        with contextlib.suppress(Exception):
            other = platform_class(platform)[0]
    missing = []
    for name in CAPABILITIES:
        fn = getattr(other, name, None) if other is not None and other is not pcls else None
        answer = fn() if fn is not None else (_constant_answer(module, name) if module else None)
        if answer is None:
            missing.append(f"{name}: {target}'s answer not read here, this box's platform's taken")
            continue
        setattr(pcls, name, classmethod(lambda cls, _a=answer: _a))
    return missing


def _constant_answer(module: str, method: str) -> Any:
    """What `method` returns in a platform module's source (read, not imported) when its body is
    one `return <constant>`; None otherwise."""
    tree = _module_tree(module)
    if tree is None:
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and n.name == method:
            body = [b for b in n.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant):
                return body[0].value.value
    return None
