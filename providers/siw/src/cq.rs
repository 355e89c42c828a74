//! Completion queues: the kernel writes CQEs into a ring mapped here and
//! reads, after the ring, a control word we arm it with. Polling and
//! arming therefore never enter the kernel.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::{addr_of_mut, null_mut};
use core::sync::atomic::{AtomicU32, Ordering};

use verbs_abi::uverbs::*;
use verbs_abi::*;
use verbs_rt::errno::set_errno;

use crate::abi::{CreateCqReq, CreateCqResp};
use crate::lock::SpinLock;
use crate::ring::Ring;
use crate::{ffi, wqe};

/// rdma-core's `siw_cq`: the `ibv_cq` first, so the pointer libibverbs and
/// the program hold is ours.
#[repr(C)]
pub struct Cq {
    /// In a cell: libibverbs and the program write it (event counts, the
    /// context of the object) while we hold a reference to the rest.
    base: UnsafeCell<ibv_cq>,
    id: u32,
    ring: Ring<siw_cqe>,
    /// The running position of the next CQE to take; the lock makes a
    /// poll one consumer.
    get: SpinLock<u32>,
}

impl Cq {
    /// Our CQ behind an `ibv_cq` of ours.
    ///
    /// # Safety
    /// `cq` is one of our live CQs.
    pub unsafe fn from_base<'a>(cq: *mut ibv_cq) -> &'a Cq {
        // SAFETY: the ibv_cq starts our repr(C) Cq.
        unsafe { &*cq.cast::<Cq>() }
    }

    /// The kernel's id of the CQ (for messages).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The control word after the CQEs: our arming, the kernel's
    /// disarming (`SIW_NOTIFY_*`).
    fn notify_word(&self) -> &AtomicU32 {
        // SAFETY: the mapping holds a `siw_cq_ctrl` after the CQEs (mapped
        // so in `create`), 8-aligned; its `flags` is shared with the kernel
        // and only accessed atomically.
        unsafe { &*self.ring.tail().cast::<AtomicU32>() }
    }

    /// Takes up to `max` completions in order, handing each to `out` with
    /// its index; returns how many.
    pub fn poll(&self, max: usize, mut out: impl FnMut(usize, ibv_wc)) -> usize {
        let mut get = self.get.lock();
        let mut n = 0;
        while n < max && self.ring.is_valid(*get, Ordering::Acquire) {
            out(n, wqe::wc_of(&self.ring.read(*get)));
            self.ring.clear(*get);
            *get = get.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// Arms the CQ: the kernel signals the channel at the next completion
    /// (or the next solicited one) and disarms it.
    pub fn arm(&self, solicited_only: bool) {
        let flags = if solicited_only {
            SIW_NOTIFY_SOLICITED
        } else {
            SIW_NOTIFY_SOLICITED | SIW_NOTIFY_NEXT_COMPLETION
        };
        self.notify_word().store(flags, Ordering::SeqCst);
    }
}

/// # Safety
/// `ctx` is one of our contexts; `channel` NULL or one of its channels.
pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // The kernel learns the CQ's address (its user handle, which events
    // carry) at creation, so the CQ is allocated first and filled after.
    let mut cq = Box::<Cq>::new_uninit();
    let p = cq.as_mut_ptr();
    // SAFETY: a field of our allocation.
    let base = unsafe {
        let cell = addr_of_mut!((*p).base);
        cell.write(UnsafeCell::new(ibv_cq::zeroed()));
        UnsafeCell::raw_get(cell)
    };
    let mut req = CreateCqReq::default();
    let mut resp = CreateCqResp::default();
    let (c, cs) = req.buf();
    let (r, rs) = resp.buf();
    // SAFETY: our new CQ and buffers; the channel is the caller's.
    let rc = unsafe { ffi::ibv_cmd_create_cq(ctx, cqe, channel, comp_vector, base, c, cs, r, rs) };
    if rc != 0 {
        log::error!("siw: CQ creation failed: errno {rc}");
        set_errno(rc);
        return null_mut();
    }
    let u = resp.drv;
    let ring = if u64::from(SIW_INVAL_UOBJ_KEY) == u.cq_key {
        log::error!("siw: CQ[{}]: the kernel has no mapping for it", u.cq_id);
        Err(libc::ENOMEM)
    } else {
        // SAFETY: a live context.
        let fd = unsafe { (*ctx).cmd_fd };
        Ring::map(fd, u.cq_key, u.num_cqe, size_of::<siw_cq_ctrl>())
    };
    let ring = match ring {
        Ok(r) => r,
        Err(e) => {
            log::error!("siw: CQ[{}] mapping failed: errno {e}", u.cq_id);
            // SAFETY: the kernel CQ we just made; its memory is plain.
            unsafe { ffi::ibv_cmd_destroy_cq(base) };
            set_errno(e);
            return null_mut();
        }
    };
    // SAFETY: the remaining fields, then the whole is initialised.
    let cq = unsafe {
        addr_of_mut!((*p).id).write(u.cq_id);
        addr_of_mut!((*p).ring).write(ring);
        addr_of_mut!((*p).get).write(SpinLock::new(0));
        cq.assume_init()
    };
    // Created disarmed, as rdma-core's siw does.
    cq.notify_word().store(SIW_NOTIFY_NOT, Ordering::SeqCst);
    Box::into_raw(cq).cast()
}

/// # Safety
/// `cq` is one of our CQs, no longer used by any QP.
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: per the contract.
    let rc = unsafe { ffi::ibv_cmd_destroy_cq(cq) };
    if rc == 0 {
        // SAFETY: allocated by create_cq; the kernel object is gone, the
        // ring is unmapped with it.
        drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
    }
    rc
}

/// # Safety
/// `cq` is one of our CQs; `wc` holds `num_entries` completions.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    let max = usize::try_from(num_entries).unwrap_or(0);
    // SAFETY: per the contract.
    let cq = unsafe { Cq::from_base(cq) };
    cq.poll(max, |i, c| {
        // SAFETY: i < num_entries, inside the caller's array.
        unsafe { wc.add(i).write(c) }
    }) as c_int
}

/// # Safety
/// `cq` is one of our CQs.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: per the contract.
    unsafe { Cq::from_base(cq) }.arm(solicited_only != 0);
    0
}

#[cfg(test)]
impl Cq {
    /// A CQ of `n` CQEs over anonymous memory.
    pub fn for_test(n: u32) -> Cq {
        let len = n as usize * size_of::<siw_cqe>() + size_of::<siw_cq_ctrl>();
        Cq {
            base: UnsafeCell::new(ibv_cq::zeroed()),
            id: 3,
            ring: Ring::new(crate::mapping::Mapping::anonymous(len), n).unwrap(),
            get: SpinLock::new(0),
        }
    }

    /// The kernel's side: a completion at position `pos`.
    pub fn complete_for_test(&self, pos: u32, cqe: &siw_cqe) {
        self.ring.publish(pos, cqe, SIW_WQE_VALID);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cq(n: u32) -> Cq {
        Cq::for_test(n)
    }

    /// The kernel's side: a completion at position `pos`.
    fn complete(cq: &Cq, pos: u32, id: u64) {
        let cqe = siw_cqe {
            id,
            opcode: SIW_OP_SEND,
            bytes: 8,
            qp_id: 1,
            ..Default::default()
        };
        cq.ring.publish(pos, &cqe, SIW_WQE_VALID);
    }

    #[test]
    fn poll_takes_in_order_and_returns_slots() {
        let cq = cq(4);
        let mut got = Vec::new();
        assert_eq!(cq.poll(8, |_, w| got.push(w.wr_id)), 0);
        for pos in 0..3 {
            complete(&cq, pos, 100 + u64::from(pos));
        }
        assert_eq!(cq.poll(2, |i, w| got.push(w.wr_id + i as u64 * 1000)), 2);
        assert_eq!(got, [100, 1101]);
        assert_eq!(cq.poll(8, |_, w| got.push(w.wr_id)), 1);
        assert_eq!(got, [100, 1101, 102]);
        // Positions 0..3 are free again: the kernel may wrap around.
        for pos in 0..3 {
            assert!(!cq.ring.is_valid(pos, Ordering::Relaxed));
        }
        complete(&cq, 3, 7);
        complete(&cq, 4, 8);
        let mut wcs = Vec::new();
        assert_eq!(cq.poll(8, |_, w| wcs.push(w)), 2);
        assert_eq!(
            (wcs[1].wr_id, wcs[1].opcode, wcs[1].byte_len),
            (8, IBV_WC_SEND, 8)
        );
    }

    #[test]
    fn arming_writes_the_control_word() {
        let cq = cq(2);
        cq.notify_word().store(SIW_NOTIFY_NOT, Ordering::SeqCst);
        cq.arm(true);
        assert_eq!(
            cq.notify_word().load(Ordering::SeqCst),
            SIW_NOTIFY_SOLICITED
        );
        cq.arm(false);
        assert_eq!(
            cq.notify_word().load(Ordering::SeqCst),
            SIW_NOTIFY_SOLICITED | SIW_NOTIFY_NEXT_COMPLETION
        );
        // It sits right after the CQEs, where the kernel reads it.
        assert_eq!(
            cq.notify_word() as *const AtomicU32 as usize,
            cq.ring.tail() as usize
        );
    }
}
