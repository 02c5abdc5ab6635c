"""The reference beside `crates/chatterbox-pipeline/benches/goals.rs` (issue 41's goals table), as
JSON lines. Run by `cargo xtask bench goals --threads 2` (parity/.venv) after the Rust side.

For each variant of `CHATTERBOX_GOALS_VARIANTS` (default turbo,nano,english,multilingual), in a
fresh process of this script (`--child VARIANT`, so that its peak memory is its own): the
reference model loaded from the Rust bench's checkpoint (`CHATTERBOX_GOALS_CKPT_<VARIANT>`, else
/tmp/chatterbox-bench-<variant>, written by parity/checkpoints.py --size full when missing;
`load_ms`), its voice prepared from the same 10 s speech-like clip through patched librosa calls,
as stream.py does (`voice_ms`; exaggeration 0.5, Turbo and Nano 0 without loudness
normalisation), then `generate` of the same 196-character text (`CHATTERBOX_GOALS_TEXT`
replaces it on both sides), default options, seed 0 (multilingual: language_id "en"), with T3's
hard-coded length patched to `CHATTERBOX_GOALS_TOKENS` (default 100; the Rust side's
`max_new_tokens`). The stop token stays on, as on the Rust side;
the two samplers draw different tokens, so `audio_s` says what each produced. Perth
watermarking is replaced by the identity (the Rust `from_dir` plugs none in); tqdm is off;
Multilingual's tokenizer is built offline (its Cangjie table from the checkpoint, no pkuseg
segmenter, as parity/recorders/text.py builds it) and its speech ids >= 6561 dropped before S3Gen
(the reference passes them on and fails; the Rust port drops them).

Recorded as `{variant}_f32_{metric}` (the Rust f32 rows' names, so `cargo xtask bench` pairs
them): `total_ms`, `audio_s`, `rtf`, `t3_prefill_ms` (from the call to the end of T3's first
transformer forward: text, conditioning, prefill), `t3_decode_per_token_ms` (first to last
forward over the forwards between: one per token), `tokens` (forwards after the first),
`flow_hift_ms` (last forward to the end), for Turbo `ttfa_ms` (the reference does not stream:
its first audio is its whole `generate`), and `peak_rss_mb` (VmHWM at the child's end).
`CHATTERBOX_GOALS_RUNS` timed generations (median; default 1) after `CHATTERBOX_GOALS_WARMUP`
untimed ones (default 0). `CHATTERBOX_GOALS_BUDGET_S` / `CHATTERBOX_GOALS_CONFIG_TIMEOUT_S`:
as on the Rust side, for this script's variants.

At the end, when the Rust records are found (`--rust FILE`, else `goals-rust.jsonl` beside
`--out`, where `cargo xtask bench` writes them), the goals table with both sides is printed.
`--summary RUST.jsonl REF.jsonl` prints only that table.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

N_TOKENS = int(os.environ.get("CHATTERBOX_GOALS_TOKENS", "100"))
# goals.rs's TEXT (stream.rs's): three sentences, 196 characters, one text chunk.
# `CHATTERBOX_GOALS_TEXT` replaces it on both sides.
TEXT = ("The quick brown fox jumps over the lazy dog near the old river bank. "
        "Then it runs far away into the green forest, where nobody can find it. "
        "At night it sleeps under a tall oak tree, safe and warm.")
if os.environ.get("CHATTERBOX_GOALS_TEXT", "").strip():
    TEXT = os.environ["CHATTERBOX_GOALS_TEXT"]
VARIANTS = {
    # variant: (marker file, T3 method, its length kwarg)
    "turbo": ("t3_turbo_v1.safetensors", "inference_turbo", "max_gen_len"),
    "nano": ("t3_nano_v1.safetensors", "inference_turbo", "max_gen_len"),
    "english": ("t3_cfg.safetensors", "inference", "max_new_tokens"),
    "multilingual": ("t3_mtl23ls_v2.safetensors", "inference", "max_new_tokens"),
}


class NoWatermark:
    def apply_watermark(self, wav, sample_rate):
        return wav


def checkpoint_dir(variant):
    return os.environ.get(f"CHATTERBOX_GOALS_CKPT_{variant.upper()}") or f"/tmp/chatterbox-bench-{variant}"


def vm(field):
    """`VmHWM` / `VmRSS` of this process in MB (10^6 bytes); NaN where unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return float("nan")


def child(variant, threads):
    """One variant in this process: its figures by metric name."""
    import torch
    from harness import speech_like
    from chatterbox import mtl_tts, tts as tts_module, tts_turbo

    torch.set_num_threads(threads)
    marker, method, kwarg = VARIANTS[variant]
    ckpt = checkpoint_dir(variant)
    out = {}
    t = time.perf_counter()
    if variant == "english":
        module, model = tts_module, tts_module.ChatterboxTTS.from_local(ckpt, "cpu")
    elif variant == "multilingual":
        # offline, as parity/recorders/text.py builds MTLTokenizer: the Cangjie table from the
        # checkpoint instead of the hub, no pkuseg segmenter (its model is a download)
        import chatterbox.models.tokenizers.tokenizer as tokmod
        tokmod.hf_hub_download = lambda repo_id, filename, cache_dir=None, **kw: os.path.join(ckpt, filename)
        tokmod.ChineseCangjieConverter._init_segmenter = lambda self: setattr(self, "segmenter", None)
        module, model = mtl_tts, mtl_tts.ChatterboxMultilingualTTS.from_local(ckpt, "cpu")
        # The reference passes ids >= 6561 on to S3Gen, whose embedding then fails (a trained
        # T3 does not draw them; random weights do): dropped, as the Rust port drops them.
        drop = mtl_tts.drop_invalid_tokens
        mtl_tts.drop_invalid_tokens = lambda x: (lambda v: v[v < 6561])(drop(x))
    else:
        module = tts_turbo
        model = tts_turbo.ChatterboxTurboTTS.from_local(ckpt, "cpu", nano=variant == "nano")
    out["load_ms"] = (time.perf_counter() - t) * 1e3
    model.watermarker = NoWatermark()

    wav24, wav16 = speech_like(24000, 10.0), speech_like(16000, 10.0)
    old_load, old_resample = module.librosa.load, module.librosa.resample
    module.librosa.load = lambda path, sr: (wav24.copy(), sr)
    module.librosa.resample = lambda y, **k: wav16.copy()
    t = time.perf_counter()
    try:
        with torch.inference_mode():
            if variant in ("turbo", "nano"):
                model.prepare_conditionals("clip.wav", exaggeration=0.0, norm_loudness=False)
            else:
                model.prepare_conditionals("clip.wav", exaggeration=0.5)
    finally:
        module.librosa.load, module.librosa.resample = old_load, old_resample
    out["voice_ms"] = (time.perf_counter() - t) * 1e3

    # generate's hard-coded length -> N_TOKENS, through the model's own T3 call.
    inner = getattr(model.t3, method)

    def fixed(*a, **k):
        k[kwarg] = N_TOKENS
        return inner(*a, **k)
    setattr(model.t3, method, fixed)
    # the end of every transformer forward (prefill, then one per token)
    forwards = []
    model.t3.tfmr.register_forward_hook(lambda *_: forwards.append(time.perf_counter()))

    def generate():
        if variant == "multilingual":
            return model.generate(TEXT, language_id="en")
        return model.generate(TEXT)

    runs = max(1, int(os.environ.get("CHATTERBOX_GOALS_RUNS", "1")))
    warmup = int(os.environ.get("CHATTERBOX_GOALS_WARMUP", "0"))
    names = ["total_ms", "audio_s", "rtf", "tokens", "t3_prefill_ms", "t3_decode_per_token_ms", "flow_hift_ms"]
    rows = {n: [] for n in names}
    for run in range(warmup + runs):
        forwards.clear()
        torch.manual_seed(0)
        t = time.perf_counter()
        with torch.inference_mode():
            wav = generate()
        end = time.perf_counter()
        total = (end - t) * 1e3
        audio_s = wav.shape[-1] / 24000
        first = (forwards[0] - t) * 1e3 if forwards else float("nan")
        per_token = (forwards[-1] - forwards[0]) * 1e3 / max(1, len(forwards) - 1) if forwards else float("nan")
        row = dict(total_ms=total, audio_s=audio_s, rtf=total / 1e3 / audio_s, tokens=max(0, len(forwards) - 1),
                   t3_prefill_ms=first, t3_decode_per_token_ms=per_token,
                   flow_hift_ms=(end - forwards[-1]) * 1e3 if forwards else float("nan"))
        warm = " (warm-up)" if run < warmup else ""
        print(f"reference {variant} run {run}{warm}: {total:.0f} ms for {audio_s:.2f} s of audio (RTF "
              f"{row['rtf']:.3f}), {row['tokens']} tokens, prefill {first:.0f} ms, decode {per_token:.1f} "
              f"ms/token, flow+HiFT {row['flow_hift_ms']:.0f} ms", file=sys.stderr)
        if run >= warmup:
            for n in names:
                rows[n].append(row[n])
    for n in names:
        v = sorted(rows[n])
        out[n] = v[len(v) // 2]
    if variant == "turbo":
        out["ttfa_ms"] = out["total_ms"]
    out["peak_rss_mb"] = vm("VmHWM:")
    return out


UNITS = {"rtf": "ratio (not ms)", "tokens": "count (not ms)"}


def unit(metric):
    if metric.endswith("_ms"):
        return "ms"
    if metric.endswith("_mb"):
        return "MB (not ms)"
    if metric.endswith("_s"):
        return "seconds (not ms)"
    return UNITS.get(metric, "count (not ms)")


def read_records(path):
    recs = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return recs


def summary(rust, ref):
    """The goals table: Rust per format, the reference, the goal."""
    def val(recs, stage):
        for r in recs:
            if r.get("stage") == stage:
                return r["median_ms"]
        return None
    formats = []
    for r in rust:
        parts = r["stage"].split("_")
        if len(parts) > 2 and parts[0] in VARIANTS and parts[1] not in formats:
            formats.append(parts[1])

    def cell(x, digits):
        return "-" if x is None or x != x else f"{x:.{digits}f}"
    rows = [("Turbo RTF", "turbo", "rtf", 1.0, 3, "<= 0.5"),
            ("Nano RTF", "nano", "rtf", 1.0, 3, "<= 0.3"),
            ("English RTF", "english", "rtf", 1.0, 3, "<= 1.5"),
            ("Multilingual RTF", "multilingual", "rtf", 1.0, 3, "<= 1.5"),
            ("Turbo streamed first audio (s)", "turbo", "ttfa_ms", 1e-3, 2, "<= 0.5 s"),
            ("Turbo peak resident (GB)", "turbo", "peak_rss_mb", 1e-3, 2, "<= 1 GB"),
            ("Turbo T3 decode ms/token", "turbo", "t3_decode_per_token_ms", 1.0, 1, "q4 <= 1.3x floor"),
            ("English T3 decode ms/token", "english", "t3_decode_per_token_ms", 1.0, 1, "q4 <= 1.3x floor"),
            ("Turbo q4 decode / floor", "turbo", "decode_x_floor", 1.0, 2, "<= 1.3"),
            ("English q4 decode / floor", "english", "decode_x_floor", 1.0, 2, "<= 1.3")]
    head = f"{'':<34}" + "".join(f" {'rust ' + f:>9}" for f in formats) + f" {'reference':>10}  goal"
    lines = ["issue 41 goals (Rust and the reference, same run)", head]
    for label, v, m, scale, digits, goal in rows:
        line = f"{label:<34}"
        for f in formats:
            x = val(rust, f"{v}_{f}_{m}")
            line += f" {cell(None if x is None else x * scale, digits):>9}"
        x = val(ref, f"{v}_f32_{m}")
        line += f" {cell(None if x is None else x * scale, digits):>10}  {goal}"
        lines.append(line)
    triad = val(rust, "triad_gbs")
    if triad is not None:
        lines.append(f"(floor: T3's projections in the format / triad {triad:.1f} GB/s)")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", choices=list(VARIANTS))
    p.add_argument("--rust", help="the Rust side's records (default: goals-rust.jsonl beside --out)")
    p.add_argument("--summary", nargs=2, metavar=("RUST", "REFERENCE"))
    a = p.parse_args()
    if a.summary:
        summary(read_records(a.summary[0]), read_records(a.summary[1]))
        return
    if not a.out:
        p.error("--out is required")
    if a.child:
        figures = child(a.child, a.threads)
        with open(a.out, "w") as f:
            json.dump(figures, f)
        return

    variants = [v.strip().lower() for v in
                (os.environ.get("CHATTERBOX_GOALS_VARIANTS") or ",".join(VARIANTS)).split(",") if v.strip()]
    budget = os.environ.get("CHATTERBOX_GOALS_BUDGET_S")
    budget = float(budget) if budget else None
    per = os.environ.get("CHATTERBOX_GOALS_CONFIG_TIMEOUT_S")
    per = float(per) if per else None
    started = time.perf_counter()
    skipped = []
    for variant in variants:
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
        left = None if budget is None else budget - (time.perf_counter() - started)
        if left is not None and left <= 0:
            print(f"reference {variant}: skipped (CHATTERBOX_GOALS_BUDGET_S spent)", file=sys.stderr)
            skipped.append(f"{variant} (budget spent)")
            continue
        ckpt = checkpoint_dir(variant)
        if not os.path.exists(os.path.join(ckpt, VARIANTS[variant][0])):
            import checkpoints
            print(f"writing a full-size random {variant} checkpoint to {ckpt}", file=sys.stderr)
            checkpoints.build_checkpoint(variant, ckpt, size="full", seed=0)
        limit = min(x for x in (left, per, float("inf")) if x is not None)
        tmp = f"{a.out}.{variant}.child.json"
        print(f"== reference {variant} ({ckpt})", file=sys.stderr)
        try:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", variant, "--out", tmp,
                                "--threads", str(a.threads)],
                               timeout=None if limit == float("inf") else limit)
        except subprocess.TimeoutExpired:
            print(f"reference {variant}: stopped at the time limit ({limit:.0f} s)", file=sys.stderr)
            skipped.append(f"{variant} (stopped after {limit:.0f} s)")
            continue
        if r.returncode != 0:
            print(f"reference {variant}: failed ({r.returncode})", file=sys.stderr)
            skipped.append(f"{variant} (failed: {r.returncode})")
            continue
        with open(tmp) as f:
            figures = json.load(f)
        os.remove(tmp)
        shape = f"{N_TOKENS} tokens max, {len(TEXT)}-character text, 10 s voice, reference fp32, {a.threads} threads"
        with open(a.out, "a") as out:
            for metric, value in sorted(figures.items()):
                stage = f"{variant}_f32_{metric}"
                print(f"{stage:<40} {value:12.2f}  {unit(metric)}", file=sys.stderr)
                out.write(json.dumps(dict(group="goals", stage=stage, implementation="reference", device="cpu",
                                          threads=a.threads, shape=f"{unit(metric)}; {shape}", median_ms=value,
                                          min_ms=value, iters=1)) + "\n")
    if skipped:
        print("reference not measured: " + "; ".join(skipped), file=sys.stderr)
    rust = a.rust or os.path.join(os.path.dirname(os.path.abspath(a.out)), "goals-rust.jsonl")
    if os.path.exists(rust):
        print(file=sys.stderr)
        summary(read_records(rust), read_records(a.out))
    print(f"reference side: {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
