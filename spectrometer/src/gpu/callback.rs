//! The FFT load callbacks' parameters: where each transform's samples lie in the recorder's
//! block, and the divisors the callback needs as multipliers (`sp_index` in
//! `cuda/load_callbacks.cu`).

/// The load callbacks' source (`sp_load_4`, `sp_load_8`, `sp_load_16`).
pub(super) const CALLBACK_SRC: &str = include_str!("../cuda/load_callbacks.cu");

/// The load callbacks' parameter struct (must match `sp_params` in [`CALLBACK_SRC`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(super) struct LoadParams {
    /// Device address to read instead of `dataIn` (0: read `dataIn`, the whole input block).
    pub ptr: u64,
    pub nfft: u32,
    pub spb: u32,
    pub npol: u32,
    pub nant_sel: u32,
    pub ant0: u32,
    pub chan_start: u32,
    pub nchan_per_ant: u32,
    pub ntime: u32,
    /// `nfft`, `spb`, `npol` and `nant_sel` as [`Div32`]s, in that order (set by
    /// [`LoadParams::with_divisors`]).
    pub divisors: [Div32; 4],
}

impl LoadParams {
    /// These parameters with [`LoadParams::divisors`] made from `nfft`, `spb`, `npol` and
    /// `nant_sel`. A zero among them leaves all four zeroed: the callback then loads zeros
    /// (`sp_source`) and divides by nothing.
    pub fn with_divisors(self) -> LoadParams {
        let d = [self.nfft, self.spb, self.npol, self.nant_sel];
        let divisors = if d.contains(&0) {
            [Div32::default(); 4]
        } else {
            d.map(Div32::new)
        };
        LoadParams { divisors, ..self }
    }
}

/// Division of any 32-bit value by a fixed divisor `d ≥ 1` as a multiply-high, an add and two
/// shifts (Granlund and Montgomery, "Division by invariant integers using multiplication",
/// 1994, figure 4.1): with `l = ⌈log2 d⌉`, `m = ⌊2^32 (2^l − d) / d⌋ + 1`, `sh1 = min(l, 1)`,
/// `sh2 = max(l − 1, 0)`, `t = ⌊m n / 2^32⌋`, the quotient is `(t + ((n − t) >> sh1)) >> sh2`
/// (`Div32::divide` in the tests; `sp_div32` in the callback).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(super) struct Div32 {
    /// `m`, which fits in 32 bits because `2^l − d < d`.
    multiplier: u32,
    /// `sh1 | sh2 << 8`.
    shifts: u32,
}

impl Div32 {
    /// The multiplier and shifts of `d`.
    ///
    /// # Panics
    /// If `d` is 0 (callers check: [`LoadParams::with_divisors`]).
    pub fn new(d: u32) -> Div32 {
        assert!(d > 0, "a divisor of 0");
        let l = 32 - (d - 1).leading_zeros();
        let m = ((1u128 << 32) * ((1u128 << l) - u128::from(d))) / u128::from(d) + 1;
        Div32 {
            multiplier: u32::try_from(m).expect("2^l − d < d, so m < 2^32"),
            shifts: l.min(1) | l.saturating_sub(1) << 8,
        }
    }

    /// `n / d`, computed as the callback computes it.
    #[cfg(test)]
    fn divide(self, n: u32) -> u32 {
        let t = ((u64::from(n) * u64::from(self.multiplier)) >> 32) as u32;
        (t + ((n - t) >> (self.shifts & 0xff))) >> (self.shifts >> 8)
    }
}

#[cfg(test)]
mod tests {
    use super::{Div32, LoadParams, CALLBACK_SRC};
    use proptest::prelude::*;

    /// Divisors at the edges of each shift, and the spectrometer's usual ones.
    fn edge_divisors() -> Vec<u32> {
        let mut d = vec![
            1,
            2,
            3,
            5,
            6,
            7,
            51,
            1000,
            3072,
            131_072,
            u32::MAX,
            u32::MAX - 1,
        ];
        for k in 1..32 {
            d.extend([(1u32 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        d
    }

    #[test]
    fn the_callbacks_division_equals_integer_division_at_the_edges() {
        let ns = [
            0u32,
            1,
            2,
            3,
            4095,
            4096,
            1 << 24,
            (1 << 31) - 1,
            1 << 31,
            u32::MAX - 1,
            u32::MAX,
        ];
        for d in edge_divisors() {
            let div = Div32::new(d);
            for &n in &ns {
                assert_eq!(div.divide(n), n / d, "{n} / {d}");
            }
            // Around each multiple of d near the top and the bottom of the range.
            for k in [1u64, 2, 3, u64::from(u32::MAX / d)] {
                for n in [k * u64::from(d), k * u64::from(d) - 1, k * u64::from(d) + 1] {
                    if let Ok(n) = u32::try_from(n) {
                        assert_eq!(div.divide(n), n / d, "{n} / {d}");
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        #[cfg_attr(miri, ignore = "20,000 cases of integer arithmetic: nothing unsafe for Miri to check")]
        fn the_callbacks_division_equals_integer_division(n in any::<u32>(), d in 1u32..) {
            prop_assert_eq!(Div32::new(d).divide(n), n / d);
        }

        #[test]
        #[cfg_attr(miri, ignore = "20,000 cases of integer arithmetic: nothing unsafe for Miri to check")]
        fn small_divisors_too(n in any::<u32>(), d in 1u32..5000) {
            prop_assert_eq!(Div32::new(d).divide(n), n / d);
        }
    }

    #[test]
    fn zeroed_dimensions_leave_the_divisors_zeroed() {
        let p = LoadParams {
            nfft: 8,
            spb: 0,
            npol: 2,
            nant_sel: 1,
            ..LoadParams::default()
        }
        .with_divisors();
        assert_eq!(p.divisors, [Div32::default(); 4]);
        let p = LoadParams { spb: 3, ..p }.with_divisors();
        assert_eq!(p.divisors, [8, 3, 2, 1].map(Div32::new));
    }

    /// The Rust struct and the CUDA one agree: the same fields, in the same order, of the
    /// same sizes (`sp_params` in the callback source), and no padding.
    #[test]
    fn the_parameter_struct_matches_the_callbacks() {
        let body = CALLBACK_SRC
            .split("struct sp_params {")
            .nth(1)
            .and_then(|s| s.split("};").next())
            .expect("sp_params in the source");
        let code: String = body
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ");
        let mut bytes = 0;
        let mut fields = Vec::new();
        for decl in code.split(';').map(str::trim).filter(|d| !d.is_empty()) {
            let (size, names) = if let Some(n) = decl.strip_prefix("unsigned long long ") {
                (8, n)
            } else if let Some(n) = decl.strip_prefix("unsigned int ") {
                (4, n)
            } else {
                panic!("unexpected declaration `{decl}`");
            };
            for name in names.split(',').map(str::trim) {
                bytes += size;
                fields.push(name.to_string());
            }
        }
        assert_eq!(bytes, std::mem::size_of::<LoadParams>());
        assert_eq!(
            fields,
            [
                "ptr",
                "nfft",
                "spb",
                "npol",
                "nant_sel",
                "ant0",
                "chan_start",
                "nchan_per_ant",
                "ntime",
                "nfft_m",
                "nfft_s",
                "spb_m",
                "spb_s",
                "npol_m",
                "npol_s",
                "nant_m",
                "nant_s"
            ]
        );
    }
}
