//! Element types as NumPy and `__cuda_array_interface__` name them (`typestr`, e.g. `<f4`).

use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use crate::errors::invalid;

/// A little-endian (or byte-sized) element type: its kind (`f`, `i`, `u`, `b`, `c`) and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dtype {
    pub kind: char,
    pub size: usize,
}

impl Dtype {
    pub(crate) const F32: Dtype = Dtype { kind: 'f', size: 4 };

    /// The `__cuda_array_interface__` typestr: `<f4`, `|u1`.
    pub(crate) fn typestr(self) -> String {
        let order = if self.size == 1 { '|' } else { '<' };
        format!("{order}{}{}", self.kind, self.size)
    }

    /// NumPy's name: `float32`, `uint8`, `complex64`, `bool`.
    pub(crate) fn name(self) -> String {
        match self.kind {
            'f' => format!("float{}", self.size * 8),
            'i' => format!("int{}", self.size * 8),
            'u' => format!("uint{}", self.size * 8),
            'c' => format!("complex{}", self.size * 8),
            'b' => "bool".into(),
            k => format!("{k}{}", self.size),
        }
    }

    fn valid(kind: char, size: usize) -> bool {
        match kind {
            'f' => matches!(size, 2 | 4 | 8),
            'i' | 'u' => matches!(size, 1 | 2 | 4 | 8),
            'c' => matches!(size, 8 | 16),
            'b' => size == 1,
            _ => false,
        }
    }

    /// Parses a typestr (`<f4`, `|u1`, `=i8`, `f4`) or a NumPy name (`float32`).
    pub(crate) fn parse(s: &str) -> PyResult<Dtype> {
        let named = match s {
            "float16" | "half" => Some(('f', 2)),
            "float32" | "single" => Some(('f', 4)),
            "float64" | "double" | "float" => Some(('f', 8)),
            "int8" => Some(('i', 1)),
            "int16" => Some(('i', 2)),
            "int32" => Some(('i', 4)),
            "int64" | "int" => Some(('i', 8)),
            "uint8" => Some(('u', 1)),
            "uint16" => Some(('u', 2)),
            "uint32" => Some(('u', 4)),
            "uint64" => Some(('u', 8)),
            "complex64" => Some(('c', 8)),
            "complex128" | "complex" => Some(('c', 16)),
            "bool" => Some(('b', 1)),
            _ => None,
        };
        if let Some((kind, size)) = named {
            return Ok(Dtype { kind, size });
        }
        let body = match s.as_bytes().first() {
            Some(b'<' | b'|' | b'=') => &s[1..],
            Some(b'>') => {
                return Err(invalid(format!(
                    "dtype `{s}` is big-endian; CUDA devices are little-endian"
                )))
            }
            _ => s,
        };
        let mut chars = body.chars();
        let kind = chars.next().unwrap_or(' ');
        let size: Option<usize> = chars.as_str().parse().ok();
        match size {
            Some(size) if Self::valid(kind, size) => Ok(Dtype { kind, size }),
            _ => Err(invalid(format!(
                "unsupported dtype `{s}`: use a NumPy numeric type (float16/32/64, int8..int64, \
                 uint8..uint64, complex64/128, bool)"
            ))),
        }
    }

    /// A dtype from a string, a NumPy dtype or scalar type, or anything with a `dtype`.
    pub(crate) fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Dtype> {
        if let Ok(s) = obj.downcast::<PyString>() {
            return Self::parse(&s.to_cow()?);
        }
        // A NumPy dtype (its `str` is the typestr), or an object with one.
        if obj.hasattr("itemsize")? && obj.hasattr("str")? {
            if let Ok(s) = obj.getattr("str")?.extract::<String>() {
                return Self::parse(&s);
            }
        }
        if obj.is_instance_of::<PyType>() {
            // `np.float32`, `float`: NumPy knows their dtype.
            let np = obj.py().import("numpy").map_err(|_| {
                invalid("a dtype given as a type needs NumPy; give a string such as 'float32'")
            })?;
            let d = np.getattr("dtype")?.call1((obj,))?;
            return Self::from_py(&d);
        }
        if obj.hasattr("dtype")? {
            return Self::from_py(&obj.getattr("dtype")?);
        }
        Err(invalid(format!(
            "cannot read a dtype from {}",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        )))
    }

    /// From a `struct` format character of a `memoryview` (`f`, `d`, `i`, `B`, …).
    pub(crate) fn from_format(fmt: &str, itemsize: usize) -> PyResult<Dtype> {
        let f = fmt.trim_start_matches(['@', '=', '<']);
        let kind = match f {
            "e" | "f" | "d" => 'f',
            "b" | "h" | "i" | "l" | "q" | "n" => 'i',
            "B" | "H" | "I" | "L" | "Q" | "N" => 'u',
            "?" => 'b',
            "Zf" | "Zd" => 'c',
            _ => {
                return Err(invalid(format!(
                    "unsupported buffer format `{fmt}` (use a NumPy array of a numeric type)"
                )))
            }
        };
        if !Self::valid(kind, itemsize) {
            return Err(invalid(format!(
                "unsupported buffer format `{fmt}` of {itemsize} bytes"
            )));
        }
        Ok(Dtype {
            kind,
            size: itemsize,
        })
    }
}
