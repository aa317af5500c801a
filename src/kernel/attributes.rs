//! Launch attributes of a kernel node beyond its shape: priority, thread-block cluster
//! dimensions, cooperative launch, the preferred shared-memory carve-out, an L2 access-policy
//! window and the memory-synchronisation domain (`cudaLaunchAttribute*`, set on a graph's kernel
//! node with `cudaGraphKernelNodeSetAttribute`).
//!
//! What can be checked without the device is checked when the attributes are set
//! ([`LaunchAttributes::problem`], with the node's launch shape); what depends on the device
//! (clusters need compute capability 9.0, the window's size limit, how many blocks of a
//! cooperative launch fit at once) when the DAG is validated ([`LaunchAttributes::device_problem`]).

use crate::device::DeviceLimits;
use crate::kernel::{Dim3, LaunchConfig};
use crate::memory::{MemorySpace, Region};
use crate::sys;

/// The most blocks in a thread-block cluster that every device with clusters supports
/// (CUDA's portable cluster size).
pub const MAX_PORTABLE_CLUSTER: u32 = 8;

/// How the L2 cache treats accesses in or out of an access-policy window
/// (`cudaAccessProperty`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessProperty {
    /// Normal caching.
    Normal,
    /// Less likely to persist in L2 (streamed once).
    Streaming,
    /// More likely to persist in L2 (in the set-aside persisting part).
    Persisting,
}

impl AccessProperty {
    fn raw(self) -> sys::cudaAccessProperty {
        use sys::cudaAccessProperty as P;
        match self {
            AccessProperty::Normal => P::cudaAccessPropertyNormal,
            AccessProperty::Streaming => P::cudaAccessPropertyStreaming,
            AccessProperty::Persisting => P::cudaAccessPropertyPersisting,
        }
    }

    fn name(self) -> &'static str {
        match self {
            AccessProperty::Normal => "normal",
            AccessProperty::Streaming => "streaming",
            AccessProperty::Persisting => "persisting",
        }
    }
}

/// An L2 access-policy window (`cudaAccessPolicyWindow`): `hit_ratio` of the accesses to
/// `window` get `hit`, the others `miss`. The node keeps the window's buffer alive.
#[derive(Clone, Debug)]
pub struct AccessPolicy {
    /// The device memory the window covers.
    pub window: Region,
    /// The share of accesses in the window that get `hit` (0 to 1).
    pub hit_ratio: f32,
    /// What those accesses get (usually [`AccessProperty::Persisting`]).
    pub hit: AccessProperty,
    /// What the other accesses in the window get (usually [`AccessProperty::Streaming`]).
    pub miss: AccessProperty,
}

impl PartialEq for AccessPolicy {
    fn eq(&self, o: &AccessPolicy) -> bool {
        std::sync::Arc::ptr_eq(&self.window.alloc, &o.window.alloc)
            && (self.window.offset, self.window.len) == (o.window.offset, o.window.len)
            && self.hit_ratio == o.hit_ratio
            && (self.hit, self.miss) == (o.hit, o.miss)
    }
}

/// Which memory-synchronisation domain a kernel's memory fences use
/// (`cudaLaunchMemSyncDomain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSyncDomain {
    /// The default domain.
    Default,
    /// The remote domain (for kernels whose fences need not wait for the default domain's
    /// traffic, e.g. communication kernels).
    Remote,
}

/// A kernel node's launch attributes (all unset by default). Set them with
/// [`Dag::set_launch_attributes`](crate::Dag::set_launch_attributes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchAttributes {
    /// Launch priority (a lower number is a higher priority, as for streams); honoured when
    /// the graph is instantiated with
    /// [`InstantiateFlags::use_node_priority`](crate::InstantiateFlags::use_node_priority).
    pub priority: Option<i32>,
    /// Thread-block cluster dimensions: each must divide the grid's, and the cluster hold at
    /// most [`MAX_PORTABLE_CLUSTER`] blocks. Needs compute capability 9.0.
    pub cluster: Option<Dim3>,
    /// A cooperative launch: all blocks resident at once (grid-wide synchronisation). The grid
    /// must fit on the device at once.
    pub cooperative: bool,
    /// The preferred shared-memory carve-out, percent of the L1/shared capacity (0 to 100).
    pub shared_mem_carveout: Option<u32>,
    /// An L2 access-policy window.
    pub access_policy: Option<AccessPolicy>,
    /// The memory-synchronisation domain.
    pub mem_sync_domain: Option<MemSyncDomain>,
}

impl LaunchAttributes {
    /// Whether no attribute is set.
    pub fn is_empty(&self) -> bool {
        *self == LaunchAttributes::default()
    }

    /// What is wrong with these attributes for a launch of shape `config`, independently of
    /// the device, if anything.
    pub(crate) fn problem(&self, config: &LaunchConfig) -> Option<String> {
        if let Some(c) = self.cluster {
            let (cd, gd) = (
                [c.x, c.y, c.z],
                [config.grid.x, config.grid.y, config.grid.z],
            );
            if cd.contains(&0) {
                return Some(format!("cluster {c} has a zero dimension"));
            }
            for (i, axis) in ["x", "y", "z"].iter().enumerate() {
                if gd[i] % cd[i] != 0 {
                    return Some(format!(
                        "cluster.{axis} = {} does not divide grid.{axis} = {}",
                        cd[i], gd[i]
                    ));
                }
            }
            let blocks = c.count();
            if blocks > MAX_PORTABLE_CLUSTER as u64 {
                return Some(format!(
                    "cluster {c} has {blocks} blocks, more than the portable {MAX_PORTABLE_CLUSTER}"
                ));
            }
        }
        if let Some(p) = self.shared_mem_carveout {
            if p > 100 {
                return Some(format!("shared-memory carve-out {p}% is over 100%"));
            }
        }
        if let Some(a) = &self.access_policy {
            if !(0.0..=1.0).contains(&a.hit_ratio) {
                return Some(format!(
                    "access-policy hit ratio {} is not between 0 and 1",
                    a.hit_ratio
                ));
            }
            if a.window.len == 0 {
                return Some("the access-policy window is empty".into());
            }
            if a.window.alloc.space != MemorySpace::Device {
                return Some("the access-policy window must be device memory".into());
            }
        }
        None
    }

    /// What is wrong with these attributes on a device with `limits`, if anything.
    pub(crate) fn device_problem(&self, limits: &DeviceLimits) -> Option<String> {
        if self.cluster.is_some() && limits.compute_capability.0 < 9 {
            let (major, minor) = limits.compute_capability;
            return Some(format!(
                "thread-block clusters need compute capability 9.0; the device has {major}.{minor}"
            ));
        }
        if let Some(a) = &self.access_policy {
            if a.window.len > limits.max_access_policy_window {
                return Some(format!(
                    "the access-policy window of {} bytes is larger than the device's {}",
                    a.window.len, limits.max_access_policy_window
                ));
            }
        }
        None
    }

    /// The attributes as CUDA's `(id, value)` pairs, in a fixed order.
    pub(crate) fn raw(&self) -> Vec<(sys::cudaLaunchAttributeID, sys::cudaLaunchAttributeValue)> {
        use sys::cudaLaunchAttributeID as A;
        let mut v = Vec::new();
        // An all-zero union is a valid value of every member; each arm writes one plain member.
        let zero = sys::cudaLaunchAttributeValue { pad: [0; 64] };
        if let Some(p) = self.priority {
            let mut x = zero;
            x.priority = p;
            v.push((A::cudaLaunchAttributePriority, x));
        }
        if let Some(c) = self.cluster {
            let mut x = zero;
            x.clusterDim = sys::cudaLaunchAttributeValue__bindgen_ty_1 {
                x: c.x,
                y: c.y,
                z: c.z,
            };
            v.push((A::cudaLaunchAttributeClusterDimension, x));
        }
        if self.cooperative {
            let mut x = zero;
            x.cooperative = 1;
            v.push((A::cudaLaunchAttributeCooperative, x));
        }
        if let Some(p) = self.shared_mem_carveout {
            let mut x = zero;
            x.sharedMemCarveout = p;
            v.push((A::cudaLaunchAttributePreferredSharedMemoryCarveout, x));
        }
        if let Some(a) = &self.access_policy {
            let mut x = zero;
            x.accessPolicyWindow = sys::cudaAccessPolicyWindow {
                base_ptr: (a.window.alloc.ptr + a.window.offset as u64) as *mut std::ffi::c_void,
                num_bytes: a.window.len,
                hitRatio: a.hit_ratio,
                hitProp: a.hit.raw(),
                missProp: a.miss.raw(),
            };
            v.push((A::cudaLaunchAttributeAccessPolicyWindow, x));
        }
        if let Some(d) = self.mem_sync_domain {
            let mut x = zero;
            x.memSyncDomain = match d {
                MemSyncDomain::Default => {
                    sys::cudaLaunchMemSyncDomain::cudaLaunchMemSyncDomainDefault
                }
                MemSyncDomain::Remote => {
                    sys::cudaLaunchMemSyncDomain::cudaLaunchMemSyncDomainRemote
                }
            };
            v.push((A::cudaLaunchAttributeMemSyncDomain, x));
        }
        v
    }

    /// The attributes in words (DOT labels, recordings), one item each.
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(p) = self.priority {
            v.push(format!("priority {p}"));
        }
        if let Some(c) = self.cluster {
            v.push(format!("cluster {c}"));
        }
        if self.cooperative {
            v.push("cooperative".into());
        }
        if let Some(p) = self.shared_mem_carveout {
            v.push(format!("carve-out {p}%"));
        }
        if let Some(a) = &self.access_policy {
            v.push(format!(
                "L2 window {} B at +{} ({} {}, miss {})",
                a.window.len,
                a.window.offset,
                a.hit_ratio,
                a.hit.name(),
                a.miss.name()
            ));
        }
        if let Some(d) = self.mem_sync_domain {
            v.push(format!(
                "sync domain {}",
                match d {
                    MemSyncDomain::Default => "default",
                    MemSyncDomain::Remote => "remote",
                }
            ));
        }
        v
    }

    /// The attributes as the recording backend writes them: ` priority=-2 cluster=(2,1,1)
    /// cooperative carveout=50 window=0x…+4096:0.6:persisting:streaming sync_domain=remote`.
    pub(crate) fn recording_words(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if let Some(p) = self.priority {
            let _ = write!(s, " priority={p}");
        }
        if let Some(c) = self.cluster {
            let _ = write!(s, " cluster={c}");
        }
        if self.cooperative {
            s.push_str(" cooperative");
        }
        if let Some(p) = self.shared_mem_carveout {
            let _ = write!(s, " carveout={p}");
        }
        if let Some(a) = &self.access_policy {
            let _ = write!(
                s,
                " window={:#x}+{}:{}:{}:{}",
                a.window.alloc.ptr + a.window.offset as u64,
                a.window.len,
                a.hit_ratio,
                a.hit.name(),
                a.miss.name()
            );
        }
        if let Some(d) = self.mem_sync_domain {
            let _ = write!(
                s,
                " sync_domain={}",
                match d {
                    MemSyncDomain::Default => "default",
                    MemSyncDomain::Remote => "remote",
                }
            );
        }
        s
    }

    /// The allocation the node refers to through its attributes (the window's).
    pub(crate) fn window_allocation(&self) -> Option<&std::sync::Arc<crate::memory::Allocation>> {
        self.access_policy.as_ref().map(|a| &a.window.alloc)
    }
}
