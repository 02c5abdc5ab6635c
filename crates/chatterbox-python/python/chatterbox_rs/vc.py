"""``ChatterboxVC`` (chatterbox/vc.py of chatterbox-tts at 5de7a54): voice conversion."""
from . import _native
from ._common import S3_SR, S3GEN_SR, device_name, output, path, seed_for_call

REPO_ID = "ResembleAI/chatterbox"


class ChatterboxVC:
    """Re-speaks a recording in a target voice (S3Gen alone)."""

    ENC_COND_LEN = 6 * S3_SR
    DEC_COND_LEN = 10 * S3GEN_SR

    def __init__(self, model, device):
        self.sr = S3GEN_SR
        self.device = device
        self._model = model

    @classmethod
    def from_local(cls, ckpt_dir, device, *, dtype=None, watermark=True) -> "ChatterboxVC":
        """Loads s3gen.safetensors (and the built-in target voice conds.pt) from ``ckpt_dir``."""
        return cls(
            _native.VcModel.load(path(ckpt_dir), device_name(device), dtype, watermark), device
        )

    @classmethod
    def from_pretrained(cls, device, *, dtype=None, watermark=True) -> "ChatterboxVC":
        """Loads s3gen.safetensors and conds.pt of ResembleAI/chatterbox from the Hugging Face
        hub (cached; with HF_HUB_OFFLINE set, from the cache only)."""
        return cls(_native.VcModel.load(None, device_name(device), dtype, watermark), device)

    def set_target_voice(self, wav_fpath):
        """Makes the first 10 s of the clip at ``wav_fpath`` the target voice."""
        self._model.set_target_voice(path(wav_fpath))

    def generate(self, audio, target_voice_path=None, *, seed=None):
        """``audio`` (a file) in the target voice as a (1, N) float32 tensor at ``self.sr``."""
        if target_voice_path:
            self.set_target_voice(target_voice_path)
        return output(self._model.generate(path(audio), seed_for_call(seed)))
