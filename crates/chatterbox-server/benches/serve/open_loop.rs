//! The open-loop phase (issue 43): at each rate of `CHATTERBOX_SERVE_RATES`, requests arrive
//! as a Poisson process, each sent at its scheduled time whatever the others are doing (one
//! tokio task each; nobody waits for an answer before the next arrival), with mixed lengths
//! and a mix of streaming and whole-file requests; refusals are counted, not retried.
//!
//! The plan is drawn from one seeded generator, the same for every rate: request `k` of every
//! rate has the same text, seed, length and kind, and its arrival time is the same sum of
//! exponential draws divided by the rate. So the rates differ only in how closely the requests
//! follow each other, and a run is repeatable.
use crate::capped::Caps;
use crate::client::{confirm_no_speech, json_body, request, Outcome};
use crate::report::{count_errors_where, percentile};
use crate::texts::sentence;
use chatterbox_server::ModelId;
use chatterbox_testkit::{env_f64, env_usize, BenchRun};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Request `k` of every rate is request (and seed) `OPEN_BASE + k`, apart from the other
/// phases' numbers.
pub const OPEN_BASE: usize = 4_000_000;
/// The most requests of one rate, whatever the knobs say.
const MAX_ARRIVALS: usize = 1_000_000;
/// Speech tokens per second of audio.
const TOKENS_PER_S: f64 = 25.0;
/// How often `/metrics` is read for the queue's depth.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// A streaming request whose first byte took longer than this (ms) waited noticeably.
const SLOW_FIRST_BYTE_MS: f64 = 1000.0;

/// The open-loop phase's knobs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Requests per second, one phase each.
    pub rates: Vec<f64>,
    /// Seconds over which each rate's arrivals are drawn (when `count` is `None`).
    pub secs: f64,
    /// Requests per rate instead of a time window.
    pub count: Option<usize>,
    /// Seconds of audio per request, lowest and highest (log-uniform between them).
    pub lengths: (f64, f64),
    /// Share of whole-file requests (no `stream_format`).
    pub whole_fraction: f64,
    /// The generator's seed.
    pub seed: u64,
}

/// One request of the plan.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// Seconds from the start of the phase.
    pub at: f64,
    /// Its token cap (the length of its audio: random weights rarely draw the stop token).
    pub tokens: usize,
    /// A whole-file request (else `stream_format: "audio"`).
    pub whole: bool,
}

impl Plan {
    /// The knobs from the environment; `None` when `CHATTERBOX_SERVE_RATES` is unset or empty.
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        let Some(rates) = std::env::var("CHATTERBOX_SERVE_RATES")
            .ok()
            .filter(|s| !s.trim().is_empty())
        else {
            return Ok(None);
        };
        let rates = crate::parse_list(
            "CHATTERBOX_SERVE_RATES",
            &rates,
            |r: &f64| r.is_finite() && *r > 0.0,
            "every rate must be above 0 (requests per second)",
        )?;
        let lengths = std::env::var("CHATTERBOX_SERVE_LENGTHS").unwrap_or_else(|_| "2-30".into());
        let parsed = match lengths.split_once('-') {
            Some((lo, hi)) => {
                (lo.trim().parse::<f64>()).and_then(|lo| Ok((lo, hi.trim().parse::<f64>()?)))
            }
            None => lengths.trim().parse::<f64>().map(|x| (x, x)),
        };
        let (lo, hi) =
            parsed.map_err(|e| anyhow::anyhow!("CHATTERBOX_SERVE_LENGTHS={lengths:?}: {e}"))?;
        anyhow::ensure!(
            lo > 0.0 && lo <= hi && hi.is_finite(),
            "CHATTERBOX_SERVE_LENGTHS={lengths:?}: seconds, LOW-HIGH with 0 < LOW <= HIGH, \
             or one value"
        );
        let whole_fraction = env_f64("CHATTERBOX_SERVE_WHOLE_FRACTION", 0.25);
        anyhow::ensure!(
            (0.0..=1.0).contains(&whole_fraction),
            "CHATTERBOX_SERVE_WHOLE_FRACTION={whole_fraction}: from 0 to 1"
        );
        let count = match std::env::var("CHATTERBOX_SERVE_OPEN_REQUESTS") {
            Ok(s) => Some(
                s.trim()
                    .parse::<usize>()
                    .map_err(|e| anyhow::anyhow!("CHATTERBOX_SERVE_OPEN_REQUESTS={s:?}: {e}"))?,
            ),
            Err(_) => None,
        };
        Ok(Some(Self {
            rates,
            secs: env_f64("CHATTERBOX_SERVE_OPEN_SECS", 20.0),
            count,
            lengths: (lo, hi),
            whole_fraction,
            seed: env_usize("CHATTERBOX_SERVE_SEED", 43) as u64,
        }))
    }

    /// The largest token cap a request of the plan can have.
    pub fn max_tokens(&self) -> usize {
        tokens(self.lengths.1)
    }

    /// The arrivals at `rate`: exponential gaps (`-ln(U) / rate`), lengths log-uniform in
    /// `lengths`, whole files with probability `whole_fraction`, three draws a request.
    pub fn arrivals(&self, rate: f64) -> Vec<Arrival> {
        let mut rng = SplitMix(self.seed);
        let (lo, hi) = (self.lengths.0.ln(), self.lengths.1.ln());
        let mut out = Vec::new();
        let mut at = 0.0;
        let limit = self.count.unwrap_or(MAX_ARRIVALS).min(MAX_ARRIVALS);
        while out.len() < limit {
            at += -rng.unit().ln() / rate;
            let secs = (lo + (hi - lo) * (1.0 - rng.unit())).exp();
            let whole = rng.unit() <= self.whole_fraction;
            if self.count.is_none() && at >= self.secs {
                break;
            }
            out.push(Arrival {
                at,
                tokens: tokens(secs),
                whole,
            });
        }
        out
    }

    /// What the records of a rate were measured on.
    fn describe(&self, rate: f64) -> String {
        let lengths = match self.lengths {
            (lo, hi) if lo == hi => format!("{lo} s of audio each"),
            (lo, hi) => format!("{lo}-{hi} s of audio log-uniform"),
        };
        let over = match self.count {
            Some(n) => format!("{n} requests"),
            None => format!("arrivals over {} s", self.secs),
        };
        format!(
            "open loop, Poisson {rate}/s, {over}, {lengths}, {:.0}% whole files, seed {}, pcm",
            self.whole_fraction * 100.0,
            self.seed
        )
    }
}

/// The token cap of `secs` seconds of audio (at least 1).
fn tokens(secs: f64) -> usize {
    ((secs * TOKENS_PER_S).round() as usize).max(1)
}

/// SplitMix64: a small seeded generator, enough for arrival times and lengths.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1] (never 0, so its logarithm is finite).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// What one rate gave.
pub struct RateRun {
    /// The plan's requests, in order.
    pub arrivals: Vec<Arrival>,
    /// Their outcomes, in the same order.
    pub out: Vec<Outcome>,
    /// The most any request started after its scheduled time (ms): the bench's own lag.
    pub lag_max: f64,
    /// Seconds from the phase's start to the last answer's end.
    pub wall: f64,
    /// `chatterbox_queue_depth` and `chatterbox_jobs_running` read every 250 ms.
    pub gauges: Vec<(f64, f64)>,
}

/// Sends the plan's requests at `rate` to the server at `base`, each at its time; waits for
/// all of them; sends each `no_speech` answer again alone (see [`confirm_no_speech`]).
pub async fn run_rate(base: &str, model: ModelId, caps: &Caps, plan: &Plan, rate: f64) -> RateRun {
    let arrivals = plan.arrivals(rate);
    for (k, a) in arrivals.iter().enumerate() {
        caps.set_for((OPEN_BASE + k) as u64, a.tokens);
    }
    let url = format!("{base}/v1/audio/speech");
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn(sample_gauges(format!("{base}/metrics"), sampling.clone()));
    let client = reqwest::Client::new();
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(arrivals.len());
    for (k, a) in arrivals.iter().enumerate() {
        let due = t0 + Duration::from_secs_f64(a.at);
        tokio::time::sleep_until(due).await;
        let i = OPEN_BASE + k;
        let mut body = json_body(model, &sentence(i), i);
        if a.whole {
            if let Some(o) = body.as_object_mut() {
                o.remove("stream_format");
            }
        }
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let lag = due.elapsed().as_secs_f64() * 1e3;
            (lag, request(&client, &url, body).await)
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    let mut lag_max = 0.0f64;
    for t in tasks {
        let started = std::time::Instant::now();
        match t.await {
            Ok((lag, o)) => {
                lag_max = lag_max.max(lag);
                out.push(o);
            }
            Err(e) => out.push(Outcome::failed(started, format!("request task: {e}"))),
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Release);
    let gauges = sampler.await.unwrap_or_default();
    confirm_no_speech(&url, model, &mut out, OPEN_BASE, sentence).await;
    RateRun {
        arrivals,
        out,
        lag_max,
        wall,
        gauges,
    }
}

/// While `on`, reads the queue's depth and the jobs running from `/metrics` every 250 ms.
async fn sample_gauges(url: String, on: Arc<AtomicBool>) -> Vec<(f64, f64)> {
    let client = reqwest::Client::new();
    let mut out = Vec::new();
    while on.load(Ordering::Acquire) {
        if let Ok(r) = client.get(&url).send().await {
            let text = r.text().await.unwrap_or_default();
            let gauge = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            };
            if let (Some(q), Some(r)) = (
                gauge("chatterbox_queue_depth"),
                gauge("chatterbox_jobs_running"),
            ) {
                out.push((q, r));
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    out
}

/// The records of one rate (prefix `r<rate>_`) and its line on stderr; the number of requests
/// that failed (refusals and `no_speech` answers given again alone are not failures).
pub fn report_rate(bench: &mut BenchRun, plan: &Plan, rate: f64, run: &RateRun) -> usize {
    let p = format!("r{rate}");
    let (arrivals, out) = (&run.arrivals, &run.out);
    let done = |whole: bool| {
        arrivals
            .iter()
            .zip(out)
            .filter(move |(a, o)| a.whole == whole && o.error.is_none())
            .map(|(_, o)| o)
    };
    let streams: Vec<&Outcome> = done(false).collect();
    let wholes: Vec<&Outcome> = done(true).collect();
    let ttfb: Vec<f64> = streams.iter().map(|o| o.ttfb).collect();
    let whole_ms: Vec<f64> = wholes.iter().map(|o| o.latency).collect();
    let completed = streams.len() + wholes.len();
    let refused: Vec<&Outcome> = out.iter().filter(|o| o.is_refusal()).collect();
    let retry_max = refused
        .iter()
        .filter_map(|o| o.retry_after)
        .fold(f64::NAN, f64::max);
    let failed = count_errors_where(&p, out, |o| !o.is_refusal());
    let no_speech = out.iter().filter(|o| o.no_speech_alone).count();
    let dry = streams.iter().filter(|o| o.margin < 0.0).count();
    let worst = streams.iter().map(|o| o.margin).fold(f64::NAN, f64::min);
    let slow = ttfb.iter().filter(|&&t| t > SLOW_FIRST_BYTE_MS).count();
    let audio: f64 = streams.iter().chain(&wholes).map(|o| o.audio_s).sum();
    // the arrivals' window: the time of the last one for a count, else the knob's
    let span = match plan.count {
        Some(_) => arrivals.last().map_or(0.0, |a| a.at),
        None => plan.secs,
    };
    let offered = if span > 0.0 {
        arrivals.len() as f64 / span
    } else {
        f64::NAN
    };
    let queue: Vec<f64> = run.gauges.iter().map(|g| g.0).collect();
    let queue_max = queue.iter().copied().fold(f64::NAN, f64::max);
    let queue_mean = queue.iter().sum::<f64>() / queue.len() as f64;
    let running_max = run.gauges.iter().map(|g| g.1).fold(f64::NAN, f64::max);
    let (t50, t95, t99) = (
        percentile(&ttfb, 0.5),
        percentile(&ttfb, 0.95),
        percentile(&ttfb, 0.99),
    );
    let (w50, w95) = (percentile(&whole_ms, 0.5), percentile(&whole_ms, 0.95));
    let rows = [
        ("sent", "count: requests sent".to_string(), out.len() as f64),
        (
            "offered_rps",
            "requests sent / seconds of arrivals (the draw's own rate; not ms)".into(),
            offered,
        ),
        (
            "completed",
            "count: 200 answers with a whole body".into(),
            completed as f64,
        ),
        (
            "refused",
            "count: 429 and 503 answers (not retried)".into(),
            refused.len() as f64,
        ),
        (
            "retry_after_max",
            "s (not ms), the largest Retry-After of the refusals".into(),
            retry_max,
        ),
        (
            "failed",
            "count: other errors (must be 0)".into(),
            failed as f64,
        ),
        (
            "no_speech",
            "count: no_speech answers that the request alone gave again".into(),
            no_speech as f64,
        ),
        (
            "streams",
            "count: streaming requests completed".into(),
            streams.len() as f64,
        ),
        (
            "ttfb_p50",
            "ms to first body byte of the streaming requests, p50".into(),
            t50,
        ),
        (
            "ttfb_p95",
            "ms to first body byte of the streaming requests, p95".into(),
            t95,
        ),
        (
            "ttfb_p99",
            "ms to first body byte of the streaming requests, p99".into(),
            t99,
        ),
        (
            "ttfb_over_1s",
            "count: streaming requests whose first byte took over 1 s (queued)".into(),
            slow as f64,
        ),
        (
            "wholes",
            "count: whole-file requests completed".into(),
            wholes.len() as f64,
        ),
        (
            "whole_p50",
            "ms to the last byte of the whole-file requests, p50".into(),
            w50,
        ),
        (
            "whole_p95",
            "ms to the last byte of the whole-file requests, p95".into(),
            w95,
        ),
        (
            "underruns",
            "count: streaming requests whose playback from the first byte ran dry".into(),
            dry as f64,
        ),
        (
            "worst_margin",
            "ms, worst playback margin of the streams (< 0: ran dry)".into(),
            worst,
        ),
        (
            "rtf",
            format!(
                "audio s delivered / wall s of the phase ({audio:.1} / {:.1})",
                run.wall
            ),
            audio / run.wall,
        ),
        (
            "achieved_rps",
            "requests completed / wall s of the phase (not ms)".into(),
            completed as f64 / run.wall,
        ),
        (
            "audio_s",
            "s (not ms) of audio per completed request, mean".into(),
            audio / completed as f64,
        ),
        (
            "wall_s",
            "s (not ms) from the phase's start to the last byte".into(),
            run.wall,
        ),
        (
            "queue_max",
            "count: largest chatterbox_queue_depth read every 250 ms".into(),
            queue_max,
        ),
        (
            "queue_mean",
            "count: mean chatterbox_queue_depth read every 250 ms".into(),
            queue_mean,
        ),
        (
            "running_max",
            "count: largest chatterbox_jobs_running read every 250 ms".into(),
            running_max,
        ),
        (
            "send_lag_max",
            "ms, the latest a request left after its scheduled time (the bench's own lag)".into(),
            run.lag_max,
        ),
    ];
    let what = plan.describe(rate);
    for (name, unit, v) in rows {
        bench.push_value(&format!("{p}_{name}"), format!("{unit}, {what}"), v);
    }
    eprintln!(
        "{p}/s: {} sent ({offered:.2}/s), {completed} done, {} refused{}, {failed} failed, \
         {no_speech} no_speech; first byte p50/p95/p99 {t50:.0}/{t95:.0}/{t99:.0} ms ({slow} \
         over 1 s); whole files p50/p95 {w50:.0}/{w95:.0} ms ({} done); {dry} of {} streams \
         ran dry (worst {worst:+.0} ms); {:.1}x real time, {:.2} done/s, queue max {queue_max} \
         (mean {queue_mean:.1}), send lag <= {:.0} ms",
        out.len(),
        refused.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(" (Retry-After <= {retry_max:.0} s)")
        },
        wholes.len(),
        streams.len(),
        audio / run.wall,
        completed as f64 / run.wall,
        run.lag_max
    );
    failed
}
