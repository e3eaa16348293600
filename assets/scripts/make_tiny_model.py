"""Write a tiny hybrid model with random weights: `python make_tiny_model.py [--shrink] CONFIG_DIR OUT_DIR`.

Runs in the target vLLM interpreter (torch, transformers and safetensors come with vLLM).
The architecture comes from CONFIG_DIR/config.json (assets/models/tiny-hybrid: GraniteMoeHybrid,
layers mamba + attention, hidden 128, vocab 512); weights are random (seed 0), bf16, saved as
safetensors. With --shrink, CONFIG_DIR holds a family's public config.json (assets/models/nemotron-h,
...): shrink_config.py (beside this script) cuts it to a few small layers of the same family first,
and transformers' own class for that family builds the random weights.
No tokenizer: the engines run with --skip-tokenizer-init and token-id prompts.
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
    args = sys.argv[1:]
    shrinking = "--shrink" in args
    src, out = [a for a in args if a != "--shrink"][:2]
    import json

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tmp = f"{out}.tmp-{os.getpid()}"
    _remove_on_signal(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.manual_seed(0)
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        cfg_dict = json.load(f)
    if shrinking:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from shrink_config import ENGINE_ARGS_FILE, engine_args, shrink

        cfg_dict = shrink(cfg_dict)
        with open(os.path.join(tmp, ENGINE_ARGS_FILE), "w", encoding="utf-8") as f:
            json.dump(engine_args(cfg_dict), f)  # flags the engines need for this family
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg_dict, f, indent=2)
    cfg = AutoConfig.from_pretrained(tmp)
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    except TypeError:  # older transformers
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.save_pretrained(tmp, safe_serialization=True)
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg_dict, f, indent=2)  # the config as given (or shrunk), not transformers' rewrite
    if os.path.isdir(out):
        shutil.rmtree(tmp, ignore_errors=True)  # another run finished first
    else:
        os.rename(tmp, out)
    n = sum(p.numel() for p in model.parameters())
    print(f"tiny {cfg_dict.get('model_type')} model ({type(model).__name__}): {n} parameters -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
