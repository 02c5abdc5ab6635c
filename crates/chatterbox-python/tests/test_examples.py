"""The reference's own example scripts (../shared/reference/examples) run with only their
`from chatterbox...` import lines changed to `chatterbox_rs`, offline, against the tiny random
checkpoints in a Hugging Face cache, with torch and torchaudio installed as they expect; each
writes its WAVs at 24 kHz, of the length the tiny model's speech tokens give.

The scripts are read from the shared folder and rewritten at test time (no copies are
committed). The Turbo and Nano examples ask for `device="cuda"`: `CHATTERBOX_DEVICE=cpu` runs
them on the CPU. The checkpoints are random, so T3 rarely draws its stop token:
`CHATTERBOX_MAX_NEW_TOKENS` caps the tokens per sentence to keep the run short on a 2-core CPU.
Outputs carry Perth's watermark as the reference's when `CHATTERBOX_WATERMARK_WEIGHTS` names its
weights (`cargo xtask python` fetches them from PyPI's resemble-perth wheel).
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, read_wav, write_wav

EXAMPLES = os.environ.get(
    "CHATTERBOX_REFERENCE_EXAMPLES",
    os.path.join(ROOT, "..", "shared", "reference", "examples"),
)
MAX_TOKENS = 24
# the files each script writes
OUTPUTS = {
    "example_tts.py": ["test-1.wav", "test-2.wav", "test-3.wav"],
    "example_tts_turbo.py": ["test-turbo.wav"],
    "example_tts_nano.py": ["test-nano.wav"],
    "example_vc.py": ["testvc.wav"],
    "example_for_mac.py": ["test-2.wav"],
}


def rewrite(source):
    """The script with `from chatterbox.` / `import chatterbox` pointing at chatterbox_rs;
    every other line unchanged."""
    lines = source.splitlines(keepends=True)
    out = []
    for line in lines:
        new = re.sub(r"^(\s*)from chatterbox(\.|\s)", r"\1from chatterbox_rs\2", line)
        new = re.sub(r"^(\s*)import chatterbox\b", r"\1import chatterbox_rs as chatterbox", new)
        out.append(new)
    changed = [(a, b) for a, b in zip(lines, out) if a != b]
    assert changed and all("chatterbox" in a for a, _ in changed)
    return "".join(out)


@pytest.mark.parametrize("script", sorted(OUTPUTS))
def test_example_runs_unchanged(script, hf_home, voice_wav, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("torchaudio")
    home, dirs = hf_home
    if script == "example_tts.py" and "multilingual" not in dirs:
        pytest.skip("needs the multilingual files")
    src = os.path.join(EXAMPLES, script)
    if not os.path.isfile(src):
        pytest.skip(f"{src} not found (the shared reference folder)")
    with open(src) as f:
        code = rewrite(f.read())
    (tmp_path / script).write_text(code)
    # the scripts' voice clip
    write_wav(str(tmp_path / "YOUR_FILE.wav"), read_wav(voice_wav)[0])
    env = dict(os.environ)
    env.update(
        HF_HOME=home,
        HF_HUB_OFFLINE="1",
        CHATTERBOX_DEVICE="cpu",
        CHATTERBOX_MAX_NEW_TOKENS=str(MAX_TOKENS),
    )
    # watermarked as users' runs are when Perth's weights are at hand (cargo xtask python
    # fetches them), else without
    if not os.environ.get("CHATTERBOX_WATERMARK_WEIGHTS"):
        env["CHATTERBOX_NO_WATERMARK"] = "1"
    r = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, f"{script} failed:\n{r.stdout}\n{r.stderr}"
    for name in OUTPUTS[script]:
        path = tmp_path / name
        assert path.is_file(), f"{script} wrote no {name}:\n{r.stdout}\n{r.stderr}"
        wav, sr = read_wav(str(path))
        assert sr == 24_000, f"{name}: {sr} Hz"
        if script == "example_vc.py":
            # 960 samples per 40 ms source token: as long as the 8 s source
            assert abs(len(wav) - 8 * 24_000) <= 960, f"{name}: {len(wav)} samples"
        else:
            # 960 samples per speech token: at least one token, at most MAX_TOKENS (plus
            # Turbo's 3 silence tokens) per sentence chunk of the script's text
            assert 960 <= len(wav) <= 3 * (MAX_TOKENS + 3) * 960, f"{name}: {len(wav)}"
            assert np.isfinite(wav).all() and np.abs(wav).max() <= 1.0, name
