"""Reference timings beside `crates/chatterbox-pipeline/benches/stream.rs`, as JSON lines. Run by
`cargo xtask bench stream --threads 2` (parity/.venv).

The reference does not stream: `generate` returns the whole waveform, so its time to first
audio (`*_ttfa`) is its whole `generate` time, recorded again as `*_generate_total`. Timed:
`ChatterboxTTS.generate` (`english_*`, CFG, default options) and `ChatterboxTurboTTS.generate`
(`turbo_*`, default options) on the Rust bench's checkpoints (`CHATTERBOX_STREAM_CKPT_ENGLISH` /
`CHATTERBOX_STREAM_CKPT_TURBO`, else /tmp/chatterbox-bench-english / -turbo, written by
parity/checkpoints.py --size full when missing), text, and voice (its 10 s speech-like clip fed
to `prepare_conditionals` through patched librosa calls, as pipeline.py does; not timed; Turbo
without loudness normalisation, as the Rust `prepare_conditionals_from_clip`).

`generate` hard-codes `max_new_tokens=1000` (English) / `max_gen_len=1000` (Turbo): the call to
T3 is patched to `CHATTERBOX_STREAM_TOKENS` (default 250), the Rust side's `max_new_tokens` (Rust
Turbo passes it on as `max_gen_len`, so both draw at most N + 1 Turbo tokens). The stop token
stays on, as on the Rust side (whose pipeline options cannot turn it off); the two sides'
samplers draw different tokens, so either may stop early: `*_audio_s` (seconds, stored in the
`*_ms` fields) shows the audio each produced. Perth watermarking is replaced by the identity
(the Rust crate does not ship it). tqdm's progress bars are off.

`CHATTERBOX_BENCH_RUNS` timed runs (median; default 3) after one warm-up, seed 0 before each.
`--device cuda` (or `CHATTERBOX_BENCH_DEVICE=cuda`) runs on the GPU in fp32, as users run the
reference, with a synchronize before each clock stop. `CHATTERBOX_STREAM_ONLY=english|turbo`
runs one variant.
"""
import json
import os
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
from harness import bench_args, speech_like  # noqa: E402

N_TOKENS = int(os.environ.get("CHATTERBOX_STREAM_TOKENS", "250"))
# The Rust bench's TEXT: three sentences, 196 characters (one text chunk).
TEXT = ("The quick brown fox jumps over the lazy dog near the old river bank. "
        "Then it runs far away into the green forest, where nobody can find it. "
        "At night it sleeps under a tall oak tree, safe and warm.")
VARIANTS = {
    # variant: (checkpoint env, default dir, marker file, T3 method, its length kwarg)
    "english": ("CHATTERBOX_STREAM_CKPT_ENGLISH", "/tmp/chatterbox-bench-english", "t3_cfg.safetensors",
                "inference", "max_new_tokens"),
    "turbo": ("CHATTERBOX_STREAM_CKPT_TURBO", "/tmp/chatterbox-bench-turbo", "t3_turbo_v1.safetensors",
              "inference_turbo", "max_gen_len"),
}


class NoWatermark:
    def apply_watermark(self, wav, sample_rate):
        return wav


def load(variant, device):
    """The reference model on `device` with the bench voice prepared."""
    import checkpoints
    from chatterbox import tts as tts_module
    from chatterbox import tts_turbo as turbo_module

    env, default, marker, method, kwarg = VARIANTS[variant]
    ckpt = os.environ.get(env) or default
    if not os.path.exists(os.path.join(ckpt, marker)):
        print(f"writing a full-size random {variant} checkpoint to {ckpt}", file=sys.stderr)
        checkpoints.build_checkpoint(variant, ckpt, size="full", seed=0)
    module = tts_module if variant == "english" else turbo_module
    if variant == "english":
        model = tts_module.ChatterboxTTS.from_local(ckpt, device)
    else:
        model = turbo_module.ChatterboxTurboTTS.from_local(ckpt, device)
    model.watermarker = NoWatermark()
    wav24, wav16 = speech_like(24000, 10.0), speech_like(16000, 10.0)
    old_load, old_resample = module.librosa.load, module.librosa.resample
    module.librosa.load = lambda path, sr: (wav24.copy(), sr)
    module.librosa.resample = lambda y, **k: wav16.copy()
    try:
        with torch.inference_mode():
            if variant == "english":
                model.prepare_conditionals("clip.wav", exaggeration=0.5)
            else:
                model.prepare_conditionals("clip.wav", exaggeration=0.0, norm_loudness=False)
    finally:
        module.librosa.load, module.librosa.resample = old_load, old_resample

    # generate's hard-coded length -> N_TOKENS, through the model's own T3 call.
    inner = getattr(model.t3, method)

    def fixed(*a, **k):
        k[kwarg] = N_TOKENS
        return inner(*a, **k)
    setattr(model.t3, method, fixed)
    return model


def main():
    a = bench_args(runs=int(os.environ.get("CHATTERBOX_BENCH_RUNS", "3")),
                   device=os.environ.get("CHATTERBOX_BENCH_DEVICE", "cpu"))
    dev = torch.device(a.device)
    only = os.environ.get("CHATTERBOX_STREAM_ONLY", "")
    runs = max(1, a.runs)
    records = []
    for variant in VARIANTS:
        if only and only != variant:
            continue
        model = load(variant, a.device)
        gen_ms, audio_s = [], []
        for run in range(runs + 1):
            torch.manual_seed(0)
            t = time.perf_counter()
            with torch.inference_mode():
                wav = model.generate(TEXT)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            took = (time.perf_counter() - t) * 1e3
            secs = wav.shape[-1] / 24000
            warm = " (warm-up)" if run == 0 else ""
            print(f"{variant} run {run}{warm}: generate {took:.1f} ms, {secs:.2f} s of audio", file=sys.stderr)
            if run > 0:
                gen_ms.append(took)
                audio_s.append(secs)
        shape = f"{audio_s[-1]:.2f} s audio, {N_TOKENS} tokens"
        for stage, times, sh in [
            ("ttfa", gen_ms, f"no streaming: the whole generate, {N_TOKENS} tokens"),
            ("generate_total", gen_ms, shape),
            ("audio_s", audio_s, "seconds of generated audio (not ms)"),
        ]:
            v = sorted(times)
            timing = {"median_ms": v[len(v) // 2], "min_ms": v[0], "iters": len(v)}
            name = f"{variant}_{stage}"
            print(f"{name:<30} {timing['median_ms']:10.2f} (median of {timing['iters']})  {sh}", file=sys.stderr)
            records.append(dict(group="stream", stage=name, implementation="reference", device=dev.type,
                                threads=a.threads, shape=sh, **timing))
        del model
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    with open(a.out, "a") as out:
        for r in records:
            out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
