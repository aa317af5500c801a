//! FFT plans and nodes: `FftPlan`, `Dag.add_fft`, `Exec.set_fft_params`.

use cudagraph::{
    CallbackParams, Direction, FftParams, FftPlan, FftPlanDesc, FftType, Fusion, LoadCallback,
    Region, StoreCallback,
};
use pyo3::prelude::*;

use crate::errors::{invalid, IntoPy};

/// A cuFFT plan's description, validated (sizes, batch, type, callbacks); shared by the FFT
/// nodes that use it. cuFFT itself is loaded only when a DAG using the plan is instantiated, and
/// every node gets its own cuFFT handle and callback parameters: one plan may be used forward
/// and inverse in the same graph.
///
/// ``kind``: ``"c2c"``, ``"r2c"``, ``"c2r"`` (single precision), ``"z2z"``, ``"d2z"``, ``"z2d"``.
/// ``sizes``: an int or up to 3 ints, slowest first. ``load``: ``None``, ``"complex_i8"``,
/// ``"complex_i16"``, ``"real_i8"`` or ``"complex_f32"`` (input converted and scaled while
/// loaded). ``store``: ``None``, ``"scale"`` (output times a scale, optionally accumulated) or
/// ``"power"`` (\|X\|² as float32). ``fusion``: ``"auto"``, ``"fused"``, ``"unfused"``.
#[pyclass(module = "cudagraph._cudagraph", name = "FftPlan", frozen)]
pub(crate) struct PyFftPlan {
    pub(crate) plan: FftPlan,
    kind: String,
}

fn fft_type(s: &str) -> PyResult<FftType> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "c2c" => FftType::C2C,
        "r2c" => FftType::R2C,
        "c2r" => FftType::C2R,
        "z2z" => FftType::Z2Z,
        "d2z" => FftType::D2Z,
        "z2d" => FftType::Z2D,
        _ => {
            return Err(invalid(format!(
                "FFT kind `{s}`: expected c2c, r2c, c2r, z2z, d2z or z2d"
            )))
        }
    })
}

#[pymethods]
impl PyFftPlan {
    #[new]
    #[pyo3(signature = (kind, sizes, batch=1, load=None, store=None, fusion="auto"))]
    fn new(
        kind: &str,
        sizes: &Bound<'_, PyAny>,
        batch: i64,
        load: Option<&str>,
        store: Option<&str>,
        fusion: &str,
    ) -> PyResult<Self> {
        let sizes: Vec<i64> = match sizes.extract::<i64>() {
            Ok(n) => vec![n],
            Err(_) => sizes.extract()?,
        };
        let mut desc = FftPlanDesc::new(fft_type(kind)?, &sizes, batch);
        if let Some(l) = load {
            desc = desc.with_load(match l {
                "complex_i8" => LoadCallback::ComplexI8,
                "complex_i16" => LoadCallback::ComplexI16,
                "real_i8" => LoadCallback::RealI8,
                "complex_f32" => LoadCallback::ComplexF32,
                _ => {
                    return Err(invalid(format!(
                        "load callback `{l}`: expected complex_i8, complex_i16, real_i8 or \
                         complex_f32"
                    )))
                }
            });
        }
        if let Some(s) = store {
            desc.store = Some(match s {
                "scale" => StoreCallback::Scale,
                "power" => StoreCallback::Power,
                _ => {
                    return Err(invalid(format!(
                        "store callback `{s}`: expected scale or power"
                    )))
                }
            });
        }
        desc.fusion = match fusion {
            "auto" => Fusion::Auto,
            "fused" => Fusion::Fused,
            "unfused" => Fusion::Unfused,
            _ => {
                return Err(invalid(format!(
                    "fusion `{fusion}`: expected auto, fused or unfused"
                )))
            }
        };
        Ok(PyFftPlan {
            plan: FftPlan::new(desc).py_err()?,
            kind: kind.to_ascii_lowercase(),
        })
    }

    /// The transform sizes.
    #[getter]
    fn sizes(&self) -> Vec<i64> {
        self.plan.desc().sizes.clone()
    }

    /// The number of transforms.
    #[getter]
    fn batch(&self) -> i64 {
        self.plan.desc().batch
    }

    /// Whether the plan has a load callback.
    #[getter]
    fn has_load(&self) -> bool {
        self.plan.desc().load.is_some()
    }

    /// Whether the plan has a store callback.
    #[getter]
    fn has_store(&self) -> bool {
        self.plan.desc().store.is_some()
    }

    fn __repr__(&self) -> String {
        format!(
            "FftPlan('{}', sizes={:?}, batch={})",
            self.kind,
            self.sizes(),
            self.batch()
        )
    }
}

/// `"forward"` / `"inverse"` (also `-1` / `+1`, cuFFT's signs).
pub(crate) fn direction(obj: &Bound<'_, PyAny>) -> PyResult<Direction> {
    if let Ok(i) = obj.extract::<i32>() {
        return match i {
            -1 => Ok(Direction::Forward),
            1 => Ok(Direction::Inverse),
            _ => Err(invalid(format!(
                "direction {i}: expected -1 (forward) or 1 (inverse)"
            ))),
        };
    }
    match obj.extract::<String>()?.as_str() {
        "forward" => Ok(Direction::Forward),
        "inverse" | "backward" => Ok(Direction::Inverse),
        s => Err(invalid(format!(
            "direction `{s}`: expected forward or inverse"
        ))),
    }
}

/// A node's callback parameters: built-in ones for the plan's callbacks (scale 1 unless
/// given), with the regions given to read or write instead of the node's input and output.
pub(crate) fn params(
    plan: &PyFftPlan,
    load_scale: Option<f32>,
    load_input: Option<Region>,
    store_scale: Option<f32>,
    store_output: Option<Region>,
    accumulate: bool,
) -> FftParams {
    let load = (plan.has_load() || load_scale.is_some() || load_input.is_some()).then(|| {
        CallbackParams::Load {
            scale: load_scale.unwrap_or(1.0),
            input: load_input,
        }
    });
    let store = (plan.has_store() || store_scale.is_some() || store_output.is_some() || accumulate)
        .then(|| CallbackParams::Store {
            scale: store_scale.unwrap_or(1.0),
            output: store_output,
            accumulate,
        });
    FftParams { load, store }
}
