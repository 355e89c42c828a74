//! What siw registers with libibverbs: the device operations, matched to
//! the kernel's siw devices by driver id, and the device objects.

use core::ptr::null_mut;

use verbs_abi::driver::*;
use verbs_abi::uverbs::{RDMA_DRIVER_SIW, SIW_ABI_VERSION};

use crate::context;

/// A static of C data with raw pointers in it: read-only and never
/// changed, so shared between threads as C shares it.
#[repr(transparent)]
pub struct Static<T>(pub T);

// SAFETY: the wrapped tables are immutable and point only to other
// immutable statics.
unsafe impl<T> Sync for Static<T> {}

/// rdma-core's `VERBS_DRIVER_ID(RDMA_DRIVER_SIW)` and the end of the table.
static MATCH: Static<[verbs_match_ent; 2]> = Static([
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent_u {
            driver_id: RDMA_DRIVER_SIW as u64,
        },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_DRIVER_ID,
    },
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent_u { driver_id: 0 },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL,
    },
]);

/// The provider as libibverbs sees it (rdma-core's `siw_dev_ops`).
pub static DEVICE_OPS: Static<verbs_device_ops> = Static(verbs_device_ops {
    name: c"siw".as_ptr(),
    match_min_abi_version: SIW_ABI_VERSION,
    match_max_abi_version: SIW_ABI_VERSION,
    match_table: MATCH.0.as_ptr(),
    static_providers: null_mut(),
    match_device: None,
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
});

/// rdma-core's `siw_device`: nothing beyond the `verbs_device`, which
/// libibverbs fills in.
#[repr(C)]
struct Device {
    base: verbs_device,
}

/// # Safety
/// Called by libibverbs for a device our table matched.
unsafe extern "C" fn alloc_device(_sysfs: *mut verbs_sysfs_dev) -> *mut verbs_device {
    let dev = Box::new(Device {
        base: verbs_device::zeroed(),
    });
    Box::into_raw(dev).cast()
}

/// # Safety
/// `dev` came from `alloc_device` and is no longer used.
unsafe extern "C" fn uninit_device(dev: *mut verbs_device) {
    // SAFETY: per the contract; the verbs_device starts our Device.
    drop(unsafe { Box::from_raw(dev.cast::<Device>()) });
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::CStr;

    #[test]
    fn matches_siw_by_driver_id() {
        let ops = &DEVICE_OPS.0;
        // SAFETY: a static C string.
        assert_eq!(unsafe { CStr::from_ptr(ops.name) }, c"siw");
        assert_eq!(
            (ops.match_min_abi_version, ops.match_max_abi_version),
            (1, 1)
        );
        // SAFETY: our two-row table.
        let rows = unsafe { core::slice::from_raw_parts(ops.match_table, 2) };
        assert_eq!(rows[0].kind, VERBS_MATCH_DRIVER_ID);
        assert_eq!(rows[0].driver_id(), u64::from(RDMA_DRIVER_SIW));
        assert!(rows[1].is_sentinel());
        assert!(ops.alloc_context.is_some() && ops.import_context.is_none());
    }

    #[test]
    fn devices_come_and_go() {
        // SAFETY: allocated and freed by us.
        unsafe {
            let d = alloc_device(null_mut());
            assert!(!d.is_null());
            uninit_device(d);
        }
    }
}
