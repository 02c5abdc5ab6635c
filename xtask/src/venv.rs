//! The reference's Python environment, `parity/.venv`, built from `parity/requirements.txt`.
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Upstream source of the reference at the ported commit. It needs GitHub, so it is never used
/// implicitly: pass it as `--reference` where GitHub is reachable.
pub const UPSTREAM: &str =
    "chatterbox-tts @ git+https://github.com/resemble-ai/chatterbox.git@5de7a54";

/// Environment variable naming the reference package (a pip requirement).
pub const REFERENCE_ENV: &str = "CHATTERBOX_REFERENCE";

/// Environment variable naming the folder searched for the reference wheel instead of
/// `../shared/reference/wheels`.
pub const WHEELS_ENV: &str = "CHATTERBOX_REFERENCE_WHEELS";

/// The reference package to install and where that choice came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Anything `pip install` takes: a wheel, a source folder, a requirement.
    pub requirement: String,
    /// Which setting gave it, for messages.
    pub origin: String,
}

/// The folder searched for `chatterbox_tts-*.whl`: `$CHATTERBOX_REFERENCE_WHEELS`, else
/// `../shared/reference/wheels` beside the checkout.
pub fn wheels_dir() -> PathBuf {
    match std::env::var_os(WHEELS_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => crate::root().join("../shared/reference/wheels"),
    }
}

/// Where the reference package comes from: `flag` (`--reference`), else `env`
/// (`$CHATTERBOX_REFERENCE`), else the newest `chatterbox_tts-*.whl` in `wheels`; `None` when
/// there is none of them.
pub fn locate(flag: Option<&str>, env: Option<&str>, wheels: &Path) -> Option<Reference> {
    if let Some(s) = flag.filter(|s| !s.is_empty()) {
        return Some(Reference {
            requirement: s.to_string(),
            origin: "--reference".into(),
        });
    }
    if let Some(s) = env.filter(|s| !s.is_empty()) {
        return Some(Reference {
            requirement: s.to_string(),
            origin: format!("${REFERENCE_ENV}"),
        });
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(wheels)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("chatterbox_tts-") && n.ends_with(".whl"))
        })
        .collect();
    found.sort();
    found.pop().map(|w| Reference {
        requirement: w.display().to_string(),
        origin: format!("the shared wheel in {}", wheels.display()),
    })
}

/// The reference requirement as [`locate`] finds it from `--reference`, the environment and
/// [`wheels_dir`]; empty when there is none ([`ensure`] then says what to pass).
pub fn reference_source(flag: Option<&str>) -> String {
    let env = std::env::var(REFERENCE_ENV).ok();
    locate(flag, env.as_deref(), &wheels_dir())
        .map(|r| r.requirement)
        .unwrap_or_default()
}

/// The message when no reference package is found: what to pass instead.
pub fn missing_reference_message(wheels: &Path) -> String {
    format!(
        "no source for the Python reference package (chatterbox-tts at upstream commit \
         5de7a54), which parity/.venv needs: no --reference was given, ${REFERENCE_ENV} is not \
         set, and {} holds no chatterbox_tts-*.whl (as in a clone without ../shared). Pass \
         --reference PATH_OR_REQUIREMENT or set ${REFERENCE_ENV} to anything pip installs: \
         the wheel chatterbox_tts-0.1.7+git5de7a54-py3-none-any.whl copied from a checkout \
         that has ../shared/reference/wheels, a source checkout of resemble-ai/chatterbox at \
         5de7a54, or, where GitHub is reachable, '{UPSTREAM}' (${WHEELS_ENV} names another \
         folder to search for the wheel). Set-up without the network: docs/setup.md.",
        wheels.display()
    )
}

/// Creates `parity/.venv` if needed and installs the reference from `flag`, the environment or
/// the shared wheel, saying first where it comes from. Fails with
/// [`missing_reference_message`] before anything is created when there is no source.
pub fn prepare(flag: Option<&str>) -> Result<PathBuf> {
    let env = std::env::var(REFERENCE_ENV).ok();
    let wheels = wheels_dir();
    match locate(flag, env.as_deref(), &wheels) {
        Some(r) => {
            eprintln!("reference package: {} (from {})", r.requirement, r.origin);
            ensure(&r.requirement)
        }
        None => ensure(""),
    }
}

/// Path of the venv's Python.
pub fn python() -> PathBuf {
    crate::root().join("parity/.venv/bin/python")
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn host_python() -> Result<String> {
    for candidate in ["python3.11", "python3.12", "python3"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(candidate.to_string());
        }
    }
    bail!("no python3 on PATH: the reference environment needs Python 3.11 or 3.12")
}

/// Number of pinned packages in a requirements file.
fn count_requirements(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('-'))
        .count()
}

/// Creates or updates `parity/.venv` so it holds the pinned requirements and the reference
/// (`reference`: a pip requirement; empty when none was found, which reuses an existing venv
/// built from the same requirements or fails with [`missing_reference_message`]). A stamp file
/// remembers what was installed; nothing is reinstalled when it matches. pip's own progress is
/// shown.
pub fn ensure(reference: &str) -> Result<PathBuf> {
    let root = crate::root();
    let venv = root.join("parity/.venv");
    let reqs = root.join("parity/requirements.txt");
    let reqs_text = std::fs::read_to_string(&reqs)
        .with_context(|| format!("cannot read {}", reqs.display()))?;
    let stamp = venv.join("chatterbox-stamp");
    let stamped = std::fs::read_to_string(&stamp).ok();
    if reference.is_empty() {
        let prefix = format!("{reqs_text}\n--reference ");
        if let Some(old) = stamped.as_deref().and_then(|s| s.strip_prefix(&prefix)) {
            if python().exists() {
                eprintln!(
                    "no reference package given or found; reusing parity/.venv (built with {})",
                    old.trim()
                );
                return Ok(python());
            }
        }
        bail!("{}", missing_reference_message(&wheels_dir()));
    }
    let want = format!("{reqs_text}\n--reference {reference}\n");
    if stamped.as_deref() == Some(want.as_str()) && python().exists() {
        return Ok(python());
    }
    let fresh = !python().exists();
    eprintln!(
        "{} parity/.venv, the Python reference's environment:\n  \
         1. the {} pinned packages of parity/requirements.txt: about 3 GB to download and \
         6 GB on disk, mostly torch 2.6 with its nvidia-* CUDA wheels (PyPI's Linux torch is \
         the CUDA build); pip also keeps the downloads in its cache (PIP_NO_CACHE_DIR=1 \
         avoids that)\n  \
         2. the reference package, without dependencies: {reference}\n\
         This needs pip to reach PyPI and takes a few minutes (2 to 6 seen); pip's progress \
         follows. Later runs reuse the environment.",
        if fresh { "Building" } else { "Updating" },
        count_requirements(&reqs_text),
    );
    if fresh {
        run(Command::new(host_python()?).args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(python()).args(["-m", "pip", "install", "--upgrade", "pip"]))?;
    }
    run(Command::new(python())
        .args(["-m", "pip", "install", "-r"])
        .arg(&reqs))?;
    // The reference's metadata pins gradio for its demo apps; its real imports are in
    // requirements.txt, so the package itself goes in without dependencies.
    run(Command::new(python())
        .args(["-m", "pip", "install", "--no-deps", "--force-reinstall"])
        .arg(reference))?;
    std::fs::write(&stamp, want).with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(python())
}

/// `parity/.venv`'s Python if the venv exists (benchmarks use it when present).
pub fn existing() -> Option<PathBuf> {
    let p = python();
    Path::new(&p).exists().then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_then_env_then_wheel() {
        let dir = std::env::temp_dir().join(format!("xtask-venv-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in [
            "chatterbox_tts-0.1.6-py3-none-any.whl",
            "chatterbox_tts-0.1.7+git5de7a54-py3-none-any.whl",
            "other-1.0-py3-none-any.whl",
        ] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let r = locate(Some("a"), Some("b"), &dir).unwrap();
        assert_eq!(
            (r.requirement.as_str(), r.origin.as_str()),
            ("a", "--reference")
        );
        let r = locate(None, Some("b"), &dir).unwrap();
        assert_eq!(r.requirement, "b");
        let r = locate(Some(""), Some(""), &dir).unwrap();
        assert!(r
            .requirement
            .ends_with("chatterbox_tts-0.1.7+git5de7a54-py3-none-any.whl"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_shared_folder_names_the_options() {
        let missing = Path::new("/nonexistent/shared/reference/wheels");
        assert_eq!(locate(None, None, missing), None);
        let msg = missing_reference_message(missing);
        for part in [
            "--reference PATH_OR_REQUIREMENT",
            "$CHATTERBOX_REFERENCE",
            "/nonexistent/shared/reference/wheels",
            UPSTREAM,
            "docs/setup.md",
        ] {
            assert!(msg.contains(part), "{part} missing from: {msg}");
        }
    }

    #[test]
    fn counts_pinned_packages() {
        assert_eq!(
            count_requirements("# c\n\ntorch==2.6.0\n-r x\nnumpy==1.26.4\n"),
            2
        );
    }
}
