"""Reference timings of the DSP stages `crates/chatterbox-dsp/benches/dsp.rs` measures, on the
same shapes, as JSON lines. Run by `cargo xtask bench dsp` (parity/.venv).

Each stage calls what the reference calls: librosa.resample(soxr_hq) as librosa.load(sr=...)
does, torchaudio Resample as S3Gen.embed_ref does, and the reference's feature functions.
"""
import os
import sys
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import librosa  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402
import torchaudio.compliance.kaldi as Kaldi  # noqa: E402

from chatterbox.models.s3gen.utils.mel import mel_spectrogram  # noqa: E402
from chatterbox.models.s3tokenizer.s3tokenizer import S3Tokenizer  # noqa: E402
from chatterbox.models.voice_encoder.config import VoiceEncConfig  # noqa: E402
from chatterbox.models.voice_encoder.melspec import melspectrogram  # noqa: E402
from common import speech_like  # noqa: E402
from harness import bench_args, time_it, write_record  # noqa: E402



def main():
    a = bench_args()
    x44 = speech_like(44100, 37.7, seed=1)
    x24 = speech_like(24000, 10.0, seed=2)
    x16 = speech_like(16000, 10.0, seed=3)
    t24, t16 = torch.from_numpy(x24), torch.from_numpy(x16)
    resampler = torchaudio.transforms.Resample(24000, 16000)
    tok = SimpleNamespace(device="cpu", n_fft=400, window=torch.hann_window(400),
                          _mel_filters=torch.FloatTensor(librosa.filters.mel(sr=16000, n_fft=400, n_mels=128)))
    hp = VoiceEncConfig()

    def fbank():
        f = Kaldi.fbank(t16.unsqueeze(0), num_mel_bins=80)
        return f - f.mean(dim=0, keepdim=True)

    stages = [
        ("resample_hq_44k1_to_24k", "37.7 s @ 44.1 kHz",
         lambda: librosa.resample(x44, orig_sr=44100, target_sr=24000, res_type="soxr_hq")),
        ("resample_hq_44k1_to_16k", "37.7 s @ 44.1 kHz",
         lambda: librosa.resample(x44, orig_sr=44100, target_sr=16000, res_type="soxr_hq")),
        ("resample_sinc_24k_to_16k", "10 s @ 24 kHz", lambda: resampler(t24)),
        ("s3gen_mel", "10 s @ 24 kHz", lambda: mel_spectrogram(t24)),
        ("voice_encoder_mel", "10 s @ 16 kHz", lambda: melspectrogram(x16, hp)),
        ("s3tokenizer_mel", "10 s @ 16 kHz", lambda: S3Tokenizer.log_mel_spectrogram(tok, t16)),
        ("kaldi_fbank_campplus", "10 s @ 16 kHz", fbank),
    ]
    with torch.inference_mode(), open(a.out, "a") as out:
        for stage, shape, f in stages:
            timing = time_it(f, warmup=2, min_iters=10, min_secs=1.0)
            write_record(out, "dsp", stage, "cpu", a.threads, shape, timing, 34)


if __name__ == "__main__":
    main()
