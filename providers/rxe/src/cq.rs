//! Completion queues: the kernel's CQ ring mapped into the process, read
//! by `ibv_poll_cq` and by the extended CQ's `ibv_start_poll` /
//! `ibv_next_poll` / `ibv_end_poll` and `ibv_wc_read_*`.
//!
//! The ring is guarded by a spin lock, which the extended poll holds from
//! a successful `ibv_start_poll` to `ibv_end_poll` (the verbs contract:
//! `ibv_end_poll` follows every successful `ibv_start_poll`, including
//! after `ibv_next_poll` found nothing). Entries are given back to the
//! kernel when the lock is let go.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint};

use verbs_abi::driver::verbs_cq;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::{Cmd, CreateCqExResp, CreateCqResp, ExCmd, ResizeCqResp};
use crate::cqe::{to_wc, SUPPORTED_WC_FLAGS};
use crate::ffi;
use crate::lock::SpinLock;
use crate::queue::{self, Queue};

#[repr(C)]
pub struct Cq {
    /// What libibverbs and the program see (and write: the event counts,
    /// the mutex), so never behind a Rust reference; first, so the
    /// pointers agree.
    vcq: UnsafeCell<verbs_cq>,
    ring: SpinLock<Ring>,
}

struct Ring {
    /// None once a resize lost the ring (the mmap of the new one failed).
    queue: Option<Queue>,
    /// The extended poll's cursor.
    cur: u32,
    /// Whether the cursor is on an entry the program is reading (after a
    /// successful start/next), rather than past the last one.
    on_entry: bool,
}

impl Cq {
    fn new() -> Box<Cq> {
        Box::new(Cq {
            vcq: UnsafeCell::new(verbs_cq::zeroed()),
            ring: SpinLock::new(Ring {
                queue: None,
                cur: 0,
                on_entry: false,
            }),
        })
    }

    fn ibv(&self) -> *mut ibv_cq {
        self.vcq.get().cast()
    }

    fn ibv_ex(&self) -> *mut ibv_cq_ex {
        self.vcq.get().cast()
    }

    /// # Safety
    /// `cq` is a CQ of this provider, not yet destroyed.
    unsafe fn from_ibv<'a>(cq: *mut ibv_cq) -> &'a Cq {
        // SAFETY: per the contract; `vcq` is the first field.
        unsafe { &*cq.cast::<Cq>() }
    }

    /// Maps the ring the kernel made and checks that its entries are
    /// completions.
    fn map(&mut self, mi: &mminfo) -> Result<(), c_int> {
        // SAFETY: the context outlives its CQs; cmd_fd is its command file.
        let fd = unsafe { (*(*self.ibv()).context).cmd_fd };
        let q = Queue::map(fd, mi)?;
        if q.elem_size() < core::mem::size_of::<ib_uverbs_wc>() {
            return Err(libc::EINVAL);
        }
        self.ring.get_mut().queue = Some(q);
        Ok(())
    }

    /// Copies up to `out.len()` completions out and gives their slots back.
    fn poll(&self, out: &mut [core::mem::MaybeUninit<ibv_wc>]) -> Result<usize, c_int> {
        let r = self.ring.lock();
        let q = r.queue.as_ref().ok_or(libc::EIO)?;
        let mask = q.mask();
        let mut cons = q.cons();
        let mut prod = q.filled_up_to();
        let mut n = 0;
        while n < out.len() {
            if queue::is_empty(prod, cons) {
                // Completions may have arrived while we copied.
                prod = q.filled_up_to();
                if queue::is_empty(prod, cons) {
                    break;
                }
            }
            // SAFETY: the kernel published this slot (acquire above) and
            // we have not released it; it holds an ib_uverbs_wc (checked
            // at map time that it fits).
            let k = unsafe { &*q.slot_ptr(cons).cast::<ib_uverbs_wc>() };
            out[n].write(to_wc(k));
            cons = queue::next(cons, mask);
            n += 1;
        }
        if n > 0 {
            q.release(cons);
        }
        Ok(n)
    }

    /// The entry under the extended poll's cursor.
    ///
    /// # Safety
    /// This thread holds the ring through a successful start_poll, the
    /// cursor being on an entry.
    unsafe fn entry(&self) -> &ib_uverbs_wc {
        // SAFETY: per the contract (the ring exists while an entry is on).
        unsafe {
            let r = self.ring.held();
            let q = r.queue.as_ref().unwrap_unchecked();
            &*q.slot_ptr(r.cur).cast::<ib_uverbs_wc>()
        }
    }

    /// Shows the entry under the cursor in the public `status`/`wr_id`.
    ///
    /// # Safety
    /// As for [`Cq::entry`].
    unsafe fn show_entry(&self) {
        // SAFETY: per the contract; only the lock holder writes these.
        unsafe {
            let w = self.entry();
            let ex = self.ibv_ex();
            (*ex).status = w.status;
            (*ex).wr_id = w.wr_id;
        }
    }

    /// `ibv_start_poll`: takes the ring, for good when it holds an entry.
    fn start_poll(&self) -> c_int {
        self.ring.acquire();
        // SAFETY: acquired above; released below or by end_poll.
        let r = unsafe { self.ring.held() };
        let found = match r.queue.as_ref() {
            Some(q) => {
                r.cur = q.cons();
                !queue::is_empty(q.filled_up_to(), r.cur)
            }
            None => false,
        };
        r.on_entry = found;
        if !found {
            // SAFETY: ours since the acquire; `r` is not used again.
            unsafe { self.ring.release() };
            return libc::ENOENT;
        }
        // SAFETY: held, on an entry.
        unsafe { self.show_entry() };
        0
    }

    /// `ibv_next_poll`: the entry after the current one, if any. Past the
    /// last one, a later call finds what arrived since.
    ///
    /// # Safety
    /// This thread holds the ring through a successful start_poll.
    unsafe fn next_poll(&self) -> c_int {
        // SAFETY: per the contract.
        let r = unsafe { self.ring.held() };
        let Some(q) = r.queue.as_ref() else {
            return libc::ENOENT;
        };
        if r.on_entry {
            r.cur = queue::next(r.cur, q.mask());
        }
        r.on_entry = !queue::is_empty(q.filled_up_to(), r.cur);
        if !r.on_entry {
            return libc::ENOENT;
        }
        // SAFETY: held, on an entry.
        unsafe { self.show_entry() };
        0
    }

    /// `ibv_end_poll`: gives back what was read and lets the ring go.
    ///
    /// # Safety
    /// This thread holds the ring through a successful start_poll.
    unsafe fn end_poll(&self) {
        // SAFETY: per the contract.
        let r = unsafe { self.ring.held() };
        if let Some(q) = r.queue.as_ref() {
            let cons = if r.on_entry {
                queue::next(r.cur, q.mask())
            } else {
                r.cur
            };
            q.release(cons);
        }
        r.on_entry = false;
        // SAFETY: held since start_poll; `r` is not used again.
        unsafe { self.ring.release() };
    }

    /// Installs the extended poll functions the program asked for.
    fn set_ex_ops(&mut self, wc_flags: u64) {
        let ex = self.vcq.get_mut();
        // SAFETY: every member of the union is plain data; the CQ was made
        // as an extended one, so `cq_ex` is the member in use.
        let ex = unsafe { &mut *ex.cq_ex };
        ex.start_poll = Some(start_poll);
        ex.next_poll = Some(next_poll);
        ex.end_poll = Some(end_poll);
        ex.read_opcode = Some(read_opcode);
        ex.read_vendor_err = Some(read_vendor_err);
        ex.read_wc_flags = Some(read_wc_flags);
        let want = |f: c_uint| wc_flags & u64::from(f) != 0;
        if want(IBV_WC_EX_WITH_BYTE_LEN) {
            ex.read_byte_len = Some(read_byte_len);
        }
        if want(IBV_WC_EX_WITH_IMM) {
            ex.read_imm_data = Some(read_imm_data);
        }
        if want(IBV_WC_EX_WITH_QP_NUM) {
            ex.read_qp_num = Some(read_qp_num);
        }
        if want(IBV_WC_EX_WITH_SRC_QP) {
            ex.read_src_qp = Some(read_src_qp);
        }
        if want(IBV_WC_EX_WITH_SLID) {
            ex.read_slid = Some(read_slid);
        }
        if want(IBV_WC_EX_WITH_SL) {
            ex.read_sl = Some(read_sl);
        }
        if want(IBV_WC_EX_WITH_DLID_PATH_BITS) {
            ex.read_dlid_path_bits = Some(read_dlid_path_bits);
        }
    }
}

/// Undoes a create whose mapping failed.
fn undo(cq: &Cq) {
    // SAFETY: the kernel's CQ we just created; the program never saw it.
    unsafe { ffi::ibv_cmd_destroy_cq(cq.ibv()) };
}

/// # Safety
/// `ctx` is a live rxe context; `channel` NULL or its channel.
unsafe fn create(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut ibv_cq, c_int> {
    let mut cq = Cq::new();
    let mut cmd = Cmd::<ib_uverbs_create_cq>::default();
    let mut resp = CreateCqResp::default();
    // SAFETY: live objects; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_create_cq(
            ctx,
            cqe,
            channel,
            comp_vector,
            cq.ibv(),
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    if let Err(e) = cq.map(&resp.drv.mi) {
        undo(&cq);
        return Err(e);
    }
    Ok(Box::into_raw(cq).cast())
}

pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: libibverbs passes one of our contexts and the program's
    // channel.
    verbs_rt::errno::ptr_or_errno(unsafe { create(ctx, cqe, channel, comp_vector) })
}

/// # Safety
/// `ctx` is a live rxe context; `attr` valid.
unsafe fn create_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> Result<*mut ibv_cq_ex, c_int> {
    // SAFETY: per the contract.
    let wc_flags = unsafe { (*attr).wc_flags };
    if wc_flags & !SUPPORTED_WC_FLAGS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut cq = Cq::new();
    let mut cmd = ExCmd::<ib_uverbs_ex_create_cq>::default();
    let mut resp = CreateCqExResp::default();
    // SAFETY: live objects; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_create_cq_ex(
            ctx,
            attr,
            cq.vcq.get(),
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
            0,
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    if let Err(e) = cq.map(&resp.drv.mi) {
        undo(&cq);
        return Err(e);
    }
    cq.set_ex_ops(wc_flags);
    Ok(Box::into_raw(cq).cast())
}

pub unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: libibverbs passes one of our contexts and the program's
    // attribute.
    verbs_rt::errno::ptr_or_errno(unsafe { create_ex(ctx, attr) })
}

pub unsafe extern "C" fn resize_cq(ibcq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: libibverbs passes one of our live CQs.
    let cq = unsafe { Cq::from_ibv(ibcq) };
    let mut r = cq.ring.lock();
    let mut cmd = Cmd::<ib_uverbs_resize_cq>::default();
    let mut resp = ResizeCqResp::default();
    // SAFETY: a live CQ; the buffers are ours and of their sizes. The
    // kernel swaps the ring while we hold the lock, so no poll reads it.
    let rc = unsafe {
        ffi::ibv_cmd_resize_cq(
            ibcq,
            cqe,
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
        )
    };
    if rc != 0 {
        return rc;
    }
    // SAFETY: the context outlives the CQ.
    let fd = unsafe { (*(*ibcq).context).cmd_fd };
    // The old ring is no longer the kernel's: drop it either way.
    match Queue::map(fd, &resp.drv.mi) {
        Ok(q) => {
            r.queue = Some(q);
            0
        }
        Err(e) => {
            r.queue = None;
            e
        }
    }
}

pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: a CQ of ours, freed once (with its mapping) after the
    // kernel let it go.
    unsafe {
        let rc = ffi::ibv_cmd_destroy_cq(cq);
        if rc == 0 {
            drop(Box::from_raw(cq.cast::<Cq>()));
        }
        rc
    }
}

pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int {
    let n = usize::try_from(ne).unwrap_or(0);
    if n != 0 && wc.is_null() {
        verbs_rt::errno::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: libibverbs passes one of our live CQs; the program's array
    // holds `ne` entries, which we only write.
    let (cq, out) = unsafe {
        let out = if n == 0 {
            &mut []
        } else {
            core::slice::from_raw_parts_mut(wc.cast(), n)
        };
        (Cq::from_ibv(cq), out)
    };
    match cq.poll(out) {
        Ok(n) => n as c_int,
        Err(e) => {
            verbs_rt::errno::set_errno(e);
            -1
        }
    }
}

// ---- the extended CQ's functions (ibv_cq_ex) ----

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the program passes one of our live extended CQs.
    unsafe { Cq::from_ibv(cq.cast()) }.start_poll()
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: our CQ, between a successful start_poll and end_poll (the
    // verbs contract).
    unsafe { Cq::from_ibv(cq.cast()).next_poll() }
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: as for next_poll.
    unsafe { Cq::from_ibv(cq.cast()).end_poll() }
}

/// `ibv_wc_read_*`: one field of the entry under the cursor.
macro_rules! reader {
    ($name:ident -> $ty:ty, |$w:ident| $e:expr) => {
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            // SAFETY: called between a successful start/next_poll and
            // end_poll (the verbs contract): this thread holds the ring
            // and the cursor is on an entry.
            let $w = unsafe { Cq::from_ibv(cq.cast()).entry() };
            $e
        }
    };
}

reader!(read_opcode -> ibv_wc_opcode, |w| w.opcode);
reader!(read_vendor_err -> u32, |w| w.vendor_err);
reader!(read_wc_flags -> c_uint, |w| w.wc_flags);
reader!(read_byte_len -> u32, |w| w.byte_len);
reader!(read_imm_data -> __be32, |w| w.ex);
reader!(read_qp_num -> u32, |w| w.qp_num);
reader!(read_src_qp -> u32, |w| w.src_qp);
reader!(read_slid -> u32, |w| u32::from(w.slid));
reader!(read_sl -> u8, |w| w.sl);
reader!(read_dlid_path_bits -> u8, |w| w.dlid_path_bits);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::TestRing;

    /// A CQ over an in-memory ring of 8 entries.
    fn test_cq() -> (Box<Cq>, TestRing) {
        let ring = TestRing::new(8, 6);
        let mut cq = Cq::new();
        // SAFETY: the TestRing's memory outlives the Queue view (both
        // dropped at the end of each test, the CQ first); map_len 0 means
        // the Queue never unmaps it.
        let view = unsafe { ring.queue.alias() };
        cq.ring.get_mut().queue = Some(view);
        cq.set_ex_ops(SUPPORTED_WC_FLAGS);
        (cq, ring)
    }

    fn fill(ring: &mut TestRing, from: u32, ids: &[u64]) {
        for (i, &id) in ids.iter().enumerate() {
            let p = ring.queue.slot_ptr(from + i as u32).cast::<ib_uverbs_wc>();
            // SAFETY: a slot of the in-memory ring, not published yet.
            unsafe {
                *p = ib_uverbs_wc {
                    wr_id: id,
                    byte_len: id as u32 * 10,
                    ..Default::default()
                }
            };
        }
        ring.kernel_sets(Some((from + ids.len() as u32) & 7), None);
    }

    #[test]
    fn poll_takes_what_is_there_and_gives_the_slots_back() {
        let (cq, mut ring) = test_cq();
        let mut out = [core::mem::MaybeUninit::<ibv_wc>::uninit(); 4];
        assert_eq!(cq.poll(&mut out), Ok(0));
        fill(&mut ring, 0, &[1, 2, 3]);
        assert_eq!(cq.poll(&mut out[..2]), Ok(2));
        // SAFETY: written by poll.
        let got: Vec<u64> = out[..2]
            .iter()
            .map(|w| unsafe { w.assume_init() }.wr_id)
            .collect();
        assert_eq!(got, [1, 2]);
        assert_eq!(ring.queue.cons(), 2);
        // Across the end of the ring.
        fill(&mut ring, 3, &[4, 5, 6, 7, 8, 9]);
        let mut out = [core::mem::MaybeUninit::<ibv_wc>::uninit(); 16];
        assert_eq!(cq.poll(&mut out), Ok(7));
        // SAFETY: written by poll.
        let last = unsafe { out[6].assume_init() };
        assert_eq!((last.wr_id, last.byte_len), (9, 90));
        assert_eq!(ring.queue.cons(), 1);
    }

    #[test]
    fn extended_poll_walks_then_ends() {
        let (cq, mut ring) = test_cq();
        let ex = cq.ibv_ex();
        // SAFETY: our CQ's own functions, called in the verbs order.
        unsafe {
            assert_eq!(start_poll(ex, core::ptr::null_mut()), libc::ENOENT);
            fill(&mut ring, 0, &[10, 11]);
            assert_eq!(start_poll(ex, core::ptr::null_mut()), 0);
            assert_eq!(((*ex).wr_id, read_byte_len(ex)), (10, 100));
            assert_eq!(next_poll(ex), 0);
            assert_eq!(((*ex).wr_id, read_byte_len(ex)), (11, 110));
            assert_eq!(next_poll(ex), libc::ENOENT);
            assert_eq!(next_poll(ex), libc::ENOENT);
            end_poll(ex);
            // Both given back, the consumer on the producer (not past it).
            assert_eq!(ring.queue.cons(), 2);
            // Past the last entry, a later next_poll finds a new one.
            fill(&mut ring, 2, &[20]);
            assert_eq!(start_poll(ex, core::ptr::null_mut()), 0);
            assert_eq!(next_poll(ex), libc::ENOENT);
            fill(&mut ring, 3, &[21]);
            assert_eq!(next_poll(ex), 0);
            assert_eq!((*ex).wr_id, 21);
            end_poll(ex);
            assert_eq!(ring.queue.cons(), 4);
            // Stopping on an entry consumes it too.
            fill(&mut ring, 4, &[12, 13]);
            assert_eq!(start_poll(ex, core::ptr::null_mut()), 0);
            assert_eq!((*ex).wr_id, 12);
            end_poll(ex);
            assert_eq!(ring.queue.cons(), 5);
            // And the lock was let go each time.
            assert_eq!(start_poll(ex, core::ptr::null_mut()), 0);
            assert_eq!((*ex).wr_id, 13);
            end_poll(ex);
            assert_eq!(ring.queue.cons(), 6);
        }
    }
}
