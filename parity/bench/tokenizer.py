"""Reference timings of the S3 speech tokenizer stages `crates/chatterbox-s3gen/benches/tokenizer.rs`
measures, on the same shapes, as JSON lines. Run by `cargo xtask bench tokenizer` (parity/.venv).

The full-size `S3Tokenizer("speech_tokenizer_v2_25hz")` with random weights (speed does not
depend on their values), called as chatterbox calls it: `forward([wav], max_len=150)` on 6 s for
the T3 prompt, `forward([wav])` on 10 s as in `S3Gen.embed_ref`; `*_model` times `quantize` on
a precomputed mel. `CHATTERBOX_BENCH_DEVICE=cuda` (or `--device cuda`) times the GPU.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from chatterbox.models.s3tokenizer import S3Tokenizer  # noqa: E402
from s3tokenizer.utils import padding  # noqa: E402
from common import speech_like  # noqa: E402
from harness import bench_args, time_it, write_record  # noqa: E402



def main():
    a = bench_args(device=os.environ.get("CHATTERBOX_BENCH_DEVICE", "cpu"))
    device = a.device
    kind = device.split(":")[0]
    sync = torch.cuda.synchronize if kind == "cuda" else (lambda: None)
    torch.manual_seed(0)
    tok = S3Tokenizer("speech_tokenizer_v2_25hz").to(device).eval()
    x6 = speech_like(16000, 6.0, seed=3)
    x10 = speech_like(16000, 10.0, seed=4)
    with torch.inference_mode(), open(a.out, "a") as out:
        for stage, shape, x, max_len in [("tokenizer_6s", "6 s @ 16 kHz -> 150 tokens", x6, 150),
                                         ("tokenizer_10s", "10 s @ 16 kHz -> 250 tokens", x10, None)]:
            w = torch.from_numpy(x)
            mel = tok.log_mel_spectrogram(w.to(device))
            if max_len is not None:
                mel = mel[..., :max_len * 4]
            mels, mel_lens = padding([mel])
            mel_lens = mel_lens.to(device)
            for name, f in [(stage, lambda: tok.forward([w], max_len=max_len)),
                            (f"{stage}_model", lambda: tok.quantize(mels, mel_lens))]:
                timing = time_it(f, warmup=2, min_iters=10, min_secs=3.0, sync=sync)
                write_record(out, "tokenizer", name, kind, a.threads, shape, timing, 34)


if __name__ == "__main__":
    main()
