//! ECE between an id and its QP, as rdma-core 44 keeps them in step: a new
//! QP's own ECE becomes the id's (options the program set before are
//! replaced), a passive side's QP is told what the request asked, and the
//! reply's vendor is given to the active side's QP before it goes to RTR.
//! A provider without ECE answers EOPNOTSUPP, which counts as "none".

use super::*;

const NONE: ibv_ece = ibv_ece {
    vendor_id: 0,
    options: 0,
    comp_mask: 0,
};

/// The QP's ECE; zeros where the provider has none.
fn query(qp: *mut ibv_qp) -> Res<ibv_ece> {
    let mut e = NONE;
    // SAFETY: a live QP of this id; `e` is writable.
    match unsafe { ffi::ibv_query_ece(qp, &mut e) } {
        0 => Ok(e),
        libc::EOPNOTSUPP => Ok(NONE),
        r => Err(r),
    }
}

fn set(qp: *mut ibv_qp, vendor_id: u32, options: u32) -> Res<()> {
    let mut e = ibv_ece {
        vendor_id,
        options,
        comp_mask: 0,
    };
    // SAFETY: a live QP of this id; `e` is readable.
    match unsafe { ffi::ibv_set_ece(qp, &mut e) } {
        0 | libc::EOPNOTSUPP => Ok(()),
        r => Err(r),
    }
}

impl CmId {
    /// Right after `rdma_create_qp` made `qp`: its ECE is the id's, and a
    /// request's (when there was one) goes to the QP, or "another vendor,
    /// no options" when the vendors differ.
    pub(super) fn ece_from_new_qp(&self, qp: *mut ibv_qp) -> Res<()> {
        let own = query(qp)?;
        let remote = {
            let mut e = self.ece.lock();
            e.local = (own.vendor_id, own.options);
            e.remote
        };
        if remote.0 == 0 {
            return Ok(());
        }
        if remote.0 != own.vendor_id {
            set(qp, own.vendor_id, 0)
        } else {
            set(qp, remote.0, remote.1)
        }
    }

    /// After the QP's first transitions on the passive side: the options
    /// the QP settled on are what the reply carries.
    pub(super) fn ece_after_init(&self, qp: *mut ibv_qp) -> Res<()> {
        if self.ece.lock().remote.0 == 0 {
            return Ok(());
        }
        let e = query(qp)?;
        self.ece.lock().local.1 = e.options;
        Ok(())
    }

    /// A reply came with `(vendor, options)` for an id with a QP: the QP
    /// learns it before RTR. A vendor other than ours (and not 0, "no
    /// ECE") means the handshake went wrong: EINVAL, as rdma-core.
    pub fn ece_from_reply(&self, qp: *mut ibv_qp, reply: (u32, u32)) -> Res<()> {
        let local_vendor = self.ece.lock().local.0;
        let (vendor, options) = if reply.0 == 0 {
            (local_vendor, 0)
        } else if reply.0 != local_vendor {
            return Err(libc::EINVAL);
        } else {
            reply
        };
        self.ece.lock().remote.0 = reply.0;
        set(qp, vendor, options)
    }

    /// The connection is up: the id's options are what the QP runs with.
    pub fn ece_after_reply(&self, qp: *mut ibv_qp) -> Res<()> {
        let e = query(qp)?;
        self.ece.lock().local.1 = e.options;
        Ok(())
    }
}
