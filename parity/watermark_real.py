"""Real-weight check of chatterbox-watermark against resemble-perth 1.0.1's pretrained Perth
watermarker (not in CI: needs the parity venv, which holds the wheel and its checkpoint).

    parity/.venv/bin/python parity/watermark_real.py [--dir /tmp/chatterbox-wm-real] [--seconds 10]

1. Clips at 24 kHz (chatterbox's rate): the dsp example's speech, an AISHELL clip shipped with
   s3tokenizer (resampled by librosa.load), and a synthetic speech-like signal.
2. The reference watermarks them (`PerthImplicitWatermarker().apply_watermark(x, 24000)`);
   `cargo run --example real_weights -- embed` does the same in Rust, once with the crate's
   `soxr` feature (libsoxr, as librosa) and once without (rubato); the script compares them.
3. Every clip (original, Python- and Rust-watermarked) goes through what users do to files:
   nothing, resampling to 16 / 44.1 kHz (librosa soxr_hq) and, separately, there and back,
   16-bit WAV (soundfile PCM_16) and MP3 at 64 and 128 kbit/s (LAME 3.100, the server's encoder
   library, when `lame` is installed). Both detectors score every version (`get_watermark` with
   `round=False` and the rounded default).
4. A Markdown table goes to stdout and DIR/report.md; the raw numbers to DIR/report.json.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import librosa
import numpy as np
import soundfile as sf
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from common import speech_like  # noqa: E402
from perth.perth_net.perth_net_implicit.perth_watermarker import PerthImplicitWatermarker  # noqa: E402

SR = 24000


def clips(seconds):
    out = {}
    x, _ = librosa.load(os.path.join(ROOT, "crates/chatterbox-dsp/examples/data/speech_24k.wav"), sr=SR)
    out["speech_24k"] = x
    import s3tokenizer
    asset = os.path.join(os.path.dirname(s3tokenizer.__file__), "assets", "BAC009S0764W0121.wav")
    x, _ = librosa.load(asset, sr=SR)
    out["aishell"] = x
    out["synthetic"] = speech_like(SR, seconds, seed=1)
    return {k: v.astype(np.float32) for k, v in out.items()}


def save(path, x):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, np.ascontiguousarray(x, dtype=np.float32))


def cargo(args, features):
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    cmd = ["cargo", "run", "--release", "--quiet", "-p", "chatterbox-watermark", "--example",
           "real_weights"] + (["--features", features] if features else []) + ["--"] + args
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def snr(ref, x):
    n = min(len(ref), len(x))
    ref, x = ref[:n].astype(np.float64), x[:n].astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - x) ** 2), 1e-30))


def attacks(x, sr, tmp):
    """(attack name, signal, rate) of what users do to files."""
    out = [("none", x, sr)]
    for to in (16000, 44100):
        y = librosa.resample(x, orig_sr=sr, target_sr=to)
        out.append((f"resampled_{to}", y, to))
        out.append((f"via_{to}", librosa.resample(y, orig_sr=to, target_sr=sr), sr))
    path = os.path.join(tmp, "q16.wav")
    sf.write(path, x, sr, subtype="PCM_16")
    y, _ = sf.read(path, dtype="float32")
    out.append(("pcm16", y, sr))
    # MP3 through LAME 3.100, the library behind the server's `mp3` (which sends 64 kbit/s CBR),
    # when the `lame` program is installed (Debian's package `lame`)
    if shutil.which("lame"):
        for kbps in (64, 128):
            mp3, back = os.path.join(tmp, f"q{kbps}.mp3"), os.path.join(tmp, f"q{kbps}.wav")
            subprocess.run(["lame", "--quiet", "--cbr", "-b", str(kbps), "-m", "m", path, mp3], check=True)
            subprocess.run(["lame", "--quiet", "--decode", mp3, back], check=True)
            y, r = sf.read(back, dtype="float32")
            out.append((f"mp3_{kbps}", y, r))
    return out


ATTACKS = ["none", "pcm16", "resampled_16000", "via_16000", "resampled_44100", "via_44100", "mp3_64", "mp3_128"]


def table(report):
    """Markdown: one row per clip and version, one column per attack, each cell the Python /
    Rust detector's score (`round=False`); then the embedding errors."""
    cells = {}
    for key, v in report["detect"].items():
        clip, version, attack = key.rsplit("__", 1)[0].split(".")
        r = v["rust"] or {}
        rs = f"{r['score']:.3f}" if "score" in r else "error"
        cells.setdefault((clip, version), {})[attack] = f"{v['python']['score']:.3f} / {rs}"
    lines = ["| clip | version | " + " | ".join(ATTACKS) + " |", "|---|---|" + "---|" * len(ATTACKS)]
    for (clip, version), row in cells.items():
        lines.append(f"| {clip} | {version} | " + " | ".join(row.get(a, "-") for a in ATTACKS) + " |")
    lines += ["", "| clip | Rust resampler | max abs error vs Python | SNR vs Python (dB) |", "|---|---|---|---|"]
    for key, v in report["embed"].items():
        if "max_abs_err" in v:
            clip, engine = key.split(".")
            lines.append(f"| {clip} ({v['seconds']:.1f} s) | {engine} | {v['max_abs_err']:.2e} | "
                         f"{v['snr_vs_python_db']:.1f} |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/tmp/chatterbox-wm-real")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the synthetic clip")
    p.add_argument("--report-only", action="store_true", help="reprint DIR/report.json's tables")
    a = p.parse_args()
    torch.set_num_threads(2)
    d = a.dir
    if a.report_only:
        with open(f"{d}/report.json") as f:
            print("\n".join(table(json.load(f))))
        return
    os.makedirs(d, exist_ok=True)
    wm = PerthImplicitWatermarker(device="cpu")

    data = clips(a.seconds)
    py_wm = {}
    for name, x in data.items():
        save(f"{d}/orig/{name}__{SR}.npy", x)
        py_wm[name] = wm.apply_watermark(x, sample_rate=SR).astype(np.float32)
        save(f"{d}/py_wm/{name}__{SR}.npy", py_wm[name])

    engines = {"soxr": "soxr", "rubato": None}
    for engine, features in engines.items():
        cargo(["embed", d], features)

    report = {"embed": {}, "detect": {}}
    versions = {}
    for name, x in data.items():
        versions[f"{name}.original"] = x
        versions[f"{name}.python_wm"] = py_wm[name]
        for engine in engines:
            y = np.load(f"{d}/rust_wm_{engine}/{name}__{SR}.npy")
            versions[f"{name}.rust_wm_{engine}"] = y
            ref = py_wm[name]
            n = min(len(y), len(ref))
            report["embed"][f"{name}.{engine}"] = {
                "seconds": len(x) / SR,
                "len_rust": len(y), "len_python": len(ref),
                "max_abs_err": float(np.abs(y[:n] - ref[:n]).max()),
                "snr_vs_python_db": float(snr(ref, y)),
            }
        report["embed"][f"{name}.python"] = {"watermark_snr_db": float(snr(x, py_wm[name]))}

    det_dir = f"{d}/detect"
    os.makedirs(det_dir, exist_ok=True)
    for f in os.listdir(det_dir):
        os.remove(os.path.join(det_dir, f))
    py_det = {}
    for vname, x in versions.items():
        for attack, y, sr in attacks(x, SR, d):
            key = f"{vname}.{attack}__{sr}"
            save(f"{det_dir}/{key}.npy", y)
            score = float(wm.get_watermark(y, sample_rate=sr, round=False))
            conf = float(wm.get_watermark(y, sample_rate=sr))
            py_det[key] = {"score": score, "confidence": conf}
    cargo(["detect", d], "soxr")
    with open(f"{d}/rust_detect.json") as f:
        rust_det = json.load(f)
    report["detect"] = {k: {"python": py_det[k], "rust": rust_det.get(k)} for k in py_det}
    with open(f"{d}/report.json", "w") as f:
        json.dump(report, f, indent=1)

    lines = table(report)
    text = "\n".join(lines)
    with open(f"{d}/report.md", "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
