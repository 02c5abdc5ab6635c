"""The timing loop and the JSON record the reference bench scripts share, as the Rust benches
share `chatterbox_testkit::time_it` and `BenchRecord`."""
import argparse
import json
import sys
import time

import numpy as np
import torch


def bench_args(runs=None, device=None, device_help=None):
    """The arguments `cargo xtask bench` passes (`--out`, `--threads`) and, where a script takes
    them, `--runs` and `--device` with the defaults given (None: no such flag); torch's threads
    are set to `--threads`."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=1)
    if runs is not None:
        p.add_argument("--runs", type=int, default=runs)
    if device is not None:
        p.add_argument("--device", default=device, help=device_help)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    return a


def speech_like(sr, seconds):
    """chatterbox-testkit's `speech_like` (crates/chatterbox-testkit/src/signal.rs), the clip
    the Rust benches prepare their voice from: gliding harmonics under a moving envelope (not
    parity/common.py's `speech_like`, which adds a formant and noise)."""
    n = int(sr * seconds)
    t = np.arange(n) / sr
    f0 = 120.0 + 30.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = np.cumsum(2 * np.pi * f0 / sr)
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t)
    y = sum(np.sin(phase * h) / h for h in range(1, 21))
    return (0.2 * env * y).astype(np.float32)


def time_it(f, warmup, min_iters, min_secs, sync=None):
    """`f` run `warmup` times untimed, then until both `min_iters` runs and `min_secs` seconds
    have passed (`sync` after each run, so that device work is counted); the median, minimum
    and count of the timed runs, in ms."""
    for _ in range(warmup):
        f()
        if sync:
            sync()
    times = []
    start = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < min_secs:
        t = time.perf_counter()
        f()
        if sync:
            sync()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return {"median_ms": times[len(times) // 2], "min_ms": times[0], "iters": len(times)}


def write_record(out, group, stage, device, threads, shape, timing, width, label=""):
    """Appends the reference's record of `stage` to `out` (a JSON line, as `cargo xtask bench`
    reads them) and shows it on standard error, the stage in a column `width` wide (`label`
    after it)."""
    rec = dict(group=group, stage=stage, implementation="reference", device=device,
               threads=threads, shape=shape, **timing)
    print(f"{stage:<{width}} {label}{timing['median_ms']:9.3f} ms (median of {timing['iters']})",
          file=sys.stderr)
    out.write(json.dumps(rec) + "\n")
    out.flush()
