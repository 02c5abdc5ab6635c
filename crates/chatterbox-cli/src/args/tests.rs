//! The command line's parsing: flags, defaults and refusals.
use super::*;
use clap::CommandFactory;

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn devices_parse() {
    assert_eq!("cpu".parse::<DeviceArg>(), Ok(DeviceArg::Cpu));
    assert_eq!("CUDA".parse::<DeviceArg>(), Ok(DeviceArg::Cuda(0)));
    assert_eq!("cuda:1".parse::<DeviceArg>(), Ok(DeviceArg::Cuda(1)));
    assert_eq!("metal".parse::<DeviceArg>(), Ok(DeviceArg::Metal(0)));
    assert!("tpu".parse::<DeviceArg>().is_err());
    assert!("cuda:x".parse::<DeviceArg>().is_err());
}

#[test]
fn serve_models_parse_with_and_without_a_directory() {
    assert_eq!(
        "Turbo".parse::<ModelSpec>(),
        Ok(ModelSpec {
            model: Model::Turbo,
            dir: None
        })
    );
    assert_eq!(
        "nano=/ckpt/nano".parse::<ModelSpec>(),
        Ok(ModelSpec {
            model: Model::Nano,
            dir: Some(PathBuf::from("/ckpt/nano"))
        })
    );
    assert!("turbo=".parse::<ModelSpec>().is_err());
    assert!("tts-1".parse::<ModelSpec>().is_err());
    assert!("a=b".parse::<Alias>().is_ok());
    assert!("=b".parse::<Alias>().is_err());
    assert!("a".parse::<Alias>().is_err());
}

#[test]
fn quantize_parses_on_speak_and_serve() {
    for (arg, want) in [
        ("q8", QuantizeArg::Q8),
        ("q4", QuantizeArg::Q4),
        ("bf16", QuantizeArg::Bf16),
        ("f32", QuantizeArg::F32),
        ("auto", QuantizeArg::Auto),
    ] {
        let speak = Cli::try_parse_from(["chatterbox", "speak", "hi", "--quantize", arg]);
        let Ok(Cli {
            command: Command::Speak(a),
        }) = speak
        else {
            panic!("speak --quantize {arg}: {speak:?}");
        };
        assert_eq!(a.quantize, want);
        let serve = Cli::try_parse_from(["chatterbox", "serve", "--quantize", arg]);
        let Ok(Cli {
            command: Command::Serve(a),
        }) = serve
        else {
            panic!("serve --quantize {arg}: {serve:?}");
        };
        assert_eq!(a.quantize, want);
    }
    let Ok(Cli {
        command: Command::Speak(a),
    }) = Cli::try_parse_from(["chatterbox", "speak", "hi"])
    else {
        panic!("speak without --quantize");
    };
    assert_eq!(a.quantize, QuantizeArg::Auto);
    assert!(Cli::try_parse_from(["chatterbox", "speak", "hi", "--quantize", "q2"]).is_err());
}

#[test]
fn quantize_needs_a_format_and_an_output() {
    let ok = Cli::try_parse_from([
        "chatterbox",
        "quantize",
        "--model-dir",
        "d",
        "--format",
        "q4",
        "-o",
        "out",
    ]);
    let Ok(Cli {
        command: Command::Quantize(a),
    }) = ok
    else {
        panic!("{ok:?}");
    };
    assert_eq!(
        (a.format, a.model, a.output),
        (CheckpointFormat::Q4, Model::English, PathBuf::from("out"))
    );
    for bad in [
        &["chatterbox", "quantize", "-o", "out"][..],
        &["chatterbox", "quantize", "--format", "q8"],
        &["chatterbox", "quantize", "--format", "f32", "-o", "out"],
    ] {
        assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn serve_defaults_and_repeats() {
    let cli = Cli::try_parse_from([
        "chatterbox",
        "serve",
        "--model",
        "turbo",
        "-m",
        "english=/x",
        "--device",
        "cpu",
        "--device",
        "cuda:1",
        "--port",
        "0",
    ])
    .map_err(|e| e.to_string());
    let Ok(Cli {
        command: Command::Serve(a),
    }) = cli
    else {
        panic!("{cli:?}");
    };
    assert_eq!(a.models.len(), 2);
    assert_eq!(a.devices, vec![DeviceArg::Cpu, DeviceArg::Cuda(1)]);
    assert_eq!(
        (a.host.as_str(), a.port, a.queue, a.timeout),
        ("127.0.0.1", 0, 16, 300)
    );
    assert!(Cli::try_parse_from(["chatterbox", "serve", "--timeout", "0"]).is_err());
}
