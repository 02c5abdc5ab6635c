"""What the four classes share: device strings, seeds, and the output type (a torch tensor
when torch is importable, else NumPy); and ``TtsBase``, the base of the three text-to-speech
classes."""
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


class TtsBase:
    """What the three text-to-speech classes share: the native model behind them, its
    loading, and the three ways to call it. Each class keeps the reference's own signatures
    and defaults and passes its arguments (``locals()``) on; ``_OPTIONS`` names those the
    native side takes, besides ``seed``, ``max_new_tokens`` and ``speed``."""

    ENC_COND_LEN = 6 * S3_SR
    DEC_COND_LEN = 10 * S3GEN_SR
    _OPTIONS = ()

    def __init__(self, model, device):
        self.sr = S3GEN_SR  # sample rate of synthesized audio
        self.device = device
        self._model = model

    @staticmethod
    def _load(variant, ckpt_dir, device, dtype, watermark, t3_model=None):
        """The native model of ``variant`` from ``ckpt_dir`` (None: the Hugging Face hub)."""
        return _native.TtsModel.load(
            variant,
            None if ckpt_dir is None else path(ckpt_dir),
            device_name(device),
            dtype=dtype,
            t3_model=t3_model,
            watermark=watermark,
        )

    def prepare_conditionals(self, wav_fpath, exaggeration=0.5):
        """Makes the clip at ``wav_fpath`` the voice of the following generations."""
        self._model.prepare_conditionals(path(wav_fpath), exaggeration)

    def _options(self, args):
        """The native side's options from one call's arguments (its ``locals()``)."""
        picked = {k: args[k] for k in self._OPTIONS if k in args}
        return options(
            **picked,
            seed=seed_for_call(args["seed"]),
            max_new_tokens=args["max_new_tokens"],
            speed=args["speed"],
        )

    def _generate(self, text, args):
        return output(self._model.generate(text, self._options(args)))

    def _stream(self, text, args):
        return self._model.stream(text, self._options(args))

    def _generate_many(self, texts, args):
        return [output(w) for w in self._model.generate_many(list(texts), self._options(args))]
