"""The Python package's overhead against the `chatterbox` command on the same work: the same
checkpoint, text, seed and options, each run a whole process (start, load, generate, write a
float WAV), run alternately, medians reported.

    target/python-venv/bin/python crates/chatterbox-python/bench/overhead.py \
        [--variant turbo] [--sentences 12] [--tokens 300] [--runs 5] [--model-dir DIR]

Without --model-dir it lays out the tiny test checkpoints (tests/conftest.py). Rows: the Rust
binary (target/debug/chatterbox or $CHATTERBOX_BIN), the wheel's `chatterbox` console script
(the same code through the native module), and a Python script calling `from_local` and
`generate` (NumPy output, no torch import) and writing the WAV.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import conftest  # noqa: E402

SCRIPT = """
import sys, struct
sys.modules["torch"] = None
import numpy as np
from chatterbox_rs.{module} import {cls}
model = {cls}.from_local(sys.argv[1], "cpu"{extra}, watermark=False)
wav = np.asarray(model.generate(sys.argv[2], seed=7, max_new_tokens=int(sys.argv[3])))[0]
raw = wav.astype("<f4").tobytes()
with open(sys.argv[4], "wb") as f:
    f.write(b"RIFF" + struct.pack("<I", 36 + len(raw)) + b"WAVE")
    f.write(b"fmt " + struct.pack("<IHHIIHH", 16, 3, 1, 24000, 96000, 4, 32))
    f.write(b"data" + struct.pack("<I", len(raw)) + raw)
"""
CLASSES = {
    "english": ("tts", "ChatterboxTTS", ""),
    "turbo": ("tts_turbo", "ChatterboxTurboTTS", ""),
    "nano": ("tts_turbo", "ChatterboxTurboTTS", ", nano=True"),
}


def timed(cmd, env):
    """Wall seconds and CPU seconds (user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="turbo", choices=sorted(CLASSES))
    ap.add_argument("--sentences", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model-dir")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="chatterbox-overhead-")
    ckpt = args.model_dir or conftest.build_cache(tmp)[args.variant]
    text = " ".join(f"This is sentence number {i} of the benchmark text." for i in range(
        args.sentences))
    binary = os.environ.get("CHATTERBOX_BIN") or os.path.join(conftest.ROOT, "target", "debug",
                                                              "chatterbox")
    console = os.path.join(os.path.dirname(sys.executable), "chatterbox")
    module, cls, extra = CLASSES[args.variant]
    script = os.path.join(tmp, "generate.py")
    with open(script, "w") as f:
        f.write(SCRIPT.format(module=module, cls=cls, extra=extra))
    env = dict(os.environ, CHATTERBOX_NO_WATERMARK="1")
    env.pop("CHATTERBOX_DEVICE", None)
    cli_args = ["speak", "--model", args.variant, "--model-dir", ckpt, "--device", "cpu",
                "--seed", "7", "--max-new-tokens", str(args.tokens), "--no-watermark",
                "--wav-format", "f32", "-q"]
    rows = {
        "chatterbox (Rust binary)": lambda o: [binary, *cli_args, "-o", o, text],
        "chatterbox (the wheel's command)": lambda o: [console, *cli_args, "-o", o, text],
        "Python: from_local + generate": lambda o: [sys.executable, script, ckpt, text,
                                                    str(args.tokens), o],
    }
    times = {k: [] for k in rows}
    outs = {}
    for _ in range(args.runs):
        for name, cmd in rows.items():
            out = os.path.join(tmp, f"{len(outs)}.wav")
            outs.setdefault(name, out)
            times[name].append(timed(cmd(outs[name]), env))
    lengths = {k: len(conftest.read_wav(v)[0]) for k, v in outs.items()}
    def med(name, i):
        return statistics.median(t[i] for t in times[name])

    binary_row = "chatterbox (Rust binary)"
    print(f"{args.variant}, {args.sentences} sentences, {args.tokens} tokens max, "
          f"{args.runs} runs; audio {lengths[binary_row] / 24000:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("| run | wall s (median) | vs the binary | CPU s (median) | vs the binary |")
    print("|---|---|---|---|---|")
    for name in times:
        w, c = med(name, 0), med(name, 1)
        print(f"| {name} | {w:.2f} | {100 * (w / med(binary_row, 0) - 1):+.1f} % | {c:.2f} "
              f"| {100 * (c / med(binary_row, 1) - 1):+.1f} % |")
    same = len(set(lengths.values())) == 1
    print("same audio length in every row:", same)


if __name__ == "__main__":
    main()
