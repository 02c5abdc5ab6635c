"""``ChatterboxMultilingualTTS`` (chatterbox/mtl_tts.py of chatterbox-tts at 5de7a54): 23
languages, picked per call with ``language_id``."""
from . import _native
from ._common import TtsBase

REPO_ID = "ResembleAI/chatterbox"
DEFAULT_MULTILINGUAL_T3_MODEL = "t3_mtl23ls_v2.safetensors"

# Supported languages for the multilingual model
SUPPORTED_LANGUAGES = dict(_native.supported_languages())


def _check_language(language_id):
    if language_id and language_id.lower() not in SUPPORTED_LANGUAGES:
        supported_langs = ", ".join(SUPPORTED_LANGUAGES.keys())
        raise ValueError(
            f"Unsupported language_id '{language_id}'. "
            f"Supported languages: {supported_langs}"
        )


class ChatterboxMultilingualTTS(TtsBase):
    """The multilingual Chatterbox model (v2 T3 by default; ``t3_model="v3"`` for v3)."""

    _OPTIONS = ("language_id", "exaggeration", "cfg_weight", "temperature", "repetition_penalty",
                "min_p", "top_p")

    @classmethod
    def get_supported_languages(cls):
        """Return dictionary of supported language codes and names."""
        return SUPPORTED_LANGUAGES.copy()

    @classmethod
    def from_local(
        cls, ckpt_dir, device, t3_model=None, *, dtype=None, watermark=True
    ) -> "ChatterboxMultilingualTTS":
        """Loads ve.pt, the T3 of ``t3_model`` (v2, v3 or a .safetensors file name), s3gen.pt,
        grapheme_mtl_merged_expanded_v1.json and conds.pt (when present) from ``ckpt_dir``."""
        model = cls._load("multilingual", ckpt_dir, device, dtype, watermark, t3_model)
        return cls(model, device)

    @classmethod
    def from_pretrained(
        cls, device, t3_model=None, *, dtype=None, watermark=True
    ) -> "ChatterboxMultilingualTTS":
        """Loads the multilingual files of ResembleAI/chatterbox from the Hugging Face hub
        (cached; with HF_HUB_OFFLINE set, from the cache only)."""
        model = cls._load("multilingual", None, device, dtype, watermark, t3_model)
        return cls(model, device)

    def generate(self, text, language_id, audio_prompt_path=None, exaggeration=0.5, cfg_weight=0.5,
                 temperature=0.8, repetition_penalty=1.2, min_p=0.05, top_p=1.0, *, seed=None,
                 max_new_tokens=None, speed=1.0):
        """Speech for ``text`` in ``language_id`` as a (1, N) float32 tensor at ``self.sr``."""
        _check_language(language_id)
        if audio_prompt_path:
            self.prepare_conditionals(audio_prompt_path, exaggeration=exaggeration)
        return self._generate(text, locals())

    def stream(self, text, language_id, exaggeration=0.5, cfg_weight=0.5, temperature=0.8,
               repetition_penalty=1.2, min_p=0.05, top_p=1.0, *, seed=None, max_new_tokens=None,
               speed=1.0):
        """``text`` streamed as it is generated: an iterator of 1-D float32 NumPy chunks."""
        _check_language(language_id)
        return self._stream(text, locals())

    def generate_many(self, texts, language_id, exaggeration=0.5, cfg_weight=0.5, temperature=0.8,
                      repetition_penalty=1.2, min_p=0.05, top_p=1.0, *, seed=None,
                      max_new_tokens=None, speed=1.0):
        """Several texts at once through continuous batching: a list of (1, N) tensors."""
        _check_language(language_id)
        return self._generate_many(texts, locals())
