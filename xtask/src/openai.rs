//! `cargo xtask openai-client`: the official `openai` Python package (in its own venv,
//! `target/openai-venv`) against `chatterbox serve` on the tiny English checkpoint of the
//! committed fixtures, on 127.0.0.1 and an ephemeral port: `xtask/openai_client.py` checks
//! whole files, streams, SSE (timestamps included), `speed`, a library voice and the errors the
//! client raises.
use crate::pyenv::{pinned_venv, run_cmd, target_dir};
use anyhow::{bail, ensure, Context, Result};
use serde_json::{Map, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `openai` release installed (pinned: the script is checked against it).
const OPENAI_VERSION: &str = "3.57.0";

/// Speech tokens per request: the tiny model's tokens are random; this bounds each request.
const MAX_NEW_TOKENS: &str = "30";

#[derive(clap::Args)]
pub struct OpenaiClientArgs {
    /// The `chatterbox` binary to serve with (default: built now with
    /// `cargo build --bin chatterbox`).
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// The `openai` package version to install into target/openai-venv.
    #[arg(long, default_value = OPENAI_VERSION)]
    openai_version: String,
}

/// `target/openai-venv` with `openai==version`.
fn venv(version: &str) -> Result<PathBuf> {
    let openai = format!("openai=={version}");
    let needs = "the openai client check";
    pinned_venv("openai-venv", &[&openai], ": a few MB", needs)
}

/// The tensors of `src` (a safetensors file) under `prefix`, prefix removed, written to `dst`.
fn split_safetensors(src: &Path, prefix: &str, dst: &Path) -> Result<()> {
    let bytes = std::fs::read(src).with_context(|| format!("cannot read {}", src.display()))?;
    let len: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .context("not a safetensors file")?;
    let header_end = usize::try_from(u64::from_le_bytes(len))?
        .checked_add(8)
        .context("bad header length")?;
    let header: Map<String, Value> = serde_json::from_slice(
        bytes
            .get(8..header_end)
            .context("header past the end of the file")?,
    )?;
    let data = &bytes[header_end..];
    let mut out_header = Map::new();
    let mut out_data = Vec::new();
    for (name, info) in &header {
        let Some(short) = name.strip_prefix(prefix) else {
            continue;
        };
        let offsets = info["data_offsets"]
            .as_array()
            .context("no data_offsets")?
            .iter()
            .map(|v| v.as_u64().and_then(|v| usize::try_from(v).ok()))
            .collect::<Option<Vec<usize>>>()
            .context("bad data_offsets")?;
        let [start, end] = offsets[..] else {
            bail!("{name}: data_offsets is not [start, end]");
        };
        let piece = data.get(start..end).context("tensor past the end")?;
        let mut info = info.clone();
        info["data_offsets"] = serde_json::json!([out_data.len(), out_data.len() + piece.len()]);
        out_data.extend_from_slice(piece);
        out_header.insert(short.to_string(), info);
    }
    ensure!(!out_header.is_empty(), "no tensor under {prefix}");
    let mut h = serde_json::to_vec(&Value::Object(out_header))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&out_data);
    std::fs::write(dst, out).with_context(|| format!("cannot write {}", dst.display()))
}

/// The tiny English checkpoint of parity/fixtures/pipeline in the hub layout, with the
/// fixture's `conds.pt` as its built-in voice.
fn tiny_checkpoint(dir: &Path) -> Result<()> {
    let fx = crate::root().join("parity/fixtures");
    std::fs::create_dir_all(dir)?;
    let weights = fx.join("pipeline/english.safetensors");
    for (prefix, file) in [
        ("t3.", "t3_cfg.safetensors"),
        ("ve.", "ve.safetensors"),
        ("s3gen.", "s3gen.safetensors"),
    ] {
        split_safetensors(&weights, prefix, &dir.join(file))?;
    }
    std::fs::copy(
        fx.join("text/assets/en/tokenizer.json"),
        dir.join("tokenizer.json"),
    )?;
    std::fs::copy(fx.join("pipeline/english_conds.pt"), dir.join("conds.pt"))?;
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(fx.join("pipeline/english.json"))?)?;
    std::fs::write(
        dir.join("chatterbox_config.json"),
        meta["config"]["chatterbox"].to_string(),
    )?;
    Ok(())
}

/// `chatterbox` built now (debug profile), or `--bin`.
fn binary(arg: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(b) = arg {
        ensure!(b.is_file(), "--bin {}: no such file", b.display());
        return Ok(b);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_cmd(
        Command::new(cargo)
            .current_dir(crate::root())
            .args(["build", "--bin", "chatterbox"]),
    )?;
    Ok(target_dir().join("debug/chatterbox"))
}

/// The server process, stopped (SIGTERM, then killed) when dropped.
struct Served {
    child: Child,
}

impl Served {
    /// SIGTERM and the exit status within `within`.
    fn terminate(&mut self, within: Duration) -> Result<ExitStatus> {
        let pid = self.child.id().to_string();
        if cfg!(unix) {
            run_cmd(Command::new("kill").args(["-TERM", &pid]))?;
        } else {
            self.child.kill()?;
        }
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(s);
            }
            if t0.elapsed() > within {
                self.child.kill()?;
                bail!("the server still ran {within:?} after SIGTERM (killed)");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn run(args: OpenaiClientArgs) -> Result<i32> {
    let python = venv(&args.openai_version)?;
    let bin = binary(args.bin)?;
    let work = target_dir().join("openai-client");
    let _ = std::fs::remove_dir_all(&work);
    let ckpt = work.join("ckpt");
    tiny_checkpoint(&ckpt)?;
    let voices = work.join("voices");
    let key = format!(
        "xtask-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default()
    );
    let mut cmd = Command::new(&bin);
    cmd.args([
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--device",
        "cpu",
    ])
    .args(["--max-new-tokens", MAX_NEW_TOKENS, "--model-dir"])
    .arg(&ckpt)
    .arg("--voices")
    .arg(&voices)
    .env("CHATTERBOX_API_KEY", &key)
    .env_remove("CHATTERBOX_MODEL_DIR")
    .env_remove("CHATTERBOX_NO_WATERMARK")
    .env_remove("RUST_LOG")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // Watermarked as users get it when the parity venv has Perth's weights; else without.
    match perth_weights() {
        Some(p) => cmd.env("CHATTERBOX_WATERMARK_WEIGHTS", p),
        None => {
            eprintln!("no Perth weights in parity/.venv: serving without the watermark");
            cmd.env("CHATTERBOX_NO_WATERMARK", "1")
        }
    };
    eprintln!("+ {cmd:?}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {bin:?}"))?;
    let pipe = child.stderr.take().context("no stderr pipe")?;
    let mut served = Served { child };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let echo = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            eprintln!("[server] {line}");
            if let Some(i) = line.find("listening on http://") {
                if let Some(url) = line[i + "listening on ".len()..].split_whitespace().next() {
                    let _ = tx.send(url.to_string());
                }
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(60))
        .context("the server printed no `listening on` line in 60 s")?;
    let script = crate::root().join("xtask/openai_client.py");
    let mut py = Command::new(&python);
    py.arg(&script)
        .args(["--base-url", &format!("{base}/v1"), "--api-key", &key])
        .env("PYTHONUNBUFFERED", "1");
    eprintln!("+ {py:?}");
    let client = py.status().context("cannot run the client script")?;
    let stopped = served.terminate(Duration::from_secs(15))?;
    let _ = echo.join();
    eprintln!("server exited with {stopped} after SIGTERM");
    ensure!(stopped.success(), "the server exited with {stopped}");
    if !client.success() {
        eprintln!("openai client check FAILED ({client})");
        return Ok(1);
    }
    eprintln!(
        "openai client check passed (openai=={})",
        args.openai_version
    );
    Ok(0)
}

/// The parity venv's copy of Perth's weights (resemble-perth is in parity/requirements.txt).
fn perth_weights() -> Option<PathBuf> {
    chatterbox_testkit::reference_venv_file(
        "perth/perth_net/pretrained/implicit/perth_net_250000.pth.tar",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_the_prefixed_tensors_contiguously() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-openai-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let header = r#"{"__metadata__":{"format":"pt"},"a.x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b.y":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},"a.z":{"dtype":"U8","shape":[3],"data_offsets":[3,6]}}"#;
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        std::fs::write(dir.join("in.safetensors"), file)?;
        split_safetensors(
            &dir.join("in.safetensors"),
            "a.",
            &dir.join("out.safetensors"),
        )?;
        let out = std::fs::read(dir.join("out.safetensors"))?;
        let n = usize::try_from(u64::from_le_bytes(out[..8].try_into()?))?;
        assert_eq!(n % 8, 0);
        let h: Value = serde_json::from_slice(&out[8..8 + n])?;
        assert_eq!(h["x"]["data_offsets"], serde_json::json!([0, 2]));
        assert_eq!(h["z"]["data_offsets"], serde_json::json!([2, 5]));
        assert!(h.get("y").is_none() && h.get("__metadata__").is_none());
        assert_eq!(&out[8 + n..], &[1, 2, 4, 5, 6]);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
