//! Port of chatterbox/models/s3gen/f0_predictor.py (upstream 5de7a54).
use crate::config::F0PredictorConfig;
use crate::conv::{Act, Conv1d, ConvCfg, Norm};
use crate::weights::get;
use crate::Result;
use candle_core::{Module, Tensor};
use candle_nn::{Init, VarBuilder};

/// Five weight-normed `Conv1d(k=3, padding=1)` + ELU layers and a linear classifier: the
/// absolute value of its output is the F0 in Hz of each mel frame.
#[derive(Debug, Clone)]
pub struct ConvRNNF0Predictor {
    condnet: Vec<Conv1d>,
    classifier_weight: Tensor,
    classifier_bias: Tensor,
}

impl ConvRNNF0Predictor {
    /// Loads `condnet.{0,2,4,6,8}` and `classifier` (the ELUs sit at the odd indices).
    pub fn new(cfg: &F0PredictorConfig, vb: VarBuilder) -> Result<Self> {
        let mut condnet = Vec::with_capacity(5);
        for i in 0..5 {
            let c_in = if i == 0 {
                cfg.in_channels
            } else {
                cfg.cond_channels
            };
            // Strict FP32 on every device: the F0 is integrated into the sine source's phase,
            // which turns a small error into a large one over a long clip.
            condnet.push(
                Conv1d::new(
                    vb.pp("condnet").pp(2 * i),
                    c_in,
                    cfg.cond_channels,
                    3,
                    ConvCfg::same(3, 1),
                    Norm::Weight,
                )?
                .strict_fp32(),
            );
        }
        let vc = vb.pp("classifier");
        let bound = 1.0 / (cfg.cond_channels as f64).sqrt();
        let init = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let classifier_weight = get(&vc, (cfg.num_class, cfg.cond_channels), "weight", init)?;
        let classifier_bias = get(&vc, cfg.num_class, "bias", init)?;
        Ok(Self {
            condnet,
            classifier_weight,
            classifier_bias,
        })
    }
}

impl ConvRNNF0Predictor {
    pub(crate) fn forward_with(&self, x: &Tensor, fast: bool) -> candle_core::Result<Tensor> {
        let mut x = x.clone();
        for conv in &self.condnet {
            x = conv.forward_with(&x, Act::Identity, None, fast)?.elu(1.0)?;
        }
        // classifier over channels: (1, C) @ (B, C, T) -> (B, 1, T)
        let y = self
            .classifier_weight
            .broadcast_matmul(&x)?
            .broadcast_add(&self.classifier_bias.reshape((1, (), 1))?)?;
        y.squeeze(1)?.abs()
    }
}

impl Module for ConvRNNF0Predictor {
    /// `(B, in_channels, T)` mel to `(B, T)` F0 in Hz.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with(x, true)
    }
}
