//! Completion channels and asynchronous events of kernel devices: the
//! kernel's event files, read as rdma-core reads them. An event names its
//! object by the user handle we gave the kernel, which is the object's
//! address.

use core::ffi::{c_int, c_uint, c_void};
use core::mem::size_of;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::context::ops_of;
use super::write::{fail_null, run};

fn read_exact<T: Default>(fd: c_int) -> Result<T, c_int> {
    let mut v = T::default();
    loop {
        // SAFETY: `v` is writable for its size.
        let n = unsafe { libc::read(fd, (&mut v as *mut T).cast(), size_of::<T>()) };
        if n == size_of::<T>() as isize {
            return Ok(v);
        }
        let e = verbs_rt::errno::errno();
        if n < 0 && e == libc::EINTR {
            continue;
        }
        return Err(if n < 0 { e } else { libc::EIO });
    }
}

/// # Safety
/// `ctx` is an open kernel context.
pub(crate) unsafe extern "C" fn create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    let mut resp = ib_uverbs_create_comp_channel_resp::default();
    // SAFETY: a kernel context; the payload begins with `response`.
    let rc = unsafe {
        run(
            ctx,
            IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
            ib_uverbs_create_comp_channel::default(),
            Some(&mut resp),
        )
    };
    if rc != 0 {
        return fail_null(rc);
    }
    let ch = Box::new(ibv_comp_channel {
        context: ctx,
        fd: resp.fd as c_int,
        refcnt: 0,
    });
    Box::into_raw(ch)
}

/// EBUSY while a CQ still uses the channel.
///
/// # Safety
/// `ch` is a channel from [`create_comp_channel`].
pub(crate) unsafe extern "C" fn destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    // SAFETY: per the contract; the context's mutex guards `refcnt`.
    unsafe {
        let ctx = (*ch).context;
        let m = core::ptr::addr_of_mut!((*ctx).mutex);
        libc::pthread_mutex_lock(m);
        if (*ch).refcnt != 0 {
            libc::pthread_mutex_unlock(m);
            return libc::EBUSY;
        }
        libc::close((*ch).fd);
        drop(Box::from_raw(ch));
        libc::pthread_mutex_unlock(m);
    }
    0
}

/// # Safety
/// `ch` is a live channel; `cq` and `cq_context` writable.
pub(crate) unsafe extern "C" fn get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: per the contract.
    let fd = unsafe { (*ch).fd };
    let ev = match read_exact::<ib_uverbs_comp_event_desc>(fd) {
        Ok(ev) => ev,
        Err(e) => {
            verbs_rt::errno::set_errno(e);
            return -1;
        }
    };
    let c = ev.cq_handle as usize as *mut ibv_cq;
    // SAFETY: the kernel hands back the handle we gave, a live CQ (it
    // cannot be destroyed before its events are acknowledged).
    unsafe {
        *cq = c;
        *cq_context = (*c).cq_context;
        if let Ok(ops) = ops_of((*c).context) {
            if let Some(f) = ops.cq_event {
                f(c);
            }
        }
    }
    0
}

/// # Safety
/// `cq` is a live CQ of a kernel context.
pub(crate) unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, n: c_uint) {
    // SAFETY: the CQ's own lock and condition, set up by its creation.
    unsafe {
        libc::pthread_mutex_lock(core::ptr::addr_of_mut!((*cq).mutex));
        (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(n);
        libc::pthread_cond_signal(core::ptr::addr_of_mut!((*cq).cond));
        libc::pthread_mutex_unlock(core::ptr::addr_of_mut!((*cq).mutex));
    }
}

/// # Safety
/// `ctx` is an open kernel context; `event` writable.
pub(crate) unsafe extern "C" fn get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: per the contract.
    let fd = unsafe { (*ctx).async_fd };
    let ev = match read_exact::<ib_uverbs_async_event_desc>(fd) {
        Ok(ev) => ev,
        Err(e) => {
            verbs_rt::errno::set_errno(e);
            return -1;
        }
    };
    let t = ev.event_type as ibv_event_type;
    let p = ev.element as usize as *mut c_void;
    // SAFETY: `event` is the caller's; element pointers are the handles we
    // gave the kernel for live objects.
    unsafe {
        (*event).event_type = t;
        match verbs_abi::provider::async_event_object(t) {
            Some(_) => (*event).element.cq = p.cast(),
            None => (*event).element.port_num = ev.element as c_int,
        }
        if let Ok(ops) = ops_of(ctx) {
            if let Some(f) = ops.async_event {
                f(ctx, event);
            }
        }
    }
    0
}

/// Counts the acknowledgement on the event's object, which its destroy
/// waits for.
///
/// # Safety
/// `event` came from [`get_async_event`].
pub(crate) unsafe extern "C" fn ack_async_event(event: *mut ibv_async_event) {
    use verbs_abi::provider::ObjectKind;
    // SAFETY: the event's object is live until acknowledged; each kind's
    // lock, condition and counter are set up by its creation.
    unsafe {
        let t = (*event).event_type;
        let p = (*event).element.cq.cast::<u8>();
        macro_rules! bump {
            ($ty:ty, $field:ident) => {{
                let o = p.cast::<$ty>();
                libc::pthread_mutex_lock(core::ptr::addr_of_mut!((*o).mutex));
                (*o).$field = (*o).$field.wrapping_add(1);
                libc::pthread_cond_signal(core::ptr::addr_of_mut!((*o).cond));
                libc::pthread_mutex_unlock(core::ptr::addr_of_mut!((*o).mutex));
            }};
        }
        match verbs_abi::provider::async_event_object(t) {
            Some(ObjectKind::Cq) => bump!(ibv_cq, async_events_completed),
            Some(ObjectKind::Qp) => bump!(ibv_qp, events_completed),
            Some(ObjectKind::Srq) => bump!(ibv_srq, events_completed),
            Some(ObjectKind::Wq) => bump!(ibv_wq, events_completed),
            _ => {}
        }
    }
}
