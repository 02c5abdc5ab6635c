//! How the backbone's projection weights are stored: the checkpoint's own precision (exact), or
//! fewer bytes per weight for a faster CPU decode (a decode step reads every weight once, so
//! its time follows the bytes read).
use crate::{Result, T3Error};
use candle_core::quantized::GgmlDType;
use std::fmt;
use std::str::FromStr;

/// The storage of T3's backbone projections (attention q/k/v/output and the MLP's), chosen at
/// load with [`T3::quantize`](crate::T3::quantize). Embeddings, norms, biases, the
/// conditioning encoder and the speech head keep the model's dtype.
///
/// The 8- and 4-bit formats are GGUF's block formats as candle implements them; on x86 CPUs
/// candle picks its kernels at run time (repacked AVX-512 VNNI, AVX-VNNI or AVX2 tiles where the
/// shapes allow, its generic vector dot products elsewhere), so one binary runs on every x86-64
/// CPU with AVX2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WeightFormat {
    /// The checkpoint's weights in the model's dtype, unchanged (the exact path).
    #[default]
    F32,
    /// bfloat16 weights (2 bytes each); on the CPU the activations are rounded to bf16 for the
    /// product and the sums are f32 (candle's bf16 dot product).
    Bf16,
    /// 8-bit weights in blocks of 32 with an f16 scale each (GGUF `Q8_0`, 8.5 bits a weight);
    /// on the CPU the activations are quantized to 8 bits per block of 256 for the product.
    Q8,
    /// 4-bit weights in super-blocks of 256 with 6-bit scales and minima per block of 32
    /// (GGUF `Q4_K`, 4.5 bits a weight); activations as for [`WeightFormat::Q8`].
    Q4,
}

impl WeightFormat {
    /// Every format, in the order of the command-line choices.
    pub const ALL: [WeightFormat; 4] = [Self::Q8, Self::Q4, Self::Bf16, Self::F32];

    /// The name on the command line and in reports (`q8`, `q4`, `bf16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Q8 => "q8",
            Self::Q4 => "q4",
        }
    }

    /// Whether the weights stay as loaded (no quantization).
    pub fn is_exact(self) -> bool {
        self == Self::F32
    }

    /// candle's block type, `None` for [`WeightFormat::F32`].
    pub fn ggml_dtype(self) -> Option<GgmlDType> {
        match self {
            Self::F32 => None,
            Self::Bf16 => Some(GgmlDType::BF16),
            Self::Q8 => Some(GgmlDType::Q8_0),
            Self::Q4 => Some(GgmlDType::Q4K),
        }
    }

    /// Input widths must be a multiple of this for a projection to take the format (a block);
    /// narrower or odd-sized projections keep the model's dtype.
    pub fn block_size(self) -> usize {
        self.ggml_dtype().map_or(1, |d| d.block_size())
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WeightFormat {
    type Err = T3Error;

    /// `q8`, `q4`, `bf16` or `f32`, in any case (`q8_0` and `q4_k`, GGUF's names, too).
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "exact" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "q8" | "q8_0" | "int8" => Ok(Self::Q8),
            "q4" | "q4_k" | "q4k" => Ok(Self::Q4),
            _ => Err(T3Error::InvalidInput {
                what: "weight format",
                reason: format!("{s:?}; expected q8, q4, bf16 or f32"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_are_errors() -> Result<()> {
        for f in WeightFormat::ALL {
            assert_eq!(f.name().parse::<WeightFormat>()?, f);
            assert_eq!(f.to_string().to_uppercase().parse::<WeightFormat>()?, f);
        }
        assert_eq!("Q4_K".parse::<WeightFormat>()?, WeightFormat::Q4);
        assert_eq!("q8_0".parse::<WeightFormat>()?, WeightFormat::Q8);
        assert!("q2".parse::<WeightFormat>().is_err());
        assert!("".parse::<WeightFormat>().is_err());
        assert_eq!(WeightFormat::default(), WeightFormat::F32);
        assert!(WeightFormat::F32.is_exact() && !WeightFormat::Q8.is_exact());
        Ok(())
    }

    #[test]
    fn block_sizes_are_ggufs() {
        assert_eq!(WeightFormat::F32.block_size(), 1);
        assert_eq!(WeightFormat::Bf16.block_size(), 1);
        assert_eq!(WeightFormat::Q8.block_size(), 32);
        assert_eq!(WeightFormat::Q4.block_size(), 256);
    }
}
