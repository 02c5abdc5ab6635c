//! Japanese preprocessing of the multilingual tokenizer: `hiragana_normalize` of
//! chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54) over a [`KanjiReader`] hook.
mod hiragana;
mod kanji_reader;

pub use hiragana::hiragana_normalize;
pub use kanji_reader::{KanjiReader, Segment};
