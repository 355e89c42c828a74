//! What the provider registers with libibverbs: the device operations
//! (`verbs_device_ops`) whose match table takes the kernel's rxe devices,
//! and the device object libibverbs keeps for each.

use core::ffi::c_int;
use core::ptr::null_mut;

use verbs_abi::driver::*;
use verbs_abi::uverbs::RDMA_DRIVER_RXE;

use crate::context;

/// A static the C side reads: raw pointers to other statics, never
/// written, so sharing it between threads is sound.
#[repr(transparent)]
pub struct Shared<T>(pub T);
// SAFETY: the wrapped tables are immutable and point only at other
// immutable statics.
unsafe impl<T> Sync for Shared<T> {}

/// Kernel devices of driver id RDMA_DRIVER_RXE, or, on kernels that do
/// not report driver ids, devices named rxe* (C: `hca_table`).
static MATCH_TABLE: Shared<[verbs_match_ent; 3]> = Shared([
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent_u {
            driver_id: RDMA_DRIVER_RXE as u64,
        },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_DRIVER_ID,
    },
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent_u {
            modalias: c"rdma_device:*Nrxe*".as_ptr(),
        },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_MODALIAS,
    },
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent_u { driver_id: 0 },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL,
    },
]);

pub static DEVICE_OPS: Shared<verbs_device_ops> = Shared(verbs_device_ops {
    name: c"rxe".as_ptr(),
    // On 64-bit machines ABI versions 1 and 2 are the same (C's comment:
    // 32-bit ones need 2, where user and kernel layouts agree).
    match_min_abi_version: if core::mem::size_of::<usize>() == 8 {
        1
    } else {
        2
    },
    match_max_abi_version: 2,
    match_table: &MATCH_TABLE.0 as *const [verbs_match_ent; 3] as *const verbs_match_ent,
    static_providers: null_mut(),
    match_device: None,
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
});

/// libibverbs' device object, and the kernel ABI version it matched with.
#[repr(C)]
struct Device {
    vdev: verbs_device,
    abi_version: c_int,
}

unsafe extern "C" fn alloc_device(sysfs: *mut verbs_sysfs_dev) -> *mut verbs_device {
    // SAFETY: libibverbs passes the device it matched.
    let abi_version = unsafe { (*sysfs).abi_ver } as c_int;
    let dev = Box::new(Device {
        vdev: verbs_device::zeroed(),
        abi_version,
    });
    Box::into_raw(dev).cast()
}

unsafe extern "C" fn uninit_device(vdev: *mut verbs_device) {
    // SAFETY: a device alloc_device made, released once by libibverbs.
    drop(unsafe { Box::from_raw(vdev.cast::<Device>()) });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_rxe_driver_id_then_the_name() {
        let t = &MATCH_TABLE.0;
        assert_eq!(t[0].kind, VERBS_MATCH_DRIVER_ID);
        assert_eq!(t[0].driver_id(), 14);
        assert_eq!(t[1].kind, VERBS_MATCH_MODALIAS);
        // SAFETY: a static C string.
        let alias = unsafe { core::ffi::CStr::from_ptr(t[1].modalias()) };
        assert_eq!(alias.to_str(), Ok("rdma_device:*Nrxe*"));
        assert!(t[2].is_sentinel());
        assert_eq!(DEVICE_OPS.0.match_table, t.as_ptr());
        assert_eq!(DEVICE_OPS.0.match_min_abi_version, 1);
    }
}
