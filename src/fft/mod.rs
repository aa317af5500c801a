//! FFT nodes (cuFFT). Work in progress.

use crate::dag::DeviceKey;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys;

/// A cuFFT transform as a DAG node.
#[derive(Clone)]
pub struct FftNode {
    _private: (),
}

impl FftNode {
    pub(crate) fn validate(&self, _name: &str, _key: DeviceKey) -> Result<()> {
        Ok(())
    }
    pub(crate) fn describe_lowering(&self) -> String {
        String::new()
    }
    pub(crate) fn dot_lines(&self) -> Vec<String> {
        vec!["fft".into()]
    }
}

/// Per-lowering FFT state (cuFFT handles and parameter nodes).
#[derive(Default)]
pub(crate) struct LoweringContext {}

impl LoweringContext {
    pub(crate) fn lower(
        &mut self,
        _device: &Device,
        _graph: sys::cudaGraph_t,
        name: &str,
        _deps: &[sys::cudaGraphNode_t],
        _f: &FftNode,
    ) -> Result<sys::cudaGraphNode_t> {
        Err(Error::Invalid(format!(
            "{name}: FFT nodes are not implemented yet"
        )))
    }
    pub(crate) fn absorb(&mut self, _other: LoweringContext) {}
    pub(crate) fn adopt_node_handles_from(&mut self, _other: &LoweringContext) {}
}
