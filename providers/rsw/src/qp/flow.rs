//! `ibv_create_flow` and `ibv_destroy_flow`: steering rules on raw packet
//! QPs (the rules themselves and their matching are `crate::flow`'s). A
//! QP reads its interface's frames while it has a rule, and cannot be
//! destroyed while it has one (EBUSY, as the kernel holds it).

use std::os::raw::c_int;
use std::sync::Weak;

use verbs_abi::*;

use super::checked;
use crate::engine::Qp;
use crate::flow::{self, Rule};
use crate::handles::{Ctx, UNKNOWN_BY_IOCTL};
use crate::util::ptr_or_errno;
use verbs_rt::Handles;

/// The flows handed out and not destroyed.
static FLOWS: Handles<Ctx> = Handles::new();

#[repr(C)]
struct Flow {
    ibv: ibv_flow,
    rule: u64,
    qp: Weak<Qp>,
}

fn create(qp: *mut ibv_qp, attr: *const ibv_flow_attr) -> Result<*mut ibv_flow, c_int> {
    let q = checked(qp, UNKNOWN_BY_IOCTL)?;
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let mut g = q.inner.lock();
    if g.destroyed {
        return Err(libc::EINVAL);
    }
    // Only raw packet QPs take frames as they come off the wire.
    let Some(raw) = g.raw.as_mut() else {
        return Err(libc::EOPNOTSUPP);
    };
    // SAFETY: the caller's attributes: the header, and as many bytes as
    // its `size` says.
    let rule = unsafe { Rule::parse(attr, q.serial, raw.ifindex) }?;
    let id = flow::install(rule);
    if let Err(e) = raw.sock.listen(true) {
        flow::remove(id);
        return Err(e.raw_os_error().unwrap_or(libc::ENOMEM));
    }
    drop(g);
    let f = Box::into_raw(Box::new(Flow {
        ibv: ibv_flow {
            comp_mask: 0,
            context: q.ibv_ctx,
            handle: id as u32,
        },
        rule: id,
        qp: std::sync::Arc::downgrade(&q),
    }));
    FLOWS.insert(f, Ctx(q.ibv_ctx));
    Ok(f as *mut ibv_flow)
}

pub(crate) unsafe extern "C" fn create_flow(
    qp: *mut ibv_qp,
    attr: *mut ibv_flow_attr,
) -> *mut ibv_flow {
    let r = create(qp, attr);
    if let Err(e) = r {
        log::error!("create_flow: refused (errno {e})");
    }
    ptr_or_errno(r)
}

pub(crate) unsafe extern "C" fn destroy_flow(flow: *mut ibv_flow) -> c_int {
    // A handle overwritten since creation names no flow the kernel
    // knows (ENOENT); the flow stays.
    let names = FLOWS.remove_if(flow, |_| {
        // SAFETY: a live flow of ours (in the table, locked).
        let f = unsafe { &*(flow as *const Flow) };
        // SAFETY: the public struct's handle field, ours.
        let h = unsafe { std::ptr::read_volatile(&raw const f.ibv.handle) };
        if h == f.rule as u32 {
            Ok(())
        } else {
            Err(UNKNOWN_BY_IOCTL)
        }
    });
    if let Err(e) = names {
        return e;
    }
    // SAFETY: out of the table, so only this call reclaims it.
    let f = unsafe { Box::from_raw(flow as *mut Flow) };
    flow::remove(f.rule);
    if let Some(q) = f.qp.upgrade() {
        if !flow::has_rules(q.serial) {
            let mut g = q.inner.lock();
            if let Some(r) = g.raw.as_mut() {
                // Reading frames no rule wants would only cost; a failure
                // leaves it reading and dropping them.
                let _ = r.sock.listen(false);
            }
        }
    }
    0
}
