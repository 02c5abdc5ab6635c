"""chatterbox-text cases: the three `punc_norm`s, the multilingual preprocessing and the ids of
the English, multilingual and Turbo tokenizers over the committed corpus (parity/corpus/text.jsonl,
one JSON object per line: {"lang": ..., "text": ...}), through the reference's own functions.

The real vocabulary files cannot be downloaded here, so tokenizer files with the real structure are
trained on the corpus with the `tokenizers` library and written under `<out>/text/assets/`:

- `en/tokenizer.json`: BPE over a Whitespace pre-tokenizer, `[STOP]`=0, `[UNK]`=1, `[SPACE]`=2,
  `[PAD]` `[SEP]` `[CLS]` `[MASK]` = 3..6, `[START]`=255 (the T3 config's stop/start ids).
- `mtl/grapheme_mtl_merged_expanded_v1.json`: the same, plus the 23 `[lang]` tokens and the
  `[cj_*]` tokens; `mtl/Cangjie5_TC.json`: a small table in the format of the hub's (a JSON list of
  "glyph<TAB>code" strings) for the corpus's Chinese characters, with shared codes and a repeated
  glyph.
- `turbo/`: a GPT-2 byte-level BPE with `<|endoftext|>` last and the 19 paralinguistic/style tags
  after it, saved by transformers (`tokenizer.json` + `tokenizer_config.json`); `turbo_legacy/`: the
  same as `vocab.json` + `merges.txt` + `added_tokens.json` + `tokenizer_config.json`.

Strings travel as UTF-8 bytes (`U8`) concatenated, with per-line byte lengths; ids concatenated with
per-line counts. Everything is compared exactly.

Optional reference dependencies. pykakasi (GPL-3.0-or-later) is made unimportable for every case
here (the reference's `except ImportError` path, `NoKakasi`), so Japanese is recorded as the
reference behaves without it, which is what chatterbox-text (MIT) does without a `KanjiReader`;
the cases with pykakasi installed belong to the GPL crate chatterbox-kakasi
(parity/recorders/kakasi.py). `hiragana_normalize_hook` checks the reference's own
`hiragana_normalize` over a stand-in `pykakasi` module whose segments are recorded as inputs, so the
hook's logic is covered without pykakasi. spacy-pkuseg is installed but its default model
(`spacy_ontonotes`) is a download that cannot happen here (the reference's `pkuseg()` raises
ConnectionError), so Chinese is recorded without segmentation, i.e. as the reference behaves without
spacy-pkuseg; the Rust port has the same gap (a segmenter hook). `Cangjie5_TC.json` comes from the
hub in the reference (`hf_hub_download`); here it is served from the asset directory.
"""
import hashlib
import json
import logging
import os
import sys
import unicodedata
from types import ModuleType, SimpleNamespace

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import chatterbox.models.tokenizers.tokenizer as tokmod
from chatterbox import mtl_tts, tts, tts_turbo
from chatterbox.models.tokenizers import EnTokenizer, MTLTokenizer
from common import exact

COMPONENT = "text"
logging.getLogger(tokmod.__name__).setLevel(logging.ERROR)  # "dicta_onnx not available" per line

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(ROOT, "parity", "corpus", "text.jsonl")

# Exact everywhere: strings are compared byte for byte, ids as integers.
STRING_TOL = exact()  # normalised text must be identical bytes
IDS_TOL = exact()     # token ids are integers

SPECIALS = {"[STOP]": 0, "[UNK]": 1, "[SPACE]": 2, "[PAD]": 3, "[SEP]": 4, "[CLS]": 5, "[MASK]": 6,
            "[START]": 255}
LANGS = sorted(mtl_tts.SUPPORTED_LANGUAGES)
CJ_CHARS = list("abcdefghijklmnopqrstuvwxy") + ["."] + list("123456789")
TURBO_TAGS = ["[laugh]", "[chuckle]", "[sigh]", "[gasp]", "[cough]", "[clear throat]", "[sniff]",
              "[groan]", "[shush]", "[whispering]", "[angry]", "[happy]", "[sarcastic]",
              "[surprised]", "[fear]", "[crying]", "[dramatic]", "[narration]", "[advertisement]"]
TURBO_MAX_LEN = 1024  # GPT-2's model_max_length: `truncation=True` cuts there


def load_corpus():
    with open(CORPUS, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for r in rows:
        assert r["lang"] in mtl_tts.SUPPORTED_LANGUAGES, r
    return rows


# ---------------------------------------------------------------- packing strings and id lists

def pack_strings(strings):
    data = b"".join(s.encode("utf-8") for s in strings)
    lens = [len(s.encode("utf-8")) for s in strings]
    return np.frombuffer(data, dtype=np.uint8).copy(), np.array(lens, dtype=np.int64)


def pack_ids(seqs):
    flat = [int(i) for s in seqs for i in s]
    return np.array(flat, dtype=np.int64), np.array([len(s) for s in seqs], dtype=np.int64)


def text_inputs(texts, langs=None):
    t, n = pack_strings(texts)
    out = {"text": t, "text_len": n}
    if langs is not None:
        l, ln = pack_strings(langs)
        out.update({"lang": l, "lang_len": ln})
    return out


# ---------------------------------------------------------------- tokenizer files

def _bpe_json(vocab_tokens, merges, added):
    """tokenizer.json of a grapheme BPE: `vocab_tokens` in id order with the specials at their
    fixed ids, `added` = [(content, id)] added tokens (all special)."""
    vocab = dict(SPECIALS)
    nxt = 0
    for tok in vocab_tokens:
        if tok in vocab:
            continue
        while nxt in vocab.values():
            nxt += 1
        vocab[tok] = nxt
        nxt += 1
    added_tokens = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                     "normalized": False, "special": True}
                    for t, i in sorted(SPECIALS.items(), key=lambda kv: kv[1])]
    top = max(vocab.values()) + 1
    for j, t in enumerate(added):
        vocab[t] = top + j
        added_tokens.append({"id": top + j, "content": t, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True})
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": "[UNK]",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def train_grapheme(texts, vocab_size, added, path):
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[], show_progress=False,
                                  min_frequency=2)
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    ordered = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    spec = _bpe_json(ordered, model["merges"], added)
    s = json.dumps(spec, ensure_ascii=False)
    Tokenizer.from_str(s)  # must load
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(s)


def cangjie_table(zh_texts, path):
    """A Cangjie5_TC.json-format table for every `Lo` character of the Chinese lines, with
    deterministic made-up codes; every 6th glyph shares the previous glyph's code (so the index
    suffix appears), one glyph is listed twice, and two non-`Lo` characters are present."""
    glyphs = []
    for t in zh_texts:
        for ch in unicodedata.normalize("NFKD", t.lower()):
            if unicodedata.category(ch) == "Lo" and ch not in glyphs and not ("\u3040" <= ch <= "\u30ff"):
                glyphs.append(ch)
    entries, prev = [], None
    for i, g in enumerate(glyphs):
        h = hashlib.sha1(g.encode()).digest()
        code = "".join("abcdefghijklmnopqrstuvwxy"[b % 25] for b in h[: 1 + h[5] % 5])
        if i % 6 == 5 and prev is not None:
            code = prev
        entries.append(f"{g}\t{code}" + ("\t1234" if i % 4 == 0 else ""))
        prev = code
    entries.append(f"{glyphs[0]}\tzz")      # a repeated glyph: the later code wins in word2cj
    entries += ["。\tzxa", "〇\tzxb"]        # not `Lo`: never converted
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(entries, f, ensure_ascii=False, indent=0)


def turbo_files(texts, out_dir, legacy_dir):
    from transformers import AutoTokenizer, GPT2Tokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=[], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    vocab["<|endoftext|>"] = len(vocab)  # GPT-2: last id of the BPE vocabulary
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    base = len(vocab)
    config = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "errors": "replace",
        "model_max_length": TURBO_MAX_LEN, "tokenizer_class": "GPT2Tokenizer",
    }
    os.makedirs(legacy_dir, exist_ok=True)
    with open(os.path.join(legacy_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(legacy_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    with open(os.path.join(legacy_dir, "added_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({t: base + i for i, t in enumerate(TURBO_TAGS)}, f, ensure_ascii=False)
    with open(os.path.join(legacy_dir, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({k: config[k] for k in ("bos_token", "eos_token", "unk_token")}, f)
    with open(os.path.join(legacy_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    # the tokenizer.json layout: as transformers saves it
    t = GPT2Tokenizer(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], **{k: v for k, v in config.items()
                                                     if k not in ("tokenizer_class", "errors")})
    t.add_tokens(TURBO_TAGS)
    assert len(t) == base + len(TURBO_TAGS), len(t)
    t.save_pretrained(out_dir)
    for name in ("vocab.json", "merges.txt"):  # keep only the tokenizer.json layout there
        p = os.path.join(out_dir, name)
        if os.path.exists(p):
            os.remove(p)
    a, b = AutoTokenizer.from_pretrained(out_dir), AutoTokenizer.from_pretrained(legacy_dir)
    assert len(a) == len(b) == base + len(TURBO_TAGS), (len(a), len(b))


# ---------------------------------------------------------------- the reference objects

class _Capture:
    """Stands in for `MTLTokenizer.tokenizer` to record the exact string `encode` tokenizes."""

    def __init__(self, inner):
        self.inner = inner
        self.last = None

    def encode(self, txt):
        self.last = txt
        return self.inner.encode(txt)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def make_mtl(vocab_path, cangjie=True):
    """MTLTokenizer as the reference builds it, with the hub download served from the asset dir
    and the pkuseg segmenter absent (its model cannot be downloaded here). `cangjie=False`: the
    directory has no Cangjie5_TC.json (the reference logs a warning and converts nothing)."""
    model_dir = os.path.dirname(vocab_path)
    orig_dl, orig_seg = tokmod.hf_hub_download, tokmod.ChineseCangjieConverter._init_segmenter
    tokmod.hf_hub_download = lambda repo_id, filename, cache_dir=None, **kw: os.path.join(model_dir, filename)
    tokmod.ChineseCangjieConverter._init_segmenter = lambda self: setattr(self, "segmenter", None)
    try:
        mtl = MTLTokenizer(vocab_path)
    finally:
        tokmod.hf_hub_download, tokmod.ChineseCangjieConverter._init_segmenter = orig_dl, orig_seg
    assert bool(mtl.cangjie_converter.word2cj) == cangjie, "Cangjie table (not) loaded"
    mtl.tokenizer = _Capture(mtl.tokenizer)
    return mtl


def prepared(mtl, text, lang):
    mtl.encode(text, language_id=lang)
    return mtl.tokenizer.last


class Pykakasi:
    """Within the block, `import pykakasi` in the reference's `hiragana_normalize` gives `module`
    (`None`: ImportError), and its cached `_kakasi` instance is dropped."""

    def __init__(self, module):
        self.module = module

    def __enter__(self):
        self.saved = (tokmod._kakasi, "pykakasi" in sys.modules, sys.modules.get("pykakasi"))
        tokmod._kakasi = None
        sys.modules["pykakasi"] = self.module
        return self

    def __exit__(self, *exc):
        tokmod._kakasi, present, mod = self.saved
        if present:
            sys.modules["pykakasi"] = mod  # a None entry (unimportable) is restored as such
        else:
            sys.modules.pop("pykakasi", None)


class NoKakasi(Pykakasi):
    """pykakasi made unimportable (the reference's `except ImportError` path)."""

    def __init__(self):
        super().__init__(None)


# Readings the stand-in reader gives segments with a kanji: leading は/へ (the reference adds a
# space), empty (the segment vanishes), half-width and voiced kana (NFKD changes them).
HOOK_READINGS = ["はし", "へや", "やま", "", "がっこう", "ﾊﾞｽ", "は", "へ", "ぱ"]
# Extra lines for the hook: CJK extension A (no kanji for the reference), katakana runs, empty text.
HOOK_EXTRA = ["\u3400は\u4dbf", "カタカナ", "ｶﾀｶﾅ", "", "x漢字y", "\u9fff\u4e00", "ー、。"]


def stand_in_segments(text):
    """Deterministic segments for the stand-in `pykakasi`: chunks of 1-3 characters; a chunk with
    a character in U+3400..U+9FFF reads as one of HOOK_READINGS, any other chunk as `ほ` (a value
    the reference must ignore)."""
    if not text:
        return [("", "")]
    h = hashlib.sha1(text.encode()).digest()
    out, i, k = [], 0, 0
    while i < len(text):
        n = 1 + h[k % len(h)] % 3
        chunk = text[i:i + n]
        if any("\u3400" <= ch <= "\u9fff" for ch in chunk):
            hira = HOOK_READINGS[h[(k + 7) % len(h)] % len(HOOK_READINGS)]
        else:
            hira = "ほ"
        out.append((chunk, hira))
        i, k = i + n, k + 1
    return out


def _stand_in_module():
    class Kakasi:
        def convert(self, text):
            return [{"orig": o, "hira": h, "kana": "", "hepburn": "", "kunrei": "", "passport": ""}
                    for o, h in stand_in_segments(text)]

    m = ModuleType("pykakasi")
    m.kakasi = Kakasi
    return m


# ---------------------------------------------------------------- cases

def record(rec):
    with NoKakasi():
        _record(rec)


def _record(rec):
    c = COMPONENT
    rows = load_corpus()
    texts = [r["text"] for r in rows]
    langs = [r["lang"] for r in rows]
    assets = os.path.join(rec.out, c, "assets")
    corpus_note = f"corpus parity/corpus/text.jsonl: {len(rows)} lines, {len(set(langs))} languages"

    # punc_norm, three variants, over every line
    for case, variant, fn in [("punc_norm_en", "english", tts.punc_norm),
                              ("punc_norm_mtl", "multilingual", mtl_tts.punc_norm),
                              ("punc_norm_turbo", "turbo", tts_turbo.punc_norm)]:
        if rec.want(c, case, "punc_norm"):
            o, ol = pack_strings([fn(t) for t in texts])
            rec.case(c, case, "punc_norm", text_inputs(texts), {"text": o, "text_len": ol},
                     {"text": STRING_TOL, "text_len": STRING_TOL}, config={"variant": variant},
                     notes=corpus_note)

    # ---- tokenizer assets
    latin = {"da", "de", "en", "es", "fi", "fr", "it", "ms", "nl", "no", "pl", "pt", "sv", "sw", "tr"}
    en_train = [tts.punc_norm(t) for t, l in zip(texts, langs) if l in latin]
    en_path = os.path.join(assets, "en", "tokenizer.json")
    train_grapheme(en_train, 360, [], en_path)

    mtl_dir = os.path.join(assets, "mtl")
    mtl_path = os.path.join(mtl_dir, "grapheme_mtl_merged_expanded_v1.json")
    cangjie_table([t for t, l in zip(texts, langs) if l == "zh"], os.path.join(mtl_dir, "Cangjie5_TC.json"))
    mtl_added = [f"[{l}]" for l in LANGS] + [f"[cj_{ch}]" for ch in CJ_CHARS]
    train_grapheme(["x"], 10, mtl_added, mtl_path)  # bootstrap vocabulary to run the preprocessing
    boot = make_mtl(mtl_path)
    strip = set(mtl_added) | {"[SPACE]"}
    mtl_train = []
    for i, (t, l) in enumerate(zip(texts, langs)):
        if i % 5 == 0:
            continue  # held out: their rare graphemes become [UNK]
        s = prepared(boot, mtl_tts.punc_norm(t), l)
        for tok in strip:
            s = s.replace(tok, " ")
        mtl_train.append(s)
    train_grapheme(mtl_train, 700, mtl_added, mtl_path)
    mtl = make_mtl(mtl_path)
    en = EnTokenizer(en_path)

    turbo_files([tts_turbo.punc_norm(t) for t, l in zip(texts, langs) if l in latin],
                os.path.join(assets, "turbo"), os.path.join(assets, "turbo_legacy"))

    asset_cfg = {"en": "assets/en/tokenizer.json", "mtl": "assets/mtl/grapheme_mtl_merged_expanded_v1.json"}

    # ---- English ids (punc_norm'd and raw) and decode
    for case, inputs in [("en_ids", [tts.punc_norm(t) for t in texts]), ("en_ids_raw", texts)]:
        if rec.want(c, case, "en_ids"):
            ids = [en.encode(t) for t in inputs]
            dec = [en.decode(i) for i in ids]
            i_, il = pack_ids(ids)
            d, dl = pack_strings(dec)
            rec.case(c, case, "en_ids", text_inputs(inputs),
                     {"ids": i_, "ids_len": il, "decoded": d, "decoded_len": dl},
                     {"ids": IDS_TOL, "ids_len": IDS_TOL, "decoded": STRING_TOL, "decoded_len": STRING_TOL},
                     config={"tokenizer": asset_cfg["en"]}, notes=corpus_note)

    # ---- multilingual: the exact string before the tokenizer (raw lines), then ids
    if rec.want(c, "mtl_prepare_raw", "mtl_prepare"):
        p, pl = pack_strings([prepared(mtl, t, l) for t, l in zip(texts, langs)])
        rec.case(c, "mtl_prepare_raw", "mtl_prepare", text_inputs(texts, langs),
                 {"text": p, "text_len": pl}, {"text": STRING_TOL, "text_len": STRING_TOL},
                 config={"tokenizer": asset_cfg["mtl"]},
                 notes=corpus_note + "; pykakasi unimportable")

    if rec.want(c, "hiragana_normalize_hook", "hiragana_normalize"):
        hook_in = [t for t, l in zip(texts, langs) if l == "ja"] + HOOK_EXTRA
        hook_in += [mtl.preprocess_text(t) for t in hook_in]  # as `encode` hands them over
        segs = [stand_in_segments(t) for t in hook_in]
        with Pykakasi(_stand_in_module()):
            out = [tokmod.hiragana_normalize(t) for t in hook_in]
        o, ol = pack_strings(out)
        so, sol = pack_strings([x for s in segs for x, _ in s])
        sh, shl = pack_strings([h for s in segs for _, h in s])
        inputs = {**text_inputs(hook_in), "seg_orig": so, "seg_orig_len": sol, "seg_hira": sh,
                  "seg_hira_len": shl, "segments": np.array([len(s) for s in segs], dtype=np.int64)}
        rec.case(c, "hiragana_normalize_hook", "hiragana_normalize", inputs,
                 {"text": o, "text_len": ol}, {"text": STRING_TOL, "text_len": STRING_TOL},
                 notes="the reference's hiragana_normalize with a stand-in pykakasi module whose "
                       "convert() returns the recorded segments (seg_orig/seg_hira, `segments` per "
                       "line): the KanjiReader hook's logic, without pykakasi")

    for case, lang_of in [("mtl_ids", lambda l: l), ("mtl_ids_nolang", lambda l: None)]:
        if rec.want(c, case, "mtl_ids"):
            inputs = [mtl_tts.punc_norm(t) for t in texts]
            used = [lang_of(l) for l in langs]
            ids = [mtl.encode(t, language_id=l) for t, l in zip(inputs, used)]
            dec = [mtl.decode(i) for i in ids]
            i_, il = pack_ids(ids)
            d, dl = pack_strings(dec)
            rec.case(c, case, "mtl_ids", text_inputs(inputs, [l or "" for l in used]),
                     {"ids": i_, "ids_len": il, "decoded": d, "decoded_len": dl},
                     {"ids": IDS_TOL, "ids_len": IDS_TOL, "decoded": STRING_TOL, "decoded_len": STRING_TOL},
                     config={"tokenizer": asset_cfg["mtl"]},
                     notes=corpus_note + "; an empty lang means language_id=None; pykakasi unimportable")

    # ---- Turbo: AutoTokenizer as tts_turbo.py calls it, both file layouts, plus a long text
    from transformers import AutoTokenizer
    long_text = tts_turbo.punc_norm(" ".join(texts * 3))
    turbo_inputs = [tts_turbo.punc_norm(t) for t in texts] + [long_text]
    for case, sub in [("turbo_ids", "turbo"), ("turbo_ids_legacy", "turbo_legacy")]:
        if rec.want(c, case, "turbo_ids"):
            tok = AutoTokenizer.from_pretrained(os.path.join(assets, sub))
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            ids = [tok(t, return_tensors="pt", padding=True, truncation=True).input_ids[0].tolist()
                   for t in turbo_inputs]
            assert len(ids[-1]) == TURBO_MAX_LEN, len(ids[-1])  # the long text is truncated
            i_, il = pack_ids(ids)
            rec.case(c, case, "turbo_ids", text_inputs(turbo_inputs), {"ids": i_, "ids_len": il},
                     {"ids": IDS_TOL, "ids_len": IDS_TOL},
                     config={"tokenizer_dir": f"assets/{sub}", "vocab_size": len(tok)},
                     notes=corpus_note + " + one long text past model_max_length")

    # ---- errors: which language ids generate() rejects; tokenizers without [START]
    if rec.want(c, "language_ids", "language_ids"):
        ids_in = ["en", "EN", "Zh", "xx", "pt-br", "", "english", "JA", "he", "iw"]
        rejected = [int(bool(l) and l.lower() not in mtl_tts.SUPPORTED_LANGUAGES) for l in ids_in]
        rec.case(c, "language_ids", "language_ids", text_inputs(ids_in),
                 {"rejected": np.array(rejected, dtype=np.int64)}, {"rejected": IDS_TOL},
                 notes="generate(): `language_id and language_id.lower() not in SUPPORTED_LANGUAGES` "
                       "raises ValueError; an empty id means no language")
    if rec.want(c, "missing_special_tokens", "missing_special"):
        bad_dir = os.path.join(assets, "bad")
        os.makedirs(bad_dir, exist_ok=True)
        spec = json.loads(open(en_path, encoding="utf-8").read())
        names, raised = [], []
        for drop in ["[START]", "[STOP]", "[SPACE]"]:
            s = json.loads(json.dumps(spec))
            s["added_tokens"] = [t for t in s["added_tokens"] if t["content"] != drop]
            s["model"]["vocab"].pop(drop, None)
            name = f"no_{drop.strip('[]').lower()}.json"
            with open(os.path.join(bad_dir, name), "w", encoding="utf-8") as f:
                json.dump(s, f, ensure_ascii=False)
            names.append(f"assets/bad/{name}")
            path = os.path.join(bad_dir, name)
            for check in (lambda: EnTokenizer(path),
                          lambda: MTLTokenizer.check_vocabset_sot_eot(
                              SimpleNamespace(tokenizer=Tokenizer.from_file(path)))):
                try:
                    check()
                    raised.append(0)
                except AssertionError:
                    raised.append(1)
        rec.case(c, "missing_special_tokens", "missing_special", {"dummy": np.zeros(1, dtype=np.int64)},
                 {"raised": np.array(raised, dtype=np.int64)}, {"raised": IDS_TOL},
                 config={"files": names, "order": "per file: EnTokenizer, MTLTokenizer"},
                 notes="1 where the reference's check_vocabset_sot_eot asserts")
