"""Records the public API of the reference's four classes (chatterbox-tts at 5de7a54) as JSON:
every public method of ChatterboxTTS, ChatterboxMultilingualTTS, ChatterboxTurboTTS and
ChatterboxVC with its kind (instance method, classmethod) and parameters (name, kind,
default), the class constants, and SUPPORTED_LANGUAGES. chatterbox_rs's tests compare their
classes against it (crates/chatterbox-python/tests/test_api_surface.py).

Only the four modules' own code runs: their heavy imports (torch, librosa, perth, transformers,
the model packages) are stand-ins, so this needs neither torch nor the reference's other
dependencies, only the wheel.

    python parity/python_api/record.py [--wheel PATH] [--out parity/python_api/reference_api.json]
"""
import argparse
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys
import tempfile
import types
import zipfile
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_WHEEL = os.path.join(
    HERE, "..", "..", "..", "shared", "reference", "wheels",
    "chatterbox_tts-0.1.7+git5de7a54-py3-none-any.whl",
)
CLASSES = {
    "tts": "ChatterboxTTS",
    "mtl_tts": "ChatterboxMultilingualTTS",
    "tts_turbo": "ChatterboxTurboTTS",
    "vc": "ChatterboxVC",
}
# Imported modules that get a stand-in; constants the class bodies compute with are real.
STUBBED = ("torch", "librosa", "perth", "huggingface_hub", "safetensors", "transformers",
           "pyloudnorm", "chatterbox.models")
CONSTANTS = {
    "chatterbox.models.s3tokenizer": {"S3_SR": 16_000, "S3_TOKEN_RATE": 25},
    "chatterbox.models.s3gen": {"S3GEN_SR": 24_000},
    "chatterbox.models.s3gen.const": {"S3GEN_SIL": 4299},
}


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if any(name == s or name.startswith(s + ".") for s in STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__ = []
        m.__spec__ = spec
        for k, v in CONSTANTS.get(spec.name, {}).items():
            setattr(m, k, v)
        return m

    def exec_module(self, module):
        pass


def describe(cls):
    """The class's public methods and constants."""
    methods = {}
    for name, raw in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(raw, classmethod):
            kind, fn = "classmethod", raw.__func__
        elif isinstance(raw, staticmethod):
            kind, fn = "staticmethod", raw.__func__
        elif inspect.isfunction(raw):
            kind, fn = "method", raw
        else:
            continue
        params = []
        for p in inspect.signature(fn).parameters.values():
            entry = {"name": p.name, "kind": p.kind.name}
            if p.default is not inspect.Parameter.empty:
                entry["default"] = repr(p.default)
            params.append(entry)
        methods[name] = {"kind": kind, "params": params}
    constants = {
        k: v for k, v in vars(cls).items()
        if k.isupper() and isinstance(v, (int, float, str))
    }
    return {"methods": methods, "constants": constants}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", default=DEFAULT_WHEEL)
    ap.add_argument("--out", default=os.path.join(HERE, "reference_api.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(args.wheel) as z:
            z.extractall(tmp)
        # the package's __init__ asks for its installed version and imports every class;
        # an empty package in its place lets the four modules load one by one
        sys.meta_path.insert(0, _Stubs())
        pkg = types.ModuleType("chatterbox")
        pkg.__path__ = [os.path.join(tmp, "chatterbox")]
        sys.modules["chatterbox"] = pkg
        record = {"reference": os.path.basename(args.wheel), "classes": {}}
        for module, cls_name in CLASSES.items():
            mod = importlib.import_module(f"chatterbox.{module}")
            record["classes"][cls_name] = dict(module=module, **describe(getattr(mod, cls_name)))
        record["SUPPORTED_LANGUAGES"] = importlib.import_module(
            "chatterbox.mtl_tts").SUPPORTED_LANGUAGES
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
