"""chatterbox-s3gen tokenizer cases: the S3 speech tokenizer (S3TokenizerV2, 25 Hz) run through
chatterbox's `S3Tokenizer` wrapper (chatterbox/models/s3tokenizer/s3tokenizer.py) on top of the
PyPI `s3tokenizer` package (model_v2.py, utils.py).

Committed cases use the tiny configuration of tiny_configs.py (64 wide, 1 head of 64, 1 layer,
128 mels): single clips, a padded batch with `max_len` truncation, the > 30 s sliding-window path
mixed with a short clip, and the 40 ms `pad`. `--full` adds full-size cases (1280 wide, 6 layers,
random weights, ~0.5 GB each): write them outside the repository (`--out /tmp/full`).

Outputs: the integer codes and lengths (exact), the encoder output that feeds the quantiser and
the quantiser's 8-dim projection (both "pre-quantiser activations", rel 1e-4). The projection
of every encoder row is recorded, padded rows included, so a port must reproduce the
reference's batching, masks and segmenting, not only the valid tokens.
"""
import numpy as np
import torch

from chatterbox.models.s3tokenizer import S3Tokenizer
from s3tokenizer.model_v2 import ModelConfig, S3TokenizerV2
from common import exact, noise, rel_tol, speech_like

COMPONENT = "s3tokenizer"

# Tolerances (docs/parity.md).
CODES = exact()       # integer codes and lengths: identical or wrong
ACT_RTOL = 1e-4       # encoder output / FSQ projection: f32 GEMM summation order differs (issue 5)
PAD_EXACT = exact()   # pad(): integer lengths

SR = 16000
TINY = dict(n_mels=128, n_audio_state=64, n_audio_head=1, n_audio_layer=1)


def perturb_(module, seed=1234, scale=0.1):
    """tiny_configs.perturb_: move every float tensor away from its identity init,
    deterministically (LayerNorm gains, biases), keeping the deterministic buffers exact."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.state_dict(keep_vars=True).items()):
            if not t.dtype.is_floating_point:
                continue
            if name.endswith("_mel_filters") or name.endswith("window"):
                continue
            elif t.dim() == 1 and name.endswith("weight"):
                t.copy_(1.0 + torch.randn(t.shape, generator=g) * scale)
            else:
                t.add_(torch.randn(t.shape, generator=g) * scale * (t.std() if t.numel() > 1 else 1.0))
    return module


class TinyS3Tokenizer(S3Tokenizer):
    """chatterbox's S3Tokenizer.__init__ calls S3TokenizerV2.__init__(name) WITHOUT the config
    (always 1280 wide, 6 layers). As in tiny_configs.py, this subclass passes the config through
    and registers the same two buffers; every method is the reference's."""

    def __init__(self, config):
        S3TokenizerV2.__init__(self, "speech_tokenizer_v2_25hz", config)
        import librosa
        self.n_fft = 400
        self.register_buffer("_mel_filters", torch.FloatTensor(
            librosa.filters.mel(sr=SR, n_fft=400, n_mels=config.n_mels)))
        self.register_buffer("window", torch.hann_window(self.n_fft))


def tiny_tokenizer(seed=0):
    torch.manual_seed(seed)
    return perturb_(TinyS3Tokenizer(ModelConfig(**TINY))).eval()


def full_tokenizer(seed=0):
    torch.manual_seed(seed)
    return perturb_(S3Tokenizer("speech_tokenizer_v2_25hz")).eval()


def run(tok, wavs, max_len):
    """`tok.forward(wavs, max_len=...)` with forward hooks on the encoder (its output is the
    quantiser's input) and on the FSQ projection, which record what the reference computed."""
    seen = {}

    def grab(key):
        def hook(_m, _inp, out):
            seen[key] = (out[0] if isinstance(out, tuple) else out).detach().clone()
        return hook

    hs = [tok.encoder.register_forward_hook(grab("hidden")),
          tok.quantizer._codebook.project_down.register_forward_hook(grab("proj"))]
    try:
        codes, lens = tok.forward([torch.from_numpy(w) for w in wavs], max_len=max_len)
    finally:
        for h in hs:
            h.remove()
    hidden = seen["hidden"]
    proj = seen["proj"].reshape(hidden.shape[0], hidden.shape[1], -1)
    return codes, lens, hidden, proj


def margin(proj):
    """Distance of tanh(proj) * 0.999 from the nearest rounding boundary (+-0.5): how far the
    closest code digit is from flipping."""
    h = torch.tanh(proj) * 0.9990000128746033
    return float((h.abs() - 0.5).abs().min())


def state_dict(tok, buffers):
    sd = {k: v for k, v in tok.state_dict().items()}
    if not buffers:
        sd = {k: v for k, v in sd.items() if not (k.endswith("_mel_filters") or k.endswith("window"))}
    return sd


def model_config(tok):
    c = tok.config
    return dict(n_mels=c.n_mels, n_audio_ctx=c.n_audio_ctx, n_audio_state=c.n_audio_state,
                n_audio_head=c.n_audio_head, n_audio_layer=c.n_audio_layer,
                n_codebook_size=c.n_codebook_size)


def long_wav(tile, gains, reverse):
    """A > 30 s clip from a short tile: piece k is the tile (time-reversed where reverse[k]) times
    gains[k] (multiples of 1/8, so the f32 products are the same on every platform)."""
    parts = [(tile[::-1] if r else tile) * np.float32(g) for g, r in zip(gains, reverse)]
    return np.concatenate(parts).astype(np.float32)


def forward_case(rec, tok, case, wavs, max_len, buffers, with_hidden, extra_inputs=None,
                 extra_config=None, inputs_from_wavs=True):
    codes, lens, hidden, proj = run(tok, wavs, max_len)
    outputs = {"codes": codes.to(torch.int64), "code_lens": lens.to(torch.int64), "proj": proj}
    tolerances = {"codes": CODES, "code_lens": CODES, "proj": rel_tol(ACT_RTOL)}
    if with_hidden:
        outputs["hidden"] = hidden
        tolerances["hidden"] = rel_tol(ACT_RTOL)
    inputs = {f"wav{i}": w for i, w in enumerate(wavs)} if inputs_from_wavs else {}
    inputs.update(extra_inputs or {})
    config = dict(model=model_config(tok), sample_rate=SR, max_len=max_len, n_wavs=len(wavs),
                  buffers_in_checkpoint=buffers)
    config.update(extra_config or {})
    rec.case(COMPONENT, case, "forward", inputs, outputs, tolerances, config=config,
             state_dict=state_dict(tok, buffers),
             notes=f"smallest distance of a code digit from its rounding boundary: {margin(proj):.2e}")


def record(rec):
    c = COMPONENT
    tok = tiny_tokenizer()

    # One 2 s clip, no truncation; the checkpoint carries _mel_filters and window.
    case = "single_speech_2s"
    if rec.want(c, case, "forward"):
        w = speech_like(SR, 2.0, seed=101) + noise(2 * SR, seed=102, scale=0.02)
        forward_case(rec, tok, case, [w.astype(np.float32)], None, True, True)

    # Three clips of different lengths (none a multiple of 40 ms) batched with zero padding and
    # masks; max_len=24 truncates the first clip's mel to 96 frames. No buffers in the checkpoint.
    case = "batch3_max_len"
    if rec.want(c, case, "forward"):
        wavs = [speech_like(SR, 1.3, seed=103), noise(12321, seed=104, scale=0.2),
                speech_like(SR, 0.51, seed=105, peak=0.9)]
        forward_case(rec, tok, case, wavs, 24, False, True)

    # A 54.6 s clip (> 3000 mel frames: the sliding-window path; 30 s segments every 26 s, the
    # second one cut short by the end yet not the last, the third 2.6 s long; merged by dropping
    # 2 s of each overlap) batched with a 0.6 s clip (padded to a 30 s segment in the same batch).
    case = "long_mixed_batch"
    if rec.want(c, case, "forward"):
        tile = speech_like(SR, 0.7, seed=106) + noise(int(0.7 * SR), seed=107, scale=0.01)
        tile = tile.astype(np.float32)
        gains = [(k % 7 + 1) / 8 for k in range(78)]
        reverse = [bool((k * 5) % 3 == 1) for k in range(78)]
        short = speech_like(SR, 0.6, seed=108)
        wavs = [long_wav(tile, gains, reverse), short]
        forward_case(rec, tok, case, wavs, None, False, False,
                     extra_inputs={"tile": tile, "wav1": short},
                     extra_config=dict(long_wav=dict(tile_gains=gains, tile_reverse=reverse)),
                     inputs_from_wavs=False)

    # S3Tokenizer.pad: lengths rounded up to 40 ms with the reference's float arithmetic
    # (4480 samples = 7 tokens at 16 kHz gets a spurious 8th token from (n / sr) * 25 rounding
    # up), also at 24 kHz and 22.05 kHz.
    case = "pad_40ms"
    if rec.want(c, case, "pad"):
        cases = [(1, 16000), (640, 16000), (1601, 16000), (4480, 16000), (8961, 16000),
                 (1000, 24000), (2205, 22050), (3001, 22050)]
        # The padded signal is the input followed by zeros, so only the lengths are recorded
        # (the Rust test checks that the samples are kept).
        padded = [S3Tokenizer.pad(None, [np.zeros(n, np.float32)], sr)[0].shape[-1] for n, sr in cases]
        rec.case(c, case, "pad",
                 {"lengths": np.array([n for n, _ in cases], np.int64),
                  "sample_rates": np.array([sr for _, sr in cases], np.int64)},
                 {"padded_lengths": np.array(padded, np.int64)}, {"padded_lengths": PAD_EXACT})

    if rec.full:
        big = full_tokenizer()
        for secs, max_len in ((6, 150), (10, None)):
            case = f"full_speech_{secs}s"
            if rec.want(c, case, "forward"):
                w = speech_like(SR, secs, seed=110 + secs) + noise(secs * SR, seed=120 + secs, scale=0.02)
                forward_case(rec, big, case, [w.astype(np.float32)], max_len, False, True)
