//! Finding kernel RDMA devices and the rdma-core provider that drives each,
//! in rdma-core 44's order: the device list from netlink (sysfs when
//! netlink cannot answer), the uverbs character device of each, then the
//! registered drivers' match tables: driver id first, then the device
//! name, then the modalias of the device's bus device.

use core::ffi::{c_char, c_int};
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;

use verbs_abi::driver::*;
use verbs_abi::*;

use super::netlink;
use super::registry;
use crate::util::warning;

/// `RDMA_DRIVER_UNKNOWN`.
const RDMA_DRIVER_UNKNOWN: u32 = 0;

/// What discovery learns of one device before a driver is chosen.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Found {
    pub ibdev_name: String,
    pub ibdev_idx: i32,
    pub sysfs_name: String,
    pub cdev: libc::dev_t,
    pub abi_ver: u32,
    pub driver_id: u32,
    pub node_type: c_int,
    pub node_guid: Option<u64>,
    pub num_ports: u32,
}

fn sysfs_root() -> String {
    // SAFETY: a static C string.
    unsafe { core::ffi::CStr::from_ptr(crate::sysfs::ibv_get_sysfs_path()) }
        .to_string_lossy()
        .into_owned()
}

fn read_trim(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s.trim_end_matches('\n').to_owned())
}

/// The kernel's `RDMA_NODE_*` as `IBV_NODE_*` (the same numbers, with
/// anything unknown folded to `IBV_NODE_UNKNOWN`).
pub(crate) fn decode_knode_type(k: u32) -> c_int {
    match k {
        1..=7 => k as c_int,
        _ => IBV_NODE_UNKNOWN,
    }
}

/// The device file exists and is the character device discovery named.
fn accessible(sysfs_name: &str, cdev: libc::dev_t) -> bool {
    // A `mem` major is rsw-run's stand-in (/dev/null bound over the
    // name), never a uverbs device.
    if libc::major(cdev) == 1 {
        return false;
    }
    match std::fs::metadata(format!("/dev/infiniband/{sysfs_name}")) {
        Ok(m) => m.rdev() == cdev,
        Err(_) => false,
    }
}

fn from_netlink() -> Option<Vec<Found>> {
    let list = netlink::devices()?;
    let root = sysfs_root();
    let mut out = Vec::new();
    for (d, c) in list {
        let (sysfs_name, cdev, abi_ver, driver_id) = match c {
            Some(c) => (
                c.name,
                netlink::decode_dev(c.dev),
                c.abi as u32,
                c.driver_id.unwrap_or(RDMA_DRIVER_UNKNOWN),
            ),
            None => match uverbs_of(&root, &d.name) {
                Some((n, dev, abi)) => (n, dev, abi, RDMA_DRIVER_UNKNOWN),
                None => continue,
            },
        };
        out.push(Found {
            ibdev_name: d.name,
            ibdev_idx: d.index as i32,
            sysfs_name,
            cdev,
            abi_ver,
            driver_id,
            node_type: decode_knode_type(d.node_type.into()),
            node_guid: Some(d.node_guid),
            num_ports: d.num_ports,
        });
    }
    Some(out)
}

/// The uverbs device whose `ibdev` names `ibdev`, from sysfs.
fn uverbs_of(root: &str, ibdev: &str) -> Option<(String, libc::dev_t, u32)> {
    let dir = format!("{root}/class/infiniband_verbs");
    for e in std::fs::read_dir(&dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "abi_version" {
            continue;
        }
        if read_trim(&format!("{dir}/{name}/ibdev")).as_deref() == Some(ibdev) {
            let (dev, abi) = uverbs_dev_abi(&format!("{dir}/{name}"))?;
            return Some((name, dev, abi));
        }
    }
    None
}

fn uverbs_dev_abi(dir: &str) -> Option<(libc::dev_t, u32)> {
    let dev = read_trim(&format!("{dir}/dev"))?;
    let (ma, mi) = dev.split_once(':')?;
    let cdev = libc::makedev(ma.parse().ok()?, mi.parse().ok()?);
    let abi = read_trim(&format!("{dir}/abi_version"))?.parse().ok()?;
    Some((cdev, abi))
}

/// rdma-core's sysfs fallback: every `infiniband_verbs/uverbsN`.
fn from_sysfs() -> Vec<Found> {
    let root = sysfs_root();
    let dir = format!("{root}/class/infiniband_verbs");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "abi_version")
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let d = format!("{dir}/{name}");
        let Some(ibdev) = read_trim(&format!("{d}/ibdev")) else {
            continue;
        };
        let Some((cdev, abi_ver)) = uverbs_dev_abi(&d) else {
            continue;
        };
        let node_type = read_trim(&format!("{root}/class/infiniband/{ibdev}/node_type"))
            .and_then(|v| v.split(':').next().and_then(|n| n.trim().parse().ok()))
            .map_or(IBV_NODE_UNKNOWN, decode_knode_type);
        out.push(Found {
            ibdev_name: ibdev,
            ibdev_idx: -1,
            sysfs_name: name,
            cdev,
            abi_ver,
            driver_id: RDMA_DRIVER_UNKNOWN,
            node_type,
            node_guid: None,
            num_ports: 0,
        });
    }
    out
}

/// The kernel's RDMA devices that have a usable uverbs device.
pub(crate) fn find() -> Vec<Found> {
    let list = from_netlink().unwrap_or_else(from_sysfs);
    list.into_iter()
        .filter(|f| accessible(&f.sysfs_name, f.cdev))
        .collect()
}

fn set_c(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n..].fill(0);
}

fn c_str(src: &[c_char]) -> String {
    let b: Vec<u8> = src
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// A C `verbs_sysfs_dev` for `f`, allocated as rdma-core does (it is
/// handed to the provider and lives as long as its device).
fn make_sysfs_dev(f: &Found) -> *mut verbs_sysfs_dev {
    // SAFETY: calloc of the struct's size; zero is valid for every field.
    let p = unsafe { libc::calloc(1, core::mem::size_of::<verbs_sysfs_dev>()) }
        .cast::<verbs_sysfs_dev>();
    if p.is_null() {
        return p;
    }
    // SAFETY: freshly allocated and zeroed, ours alone.
    let s = unsafe { &mut *p };
    set_c(&mut s.sysfs_name, &f.sysfs_name);
    s.sysfs_cdev = f.cdev;
    set_c(&mut s.ibdev_name, &f.ibdev_name);
    set_c(
        &mut s.ibdev_path,
        &format!("{}/class/infiniband/{}", sysfs_root(), f.ibdev_name),
    );
    if let Some(g) = f.node_guid {
        s.node_guid = g;
        s.flags |= VSYSFS_READ_NODE_GUID;
    }
    s.driver_id = f.driver_id;
    s.node_type = f.node_type;
    s.ibdev_idx = f.ibdev_idx;
    s.num_ports = f.num_ports;
    s.abi_ver = f.abi_ver;
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut s.time_created) };
    p
}

/// `fnmatch(pattern, value, 0) == 0`.
fn fnmatch(pattern: *const c_char, value: &str) -> bool {
    let Ok(v) = CString::new(value) else {
        return false;
    };
    // SAFETY: both are NUL-terminated strings.
    unsafe { libc::fnmatch(pattern, v.as_ptr(), 0) == 0 }
}

fn match_modalias(ent: &verbs_match_ent, value: &str) -> bool {
    match ent.kind {
        // SAFETY: a modalias row's union holds its pattern string.
        VERBS_MATCH_MODALIAS => fnmatch(unsafe { ent.u.modalias }, value),
        VERBS_MATCH_PCI => {
            let pat = format!("pci:v{:08X}d{:08X}sv*", ent.vendor, ent.device);
            let Ok(p) = CString::new(pat) else {
                return false;
            };
            fnmatch(p.as_ptr(), value)
        }
        _ => false,
    }
}

/// The entries of a match table, up to its sentinel.
fn table(ops: &verbs_device_ops) -> Vec<&'static verbs_match_ent> {
    let mut out = Vec::new();
    let mut p = ops.match_table;
    if p.is_null() {
        return out;
    }
    // SAFETY: a provider's match table is static and ends with a sentinel.
    unsafe {
        while (*p).kind != VERBS_MATCH_SENTINEL {
            out.push(&*p);
            p = p.add(1);
        }
    }
    out
}

fn match_driver_id(ops: &verbs_device_ops, s: &verbs_sysfs_dev) -> *const verbs_match_ent {
    if s.driver_id == RDMA_DRIVER_UNKNOWN {
        return core::ptr::null();
    }
    table(ops)
        .into_iter()
        .find(|e| e.kind == VERBS_MATCH_DRIVER_ID && e.driver_id() == u64::from(s.driver_id))
        .map_or(core::ptr::null(), |e| e as *const _)
}

fn match_in_table(ops: &verbs_device_ops, value: &str) -> *const verbs_match_ent {
    table(ops)
        .into_iter()
        .find(|e| match_modalias(e, value))
        .map_or(core::ptr::null(), |e| e as *const _)
}

fn modalias(s: &mut verbs_sysfs_dev) -> String {
    if s.flags & VSYSFS_READ_MODALIAS == 0 {
        s.flags |= VSYSFS_READ_MODALIAS;
        let path = format!("{}/device/modalias", c_str(&s.ibdev_path));
        let v = read_trim(&path).unwrap_or_default();
        set_c(&mut s.modalias, &v);
    }
    c_str(&s.modalias)
}

/// rdma-core's `match_device`: table match, then the driver's own check,
/// then the kernel ABI range.
fn match_device(ops: &verbs_device_ops, s: &mut verbs_sysfs_dev) -> bool {
    if !ops.match_table.is_null() {
        s.r#match = match_driver_id(ops, s);
        if s.r#match.is_null() {
            s.r#match = match_in_table(ops, &format!("rdma_device:N{}", c_str(&s.ibdev_name)));
        }
        if s.r#match.is_null() {
            let m = modalias(s);
            if !m.is_empty() {
                s.r#match = match_in_table(ops, &m);
            }
        }
    }
    match ops.match_device {
        Some(f) => {
            // SAFETY: the provider's own check, given a complete sysfs dev.
            let ok = unsafe { f(s) };
            if !ok {
                return false;
            }
        }
        None => {
            if s.r#match.is_null() {
                return false;
            }
        }
    }
    if s.abi_ver < ops.match_min_abi_version || s.abi_ver > ops.match_max_abi_version {
        warning!(
            "driver {} does not support the kernel ABI of {} (supports {} to {}) for device {}",
            registry::name(ops),
            s.abi_ver,
            ops.match_min_abi_version,
            ops.match_max_abi_version,
            c_str(&s.ibdev_path)
        );
        return false;
    }
    true
}

/// The transport of a node type (rdma-core's `try_driver`).
fn transport_of(node_type: c_int) -> c_int {
    match node_type {
        IBV_NODE_CA | IBV_NODE_SWITCH | IBV_NODE_ROUTER => IBV_TRANSPORT_IB,
        IBV_NODE_RNIC => IBV_TRANSPORT_IWARP,
        IBV_NODE_USNIC => IBV_TRANSPORT_USNIC,
        IBV_NODE_USNIC_UDP => IBV_TRANSPORT_USNIC_UDP,
        IBV_NODE_UNSPECIFIED => IBV_TRANSPORT_UNSPECIFIED,
        _ => IBV_TRANSPORT_UNKNOWN,
    }
}

fn try_driver(ops: &'static verbs_device_ops, s: *mut verbs_sysfs_dev) -> *mut verbs_device {
    // SAFETY: our own allocation, not yet shared.
    if !match_device(ops, unsafe { &mut *s }) {
        return core::ptr::null_mut();
    }
    let Some(alloc) = ops.alloc_device else {
        return core::ptr::null_mut();
    };
    // SAFETY: the provider allocates its device from a matched sysfs dev.
    let vdev = unsafe { alloc(s) };
    if vdev.is_null() {
        warning!(
            "couldn't allocate device for {}",
            // SAFETY: ours.
            c_str(unsafe { &(*s).ibdev_path })
        );
        return vdev;
    }
    // SAFETY: the provider's new device, whose first member is the
    // ibv_device; `s` is ours.
    unsafe {
        let v = &mut *vdev;
        let s = &*s;
        v.ops = ops;
        v.refcount.store(1, core::sync::atomic::Ordering::Relaxed);
        v.device.node_type = s.node_type;
        v.device.transport_type = transport_of(s.node_type);
        set_c(&mut v.device.dev_name, &c_str(&s.sysfs_name));
        set_c(
            &mut v.device.dev_path,
            &format!(
                "{}/class/infiniband_verbs/{}",
                sysfs_root(),
                c_str(&s.sysfs_name)
            ),
        );
        set_c(&mut v.device.name, &c_str(&s.ibdev_name));
        let path = c_str(&s.ibdev_path);
        set_c(&mut v.device.ibdev_path, &path);
        v.sysfs = s as *const verbs_sysfs_dev as *mut verbs_sysfs_dev;
    }
    vdev
}

/// The provider device for `f`, or None when no registered driver takes it.
pub(crate) fn bind(f: &Found) -> Option<*mut verbs_device> {
    let drivers = registry::drivers();
    let s = make_sysfs_dev(f);
    if s.is_null() {
        return None;
    }
    // Driver ids first, as rdma-core does; then every driver in order.
    if f.driver_id != RDMA_DRIVER_UNKNOWN {
        for ops in &drivers {
            // SAFETY: ours.
            if !match_driver_id(ops, unsafe { &*s }).is_null() {
                let v = try_driver(ops, s);
                if !v.is_null() {
                    return Some(v);
                }
            }
        }
    }
    for ops in &drivers {
        let v = try_driver(ops, s);
        if !v.is_null() {
            return Some(v);
        }
    }
    // SAFETY: ours, never handed out.
    unsafe { libc::free(s.cast()) };
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_transport_types() {
        assert_eq!(decode_knode_type(1), IBV_NODE_CA);
        assert_eq!(decode_knode_type(4), IBV_NODE_RNIC);
        assert_eq!(decode_knode_type(0), IBV_NODE_UNKNOWN);
        assert_eq!(decode_knode_type(99), IBV_NODE_UNKNOWN);
        assert_eq!(transport_of(IBV_NODE_CA), IBV_TRANSPORT_IB);
        assert_eq!(transport_of(IBV_NODE_RNIC), IBV_TRANSPORT_IWARP);
        assert_eq!(transport_of(IBV_NODE_UNKNOWN), IBV_TRANSPORT_UNKNOWN);
    }

    #[test]
    fn match_tables_in_rdma_core_order() {
        let name = c"rdma_device:Nrxe*";
        let tbl = [
            verbs_match_ent {
                driver_data: core::ptr::null_mut(),
                u: verbs_match_ent_u { driver_id: 18 },
                vendor: 0,
                device: 0,
                kind: VERBS_MATCH_DRIVER_ID,
            },
            verbs_match_ent {
                driver_data: core::ptr::null_mut(),
                u: verbs_match_ent_u {
                    modalias: name.as_ptr(),
                },
                vendor: 0,
                device: 0,
                kind: VERBS_MATCH_MODALIAS,
            },
            verbs_match_ent {
                driver_data: core::ptr::null_mut(),
                u: verbs_match_ent_u { driver_id: 0 },
                vendor: 0x15b3,
                device: 0x1017,
                kind: VERBS_MATCH_PCI,
            },
            // SAFETY: all-zero is the sentinel.
            unsafe { core::mem::zeroed() },
        ];
        // SAFETY: all-zero is a valid (empty) ops table.
        let mut ops: verbs_device_ops = unsafe { core::mem::zeroed() };
        ops.match_table = tbl.as_ptr();
        assert_eq!(table(&ops).len(), 3);
        assert_eq!(
            match_in_table(&ops, "rdma_device:Nrxe0"),
            &tbl[1] as *const _
        );
        assert!(match_in_table(&ops, "rdma_device:Nsiw0").is_null());
        assert_eq!(
            match_in_table(
                &ops,
                "pci:v000015B3d00001017sv000015B3sd00000001bc02sc00i00"
            ),
            &tbl[2] as *const _
        );
        let f = Found {
            ibdev_name: "rxe0".into(),
            driver_id: 18,
            ..Default::default()
        };
        let s = make_sysfs_dev(&f);
        // SAFETY: ours.
        assert_eq!(match_driver_id(&ops, unsafe { &*s }), &tbl[0] as *const _);
        // SAFETY: ours.
        unsafe { libc::free(s.cast()) };
    }
}
