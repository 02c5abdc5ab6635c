"""chatterbox-speaker cases: the VoiceEncoder (voice_encoder/) and CAMPPlus (s3gen/xvector.py),
run through the reference's own classes and functions with random weights.

Committed: one full-size VoiceEncoder case (a 3 s and an 11 s clip; the weights are stored once,
as f16 values that the reference also runs with, in f32),
one tiny VoiceEncoder case (hidden 16: forward, embeds_from_mels with the overlap rule, a clip
shorter than one partial, and the same weights as a torch pickle `ve_tiny.pt`), and one tiny
CAMPPlus case. `--full` adds a full-size CAMPPlus case (27 MiB of weights: never committed).
"""
import os

import numpy as np
import torch

from chatterbox.models.s3gen.xvector import CAMPPlus
from chatterbox.models.voice_encoder import VoiceEncConfig, VoiceEncoder
from common import abs_tol, rel_tol, speech_like

COMPONENT = "speaker"

# Tolerances (docs/parity.md).
EMBED_ATOL = 1e-4    # L2-normalised embeddings (the contract): f32 LSTM/conv sums in a different order
XVECTOR_RTOL = 1e-4  # raw x-vectors (S3Gen normalises later): 1e-4 of the peak bounds the error after normalisation by 1e-4

# Storage dtype of the full-size VoiceEncoder's weights (rounded to it before the reference runs).
WEIGHT_DTYPE = torch.float16


def perturb_(module, seed=1234, scale=0.1):
    """Moves every float tensor away from its identity init, deterministically (the same
    function as shared/reference/tiny_configs.py), so a port that drops a bias or a BatchNorm
    statistic fails."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.state_dict(keep_vars=True).items()):
            if not t.dtype.is_floating_point:
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                t.copy_(torch.randn(t.shape, generator=g) * scale)
            elif t.dim() == 1 and name.endswith("weight"):
                t.copy_(1.0 + torch.randn(t.shape, generator=g) * scale)
            else:
                t.add_(torch.randn(t.shape, generator=g) * scale * (t.std() if t.numel() > 1 else 1.0))
    return module


def _ve_config(hidden):
    hp = VoiceEncConfig()
    hp.ve_hidden_size = hidden
    return hp


def _ve(hidden, seed):
    torch.manual_seed(seed)
    return perturb_(VoiceEncoder(_ve_config(hidden)), seed=seed + 1234).eval()


def _options():
    # embeds_from_wavs defaults (rate=1.3 is filled in by embeds_from_wavs itself)
    return dict(rate=1.3, overlap=0.5, min_coverage=0.8, batch_size=32, trim_top_db=20.0)


def record(rec):
    c = COMPONENT
    _ve_full(rec, c)
    _ve_tiny(rec, c)
    _campplus(rec, c, "campplus_tiny", tiny=True, seconds=[2.2])
    if rec.full:
        _campplus(rec, c, "campplus_full", tiny=False, seconds=[6.0, 10.0])


def _ve_full(rec, c):
    case = "ve_full_3s_11s"
    if not rec.want(c, case, "ve_wavs"):
        return
    ve = _ve(256, rec.seed)
    # The weights are stored as f16 (2.8 MB instead of 5.6 MB, keeping the fixture under 5 MB):
    # each drawn weight is rounded to the nearest f16 first and the reference runs in f32 with
    # those rounded values, which widen to f32 exactly, so the Rust side (VarBuilder in F32)
    # runs the identical f32 model.
    with torch.no_grad():
        for t in ve.state_dict(keep_vars=True).values():
            t.copy_(t.to(WEIGHT_DTYPE).to(t.dtype))
    # One 11 s recording with 0.6 s of leading and 0.4 s of trailing silence (trimmed by
    # top_db=20); the 3 s clip is its first 3 s (so it is stored once).
    wav = speech_like(16000, 10.0, seed=11, lead_silence=0.6, tail_silence=0.4)
    clips = [[0, 3 * 16000], [0, len(wav)]]
    wavs = [wav[a:b] for a, b in clips]
    utt = ve.embeds_from_wavs(wavs, sample_rate=16000)
    spk = ve.embeds_from_wavs(wavs, sample_rate=16000, as_spk=True)
    rec.case(c, case, "ve_wavs", {"wav": wav}, {"utt": utt, "spk": spk},
             {"utt": abs_tol(EMBED_ATOL), "spk": abs_tol(EMBED_ATOL)},
             config=dict(ve=dict(ve_hidden_size=256), clips=clips, sample_rate=16000, **_options()),
             state_dict={k: v.to(WEIGHT_DTYPE) for k, v in ve.state_dict().items()})


def _ve_tiny(rec, c):
    case = "ve_tiny"
    if not rec.want(c, case, "ve_model"):
        return
    ve = _ve(16, rec.seed + 1)
    g = torch.Generator().manual_seed(rec.seed + 7)
    # forward(): a batch of 3 partial-like mels of 30 frames (unscaled power mels are >= 0).
    mels_fwd = torch.randn(3, 30, 40, generator=g).square()
    with torch.inference_mode():
        fwd = ve(mels_fwd)
    # embeds_from_mels with its own default rate=None (overlap 0.5 -> step 80): 203 frames give
    # 2 partials (the second zero-padded, coverage 0.86), 90 frames one zero-padded partial.
    mel0 = torch.randn(203, 40, generator=g).square().numpy()
    mel1 = torch.randn(90, 40, generator=g).square().numpy()
    utt_mels = ve.embeds_from_mels([mel0, mel1])
    # A clip shorter than one partial (0.7 s): trimmed, then zero-padded to 160 frames.
    short = speech_like(16000, 0.6, seed=5, lead_silence=0.1)
    utt_short = ve.embeds_from_wavs([short], sample_rate=16000)
    # The multilingual checkpoint is a torch pickle: the same weights as `ve_tiny.pt`.
    d = os.path.join(rec.out, c)
    os.makedirs(d, exist_ok=True)
    torch.save(ve.state_dict(), os.path.join(d, f"{case}.pt"))
    outputs = {"forward": fwd, "utt_mels": utt_mels, "utt_short": utt_short, "utt_short_pth": utt_short.copy()}
    rec.case(c, case, "ve_model",
             {"mels_fwd": mels_fwd, "mel0": mel0, "mel1": mel1, "short": short},
             outputs, {k: abs_tol(EMBED_ATOL) for k in outputs},
             config=dict(ve=dict(ve_hidden_size=16), sample_rate=16000, mels_rate=None, **_options()),
             state_dict=ve.state_dict())


def _campplus(rec, c, case, tiny, seconds):
    if not rec.want(c, case, "campplus"):
        return
    torch.manual_seed(rec.seed)
    if tiny:
        # FCM (32 ch, 347 KB of the 512 KB), block layout and 80 fbank bins are hard-coded;
        # shrink the rest below tiny_configs.py's (growth 4, bn_size 2, init 8) to fit the budget.
        cfg = dict(feat_dim=80, embedding_size=192, growth_rate=2, bn_size=2, init_channels=4,
                   memory_efficient=False)
    else:
        cfg = dict(memory_efficient=False)  # S3Gen's CAMPPlus
    m = perturb_(CAMPPlus(**cfg)).eval()
    inputs, outputs = {}, {}
    for i, secs in enumerate(seconds):
        # > 2.03 s: more than one 100-frame CAM segment after the stride-2 TDNN (the last partial).
        wav = speech_like(16000, secs, seed=20 + i)
        with torch.inference_mode():
            outputs[f"xvector{i}"] = m.inference(torch.from_numpy(wav)[None])
        inputs[f"wav{i}"] = wav
    # forward() on a batch of two (random) feature sequences.
    g = torch.Generator().manual_seed(rec.seed + 3)
    feats = torch.randn(2, 40, 80, generator=g)
    with torch.inference_mode():
        outputs["forward"] = m(feats)
    inputs["feats"] = feats
    state = {f"speaker_encoder.{k}": v for k, v in m.state_dict().items()}
    rec.case(c, case, "campplus", inputs, outputs, {k: rel_tol(XVECTOR_RTOL) for k in outputs},
             config=dict(campplus=cfg, sample_rate=16000, prefix="speaker_encoder"),
             state_dict=state)

