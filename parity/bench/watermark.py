"""Reference timings of Perth's pretrained watermarker (resemble-perth 1.0.1,
`PerthImplicitWatermarker()`: perth_net_250000.pth.tar) on the clips
`crates/chatterbox-watermark/benches/watermark.rs` measures: 10 s of the testkit's speech-like
signal at 24 kHz (chatterbox's rate; librosa soxr_hq to 32 kHz and back when embedding,
polyphase when detecting) and at 32 kHz, as JSON lines. Run by `cargo xtask bench watermark`
(parity/.venv).
"""

import torch
from perth.perth_net.perth_net_implicit.perth_watermarker import PerthImplicitWatermarker

from harness import bench_args, speech_like, time_it, write_record


def main():
    a = bench_args(device="cpu", device_help="cpu or cuda")
    wm = PerthImplicitWatermarker(device=a.device)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    with open(a.out, "a") as out, torch.inference_mode():
        for sr in (24000, 32000):
            x = speech_like(sr, 10.0)
            marked = wm.apply_watermark(x, sample_rate=sr)
            khz = sr // 1000
            for stage, f in [("embed", lambda: (wm.apply_watermark(x, sample_rate=sr), sync())),
                             ("detect", lambda: (wm.get_watermark(marked, sample_rate=sr), sync()))]:
                timing = time_it(f, warmup=1, min_iters=3, min_secs=2.0)
                write_record(out, "watermark", f"perth_{stage}_{khz}k_10s", a.device.split(":")[0],
                             a.threads, f"10 s @ {khz} kHz", timing, 28)


if __name__ == "__main__":
    main()
