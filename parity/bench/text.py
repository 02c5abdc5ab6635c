"""Reference timings of the text stages `crates/chatterbox-text/benches/text.rs` measures, on the
same corpus lines and tokenizer files, as JSON lines. Run by `cargo xtask bench text` (parity/.venv).

Each stage runs what `generate` runs before T3: the module's `punc_norm`, then EnTokenizer,
MTLTokenizer (pykakasi unimportable, as chatterbox-text runs without a kanji reader; pkuseg absent)
or transformers' AutoTokenizer (Turbo).
"""
import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from transformers import AutoTokenizer  # noqa: E402

from chatterbox import mtl_tts, tts, tts_turbo  # noqa: E402
from chatterbox.models.tokenizers import EnTokenizer  # noqa: E402
from harness import bench_args, time_it, write_record  # noqa: E402
from recorders.text import NoKakasi, load_corpus, make_mtl  # noqa: E402

ASSETS = os.path.join(os.path.dirname(HERE), "fixtures", "text", "assets")



def main():
    a = bench_args()
    logging.disable(logging.WARNING)
    rows = load_corpus()
    shape = f"corpus, {len(rows)} lines"
    en = EnTokenizer(os.path.join(ASSETS, "en", "tokenizer.json"))
    mtl = make_mtl(os.path.join(ASSETS, "mtl", "grapheme_mtl_merged_expanded_v1.json"))
    turbo = AutoTokenizer.from_pretrained(os.path.join(ASSETS, "turbo"))
    turbo.pad_token = turbo.pad_token or turbo.eos_token

    def norm():
        for r in rows:
            for f in (tts.punc_norm, mtl_tts.punc_norm, tts_turbo.punc_norm):
                f(r["text"])

    def en_ids():
        for r in rows:
            en.text_to_tokens(tts.punc_norm(r["text"]))

    def mtl_ids():
        for r in rows:
            mtl.text_to_tokens(mtl_tts.punc_norm(r["text"]), language_id=r["lang"])

    def turbo_ids():
        for r in rows:
            turbo(tts_turbo.punc_norm(r["text"]), return_tensors="pt", padding=True, truncation=True)

    stages = [("punc_norm_3_variants", norm), ("en_text_tokens", en_ids),
              ("mtl_text_tokens", mtl_ids), ("turbo_text_tokens", turbo_ids)]
    with open(a.out, "a") as out, NoKakasi():
        for stage, f in stages:
            timing = time_it(f, warmup=2, min_iters=10, min_secs=1.0)
            write_record(out, "text", stage, "cpu", a.threads, shape, timing, 24)


if __name__ == "__main__":
    main()
