"""Shared helpers of the parity recorders: the fixture writer and deterministic test signals.

Fixture format (docs/parity.md): per case `<out>/<component>/<case>.safetensors` holding inputs
as `in.<name>`, expected outputs as `out.<name>` and, where a module has weights, its state_dict
under the real key names; plus `<case>.json` with component, case, kind, seed, config, tolerances
and the versions of what recorded it.
"""
import contextlib
import json
import os
import platform
from importlib import metadata

import numpy as np
import torch
from safetensors.torch import save_file


def abs_tol(value):
    """max |rust - reference| <= value."""
    return {"kind": "abs", "value": float(value)}


def rel_tol(value):
    """max |rust - reference| / max |reference| <= value."""
    return {"kind": "rel", "value": float(value)}


def exact():
    """Identical integers."""
    return {"kind": "exact"}


def snr_db(min_db):
    """SNR of rust against reference >= min_db."""
    return {"kind": "snr_db", "min_db": float(min_db)}


def _versions():
    out = {"python": platform.python_version()}
    for pkg in ("chatterbox-tts", "torch", "torchaudio", "librosa", "numpy", "soundfile", "soxr",
                "s3tokenizer", "transformers"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _tensor(x):
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
    else:
        t = torch.from_numpy(np.ascontiguousarray(x))
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.contiguous()


class Recorder:
    """Writes the cases of one run; `--only` filtering happens in `want`."""

    def __init__(self, out, seed, only=None, full=False):
        self.out = out
        self.seed = seed
        self.only = only
        self.full = full
        self.written = []

    def want(self, component, case, kind):
        o = self.only
        return (o is None or o == component or o == kind or case.startswith(o)
                or f"{component}/{case}".startswith(o))

    def case(self, component, case, kind, inputs, outputs, tolerances, config=None,
             state_dict=None, notes=None):
        missing = set(tolerances) ^ set(outputs)
        assert not missing, f"{case}: outputs and tolerances differ in {missing}"
        tensors = {}
        for k, v in inputs.items():
            tensors[f"in.{k}"] = _tensor(v)
        for k, v in outputs.items():
            tensors[f"out.{k}"] = _tensor(v)
        for k, v in (state_dict or {}).items():
            assert not (k.startswith("in.") or k.startswith("out.")), k
            tensors[k] = _tensor(v)
        d = os.path.join(self.out, component)
        os.makedirs(d, exist_ok=True)
        save_file(tensors, os.path.join(d, f"{case}.safetensors"))
        meta = {
            "component": component,
            "case": case,
            "kind": kind,
            "seed": self.seed,
            "config": config or {},
            "tolerances": tolerances,
            "reference": _versions(),
        }
        if notes:
            meta["notes"] = notes
        with open(os.path.join(d, f"{case}.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
        size = os.path.getsize(os.path.join(d, f"{case}.safetensors"))
        self.written.append((component, case, size))
        print(f"  {component}/{case}: {size / 1024:.1f} KiB", flush=True)


def speech_like(sr, seconds, seed=0, lead_silence=0.0, tail_silence=0.0, peak=0.5):
    """A deterministic speech-like float32 signal: a gliding f0 with 20 harmonics under a
    moving formant envelope, 4 Hz syllable modulation and a little broadband noise, optionally
    with silence around it (for trim tests)."""
    rng = np.random.default_rng(seed)
    n = int(round(sr * seconds))
    t = np.arange(n) / sr
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * t) + 10 * rng.standard_normal() * np.sin(2 * np.pi * 0.23 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    formant = 700 + 400 * np.sin(2 * np.pi * 0.5 * t + rng.uniform(0, np.pi))
    y = np.zeros(n)
    for h in range(1, 21):
        fh = h * f0
        amp = np.exp(-((fh - formant) / 600.0) ** 2) + 0.3 * np.exp(-((fh - 2500) / 500.0) ** 2) + 0.02
        amp = np.where(fh < sr / 2 * 0.9, amp, 0.0)
        y += amp * np.sin(h * phase) / h
    y *= 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t)
    y += 0.01 * rng.standard_normal(n)
    y = y / np.abs(y).max() * peak
    parts = [np.zeros(int(sr * lead_silence)), y, np.zeros(int(sr * tail_silence))]
    return np.concatenate(parts).astype(np.float32)


def noise(n, seed=0, scale=0.3):
    """White Gaussian noise, float32."""
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal(n)).astype(np.float32)


@contextlib.contextmanager
def patched(obj, name, value):
    """Sets `obj.name = value` for the duration of a `with` block (e.g. a recorder's argmax in
    place of `torch.multinomial`, or a fixed clip in place of `librosa.load`)."""
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def perturb_(module, seed=1234, scale=0.1):
    """tiny_configs.perturb_: move every float tensor of `module` away from its identity init,
    deterministically (LayerNorm gains, biases, the meanflow time mixer's diagonal), so a port
    that drops one fails (the flow and T3 recorders; the S3Tokenizer, speaker and vocoder ones
    keep variants that spare or set some of their tensors)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.state_dict(keep_vars=True).items()):
            if not t.dtype.is_floating_point:
                continue
            if t.dim() == 1 and name.endswith("weight"):
                t.copy_(1.0 + torch.randn(t.shape, generator=g) * scale)
            else:
                t.add_(torch.randn(t.shape, generator=g) * scale * (t.std() if t.numel() > 1 else 1.0))
    return module
