"""chatterbox-dsp cases: audio decoding, resampling, STFT/iSTFT, mel filterbanks, silence trim
and the four feature extractors, each run through the reference's own functions."""
import io
from types import SimpleNamespace

import librosa
import numpy as np
import soundfile as sf
import torch
import torchaudio
import torchaudio.compliance.kaldi as Kaldi

from chatterbox.models.s3gen.utils.mel import mel_spectrogram
from chatterbox.models.s3tokenizer.s3tokenizer import S3Tokenizer
from chatterbox.models.voice_encoder.config import VoiceEncConfig
from chatterbox.models.voice_encoder.melspec import melspectrogram
from common import abs_tol, exact, noise, rel_tol, snr_db, speech_like

COMPONENT = "dsp"

# Tolerances (docs/parity.md). Log-domain features: 1e-4 absolute; linear ones: 1e-5 of the peak.
LOG_ATOL = 1e-4      # log mel / fbank: f32 FFT and log on both sides
LINEAR_RTOL = 1e-5   # STFT, power mel, resampled signal: f32 rounding relative to the peak
FILTER_RTOL = 1e-6   # filterbanks are computed in f64 on both sides and stored as f32
PCM_ATOL = 1e-7      # integer PCM decodes to the same exactly representable floats
HQ_MIN_SNR = 50.0    # a different (rubato) resampler than librosa's soxr_hq: judged by SNR
SOXR_RTOL = 1e-6     # libsoxr on both sides, called alike: bit-identical on x86-64 (measured 0)


def record(rec):
    c = COMPONENT
    _stft(rec, c)
    _istft(rec, c)
    _mel_filters(rec, c)
    _features(rec, c)
    _trim(rec, c)
    _resample(rec, c)
    _decode(rec, c)
    _soxr_route(rec, c)


def _stft(rec, c):
    cases = [
        ("stft_400_160_center", 16000, 0.4, dict(n_fft=400, hop=160, win_length=400, center=True)),
        ("stft_1920_480_nocenter", 24000, 0.3, dict(n_fft=1920, hop=480, win_length=1920, center=False)),
        ("stft_16_4_center", 24000, 0.05, dict(n_fft=16, hop=4, win_length=16, center=True)),
        ("stft_512_160_win400", 16000, 0.3, dict(n_fft=512, hop=160, win_length=400, center=True)),
    ]
    for i, (case, sr, secs, cfg) in enumerate(cases):
        if not rec.want(c, case, "stft"):
            continue
        x = speech_like(sr, secs, seed=i) + noise(int(round(sr * secs)), seed=i, scale=0.05)
        s = torch.stft(torch.from_numpy(x), cfg["n_fft"], cfg["hop"], cfg["win_length"],
                       window=torch.hann_window(cfg["win_length"]), center=cfg["center"],
                       pad_mode="reflect", return_complex=True)
        rec.case(c, case, "stft", {"x": x}, {"re": s.real, "im": s.imag},
                 {"re": rel_tol(LINEAR_RTOL), "im": rel_tol(LINEAR_RTOL)}, config=cfg)


def _istft(rec, c):
    # HiFT's iSTFT (n_fft 16, hop 4, center) on an arbitrary spectrum, and a round trip at 400/160.
    g = torch.Generator().manual_seed(rec.seed)
    if rec.want(c, "istft_16_4", "istft"):
        re, im = torch.randn(9, 120, generator=g), torch.randn(9, 120, generator=g)
        y = torch.istft(torch.complex(re, im), 16, 4, 16, window=torch.hann_window(16))
        rec.case(c, "istft_16_4", "istft", {"re": re, "im": im}, {"y": y}, {"y": rel_tol(LINEAR_RTOL)},
                 config=dict(n_fft=16, hop=4, win_length=16, center=True))
    if rec.want(c, "istft_400_160", "istft"):
        x = torch.from_numpy(speech_like(16000, 0.3, seed=7))
        s = torch.stft(x, 400, 160, 400, window=torch.hann_window(400), return_complex=True)
        y = torch.istft(s, 400, 160, 400, window=torch.hann_window(400))
        rec.case(c, "istft_400_160", "istft", {"re": s.real, "im": s.imag}, {"y": y},
                 {"y": rel_tol(LINEAR_RTOL)}, config=dict(n_fft=400, hop=160, win_length=400, center=True))


def _mel_filters(rec, c):
    cases = [
        ("mel_ve_16k_400_40", dict(sr=16000, n_fft=400, n_mels=40, fmin=0.0, fmax=8000.0)),
        ("mel_s3tok_16k_400_128", dict(sr=16000, n_fft=400, n_mels=128, fmin=0.0, fmax=None)),
        ("mel_s3gen_24k_1920_80", dict(sr=24000, n_fft=1920, n_mels=80, fmin=0.0, fmax=8000.0)),
        ("mel_22k_512_32_fmin20", dict(sr=22050, n_fft=512, n_mels=32, fmin=20.0, fmax=None)),
        ("mel_44k_1024_48_50_16k", dict(sr=44100, n_fft=1024, n_mels=48, fmin=50.0, fmax=16000.0)),
    ]
    for case, cfg in cases:
        if not rec.want(c, case, "mel_filters"):
            continue
        m = librosa.filters.mel(sr=cfg["sr"], n_fft=cfg["n_fft"], n_mels=cfg["n_mels"],
                                fmin=cfg["fmin"], fmax=cfg["fmax"])
        rec.case(c, case, "mel_filters", {}, {"filters": m}, {"filters": rel_tol(FILTER_RTOL)}, config=cfg)


def _features(rec, c):
    # S3Gen's 24 kHz log-magnitude mel (chatterbox/models/s3gen/utils/mel.py)
    for case, x in [("s3gen_mel_speech", speech_like(24000, 1.5, seed=1)),
                    ("s3gen_mel_short", noise(1000, seed=2)),
                    ("s3gen_mel_clipped", np.clip(speech_like(24000, 0.5, seed=3, peak=1.3), -1.2, 1.2))]:
        if rec.want(c, case, "s3gen_mel"):
            m = mel_spectrogram(torch.from_numpy(x))[0]
            rec.case(c, case, "s3gen_mel", {"wav": x}, {"mel": m}, {"mel": abs_tol(LOG_ATOL)})

    # VoiceEncoder's 40-bin power mel (chatterbox/models/voice_encoder/melspec.py), (M, T)
    for case, x in [("ve_mel_speech", speech_like(16000, 1.5, seed=4)),
                    ("ve_mel_noise_short", noise(2000, seed=5))]:
        if rec.want(c, case, "ve_mel"):
            m = melspectrogram(x, VoiceEncConfig())
            rec.case(c, case, "ve_mel", {"wav": x}, {"mel": m}, {"mel": rel_tol(LINEAR_RTOL)})

    # S3Tokenizer's whisper-style log mel (chatterbox/models/s3tokenizer/s3tokenizer.py), called
    # as the reference method on an object holding exactly the buffers it reads.
    tok = SimpleNamespace(
        device="cpu", n_fft=400, window=torch.hann_window(400),
        _mel_filters=torch.FloatTensor(librosa.filters.mel(sr=16000, n_fft=400, n_mels=128)))
    for case, x in [("s3tok_mel_speech", speech_like(16000, 1.0, seed=6)),
                    ("s3tok_mel_noise_short", noise(4800, seed=7))]:
        if rec.want(c, case, "s3tokenizer_mel"):
            m = S3Tokenizer.log_mel_spectrogram(tok, torch.from_numpy(x))
            rec.case(c, case, "s3tokenizer_mel", {"wav": x}, {"mel": m}, {"mel": abs_tol(LOG_ATOL)})

    # Kaldi fbank as CAMPPlus uses it (xvector.extract_feature), raw and mean-normalised
    for case, x, cmn in [("fbank_speech", speech_like(16000, 1.5, seed=8), False),
                         ("fbank_speech_cmn", speech_like(16000, 1.5, seed=8), True),
                         ("fbank_noise_short", noise(1200, seed=9), False)]:
        if rec.want(c, case, "kaldi_fbank"):
            f = Kaldi.fbank(torch.from_numpy(x).unsqueeze(0), num_mel_bins=80)
            if cmn:
                f = f - f.mean(dim=0, keepdim=True)
            rec.case(c, case, "kaldi_fbank", {"wav": x}, {"feats": f}, {"feats": abs_tol(LOG_ATOL)},
                     config=dict(num_mel_bins=80, subtract_mean=cmn))


def _trim(rec, c):
    # librosa.effects.trim(top_db=20) as VoiceEncoder.embeds_from_wavs calls it
    sr = 16000
    lead = speech_like(sr, 0.6, seed=10, lead_silence=0.3, tail_silence=0.4)
    lead = lead + noise(len(lead), seed=11, scale=1e-4)
    cases = [("trim_lead_tail", lead), ("trim_all_silent", np.zeros(8000, np.float32)),
             ("trim_nothing", noise(9000, seed=12))]
    for case, x in cases:
        if rec.want(c, case, "trim"):
            _, idx = librosa.effects.trim(x, top_db=20)
            rec.case(c, case, "trim", {"wav": x}, {"range": np.asarray(idx, dtype=np.int64)},
                     {"range": exact()}, config=dict(top_db=20.0, frame_length=2048, hop_length=512))


def _resample(rec, c):
    for i, (orig, new, secs) in enumerate([(24000, 16000, 1.0), (16000, 24000, 0.5), (44100, 16000, 0.4),
                                           (22050, 24000, 0.4)]):
        case = f"resample_sinc_{orig}_{new}"
        if rec.want(c, case, "resample_sinc"):
            x = speech_like(orig, secs, seed=20 + i)
            y = torchaudio.transforms.Resample(orig, new)(torch.from_numpy(x))
            rec.case(c, case, "resample_sinc", {"x": x}, {"y": y}, {"y": rel_tol(LINEAR_RTOL)},
                     config=dict(orig=orig, new=new))
    for i, (orig, new, secs) in enumerate([(44100, 24000, 1.0), (24000, 16000, 1.0), (48000, 16000, 0.4),
                                           (16000, 24000, 0.5), (22050, 24000, 0.4)]):
        case = f"resample_hq_{orig}_{new}"
        if rec.want(c, case, "resample_hq"):
            x = speech_like(orig, secs, seed=30 + i)
            y = librosa.resample(x, orig_sr=orig, target_sr=new, res_type="soxr_hq")
            rec.case(c, case, "resample_hq", {"x": x}, {"y": y}, {"y": snr_db(HQ_MIN_SNR)},
                     config=dict(orig=orig, new=new),
                     notes="rubato FFT resampler against librosa soxr_hq: a different filter, judged by SNR")


def _decode(rec, c):
    # Encoded files are inputs (raw bytes); the expected output is what librosa.load(sr=None)
    # returns: soundfile's float32 read, channels averaged. Two inputs differ byte-wise on every
    # recording (libsndfile writes a time stamp into the float WAV's PEAK chunk and a random Ogg
    # stream serial number); their decoded samples do not.
    cases = [
        ("decode_wav_pcm16_mono", "WAV", "PCM_16", 16000, 1, ".wav"),
        ("decode_wav_pcmu8_mono", "WAV", "PCM_U8", 8000, 1, ".wav"),
        ("decode_wav_pcm24_stereo", "WAV", "PCM_24", 44100, 2, ".wav"),
        ("decode_wav_pcm32_mono", "WAV", "PCM_32", 24000, 1, ".wav"),
        ("decode_wav_float_stereo", "WAV", "FLOAT", 48000, 2, ".wav"),
        ("decode_flac_16_stereo", "FLAC", "PCM_16", 44100, 2, ".flac"),
        ("decode_flac_24_mono", "FLAC", "PCM_24", 24000, 1, ".flac"),
        ("decode_ogg_vorbis_stereo", "OGG", "VORBIS", 44100, 2, ".ogg"),
        ("decode_mp3_mono", "MP3", "MPEG_LAYER_III", 24000, 1, ".mp3"),
    ]
    for i, (case, fmt, sub, sr, ch, ext) in enumerate(cases):
        if not rec.want(c, case, "audio_decode"):
            continue
        x = np.stack([speech_like(sr, 0.25, seed=40 + i + k, peak=0.8) for k in range(ch)], axis=1)
        buf = io.BytesIO()
        sf.write(buf, x, sr, format=fmt, subtype=sub)
        data = np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()
        path = f"/tmp/chatterbox-parity{ext}"
        with open(path, "wb") as f:
            f.write(data.tobytes())
        y, got_sr = librosa.load(path, sr=None, mono=True)
        lossy = fmt in ("OGG", "MP3")
        tol = LOSSY_ATOL if lossy else PCM_ATOL
        rec.case(c, case, "audio_decode", {"file": data},
                 {"samples": y, "sample_rate": np.asarray([got_sr], np.int64)},
                 {"samples": abs_tol(tol), "sample_rate": exact()},
                 config=dict(extension=ext, channels=ch))


# Lossy codecs: two decoders of the same bitstream (symphonia vs libsndfile's libvorbis/mpg123)
# round differently in their float synthesis; measured in the first recording (docs/parity.md).
LOSSY_ATOL = 1e-4


def _soxr_route(rec, c):
    # The reference's route for a voice clip (tts.py `prepare_conditionals`): `librosa.load(path,
    # sr=24000)` (soundfile read, channel mean, soxr_hq), then `librosa.resample(wav_24k,
    # orig_sr=24000, target_sr=16000)` (soxr_hq); and vc.py's `librosa.load(path, sr=16000)`.
    # Exact only with chatterbox-dsp's `soxr` feature, so these live in their own folder,
    # `dsp/soxr`, which only that build's parity test reads.
    sub = f"{c}/soxr"
    cases = [
        ("load_44100_stereo_24000_16000", "PCM_16", 44100, 2, 0.1, [24000, 16000]),
        ("load_22050_mono_24000_16000", "PCM_16", 22050, 1, 0.2, [24000, 16000]),
        ("load_48000_mono_24000_16000", "PCM_24", 48000, 1, 0.1, [24000, 16000]),
        ("load_44100_mono_16000", "PCM_16", 44100, 1, 0.1, [16000]),
    ]
    for i, (case, subtype, sr, ch, secs, rates) in enumerate(cases):
        if not rec.want(sub, case, "load_soxr"):
            continue
        x = np.stack([speech_like(sr, secs, seed=60 + i + k, peak=0.8) for k in range(ch)], axis=1)
        buf = io.BytesIO()
        sf.write(buf, x, sr, format="WAV", subtype=subtype)
        data = np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()
        path = "/tmp/chatterbox-parity-soxr.wav"
        with open(path, "wb") as f:
            f.write(data.tobytes())
        y, got_sr = librosa.load(path, sr=rates[0])
        assert got_sr == rates[0]
        outs = {f"y_{rates[0]}": y}
        for prev, new in zip(rates, rates[1:]):
            y = librosa.resample(y, orig_sr=prev, target_sr=new)
            outs[f"y_{new}"] = y
        rec.case(sub, case, "load_soxr", {"file": data}, outs,
                 {k: rel_tol(SOXR_RTOL) for k in outs},
                 config=dict(extension=".wav", rates=rates),
                 notes="librosa.load(sr=rates[0]) then librosa.resample to each next rate, soxr_hq "
                       "(python-soxr 1.1.0); matched by chatterbox-dsp's `soxr` feature")
