"""``ChatterboxTTS`` (chatterbox/tts.py of chatterbox-tts at 5de7a54): the English model."""
from ._common import TtsBase

REPO_ID = "ResembleAI/chatterbox"


class ChatterboxTTS(TtsBase):
    """The English Chatterbox model. Load it with ``from_pretrained(device)`` or
    ``from_local(ckpt_dir, device)``; ``generate(text)`` returns 24 kHz speech as a (1, N)
    tensor."""

    _VARIANT = "english"
    _OPTIONS = ("repetition_penalty", "min_p", "top_p", "exaggeration", "cfg_weight",
                "temperature")

    @classmethod
    def from_local(cls, ckpt_dir, device, *, dtype=None, watermark=True) -> "ChatterboxTTS":
        """Loads the checkpoint folder ``ckpt_dir`` (ve.safetensors, t3_cfg.safetensors,
        s3gen.safetensors, tokenizer.json, conds.pt when present) onto ``device``."""
        return cls(cls._load(cls._VARIANT, ckpt_dir, device, dtype, watermark), device)

    @classmethod
    def from_pretrained(cls, device, *, dtype=None, watermark=True) -> "ChatterboxTTS":
        """Loads ResembleAI/chatterbox from the Hugging Face hub (cached; with HF_HUB_OFFLINE
        set, from the cache only)."""
        return cls(cls._load(cls._VARIANT, None, device, dtype, watermark), device)

    def generate(self, text, repetition_penalty=1.2, min_p=0.05, top_p=1.0, audio_prompt_path=None,
                 exaggeration=0.5, cfg_weight=0.5, temperature=0.8, *, seed=None,
                 max_new_tokens=None, speed=1.0):
        """Speech for ``text`` as a (1, N) float32 tensor at ``self.sr``."""
        if audio_prompt_path:
            self.prepare_conditionals(audio_prompt_path, exaggeration=exaggeration)
        return self._generate(text, locals())

    def stream(self, text, repetition_penalty=1.2, min_p=0.05, top_p=1.0, exaggeration=0.5,
               cfg_weight=0.5, temperature=0.8, *, seed=None, max_new_tokens=None, speed=1.0):
        """``text`` streamed as it is generated: an iterator of 1-D float32 NumPy chunks at
        ``self.sr``, the first after the first chunk of speech tokens."""
        return self._stream(text, locals())

    def generate_many(self, texts, repetition_penalty=1.2, min_p=0.05, top_p=1.0, exaggeration=0.5,
                      cfg_weight=0.5, temperature=0.8, *, seed=None, max_new_tokens=None,
                      speed=1.0):
        """Several texts at once through continuous batching (one batched T3 step for all):
        a list of (1, N) tensors, in order. Each equals ``stream``'s audio for its text."""
        return self._generate_many(texts, locals())
