//! Queue pairs: creation (plain and extended, with the `ibv_wr_*`
//! builders of `ibv_qp_ex`), query, modify, destroy, multicast. The kernel
//! hands back the mmap offsets of the send and receive rings; posting into
//! them is `post` and `wr`.

use core::cell::UnsafeCell;
use core::ffi::c_int;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::{Cmd, CreateQpExResp, CreateQpResp, ExCmd};
use crate::ffi;
use crate::lock::SpinLock;
use crate::queue::Queue;
use crate::wq::{RecvQueue, SendQueue};
use crate::wqe::SqLimits;

#[repr(C)]
pub struct Qp {
    /// What libibverbs and the program see (and write: the state, the
    /// event count, the `ibv_qp_ex` request fields), so never behind a
    /// Rust reference; first, so the pointers agree.
    vqp: UnsafeCell<verbs_qp>,
    pub sq: SpinLock<SendQueue>,
    pub rq: SpinLock<RecvQueue>,
}

impl Qp {
    fn new() -> Box<Qp> {
        Box::new(Qp {
            vqp: UnsafeCell::new(verbs_qp::zeroed()),
            sq: SpinLock::new(SendQueue::default()),
            rq: SpinLock::new(RecvQueue::default()),
        })
    }

    pub fn ibv(&self) -> *mut ibv_qp {
        self.vqp.get().cast()
    }

    /// # Safety
    /// `qp` is a QP of this provider, not yet destroyed.
    pub unsafe fn from_ibv<'a>(qp: *mut ibv_qp) -> &'a Qp {
        // SAFETY: per the contract; `vqp` is the first field.
        unsafe { &*qp.cast::<Qp>() }
    }

    /// # Safety
    /// As for [`Qp::from_ibv`].
    pub unsafe fn from_ex<'a>(qp: *mut ibv_qp_ex) -> &'a Qp {
        // SAFETY: per the contract; `ibv_qp_ex` starts with the `ibv_qp`.
        unsafe { &*qp.cast::<Qp>() }
    }

    /// Maps the rings the kernel made (no receive ring with an SRQ), with
    /// the capabilities the create reported (C: `map_queue_pair`).
    fn map(
        &mut self,
        resp: &rxe_create_qp_resp,
        cap: &ibv_qp_cap,
        has_srq: bool,
    ) -> Result<(), c_int> {
        // SAFETY: the context outlives its QPs; cmd_fd is its command file;
        // the QP type was set by the create.
        let (fd, qp_type) = unsafe {
            let q = &*self.ibv();
            ((*q.context).cmd_fd, q.qp_type)
        };
        if !has_srq {
            *self.rq.get_mut() = RecvQueue {
                queue: Some(Queue::map(fd, &resp.rq_mi)?),
                max_sge: cap.max_recv_sge,
            };
        }
        let sq = self.sq.get_mut();
        sq.queue = Some(Queue::map(fd, &resp.sq_mi)?);
        sq.limits = SqLimits {
            qp_type,
            max_sge: cap.max_send_sge,
            max_inline: cap.max_inline_data,
        };
        Ok(())
    }
}

/// Undoes a create whose mapping failed (the rings mapped so far go with
/// the box).
fn undo(qp: &Qp) {
    // SAFETY: the kernel's QP we just created; the program never saw it.
    unsafe { ffi::ibv_cmd_destroy_qp(qp.ibv()) };
}

/// # Safety
/// `pd` a live PD of an rxe context; `attr` valid.
unsafe fn create(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<*mut ibv_qp, c_int> {
    let mut qp = Qp::new();
    let mut cmd = Cmd::<ib_uverbs_create_qp>::default();
    let mut resp = CreateQpResp::default();
    // SAFETY: live objects; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_create_qp(
            pd,
            qp.ibv(),
            attr,
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    // SAFETY: the program's attribute, its capabilities updated by the
    // create.
    let (cap, has_srq) = unsafe { ((*attr).cap, !(*attr).srq.is_null()) };
    if let Err(e) = qp.map(&resp.drv, &cap, has_srq) {
        undo(&qp);
        return Err(e);
    }
    Ok(Box::into_raw(qp).cast())
}

pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: libibverbs passes a live PD and the program's attribute.
    verbs_rt::errno::ptr_or_errno(unsafe { create(pd, attr) })
}

const SUPPORTED_COMP_MASK: u32 =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
const RC_SEND_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;
const UC_SEND_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV) as u64;
const UD_SEND_OPS: u64 = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;

/// What rxe can create (C: `check_qp_init_attr`): no create flags, and
/// the `ibv_wr_*` operations its transports carry.
pub fn check_init_attr(a: &ibv_qp_init_attr_ex) -> Result<(), c_int> {
    let unsupported = Err(libc::EOPNOTSUPP);
    if a.comp_mask & !SUPPORTED_COMP_MASK != 0 {
        return unsupported;
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return unsupported;
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        let allowed = match a.qp_type {
            IBV_QPT_RC => RC_SEND_OPS,
            IBV_QPT_UC => UC_SEND_OPS,
            IBV_QPT_UD => UD_SEND_OPS,
            _ => return unsupported,
        };
        if a.send_ops_flags & !allowed != 0 {
            return unsupported;
        }
    }
    Ok(())
}

/// `ibv_create_qp_ex` (C: `rxe_create_qp_ex`); `install` fills the
/// `ibv_wr_*` table the program asked for (`wr::install`, from above:
/// the data path sits over the objects it drives).
///
/// # Safety
/// `ctx` a live rxe context; `attr` valid.
pub unsafe fn create_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    install: fn(&mut ibv_qp_ex, u64),
) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: per the contract.
    let a = unsafe { &*attr };
    check_init_attr(a)?;
    let mut qp = Qp::new();
    if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        // SAFETY: the union's `qp_ex` member, ours until returned.
        install(unsafe { &mut qp.vqp.get_mut().u.qp_ex }, a.send_ops_flags);
    }
    let mut cmd = ExCmd::<ib_uverbs_ex_create_qp>::default();
    let mut resp = CreateQpExResp::default();
    // SAFETY: live objects; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_create_qp_ex2(
            ctx,
            qp.vqp.get(),
            attr,
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    qp.vqp.get_mut().comp_mask |= VERBS_QP_EX;
    // SAFETY: the attribute, its capabilities updated by the create.
    let (cap, has_srq) = unsafe { ((*attr).cap, !(*attr).srq.is_null()) };
    if let Err(e) = qp.map(&resp.drv, &cap, has_srq) {
        undo(&qp);
        return Err(e);
    }
    Ok(Box::into_raw(qp).cast())
}

pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let mut cmd = Cmd::<ib_uverbs_query_qp>::default();
    // SAFETY: libibverbs passes a live QP and the program's buffers.
    unsafe { ffi::ibv_cmd_query_qp(qp, attr, attr_mask, init_attr, cmd.as_ptr(), cmd.size()) }
}

pub unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    let mut cmd = Cmd::<ib_uverbs_modify_qp>::default();
    // SAFETY: libibverbs passes a live QP and the program's attribute.
    unsafe { ffi::ibv_cmd_modify_qp(qp, attr, attr_mask, cmd.as_ptr(), cmd.size()) }
}

pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: a QP of ours, freed once (with its mappings) after the
    // kernel let it go.
    unsafe {
        let rc = ffi::ibv_cmd_destroy_qp(qp);
        if rc == 0 {
            drop(Box::from_raw(qp.cast::<Qp>()));
        }
        rc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(qp_type: ibv_qp_type) -> ibv_qp_init_attr_ex {
        // SAFETY: all-zero is a valid ibv_qp_init_attr_ex.
        let mut a: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
        a.qp_type = qp_type;
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a
    }

    #[test]
    fn send_ops_by_transport() {
        let mut a = attr(IBV_QPT_UD);
        assert_eq!(check_init_attr(&a), Ok(()));
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = UD_SEND_OPS;
        assert_eq!(check_init_attr(&a), Ok(()));
        a.send_ops_flags |= u64::from(IBV_QP_EX_WITH_RDMA_WRITE);
        assert_eq!(check_init_attr(&a), Err(libc::EOPNOTSUPP));
        a.qp_type = IBV_QPT_RC;
        assert_eq!(check_init_attr(&a), Ok(()));
        a.send_ops_flags |= u64::from(IBV_QP_EX_WITH_TSO);
        assert_eq!(check_init_attr(&a), Err(libc::EOPNOTSUPP));
        a.qp_type = IBV_QPT_UC;
        a.send_ops_flags = u64::from(IBV_QP_EX_WITH_RDMA_READ);
        assert_eq!(check_init_attr(&a), Err(libc::EOPNOTSUPP));
        let mut x = attr(IBV_QPT_XRC_SEND);
        assert_eq!(check_init_attr(&x), Ok(()));
        x.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        assert_eq!(check_init_attr(&x), Err(libc::EOPNOTSUPP));
    }

    #[test]
    fn no_create_flags_or_other_attributes() {
        let mut a = attr(IBV_QPT_RC);
        a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
        assert_eq!(check_init_attr(&a), Ok(()));
        a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
        assert_eq!(check_init_attr(&a), Err(libc::EOPNOTSUPP));
        let mut b = attr(IBV_QPT_RC);
        b.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
        assert_eq!(check_init_attr(&b), Err(libc::EOPNOTSUPP));
    }
}
