//! rdma-core providers that registered themselves: their constructors call
//! `verbs_register_driver_34` while `dlopen` loads them.

use core::ffi::{c_char, CStr};

use parking_lot::Mutex;
use verbs_abi::driver::verbs_device_ops;
use verbs_rt::export;

/// Every registered `verbs_device_ops`, in registration order (rdma-core's
/// `driver_list`). The tables are static data of libraries that are never
/// unloaded.
static DRIVERS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The registered drivers, in order.
pub(crate) fn drivers() -> Vec<&'static verbs_device_ops> {
    DRIVERS
        .lock()
        .iter()
        // SAFETY: registered tables are static for the life of the process.
        .map(|&p| unsafe { &*(p as *const verbs_device_ops) })
        .collect()
}

/// How many drivers have registered so far (to tell whether a `dlopen`
/// just registered one).
pub(crate) fn count() -> usize {
    DRIVERS.lock().len()
}

/// The name a driver registered under.
pub(crate) fn name(ops: &verbs_device_ops) -> String {
    if ops.name.is_null() {
        return "(null)".to_owned();
    }
    // SAFETY: a registered table's name is a static C string.
    unsafe { CStr::from_ptr(ops.name as *const c_char) }
        .to_string_lossy()
        .into_owned()
}

/// Called by rdma-core providers from a constructor when loaded.
///
/// # Safety
/// `ops` is NULL or a `struct verbs_device_ops` that lives as long as the
/// process.
#[no_mangle]
pub unsafe extern "C" fn verbs_register_driver_34(ops: *const verbs_device_ops) {
    export!(raw::void, untraced, {
        if ops.is_null() {
            return;
        }
        let mut list = DRIVERS.lock();
        if !list.contains(&(ops as usize)) {
            list.push(ops as usize);
        }
    })
}
