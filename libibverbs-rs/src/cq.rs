//! Completion channels and completion queues (the control path; polling is
//! inline in verbs.h and goes straight to the provider).

use core::ffi::{c_int, c_uint, c_void};

use verbs_abi::*;

use crate::device::{context_ops, object_ops, release};
use crate::util::{errno_result, minus_one_ret};
use verbs_rt::export;

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    export!(ptr, (context), {
        let ops = context_ops(context)?;
        let create = ops.create_comp_channel.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own context.
        Ok(unsafe { create(context) })
    })
}

/// # Safety
/// `channel` is NULL or a completion channel.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { release(channel, |ops| ops.destroy_comp_channel) }
    })
}

/// Builds a CQ through the provider's `create_cq_ex`; every provider CQ
/// starts as an `ibv_cq`, so the result is returned as one.
///
/// # Safety
/// `context` is NULL or an open context; `channel` NULL or a channel of it.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    export!(ptr, (context, cqe, cq_context, channel, comp_vector), {
        let ops = context_ops(context)?;
        if let Some(legacy) = ops.create_cq {
            // SAFETY: the provider's own context.
            return Ok(unsafe { legacy(context, cqe, channel, comp_vector, cq_context) });
        }
        let create = ops.create_cq_ex.ok_or(libc::EOPNOTSUPP)?;
        let mut attr = ibv_cq_init_attr_ex::zeroed();
        attr.cqe = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
        attr.comp_vector = u32::try_from(comp_vector).map_err(|_| libc::EINVAL)?;
        attr.cq_context = cq_context;
        attr.channel = channel;
        // What ibv_poll_cq reports, so the CQ also works as an ibv_cq_ex.
        attr.wc_flags = IBV_WC_STANDARD_FLAGS.into();
        // SAFETY: the provider's own context and a complete attribute.
        Ok(unsafe { create(context, &mut attr) }.cast::<ibv_cq>())
    })
}

/// # Safety
/// `cq` is NULL or a CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    export!(int, (cq, cqe), {
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(cq) }?;
        let resize = ops.resize_cq.ok_or(libc::EOPNOTSUPP)?;
        if cqe < 1 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the provider's own CQ.
        errno_result(unsafe { resize(cq, cqe) })
    })
}

/// # Safety
/// `cq` is NULL or a CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { release(cq, |ops| ops.destroy_cq) }
    })
}

/// 0, or -1 with errno (the C convention of this call).
///
/// # Safety
/// `channel` is NULL or a channel; `cq` and `cq_context` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    export!(raw::minus_one, (channel, cq, cq_context), {
        if cq.is_null() || cq_context.is_null() {
            return minus_one_ret(Err(libc::EINVAL));
        }
        // SAFETY: forwarded contract.
        match unsafe { object_ops(channel) } {
            Err(e) => minus_one_ret(Err(e)),
            Ok((ops, _)) => match ops.get_cq_event {
                // SAFETY: the provider's own channel; outputs checked non-NULL.
                Some(get) => unsafe { get(channel, cq, cq_context) },
                None => minus_one_ret(Err(libc::EOPNOTSUPP)),
            },
        }
    })
}

/// # Safety
/// `cq` is NULL or a CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    export!(raw::void, (cq, nevents), {
        // SAFETY: forwarded contract.
        let Ok((ops, _)) = (unsafe { object_ops(cq) }) else {
            return;
        };
        match ops.ack_cq_events {
            // SAFETY: the provider's own CQ.
            Some(ack) => unsafe { ack(cq, nevents) },
            // The generic bookkeeping destroy_cq waits on, when the provider
            // leaves it to us.
            // SAFETY: cq is a live CQ whose mutex and cond were initialised by
            // its creator.
            None => unsafe {
                libc::pthread_mutex_lock(core::ptr::addr_of_mut!((*cq).mutex));
                (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents);
                libc::pthread_cond_signal(core::ptr::addr_of_mut!((*cq).cond));
                libc::pthread_mutex_unlock(core::ptr::addr_of_mut!((*cq).mutex));
            },
        }
    })
}
