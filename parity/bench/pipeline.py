"""Reference timings of the stages `crates/chatterbox-pipeline/benches/pipeline.rs` measures, on
the same full-size random checkpoint and shapes, as JSON lines. Run by
`cargo xtask bench pipeline --threads 2` (parity/.venv).

Checkpoint: `CHATTERBOX_PIPELINE_CKPT` (parity/checkpoints.py --variant english --size full);
without it one is written to /tmp/chatterbox-bench-english first. Stages, with the reference's
own modules: `cond_ve` (VoiceEncoder.embeds_from_wavs), `cond_s3tok` (S3Tokenizer), `cond_campplus`
(CAMPPlus.inference), `cond_mel` (S3Gen's 24 kHz mel) on a 10 s clip; `t3_prefill` /
`t3_decode` (T3.inference with CFG, stop token disabled: the time of 1 token, then of
CHATTERBOX_PIPELINE_TOKENS tokens minus it); `flow` (S3Token2Wav.flow_inference), `vocoder`
(hift_inference + trim-fade); `total`; `rtf` (generation seconds over audio seconds, a ratio in
the `*_ms` fields).
"""
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
from harness import bench_args, speech_like  # noqa: E402

N_TOKENS = int(os.environ.get("CHATTERBOX_PIPELINE_TOKENS", "200"))
TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the "
        "green forest where nobody can find it anymore.")


def timed(f):
    t = time.perf_counter()
    r = f()
    return (time.perf_counter() - t) * 1e3, r


def main():
    a = bench_args(runs=int(os.environ.get("CHATTERBOX_PIPELINE_BENCH_RUNS", "1")))
    import checkpoints
    from chatterbox.models.s3gen.utils.mel import mel_spectrogram
    from chatterbox.tts import ChatterboxTTS
    import torch.nn.functional as F

    ckpt = os.environ.get("CHATTERBOX_PIPELINE_CKPT")
    if not ckpt:
        ckpt = "/tmp/chatterbox-bench-english"
        if not os.path.exists(os.path.join(ckpt, "t3_cfg.safetensors")):
            checkpoints.build_checkpoint("english", ckpt, size="full", seed=0)
    tts = ChatterboxTTS.from_local(ckpt, "cpu")
    wav24, wav16 = speech_like(24000, 10.0), speech_like(16000, 10.0)
    tts.conds = None
    import librosa
    from chatterbox import tts as tts_module
    old_load, old_resample = tts_module.librosa.load, tts_module.librosa.resample
    tts_module.librosa.load = lambda path, sr: (wav24.copy(), sr)
    tts_module.librosa.resample = lambda y, **k: wav16.copy()
    try:
        tts.prepare_conditionals("clip.wav", exaggeration=0.5)
    finally:
        tts_module.librosa.load, tts_module.librosa.resample = old_load, old_resample
    t3, s3 = tts.t3, tts.s3gen
    t3.hp.stop_speech_token = -1
    text = tts.tokenizer.text_to_tokens(TEXT)
    text = torch.cat([text, text])
    text = F.pad(F.pad(text, (1, 0), value=t3.hp.start_text_token), (0, 1), value=t3.hp.stop_text_token)
    names = ["cond_ve", "cond_s3tok", "cond_campplus", "cond_mel", "t3_prefill", "t3_decode", "flow",
             "vocoder", "total", "rtf"]
    times = {n: [] for n in names}
    with torch.inference_mode():
        for run in range(a.runs + 1):
            row = {}
            row["cond_ve"], _ = timed(lambda: tts.ve.embeds_from_wavs([wav16], sample_rate=16000))
            row["cond_s3tok"], _ = timed(lambda: s3.tokenizer.forward([torch.from_numpy(wav16)]))
            row["cond_campplus"], _ = timed(lambda: s3.speaker_encoder.inference(torch.from_numpy(wav16)[None]))
            row["cond_mel"], _ = timed(lambda: mel_spectrogram(torch.from_numpy(wav24)[None]))
            kw = dict(t3_cond=tts.conds.t3, text_tokens=text, temperature=0.8, cfg_weight=0.5,
                      repetition_penalty=1.2, min_p=0.05, top_p=1.0)
            one, _ = timed(lambda: t3.inference(max_new_tokens=1, **kw))
            alln, tokens = timed(lambda: t3.inference(max_new_tokens=N_TOKENS, **kw))
            row["t3_prefill"], row["t3_decode"] = one, alln - one
            tokens = (tokens[0][:N_TOKENS] % 6561).long()[None]
            row["flow"], mel = timed(lambda: s3.flow_inference(tokens, ref_dict=tts.conds.gen, finalize=True))

            def vocode():
                wav, _ = s3.hift_inference(mel, None)
                wav[:, :len(s3.trim_fade)] *= s3.trim_fade
                return wav
            row["vocoder"], wav = timed(vocode)
            row["total"] = sum(row[n] for n in names[:8])
            row["rtf"] = (row["t3_prefill"] + row["t3_decode"] + row["flow"] + row["vocoder"]) / 1e3 / (
                wav.shape[1] / 24000)
            if run > 0:
                for n in names:
                    times[n].append(row[n])
    shapes = ["10 s clip @ 16 kHz"] * 3 + ["10 s clip @ 24 kHz", f"{text.shape[1]} text tokens, CFG",
              f"{N_TOKENS - 1} tokens", f"{N_TOKENS} tokens, 10 steps, CFG", f"{2 * N_TOKENS} frames",
              "sum of the stages", "ratio: generation s / audio s"]
    with open(a.out, "a") as out:
        for n, shape in zip(names, shapes):
            v = sorted(times[n])
            timing = {"median_ms": v[len(v) // 2], "min_ms": v[0], "iters": len(v)}
            print(f"{n:<16} {timing['median_ms']:10.2f} (median of {timing['iters']})", file=sys.stderr)
            out.write(json.dumps(dict(group="pipeline", stage=n, implementation="reference", device="cpu",
                                      threads=a.threads, shape=shape, **timing)) + "\n")


if __name__ == "__main__":
    main()
