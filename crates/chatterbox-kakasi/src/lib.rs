#![doc = include_str!("../README.md")]
// SPDX-License-Identifier: GPL-3.0-or-later

mod dict;
mod error;
mod kakasi;
mod kanji;
mod scripts;

pub use chatterbox_text::{KanjiReader, Segment};
pub use dict::KakasiDict;
pub use error::{KakasiError, Result};
pub use kakasi::Kakasi;
