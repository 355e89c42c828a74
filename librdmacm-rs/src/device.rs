//! The RDMA devices, opened once per process and shared by every id (as
//! rdma-core's librdmacm does): `rdma_get_devices` hands out these same
//! contexts, and each device gets one default protection domain for ids
//! whose QP is created with a NULL PD.

use std::net::IpAddr;

use parking_lot::Mutex;
use std::sync::OnceLock;
use verbs_abi::*;

use crate::addr;
use crate::error::Res;
use crate::ffi;

pub struct Device {
    pub ctx: *mut ibv_context,
    pub port_cnt: u8,
    /// Node GUID, as the kernel's CM names the device (network order).
    pub guid: u64,
    pub transport: ibv_transport_type,
    /// One of the kernel's RDMA devices, which its CM can name. An rsw
    /// device on the same interface may carry the same node GUID (both
    /// derive it from the MAC).
    pub kernel: bool,
    /// Limits on `initiator_depth` and `responder_resources`.
    pub max_initiator_depth: u8,
    pub max_responder_resources: u8,
    default_pd: Mutex<usize>,
    xrcd: Mutex<usize>,
}

// SAFETY: the context pointer is only handed to libibverbs, whose calls are
// thread-safe; the device is never closed, so the pointer stays valid.
unsafe impl Send for Device {}
// SAFETY: as above; the mutable part (default PD) is behind a mutex.
unsafe impl Sync for Device {}

/// Where a local address lives: device, port and GID table index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    pub dev: usize,
    pub port: u8,
    pub gid_index: u8,
}

static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();

fn open_all() -> Vec<Device> {
    verbs_rt::logging::init();
    let mut out = Vec::new();
    let mut n = 0;
    // SAFETY: `n` is a valid out-parameter. The list is deliberately never
    // freed: the contexts opened from it live as long as the process.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return out;
    }
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` comes from the device list.
        let ctx = unsafe { ffi::ibv_open_device(dev) };
        if ctx.is_null() {
            continue;
        }
        let mut attr = ibv_device_attr::zeroed();
        // SAFETY: `ctx` is open and `attr` a valid buffer.
        if unsafe { ffi::ibv_query_device(ctx, &mut attr) } != 0 {
            continue;
        }
        out.push(Device {
            ctx,
            port_cnt: attr.phys_port_cnt.max(1),
            // SAFETY: `dev` comes from the device list, which is never freed.
            guid: unsafe { ffi::ibv_get_device_guid(dev) },
            // SAFETY: as above.
            transport: unsafe { (*dev).transport_type },
            // SAFETY: as above.
            kernel: is_kernel_device(unsafe { &(*dev).name }),
            max_initiator_depth: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
            max_responder_resources: attr.max_qp_rd_atom.clamp(0, 255) as u8,
            default_pd: Mutex::new(0),
            xrcd: Mutex::new(0),
        });
    }
    if verbs_rt::check::on() {
        crate::check::at_exit(release_default_pds);
    }
    out
}

/// The default PDs this library allocated, released at exit so the misuse
/// checker's leak summary does not count them against the application.
fn release_default_pds() {
    for d in DEVICES.get().map_or(&[][..], |v| &v[..]) {
        let pd = std::mem::replace(&mut *d.default_pd.lock(), 0);
        if pd != 0 {
            // SAFETY: a PD this library allocated and nothing else frees;
            // a refusal (QPs the application leaked on it) leaves it.
            unsafe { ffi::ibv_dealloc_pd(pd as *mut ibv_pd) };
        }
    }
}

/// Every usable device; ENODEV when there is none (the CM has nothing to
/// manage then, and rdma-core fails its first call the same way).
pub fn all() -> Res<&'static [Device]> {
    let d = DEVICES.get_or_init(open_all);
    if d.is_empty() {
        Err(libc::ENODEV)
    } else {
        Ok(d)
    }
}

pub fn get(i: usize) -> &'static Device {
    &DEVICES.get().expect("devices are opened before use")[i]
}

impl Device {
    /// The port's GID table, read live: interfaces may gain addresses while
    /// the process runs.
    pub fn gids(&self, port: u8) -> Vec<[u8; 16]> {
        // SAFETY: the context is open for the life of the process.
        let len = match unsafe { ffi::query_port(self.ctx, port) } {
            Ok(pa) => pa.gid_tbl_len.clamp(0, 256),
            Err(_) => return Vec::new(),
        };
        let mut v = Vec::with_capacity(len as usize);
        for i in 0..len {
            let mut gid = ibv_gid::zeroed();
            // SAFETY: valid context and output buffer.
            if unsafe { ffi::ibv_query_gid(self.ctx, port, i, &mut gid) } != 0 {
                break;
            }
            v.push(gid.raw());
        }
        v
    }

    pub fn port_attr(&self, port: u8) -> Res<ibv_port_attr> {
        // SAFETY: the context is open for the life of the process.
        unsafe { ffi::query_port(self.ctx, port) }
    }

    /// The PD used when an application passes none; allocated on first use
    /// and kept for the life of the process, like the device itself.
    pub fn default_pd(&self) -> Res<*mut ibv_pd> {
        let mut pd = self.default_pd.lock();
        if *pd == 0 {
            // SAFETY: the context is open.
            let p = unsafe { ffi::ibv_alloc_pd(self.ctx) };
            if p.is_null() {
                return Err(crate::error::errno());
            }
            *pd = p as usize;
        }
        Ok(*pd as *mut ibv_pd)
    }
}

impl Device {
    /// The XRC domain for XRC QPs and SRQs of ids that name none: an
    /// anonymous one per device, opened on first use and kept, as
    /// rdma-core does.
    pub fn xrcd(&self) -> Res<*mut ibv_xrcd> {
        let mut x = self.xrcd.lock();
        if *x == 0 {
            let mut attr = ibv_xrcd_init_attr {
                comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
                fd: -1,
                oflags: libc::O_CREAT,
            };
            // SAFETY: the context is open; `attr` is valid.
            let p = unsafe { ffi::open_xrcd(self.ctx, &mut attr) };
            if p.is_null() {
                return Err(crate::error::errno());
            }
            *x = p as usize;
        }
        Ok(*x as *mut ibv_xrcd)
    }
}

/// Whether the kernel has an RDMA device of this name.
fn is_kernel_device(name: &[core::ffi::c_char]) -> bool {
    let bytes: Vec<u8> = name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    !bytes.is_empty()
        && std::path::Path::new("/sys/class/infiniband")
            .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes))
            .exists()
}

/// The kernel device the kernel's CM names by its node GUID.
pub fn by_guid(guid: u64) -> Option<usize> {
    all().ok()?.iter().position(|d| d.kernel && d.guid == guid)
}

/// Whether any kernel device is listed: without one, the kernel's CM has
/// nothing this process could use (its devices have no provider here).
pub fn any_kernel() -> bool {
    all().is_ok_and(|d| d.iter().any(|d| d.kernel))
}

/// The device, port and GID index owning a local IP address.
pub fn find_local(ip: IpAddr) -> Option<Local> {
    let want = addr::gid_of(ip);
    for (dev, d) in all().ok()?.iter().enumerate() {
        for port in 1..=d.port_cnt {
            if let Some(i) = d.gids(port).iter().position(|g| *g == want) {
                return Some(Local {
                    dev,
                    port,
                    gid_index: i as u8,
                });
            }
        }
    }
    None
}
