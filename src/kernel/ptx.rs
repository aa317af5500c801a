//! A kernel's parameter layout read from its PTX `.entry` declaration, so that a module loaded
//! from PTX needs no probing of `cudaFuncGetParamInfo` past the last parameter (a refused call
//! that `compute-sanitizer` reports). Only the declaration list is read:
//!
//! ```text
//! .visible .entry axpy(
//!     .param .u64 .ptr .global .align 4 axpy_param_0,   // a pointer: 8 bytes
//!     .param .f32 axpy_param_1,                          // 4 bytes
//!     .param .align 8 .b8 axpy_param_2[24]               // a struct by value: 24 bytes, aligned 8
//! )
//! ```
//!
//! Each parameter starts at the previous one's end rounded up to its alignment (`.align N`
//! before the type, else the element's size), which is how the parameter buffer is laid out;
//! the `.align` after `.ptr` is the pointee's and does not count. Anything the reader does not
//! recognise gives `None`, and the caller falls back to asking CUDA.

/// The `(offset, size)` of each parameter of the entry `symbol` in `ptx`, or `None` when the
/// text declares no such entry or its list is not understood.
pub(crate) fn entry_params(ptx: &str, symbol: &str) -> Option<Vec<(usize, usize)>> {
    // Comments out first: one may hold an older declaration (`// .entry axpy(...)`).
    let ptx = without_comments(ptx);
    let list = entry_list(&ptx, symbol)?;
    let mut params = Vec::new();
    let mut end = 0usize;
    for decl in list.split(',').map(str::trim) {
        if decl.is_empty() {
            // `()`: no parameters; an empty item elsewhere is not PTX.
            if list.trim().is_empty() {
                break;
            }
            return None;
        }
        let (align, size) = param(decl)?;
        let offset = end.div_ceil(align) * align;
        params.push((offset, size));
        end = offset + size;
    }
    Some(params)
}

/// `ptx` without its `//` line comments and `/* … */` block comments (PTX has no string
/// literals in which those could occur, but for file names in `.file`, which hold no entry).
fn without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    loop {
        // The first comment to start: where, and whether it is a line comment.
        let (at, line) = match (rest.find("//"), rest.find("/*")) {
            (None, None) => {
                out.push_str(rest);
                return out;
            }
            (Some(l), Some(b)) => (l.min(b), l < b),
            (Some(l), None) => (l, true),
            (None, Some(b)) => (b, false),
        };
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        rest = if line {
            // To the end of the line (the newline kept).
            after.find('\n').map_or("", |nl| &after[nl..])
        } else {
            out.push(' ');
            after.find("*/").map_or("", |end| &after[end + 2..])
        };
    }
}

/// The text between the parentheses of `.entry symbol ( … )`.
fn entry_list<'a>(ptx: &'a str, symbol: &str) -> Option<&'a str> {
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry") {
        let after = &rest[at + ".entry".len()..];
        rest = after;
        let name_and_more = after.trim_start();
        if name_and_more.len() == after.len() {
            continue; // `.entry` is a prefix of some other word
        }
        let Some(tail) = name_and_more.strip_prefix(symbol) else {
            continue;
        };
        let Some(open) = tail.trim_start().strip_prefix('(') else {
            continue; // a longer name that starts with `symbol`
        };
        return open.find(')').map(|close| &open[..close]);
    }
    None
}

/// The alignment and size of one `.param` declaration.
fn param(decl: &str) -> Option<(usize, usize)> {
    let mut words = decl.split_whitespace();
    if words.next()? != ".param" {
        return None;
    }
    let mut align = None;
    let mut elem = None;
    let mut after_ptr = false;
    let mut name = None;
    while let Some(w) = words.next() {
        match w {
            ".align" => {
                let n: usize = words.next()?.parse().ok()?;
                if !after_ptr {
                    align = Some(n);
                }
            }
            ".ptr" => after_ptr = true,
            ".global" | ".const" | ".local" | ".shared" => {}
            _ if w.starts_with('.') => elem = Some(scalar_size(w)?),
            _ => {
                name = Some(w);
                break;
            }
        }
    }
    if words.next().is_some() {
        return None;
    }
    let elem = elem?;
    let count = match name?.split_once('[') {
        None => 1,
        Some((_, n)) => n.strip_suffix(']')?.parse().ok()?,
    };
    let align = align.unwrap_or(elem);
    if align == 0 || !align.is_power_of_two() {
        return None;
    }
    Some((align, elem.checked_mul(count)?))
}

/// The size of a PTX scalar type.
fn scalar_size(ty: &str) -> Option<usize> {
    Some(match ty {
        ".b8" | ".u8" | ".s8" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What NVRTC 13.0 writes for `extern "C" __global__ void axpy(float* y, float a, const
    /// float* x, int n)`, with a by-value struct kernel and a parameterless one beside it.
    const PTX: &str = r#"
.version 9.0
.target sm_90
.address_size 64

	// .globl	axpy
.visible .entry axpy(
	.param .u64 .ptr .global .align 4 axpy_param_0,
	.param .f32 axpy_param_1,
	.param .u64 .ptr .global .align 4 axpy_param_2,
	.param .u32 axpy_param_3
)
{
	ret;
}
.visible .entry axpy_struct(
	.param .u8 axpy_struct_param_0,
	.param .align 8 .b8 axpy_struct_param_1[24],
	.param .u16 axpy_struct_param_2
)
{
	ret;
}
.visible .entry nothing()
{
	ret;
}
"#;

    #[test]
    fn layouts_follow_the_declarations() {
        assert_eq!(
            entry_params(PTX, "axpy"),
            Some(vec![(0, 8), (8, 4), (16, 8), (24, 4)])
        );
        assert_eq!(
            entry_params(PTX, "axpy_struct"),
            Some(vec![(0, 1), (8, 24), (32, 2)]),
            "the struct aligned to 8, the u16 after it"
        );
        assert_eq!(entry_params(PTX, "nothing"), Some(vec![]));
    }

    #[test]
    fn unknown_entries_and_declarations_give_none() {
        assert_eq!(entry_params(PTX, "axp"), None, "a prefix of a name");
        assert_eq!(entry_params(PTX, "missing"), None);
        let odd = ".entry k(\n.param .vec2 k_param_0\n)";
        assert_eq!(
            entry_params(odd, "k"),
            None,
            "a type the reader does not know"
        );
        let bad = ".entry k(.param .u32 a, , .param .u32 b)";
        assert_eq!(entry_params(bad, "k"), None);
        let align = ".entry k(.param .align 3 .b8 k_param_0[3])";
        assert_eq!(entry_params(align, "k"), None, "not a power of two");
    }

    #[test]
    fn declarations_in_comments_are_not_read() {
        let ptx = "// .entry k(.param .u32 k_param_0)\n\
                   /* .entry k(.param .u64 k_param_0) */\n\
                   .visible .entry k( // the real one\n\
                   .param .u64 k_param_0, /* a pointer */ .param .f32 k_param_1\n)";
        assert_eq!(entry_params(ptx, "k"), Some(vec![(0, 8), (8, 4)]));
        assert_eq!(
            entry_params("// .entry gone(.param .u32 p)\n", "gone"),
            None,
            "declared only in a comment"
        );
        assert_eq!(without_comments("a /* unclosed"), "a  ");
        assert_eq!(without_comments("a // to the end"), "a ");
    }
}
