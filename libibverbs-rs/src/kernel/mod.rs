//! Kernel RDMA devices (ConnectX, EFA, rxe, siw, ...) driven by rdma-core's
//! own providers, as rdma-core 44 drives them.
//!
//! A provider named by a driver file registers itself while it loads
//! (`registry`); discovery finds the kernel's devices and binds each to the
//! first provider whose match table takes it (`scan`, `netlink`). The
//! device list then holds the provider's own `verbs_device`, and every
//! verb on it goes through one table of ours, [`ops::KERNEL_OPS`], which
//! reaches the provider's `verbs_context_ops` through the context's
//! private part (`context`). The provider in turn calls back into this
//! library for the kernel's commands (`cmd`, `write`, `ioctl`) and for
//! its context's life cycle; events are read from the kernel's files
//! (`events`), GID and P_Key tables from the kernel or sysfs (`gid`).
//!
//! Nothing here is reached for rsw devices: they keep their own provider
//! table and never see a command file.

mod cmd;
mod cmd_ah;
mod cmd_buffer;
mod cmd_counters;
mod cmd_cq;
mod cmd_device;
mod cmd_dm;
mod cmd_flow;
mod cmd_flow_action;
mod cmd_issue;
mod cmd_mr;
mod cmd_pd;
mod cmd_post;
mod cmd_qp;
mod cmd_rwq_ind;
mod cmd_srq;
mod cmd_wq;
pub(crate) mod context;
mod events;
mod gid;
pub(crate) mod ioctl;
mod neigh;
mod netlink;
pub(crate) mod ops;
pub(crate) mod registry;
mod scan;
mod write;

use verbs_abi::driver::verbs_device;

pub(crate) use neigh::resolve as resolve_eth_l2;
pub(crate) use netlink::copy_on_fork;

/// A kernel device bound to its provider.
pub(crate) struct KernelDevice {
    /// The provider's device; its first member is the `ibv_device` the
    /// device list hands out.
    pub vdev: *mut verbs_device,
    /// Identity across rediscovery: uverbs name and kernel index.
    pub key: (String, i32),
    /// Node GUID in network byte order.
    pub guid: u64,
}

/// Finds the kernel devices and binds the new ones (`known` tells which
/// keys already have a device, so a device is allocated once).
pub(crate) fn discover(
    known: &dyn Fn(&(String, i32)) -> bool,
) -> Vec<Result<KernelDevice, (String, i32)>> {
    if registry::count() == 0 {
        // No rdma-core provider is installed: nothing could drive a
        // kernel device, and the scan would only cost time.
        return Vec::new();
    }
    let mut out = Vec::new();
    for f in scan::find() {
        let key = (f.sysfs_name.clone(), f.ibdev_idx);
        if known(&key) {
            out.push(Err(key));
            continue;
        }
        if let Some(vdev) = scan::bind(&f) {
            let guid = f
                .node_guid
                .map_or_else(|| sysfs_guid(&f.ibdev_name), u64::to_be);
            out.push(Ok(KernelDevice { vdev, key, guid }));
        }
    }
    out
}

/// `node_guid` from sysfs (`xxxx:xxxx:xxxx:xxxx`), in network order.
fn sysfs_guid(ibdev: &str) -> u64 {
    // SAFETY: a static C string.
    let root = unsafe { core::ffi::CStr::from_ptr(crate::sysfs::ibv_get_sysfs_path()) }
        .to_string_lossy()
        .into_owned();
    std::fs::read_to_string(format!("{root}/class/infiniband/{ibdev}/node_guid"))
        .ok()
        .and_then(|s| u64::from_str_radix(&s.trim().replace(':', ""), 16).ok())
        .map_or(0, u64::to_be)
}
