"""What the four classes share: device strings, seeds, and the output type (a torch tensor
when torch is importable, else NumPy)."""
import os
import sys

import numpy as np

from . import _native

S3GEN_SR = _native.SAMPLE_RATE  # sample rate of synthesized audio (24 kHz)
S3_SR = 16_000  # the speech tokenizer's rate

_TORCH = None


def torch_module():
    """torch if it can be imported (tried once), else None."""
    global _TORCH
    if _TORCH is None:
        try:
            import torch  # noqa: PLC0415

            _TORCH = torch
        except Exception:  # any import failure means: no torch
            _TORCH = False
    return _TORCH or None


def device_name(device):
    """A device as a string ("cpu", "cuda", "cuda:1", "mps"); a torch.device passes too."""
    if device is None:
        return "cpu"
    return str(device)


def seed_for_call(seed):
    """The seed of one call: the one given, else one drawn from torch's generator when torch
    is loaded (so ``torch.manual_seed(n)`` makes a script repeatable, as with the reference),
    else None (the Rust side draws a fresh one)."""
    if seed is not None:
        return int(seed)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "randint"):
        return int(torch.randint(0, 2**62, (1,)).item())
    return None


def output(samples):
    """A (1, N) float32 tensor (torch when importable, else NumPy) of 1-D samples."""
    arr = np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1)
    torch = torch_module()
    if torch is not None:
        return torch.from_numpy(arr)
    return arr


def path(p):
    """A path argument as a string (str or os.PathLike)."""
    return os.fspath(p)


def options(**kw):
    """generate()'s keywords for the native side, None values dropped. Without an explicit
    ``max_new_tokens``, ``$CHATTERBOX_MAX_NEW_TOKENS`` (when set) caps the speech tokens per
    sentence instead of the reference's 1000 (random test checkpoints rarely draw their stop
    token; the tests of unchanged example scripts use it)."""
    if kw.get("max_new_tokens") is None and os.environ.get("CHATTERBOX_MAX_NEW_TOKENS"):
        kw["max_new_tokens"] = int(os.environ["CHATTERBOX_MAX_NEW_TOKENS"])
    return {k: v for k, v in kw.items() if v is not None}
