"""Reference timings of S3Gen's HiFT vocoder on the shapes `crates/chatterbox-vocoder/benches/
vocoder.rs` measures (200 and 1000 mel frames = 4 s and 20 s at 24 kHz), as JSON lines. Run by
`cargo xtask bench vocoder` (parity/.venv).

The model is `S3Token2Wav`'s HiFTGenerator with random weights, called the way
`S3Token2Wav.hift_inference` calls it (`HiFTGenerator.inference`, weight norm as the reference
leaves it: recomputed from its parametrization at every call). `CHATTERBOX_BENCH_DEVICE=cuda`
(or `--device cuda`) times it on the GPU, with a synchronize before the clock stops.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from chatterbox.models.s3gen.f0_predictor import ConvRNNF0Predictor  # noqa: E402
from chatterbox.models.s3gen.hifigan import HiFTGenerator  # noqa: E402
from harness import bench_args, time_it, write_record  # noqa: E402



def mel(frames):
    """The same speech-like log mel as the Rust bench."""
    b = torch.arange(80, dtype=torch.float32)[:, None]
    t = torch.arange(frames, dtype=torch.float32)[None, :]
    formant = 20.0 + 10.0 * torch.sin(t * 0.05)
    m = -1.0 - b * 0.05 + 2.0 * torch.exp(-((b - formant) / 6.0) ** 2) + 0.3 * torch.sin(t * 0.31 + b)
    return m[None]


def main():
    a = bench_args(device=os.environ.get("CHATTERBOX_BENCH_DEVICE", "cpu"))
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    hift = HiFTGenerator(sampling_rate=24000, upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
                         source_resblock_kernel_sizes=[7, 7, 11],
                         source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                         f0_predictor=ConvRNNF0Predictor()).to(dev).eval()
    with open(a.out, "a") as out:
        for frames, secs in [(200, 4), (1000, 20)]:
            x = mel(frames).to(dev)
            timing = time_it(lambda: hift.inference(speech_feat=x), warmup=1, min_iters=3,
                             min_secs=2.0, sync=sync)
            write_record(out, "vocoder", f"hift_inference_{secs}s", dev.type, a.threads,
                         f"{frames} mel frames -> {secs} s @ 24 kHz", timing, 34)


if __name__ == "__main__":
    main()
