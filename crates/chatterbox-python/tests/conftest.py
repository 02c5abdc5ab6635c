"""Shared by the package's tests: tiny random checkpoints (the committed parity fixtures of
the Rust pipeline) laid out as a Hugging Face cache, the `chatterbox` command for equality
checks, and small WAV helpers.

The cache holds what the reference's `from_pretrained` downloads, under its repository and
file names: ResembleAI/chatterbox (English and Multilingual files), ResembleAI/chatterbox-turbo
and ResembleAI/chatterbox-nano, each with `chatterbox_config.json` (the tiny sizes, which the
Rust loaders read). Multilingual reuses the tiny English T3, VoiceEncoder and S3Gen (its
`ve.pt` and `s3gen.pt` are written with torch, so they need torch; the tests that use them
skip without it).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
FIXTURES = os.environ.get("CHATTERBOX_FIXTURES", os.path.join(ROOT, "parity", "fixtures"))
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"
SR = 24_000


def read_safetensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], body[a:b])
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def part(tensors, prefix):
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def write_torch(path, tensors):
    """A torch.save'd state dict of safetensors entries (the multilingual .pt files)."""
    import torch

    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
    sd = {}
    for name, (dtype, shape, raw) in tensors.items():
        t = torch.frombuffer(bytearray(raw), dtype=dtypes[dtype]) if raw else torch.empty(0, dtype=dtypes[dtype])
        sd[name] = t.reshape(shape).clone()
    torch.save(sd, path)


def config(case):
    with open(os.path.join(FIXTURES, "pipeline", f"{case}.json")) as f:
        return json.load(f)["config"]["chatterbox"]


def has_torch():
    try:
        import torch  # noqa: F401

        return True
    except Exception:
        return False


def snapshot_dir(hub, repo):
    folder = os.path.join(hub, "models--" + repo.replace("/", "--"))
    os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
    with open(os.path.join(folder, "refs", "main"), "w") as f:
        f.write(SNAPSHOT)
    snap = os.path.join(folder, "snapshots", SNAPSHOT)
    os.makedirs(snap, exist_ok=True)
    return snap


def build_cache(home):
    """The Hugging Face cache under `home` (HF_HOME); returns {variant: snapshot dir}."""
    hub = os.path.join(home, "hub")
    assets = os.path.join(FIXTURES, "text", "assets")
    en = read_safetensors(os.path.join(FIXTURES, "pipeline", "english.safetensors"))
    turbo = read_safetensors(os.path.join(FIXTURES, "pipeline", "turbo.safetensors"))
    conds = os.path.join(FIXTURES, "pipeline", "english_conds.pt")
    dirs = {}

    main = snapshot_dir(hub, "ResembleAI/chatterbox")
    write_safetensors(os.path.join(main, "t3_cfg.safetensors"), part(en, "t3."))
    write_safetensors(os.path.join(main, "ve.safetensors"), part(en, "ve."))
    write_safetensors(os.path.join(main, "s3gen.safetensors"), part(en, "s3gen."))
    shutil.copy(os.path.join(assets, "en", "tokenizer.json"), main)
    shutil.copy(conds, os.path.join(main, "conds.pt"))
    with open(os.path.join(main, "chatterbox_config.json"), "w") as f:
        json.dump(config("english"), f)
    dirs["english"] = dirs["vc"] = main
    # Multilingual: the tiny English T3 under the v2 name (its config is the same file);
    # ve.pt and s3gen.pt are torch pickles as in the real repository.
    write_safetensors(os.path.join(main, "t3_mtl23ls_v2.safetensors"), part(en, "t3."))
    for f in ("grapheme_mtl_merged_expanded_v1.json", "Cangjie5_TC.json"):
        shutil.copy(os.path.join(assets, "mtl", f), main)
    if has_torch():
        write_torch(os.path.join(main, "ve.pt"), part(en, "ve."))
        write_torch(os.path.join(main, "s3gen.pt"), part(en, "s3gen."))
        dirs["multilingual"] = main

    meanflow = dict(part(en, "s3gen."))
    meanflow.update(part(turbo, "s3gen."))
    for variant, repo, t3 in (
        ("turbo", "ResembleAI/chatterbox-turbo", "t3_turbo_v1.safetensors"),
        ("nano", "ResembleAI/chatterbox-nano", "t3_nano_v1.safetensors"),
    ):
        d = snapshot_dir(hub, repo)
        write_safetensors(os.path.join(d, t3), part(turbo, "t3."))
        write_safetensors(os.path.join(d, "ve.safetensors"), part(turbo, "ve."))
        write_safetensors(os.path.join(d, "s3gen_meanflow.safetensors"), meanflow)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(assets, "turbo", f), d)
        shutil.copy(conds, os.path.join(d, "conds.pt"))
        with open(os.path.join(d, "chatterbox_config.json"), "w") as f:
            json.dump(config("turbo"), f)
        dirs[variant] = d
    return dirs


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory):
    home = str(tmp_path_factory.mktemp("hf_home"))
    dirs = build_cache(home)
    return home, dirs


@pytest.fixture()
def offline_cache(hf_home, monkeypatch):
    """HF_HOME pointing at the tiny cache, offline, without the watermark."""
    home, dirs = hf_home
    monkeypatch.setenv("HF_HOME", home)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CHATTERBOX_NO_WATERMARK", "1")
    return dirs


def write_wav(path, samples, sr=SR):
    """16-bit PCM mono WAV."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sr, sr * 2, 2, 16))
        f.write(b"data" + struct.pack("<I", len(pcm)) + pcm)


def read_wav(path):
    """(samples as float32, sample rate) of a mono 16-bit PCM or 32-bit float WAV."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", path
    pos, fmt, sr, bits = 12, None, None, None
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        body = data[pos + 8 : pos + 8 + size]
        if cid == b"fmt ":
            fmt, ch, sr = struct.unpack("<HHI", body[:8])
            bits = struct.unpack("<H", body[14:16])[0]
            if fmt == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: the sub-format's first two bytes
                fmt = struct.unpack("<H", body[24:26])[0]
            assert ch == 1, f"{path}: {ch} channels"
        elif cid == b"data":
            if size == 0xFFFFFFFF:
                body = data[pos + 8 :]
            if fmt == 3 and bits == 32:
                return np.frombuffer(body, dtype="<f4").astype(np.float32), sr
            if fmt == 1 and bits == 16:
                return np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768.0, sr
            raise AssertionError(f"{path}: format {fmt}, {bits} bits")
        pos += 8 + size + (size & 1)
    raise AssertionError(f"{path}: no data chunk")


@pytest.fixture(scope="session")
def voice_wav(tmp_path_factory):
    """An 8 s speech-like clip (Turbo needs more than 5 s): the fixtures' reference clip
    repeated."""
    en = read_safetensors(os.path.join(FIXTURES, "pipeline", "english.safetensors"))
    dtype, shape, raw = en["in.ref_24k"]
    clip = np.frombuffer(raw, dtype={"F16": "<f2", "F32": "<f4", "F64": "<f8"}[dtype])
    clip = clip.astype(np.float32)
    reps = int(np.ceil(8 * SR / len(clip)))
    path = str(tmp_path_factory.mktemp("voice") / "voice.wav")
    write_wav(path, np.tile(clip, reps)[: 8 * SR])
    return path


def chatterbox_bin():
    """The `chatterbox` command: $CHATTERBOX_BIN, else target/debug/chatterbox."""
    b = os.environ.get("CHATTERBOX_BIN") or os.path.join(ROOT, "target", "debug", "chatterbox")
    if not os.path.isfile(b):
        pytest.skip(f"no chatterbox command at {b} (cargo build -p chatterbox-cli)")
    return b


def run_cli(args, env_extra=None):
    env = dict(os.environ)
    env.pop("CHATTERBOX_DEVICE", None)
    env.update(env_extra or {})
    r = subprocess.run([chatterbox_bin(), *args], capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"chatterbox {' '.join(args)} failed:\n{r.stderr}"
    return r


def python_subprocess(code, env_extra=None, timeout=300):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout)
