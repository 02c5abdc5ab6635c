//! Which architecture NVRTC compiles a kernel source for on a given GPU. Pure functions, so
//! that they are tested without a GPU.

/// What NVRTC is asked for: machine code for the GPU (`sm_90`, `sm_90a`), or PTX for a
/// virtual architecture (`compute_80`) that the driver compiles when the module is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A cubin for this real architecture (`--gpu-architecture=sm_XY`).
    Cubin(String),
    /// PTX for this virtual architecture (`None`: NVRTC's default), compiled by the driver.
    Ptx(Option<&'static str>),
}

impl Target {
    /// The `--gpu-architecture` value (`None`: NVRTC's default).
    pub fn option(&self) -> Option<&str> {
        match self {
            Target::Cubin(sm) => Some(sm),
            Target::Ptx(arch) => *arch,
        }
    }
}

/// The cubin target of a source written for the virtual architecture `min` (`compute_80`,
/// `compute_90a`; `None`: any) on a GPU of compute capability `cc`, or why the source cannot
/// run there. `compute_XYa` features exist on that exact GPU generation only.
pub fn cubin_target(min: Option<&str>, cc: (i32, i32)) -> Result<Target, String> {
    let here = cc.0 * 10 + cc.1;
    let Some(min) = min else {
        return Ok(Target::Cubin(format!("sm_{here}")));
    };
    let spec = min
        .strip_prefix("compute_")
        .ok_or_else(|| format!("{min} is not a virtual architecture (compute_XY)"))?;
    let (digits, specific) = match spec.strip_suffix('a') {
        Some(d) => (d, true),
        None => (spec, false),
    };
    let needed: i32 = digits
        .parse()
        .map_err(|_| format!("{min} is not a virtual architecture (compute_XY)"))?;
    if specific {
        if here != needed {
            return Err(format!(
                "needs an sm_{needed} GPU ({min}); this one is sm_{here}"
            ));
        }
        return Ok(Target::Cubin(format!("sm_{needed}a")));
    }
    if here < needed {
        return Err(format!(
            "needs compute capability {}.{} or newer ({min}); this GPU has {}.{}",
            needed / 10,
            needed % 10,
            cc.0,
            cc.1
        ));
    }
    Ok(Target::Cubin(format!("sm_{here}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubins_are_for_the_gpu_itself() {
        assert_eq!(
            cubin_target(None, (9, 0)),
            Ok(Target::Cubin("sm_90".into()))
        );
        assert_eq!(
            cubin_target(None, (8, 6)),
            Ok(Target::Cubin("sm_86".into()))
        );
        assert_eq!(
            cubin_target(Some("compute_80"), (8, 9)),
            Ok(Target::Cubin("sm_89".into()))
        );
        assert_eq!(
            cubin_target(Some("compute_80"), (12, 0)),
            Ok(Target::Cubin("sm_120".into()))
        );
        assert_eq!(
            cubin_target(Some("compute_90a"), (9, 0)),
            Ok(Target::Cubin("sm_90a".into()))
        );
        assert_eq!(Target::Cubin("sm_90a".into()).option(), Some("sm_90a"));
        assert_eq!(Target::Ptx(Some("compute_80")).option(), Some("compute_80"));
        assert_eq!(Target::Ptx(None).option(), None);
    }

    #[test]
    fn too_old_or_other_generation_gpus_are_refused_by_name() {
        let e = cubin_target(Some("compute_80"), (7, 5)).unwrap_err();
        assert!(e.contains("8.0") && e.contains("7.5"), "{e}");
        let e = cubin_target(Some("compute_90a"), (10, 0)).unwrap_err();
        assert!(e.contains("sm_90") && e.contains("sm_100"), "{e}");
        let e = cubin_target(Some("compute_90a"), (8, 0)).unwrap_err();
        assert!(e.contains("sm_80"), "{e}");
        assert!(cubin_target(Some("sm_80"), (9, 0)).is_err());
        assert!(cubin_target(Some("compute_xy"), (9, 0)).is_err());
    }
}
