"""The `chatterbox` command the wheel installs (a console script running crates/chatterbox-cli
from the native module) does what the Rust binary does: the same WAV for the same arguments,
the same errors and exit statuses."""
import os
import subprocess
import sys

import numpy as np

from conftest import read_wav, run_cli


def installed():
    exe = os.path.join(os.path.dirname(sys.executable), "chatterbox")
    assert os.path.isfile(exe), f"the wheel installed no {exe}"
    return exe


def test_version_and_help():
    r = subprocess.run([installed(), "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("chatterbox "), r
    r = subprocess.run([installed(), "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for sub in ("speak", "vc", "serve", "watermark"):
        assert sub in r.stdout


def test_speak_equals_the_binary(offline_cache, tmp_path):
    args = ["speak", "--model", "turbo", "--model-dir", offline_cache["turbo"], "--device",
            "cpu", "--seed", "3", "--max-new-tokens", "12", "--no-watermark", "--wav-format",
            "f32", "-q"]
    ours = str(tmp_path / "ours.wav")
    r = subprocess.run([installed(), *args, "-o", ours, "Hello there."], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    theirs = str(tmp_path / "theirs.wav")
    run_cli([*args, "-o", theirs, "Hello there."])
    a, sr = read_wav(ours)
    b, _ = read_wav(theirs)
    assert sr == 24_000 and len(a) > 0
    np.testing.assert_array_equal(a, b)


def test_errors_exit_with_status_one(tmp_path):
    r = subprocess.run([installed(), "speak", "--model-dir", str(tmp_path / "nowhere"),
                        "--no-watermark", "-o", str(tmp_path / "x.wav"), "Hi."],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.startswith("error:") and "nowhere" in r.stderr, r.stderr
    r = subprocess.run([installed(), "speak", "--no-such-flag"], capture_output=True, text=True)
    assert r.returncode == 2 and "--no-such-flag" in r.stderr


def test_outputs_carry_the_watermark(offline_cache, tmp_path, monkeypatch):
    """Perth on generate's output, as the reference's: the command's detector finds it."""
    import pytest

    from conftest import write_wav

    weights = os.environ.get("CHATTERBOX_WATERMARK_WEIGHTS")
    if not weights:
        pytest.skip("no Perth weights (CHATTERBOX_WATERMARK_WEIGHTS; cargo xtask python sets it)")
    monkeypatch.delenv("CHATTERBOX_NO_WATERMARK")
    from chatterbox_rs.tts_turbo import ChatterboxTurboTTS

    model = ChatterboxTurboTTS.from_pretrained("cpu")
    assert model._model.watermarked_output
    text = "Hello there. This is a watermarked test!"
    marked = np.asarray(model.generate(text, seed=4, max_new_tokens=100))[0]
    plain = np.asarray(ChatterboxTurboTTS.from_pretrained("cpu", watermark=False).generate(
        text, seed=4, max_new_tokens=100))[0]
    assert marked.shape == plain.shape and not np.array_equal(marked, plain)
    path = str(tmp_path / "marked.wav")
    write_wav(path, marked)
    r = subprocess.run([installed(), "watermark", "detect", path], capture_output=True,
                       text=True, env=dict(os.environ, CHATTERBOX_WATERMARK_WEIGHTS=weights))
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
