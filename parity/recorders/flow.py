"""chatterbox-s3gen flow cases: S3Gen's token-to-mel flow (chatterbox/models/s3gen/flow.py
`CausalMaskedDiffWithXvec`, flow_matching.py `CausalConditionalCFM`, decoder.py
`ConditionalDecoder`, transformer/upsample_encoder.py `UpsampleConformerEncoder`), each run
through the reference's own classes.

Committed cases use the tiny configurations of tiny_configs.py (32 wide encoder with the
pre-lookahead / upsample surgery and one up block; estimator with channels=[32], 2 heads of 16,
1 transformer block per stage, 2 mid blocks). To stay inside the fixture budget the estimator
and CFM checks live in the two whole-flow cases, whose state_dict already holds the estimator
under `decoder.estimator.*`:

* `encoder_b2_padded`: UpsampleConformerEncoder on a padded batch of 2 (lengths 9 and 6), every
  row compared, padded ones included (masks as the reference builds them).
* `flow` (meanflow=False): one estimator call on a padded CFG-style batch (`estimator`); the
  10-step cosine-schedule Euler solve with classifier-free guidance on a padded batch of 2
  (`cfm`); `CausalMaskedDiffWithXvec.inference` with finalize=True (`mu`: the encoder_proj
  output, `feat`) and finalize=False (`feat_partial`).
* `flow_meanflow`: the same with the meanflow estimator (extra `r` input, time_embed_mixer),
  the 2-step linear-schedule `basic_euler` without CFG and `noised_mels`.

Random draws are inputs: the CFM's `torch.randn_like(mu)` is drawn again from the same seed and
recorded (a pre-hook on the estimator checks that its first `x` is exactly that noise).

finalize=False: the reference trims the encoder output by pre_lookahead_len * token_mel_ratio
frames but builds the decoder mask from the UNtrimmed encoder mask, so its solver crashes on a
shape mismatch (flow.py L168-181, flow_matching.py L128). The case records it the way CosyVoice2
(which this code was copied from) does it: the mask of the trimmed length. The encoder is
wrapped so that the mask it returns is trimmed too; every other line is the reference's.

Streaming (issue 21), `stream_cfg` (10-step CFG flow) and `stream_meanflow` (2-step meanflow), kind
`flow_stream`: the reference's own primitives driven through the chunk schedule of the upstream
CosyVoice2 lineage this code was copied from (cosyvoice/cli/model.py `CosyVoice2Model.tts(stream=True)`
and `token2wav`; chatterbox ships no streamer of its own). Speech tokens (random ids) arrive; a
chunk runs as soon as `hop + pre_lookahead_len` tokens follow the emitted ones, as
`flow.inference(prompt + tokens[:offset + hop + lookahead], finalize=False)`, and keeps the mel
frames not yet emitted (`feat[:, :, offset * token_mel_ratio:]`); the rest of the tokens go in one
`finalize=True` call. `hops` (tokens made final per chunk, the last one repeating) is the schedule:
CosyVoice2 uses 25 throughout; here a short first chunk, as issue 21 asks. Outputs: every chunk's
new mel frames (`mel_<k>`). The CFM noise is per frame position (frame i gets the same noise in
every chunk, like CosyVoice2's fixed `rand_noise[:, :, :T]`): `torch.randn_like(mu)` returns the
recorded `noise[..., :T]`; the meanflow case passes `noised_mels = noise[..., prompt:T]` as
`S3Token2Wav.flow_inference` passes its draw. Weights are those of the `flow` / `flow_meanflow`
cases (rebuilt identically, checked, not stored again: `weights_case`). The HiFT half of the same
run is recorded by recorders/vocoder.py (`vocoder/stream_*`).

`--full` adds the full-size encoder and flows (S3Gen's configuration, random weights, 50 prompt +
50 new tokens; ~0.15 + 0.45 + 0.46 GB): write them outside the repository (`--out /tmp/full`).
"""
import os

import torch
from safetensors.torch import load_file

from chatterbox.models.s3gen.configs import CFM_PARAMS
from chatterbox.models.s3gen.decoder import ConditionalDecoder
from chatterbox.models.s3gen.flow import CausalMaskedDiffWithXvec
from chatterbox.models.s3gen.flow_matching import CausalConditionalCFM
from chatterbox.models.s3gen.transformer.upsample_encoder import (
    PreLookaheadLayer, Upsample1D, UpsampleConformerEncoder)
from common import exact, patched, perturb_, rel_tol

COMPONENT = "flow"

# Tolerances (docs/parity.md, issue 6).
MODULE_RTOL = 1e-4   # one module call (encoder, estimator, encoder_proj): f32 GEMM order differs
SOLVE_RTOL = 1e-3    # full CFM solve / whole inference: per-step error compounds through the solver
MASK = exact()       # boolean padding masks

D_FLOW = 32          # tiny encoder width (tiny_configs.py)
TINY_ENCODER = dict(input_size=D_FLOW, output_size=D_FLOW, attention_heads=2, linear_units=2 * D_FLOW,
                    num_blocks=1, num_up_blocks=1, pre_lookahead_len=3, up_stride=2)
TINY_DECODER = dict(in_channels=320, out_channels=80, causal=True, channels=[32], attention_head_dim=16,
                    n_blocks=1, num_mid_blocks=2, num_heads=2, act_fn="gelu")
FULL_ENCODER = dict(input_size=512, output_size=512, attention_heads=8, linear_units=2048, num_blocks=6,
                    num_up_blocks=4, pre_lookahead_len=3, up_stride=2)
FULL_DECODER = dict(in_channels=320, out_channels=80, causal=True, channels=[256], attention_head_dim=64,
                    n_blocks=4, num_mid_blocks=12, num_heads=8, act_fn="gelu")
CFM = dict(inference_cfg_rate=CFM_PARAMS.inference_cfg_rate, t_scheduler=CFM_PARAMS.t_scheduler)


def build_encoder(cfg):
    """UpsampleConformerEncoder as S3Gen builds it; for the tiny width, tiny_configs.py's surgery
    (PreLookaheadLayer / Upsample1D are hard-coded to 512 channels, up_encoders to 4 layers)."""
    d = cfg["output_size"]
    enc = UpsampleConformerEncoder(
        output_size=d, attention_heads=cfg["attention_heads"], linear_units=cfg["linear_units"],
        num_blocks=cfg["num_blocks"], dropout_rate=0.1, positional_dropout_rate=0.1,
        attention_dropout_rate=0.1, normalize_before=True, input_layer="linear",
        pos_enc_layer_type="rel_pos_espnet", selfattention_layer_type="rel_selfattn",
        input_size=cfg["input_size"], use_cnn_module=False, macaron_style=False)
    if d != 512:
        enc.pre_lookahead_layer = PreLookaheadLayer(channels=d, pre_lookahead_len=cfg["pre_lookahead_len"])
        enc.up_layer = Upsample1D(channels=d, out_channels=d, stride=cfg["up_stride"])
    enc.up_encoders = enc.up_encoders[:cfg["num_up_blocks"]]
    return enc


def build_estimator(cfg, meanflow):
    return ConditionalDecoder(in_channels=cfg["in_channels"], out_channels=cfg["out_channels"], causal=True,
                              channels=cfg["channels"], dropout=0.0, attention_head_dim=cfg["attention_head_dim"],
                              n_blocks=cfg["n_blocks"], num_mid_blocks=cfg["num_mid_blocks"],
                              num_heads=cfg["num_heads"], act_fn="gelu", meanflow=meanflow)


def build_flow(enc_cfg, dec_cfg, meanflow):
    torch.manual_seed(0)
    dec = CausalConditionalCFM(spk_emb_dim=80, cfm_params=CFM_PARAMS, estimator=build_estimator(dec_cfg, meanflow))
    flow = CausalMaskedDiffWithXvec(input_size=enc_cfg["output_size"], spk_embed_dim=192, vocab_size=6561,
                                    encoder=build_encoder(enc_cfg), decoder=dec)
    return perturb_(flow).eval()


def flow_config(flow):
    return dict(input_size=flow.input_size, output_size=flow.output_size, spk_embed_dim=192,
                vocab_size=flow.vocab_size, token_mel_ratio=flow.token_mel_ratio,
                pre_lookahead_len=flow.pre_lookahead_len)


class TrimmedMaskEncoder(torch.nn.Module):
    """Wraps the encoder so that the mask it returns has the length of the output that
    `inference(finalize=False)` keeps (see the module docstring). Numerics untouched."""

    def __init__(self, encoder, trim):
        super().__init__()
        self.encoder = encoder
        self.trim = trim

    def forward(self, xs, xs_lens):
        h, masks = self.encoder(xs, xs_lens)
        return h, masks[:, :, :-self.trim]


class FirstCall:
    """Records the first `x` the estimator sees (to check the recorded noise). The solvers call
    `estimator.forward(...)` directly, bypassing hooks, so the bound method is wrapped."""

    def __init__(self, module):
        self.x = None
        self.module = module
        inner = module.forward

        def forward(*args, **kwargs):
            if self.x is None:
                self.x = (args[0] if args else kwargs["x"]).detach().clone()
            return inner(*args, **kwargs)

        module.forward = forward

    def remove(self):
        del self.module.forward  # back to the class's method


def padding_mask(lengths, T):
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).float().unsqueeze(1)  # (B, 1, T)


def record(rec):
    c = COMPONENT
    _encoder(rec, c)
    _flow(rec, c, "flow", TINY_ENCODER, TINY_DECODER, meanflow=False)
    _flow(rec, c, "flow_meanflow", TINY_ENCODER, TINY_DECODER, meanflow=True)
    record_stream(rec, c)
    if rec.full:
        _encoder(rec, c, "full_encoder_b2_padded", FULL_ENCODER, t=60)
        _flow(rec, c, "full_flow", FULL_ENCODER, FULL_DECODER, meanflow=False, n_prompt=50, n_tok=50)
        _flow(rec, c, "full_flow_meanflow", FULL_ENCODER, FULL_DECODER, meanflow=True, n_prompt=50, n_tok=50)


def _encoder(rec, c, case="encoder_b2_padded", cfg=TINY_ENCODER, t=9):
    if not rec.want(c, case, "encoder"):
        return
    torch.manual_seed(0)
    enc = perturb_(build_encoder(cfg)).eval()
    g = torch.Generator().manual_seed(rec.seed + 1)
    xs = torch.randn(2, t, cfg["input_size"], generator=g)
    lens = torch.tensor([t, t * 2 // 3])
    with torch.inference_mode():
        h, masks = enc(xs, lens)
    rec.case(c, case, "encoder", {"xs": xs, "xs_lens": lens}, {"h": h, "masks": masks.long()},
             {"h": rel_tol(MODULE_RTOL), "masks": MASK}, config={"encoder": cfg},
             state_dict=enc.state_dict())


def _flow(rec, c, case, enc_cfg, dec_cfg, meanflow, n_prompt=5, n_tok=7):
    kind = "flow"
    if not rec.want(c, case, kind):
        return
    flow = build_flow(enc_cfg, dec_cfg, meanflow)
    state = {k: v.clone() for k, v in flow.state_dict().items()}  # saved before any inference
    est, cfm = flow.decoder.estimator, flow.decoder
    ratio, look = flow.token_mel_ratio, flow.pre_lookahead_len
    g = torch.Generator().manual_seed(rec.seed + (2 if meanflow else 3))
    inputs, outputs, tol = {}, {}, {}

    # 1. one estimator call: a CFG-style batch of 2, the second row padded (length 9 of 12)
    T = 12
    e_in = dict(x=torch.randn(2, 80, T, generator=g), mask=padding_mask([T, 9], T),
                mu=torch.randn(2, 80, T, generator=g), t=torch.rand(2, generator=g),
                spks=torch.randn(2, 80, generator=g), cond=torch.randn(2, 80, T, generator=g))
    if meanflow:
        e_in["r"] = torch.rand(2, generator=g)
    with torch.inference_mode():
        outputs["estimator"] = est(**e_in)
    inputs.update({f"est_{k}": v for k, v in e_in.items()})
    tol["estimator"] = rel_tol(MODULE_RTOL)

    # 2. the CFM solve on a padded batch of 2 (lengths 16 and 12) with recorded noise
    T = 16
    mu = torch.randn(2, 80, T, generator=g)
    mask = padding_mask([T, 12], T)
    spks = torch.randn(2, 80, generator=g)
    cond = torch.zeros(2, 80, T)
    cond[:, :, :5] = torch.randn(2, 80, 5, generator=g)
    steps = 2 if meanflow else 10
    noised = torch.randn(2, 80, T - 5, generator=g) if meanflow else None
    torch.manual_seed(rec.seed + 11)
    noise = torch.randn(2, 80, T)
    torch.manual_seed(rec.seed + 11)
    hook = FirstCall(est)
    with torch.inference_mode():
        outputs["cfm"], _ = cfm(mu, mask, n_timesteps=steps, spks=spks, cond=cond, noised_mels=noised,
                                meanflow=meanflow)
    hook.remove()
    expected_x = noise.clone()
    if noised is not None:
        expected_x[..., 5:] = noised
    assert torch.equal(hook.x[:2], expected_x), "recorded CFM noise is not what the solver drew"
    inputs.update(cfm_mu=mu, cfm_mask=mask, cfm_spks=spks, cfm_cond=cond, cfm_noise=noise)
    if noised is not None:
        inputs["cfm_noised_mels"] = noised
    tol["cfm"] = rel_tol(SOLVE_RTOL)

    # 3. CausalMaskedDiffWithXvec.inference, finalize=True (and finalize=False without meanflow)
    tok = torch.randint(0, 6561, (1, n_tok), generator=g)
    ptok = torch.randint(0, 6561, (1, n_prompt), generator=g)
    pfeat = torch.randn(1, ratio * n_prompt, 80, generator=g)
    emb = torch.randn(1, 192, generator=g)
    T = ratio * (n_prompt + n_tok)
    inputs.update(token=tok, prompt_token=ptok, prompt_feat=pfeat, embedding=emb)
    mus = []
    hook_mu = flow.encoder_proj.register_forward_hook(lambda m, a, out: mus.append(out.detach().clone()))
    noised = torch.randn(1, 80, ratio * n_tok, generator=g) if meanflow else None
    torch.manual_seed(rec.seed + 12)
    noise = torch.randn(1, 80, T)
    torch.manual_seed(rec.seed + 12)
    hook = FirstCall(est)
    with torch.inference_mode():
        feat, _ = flow.inference(token=tok, token_len=torch.tensor([n_tok]), prompt_token=ptok,
                                 prompt_token_len=torch.tensor([n_prompt]), prompt_feat=pfeat,
                                 prompt_feat_len=None, embedding=emb, finalize=True, n_timesteps=steps,
                                 noised_mels=noised, meanflow=meanflow)
    hook.remove()
    expected_x = noise.clone()
    if noised is not None:
        expected_x[..., ratio * n_prompt:] = noised
    assert torch.equal(hook.x[:1], expected_x), "recorded flow noise is not what the solver drew"
    outputs.update(mu=mus[0].transpose(1, 2), feat=feat)
    inputs["noise"] = noise
    if noised is not None:
        inputs["noised_mels"] = noised
    tol.update(mu=rel_tol(MODULE_RTOL), feat=rel_tol(SOLVE_RTOL))

    if not meanflow:
        trim = look * ratio
        torch.manual_seed(rec.seed + 13)
        noise = torch.randn(1, 80, T - trim)
        torch.manual_seed(rec.seed + 13)
        flow.encoder = TrimmedMaskEncoder(flow.encoder, trim)
        hook = FirstCall(est)
        with torch.inference_mode():
            feat, _ = flow.inference(token=tok, token_len=torch.tensor([n_tok]), prompt_token=ptok,
                                     prompt_token_len=torch.tensor([n_prompt]), prompt_feat=pfeat,
                                     prompt_feat_len=None, embedding=emb, finalize=False, n_timesteps=steps,
                                     meanflow=False)
        hook.remove()
        flow.encoder = flow.encoder.encoder
        assert torch.equal(hook.x[:1], noise), "recorded finalize=False noise is not what the solver drew"
        outputs["feat_partial"] = feat
        inputs["noise_partial"] = noise
        tol["feat_partial"] = rel_tol(SOLVE_RTOL)
    hook_mu.remove()

    config = dict(encoder=enc_cfg, decoder=dict(dec_cfg, meanflow=meanflow), flow=flow_config(flow), cfm=CFM,
                  meanflow=meanflow, n_timesteps=steps)
    rec.case(c, case, kind, inputs, outputs, tol, config=config, state_dict=state)


# ---------------------------------------------------------------- streaming (issue 21)

# case: (meanflow, prompt tokens, speech tokens, hops). Each gives at least three chunks, the
# last one the finalize=True call.
STREAM_CASES = {
    "stream_cfg": (False, 5, 30, [10, 8]),
    "stream_meanflow": (True, 5, 24, [10, 6]),
}


def stream_chunks(n_tok, hops, lookahead):
    """`CosyVoice2Model.tts(stream=True)`'s chunks once `n_tok` tokens have arrived: while
    `hop + lookahead` tokens follow the offset, a finalize=False chunk on
    tokens[:offset + hop + lookahead] makes tokens [offset, offset + hop) final; then one
    finalize=True chunk on every token. Returns `(tokens given, finalize, offset)` per chunk."""
    chunks, offset = [], 0
    while True:
        hop = hops[min(len(chunks), len(hops) - 1)]
        if n_tok - offset < hop + lookahead:
            break
        chunks.append((offset + hop + lookahead, False, offset))
        offset += hop
    chunks.append((n_tok, True, offset))
    return chunks


def check_weights(rec, component, case, state):
    """The stream cases reuse the weights of `case` (rebuilt the same way, not stored again):
    check that they are the ones committed there."""
    path = os.path.join(rec.out, component, f"{case}.safetensors")
    assert os.path.exists(path), f"{path} missing: record {component}/{case} too"
    stored = {k: v for k, v in load_file(path).items() if not k.startswith(("in.", "out."))}
    assert stored.keys() == state.keys(), f"{case}: state_dict keys differ"
    for k, v in state.items():
        assert torch.equal(stored[k], v), f"{case}: {k} differs from the committed weights"


def stream_flow_run(rec, case):
    """The flow half of a stream case through the reference's `CausalMaskedDiffWithXvec.inference`:
    returns (inputs, mel chunks, config); the vocoder recorder takes the mel chunks on."""
    meanflow, n_prompt, n_tok, hops = STREAM_CASES[case]
    flow = build_flow(TINY_ENCODER, TINY_DECODER, meanflow)
    check_weights(rec, COMPONENT, "flow_meanflow" if meanflow else "flow", flow.state_dict())
    est = flow.decoder.estimator
    ratio, look = flow.token_mel_ratio, flow.pre_lookahead_len
    steps = 2 if meanflow else 10
    g = torch.Generator().manual_seed(rec.seed + (31 if meanflow else 30))
    tok = torch.randint(0, 6561, (1, n_tok), generator=g)
    ptok = torch.randint(0, 6561, (1, n_prompt), generator=g)
    pfeat = torch.randn(1, ratio * n_prompt, 80, generator=g)
    emb = torch.randn(1, 192, generator=g)
    noise = torch.randn(1, 80, ratio * (n_prompt + n_tok), generator=g)
    chunks = stream_chunks(n_tok, hops, look)
    assert len(chunks) >= 3, chunks

    def randn_like(x, *args, **kwargs):
        assert x.shape[:2] == noise.shape[:2] and x.shape[2] <= noise.shape[2], x.shape
        return noise[..., :x.shape[2]].clone().to(x.dtype)

    mels = []
    for n, finalize, offset in chunks:
        T = ratio * (n_prompt + n) - (0 if finalize else look * ratio)
        noised = noise[..., ratio * n_prompt:T] if meanflow else None
        if not finalize:
            flow.encoder = TrimmedMaskEncoder(flow.encoder, look * ratio)
        hook = FirstCall(est)
        with torch.inference_mode(), patched(torch, "randn_like", randn_like):
            feat, _ = flow.inference(token=tok[:, :n], token_len=torch.tensor([n]), prompt_token=ptok,
                                     prompt_token_len=torch.tensor([n_prompt]), prompt_feat=pfeat,
                                     prompt_feat_len=None, embedding=emb, finalize=finalize,
                                     n_timesteps=steps, noised_mels=noised, meanflow=meanflow)
        hook.remove()
        if not finalize:
            flow.encoder = flow.encoder.encoder
        assert torch.equal(hook.x[:1], noise[..., :T]), "the solver did not start from the noise"
        assert feat.shape[2] == T - ratio * n_prompt
        mels.append(feat[:, :, offset * ratio:].contiguous())
    assert sum(m.shape[2] for m in mels) == ratio * n_tok
    inputs = dict(token=tok, prompt_token=ptok, prompt_feat=pfeat, embedding=emb, noise=noise)
    config = dict(encoder=TINY_ENCODER, decoder=dict(TINY_DECODER, meanflow=meanflow), flow=flow_config(flow),
                  cfm=CFM, meanflow=meanflow, n_timesteps=steps, weights_case="flow_meanflow" if meanflow else "flow",
                  hops=hops, n_prompt=n_prompt,
                  chunks=[dict(tokens=n, finalize=f, offset=o) for n, f, o in chunks])
    return inputs, mels, config


def record_stream(rec, c):
    kind = "flow_stream"
    for case in STREAM_CASES:
        if not rec.want(c, case, kind):
            continue
        inputs, mels, config = stream_flow_run(rec, case)
        outputs = {f"mel_{k}": m for k, m in enumerate(mels)}
        tol = {k: rel_tol(SOLVE_RTOL) for k in outputs}
        rec.case(c, case, kind, inputs, outputs, tol, config=config,
                 notes=f"{len(mels)} chunks of {[m.shape[2] for m in mels]} mel frames")
