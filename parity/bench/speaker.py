"""Reference timings of the speaker-encoder stages `crates/chatterbox-speaker/benches/speaker.rs`
measures, on the same shapes and stage names, as JSON lines. Run by
`cargo xtask bench speaker --threads 2` (parity/.venv).

Full-size modules with random weights (seed 0): `VoiceEncoder()` timed through
`embeds_from_wavs` (trim + mel + LSTM over partials) and S3Gen's `CAMPPlus(memory_efficient=False)`
through `inference` (Kaldi fbank + network), under `torch.inference_mode()`; on the CPU and, when
torch sees a GPU, on CUDA too (records with `device: cuda`, synchronised before the clock stops).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from chatterbox.models.s3gen.xvector import CAMPPlus  # noqa: E402
from chatterbox.models.voice_encoder import VoiceEncoder  # noqa: E402
from common import speech_like  # noqa: E402
from harness import bench_args, time_it, write_record  # noqa: E402



def main():
    a = bench_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    with open(a.out, "a") as out:
        for device in devices:
            for stage, shape, f in stages_on(device):
                timing = time_it(f, warmup=2, min_iters=10, min_secs=2.0)
                write_record(out, "speaker", stage, device, a.threads, shape, timing, 34,
                             label=f"{device:<5} ")


def stages_on(device):
    """(stage, shape, callable) on `device`; CUDA timings synchronise before returning."""
    torch.manual_seed(0)
    ve = VoiceEncoder().eval().to(device)
    cp = CAMPPlus(memory_efficient=False).eval().to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def timed(f):
        def run():
            with torch.inference_mode():
                f()
            sync()
        return run

    stages = []
    for secs in (6, 40):
        x = speech_like(16000, secs, seed=3)
        stages.append((f"ve_embeds_from_wavs_{secs}s", f"{secs} s @ 16 kHz",
                       timed(lambda x=x: ve.embeds_from_wavs([x], sample_rate=16000))))
    for secs in (6, 10):
        x = torch.from_numpy(speech_like(16000, secs, seed=3))[None].to(device)
        stages.append((f"campplus_inference_{secs}s", f"{secs} s @ 16 kHz", timed(lambda x=x: cp.inference(x))))
    return stages


if __name__ == "__main__":
    main()
