"""The package's `generate` and `stream` give exactly what the `chatterbox` command (the same
Rust pipeline) writes for the same checkpoint, text, seed and options, for every variant."""
import os

import numpy as np
import pytest

from conftest import read_wav, run_cli

TEXT = "Hello there. This is a test!"
SEED = 7
MAX_TOKENS = 20


def as_numpy(wav):
    return np.asarray(wav.numpy() if hasattr(wav, "numpy") else wav, dtype=np.float32)


def cli_speak(tmp_path, model, ckpt, extra=()):
    out = str(tmp_path / f"{model}.wav")
    run_cli(["speak", "--model", model, "--model-dir", ckpt, "--device", "cpu",
             "--seed", str(SEED), "--max-new-tokens", str(MAX_TOKENS), "--no-watermark",
             "--wav-format", "f32", "-q", "-o", out, *extra, TEXT])
    wav, sr = read_wav(out)
    assert sr == 24_000
    return wav


def load(variant, ckpt):
    if variant == "english":
        from chatterbox_rs.tts import ChatterboxTTS

        return ChatterboxTTS.from_local(ckpt, "cpu", watermark=False)
    from chatterbox_rs.tts_turbo import ChatterboxTurboTTS

    return ChatterboxTurboTTS.from_local(ckpt, "cpu", nano=variant == "nano", watermark=False)


@pytest.mark.parametrize("variant", ["english", "turbo", "nano"])
def test_generate_equals_the_command(tmp_path, offline_cache, variant):
    model = load(variant, offline_cache[variant])
    got = as_numpy(model.generate(TEXT, seed=SEED, max_new_tokens=MAX_TOKENS))
    assert got.shape[0] == 1 and got.shape[1] > 0
    want = cli_speak(tmp_path, variant, offline_cache[variant])
    np.testing.assert_array_equal(got[0], want)
    # another seed gives other audio (the seed is really passed)
    other = as_numpy(model.generate(TEXT, seed=SEED + 1, max_new_tokens=MAX_TOKENS))
    assert other.shape != got.shape or not np.array_equal(other, got)


def test_multilingual_equals_the_command(tmp_path, offline_cache):
    if "multilingual" not in offline_cache:
        pytest.skip("needs torch for ve.pt / s3gen.pt")
    from chatterbox_rs.mtl_tts import ChatterboxMultilingualTTS

    model = ChatterboxMultilingualTTS.from_local(offline_cache["multilingual"], "cpu",
                                                 watermark=False)
    got = as_numpy(model.generate("Bonjour.", language_id="fr", seed=SEED,
                                  max_new_tokens=MAX_TOKENS))
    out = str(tmp_path / "mtl.wav")
    run_cli(["speak", "--model", "multilingual", "--language", "fr", "--model-dir",
             offline_cache["multilingual"], "--device", "cpu", "--seed", str(SEED),
             "--max-new-tokens", str(MAX_TOKENS), "--no-watermark", "--wav-format", "f32",
             "-q", "-o", out, "Bonjour."])
    want, _ = read_wav(out)
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("variant", ["english", "turbo"])
def test_stream_equals_the_commands_stream(tmp_path, offline_cache, variant):
    model = load(variant, offline_cache[variant])
    chunks = list(model.stream(TEXT, seed=SEED, max_new_tokens=MAX_TOKENS))
    assert len(chunks) >= 2, "the tiny model's 20 tokens come in several chunks"
    assert all(isinstance(c, np.ndarray) and c.dtype == np.float32 and c.ndim == 1
               for c in chunks)
    joined = np.concatenate(chunks)
    want = cli_speak(tmp_path, variant, offline_cache[variant], extra=["--stream"])
    np.testing.assert_array_equal(joined, want)
    # same tokens as generate: the same length
    whole = as_numpy(model.generate(TEXT, seed=SEED, max_new_tokens=MAX_TOKENS))
    assert whole.shape[1] == len(joined)


def test_generate_many_equals_each_stream(offline_cache):
    model = load("english", offline_cache["english"])
    texts = ["Hello there.", "A second, longer sentence to speak."]
    many = [as_numpy(w)[0] for w in
            model.generate_many(texts, seed=SEED, max_new_tokens=MAX_TOKENS)]
    assert len(many) == 2
    for text, got in zip(texts, many):
        solo = np.concatenate(list(model.stream(text, seed=SEED, max_new_tokens=MAX_TOKENS)))
        assert got.shape == solo.shape
        # shared flow calls round differently: within the pipeline's waveform tolerance
        assert np.max(np.abs(got - solo)) <= 1e-3 * max(1e-6, float(np.max(np.abs(solo))))


def test_vc_equals_the_command(tmp_path, offline_cache, voice_wav):
    from chatterbox_rs.vc import ChatterboxVC

    model = ChatterboxVC.from_local(offline_cache["vc"], "cpu", watermark=False)
    got = as_numpy(model.generate(voice_wav, target_voice_path=voice_wav, seed=SEED))
    out = str(tmp_path / "vc.wav")
    run_cli(["vc", voice_wav, "--target", voice_wav, "--model-dir", offline_cache["vc"],
             "--device", "cpu", "--seed", str(SEED), "--no-watermark", "--wav-format", "f32",
             "-q", "-o", out])
    want, _ = read_wav(out)
    assert got.shape[1] > 0
    np.testing.assert_array_equal(got[0], want)
