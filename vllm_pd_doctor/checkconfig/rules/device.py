"""Which device a server's launch runs vLLM on, read from the launch itself: the container image,
`--device`, the environment (`VLLM_TARGET_DEVICE`, `CUDA_VISIBLE_DEVICES`, `VLLM_CPU_*`, ...) and
the kv-transfer-config's `kv_buffer_device`. None when the launch does not tell (then rules that
only apply to one device stay quiet)."""

from __future__ import annotations

import re

from vllm_pd_doctor.results.launch import Server

_IMAGE_TOKENS = (
    ("cpu", ("cpu",)),
    ("rocm", ("rocm", "amd", "hip")),
    ("xpu", ("xpu", "ipex", "arc")),
    ("tpu", ("tpu",)),
    ("neuron", ("neuron",)),
    ("hpu", ("hpu", "gaudi", "habana")),
    ("npu", ("ascend", "npu")),
    ("cuda", ("cuda", "cu12", "cu13", "cu121", "cu124", "cu126", "cu128", "cu129", "nvidia", "nvcr", "gpu")),
)
"""Image name/tag tokens (split at - _ / . : @) that name a device; the first match wins."""
_CUDA_IMAGES = ("vllm-openai", "ai-dynamo", "llm-d")
"""Images published for CUDA unless a token above says otherwise."""


def _image_device(image: str) -> str | None:
    low = image.lower()
    tokens = set(re.split(r"[-_/.:@]", low))
    for name, words in _IMAGE_TOKENS:
        if tokens & set(words) or any(t.startswith(words) for t in tokens if name in ("cuda", "rocm")):
            return name
    if any(c in low for c in _CUDA_IMAGES):
        return "cuda"
    return None


_ENV_DEVICES = (
    ("CUDA_VISIBLE_DEVICES", "cuda"),
    ("NVIDIA_VISIBLE_DEVICES", "cuda"),
    ("HIP_VISIBLE_DEVICES", "rocm"),
    ("ROCR_VISIBLE_DEVICES", "rocm"),
    ("ZE_AFFINITY_MASK", "xpu"),
    ("ASCEND_RT_VISIBLE_DEVICES", "npu"),
    ("HABANA_VISIBLE_DEVICES", "hpu"),
)


def _argv_value(argv: tuple[str, ...], flag: str) -> str | None:
    """`--device cpu` / `--device=cpu` as given (releases without the flag list it as unknown)."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def launch_device(s: Server) -> tuple[str | None, str]:
    """(device, what it rests on): cpu, cuda, rocm, xpu, tpu, ... or None."""
    cfg = s.config
    dev = cfg.values.get("device") or _argv_value(cfg.argv, "--device")
    if isinstance(dev, str) and dev and dev != "auto":
        return dev.lower(), f"--device {dev}"
    target = cfg.env.get("VLLM_TARGET_DEVICE")
    if target:
        return target.lower(), f"VLLM_TARGET_DEVICE={target}"
    image = getattr(s, "image", None)
    if isinstance(image, str) and image:
        found = _image_device(image)
        if found is not None:
            return found, f"image {image}"
    for var, name in _ENV_DEVICES:
        v = cfg.env.get(var)
        if v is not None and v.strip() not in ("", "-1", "none", "void"):
            return name, f"{var}={v}"
    cpu_env = sorted(k for k in cfg.env if k.startswith("VLLM_CPU_"))
    if cpu_env:
        return "cpu", cpu_env[0]
    buf = (cfg.kv_transfer_config or {}).get("kv_buffer_device")
    if isinstance(buf, str) and buf.lower() in ("cuda", "xpu", "npu", "tpu", "hpu"):
        return buf.lower(), f"kv_buffer_device {buf}"
    return None, ""
