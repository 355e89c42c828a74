//! The `ibv_cmd_*` calls not yet carried to the kernel: each fails with
//! EOPNOTSUPP (the errno of rdma-core's placeholder operations), never a
//! crash. The README's support table lists them; the providers that use
//! them (mlx5's flow, counters and device memory; hfi1/qib posting through
//! the kernel) keep their other verbs.

use core::ffi::{c_int, c_void};

use verbs_abi::*;

type Ptr = *mut c_void;

macro_rules! pending {
    ($( fn $name:ident($($arg:ident: $ty:ty),* $(,)?); )*) => {$(
        /// Not yet issued to the kernel: EOPNOTSUPP.
        ///
        /// # Safety
        /// Arguments are not dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let _ = ($($arg,)*);
            libc::EOPNOTSUPP
        }
    )*};
}

pending! {
    fn ibv_cmd_create_flow(qp: *mut ibv_qp, flow_id: *mut ibv_flow, flow_attr: *mut ibv_flow_attr, ucmd: Ptr, ucmd_size: usize);
    fn ibv_cmd_destroy_flow(flow_id: *mut ibv_flow);
    fn ibv_cmd_create_wq(ctx: *mut ibv_context, wq_init_attr: *mut ibv_wq_init_attr, wq: *mut ibv_wq, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
    fn ibv_cmd_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_destroy_wq(wq: *mut ibv_wq);
    fn ibv_cmd_create_rwq_ind_table(ctx: *mut ibv_context, init_attr: *mut ibv_rwq_ind_table_init_attr, rwq_ind_table: *mut ibv_rwq_ind_table, resp: Ptr, resp_size: usize);
    fn ibv_cmd_destroy_rwq_ind_table(rwq_ind_table: *mut ibv_rwq_ind_table);
}

/// Reports the first work request as the failing one.
///
/// # Safety
/// `bad_wr` is NULL or writable.
unsafe fn post_pending<T>(wr: *mut T, bad_wr: *mut *mut T) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: checked non-NULL; the caller's slot.
        unsafe { *bad_wr = wr };
    }
    libc::EOPNOTSUPP
}

/// # Safety
/// `bad_wr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_send(
    _qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { post_pending(wr, bad_wr) }
}

/// # Safety
/// `bad_wr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_recv(
    _qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { post_pending(wr, bad_wr) }
}

/// # Safety
/// `bad_wr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_srq_recv(
    _srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { post_pending(wr, bad_wr) }
}
