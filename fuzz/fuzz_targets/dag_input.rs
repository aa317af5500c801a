//! The `dag` fuzz target's input: the operations on a DAG ([`Op`]) and their decoding from
//! libFuzzer's bytes (small numbers mostly, now and then an extreme one).

use cudagraph::{Dim3, LaunchConfig};
use libfuzzer_sys::arbitrary::{Result, Unstructured};

/// How many buffers, kernels and events the environment offers (`crate::Env`).
pub(crate) const BUFFERS: u8 = 6;
pub(crate) const KERNELS: u8 = 4;
pub(crate) const EVENTS: u8 = 3;

/// The most operations decoded for one DAG.
pub(crate) const MAX_OPS: usize = 64;
/// The most operations of a child DAG.
pub(crate) const MAX_CHILD_OPS: usize = 16;

/// A region of one of the buffers: `buffer` indexes `crate::Env::region`'s choices; the element
/// range may run past the buffer's end.
#[derive(Debug, Clone)]
pub(crate) struct Reg {
    pub(crate) buffer: u8,
    pub(crate) start: usize,
    pub(crate) end: Option<usize>,
}

/// A node id: an index into the ids handed out so far (removed nodes included), or, past
/// their end, a node of another DAG.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Id(pub(crate) u8);

#[derive(Debug, Clone)]
pub(crate) enum Val {
    U8(u8),
    U16(u16),
    U32(u32),
}

#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Buffer(Reg),
    Bytes(Vec<u8>),
}

/// An advanced layout: `inembed`, `istride`, `idist`, `onembed`, `ostride`, `odist`.
type LayoutSpec = (Vec<i64>, i64, i64, Vec<i64>, i64, i64);

#[derive(Debug, Clone)]
pub(crate) struct Fft {
    pub(crate) kind: u8,
    pub(crate) sizes: Vec<i64>,
    pub(crate) batch: i64,
    pub(crate) layout: Option<LayoutSpec>,
    pub(crate) load: u8,
    pub(crate) store: u8,
    pub(crate) fusion: u8,
    pub(crate) custom_params: usize,
    pub(crate) custom_elem: usize,
    pub(crate) inverse: bool,
    pub(crate) input: Reg,
    pub(crate) output: Reg,
    pub(crate) params: Params,
}

#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) load: u8,
    pub(crate) store: u8,
    pub(crate) scale: f32,
    pub(crate) region: Reg,
    pub(crate) custom: Vec<u8>,
}

#[derive(Debug, Clone)]
pub(crate) struct Attrs {
    pub(crate) priority: Option<i32>,
    pub(crate) cluster: Option<Dim3>,
    pub(crate) cooperative: bool,
    pub(crate) carveout: Option<u32>,
    pub(crate) window: Option<(Reg, f32, u8)>,
    pub(crate) domain: Option<bool>,
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Empty,
    Host,
    Captured(Vec<Reg>),
    Memset(Reg, Val),
    Memset2d(Reg, usize, usize, usize, Val),
    Copy(Reg, Reg),
    Copy2d(Reg, usize, Reg, usize, usize, usize),
    Kernel(u8, LaunchConfig, Vec<Arg>),
    EventRecord(u8),
    EventWait(u8),
    Child(Vec<Op>),
    Fft(Box<Fft>),
    Dependency(Id, Id),
    /// A programmatic edge; `true`: the launch-completion port.
    Programmatic(Id, Id, bool),
    Chain(Vec<Id>),
    FanOut(Id, Vec<Id>),
    FanIn(Vec<Id>, Id),
    Remove(Id),
    Name(Id, String),
    Find(String),
    Place(Id, u8),
    Unplace(Id),
    SetConfig(Id, LaunchConfig),
    SetPriority(Id, i32),
    SetAttributes(Id, Box<Attrs>),
    SetArgs(Id, Vec<Arg>),
    SetMemsetValue(Id, Val),
    SetCopy(Id, Reg, Reg),
    SetEvent(Id, u8),
    SetHostFn(Id),
    SetFftParams(Id, Box<Params>),
}

impl Op {
    pub(crate) fn is_edge(&self) -> bool {
        matches!(
            self,
            Op::Dependency(..)
                | Op::Programmatic(..)
                | Op::Chain(_)
                | Op::FanOut(..)
                | Op::FanIn(..)
        )
    }
}

/// A small number, now and then an extreme one.
pub(crate) fn size(u: &mut Unstructured, small: usize) -> Result<usize> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => usize::MAX,
        1 => usize::MAX / 2 + 1,
        2 => u.arbitrary::<u32>()? as usize,
        _ => u.int_in_range(0..=small)?,
    })
}

pub(crate) fn dim(u: &mut Unstructured) -> Result<u32> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => 0,
        1 => u32::MAX,
        2 => u.arbitrary()?,
        3 => 1 << u.int_in_range(0..=31)?,
        _ => u.int_in_range(1..=1024)?,
    })
}

pub(crate) fn dim3(u: &mut Unstructured) -> Result<Dim3> {
    Ok(Dim3 {
        x: dim(u)?,
        y: if u.ratio(1, 3)? { dim(u)? } else { 1 },
        z: if u.ratio(1, 4)? { dim(u)? } else { 1 },
    })
}

pub(crate) fn config(u: &mut Unstructured) -> Result<LaunchConfig> {
    let c = LaunchConfig::new(dim3(u)?, dim3(u)?);
    Ok(if u.ratio(1, 4)? {
        c.with_shared_mem(u.arbitrary()?)
    } else {
        c
    })
}

pub(crate) fn reg(u: &mut Unstructured) -> Result<Reg> {
    Ok(Reg {
        buffer: u.int_in_range(0..=BUFFERS - 1)?,
        start: if u.ratio(1, 2)? { 0 } else { size(u, 600)? },
        end: if u.ratio(1, 3)? {
            None
        } else {
            Some(size(u, 600)?)
        },
    })
}

pub(crate) fn val(u: &mut Unstructured) -> Result<Val> {
    Ok(match u.int_in_range(0u8..=2)? {
        0 => Val::U8(u.arbitrary()?),
        1 => Val::U16(u.arbitrary()?),
        _ => Val::U32(u.arbitrary()?),
    })
}

pub(crate) fn id(u: &mut Unstructured) -> Result<Id> {
    Ok(Id(u.arbitrary()?))
}

pub(crate) fn ids(u: &mut Unstructured) -> Result<Vec<Id>> {
    let n = u.int_in_range(0..=5)?;
    (0..n).map(|_| id(u)).collect()
}

pub(crate) fn args(u: &mut Unstructured) -> Result<Vec<Arg>> {
    let n = u.int_in_range(0..=5)?;
    (0..n)
        .map(|_| {
            Ok(if u.ratio(1, 3)? {
                Arg::Buffer(reg(u)?)
            } else {
                let n = *u.choose(&[0usize, 1, 2, 3, 4, 8, 16])?;
                Arg::Bytes(u.bytes(n)?.to_vec())
            })
        })
        .collect()
}

pub(crate) fn name(u: &mut Unstructured) -> Result<String> {
    let n = u.int_in_range(0..=12)?;
    Ok(String::from_utf8_lossy(u.bytes(n)?).into_owned())
}

pub(crate) fn fft_size(u: &mut Unstructured) -> Result<i64> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => 0,
        1 => -1,
        2 => i64::MAX,
        3 => u.arbitrary()?,
        _ => u.int_in_range(1..=64)?,
    })
}

pub(crate) fn fft_sizes(u: &mut Unstructured, max: usize) -> Result<Vec<i64>> {
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| fft_size(u)).collect()
}

pub(crate) fn params(u: &mut Unstructured) -> Result<Params> {
    Ok(Params {
        load: u.int_in_range(0..=3)?,
        store: u.int_in_range(0..=3)?,
        scale: u.arbitrary()?,
        region: reg(u)?,
        custom: {
            let n = size(u, 128)?.min(256);
            vec![0u8; n]
        },
    })
}

pub(crate) fn fft(u: &mut Unstructured) -> Result<Fft> {
    Ok(Fft {
        kind: u.int_in_range(0..=5)?,
        sizes: fft_sizes(u, 4)?,
        batch: fft_size(u)?,
        layout: if u.ratio(1, 4)? {
            Some((
                fft_sizes(u, 4)?,
                fft_size(u)?,
                fft_size(u)?,
                fft_sizes(u, 4)?,
                fft_size(u)?,
                fft_size(u)?,
            ))
        } else {
            None
        },
        load: u.int_in_range(0..=5)?,
        store: u.int_in_range(0..=3)?,
        fusion: u.int_in_range(0..=2)?,
        custom_params: size(u, 128)?,
        custom_elem: size(u, 16)?,
        inverse: u.arbitrary()?,
        input: reg(u)?,
        output: reg(u)?,
        params: params(u)?,
    })
}

pub(crate) fn attrs(u: &mut Unstructured) -> Result<Attrs> {
    Ok(Attrs {
        priority: if u.arbitrary()? {
            Some(u.arbitrary()?)
        } else {
            None
        },
        cluster: if u.arbitrary()? { Some(dim3(u)?) } else { None },
        cooperative: u.arbitrary()?,
        carveout: if u.arbitrary()? {
            Some(u.int_in_range(0..=120)?)
        } else {
            None
        },
        window: if u.ratio(1, 3)? {
            Some((reg(u)?, u.arbitrary()?, u.arbitrary()?))
        } else {
            None
        },
        domain: if u.arbitrary()? {
            Some(u.arbitrary()?)
        } else {
            None
        },
    })
}

/// Decodes operations until the input or the budget runs out. `children` counts the child
/// DAGs decoded so far (nested ones included).
pub(crate) fn ops(u: &mut Unstructured, max: usize, depth: usize, children: &mut usize) -> Vec<Op> {
    let mut out = Vec::new();
    while out.len() < max && !u.is_empty() {
        // An operation cut short by the end of the input is dropped.
        match op(u, depth, children) {
            Ok(op) => out.push(op),
            Err(_) => break,
        }
    }
    out
}

pub(crate) fn op(u: &mut Unstructured, depth: usize, children: &mut usize) -> Result<Op> {
    Ok(match u.int_in_range(0u8..=30)? {
        0 => Op::Empty,
        1 => Op::Host,
        2 => {
            let n = u.int_in_range(0..=3)?;
            Op::Captured((0..n).map(|_| reg(u)).collect::<Result<_>>()?)
        }
        3 => Op::Memset(reg(u)?, val(u)?),
        4 => Op::Memset2d(reg(u)?, size(u, 64)?, size(u, 64)?, size(u, 16)?, val(u)?),
        5 | 6 => Op::Copy(reg(u)?, reg(u)?),
        7 => Op::Copy2d(
            reg(u)?,
            size(u, 64)?,
            reg(u)?,
            size(u, 64)?,
            size(u, 64)?,
            size(u, 16)?,
        ),
        8 | 9 => Op::Kernel(u.int_in_range(0..=KERNELS - 1)?, config(u)?, args(u)?),
        10 => Op::EventRecord(u.int_in_range(0..=EVENTS - 1)?),
        11 => Op::EventWait(u.int_in_range(0..=EVENTS - 1)?),
        12 if depth < 2 && *children < 4 => {
            *children += 1;
            Op::Child(ops(u, MAX_CHILD_OPS, depth + 1, children))
        }
        13 => Op::Fft(Box::new(fft(u)?)),
        14..=16 => Op::Dependency(id(u)?, id(u)?),
        17 => Op::Programmatic(id(u)?, id(u)?, u.arbitrary()?),
        18 => Op::Chain(ids(u)?),
        19 => Op::FanOut(id(u)?, ids(u)?),
        20 => Op::FanIn(ids(u)?, id(u)?),
        21 => Op::Remove(id(u)?),
        22 => Op::Name(id(u)?, name(u)?),
        23 => Op::Find(name(u)?),
        24 => Op::Place(id(u)?, u.int_in_range(0..=2)?),
        25 => Op::Unplace(id(u)?),
        26 => match u.int_in_range(0u8..=2)? {
            0 => Op::SetConfig(id(u)?, config(u)?),
            1 => Op::SetPriority(id(u)?, u.arbitrary()?),
            _ => Op::SetAttributes(id(u)?, Box::new(attrs(u)?)),
        },
        27 => Op::SetArgs(id(u)?, args(u)?),
        28 => match u.int_in_range(0u8..=1)? {
            0 => Op::SetMemsetValue(id(u)?, val(u)?),
            _ => Op::SetCopy(id(u)?, reg(u)?, reg(u)?),
        },
        29 => match u.int_in_range(0u8..=1)? {
            0 => Op::SetEvent(id(u)?, u.int_in_range(0..=EVENTS - 1)?),
            _ => Op::SetHostFn(id(u)?),
        },
        _ => Op::SetFftParams(id(u)?, Box::new(params(u)?)),
    })
}
