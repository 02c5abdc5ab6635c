"""chatterbox-kakasi cases: pykakasi 2.3.0 and the reference's Japanese path with it installed,
over the Japanese lines of the text corpus (parity/corpus/text.jsonl).

pykakasi and its dictionary are GPL-3.0-or-later, so these cases belong to the GPL crate
chatterbox-kakasi; the text component (parity/recorders/text.py, MIT crate chatterbox-text)
records the same lines with pykakasi unimportable.

Assets under `<out>/kakasi/assets/` (GPL-3.0-or-later data, derived from pykakasi):

- `kakasi_dict.tsv`: the part of pykakasi's dictionary the lines below use (every itaiji mapping,
  every kanwa word that occurs in them), exported with
  crates/chatterbox-kakasi/scripts/export_pykakasi_dict.py.
- `mtl/grapheme_mtl_merged_expanded_v1.json`: a vocabulary with the real structure (specials, the
  23 `[lang]` tokens, the `[cj_*]` tokens), BPE-trained with recorders.text's helpers on the
  Japanese lines as the reference prepares them with pykakasi; every 5th line is held out, so its
  rare graphemes become [UNK]. No Cangjie5_TC.json (Chinese is not exercised here).

Cases, all compared exactly (strings as UTF-8 bytes with per-item byte lengths, ids as integers):

- `convert` (kind convert): `pykakasi.kakasi().convert(text)`'s `orig` and `hira` per segment and
  the segment count per line, for each Japanese line as written, after `mtl_tts.punc_norm`, after
  `preprocess_text` (what `hiragana_normalize` receives), and for edge cases of pykakasi's quirks.
- `mtl_prepare_ja` (kind mtl_prepare): the exact string `MTLTokenizer.encode(text, "ja")` hands to
  the tokenizer; `kakasi_dependent_corpus_lines` lists the corpus lines whose result pykakasi
  changes (compared with pykakasi unimportable).
- `mtl_ids_ja` (kind mtl_ids): ids and `decode` of the `mtl_tts.punc_norm`'d lines.
- `--full` only, `mtl_prepare_ja_full_dict`: pykakasi's whole dictionary (about 7 MB, written to
  `<out>/kakasi/assets_full/`, never committed) on more Japanese text.
"""
import importlib
import importlib.util
import os
import unicodedata

import numpy as np

from chatterbox import mtl_tts, tts
from common import exact
from recorders.text import (CJ_CHARS, LANGS, NoKakasi, Pykakasi, load_corpus, make_mtl, pack_ids,
                            pack_strings, prepared, text_inputs, train_grapheme)

COMPONENT = "kakasi"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPORT_SCRIPT = os.path.join(ROOT, "crates", "chatterbox-kakasi", "scripts", "export_pykakasi_dict.py")

# Exact everywhere: strings are compared byte for byte, ids as integers.
STRING_TOL = exact()  # segments and prepared text must be identical bytes
IDS_TOL = exact()     # token ids and segment counts are integers

# pykakasi's quirks, for `convert` (an unknown kanji is added at record time): characters of no
# known class (a combining mark, U+FFFF) after a word, which is then emitted again; an emoji and
# U+F000 (dropped); a variation selector inside a word; a supplementary-plane kanji; katakana
# before an end mark; long-vowel marks after a word; half-width kana with voicing marks; Greek and
# Cyrillic (symbols); the empty text.
QUIRKS = ["日本\u0300です", "ァ\uffffｦ", "ab\uffffcd", "かな\U0001F600です", "かな\uf000です",
          "漢\ufe00字", "\U0002000bx", "テスト。", "日本語ー", "ｶﾞｷﾞｰｱ", "時計ｰ", "ｳﾞｧｲｵﾘﾝ", "Ωαяё",
          "ー、。", ""]
# Japanese text for the --full case with pykakasi's whole dictionary.
JA_MORE = [
    "吾輩は猫である。名前はまだ無い。", "どこで生れたかとんと見当がつかぬ。",
    "国境の長いトンネルを抜けると雪国であった。", "夜の底が白くなった。信号所に汽車が止まった。",
    "春はあけぼの。やうやう白くなりゆく山ぎは、少しあかりて、紫だちたる雲の細くたなびきたる。",
    "祇園精舎の鐘の声、諸行無常の響きあり。", "政府は来年度の予算案を閣議決定した。",
    "東京都内の気温は三十五度を超え、熱中症に注意が必要です。", "新幹線は午前八時に新大阪駅を出発します。",
    "図書館で借りた本を返却期限までに返してください。", "彼女は大学で経済学を専攻している。",
    "この料理は醤油と砂糖と味醂で味付けします。", "明治維新以降、日本は急速に近代化した。",
    "富士山の頂上から見る日の出は素晴らしい。", "会議の議事録を作成して関係者に送付した。",
    "子供たちが公園で元気に遊んでいる。", "携帯電話の電池が切れそうです。",
    "人工知能の研究開発が世界中で進んでいる。", "郵便局は駅前の交差点を右に曲がったところにあります。",
    "昨日は一日中雨が降っていたので、家で映画を見ました。", "お客様、こちらのお席へどうぞ。",
    "一期一会の精神を大切にしたい。", "北海道の冬は寒く、雪がたくさん降ります。",
    "私の趣味は写真撮影と登山です。", "薬を飲む前に、必ず説明書を読んでください。",
    "平成から令和へと元号が変わった。", "渋谷駅の周辺は若者で賑わっている。",
    "経済産業省が新しい指針を発表した。", "今日は何曜日ですか？", "ご飯を食べてから歯を磨きます。",
]


def _export_module():
    spec = importlib.util.spec_from_file_location("export_pykakasi_dict", EXPORT_SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def unknown_kanji(kanwa, itaiji):
    """The first CJK extension A character that is neither a kanwa head nor an itaiji key:
    pykakasi drops its reading and the character after it."""
    return next(chr(c) for c in range(0x3400, 0x4DC0) if c not in kanwa and c not in itaiji)


def export_subset(texts, path):
    """Every itaiji mapping and the kanwa words that occur in `texts` (as written, after either
    `punc_norm`, lowercased + NFKD, before and after the variant mapping)."""
    mod = _export_module()
    itaiji, _ = mod.load()
    seen = []
    for t in texts:
        for v in (t, tts.punc_norm(t), mtl_tts.punc_norm(t)):
            x = unicodedata.normalize("NFKD", v.lower())
            seen += [x, x.translate(itaiji), v, v.translate(itaiji)]
    blob = "\n".join(seen)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return mod.export(path, keep=lambda word: word in blob)


def record(rec):
    pykakasi = importlib.import_module("pykakasi")  # pykakasi 2.3.0, from parity/requirements.txt
    with Pykakasi(pykakasi):
        _record(rec, pykakasi)


def _record(rec, pykakasi):
    c = COMPONENT
    rows = load_corpus()
    ja = [(i, r["text"]) for i, r in enumerate(rows) if r["lang"] == "ja"]
    ja_texts = [t for _, t in ja]
    assets = os.path.join(rec.out, c, "assets")
    note = f"the {len(ja)} Japanese lines of parity/corpus/text.jsonl; pykakasi 2.3.0 installed"

    itaiji, kanwa = _export_module().load()
    quirks = QUIRKS + [unknown_kanji(kanwa, itaiji) + "xy"]

    # ---- assets
    dict_path = os.path.join(assets, "kakasi_dict.tsv")
    n_readings = export_subset(ja_texts + quirks, dict_path)

    mtl_dir = os.path.join(assets, "mtl")
    mtl_path = os.path.join(mtl_dir, "grapheme_mtl_merged_expanded_v1.json")
    mtl_added = [f"[{l}]" for l in LANGS] + [f"[cj_{ch}]" for ch in CJ_CHARS]
    train_grapheme(["x"], 10, mtl_added, mtl_path)  # bootstrap vocabulary to run the preprocessing
    boot = make_mtl(mtl_path, cangjie=False)
    strip = set(mtl_added) | {"[SPACE]"}
    train = []
    for k, t in enumerate(ja_texts):
        if k % 5 == 0:
            continue  # held out: their rare graphemes become [UNK]
        s = prepared(boot, mtl_tts.punc_norm(t), "ja")
        for tok in strip:
            s = s.replace(tok, " ")
        train.append(s)
    train_grapheme(train, 400, mtl_added, mtl_path)
    mtl = make_mtl(mtl_path, cangjie=False)
    cfg = {"tokenizer": "assets/mtl/grapheme_mtl_merged_expanded_v1.json",
           "kakasi": "assets/kakasi_dict.tsv"}

    # ---- pykakasi's segments
    if rec.want(c, "convert", "convert"):
        k = pykakasi.kakasi()
        inputs = ja_texts + [mtl_tts.punc_norm(t) for t in ja_texts]
        inputs += [mtl.preprocess_text(mtl_tts.punc_norm(t)) for t in ja_texts] + quirks
        segs = [k.convert(t) for t in inputs]
        o, ol = pack_strings([s["orig"] for ss in segs for s in ss])
        h, hl = pack_strings([s["hira"] for ss in segs for s in ss])
        n = np.array([len(ss) for ss in segs], dtype=np.int64)
        rec.case(c, "convert", "convert", text_inputs(inputs),
                 {"orig": o, "orig_len": ol, "hira": h, "hira_len": hl, "segments": n},
                 {"orig": STRING_TOL, "orig_len": STRING_TOL, "hira": STRING_TOL,
                  "hira_len": STRING_TOL, "segments": IDS_TOL},
                 config={"kakasi": cfg["kakasi"]},
                 notes=note + f" ({n_readings} readings exported): as written, after "
                             "mtl_tts.punc_norm, after preprocess_text, then pykakasi's quirks")

    # ---- the reference's Japanese path with pykakasi
    if rec.want(c, "mtl_prepare_ja", "mtl_prepare"):
        with_k = [prepared(mtl, t, "ja") for t in ja_texts]
        with NoKakasi():
            without = [prepared(mtl, t, "ja") for t in ja_texts]
        dependent = [i for (i, _), a, b in zip(ja, with_k, without) if a != b]
        assert dependent, "pykakasi changes no line: the cases would not exercise it"
        p, pl = pack_strings(with_k)
        rec.case(c, "mtl_prepare_ja", "mtl_prepare", text_inputs(ja_texts, ["ja"] * len(ja)),
                 {"text": p, "text_len": pl}, {"text": STRING_TOL, "text_len": STRING_TOL},
                 config={**cfg, "kakasi_dependent_corpus_lines": dependent},
                 notes=note + "; kakasi_dependent_corpus_lines are the corpus lines (0-based) whose "
                              "result differs with pykakasi unimportable")

    if rec.want(c, "mtl_ids_ja", "mtl_ids"):
        inputs = [mtl_tts.punc_norm(t) for t in ja_texts]
        ids = [mtl.encode(t, language_id="ja") for t in inputs]
        dec = [mtl.decode(i) for i in ids]
        i_, il = pack_ids(ids)
        d, dl = pack_strings(dec)
        rec.case(c, "mtl_ids_ja", "mtl_ids", text_inputs(inputs, ["ja"] * len(inputs)),
                 {"ids": i_, "ids_len": il, "decoded": d, "decoded_len": dl},
                 {"ids": IDS_TOL, "ids_len": IDS_TOL, "decoded": STRING_TOL, "decoded_len": STRING_TOL},
                 config=cfg, notes=note)

    if rec.full and rec.want(c, "mtl_prepare_ja_full_dict", "mtl_prepare"):
        full_path = os.path.join(rec.out, c, "assets_full", "kakasi_dict.tsv")
        os.makedirs(os.path.dirname(full_path), exist_ok=True)
        _export_module().export(full_path)
        ja_more = [mtl_tts.punc_norm(t) for t in ja_texts + JA_MORE]
        p, pl = pack_strings([prepared(mtl, t, "ja") for t in ja_more])
        rec.case(c, "mtl_prepare_ja_full_dict", "mtl_prepare",
                 text_inputs(ja_more, ["ja"] * len(ja_more)),
                 {"text": p, "text_len": pl}, {"text": STRING_TOL, "text_len": STRING_TOL},
                 config={**cfg, "kakasi": "assets_full/kakasi_dict.tsv"},
                 notes="pykakasi's whole dictionary; --full only")
