"""Reference timings of the flow stages `crates/chatterbox-s3gen/benches/flow.rs` measures, on the
same shapes, as JSON lines. Run by `cargo xtask bench flow` (parity/.venv).

S3Gen's full-size flow (`S3Token2Mel`'s configuration, random weights): the whole
`CausalMaskedDiffWithXvec.inference` with a 250-token (10 s) prompt, N new tokens and 10 Euler
steps with classifier-free guidance (batch 2); one `ConditionalDecoder` call on a 2 x 700-frame
batch; the meanflow flow (2 steps, no guidance).

Environment (as the Rust side): CHATTERBOX_BENCH_DEVICE (cpu | cuda), CHATTERBOX_BENCH_DTYPE
(f32 | f16 | bf16: the estimator's dtype, the reference's `S3Gen.estimator_dtype` path),
CHATTERBOX_BENCH_FLOW_TOKENS (default 100 on the CPU, 100,500 on CUDA), CHATTERBOX_BENCH_ITERS
(default 1 on the CPU, 5 on CUDA).
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from chatterbox.models.s3gen.configs import CFM_PARAMS  # noqa: E402
from chatterbox.models.s3gen.decoder import ConditionalDecoder  # noqa: E402
from chatterbox.models.s3gen.flow import CausalMaskedDiffWithXvec  # noqa: E402
from chatterbox.models.s3gen.flow_matching import CausalConditionalCFM  # noqa: E402
from chatterbox.models.s3gen.transformer.upsample_encoder import UpsampleConformerEncoder  # noqa: E402
from harness import bench_args  # noqa: E402

N_PROMPT = 250


def env(name, default=None):
    v = os.environ.get(name, "")
    return v if v else default


def build(meanflow, device, est_dtype):
    """The flow exactly as S3Token2Mel.__init__ builds it."""
    torch.manual_seed(0)
    encoder = UpsampleConformerEncoder(
        output_size=512, attention_heads=8, linear_units=2048, num_blocks=6, dropout_rate=0.1,
        positional_dropout_rate=0.1, attention_dropout_rate=0.1, normalize_before=True,
        input_layer='linear', pos_enc_layer_type='rel_pos_espnet', selfattention_layer_type='rel_selfattn',
        input_size=512, use_cnn_module=False, macaron_style=False)
    estimator = ConditionalDecoder(
        in_channels=320, out_channels=80, causal=True, channels=[256], dropout=0.0, attention_head_dim=64,
        n_blocks=4, num_mid_blocks=12, num_heads=8, act_fn='gelu', meanflow=meanflow)
    decoder = CausalConditionalCFM(spk_emb_dim=80, cfm_params=CFM_PARAMS, estimator=estimator)
    flow = CausalMaskedDiffWithXvec(encoder=encoder, decoder=decoder).to(device).eval()
    flow.decoder.estimator.to(est_dtype)
    return flow


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_it(f, device, warmup, iters):
    for _ in range(warmup):
        f()
    sync(device)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        f()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return {"median_ms": times[len(times) // 2], "min_ms": times[0], "iters": len(times)}


def main():
    a = bench_args()
    dev_name = env("CHATTERBOX_BENCH_DEVICE", "cpu")
    device = torch.device(dev_name)
    gpu = device.type != "cpu"
    est_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[env("CHATTERBOX_BENCH_DTYPE", "f32")]
    note = "" if est_dtype == torch.float32 else f", estimator {env('CHATTERBOX_BENCH_DTYPE').upper()}"
    tokens = [int(s) for s in env("CHATTERBOX_BENCH_FLOW_TOKENS", "100,500" if gpu else "100").split(",")]
    iters = int(env("CHATTERBOX_BENCH_ITERS", "5" if gpu else "1"))
    warmup = 1 if gpu else 0
    g = torch.Generator().manual_seed(0)
    ptok = ((torch.arange(N_PROMPT) * 23 + 5) % 6561).unsqueeze(0).to(device)
    pfeat = torch.randn(1, 2 * N_PROMPT, 80, generator=g).to(device)
    emb = torch.randn(1, 192, generator=g).to(device)
    records = []

    def push(stage, shape, timing):
        rec = dict(group="flow", stage=stage, implementation="reference", device=dev_name,
                   threads=a.threads, shape=shape, **timing)
        print(f"{stage:<40} {timing['median_ms']:10.1f} ms (median of {timing['iters']})", file=sys.stderr)
        records.append(rec)

    with torch.inference_mode():
        flow = build(False, device, est_dtype)
        for n in tokens:
            tok = ((torch.arange(n) * 37 + 5) % 6561).unsqueeze(0).to(device)

            def run():
                return flow.inference(token=tok, token_len=torch.tensor([n], device=device), prompt_token=ptok,
                                      prompt_token_len=torch.tensor([N_PROMPT], device=device), prompt_feat=pfeat,
                                      prompt_feat_len=None, embedding=emb, finalize=True, n_timesteps=10)
            t = 2 * (N_PROMPT + n)
            push(f"flow_{n}tok_{N_PROMPT}prompt_10steps",
                 f"{n} + {N_PROMPT} prompt tokens, CFG batch 2 x {t} frames{note}", time_it(run, device, warmup, iters))

        T = 2 * (N_PROMPT + 100)
        est = flow.decoder.estimator
        x, mu, cond = (torch.randn(2, 80, T, generator=g).to(device, est_dtype) for _ in range(3))
        spks = torch.randn(2, 80, generator=g).to(device, est_dtype)
        mask = torch.ones(2, 1, T, device=device, dtype=est_dtype)
        t = torch.tensor([0.3, 0.3], device=device, dtype=est_dtype)
        push("estimator_b2x700", f"ConditionalDecoder, batch 2 x {T} frames{note}",
             time_it(lambda: est(x, mask, mu, t, spks, cond), device, 1, 10 if gpu else 3))
        del flow, est

        flow = build(True, device, est_dtype)
        n = tokens[0]
        tok = ((torch.arange(n) * 37 + 5) % 6561).unsqueeze(0).to(device)
        noised = torch.randn(1, 80, 2 * n, generator=g).to(device)

        def run_mf():
            return flow.inference(token=tok, token_len=torch.tensor([n], device=device), prompt_token=ptok,
                                  prompt_token_len=torch.tensor([N_PROMPT], device=device), prompt_feat=pfeat,
                                  prompt_feat_len=None, embedding=emb, finalize=True, n_timesteps=2,
                                  noised_mels=noised, meanflow=True)
        t = 2 * (N_PROMPT + n)
        push(f"flow_meanflow_{n}tok_{N_PROMPT}prompt_2steps", f"{n} + {N_PROMPT} prompt tokens, batch 1 x {t} frames{note}",
             time_it(run_mf, device, warmup, max(iters, 2)))

    with open(a.out, "a") as out:
        for rec in records:
            out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
