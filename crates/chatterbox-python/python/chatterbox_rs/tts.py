"""``ChatterboxTTS`` (chatterbox/tts.py of chatterbox-tts at 5de7a54): the English model."""
from . import _native
from ._common import S3_SR, S3GEN_SR, device_name, options, output, path, seed_for_call

REPO_ID = "ResembleAI/chatterbox"


class ChatterboxTTS:
    """The English Chatterbox model. Load it with ``from_pretrained(device)`` or
    ``from_local(ckpt_dir, device)``; ``generate(text)`` returns 24 kHz speech as a (1, N)
    tensor."""

    ENC_COND_LEN = 6 * S3_SR
    DEC_COND_LEN = 10 * S3GEN_SR
    _VARIANT = "english"

    def __init__(self, model, device):
        self.sr = S3GEN_SR  # sample rate of synthesized audio
        self.device = device
        self._model = model

    @classmethod
    def from_local(cls, ckpt_dir, device, *, dtype=None, watermark=True) -> "ChatterboxTTS":
        """Loads the checkpoint folder ``ckpt_dir`` (ve.safetensors, t3_cfg.safetensors,
        s3gen.safetensors, tokenizer.json, conds.pt when present) onto ``device``."""
        model = _native.TtsModel.load(
            cls._VARIANT, path(ckpt_dir), device_name(device), dtype=dtype, watermark=watermark
        )
        return cls(model, device)

    @classmethod
    def from_pretrained(cls, device, *, dtype=None, watermark=True) -> "ChatterboxTTS":
        """Loads ResembleAI/chatterbox from the Hugging Face hub (cached; with HF_HUB_OFFLINE
        set, from the cache only)."""
        model = _native.TtsModel.load(
            cls._VARIANT, None, device_name(device), dtype=dtype, watermark=watermark
        )
        return cls(model, device)

    def prepare_conditionals(self, wav_fpath, exaggeration=0.5):
        """Makes the clip at ``wav_fpath`` the voice of the following generations."""
        self._model.prepare_conditionals(path(wav_fpath), exaggeration)

    def generate(
        self,
        text,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        audio_prompt_path=None,
        exaggeration=0.5,
        cfg_weight=0.5,
        temperature=0.8,
        *,
        seed=None,
        max_new_tokens=None,
    ):
        """Speech for ``text`` as a (1, N) float32 tensor at ``self.sr``."""
        if audio_prompt_path:
            self.prepare_conditionals(audio_prompt_path, exaggeration=exaggeration)
        wav = self._model.generate(
            text,
            options(
                repetition_penalty=repetition_penalty,
                min_p=min_p,
                top_p=top_p,
                exaggeration=exaggeration,
                cfg_weight=cfg_weight,
                temperature=temperature,
                seed=seed_for_call(seed),
                max_new_tokens=max_new_tokens,
            ),
        )
        return output(wav)

    def stream(
        self,
        text,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        exaggeration=0.5,
        cfg_weight=0.5,
        temperature=0.8,
        *,
        seed=None,
        max_new_tokens=None,
    ):
        """``text`` streamed as it is generated: an iterator of 1-D float32 NumPy chunks at
        ``self.sr``, the first after the first chunk of speech tokens."""
        return self._model.stream(
            text,
            options(
                repetition_penalty=repetition_penalty,
                min_p=min_p,
                top_p=top_p,
                exaggeration=exaggeration,
                cfg_weight=cfg_weight,
                temperature=temperature,
                seed=seed_for_call(seed),
                max_new_tokens=max_new_tokens,
            ),
        )

    def generate_many(
        self,
        texts,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        exaggeration=0.5,
        cfg_weight=0.5,
        temperature=0.8,
        *,
        seed=None,
        max_new_tokens=None,
    ):
        """Several texts at once through continuous batching (one batched T3 step for all):
        a list of (1, N) tensors, in order. Each equals ``stream``'s audio for its text."""
        wavs = self._model.generate_many(
            list(texts),
            options(
                repetition_penalty=repetition_penalty,
                min_p=min_p,
                top_p=top_p,
                exaggeration=exaggeration,
                cfg_weight=cfg_weight,
                temperature=temperature,
                seed=seed_for_call(seed),
                max_new_tokens=max_new_tokens,
            ),
        )
        return [output(w) for w in wavs]
