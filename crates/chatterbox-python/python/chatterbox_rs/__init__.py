"""chatterbox_rs: Resemble AI's Chatterbox text-to-speech on native Rust (chatterbox-rs).

A drop-in for the ``chatterbox-tts`` package: the same four classes with the same methods,
arguments and defaults, in modules of the same names::

    from chatterbox_rs.tts import ChatterboxTTS              # chatterbox.tts
    from chatterbox_rs.mtl_tts import ChatterboxMultilingualTTS, SUPPORTED_LANGUAGES
    from chatterbox_rs.tts_turbo import ChatterboxTurboTTS   # nano=True for Nano
    from chatterbox_rs.vc import ChatterboxVC

``generate`` returns a ``(1, N)`` float32 torch tensor when torch is importable (so
``torchaudio.save(path, wav, model.sr)`` works unchanged), else a NumPy array of that shape.
Beyond the reference: ``stream`` (NumPy chunks as they are made), ``generate_many``
(several texts through continuous batching), ``seed=`` and ``max_new_tokens=`` keywords.
"""
from . import _native
from .tts import ChatterboxTTS
from .vc import ChatterboxVC
from .mtl_tts import ChatterboxMultilingualTTS, SUPPORTED_LANGUAGES
from .tts_turbo import ChatterboxTurboTTS

__version__ = _native.__version__

__all__ = [
    "ChatterboxTTS",
    "ChatterboxVC",
    "ChatterboxMultilingualTTS",
    "ChatterboxTurboTTS",
    "SUPPORTED_LANGUAGES",
]
