//! Checks that need no model weights, run before the (gigabytes of) loading: option values
//! against the model's limits, the checkpoint files, the voice clip and the text, each named
//! in the user's terms (the option, the file).
use crate::args::Model;
use crate::source::Source;
use anyhow::{bail, Context, Result};
use chatterbox_pipeline::{
    Audio, ChatterboxConfig, CheckpointFiles, GenerateOptions, MultilingualT3, Variant, CONDS_FILE,
    MIN_REF_SECS, TURBO_MIN_REF_SECS,
};
use std::path::Path;

/// The documented range of `--exaggeration`.
pub const EXAGGERATION_RANGE: std::ops::RangeInclusive<f32> = 0.0..=2.0;

/// A voice clip whose peak is below this (-60 dBFS) holds no speech to clone.
pub const SILENT_PEAK: f32 = 1e-3;

/// The hyper-parameters the model will be loaded with: `--config`, else the directory's
/// `chatterbox_config.json`, else the released model's.
pub fn effective_config(
    variant: Variant,
    src: &Source,
    given: Option<&ChatterboxConfig>,
) -> Result<ChatterboxConfig> {
    if let Some(c) = given {
        return Ok(c.clone());
    }
    let released = match variant {
        Variant::English => ChatterboxConfig::english(),
        Variant::Multilingual => ChatterboxConfig::multilingual(),
        Variant::Turbo => ChatterboxConfig::turbo(),
        Variant::Nano => ChatterboxConfig::nano(),
    };
    match src {
        Source::Dir(d) => Ok(ChatterboxConfig::from_dir_or(d, released)?),
        Source::Hub(_) => Ok(released),
    }
}

/// `--max-new-tokens` and `--exaggeration` against the model's limits and documented ranges.
pub fn check_options(model: Model, opts: &GenerateOptions, cfg: &ChatterboxConfig) -> Result<()> {
    let limit = cfg.t3.max_new_tokens_limit();
    if opts.max_new_tokens > limit {
        bail!(
            "--max-new-tokens {}: this model generates at most {limit} speech tokens per text \
             chunk (its position table; 25 tokens are 1 s of audio)",
            opts.max_new_tokens
        );
    }
    let uses_exaggeration = matches!(model, Model::English | Model::Multilingual);
    if uses_exaggeration && !EXAGGERATION_RANGE.contains(&opts.exaggeration) {
        bail!(
            "--exaggeration {}: expected {} (flat) to {} (dramatic)",
            opts.exaggeration,
            EXAGGERATION_RANGE.start(),
            EXAGGERATION_RANGE.end()
        );
    }
    Ok(())
}

/// The text against the chunking options: something to speak, and `--chunk-chars 0` (one
/// piece) only when the model can read it at once.
pub fn check_text(text: &str, opts: &GenerateOptions, cfg: &ChatterboxConfig) -> Result<()> {
    if !text.chars().any(char::is_alphanumeric) {
        bail!(
            "the text has no letters or digits to speak (only punctuation, symbols or emoji): \
             {:?}",
            shorten(text, 40)
        );
    }
    // English and multilingual read about one text token per character, into a learned
    // position table: a longer text cannot be spoken in one piece. (Turbo's GPT-2 tokens hold
    // several characters; its limit is checked when the text is tokenized.)
    let chars = text.chars().count();
    let max = cfg.t3.max_text_tokens;
    if opts.max_chunk_chars == 0 && cfg.t3.has_learned_pos_emb() && chars > max {
        bail!(
            "--chunk-chars 0 speaks the text in one piece, but it has {chars} characters and \
             this model reads at most {max} text tokens (about one per character) at once: \
             leave --chunk-chars out (250) or give a value up to {max}"
        );
    }
    Ok(())
}

fn shorten(text: &str, n: usize) -> String {
    let mut s: String = text.chars().take(n).collect();
    if text.chars().count() > n {
        s.push('…');
    }
    s
}

/// The checkpoint directory's files: each required one present and readable, the built-in
/// voice when no other voice is given.
pub fn check_checkpoint(
    variant: Variant,
    mtl: &MultilingualT3,
    src: &Source,
    needs_builtin_voice: bool,
) -> Result<()> {
    let Source::Dir(dir) = src else {
        return Ok(());
    };
    let files = CheckpointFiles::of(variant, mtl);
    // Turbo's tokenizer is `tokenizer.json` or, failing that, `vocab.json` + `merges.txt`.
    let tokenizer = match files.tokenizer {
        "vocab.json" if dir.join("tokenizer.json").is_file() => "tokenizer.json",
        other => other,
    };
    let needed_by = format!("the {} model", variant.name());
    // T3: the quantized file when the folder has one (`chatterbox quantize`)
    let t3 = files.t3_in(dir);
    for name in [files.ve, t3.as_str(), files.s3gen, tokenizer] {
        readable(dir, name, &needed_by)?;
    }
    if needs_builtin_voice {
        if !dir.join(CONDS_FILE).is_file() {
            bail!(
                "no voice: {} has no built-in voice ({CONDS_FILE}); pass --voice AUDIO (a 5-10 s \
                 clip of the voice to clone) or --voice-file FILE",
                dir.display()
            );
        }
        readable(dir, CONDS_FILE, &needed_by)?;
    }
    Ok(())
}

/// `chatterbox vc`'s checkpoint files: `s3gen.safetensors`, and the built-in voice
/// (`conds.pt`) when no `--target` is given.
pub fn check_vc_checkpoint(src: &Source, needs_builtin_voice: bool) -> Result<()> {
    let Source::Dir(dir) = src else {
        return Ok(());
    };
    readable(dir, VC_WEIGHTS, "voice conversion")?;
    if needs_builtin_voice {
        if !dir.join(CONDS_FILE).is_file() {
            bail!(
                "no target voice: {} has no built-in voice ({CONDS_FILE}); pass --target AUDIO \
                 (a 5-10 s clip of the voice to convert to)",
                dir.display()
            );
        }
        readable(dir, CONDS_FILE, "voice conversion")?;
    }
    Ok(())
}

/// Opens `dir/name` and reads a byte: missing, unreadable and empty files are named now.
/// `needed_by`: what needs it ("the english model", "voice conversion").
fn readable(dir: &Path, name: &str, needed_by: &str) -> Result<()> {
    use std::io::Read;
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "--model-dir {}: {name} is missing ({needed_by} needs it; see docs/setup.md for \
             the files of each model)",
            dir.display()
        );
    }
    let mut byte = [0u8; 1];
    let n = std::fs::File::open(&path)
        .and_then(|mut f| f.read(&mut byte))
        .with_context(|| format!("--model-dir {}: cannot read {name}", dir.display()))?;
    if n == 0 {
        bail!("--model-dir {}: {name} is empty", dir.display());
    }
    Ok(())
}

/// A voice clip: long enough for the model and not silent.
pub fn check_voice_clip(path: &Path, audio: &Audio, variant: Variant) -> Result<()> {
    let (min, exclusive) = match variant {
        Variant::Turbo | Variant::Nano => (TURBO_MIN_REF_SECS, true),
        _ => (MIN_REF_SECS, false),
    };
    let clip = Clip {
        what: "the voice clip",
        needed_by: format!("the {} model", variant.name()),
        min_secs: min,
        exclusive,
        best: " (5-10 s is best)",
        silent: "it holds no speech to clone; use a recording of someone speaking",
    };
    check_clip(path, audio, &clip, audio.samples.len())
}

/// The file that `ChatterboxVc` reads its weights from.
pub const VC_WEIGHTS: &str = "s3gen.safetensors";

/// The shortest voice-conversion source: one 40 ms speech token (`ChatterboxVc` makes no token
/// of less than 10 ms, and a token or less holds no word).
pub const MIN_SOURCE_SECS: f64 = 0.04;

/// Seconds of the target clip that `ChatterboxVc::set_target_voice` uses (its first 10 s).
const TARGET_SECS: f64 = 10.0;

/// `chatterbox vc`'s source recording: at least one speech token long, and not silent (an
/// all-silent source converts to silence).
pub fn check_vc_source(path: &Path, audio: &Audio) -> Result<()> {
    let clip = Clip {
        what: "the source recording",
        needed_by: "voice conversion".into(),
        min_secs: MIN_SOURCE_SECS,
        exclusive: false,
        best: " (one 40 ms speech token)",
        silent: "it holds no speech to convert; use a recording of someone speaking",
    };
    check_clip(path, audio, &clip, audio.samples.len())
}

/// `chatterbox vc --target`: as long as `ChatterboxVc` requires (`MIN_REF_SECS`), and its
/// first 10 s (all that is used) not silent.
pub fn check_vc_target(path: &Path, audio: &Audio) -> Result<()> {
    let clip = Clip {
        what: "the target voice clip",
        needed_by: "voice conversion".into(),
        min_secs: MIN_REF_SECS,
        exclusive: false,
        best: " (5-10 s is best)",
        silent: "its first 10 s (all that is used) hold no voice to convert to; use a \
                 recording of someone speaking",
    };
    let used = (TARGET_SECS * f64::from(audio.sample_rate)) as usize;
    check_clip(path, audio, &clip, used)
}

/// `--window-ms` and `--overlap-ms` as `ChatterboxVc` validates them (`window_ms = 0`: one
/// pass, the overlap unused), so a bad pair is refused before loading.
pub fn check_vc_window(window_ms: u32, overlap_ms: u32) -> Result<()> {
    if window_ms == 0 {
        return Ok(());
    }
    if overlap_ms < MIN_OVERLAP_MS || overlap_ms.saturating_mul(2) > window_ms {
        bail!(
            "--overlap-ms {overlap_ms} with --window-ms {window_ms}: expected an overlap of at \
             least {MIN_OVERLAP_MS} ms and at most half the window (--window-ms 0 never splits)"
        );
    }
    Ok(())
}

/// `ChatterboxVc`'s shortest overlap of windows (four 40 ms tokens: the join needs a token of
/// margin on each side of its crossfade); not exported by the library, mirrored here.
pub const MIN_OVERLAP_MS: u32 = 160;

/// What a clip check says and requires.
struct Clip {
    /// "the voice clip".
    what: &'static str,
    /// "the english model".
    needed_by: String,
    min_secs: f64,
    /// Whether exactly `min_secs` is too short.
    exclusive: bool,
    /// Advice after the minimum.
    best: &'static str,
    /// Why a silent clip is refused.
    silent: &'static str,
}

/// `audio` (read from `path`) long enough, and its first `used` samples not near-silent.
fn check_clip(path: &Path, audio: &Audio, c: &Clip, used: usize) -> Result<()> {
    let secs = audio.duration_secs();
    let min = c.min_secs;
    if secs < min || (c.exclusive && secs <= min) {
        // shorter than a tenth of a second: show the milliseconds
        let len = if secs < 0.1 {
            format!("{:.0} ms", secs * 1000.0)
        } else {
            format!("{secs:.1} s")
        };
        bail!(
            "{} {} is {len} long: {} needs {} {min} s of speech{}",
            c.what,
            path.display(),
            c.needed_by,
            if c.exclusive { "more than" } else { "at least" },
            c.best,
        );
    }
    let n = used.min(audio.samples.len());
    let peak = audio.samples[..n].iter().fold(0f32, |m, v| m.max(v.abs()));
    if peak < SILENT_PEAK {
        let db = if peak > 0.0 {
            format!("{:.0} dBFS", 20.0 * peak.log10())
        } else {
            "digital silence".into()
        };
        bail!(
            "{} {} is silent or nearly so (peak {db}): {}",
            c.what,
            path.display(),
            c.silent
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text (`{:#}`, with its causes) of the error `r` must be; an error when it is `Ok`.
    fn refusal<T>(r: Result<T>) -> Result<String> {
        Ok(format!("{:#}", r.err().context("ok")?))
    }

    #[test]
    fn options_are_checked_against_the_models_limits() -> Result<()> {
        let cfg = ChatterboxConfig::english();
        let mut o = GenerateOptions::english();
        check_options(Model::English, &o, &cfg)?;
        o.max_new_tokens = 1_000_000_000;
        let e = refusal(check_options(Model::English, &o, &cfg))?;
        assert!(
            e.contains("--max-new-tokens 1000000000") && e.contains("4100"),
            "{e}"
        );
        o.max_new_tokens = 1000;
        o.exaggeration = 3.0;
        let e = refusal(check_options(Model::English, &o, &cfg))?;
        assert!(
            e.contains("--exaggeration 3") && e.contains("0 (flat) to 2"),
            "{e}"
        );
        // Turbo ignores exaggeration; its limit is GPT-2's positions.
        let turbo = ChatterboxConfig::turbo();
        check_options(Model::Turbo, &o, &turbo)?;
        o.max_new_tokens = turbo.t3.max_new_tokens_limit() + 1;
        assert!(check_options(Model::Turbo, &o, &turbo).is_err());
        Ok(())
    }

    #[test]
    fn unspeakable_text_and_unchunked_long_text_are_refused() -> Result<()> {
        let cfg = ChatterboxConfig::english();
        let mut o = GenerateOptions::english();
        for bad in ["...!?", "😀🎉", " — "] {
            let e = format!("{:#}", check_text(bad, &o, &cfg).err().context(bad)?);
            assert!(e.contains("no letters or digits"), "{e}");
        }
        check_text("42", &o, &cfg)?;
        check_text("你好", &o, &cfg)?;
        let long = "a".repeat(3000);
        check_text(&long, &o, &cfg)?;
        o.max_chunk_chars = 0;
        let e = refusal(check_text(&long, &o, &cfg))?;
        assert!(
            e.contains("--chunk-chars 0") && e.contains("3000 characters"),
            "{e}"
        );
        check_text(&"a".repeat(2048), &o, &cfg)?;
        Ok(())
    }

    #[test]
    fn short_and_silent_clips_are_refused() -> Result<()> {
        let p = Path::new("me.wav");
        let tone = |secs: f32, amp: f32| {
            let n = (secs * 16_000.0) as usize;
            Audio::new(
                (0..n).map(|i| amp * (i as f32 * 0.1).sin()).collect(),
                16_000,
            )
        };
        check_voice_clip(p, &tone(3.0, 0.3), Variant::English)?;
        let e = refusal(check_voice_clip(p, &tone(3.0, 0.3), Variant::Turbo))?;
        assert!(e.contains("more than 5 s"), "{e}");
        check_voice_clip(p, &tone(6.0, 0.3), Variant::Nano)?;
        assert!(check_voice_clip(p, &tone(0.2, 0.3), Variant::English).is_err());
        // Dither-level noise (peak 3e-5): refused, with its level.
        let e = refusal(check_voice_clip(p, &tone(3.0, 3e-5), Variant::English))?;
        assert!(e.contains("nearly so (peak -90 dBFS)"), "{e}");
        let e = refusal(check_voice_clip(p, &tone(3.0, 0.0), Variant::English))?;
        assert!(e.contains("digital silence"), "{e}");
        Ok(())
    }

    #[test]
    fn checkpoint_files_are_checked_before_loading() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let src = Source::Dir(dir.path().to_path_buf());
        let mtl = MultilingualT3::V2;
        let e = refusal(check_checkpoint(Variant::English, &mtl, &src, false))?;
        assert!(
            e.contains("ve.safetensors is missing") && e.contains("english"),
            "{e}"
        );
        for f in ["ve.safetensors", "t3_cfg.safetensors", "s3gen.safetensors"] {
            std::fs::write(dir.path().join(f), b"x")?;
        }
        std::fs::write(dir.path().join("tokenizer.json"), b"")?;
        let e = refusal(check_checkpoint(Variant::English, &mtl, &src, false))?;
        assert!(e.contains("tokenizer.json is empty"), "{e}");
        std::fs::write(dir.path().join("tokenizer.json"), b"{}")?;
        check_checkpoint(Variant::English, &mtl, &src, false)?;
        let e = refusal(check_checkpoint(Variant::English, &mtl, &src, true))?;
        assert!(e.contains("no built-in voice (conds.pt)"), "{e}");
        Ok(())
    }

    #[test]
    fn vc_windows_are_checked_as_the_library_does() -> Result<()> {
        // the library's rule (vc_chunks::window_tokens): 0 never splits; else an overlap of
        // at least 160 ms and at most half the window
        for (w, o) in [
            (0, 0),
            (0, 99_999),
            (20_000, 2_000),
            (320, 160),
            (4_000, 2_000),
        ] {
            check_vc_window(w, o)?;
        }
        for (w, o) in [
            (4_000, 100),
            (4_000, 2_001),
            (100, 50),
            (1, 160),
            (u32::MAX, 0),
        ] {
            let e = format!("{:#}", check_vc_window(w, o).err().context("ok")?);
            assert!(
                e.contains(&format!("--overlap-ms {o} with --window-ms {w}")),
                "{e}"
            );
        }
        // the flags' defaults are the library's
        use clap::Parser;
        let cli = crate::args::Cli::try_parse_from(["chatterbox", "vc", "in.wav"])?;
        let crate::args::Command::Vc(a) = cli.command else {
            bail!("not vc");
        };
        let d = chatterbox_pipeline::VcOptions::default();
        assert_eq!((a.window_ms, a.overlap_ms), (d.window_ms, d.overlap_ms));
        Ok(())
    }

    #[test]
    fn vc_sources_and_targets_are_checked() -> Result<()> {
        let p = Path::new("in.wav");
        let tone = |secs: f64, amp: f32, sr: u32| {
            let n = (secs * f64::from(sr)) as usize;
            Audio::new((0..n).map(|i| amp * (i as f32 * 0.1).sin()).collect(), sr)
        };
        check_vc_source(p, &tone(0.05, 0.3, 16_000))?;
        let e = refusal(check_vc_source(p, &tone(0.02, 0.3, 16_000)))?;
        assert!(
            e.contains("in.wav is 20 ms long") && e.contains("0.04 s"),
            "{e}"
        );
        let e = refusal(check_vc_source(p, &tone(2.0, 0.0, 16_000)))?;
        assert!(e.contains("source recording in.wav is silent"), "{e}");
        check_vc_target(p, &tone(0.5, 0.3, 24_000))?;
        let e = refusal(check_vc_target(p, &tone(0.4, 0.3, 24_000)))?;
        assert!(e.contains("at least 0.5 s"), "{e}");
        // only the first 10 s are used: speech after them does not make a silent start usable
        let mut late = tone(12.0, 3e-5, 24_000);
        late.samples[11 * 24_000] = 0.5;
        let e = format!("{:#}", check_vc_target(p, &late).err().context("ok")?);
        assert!(e.contains("first 10 s") && e.contains("-90 dBFS"), "{e}");
        Ok(())
    }
}
