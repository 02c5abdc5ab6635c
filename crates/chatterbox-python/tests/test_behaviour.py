"""What the package does beyond equality: the reference's attributes, tensors or NumPy,
threads generating at once, Ctrl-C, and the exceptions bad inputs raise."""
import math
import os
import threading

import numpy as np
import pytest

from conftest import python_subprocess


def english(offline_cache):
    from chatterbox_rs.tts import ChatterboxTTS

    return ChatterboxTTS.from_pretrained("cpu")


def test_attributes_and_output_type(offline_cache):
    model = english(offline_cache)
    assert model.sr == 24_000 and model.device == "cpu"
    assert model.ENC_COND_LEN == 96_000 and model.DEC_COND_LEN == 240_000
    wav = model.generate("Hi there.", seed=1, max_new_tokens=10)
    torch = pytest.importorskip("torch")
    assert isinstance(wav, torch.Tensor) and wav.dtype == torch.float32
    assert wav.dim() == 2 and wav.shape[0] == 1 and wav.shape[1] > 0


def test_numpy_without_torch(offline_cache):
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np\n"
        "from chatterbox_rs.tts import ChatterboxTTS\n"
        "m = ChatterboxTTS.from_pretrained('cpu')\n"
        "w = m.generate('Hi there.', seed=1, max_new_tokens=10)\n"
        "assert type(w) is np.ndarray and w.dtype == np.float32 and w.shape[0] == 1, w\n"
        "print('shape', w.shape)\n"
    )
    r = python_subprocess(code)
    assert r.returncode == 0, r.stderr
    assert "shape (1, " in r.stdout


def test_torch_seed_makes_scripts_repeatable(offline_cache):
    torch = pytest.importorskip("torch")
    model = english(offline_cache)
    torch.manual_seed(3)
    a = model.generate("Hi there.", max_new_tokens=10)
    torch.manual_seed(3)
    b = model.generate("Hi there.", max_new_tokens=10)
    assert torch.equal(a, b)


def test_two_threads_generate_at_once(offline_cache):
    model = english(offline_cache)
    texts = ["The first thread speaks this.", "And the second one says that."]
    solo = [np.asarray(model.generate(t, seed=5, max_new_tokens=15)) for t in texts]
    results = [None, None]
    errors = []

    def work(i):
        try:
            results[i] = np.asarray(model.generate(texts[i], seed=5, max_new_tokens=15))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for got, want in zip(results, solo):
        np.testing.assert_array_equal(got, want)


# Ctrl-C raises KeyboardInterrupt, as in an interactive Python: a process started with SIGINT
# ignored (a background job of a non-interactive shell, as CI may be) keeps it ignored, and
# Python then installs no handler of its own, so the tests set it.
CTRL_C_RAISES = "signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def test_ctrl_c_interrupts_a_generation(offline_cache):
    # A long generation (400 tokens in each of many sentences) interrupted by SIGINT after 1 s: the
    # call raises KeyboardInterrupt at once, and the process goes on.
    code = (
        "import os, signal, threading, time\n"
        "from chatterbox_rs.tts import ChatterboxTTS\n"
        "m = ChatterboxTTS.from_pretrained('cpu')\n"
        "text = ' '.join(['This sentence is one of many in a long text.'] * 40)\n"
        f"{CTRL_C_RAISES}"
        "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "t0 = time.time()\n"
        "try:\n"
        "    m.generate(text, seed=1, max_new_tokens=400)\n"
        "    print('finished without interruption')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after %.2f s' % (time.time() - t0))\n"
        "w = m.generate('Still works.', seed=1, max_new_tokens=5)\n"
        "print('then', tuple(w.shape))\n"
    )
    r = python_subprocess(code)
    assert r.returncode == 0, r.stderr
    assert "interrupted after" in r.stdout, r.stdout
    secs = float(r.stdout.split("interrupted after ")[1].split()[0])
    assert secs < 1.5, r.stdout
    assert "then (1, " in r.stdout


@pytest.mark.parametrize("call", ["stream", "generate_many"])
def test_ctrl_c_interrupts_streams_and_batches(offline_cache, call):
    run = {
        "stream": "for chunk in m.stream(text, seed=1, max_new_tokens=400): pass",
        "generate_many": "m.generate_many([text, text], seed=1, max_new_tokens=400)",
    }[call]
    code = (
        "import os, signal, threading, time\n"
        "from chatterbox_rs.tts import ChatterboxTTS\n"
        "m = ChatterboxTTS.from_pretrained('cpu')\n"
        "text = ' '.join(['This sentence is one of many in a long text.'] * 40)\n"
        f"{CTRL_C_RAISES}"
        "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "t0 = time.time()\n"
        "try:\n"
        f"    {run}\n"
        "    print('finished without interruption')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after %.2f s' % (time.time() - t0))\n"
    )
    r = python_subprocess(code)
    assert r.returncode == 0, r.stderr
    assert "interrupted after" in r.stdout, r.stdout
    assert float(r.stdout.split("interrupted after ")[1].split()[0]) < 1.5, r.stdout


def test_missing_files(offline_cache, tmp_path):
    from chatterbox_rs.tts import ChatterboxTTS
    from chatterbox_rs.vc import ChatterboxVC

    with pytest.raises(FileNotFoundError, match="nowhere"):
        ChatterboxTTS.from_local(str(tmp_path / "nowhere"), "cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="ve.safetensors"):
        ChatterboxTTS.from_local(str(empty), "cpu")
    model = english(offline_cache)
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        model.prepare_conditionals(str(tmp_path / "missing.wav"))
    with pytest.raises(FileNotFoundError):
        model.generate("Hi.", audio_prompt_path=str(tmp_path / "missing.wav"))
    vc = ChatterboxVC.from_pretrained("cpu")
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        vc.generate(str(tmp_path / "missing.wav"))


def test_not_audio(offline_cache, tmp_path):
    bad = tmp_path / "not-audio.wav"
    bad.write_bytes(b"this is text, not audio" * 100)
    with pytest.raises(ValueError):
        english(offline_cache).prepare_conditionals(str(bad))


def test_devices(offline_cache):
    from chatterbox_rs import _native
    from chatterbox_rs.tts import ChatterboxTTS

    with pytest.raises(ValueError, match="unknown device"):
        ChatterboxTTS.from_pretrained("tpu")
    if "cuda" not in _native.gpu_backends():
        with pytest.raises(RuntimeError, match="no CUDA support"):
            ChatterboxTTS.from_pretrained("cuda:1")
    if "metal" not in _native.gpu_backends():
        with pytest.raises(RuntimeError, match="no Metal support"):
            ChatterboxTTS.from_pretrained("mps")


def test_device_override(offline_cache, monkeypatch):
    from chatterbox_rs.tts_turbo import ChatterboxTurboTTS

    monkeypatch.setenv("CHATTERBOX_DEVICE", "cpu")
    model = ChatterboxTurboTTS.from_pretrained("cuda")
    assert model._model.device == "cpu"


def test_bad_options_and_text(offline_cache):
    model = english(offline_cache)
    with pytest.raises(ValueError, match="temperature"):
        model.generate("Hi.", temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        model.generate("Hi.", top_p=1.5)
    with pytest.raises(ValueError, match="empty"):
        model.generate("   ")


def test_speed(offline_cache):
    # speed= (beyond the reference, as the server's and the CLI's): the same speech played that
    # many times faster at the same pitch, exactly round(n / speed) samples; streamed too.
    model = english(offline_cache)
    one = model.generate("Hello there.", seed=3, max_new_tokens=20).numpy()
    n = one.shape[1]
    for speed in (2.0, 0.5):
        w = model.generate("Hello there.", seed=3, max_new_tokens=20, speed=speed).numpy()
        assert w.shape == (1, math.floor(n / speed + 0.5)), (speed, w.shape, n)
        assert np.isfinite(w).all() and np.abs(w).max() > 0
    chunks = list(model.stream("Hello there.", seed=3, max_new_tokens=20, speed=2.0))
    assert sum(len(c) for c in chunks) > 0
    with pytest.raises(ValueError, match="speed"):
        model.generate("Hi.", speed=4.5)


def test_wrong_language(offline_cache):
    if "multilingual" not in offline_cache:
        pytest.skip("needs torch for ve.pt / s3gen.pt")
    from chatterbox_rs.mtl_tts import ChatterboxMultilingualTTS, SUPPORTED_LANGUAGES

    assert len(SUPPORTED_LANGUAGES) == 23 and SUPPORTED_LANGUAGES["fr"] == "French"
    model = ChatterboxMultilingualTTS.from_pretrained("cpu")
    with pytest.raises(ValueError, match="Unsupported language_id 'xx'"):
        model.generate("Hello.", language_id="xx")
    with pytest.raises(ValueError, match="Unknown multilingual T3 model|t3_model|v9"):
        ChatterboxMultilingualTTS.from_pretrained("cpu", t3_model="v9")


def test_turbo_voice_too_short(offline_cache, tmp_path):
    from conftest import write_wav
    from chatterbox_rs.tts_turbo import ChatterboxTurboTTS

    short = str(tmp_path / "short.wav")
    write_wav(short, 0.1 * np.sin(np.arange(24_000 * 2) * 0.05))
    model = ChatterboxTurboTTS.from_pretrained("cpu")
    with pytest.raises(ValueError, match="5"):
        model.prepare_conditionals(short)


def test_voice_cloning_and_vc(offline_cache, voice_wav):
    from chatterbox_rs.tts_turbo import ChatterboxTurboTTS
    from chatterbox_rs.vc import ChatterboxVC

    model = ChatterboxTurboTTS.from_pretrained("cpu")
    a = np.asarray(model.generate("Hi there.", audio_prompt_path=voice_wav, seed=2,
                                  max_new_tokens=10))
    assert a.shape[0] == 1 and a.shape[1] > 0
    vc = ChatterboxVC.from_pretrained("cpu")
    out = np.asarray(vc.generate(voice_wav, target_voice_path=voice_wav, seed=1))
    # 960 samples per 40 ms source token: 8 s of source give 8 s of speech
    assert out.shape[0] == 1 and abs(out.shape[1] - 8 * 24_000) <= 960
