"""chatterbox-pipeline cases: the reference's `ChatterboxTTS`, `ChatterboxTurboTTS` and
`ChatterboxVC` end to end on tiny random checkpoints (parity/checkpoints.py), with greedy T3
sampling (`torch.multinomial` replaced by argmax, as parity/recorders/t3.py does) and S3Gen's
random draws recorded while the reference runs (the CFM noise, meanflow's `noised_mels`,
SineGen's phases and noise: parity/recorders/flow.py and vocoder.py) so the Rust side replays
them. Perth watermarking is replaced by the identity (the Rust crate does not ship it).

Cases:
* `english`: `prepare_conditionals` of a 1.5 s clip (the reference's own 16 kHz copy is recorded as
  an input, since librosa's soxr resampler is not the Rust one), then `generate`. Outputs: the
  conditionals, T3's tokens (exact), the flow's mel and the waveform.
* `vc`: `ChatterboxVC` with the english case's S3Gen and its clip as the target voice.
  The same conditionals are saved with the reference's `Conditionals.save` as
  `english_conds.pt` (read by the Rust `Conditionals::load` test).
* `turbo`: Turbo's `generate` from recorded conditionals (its `prepare_conditionals` needs a
  clip over 5 s: too large to commit); its S3Gen shares the english case's weights, only the
  meanflow-only tensors are stored here.

Weights are rounded to float16 before the reference runs and stored as float16 (exact; the
fixture budget), except deterministic buffers (mel filters, windows) kept in float32.

* `full_multilingual` (only with `--full`: a tiny multilingual checkpoint does not fit the
  fixture budget): `ChatterboxMultilingualTTS` with language "fr", from ve.pt / s3gen.pt.
* `full_nano` (only with `--full`): the Turbo case with Nano's GPT-2 small T3
  (`t3_nano_v1.safetensors`), checked through `ChatterboxTurboTts::from_dir(dir, nano = true)`.

With `--full` the same english/turbo/vc cases run on full-size random checkpoints written to
/tmp/chatterbox-e2e/<variant> (never committed); the fixtures `full_*` hold only the inputs,
draws and outputs and name that directory (the Rust checks are `#[ignore]`).
"""
import os

import torch

import checkpoints
from chatterbox import tts as tts_module
from chatterbox import tts_turbo as turbo_module
from chatterbox import vc as vc_module
from chatterbox.models.s3gen import hifigan
from common import abs_tol, exact, patched, rel_tol

COMPONENT = "pipeline"

TOKENS = exact()        # T3 token ids: greedy decoding, identical or wrong
COND_RTOL = 1e-4        # prompt mel / x-vector of the reference clip: f32 sums in another order
SPK_ATOL = 1e-4         # L2-normalised VoiceEncoder embedding (speaker crate's EMBED_ATOL)
MEL_RTOL = 1e-3         # the end-to-end target: encoder + CFM solve in f32
WAV_RTOL = 1e-3         # the end-to-end target: HiFT over the mel above
N_TOKENS = 16           # max_new_tokens (random weights rarely draw the stop token)
TEXT = "Hello there. This is a test!"
MTL_TEXT = "Bonjour à tous, ceci est un essai."
FULL_DIR = "/tmp/chatterbox-e2e"
SINE_PERIOD = 2003      # SineGen's noise is a recorded (1, H, SINE_PERIOD) block tiled over time
DROP = ("_mel_filters", "window")  # deterministic buffers the Rust side computes itself


class NoWatermark:
    def apply_watermark(self, wav, sample_rate):
        return wav


def round_f16_(module):
    """Rounds parameters and BatchNorm statistics to float16 values (kept in float32)."""
    with torch.no_grad():
        for name, t in module.state_dict(keep_vars=True).items():
            if t.dtype.is_floating_point and (isinstance(t, torch.nn.Parameter) or "running_" in name):
                t.copy_(t.half().float())
    return module


def stored(prefix, module, keys=None):
    out = {}
    params = {n for n, _ in module.named_parameters()}
    for k, v in module.state_dict().items():
        if k.startswith("patched_model.") or k in checkpoints.t3_rec.UNUSED_KEYS:
            continue
        if keys is not None and k not in keys:
            continue
        if k.endswith(DROP):
            continue
        v = v.detach()
        if v.dtype.is_floating_point and (k in params or "running_" in k):
            v = v.half()
        out[prefix + k] = v.contiguous()
    return out


def argmax_multinomial(probs, num_samples=1, **_):
    return probs.argmax(dim=-1, keepdim=True)


class Draws:
    """Records S3Gen's random draws: `torch.randn` (meanflow's noised_mels), `torch.randn_like`
    (CFM noise, then SineGen's noise, then SourceModuleHnNSF's unused noise) and SineGen's
    Uniform phases."""

    def __enter__(self):
        self.randn, self.randn_like, self.phases = [], [], []
        cap = self
        self._old = (torch.randn, torch.randn_like, hifigan.Uniform)
        base_randn, base_like, base_uniform = self._old

        def randn(*a, **k):
            y = base_randn(*a, **k).half().float()
            cap.randn.append(y.clone())
            return y

        def randn_like(x, *a, **k):
            y = base_like(x, *a, **k).half().float()
            if len(cap.randn_like) == 1:
                # SineGen's noise: a short block tiled over time (fixture budget).
                block = y[..., :SINE_PERIOD].clone()
                reps = -(-y.shape[-1] // SINE_PERIOD)
                y = block.repeat(1, 1, reps)[..., :x.shape[-1]].contiguous()
                cap.sine_block = block
            cap.randn_like.append(y.clone())
            return y

        class Uniform(base_uniform):
            def sample(self, *a, **k):
                x = super().sample(*a, **k)
                cap.phases.append(x.clone())
                return x

        torch.randn, torch.randn_like, hifigan.Uniform = randn, randn_like, Uniform
        return self

    def __exit__(self, *exc):
        torch.randn, torch.randn_like, hifigan.Uniform = self._old

    def inputs(self, meanflow):
        assert len(self.phases) == 1 and len(self.randn_like) == 3, (len(self.phases), len(self.randn_like))
        out = {"cfm_noise": self.randn_like[0], "sine_phase": self.phases[0].squeeze(-1),
               "sine_noise_block": self.sine_block.half()}
        out["cfm_noise"] = out["cfm_noise"].half()
        if meanflow:
            assert len(self.randn) == 1, len(self.randn)
            out["noised_mels"] = self.randn[0].half()
        return out


class Spy:
    """Wraps a bound method and keeps its last result."""

    def __init__(self, obj, name, fix_kwargs=None):
        self.obj, self.name, self.fix = obj, name, fix_kwargs or {}
        self.inner = getattr(obj, name)
        self.result = None

    def __enter__(self):
        def f(*a, **k):
            k.update(self.fix)
            self.result = self.inner(*a, **k)
            return self.result
        setattr(self.obj, self.name, f)
        return self

    def __exit__(self, *exc):
        delattr(self.obj, self.name)


def conds_outputs(conds):
    return {"speaker_emb": conds.t3.speaker_emb, "cond_prompt_speech_tokens": conds.t3.cond_prompt_speech_tokens,
            "prompt_token": conds.gen["prompt_token"], "prompt_feat": conds.gen["prompt_feat"],
            "embedding": conds.gen["embedding"]}


def run_generate(model, meanflow, **kw):
    """model.generate with greedy T3 and the draws, T3 tokens and mel recorded."""
    model.watermarker = NoWatermark()
    fix = {"max_new_tokens": N_TOKENS} if not meanflow else {"max_gen_len": N_TOKENS}
    method = "inference_turbo" if meanflow else "inference"
    with patched(torch, "multinomial", argmax_multinomial), \
            Spy(model.t3, method, fix) as t3_spy, Spy(model.s3gen, "flow_inference") as mel_spy, \
            Draws() as d, torch.inference_mode():
        wav = model.generate(MTL_TEXT if "language_id" in kw else TEXT, **kw)
    tokens = t3_spy.result
    tokens = tokens[0] if tokens.dim() == 2 else tokens
    return tokens, mel_spy.result, wav.squeeze(0), d.inputs(meanflow)


def record(rec):
    c = COMPONENT
    sizes = ["tiny"] + (["full"] if rec.full else [])
    for size in sizes:
        pre = "" if size == "tiny" else "full_"
        cases = [("english", "english"), ("vc", "vc"), ("turbo", "turbo")]
        if size == "full":
            cases.append(("nano", "turbo"))
        if any(rec.want(c, pre + name, kind) for name, kind in cases):
            _cases(rec, c, size, pre)
        if size == "full" and rec.want(c, "full_multilingual", "multilingual"):
            _multilingual(rec, c)


def _multilingual(rec, c):
    """ChatterboxMultilingualTTS end to end (full size only: a tiny one does not fit the
    fixture budget): ve.pt and s3gen.pt torch pickles, language token, CFG, and the
    "drop the last token's audio" rule."""
    from chatterbox import mtl_tts as mtl_module
    torch.manual_seed(rec.seed)
    m, _ = checkpoints.build_models("multilingual", "full", rec.seed)
    # The reference's multilingual `generate` passes ids >= 6561 on to S3Gen, whose embedding
    # then fails (a random T3 draws them): zero those rows of the speech head, so that greedy
    # decoding never picks them (a property of this checkpoint; both sides load it).
    with torch.no_grad():
        m.t3.speech_head.weight[6563:] = 0.0
    ckpt = os.path.join(FULL_DIR, "multilingual")
    checkpoints.write_checkpoint(m, None, "multilingual", ckpt, rec.seed, conds=False)
    clip = torch.from_numpy(checkpoints.reference_clip(6.0, rec.seed + 3)).half().float().numpy()
    seen = {}
    resample = mtl_module.librosa.resample

    def grab(y, **k):
        seen["16k"] = resample(y, **k)
        return seen["16k"]

    with patched(mtl_module.librosa, "load", lambda p, sr: (clip.copy(), sr)), \
            patched(mtl_module.librosa, "resample", grab), torch.inference_mode():
        m.prepare_conditionals("clip.wav", exaggeration=0.5)
    outputs = conds_outputs(m.conds)
    tokens, mel, wav, draws = run_generate(m, False, language_id="fr")
    outputs.update(raw_tokens=tokens, mel=mel, wav=wav)
    tol = {"speaker_emb": abs_tol(SPK_ATOL), "cond_prompt_speech_tokens": TOKENS, "prompt_token": TOKENS,
           "prompt_feat": rel_tol(COND_RTOL), "embedding": rel_tol(COND_RTOL), "raw_tokens": TOKENS,
           "mel": rel_tol(MEL_RTOL), "wav": rel_tol(WAV_RTOL)}
    config = dict(variant="multilingual", text=MTL_TEXT, language="fr", max_new_tokens=N_TOKENS,
                  exaggeration=0.5, checkpoint_dir=ckpt)
    rec.case(c, "full_multilingual", "multilingual", dict(ref_24k=torch.from_numpy(clip).half(),
             ref_16k=seen["16k"], **draws), outputs, tol, config=config)


def _cases(rec, c, size, pre):
    torch.manual_seed(rec.seed)
    en, en_cfg = checkpoints.build_models("english", size, rec.seed)
    if size == "tiny":
        for m in (en.t3, en.ve, en.s3gen):
            round_f16_(m)
        weights = {**stored("t3.", en.t3), **stored("ve.", en.ve), **stored("s3gen.", en.s3gen)}
        ckpt = None
    else:
        ckpt = os.path.join(FULL_DIR, "english")
        checkpoints.write_checkpoint(en, None, "english", ckpt, rec.seed, conds=False)
        weights = None
    s3_state = {k: v.clone() for k, v in en.s3gen.state_dict().items()}
    secs = 1.2 if size == "tiny" else 6.0
    clip = torch.from_numpy(checkpoints.reference_clip(secs, rec.seed + 3)).half().float().numpy()

    # ---------------------------------------------------------------- english
    if rec.want(c, pre + "english", "english"):
        seen = {}
        resample = tts_module.librosa.resample

        def grab(y, **k):
            seen["16k"] = resample(y, **k)
            return seen["16k"]

        with patched(tts_module.librosa, "load", lambda p, sr: (clip.copy(), sr)), \
                patched(tts_module.librosa, "resample", grab), torch.inference_mode():
            en.prepare_conditionals("clip.wav", exaggeration=0.5)
        outputs = conds_outputs(en.conds)
        if size == "tiny":
            # The reference's own `Conditionals.save` (conds.pt) of this voice, for the loader.
            os.makedirs(os.path.join(rec.out, c), exist_ok=True)
            en.conds.save(os.path.join(rec.out, c, "english_conds.pt"))
        tokens, mel, wav, draws = run_generate(en, False)
        outputs.update(raw_tokens=tokens, mel=mel, wav=wav)
        tol = {"speaker_emb": abs_tol(SPK_ATOL), "cond_prompt_speech_tokens": TOKENS, "prompt_token": TOKENS,
               "prompt_feat": rel_tol(COND_RTOL), "embedding": rel_tol(COND_RTOL), "raw_tokens": TOKENS,
               "mel": rel_tol(MEL_RTOL), "wav": rel_tol(WAV_RTOL)}
        config = dict(variant="english", text=TEXT, max_new_tokens=N_TOKENS, exaggeration=0.5,
                      chatterbox=en_cfg, checkpoint_dir=ckpt)
        rec.case(c, pre + "english", "english", dict(ref_24k=torch.from_numpy(clip).half(), ref_16k=seen["16k"], **draws), outputs, tol,
                 config=config, state_dict=weights)

    # ---------------------------------------------------------------- vc
    if rec.want(c, pre + "vc", "vc"):
        src = torch.from_numpy(checkpoints.speech_like(16000, 0.6 if size == "tiny" else 5.0,
                                                       seed=rec.seed + 5)).half().float().numpy()
        vc = vc_module.ChatterboxVC(en.s3gen, "cpu")
        vc.watermarker = NoWatermark()

        def load(p, sr):
            return (clip.copy(), sr) if sr == 24000 else (src.copy(), sr)

        with patched(vc_module.librosa, "load", load), Spy(vc.s3gen, "flow_inference") as mel_spy, \
                torch.inference_mode():
            vc.set_target_voice("target.wav")
            with Draws() as d:
                wav = vc.generate("source.wav")
        rec.case(c, pre + "vc", "vc", dict(source_16k=torch.from_numpy(src).half(), **d.inputs(False)),
                 {"mel": mel_spy.result, "wav": wav.squeeze(0)},
                 {"mel": rel_tol(MEL_RTOL), "wav": rel_tol(WAV_RTOL)},
                 config=dict(variant="vc", weights_case=pre + "english", checkpoint_dir=ckpt))

    # ---------------------------------------------------------------- turbo / nano
    # Nano (GPT-2 small) only at full size: its tiny build would be the tiny Turbo case again.
    for variant in ["turbo"] + (["nano"] if size == "full" else []):
        _turbo_case(rec, c, size, pre, variant, s3_state)


def _turbo_case(rec, c, size, pre, variant, s3_state):
    """ChatterboxTurboTTS (`variant` turbo or nano) end to end."""
    if rec.want(c, pre + variant, "turbo"):
        torch.manual_seed(rec.seed)
        tu, tu_cfg = checkpoints.build_models(variant, size, rec.seed)
        # S3Gen: the english weights, plus the meanflow-only tensors of the turbo build.
        own = tu.s3gen.state_dict()
        shared = {k: v for k, v in s3_state.items() if k in own and own[k].shape == v.shape}
        tu.s3gen.load_state_dict(shared, strict=False)
        extra = [k for k in own if k not in shared]
        if size == "tiny":
            for m in (tu.t3, tu.ve, tu.s3gen):
                round_f16_(m)
            weights = {**stored("t3.", tu.t3), **stored("ve.", tu.ve),
                       **stored("s3gen.", tu.s3gen, keys=set(extra))}
            tckpt = None
        else:
            tckpt = os.path.join(FULL_DIR, variant)
            checkpoints.write_checkpoint(tu, None, variant, tckpt, rec.seed, conds=False)
            weights = None
        long_clip = checkpoints.reference_clip(5.52, rec.seed + 4)  # mel frames = 2 x tokens
        with patched(turbo_module.librosa, "load", lambda p, sr: (long_clip.copy(), sr)), torch.inference_mode():
            tu.prepare_conditionals("clip.wav", exaggeration=0.0)
        conds = conds_outputs(tu.conds)
        tokens, mel, wav, draws = run_generate(tu, True)
        outputs = dict(raw_tokens=tokens, mel=mel, wav=wav)
        tol = {"raw_tokens": TOKENS, "mel": rel_tol(MEL_RTOL), "wav": rel_tol(WAV_RTOL)}
        config = dict(variant=variant, text=TEXT, max_new_tokens=N_TOKENS, chatterbox=tu_cfg,
                      weights_case=pre + "english", s3gen_extra=extra, checkpoint_dir=tckpt)
        rec.case(c, pre + variant, "turbo", dict(**conds, **draws), outputs, tol, config=config,
                 state_dict=weights)
