"""Write a tiny hybrid model with random weights: `python make_tiny_model.py CONFIG_DIR OUT_DIR`.

Runs in the target vLLM interpreter (torch, transformers and safetensors come with vLLM).
The architecture comes from CONFIG_DIR/config.json (repro/models/tiny-hybrid: GraniteMoeHybrid,
layers mamba + attention, hidden 128, vocab 512); weights are random (seed 0), bf16, saved as
safetensors. No tokenizer: the engines run with --skip-tokenizer-init and token-id prompts.
The directory is written under a temporary name and renamed when complete; a SIGTERM, SIGHUP
or SIGINT (pd-doctor stopping its process group) removes the temporary directory first.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys


def _remove_on_signal(tmp: str) -> None:
    """Remove the half-written directory when stopped, then exit 128 + the signal."""

    def handler(signum: int, frame: object) -> None:
        shutil.rmtree(tmp, ignore_errors=True)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, handler)


def main() -> int:
    src, out = sys.argv[1], sys.argv[2]
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tmp = f"{out}.tmp-{os.getpid()}"
    _remove_on_signal(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(src)
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    except TypeError:  # older transformers
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.copyfile(os.path.join(src, "config.json"), os.path.join(tmp, "config.json"))
    if os.path.isdir(out):
        shutil.rmtree(tmp, ignore_errors=True)  # another run finished first
    else:
        os.rename(tmp, out)
    n = sum(p.numel() for p in model.parameters())
    print(f"tiny hybrid model: {n} parameters -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
