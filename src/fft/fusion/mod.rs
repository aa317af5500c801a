//! Fused and unfused loads ([`Fusion`]).
//!
//! A load callback (built-in or custom) can run in two forms:
//! - **fused**: inside the transform, as the plan's LTO load callback;
//! - **unfused**: as a conversion kernel that applies the same callback function (built-in:
//!   generated from the same template, with the same parameter struct; custom: the user's
//!   source, reading its parameters through `callerInfo` from the node's parameter buffer) to
//!   every element of the input span and writes float data to a scratch buffer, followed by
//!   the same plan without the load callback (the store callback stays) reading that buffer
//!   with the same layout.
//!
//! Which is faster depends on the shape: with cuFFT 12.0 the LTO load callback makes large
//! batches of 4096-point transforms slower than the callback-free plan by more than the
//! conversion costs, while at small shapes the single fused transform wins. [`Fusion::Auto`]
//! (the default) therefore measures both forms once per shape, as FFTW's planner does, and
//! keeps the faster ([`decide_fusion`]): on the device, outside any capture, each form
//! captured `ITERS` times into a graph of its own and timed with CUDA events. The decision
//! is remembered per process and stored on disk next to the NVRTC cache (see
//! [`compile`](crate::compile): `$CUDAGRAPH_CACHE_DIR`, `$XDG_CACHE_HOME/cudagraph` or
//! `~/.cache/cudagraph`), keyed by the device (name, compute capability, multiprocessors,
//! runtime and driver versions), the cuFFT version and the plan description, so later runs do
//! not measure again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::FftPlan;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::cufft as cf;
use crate::stream::{Event, Stream};

mod measure;
mod unfused;

use measure::{Captured, Rig};
pub(crate) use unfused::{convert_config, planned_in_form, Unfused};

/// How an FFT plan with a load callback runs ([`FftPlanDesc::with_fusion`](super::FftPlanDesc::with_fusion)).
///
/// Plans without a load callback have only the fused form: for them `Auto` means fused and
/// `Unfused` is refused by [`FftPlan::new`](super::FftPlan::new). Custom load callbacks
/// ([`LoadCallback::Custom`](super::LoadCallback::Custom)) have both forms, as the built-ins do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fusion {
    /// Measure both forms once per shape (per device and cuFFT version) and use the faster;
    /// see [`decide_fusion`]. The variable [`FUSION_ENV`] can force one form for every `Auto`
    /// plan. The [`RecordingBackend`](crate::RecordingBackend) cannot measure: there `Auto`
    /// is always fused.
    #[default]
    Auto,
    /// The load callback runs inside the transform (an LTO callback of the plan).
    Fused,
    /// A conversion kernel writes the loaded values (float) to a scratch buffer of the node,
    /// then the plan without the load callback transforms that buffer.
    Unfused,
}

/// The form a node or [`StreamFft`](super::StreamFft) runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FftForm {
    /// The plan with its load callback.
    Fused,
    /// A conversion kernel, then the plan without its load callback.
    Unfused,
}

/// Why a form was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusionSource {
    /// The plan has no unfused form (no load callback).
    NoUnfusedForm,
    /// The plan asked for this form ([`Fusion::Fused`] or [`Fusion::Unfused`]).
    Plan,
    /// [`FUSION_ENV`] forced it (plans with [`Fusion::Auto`] only).
    Env,
    /// Measured by this decision.
    Measured,
    /// Measured earlier in this process.
    Remembered,
    /// Read from the on-disk cache (measured by an earlier run).
    DiskCache,
    /// Not measured: the [`RecordingBackend`](crate::RecordingBackend) cannot time, so
    /// [`Fusion::Auto`] is fused there.
    NotMeasured,
}

/// What the measurement of [`Fusion::Auto`] found: GPU time of one transform (with the node's
/// parameter-setting and conversion kernels) in each form, median of the timed repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionTimings {
    /// The fused form, µs.
    pub fused_us: f64,
    /// The unfused form, µs.
    pub unfused_us: f64,
}

/// The form chosen for a plan, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionDecision {
    /// The form.
    pub form: FftForm,
    /// Why.
    pub source: FusionSource,
    /// The measurement behind an automatic choice
    /// ([`Measured`](FusionSource::Measured), [`Remembered`](FusionSource::Remembered),
    /// [`DiskCache`](FusionSource::DiskCache)).
    pub timings: Option<FusionTimings>,
}

impl FusionDecision {
    fn fixed(form: FftForm, source: FusionSource) -> Self {
        FusionDecision {
            form,
            source,
            timings: None,
        }
    }

    /// One line for people (the DOT labels use it), e.g.
    /// `unfused: convert + FFT (auto: 11.5 µs, fused 12.8 µs)`.
    pub fn describe(&self) -> String {
        let form = match self.form {
            FftForm::Fused => "fused",
            FftForm::Unfused => "unfused: convert + FFT",
        };
        let why = match (self.source, self.timings) {
            (FusionSource::NoUnfusedForm, _) => String::new(),
            (FusionSource::Plan, _) => " (requested)".into(),
            (FusionSource::Env, _) => format!(" ({FUSION_ENV})"),
            (FusionSource::NotMeasured, _) => " (auto, not measured)".into(),
            (_, Some(t)) => {
                let (this, other, name) = match self.form {
                    FftForm::Fused => (t.fused_us, t.unfused_us, "unfused"),
                    FftForm::Unfused => (t.unfused_us, t.fused_us, "fused"),
                };
                format!(" (auto: {} µs, {name} {} µs)", sig3(this), sig3(other))
            }
            (_, None) => " (auto)".into(),
        };
        format!("{form}{why}")
    }
}

/// Three significant digits.
fn sig3(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The environment variable that forces the form of every plan with [`Fusion::Auto`]:
/// `fused`, `unfused` or `auto` (the default: measure). Plans that ask for a form with
/// [`FftPlanDesc::with_fusion`](super::FftPlanDesc::with_fusion) keep it; the
/// [`RecordingBackend`](crate::RecordingBackend) ignores the variable (its transcripts do not
/// depend on the environment). Another value makes lowering fail with an error naming it.
pub const FUSION_ENV: &str = "CUDAGRAPH_FFT_FUSION";

/// `FUSION_ENV`'s forced form, if any.
fn env_form() -> Result<Option<FftForm>> {
    match std::env::var(FUSION_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => parse_env(&v),
        Err(std::env::VarError::NotUnicode(v)) => parse_env(&v.to_string_lossy()),
    }
}

fn parse_env(v: &str) -> Result<Option<FftForm>> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(None),
        "fused" => Ok(Some(FftForm::Fused)),
        "unfused" => Ok(Some(FftForm::Unfused)),
        _ => Err(Error::BadEnv {
            variable: FUSION_ENV,
            value: Some(v.to_string()),
            expected: "`fused`, `unfused` or `auto`",
        }),
    }
}

/// The decision that needs no measurement, if there is one.
fn static_decision(plan: &FftPlan, env: Option<FftForm>) -> Option<FusionDecision> {
    if !plan.has_unfused_form() {
        return Some(FusionDecision::fixed(
            FftForm::Fused,
            FusionSource::NoUnfusedForm,
        ));
    }
    match plan.fusion() {
        Fusion::Fused => Some(FusionDecision::fixed(FftForm::Fused, FusionSource::Plan)),
        Fusion::Unfused => Some(FusionDecision::fixed(FftForm::Unfused, FusionSource::Plan)),
        Fusion::Auto => env.map(|f| FusionDecision::fixed(f, FusionSource::Env)),
    }
}

/// The recording backend's decision: what the plan asks for, `Auto` as fused (deterministic:
/// neither measured nor read from the environment or a cache).
pub(crate) fn recording_decision(plan: &FftPlan) -> FusionDecision {
    static_decision(plan, None).unwrap_or(FusionDecision::fixed(
        FftForm::Fused,
        FusionSource::NotMeasured,
    ))
}

/// Unfused only when it is faster by more than this fraction of the fused time: within it the
/// two are equal for practical purposes, and the fused form needs no scratch buffer.
const MARGIN: f64 = 0.02;

/// The form the timings choose.
fn choose(t: &FusionTimings) -> FftForm {
    if t.unfused_us < t.fused_us * (1.0 - MARGIN) {
        FftForm::Unfused
    } else {
        FftForm::Fused
    }
}

/// Transforms per captured graph in a measurement.
const ITERS: usize = 8;
/// Untimed launches of each graph before the timed ones.
const WARMUP: usize = 2;
/// Timed launches of each graph.
const REPS: usize = 7;

/// The key of a decision: the format's version, the device, the library versions and the plan
/// description without its fusion request (the parameter values are not part of a plan).
fn decision_key(device_id: &str, plan: &FftPlan) -> String {
    let mut desc = plan.desc().clone();
    desc.fusion = Fusion::Auto;
    format!("cudagraph fft fusion v1 (margin {MARGIN}, {ITERS}x{REPS})\n{device_id}\nplan {desc:?}")
}

/// What identifies the device and libraries for a decision.
fn device_id(device: &Device) -> Result<String> {
    let p = device.properties();
    let cc = p.limits.compute_capability;
    // SAFETY: a plain version query.
    let cufft = unsafe { cf::version()? };
    Ok(format!(
        "device {} sm_{}{} {} SMs, runtime {}, driver {}\ncufft {cufft}",
        p.name, cc.0, cc.1, p.multiprocessor_count, p.runtime_version, p.driver_version
    ))
}

/// The on-disk record's kind (its file extension in the cache directory).
const RECORD_KIND: &str = "fftfusion";

fn encode_record(form: FftForm, t: &FusionTimings) -> Vec<u8> {
    let word = match form {
        FftForm::Fused => "fused",
        FftForm::Unfused => "unfused",
    };
    format!("{word} {} {}", t.fused_us, t.unfused_us).into_bytes()
}

fn decode_record(bytes: &[u8]) -> Option<(FftForm, FusionTimings)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut words = text.split(' ');
    let form = match words.next()? {
        "fused" => FftForm::Fused,
        "unfused" => FftForm::Unfused,
        _ => return None,
    };
    let fused_us: f64 = words.next()?.parse().ok()?;
    let unfused_us: f64 = words.next()?.parse().ok()?;
    if words.next().is_some() || !fused_us.is_finite() || !unfused_us.is_finite() {
        return None;
    }
    Some((
        form,
        FusionTimings {
            fused_us,
            unfused_us,
        },
    ))
}

type Decisions = Mutex<HashMap<String, (FftForm, FusionTimings)>>;

/// This process's decisions, by key.
fn decisions() -> &'static Decisions {
    static DECISIONS: OnceLock<Decisions> = OnceLock::new();
    DECISIONS.get_or_init(Default::default)
}

static MEASUREMENTS: AtomicU64 = AtomicU64::new(0);

/// How many fused-versus-unfused measurements this process has made ([`measure_fusion`],
/// called by [`decide_fusion`] for shapes neither remembered nor found on disk): a diagnostic,
/// e.g. to see that a second lowering of the same plan did not measure again.
pub fn fusion_measurements() -> u64 {
    MEASUREMENTS.load(Ordering::Relaxed)
}

/// Forgets this process's [`Fusion::Auto`] decisions (not the on-disk ones): the next decision
/// of each shape reads the disk cache, or measures. For tests and benchmarks.
pub fn forget_fusion_decisions() {
    decisions()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
}

/// The form `plan` runs in on `device`, as FFT nodes (when lowered) and
/// [`StreamFft::new`](super::StreamFft::new) decide it:
/// - the only form, for a plan without an unfused form;
/// - the requested one, for [`Fusion::Fused`] and [`Fusion::Unfused`];
/// - for [`Fusion::Auto`]: the form [`FUSION_ENV`] forces, else the decision remembered by
///   this process, else the one in the on-disk cache, else a measurement
///   ([`measure_fusion`]): unfused when it is more than 2% faster, fused otherwise. A new
///   decision is remembered and stored on disk (when the cache is on).
///
/// Measuring makes two cuFFT plans and a few buffers of the plan's size, and takes about as
/// long as making the plans; its errors (e.g. out of memory) are returned.
pub fn decide_fusion(device: &Device, plan: &FftPlan) -> Result<FusionDecision> {
    if let Some(d) = static_decision(plan, env_form()?) {
        return Ok(d);
    }
    let key = decision_key(&device_id(device)?, plan);
    let found = decisions()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .copied();
    if let Some((form, t)) = found {
        return Ok(FusionDecision {
            form,
            source: FusionSource::Remembered,
            timings: Some(t),
        });
    }
    let dir = crate::cache::dir();
    let on_disk = dir
        .as_ref()
        .and_then(|d| crate::cache::load_record(d, RECORD_KIND, &key))
        .and_then(|b| decode_record(&b));
    let (form, t, source) = match on_disk {
        Some((form, t)) => (form, t, FusionSource::DiskCache),
        None => {
            let t = measure_fusion(device, plan)?;
            let form = choose(&t);
            if let Some(d) = &dir {
                crate::cache::store_record(d, RECORD_KIND, &key, &encode_record(form, &t));
            }
            (form, t, FusionSource::Measured)
        }
    };
    decisions()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, (form, t));
    Ok(FusionDecision {
        form,
        source,
        timings: Some(t),
    })
}

/// Measures both forms of `plan` on `device` (always; nothing is remembered or stored) and
/// returns their GPU times per transform. Each form gets its own cuFFT plan, work area,
/// parameter buffer and zeroed scratch input and output (and, unfused, the conversion kernel
/// and its scratch buffer), executed once on a private stream, then captured `ITERS` (8) times
/// into a graph of its own; each graph is launched twice untimed, then 7 times between two
/// CUDA events, the two forms alternating; the result is the median divided by 8. An error
/// for a plan without an unfused form.
pub fn measure_fusion(device: &Device, plan: &FftPlan) -> Result<FusionTimings> {
    if !plan.has_unfused_form() {
        return Err(Error::FftPlan {
            problem: format!(
                "{:?} has no unfused form to measure (it needs a load callback)",
                plan.desc().load
            ),
        });
    }
    MEASUREMENTS.fetch_add(1, Ordering::Relaxed);
    device.bind()?;
    let stream = Stream::new(device)?;
    let rigs = [
        Rig::new(device, plan, FftForm::Fused, &stream)?,
        Rig::new(device, plan, FftForm::Unfused, &stream)?,
    ];
    // Once outside capture, so nothing lazy happens inside it.
    for r in &rigs {
        r.issue()?;
    }
    stream.synchronize()?;
    let graphs = [
        Captured::new(&rigs[0], &stream)?,
        Captured::new(&rigs[1], &stream)?,
    ];
    let (start, end) = (Event::new(device)?, Event::new(device)?);
    let mut samples: [Vec<f64>; 2] = Default::default();
    for rep in 0..WARMUP + REPS {
        for k in 0..2 {
            let i = (k + rep) % 2;
            start.record(&stream)?;
            graphs[i].launch()?;
            end.record(&stream)?;
            end.synchronize()?;
            if rep >= WARMUP {
                samples[i].push(start.elapsed_ms(&end)? as f64 * 1e3 / ITERS as f64);
            }
        }
    }
    let [fused, unfused] = samples;
    Ok(FusionTimings {
        fused_us: median(fused),
        unfused_us: median(unfused),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fft::handle::convert_source;
    use crate::fft::{FftPlanDesc, FftType, LoadCallback, StoreCallback};

    fn plan(desc: FftPlanDesc) -> FftPlan {
        FftPlan::new(desc).unwrap()
    }

    fn c2c() -> FftPlanDesc {
        FftPlanDesc::new(FftType::C2C, &[4096], 256)
    }

    #[test]
    fn static_decisions() {
        let auto = plan(c2c().with_load(LoadCallback::ComplexI8));
        assert_eq!(static_decision(&auto, None), None, "auto must measure");
        let d = static_decision(&auto, Some(FftForm::Unfused)).unwrap();
        assert_eq!((d.form, d.source), (FftForm::Unfused, FusionSource::Env));
        let forced = plan(
            c2c()
                .with_load(LoadCallback::ComplexI16)
                .with_fusion(Fusion::Fused),
        );
        let d = static_decision(&forced, Some(FftForm::Unfused)).unwrap();
        assert_eq!(
            (d.form, d.source),
            (FftForm::Fused, FusionSource::Plan),
            "the plan's request beats the environment"
        );
        let none = plan(c2c().with_store(StoreCallback::Scale));
        let d = static_decision(&none, Some(FftForm::Unfused)).unwrap();
        assert_eq!(
            (d.form, d.source),
            (FftForm::Fused, FusionSource::NoUnfusedForm)
        );
        // The recording backend: auto is fused, unmeasured.
        let d = recording_decision(&auto);
        assert_eq!(
            (d.form, d.source),
            (FftForm::Fused, FusionSource::NotMeasured)
        );
        let unf = plan(
            FftPlanDesc::new(FftType::R2C, &[64], 2)
                .with_load(LoadCallback::RealI8)
                .with_fusion(Fusion::Unfused),
        );
        assert_eq!(recording_decision(&unf).form, FftForm::Unfused);
    }

    #[test]
    fn environment_values() {
        assert_eq!(parse_env("").unwrap(), None);
        assert_eq!(parse_env("auto").unwrap(), None);
        assert_eq!(parse_env(" Fused ").unwrap(), Some(FftForm::Fused));
        assert_eq!(parse_env("unfused").unwrap(), Some(FftForm::Unfused));
        let e = parse_env("fast").unwrap_err().to_string();
        assert!(e.contains("CUDAGRAPH_FFT_FUSION=\"fast\""), "{e}");
    }

    #[test]
    fn the_faster_form_wins_beyond_the_margin() {
        let t = |fused_us, unfused_us| FusionTimings {
            fused_us,
            unfused_us,
        };
        assert_eq!(choose(&t(51.5, 37.0)), FftForm::Unfused);
        assert_eq!(choose(&t(7.4, 10.4)), FftForm::Fused);
        assert_eq!(choose(&t(10.0, 9.9)), FftForm::Fused, "within 2%: fused");
        assert_eq!(choose(&t(10.0, 9.7)), FftForm::Unfused);
        assert_eq!(choose(&t(f64::NAN, 1.0)), FftForm::Fused);
    }

    #[test]
    fn keys_ignore_the_fusion_request_and_parameters_but_not_the_shape() {
        let id = "device NVIDIA H200 sm_90 132 SMs, runtime 13.0, driver 13.0\ncufft 12000";
        let a = decision_key(id, &plan(c2c().with_load(LoadCallback::ComplexI8)));
        let b = decision_key(
            id,
            &plan(
                c2c()
                    .with_load(LoadCallback::ComplexI8)
                    .with_fusion(Fusion::Fused),
            ),
        );
        assert_eq!(a, b);
        let other_batch = decision_key(
            id,
            &plan(FftPlanDesc::new(FftType::C2C, &[4096], 16).with_load(LoadCallback::ComplexI8)),
        );
        assert_ne!(a, other_batch);
        let other_load = decision_key(id, &plan(c2c().with_load(LoadCallback::ComplexI16)));
        assert_ne!(a, other_load);
        let other_store = decision_key(
            id,
            &plan(
                c2c()
                    .with_load(LoadCallback::ComplexI8)
                    .with_store(StoreCallback::Power),
            ),
        );
        assert_ne!(a, other_store);
        assert_ne!(
            a,
            decision_key(
                &id.replace("12000", "12001"),
                &plan(c2c().with_load(LoadCallback::ComplexI8))
            )
        );
        assert!(a.contains(id), "{a}");
    }

    #[test]
    fn records_round_trip_and_reject_garbage() {
        let t = FusionTimings {
            fused_us: 51.53,
            unfused_us: 37.0,
        };
        for form in [FftForm::Fused, FftForm::Unfused] {
            assert_eq!(decode_record(&encode_record(form, &t)), Some((form, t)));
        }
        for bad in [
            &b""[..],
            b"fast 1 2",
            b"fused 1",
            b"fused 1 2 3",
            b"unfused x 2",
            b"fused NaN 2",
            b"\xff",
        ] {
            assert_eq!(decode_record(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn decisions_round_trip_through_the_disk_cache() {
        let dir =
            std::env::temp_dir().join(format!("cudagraph-fusion-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = decision_key("device X", &plan(c2c().with_load(LoadCallback::ComplexI8)));
        assert!(crate::cache::load_record(&dir, RECORD_KIND, &key).is_none());
        let t = FusionTimings {
            fused_us: 12.8,
            unfused_us: 11.5,
        };
        crate::cache::store_record(
            &dir,
            RECORD_KIND,
            &key,
            &encode_record(FftForm::Unfused, &t),
        );
        let back =
            crate::cache::load_record(&dir, RECORD_KIND, &key).and_then(|b| decode_record(&b));
        assert_eq!(back, Some((FftForm::Unfused, t)));
        // Another shape's key does not read this record.
        let other = decision_key("device X", &plan(c2c().with_load(LoadCallback::ComplexI16)));
        assert!(crate::cache::load_record(&dir, RECORD_KIND, &other).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn descriptions() {
        let d = FusionDecision {
            form: FftForm::Unfused,
            source: FusionSource::Measured,
            timings: Some(FusionTimings {
                fused_us: 51.53,
                unfused_us: 37.02,
            }),
        };
        assert_eq!(
            d.describe(),
            "unfused: convert + FFT (auto: 37.0 µs, fused 51.5 µs)"
        );
        let d = FusionDecision::fixed(FftForm::Fused, FusionSource::NotMeasured);
        assert_eq!(d.describe(), "fused (auto, not measured)");
        let d = FusionDecision::fixed(FftForm::Unfused, FusionSource::Plan);
        assert_eq!(d.describe(), "unfused: convert + FFT (requested)");
        let d = FusionDecision::fixed(FftForm::Fused, FusionSource::Env);
        assert_eq!(d.describe(), "fused (CUDAGRAPH_FFT_FUSION)");
    }

    #[test]
    fn conversion_launch_shapes() {
        assert_eq!(convert_config(1).grid.x, 1);
        assert_eq!(convert_config(4096 * 1024).grid.x, 16384);
        assert_eq!(convert_config(u32::MAX as u64 * 64).grid.x, 1 << 20);
        assert_eq!(convert_config(10).block.x, 256);
    }

    #[test]
    fn conversion_sources_apply_the_callbacks_own_function() {
        for (cb, kernel, callback, out) in [
            (
                LoadCallback::ComplexI8,
                "cudagraph_fft_convert_ci8",
                "cudagraph_load_ci8",
                "float2",
            ),
            (
                LoadCallback::ComplexI16,
                "cudagraph_fft_convert_ci16",
                "cudagraph_load_ci16",
                "float2",
            ),
            (
                LoadCallback::RealI8,
                "cudagraph_fft_convert_ri8",
                "cudagraph_load_ri8",
                "float",
            ),
            (
                LoadCallback::ComplexF32,
                "cudagraph_fft_convert_cf32",
                "cudagraph_load_cf32",
                "float2",
            ),
        ] {
            let (name, src) = convert_source(&cb, FftType::C2C);
            assert_eq!(name, kernel);
            assert!(
                src.contains(&format!("__device__ {out} {callback}(void* dataIn")),
                "{src}"
            );
            assert!(
                src.contains(&format!(
                    "void {kernel}({out}* out, void* dataIn, cg_params p"
                )),
                "{src}"
            );
            assert!(
                src.contains(&format!("out[i] = {callback}(dataIn, i, &p, 0);")),
                "{src}"
            );
        }
    }
}
