//! Port of perth/perth_net/perth_net_implicit/model/perth_net.py (resemble-perth 1.0.1):
//! `PerthNet`, the encoder, the decoder and the audio processor of one configuration. Training
//! only parts (`forward`'s attacks) are not ported.
use crate::{AudioProcessor, Decoder, Encoder, PerthConfig, Result};
use candle_core::Device;
use candle_nn::VarBuilder;

/// `PerthNet(hp)`: `encoder.*` and `decoder.*` weights; the `ap.*` buffers of the torch state
/// dict (the STFT windows, `TimeStretch`'s phase advance) are recomputed, not read.
#[derive(Debug, Clone)]
pub struct PerthNet {
    cfg: PerthConfig,
    encoder: Encoder,
    decoder: Decoder,
    ap: AudioProcessor,
    device: Device,
}

impl PerthNet {
    /// Builds the network of `cfg` from `vb` (the state dict's root: keys `encoder.layers.0.
    /// conv.weight`, ...). Device and dtype come from `vb`; the network computes in f32.
    pub fn new(cfg: &PerthConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let subband = cfg.subband();
        let encoder = Encoder::new(cfg.hidden_size, subband, vb.pp("encoder"))?;
        let decoder = Decoder::new(cfg.hidden_size, subband, vb.pp("decoder"))?;
        Ok(Self {
            cfg: cfg.clone(),
            encoder,
            decoder,
            ap: AudioProcessor::new(cfg)?,
            device: vb.device().clone(),
        })
    }

    /// Every weight the network reads and its shape (torch's `(out, in, kernel)` layout).
    pub fn weight_shapes(cfg: &PerthConfig) -> Vec<(String, Vec<usize>)> {
        let (h, sub) = (cfg.hidden_size, cfg.subband());
        let mut out = Vec::with_capacity(56);
        for (prefix, output) in [
            ("encoder.layers", sub),
            ("decoder.slow_layers", 2),
            ("decoder.normal_layers", 2),
            ("decoder.fast_layers", 2),
        ] {
            for i in 0..7 {
                let (cin, cout, k) = match i {
                    0 => (sub, h, 1),
                    6 => (h, output, 1),
                    _ => (h, h, 7),
                };
                out.push((format!("{prefix}.{i}.conv.weight"), vec![cout, cin, k]));
                out.push((format!("{prefix}.{i}.conv.bias"), vec![cout]));
            }
        }
        out
    }

    /// The configuration.
    pub fn config(&self) -> &PerthConfig {
        &self.cfg
    }

    /// The watermark encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// The watermark decoder.
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// The STFT magnitude/phase processing (`ap`).
    pub fn audio_processor(&self) -> &AudioProcessor {
        &self.ap
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}
