"""``ChatterboxTurboTTS`` (chatterbox/tts_turbo.py of chatterbox-tts at 5de7a54): Turbo, or
Nano with ``nano=True``."""
import logging

import numpy as np

from . import _native
from ._common import S3_SR, TtsBase, path

logger = logging.getLogger(__name__)

REPO_ID = "ResembleAI/chatterbox-turbo"
NANO_REPO_ID = "ResembleAI/chatterbox-nano"


class ChatterboxTurboTTS(TtsBase):
    """Chatterbox Turbo (GPT-2 medium T3, two-step meanflow S3Gen), or Nano (GPT-2 small)."""

    ENC_COND_LEN = 15 * S3_SR
    _OPTIONS = ("repetition_penalty", "top_p", "temperature", "top_k")

    def __init__(self, model, device, model_label="Turbo"):
        super().__init__(model, device)
        self.model_label = model_label  # "Turbo" or "Nano", used for logging

    @classmethod
    def from_local(
        cls, ckpt_dir, device, nano=False, *, dtype=None, watermark=True
    ) -> "ChatterboxTurboTTS":
        """Loads ve.safetensors, t3_turbo_v1.safetensors (t3_nano_v1.safetensors),
        s3gen_meanflow.safetensors, the GPT-2 tokenizer files and conds.pt from ``ckpt_dir``."""
        model = cls._load("nano" if nano else "turbo", ckpt_dir, device, dtype, watermark)
        return cls(model, device, model_label="Nano" if nano else "Turbo")

    @classmethod
    def from_pretrained(
        cls, device, nano=False, *, dtype=None, watermark=True
    ) -> "ChatterboxTurboTTS":
        """Loads ResembleAI/chatterbox-turbo (or -nano) from the Hugging Face hub (cached;
        with HF_HUB_OFFLINE set, from the cache only)."""
        model = cls._load("nano" if nano else "turbo", None, device, dtype, watermark)
        return cls(model, device, model_label="Nano" if nano else "Turbo")

    def norm_loudness(self, wav, sr, target_lufs=-27):
        """``wav`` scaled to ``target_lufs`` integrated loudness (unchanged where that is not
        possible, with a warning, as the reference)."""
        try:
            samples = np.ascontiguousarray(np.asarray(wav, dtype=np.float32).reshape(-1))
            return _native.norm_loudness(samples, int(sr), float(target_lufs))
        except Exception as e:  # the reference warns and returns the input
            print(f"Warning: Error in norm_loudness, skipping: {e}")
            return wav

    def prepare_conditionals(self, wav_fpath, exaggeration=0.5, norm_loudness=True):
        """Makes the clip at ``wav_fpath`` (longer than 5 s) the voice of the following
        generations, normalised to -27 LUFS first unless ``norm_loudness`` is false."""
        self._model.prepare_conditionals(path(wav_fpath), exaggeration, norm_loudness)

    def _warn_ignored(self, cfg_weight, exaggeration, min_p):
        if cfg_weight > 0.0 or exaggeration > 0.0 or min_p > 0.0:
            logger.warning(
                f"CFG, min_p and exaggeration are not supported by the {self.model_label} "
                "version and will be ignored."
            )

    def generate(self, text, repetition_penalty=1.2, min_p=0.00, top_p=0.95,
                 audio_prompt_path=None, exaggeration=0.0, cfg_weight=0.0, temperature=0.8,
                 top_k=1000, norm_loudness=True, *, seed=None, max_new_tokens=None, speed=1.0):
        """Speech for ``text`` as a (1, N) float32 tensor at ``self.sr``."""
        if audio_prompt_path:
            self.prepare_conditionals(
                audio_prompt_path, exaggeration=exaggeration, norm_loudness=norm_loudness
            )
        self._warn_ignored(cfg_weight, exaggeration, min_p)
        return self._generate(text, locals())

    def stream(self, text, repetition_penalty=1.2, top_p=0.95, temperature=0.8, top_k=1000, *,
               seed=None, max_new_tokens=None, speed=1.0):
        """``text`` streamed as it is generated: an iterator of 1-D float32 NumPy chunks."""
        return self._stream(text, locals())

    def generate_many(self, texts, repetition_penalty=1.2, top_p=0.95, temperature=0.8, top_k=1000,
                      *, seed=None, max_new_tokens=None, speed=1.0):
        """Several texts at once through continuous batching: a list of (1, N) tensors."""
        return self._generate_many(texts, locals())
