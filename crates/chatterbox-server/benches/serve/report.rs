//! The load levels' statistics and records.
use crate::client::Outcome;
use chatterbox_testkit::BenchRun;

/// Nearest-rank percentile `p` (0..=1) of `v`; NaN when empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}

/// Prints up to three errors of `out`; returns how many there were (`no_speech` answers that
/// the request alone gave again are not errors).
pub fn count_errors(label: &str, out: &[Outcome]) -> usize {
    count_errors_where(label, out, |_| true)
}

/// [`count_errors`] over the outcomes that `keep` keeps.
pub fn count_errors_where(label: &str, out: &[Outcome], keep: impl Fn(&Outcome) -> bool) -> usize {
    let errors: Vec<&String> = out
        .iter()
        .filter(|o| o.is_error() && keep(o))
        .filter_map(|o| o.error.as_ref())
        .collect();
    for e in errors.iter().take(3) {
        eprintln!("{label}: error: {e}");
    }
    errors.len()
}

/// The load levels' records; the number of errors and the largest level without underrun.
pub fn report_level(
    bench: &mut BenchRun,
    clients: usize,
    out: &[Outcome],
    wall: f64,
    tokens: usize,
) -> (usize, bool) {
    let ok: Vec<&Outcome> = out.iter().filter(|o| o.error.is_none()).collect();
    let ttfb: Vec<f64> = ok.iter().map(|o| o.ttfb).collect();
    let lat: Vec<f64> = ok.iter().map(|o| o.latency).collect();
    let audio: f64 = ok.iter().map(|o| o.audio_s).sum();
    let errors = count_errors(&format!("c{clients}"), out);
    let no_speech = out.iter().filter(|o| o.no_speech_alone).count();
    let underruns = ok.iter().filter(|o| o.margin < 0.0).count();
    let worst = ok.iter().map(|o| o.margin).fold(f64::INFINITY, f64::min);
    let n = out.len();
    let what = format!("{n} requests, {clients} clients, pcm stream, cap {tokens} tokens");
    let p = format!("c{clients}");
    bench.push_value(
        &format!("{p}_ttfb_p50"),
        format!("ms to first body byte, p50, {what}"),
        percentile(&ttfb, 0.5),
    );
    bench.push_value(
        &format!("{p}_ttfb_p95"),
        format!("ms to first body byte, p95, {what}"),
        percentile(&ttfb, 0.95),
    );
    bench.push_value(
        &format!("{p}_latency_p50"),
        format!("ms to last body byte, p50, {what}"),
        percentile(&lat, 0.5),
    );
    bench.push_value(
        &format!("{p}_latency_p95"),
        format!("ms to last body byte, p95, {what}"),
        percentile(&lat, 0.95),
    );
    bench.push_value(
        &format!("{p}_rtf"),
        format!("audio s delivered / wall s ({audio:.1} / {wall:.1}; > 1 keeps up), {what}"),
        audio / wall,
    );
    bench.push_value(
        &format!("{p}_audio_s"),
        format!("seconds of audio per request, mean (not ms), {what}"),
        if ok.is_empty() {
            f64::NAN
        } else {
            audio / ok.len() as f64
        },
    );
    bench.push_value(
        &format!("{p}_audio_min_s"),
        format!("seconds of audio of the shortest request (not ms), {what}"),
        ok.iter().map(|o| o.audio_s).fold(f64::NAN, f64::min),
    );
    bench.push_value(
        &format!("{p}_errors"),
        format!("count: non-200, broken or empty bodies (must be 0), {what}"),
        errors as f64,
    );
    bench.push_value(
        &format!("{p}_no_speech"),
        format!("count: no_speech answers that the request alone gave again, {what}"),
        no_speech as f64,
    );
    bench.push_value(
        &format!("{p}_underruns"),
        format!("count: requests whose playback from the first byte ran dry, {what}"),
        underruns as f64,
    );
    bench.push_value(
        &format!("{p}_worst_margin"),
        format!("ms, worst playback margin over requests (< 0: underrun), {what}"),
        if worst.is_finite() { worst } else { f64::NAN },
    );
    (errors, underruns == 0 && errors == 0)
}
