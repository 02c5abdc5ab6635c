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

`--full` adds the full-size encoder and flows (S3Gen's configuration, random weights, 50 prompt +
50 new tokens; ~0.15 + 0.45 + 0.46 GB): write them outside the repository (`--out /tmp/full`).
"""
import torch

from chatterbox.models.s3gen.configs import CFM_PARAMS
from chatterbox.models.s3gen.decoder import ConditionalDecoder
from chatterbox.models.s3gen.flow import CausalMaskedDiffWithXvec
from chatterbox.models.s3gen.flow_matching import CausalConditionalCFM
from chatterbox.models.s3gen.transformer.upsample_encoder import (
    PreLookaheadLayer, Upsample1D, UpsampleConformerEncoder)
from common import exact, rel_tol

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


def perturb_(module, seed=1234, scale=0.1):
    """tiny_configs.perturb_: move every float tensor away from its identity init,
    deterministically (LayerNorm gains, biases, the meanflow time mixer's diagonal)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.state_dict(keep_vars=True).items()):
            if not t.dtype.is_floating_point:
                continue
            if t.dim() == 1 and name.endswith("weight"):
                t.copy_(1.0 + torch.randn(t.shape, generator=g) * scale)
            else:
                t.add_(torch.randn(t.shape, generator=g) * scale * (t.std() if t.numel() > 1 else 1.0))
    return module


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
