"""Reference timings of the stages `crates/chatterbox-t3/benches/t3.rs` measures, on the same
shapes, as JSON lines. Run by `cargo xtask bench t3 --threads 2` (parity/.venv).

Full-size T3 English (Llama 520M, CFG batch 2) and Turbo (GPT-2 medium) with random weights
(torch's own init), the stop token disabled, the default sampling settings:
- `*_prefill`: `T3.inference(max_new_tokens=1)` / `inference_turbo(max_gen_len=0)`, i.e. the
  conditioning, the prompt's forward pass and the first token;
- `*_decode_per_token`: `(time of 201 tokens - time of 1 token) / 200`.

`--device cuda` (or `CHATTERBOX_BENCH_DEVICE=cuda`) runs on the GPU in fp32, as users run the
reference, with a synchronize before each clock stop.
"""
import argparse
import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from chatterbox.models.t3 import T3  # noqa: E402
from chatterbox.models.t3.modules.cond_enc import T3Cond  # noqa: E402
from chatterbox.models.t3.modules.t3_config import T3Config  # noqa: E402

DECODE_TOKENS = 200
TEXT_TOKENS = 60


DEV = torch.device("cpu")


def timed(f):
    t = time.perf_counter()
    f()
    if DEV.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def measure(name, first, full, runs, prefix):
    first()  # warm-up
    prefill, decode = [], []
    for _ in range(runs):
        p = timed(first)
        total = timed(full)
        prefill.append(p)
        decode.append((total - p) / DECODE_TOKENS)
    out = []
    for stage, times, shape in [(f"{name}_prefill", prefill, f"{prefix} positions + first token"),
                                (f"{name}_decode_per_token", decode, f"{DECODE_TOKENS} tokens")]:
        times.sort()
        out.append((stage, shape, {"median_ms": times[len(times) // 2], "min_ms": times[0], "iters": len(times)}))
    return out


def english(runs):
    torch.manual_seed(0)
    t3 = T3().eval().to(DEV)
    t3.hp.stop_speech_token = -1
    spk = (torch.randn(1, 256) * 0.06).to(DEV)
    prompt = torch.tensor([[(i * 37 + 11) % 6561 for i in range(150)]], device=DEV)
    text = [255] + [20 + (i * 7) % 600 for i in range(TEXT_TOKENS)] + [0]
    text = torch.tensor([text, text], device=DEV)

    def gen(n):
        cond = T3Cond(speaker_emb=spk, cond_prompt_speech_tokens=prompt,
                      emotion_adv=0.5 * torch.ones(1, 1, 1, device=DEV))
        t3.inference(t3_cond=cond, text_tokens=text, max_new_tokens=n, temperature=0.8, top_p=1.0, min_p=0.05,
                     repetition_penalty=1.2, cfg_weight=0.5)
    prefix = 34 + text.shape[1] + 2
    return measure("en_cfg", lambda: gen(1), lambda: gen(DECODE_TOKENS + 1), runs, prefix)


def turbo(runs):
    torch.manual_seed(0)
    hp = T3Config(text_tokens_dict_size=50276)
    hp.llama_config_name = "GPT2_medium"
    hp.speech_tokens_dict_size = 6563
    hp.input_pos_emb = None
    hp.speech_cond_prompt_len = 375
    hp.use_perceiver_resampler = False
    hp.emotion_adv = False
    t3 = T3(hp)
    del t3.tfmr.wte
    t3.eval().to(DEV)
    t3.hp.stop_speech_token = -1
    spk = (torch.randn(1, 256) * 0.06).to(DEV)
    prompt = torch.tensor([[(i * 53 + 5) % 6561 for i in range(375)]], device=DEV)
    text = torch.tensor([[1000 + i * 13 for i in range(TEXT_TOKENS)]], device=DEV)

    def gen(n):
        cond = T3Cond(speaker_emb=spk, cond_prompt_speech_tokens=prompt)
        t3.inference_turbo(cond, text, temperature=0.8, top_k=1000, top_p=0.95, repetition_penalty=1.2,
                           max_gen_len=n)
    prefix = 1 + 375 + TEXT_TOKENS + 1
    return measure("turbo", lambda: gen(0), lambda: gen(DECODE_TOKENS), runs, prefix)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=int(os.environ.get("CHATTERBOX_T3_BENCH_RUNS", "2")))
    p.add_argument("--device", default=os.environ.get("CHATTERBOX_BENCH_DEVICE", "cpu"))
    a = p.parse_args()
    global DEV
    DEV = torch.device(a.device)
    torch.set_num_threads(a.threads)
    only = os.environ.get("CHATTERBOX_T3_BENCH_ONLY", "")
    with torch.inference_mode(), open(a.out, "a") as out:
        for name, f in [("en", english), ("turbo", turbo)]:
            if only and only != name:
                continue
            for stage, shape, timing in f(a.runs):
                rec = dict(group="t3", stage=stage, implementation="reference", device=DEV.type, threads=a.threads,
                           shape=shape, **timing)
                print(f"{stage:<28} {timing['median_ms']:9.2f} ms (median of {timing['iters']})", file=sys.stderr)
                out.write(json.dumps(rec) + "\n")
            gc.collect()


if __name__ == "__main__":
    main()
