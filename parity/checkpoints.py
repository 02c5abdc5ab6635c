"""Random Chatterbox checkpoints in the hub layout, built from the reference's own classes.

`build_checkpoint(variant, out_dir, size="tiny"|"full", seed=0)` instantiates T3, the
VoiceEncoder and S3Gen of one variant (english, multilingual, turbo, nano) with a fixed seed,
perturbs every parameter away from its identity init (parity/recorders/*.perturb_), and writes
what `from_local` reads:

| variant | files |
|---|---|
| english | ve.safetensors, t3_cfg.safetensors, s3gen.safetensors, tokenizer.json, conds.pt |
| multilingual | ve.pt, t3_mtl23ls_v2.safetensors, s3gen.pt, grapheme_mtl_merged_expanded_v1.json, Cangjie5_TC.json, conds.pt |
| turbo / nano | ve.safetensors, t3_turbo_v1.safetensors / t3_nano_v1.safetensors, s3gen_meanflow.safetensors, tokenizer.json, tokenizer_config.json, conds.pt |

Tokenizer files are generated ones of the real structure (parity/recorders/text.py, committed
under parity/fixtures/text/assets/). `conds.pt` is the reference's `prepare_conditionals` of a
synthetic speech-like clip, saved with `Conditionals.save`. Tiny checkpoints also get
`chatterbox_config.json`: the hyper-parameters the Rust crate needs to rebuild the tiny modules
(`ChatterboxConfig` in chatterbox-pipeline reads it automatically).

CLI: python parity/checkpoints.py --variant english|multilingual|turbo|nano --out DIR
         [--size tiny|full] [--seed N]
"""
import argparse
import copy
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from common import speech_like  # noqa: E402
from recorders import flow as flow_rec  # noqa: E402
from recorders import s3tokenizer as tok_rec  # noqa: E402
from recorders import speaker as spk_rec  # noqa: E402
from recorders import t3 as t3_rec  # noqa: E402
from recorders import vocoder as voc_rec  # noqa: E402

VARIANTS = ("english", "multilingual", "turbo", "nano")
ASSETS = os.path.join(HERE, "fixtures", "text", "assets")
CONFIG_FILE = "chatterbox_config.json"
TINY_VE_HIDDEN = 16
TINY_CAMPPLUS = dict(feat_dim=80, embedding_size=192, growth_rate=2, bn_size=2, init_channels=4,
                     memory_efficient=False)
REF_SR = 24000
# Tiny sizes below the component recorders' (fixture budget): T3 8 wide, flow encoder 8 wide.
TINY_LLAMA = dict(t3_rec.TINY_LLAMA, hidden_size=8, intermediate_size=16, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=4)
TINY_GPT2 = dict(t3_rec.TINY_GPT2, n_embd=8, hidden_size=8, n_head=2)
t3_rec.LLAMA_CONFIGS["Llama_tiny_pipeline"] = TINY_LLAMA
t3_rec.LLAMA_CONFIGS["GPT2_tiny_pipeline"] = TINY_GPT2
TINY_ENCODER = dict(flow_rec.TINY_ENCODER, input_size=8, output_size=8, linear_units=16)
TINY_DECODER = dict(flow_rec.TINY_DECODER, channels=[16], attention_head_dim=8, num_mid_blocks=1)


def _t3(variant, size, seed):
    kind = {"english": "en", "multilingual": "mtl", "turbo": "turbo", "nano": "turbo"}[variant]
    full = size == "full"
    if variant == "nano" and full:
        # T3Config as tts_turbo.py builds it for nano=True: GPT-2 small.
        old = t3_rec.hp_for

        def hp_for(k, f=False):
            hp = old(k, f)
            hp.llama_config_name = "GPT2_small"
            return hp

        t3_rec.hp_for = hp_for
        try:
            t3, cfg = t3_rec.build(kind, full=True, seed=seed)
        finally:
            t3_rec.hp_for = old
    elif not full and kind in ("en", "turbo"):
        old = t3_rec.hp_for

        def hp_for(k, f=False):
            hp = old(k, f)
            hp.llama_config_name = "Llama_tiny_pipeline" if k == "en" else "GPT2_tiny_pipeline"
            return hp

        t3_rec.hp_for = hp_for
        try:
            t3, cfg = t3_rec.build(kind, full=False, seed=seed)
        finally:
            t3_rec.hp_for = old
    else:
        t3, cfg = t3_rec.build(kind, full=full, seed=seed)
    return t3, cfg


def _ve(size, seed):
    from chatterbox.models.voice_encoder import VoiceEncoder
    hidden = TINY_VE_HIDDEN if size == "tiny" else 256
    torch.manual_seed(seed)
    ve = spk_rec.perturb_(VoiceEncoder(spk_rec._ve_config(hidden)), seed=seed + 1234).eval()
    return ve, dict(ve_hidden_size=hidden)


def _s3gen(meanflow, size, seed):
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.s3gen.xvector import CAMPPlus
    torch.manual_seed(seed)
    s3 = S3Gen(meanflow=meanflow)
    if size == "tiny":
        s3.tokenizer = tok_rec.tiny_tokenizer(seed)
        torch.manual_seed(seed)
        s3.speaker_encoder = spk_rec.perturb_(CAMPPlus(**TINY_CAMPPLUS)).eval()
        s3.flow = flow_rec.build_flow(TINY_ENCODER, TINY_DECODER, meanflow)
        hift_cfg, f0_cfg = voc_rec.TINY, voc_rec.TINY_F0
        enc_cfg, dec_cfg = TINY_ENCODER, TINY_DECODER
    else:
        torch.manual_seed(seed)
        s3.tokenizer = tok_rec.perturb_(s3.tokenizer)
        s3.speaker_encoder = spk_rec.perturb_(s3.speaker_encoder)
        s3.flow = flow_rec.perturb_(s3.flow)
        hift_cfg, f0_cfg = voc_rec.FULL, voc_rec.FULL_F0
        enc_cfg, dec_cfg = flow_rec.FULL_ENCODER, flow_rec.FULL_DECODER
    # HiFT with an F0 predictor calibrated on a speech mel, so that random weights still give
    # voiced and unvoiced frames (parity/recorders/vocoder.py).
    m = voc_rec.perturb_(voc_rec.build(hift_cfg, f0_cfg, seed)).eval()
    voc_rec.calibrate_f0_(m, voc_rec.speech_mel(200, seed + 7))
    s3.mel2wav = m
    s3 = s3.eval()
    cfg = dict(
        tokenizer=dict(tok_rec.TINY) if size == "tiny" else None,
        speaker_encoder=dict(TINY_CAMPPLUS),
        flow=dict(flow_rec.flow_config(s3.flow), encoder=enc_cfg, decoder=dict(dec_cfg, meanflow=meanflow),
                  cfm=flow_rec.CFM),
        mel2wav=dict(voc_rec.config_of(m, hift_cfg, f0_cfg)["hift"], f0_predictor=f0_cfg),
    )
    return s3, cfg


def reference_clip(seconds, seed=0):
    """The synthetic reference voice used for conds.pt and the pipeline cases (24 kHz)."""
    return speech_like(REF_SR, seconds, seed=seed)


def build_models(variant, size="tiny", seed=0):
    """The reference model object (ChatterboxTTS / MultilingualTTS / TurboTTS) with random
    weights, and the Rust-side config dict (tiny only, else None)."""
    from chatterbox.models.tokenizers import EnTokenizer
    from chatterbox.mtl_tts import ChatterboxMultilingualTTS
    from chatterbox.tts import ChatterboxTTS
    from chatterbox.tts_turbo import ChatterboxTurboTTS
    assert variant in VARIANTS, variant
    assert size in ("tiny", "full"), size
    t3, t3_cfg = _t3(variant, size, seed)
    ve, ve_cfg = _ve(size, seed)
    turbo = variant in ("turbo", "nano")
    s3, s3_cfg = _s3gen(turbo, size, seed)
    if variant == "english":
        model = ChatterboxTTS(t3, s3, ve, EnTokenizer(os.path.join(ASSETS, "en", "tokenizer.json")), "cpu")
    elif variant == "multilingual":
        # As parity/recorders/text.py builds it: Cangjie table from the asset dir, no pkuseg
        # segmenter (its model is a download that cannot happen here).
        from recorders import text as text_rec
        tok = text_rec.make_mtl(os.path.join(ASSETS, "mtl", "grapheme_mtl_merged_expanded_v1.json"))
        tok.tokenizer = tok.tokenizer.inner
        model = ChatterboxMultilingualTTS(t3, s3, ve, tok, "cpu")
    else:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.join(ASSETS, "turbo"))
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model = ChatterboxTurboTTS(t3, s3, ve, tok, "cpu", model_label="Nano" if variant == "nano" else "Turbo")
    cfg = None
    if size == "tiny":
        cfg = dict(t3=t3_cfg, ve=ve_cfg, s3gen=s3_cfg)
    return model, cfg


def write_checkpoint(model, cfg, variant, out_dir, seed=0, conds=True):
    """Writes `model`'s weights (taken before any inference) and files in the hub layout."""
    os.makedirs(out_dir, exist_ok=True)
    sd = lambda m: {k: v.detach().contiguous() for k, v in m.state_dict().items()}  # noqa: E731
    # Everything the real files hold (text_head, tfmr.embed_tokens / tfmr.wte included: the
    # reference's strict `load_state_dict` wants them), without T3.inference's patched_model.
    t3 = {k: v.detach().contiguous() for k, v in model.t3.state_dict().items()
          if not k.startswith("patched_model.")}
    ve = sd(model.ve)
    s3 = sd(model.s3gen)
    if variant == "english":
        save_file(ve, os.path.join(out_dir, "ve.safetensors"))
        save_file(t3, os.path.join(out_dir, "t3_cfg.safetensors"))
        save_file(s3, os.path.join(out_dir, "s3gen.safetensors"))
        shutil.copy(os.path.join(ASSETS, "en", "tokenizer.json"), out_dir)
    elif variant == "multilingual":
        torch.save(ve, os.path.join(out_dir, "ve.pt"))
        save_file(t3, os.path.join(out_dir, "t3_mtl23ls_v2.safetensors"))
        torch.save(s3, os.path.join(out_dir, "s3gen.pt"))
        for f in ("grapheme_mtl_merged_expanded_v1.json", "Cangjie5_TC.json"):
            shutil.copy(os.path.join(ASSETS, "mtl", f), out_dir)
    else:
        save_file(ve, os.path.join(out_dir, "ve.safetensors"))
        name = "t3_nano_v1.safetensors" if variant == "nano" else "t3_turbo_v1.safetensors"
        save_file(t3, os.path.join(out_dir, name))
        save_file(s3, os.path.join(out_dir, "s3gen_meanflow.safetensors"))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(ASSETS, "turbo", f), out_dir)
    if cfg is not None:
        with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
            json.dump(cfg, f, indent=1)
    if conds:
        import soundfile as sf
        clip = os.path.join(out_dir, ".conds_clip.wav")
        sf.write(clip, reference_clip(6.48, seed + 11), REF_SR, subtype="FLOAT")
        with torch.inference_mode():
            model.prepare_conditionals(clip, exaggeration=0.5)
        os.remove(clip)
        model.conds.save(os.path.join(out_dir, "conds.pt"))


def build_checkpoint(variant, out_dir, size="tiny", seed=0):
    """Builds and writes a complete checkpoint directory; returns the reference model."""
    model, cfg = build_models(variant, size, seed)
    write_checkpoint(model, cfg, variant, out_dir, seed)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", required=True, choices=VARIANTS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="tiny", choices=("tiny", "full"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(os.cpu_count() or 1, 8)))
    build_checkpoint(a.variant, a.out, a.size, a.seed)
    print(f"wrote {a.variant} ({a.size}) checkpoint to {a.out}")


if __name__ == "__main__":
    main()
