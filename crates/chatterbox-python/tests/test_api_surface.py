"""Every public method of the reference's four classes (chatterbox-tts at 5de7a54, recorded by
parity/python_api/record.py into parity/python_api/reference_api.json) exists in chatterbox_rs
with the same kind, the same parameters in the same order and the same defaults. chatterbox_rs
may add keyword-only parameters (seed, max_new_tokens, dtype, watermark) and methods (stream,
generate_many); `__init__`, which takes the reference's torch modules, is not part of it."""
import importlib
import inspect
import json
import os

import pytest

from conftest import ROOT

FIXTURE = os.path.join(
    os.environ.get("CHATTERBOX_PARITY_DIR", os.path.join(ROOT, "parity")),
    "python_api",
    "reference_api.json",
)

with open(FIXTURE) as f:
    REFERENCE = json.load(f)


def ours(cls_name):
    module = REFERENCE["classes"][cls_name]["module"]
    return getattr(importlib.import_module(f"chatterbox_rs.{module}"), cls_name)


@pytest.mark.parametrize("cls_name", sorted(REFERENCE["classes"]))
def test_methods_arguments_and_defaults(cls_name):
    ref = REFERENCE["classes"][cls_name]
    cls = ours(cls_name)
    assert ref["methods"], "the fixture lists methods"
    for name, want in ref["methods"].items():
        raw = inspect.getattr_static(cls, name, None)
        assert raw is not None, f"{cls_name}.{name} is missing"
        kind = {classmethod: "classmethod", staticmethod: "staticmethod"}.get(type(raw), "method")
        assert kind == want["kind"], f"{cls_name}.{name}: {kind}, reference {want['kind']}"
        fn = raw.__func__ if kind != "method" else raw
        got = list(inspect.signature(fn).parameters.values())
        for i, p in enumerate(want["params"]):
            assert i < len(got), f"{cls_name}.{name} lacks {p['name']}"
            q = got[i]
            where = f"{cls_name}.{name}({p['name']})"
            assert q.name == p["name"], f"{where}: ours is {q.name} at position {i}"
            assert q.kind.name == p["kind"], f"{where}: {q.kind.name}, reference {p['kind']}"
            if "default" in p:
                assert q.default is not inspect.Parameter.empty, f"{where}: no default"
                assert repr(q.default) == p["default"], (
                    f"{where}: default {q.default!r}, reference {p['default']}"
                )
            else:
                assert q.default is inspect.Parameter.empty, f"{where}: has a default"
        for q in got[len(want["params"]):]:
            assert q.kind in (q.KEYWORD_ONLY, q.VAR_KEYWORD), (
                f"{cls_name}.{name}: extra parameter {q.name} is not keyword-only"
            )


@pytest.mark.parametrize("cls_name", sorted(REFERENCE["classes"]))
def test_constants(cls_name):
    cls = ours(cls_name)
    for k, v in REFERENCE["classes"][cls_name]["constants"].items():
        assert getattr(cls, k) == v, f"{cls_name}.{k}"


def test_supported_languages():
    from chatterbox_rs.mtl_tts import ChatterboxMultilingualTTS, SUPPORTED_LANGUAGES

    assert SUPPORTED_LANGUAGES == REFERENCE["SUPPORTED_LANGUAGES"]
    assert list(SUPPORTED_LANGUAGES) == list(REFERENCE["SUPPORTED_LANGUAGES"])
    assert ChatterboxMultilingualTTS.get_supported_languages() == SUPPORTED_LANGUAGES


def test_package_exports_as_the_reference():
    import chatterbox_rs

    for name in ("ChatterboxTTS", "ChatterboxVC", "ChatterboxMultilingualTTS",
                 "SUPPORTED_LANGUAGES"):
        assert hasattr(chatterbox_rs, name), name
