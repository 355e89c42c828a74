//! Address handles and multicast attachment. (rdma-core's `ibv_cmd_*` helpers; see `cmd`.)

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_issue::destroy_err;
use super::write::{legacy, ptr_u64, run};
use verbs_rt::export;

/// # Safety
/// `pd` live; `ah` the provider's new AH; `resp` its response buffer.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_ah(
    pd: *mut ibv_pd,
    ah: *mut ibv_ah,
    attr: *mut ibv_ah_attr,
    resp: *mut ib_uverbs_create_ah_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &*attr;
            let mut req = super::write::Req {
                hdr: ib_uverbs_cmd_hdr::default(),
                body: ib_uverbs_create_ah {
                    response: ptr_u64(resp),
                    user_handle: ptr_u64(ah),
                    pd_handle: (*pd).handle,
                    reserved: 0,
                    attr: ib_uverbs_ah_attr {
                        grh: ib_uverbs_global_route {
                            dgid: a.grh.dgid.raw,
                            flow_label: a.grh.flow_label,
                            sgid_index: a.grh.sgid_index,
                            hop_limit: a.grh.hop_limit,
                            traffic_class: a.grh.traffic_class,
                            reserved: 0,
                        },
                        dlid: a.dlid,
                        sl: a.sl,
                        src_path_bits: a.src_path_bits,
                        static_rate: a.static_rate,
                        is_global: a.is_global,
                        port_num: a.port_num,
                        reserved: 0,
                    },
                },
            };
            let rc = legacy(
                (*pd).context,
                IB_USER_VERBS_CMD_CREATE_AH,
                (&mut req as *mut super::write::Req<ib_uverbs_create_ah>).cast(),
                size_of::<super::write::Req<ib_uverbs_create_ah>>(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            (*ah).handle = (*resp).ah_handle;
            (*ah).context = (*pd).context;
        }
        0
    })
}

/// # Safety
/// `ah` a live AH of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        let mut rc = unsafe {
            run::<_, ()>(
                (*ah).context,
                IB_USER_VERBS_CMD_DESTROY_AH,
                ib_uverbs_destroy_ah {
                    ah_handle: (*ah).handle,
                },
                None,
            )
        };
        if destroy_err(&mut rc) {
            return rc;
        }
        0
    })
}

/// # Safety
/// `qp` a live QP of a kernel context; `gid` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            run::<_, ()>(
                (*qp).context,
                IB_USER_VERBS_CMD_ATTACH_MCAST,
                ib_uverbs_attach_mcast {
                    gid: (*gid).raw,
                    qp_handle: (*qp).handle,
                    mlid: lid,
                    reserved: 0,
                },
                None,
            )
        }
    })
}

/// # Safety
/// `qp` a live QP of a kernel context; `gid` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        let mut rc = unsafe {
            run::<_, ()>(
                (*qp).context,
                IB_USER_VERBS_CMD_DETACH_MCAST,
                ib_uverbs_detach_mcast {
                    gid: (*gid).raw,
                    qp_handle: (*qp).handle,
                    mlid: lid,
                    reserved: 0,
                },
                None,
            )
        };
        if destroy_err(&mut rc) {
            return rc;
        }
        0
    })
}
