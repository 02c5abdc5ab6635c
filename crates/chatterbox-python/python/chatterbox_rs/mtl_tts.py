"""``ChatterboxMultilingualTTS`` (chatterbox/mtl_tts.py of chatterbox-tts at 5de7a54): 23
languages, picked per call with ``language_id``."""
from . import _native
from ._common import S3_SR, S3GEN_SR, device_name, options, output, path, seed_for_call

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


class ChatterboxMultilingualTTS:
    """The multilingual Chatterbox model (v2 T3 by default; ``t3_model="v3"`` for v3)."""

    ENC_COND_LEN = 6 * S3_SR
    DEC_COND_LEN = 10 * S3GEN_SR

    def __init__(self, model, device):
        self.sr = S3GEN_SR  # sample rate of synthesized audio
        self.device = device
        self._model = model

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
        model = _native.TtsModel.load(
            "multilingual",
            path(ckpt_dir),
            device_name(device),
            dtype=dtype,
            t3_model=t3_model,
            watermark=watermark,
        )
        return cls(model, device)

    @classmethod
    def from_pretrained(
        cls, device, t3_model=None, *, dtype=None, watermark=True
    ) -> "ChatterboxMultilingualTTS":
        """Loads the multilingual files of ResembleAI/chatterbox from the Hugging Face hub
        (cached; with HF_HUB_OFFLINE set, from the cache only)."""
        model = _native.TtsModel.load(
            "multilingual",
            None,
            device_name(device),
            dtype=dtype,
            t3_model=t3_model,
            watermark=watermark,
        )
        return cls(model, device)

    def prepare_conditionals(self, wav_fpath, exaggeration=0.5):
        """Makes the clip at ``wav_fpath`` the voice of the following generations."""
        self._model.prepare_conditionals(path(wav_fpath), exaggeration)

    def generate(
        self,
        text,
        language_id,
        audio_prompt_path=None,
        exaggeration=0.5,
        cfg_weight=0.5,
        temperature=0.8,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        *,
        seed=None,
        max_new_tokens=None,
    ):
        """Speech for ``text`` in ``language_id`` as a (1, N) float32 tensor at ``self.sr``."""
        _check_language(language_id)
        if audio_prompt_path:
            self.prepare_conditionals(audio_prompt_path, exaggeration=exaggeration)
        wav = self._model.generate(
            text,
            options(
                language_id=language_id,
                exaggeration=exaggeration,
                cfg_weight=cfg_weight,
                temperature=temperature,
                repetition_penalty=repetition_penalty,
                min_p=min_p,
                top_p=top_p,
                seed=seed_for_call(seed),
                max_new_tokens=max_new_tokens,
            ),
        )
        return output(wav)

    def stream(
        self,
        text,
        language_id,
        exaggeration=0.5,
        cfg_weight=0.5,
        temperature=0.8,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        *,
        seed=None,
        max_new_tokens=None,
    ):
        """``text`` streamed as it is generated: an iterator of 1-D float32 NumPy chunks."""
        _check_language(language_id)
        return self._model.stream(
            text,
            options(
                language_id=language_id,
                exaggeration=exaggeration,
                cfg_weight=cfg_weight,
                temperature=temperature,
                repetition_penalty=repetition_penalty,
                min_p=min_p,
                top_p=top_p,
                seed=seed_for_call(seed),
                max_new_tokens=max_new_tokens,
            ),
        )

    def generate_many(
        self,
        texts,
        language_id,
        exaggeration=0.5,
        cfg_weight=0.5,
        temperature=0.8,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        *,
        seed=None,
        max_new_tokens=None,
    ):
        """Several texts at once through continuous batching: a list of (1, N) tensors."""
        _check_language(language_id)
        wavs = self._model.generate_many(
            list(texts),
            options(
                language_id=language_id,
                exaggeration=exaggeration,
                cfg_weight=cfg_weight,
                temperature=temperature,
                repetition_penalty=repetition_penalty,
                min_p=min_p,
                top_p=top_p,
                seed=seed_for_call(seed),
                max_new_tokens=max_new_tokens,
            ),
        )
        return [output(w) for w in wavs]
