//! Chinese preprocessing: word segmentation hook and Cangjie codes.
mod cangjie;
mod segmenter;

pub use cangjie::{CangjieTable, ChineseCangjieConverter, CANGJIE_FILE};
pub use segmenter::ChineseSegmenter;
