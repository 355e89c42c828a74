//! The work queues a QP or SRQ posts into: a ring shared with the kernel
//! plus what posting needs to know (limits, the send sequence number, the
//! `ibv_wr_*` cursor). Each sits behind its own spin lock in the object
//! that owns it; everything here runs under that lock.
//!
//! A post fills slots from our producer index on and publishes them all
//! at the end with one release store, so the kernel sees a list that was
//! posted together at once, and never a half-written WQE.

use core::ffi::c_int;
use core::mem::size_of;

use libc::{EINVAL, ENOMEM, ENOSPC};
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::PostSendCmd;
use crate::queue::{self, Queue};
use crate::wqe::{encode_recv, encode_send, SendSlot, SqLimits};

/// A receive queue (a QP's own, or an SRQ's).
#[derive(Default)]
pub struct RecvQueue {
    /// None for a QP that receives through an SRQ, and for an SRQ whose
    /// resize lost its ring.
    pub queue: Option<Queue>,
    pub max_sge: u32,
}

impl RecvQueue {
    /// Posts a list of receive requests; on failure, the error and the
    /// request that failed (those before it are posted).
    ///
    /// # Safety
    /// `wr` is a list of requests as `ibv_post_recv` takes it.
    pub unsafe fn post(
        &mut self,
        mut wr: *mut ibv_recv_wr,
    ) -> Result<(), (c_int, *mut ibv_recv_wr)> {
        let Some(q) = self.queue.as_ref() else {
            return Err((EINVAL, wr));
        };
        let start = q.prod();
        let mut prod = start;
        let mut res = Ok(());
        while !wr.is_null() {
            // SAFETY: a request of the program's list (contract).
            let w = unsafe { &*wr };
            if q.full_at(prod) {
                res = Err((ENOMEM, wr));
                break;
            }
            // SAFETY: slot `prod` is ours (not full: the kernel consumed
            // it); its SGE list is the program's (contract).
            if let Err(e) = unsafe { encode_recv(q.slot(prod), w, self.max_sge) } {
                res = Err((e, wr));
                break;
            }
            prod = queue::next(prod, q.mask());
            wr = w.next;
        }
        if prod != start {
            q.publish(prod);
        }
        res
    }
}

/// A QP's send queue.
#[derive(Default)]
pub struct SendQueue {
    pub queue: Option<Queue>,
    pub limits: SqLimits,
    /// The next send sequence number (one per WQE, as in C).
    pub ssn: u32,
    /// `ibv_wr_*`: where the next WQE goes.
    cur: u32,
    /// `ibv_wr_*`: the first error of this batch; the rest is skipped and
    /// `ibv_wr_complete` reports it.
    err: c_int,
    /// `ibv_wr_*`: whether a builder made a WQE the setters may amend.
    open: bool,
}

impl SendQueue {
    /// Posts a list of send requests. Returns whether any was posted
    /// (the doorbell is due), and on failure the error and the request
    /// that failed (those before it are posted).
    ///
    /// # Safety
    /// `wr` is a list of requests as `ibv_post_send` takes it.
    pub unsafe fn post(
        &mut self,
        mut wr: *mut ibv_send_wr,
    ) -> (bool, Result<(), (c_int, *mut ibv_send_wr)>) {
        let Some(q) = self.queue.as_ref() else {
            return (false, Err((EINVAL, wr)));
        };
        let start = q.prod();
        let mut prod = start;
        let mut res = Ok(());
        while !wr.is_null() {
            // SAFETY: a request of the program's list (contract).
            let w = unsafe { &*wr };
            if q.full_at(prod) {
                res = Err((ENOMEM, wr));
                break;
            }
            // SAFETY: slot `prod` is ours (not full); the request's
            // pointers are the program's (contract).
            if let Err(e) = unsafe { encode_send(q.slot(prod), w, &self.limits, self.ssn) } {
                res = Err((e, wr));
                break;
            }
            self.ssn = self.ssn.wrapping_add(1);
            prod = queue::next(prod, q.mask());
            wr = w.next;
        }
        let posted = prod != start;
        if posted {
            q.publish(prod);
        }
        (posted, res)
    }

    // ---- ibv_wr_*: a batch built in place, published by complete ----

    /// `ibv_wr_start`.
    pub fn wr_begin(&mut self) {
        self.err = 0;
        self.open = false;
        match self.queue.as_ref() {
            Some(q) => self.cur = q.prod(),
            None => self.err = EINVAL,
        }
    }

    /// A builder's new WQE, started with its identity; None once the
    /// batch failed (the error is kept for `ibv_wr_complete`).
    pub fn wr_new(
        &mut self,
        opcode: ibv_wr_opcode,
        wr_id: u64,
        flags: u32,
    ) -> Option<SendSlot<'_>> {
        if self.err != 0 {
            return None;
        }
        let q = self.queue.as_ref()?;
        if q.full_at(self.cur) {
            self.err = ENOSPC;
            self.open = false;
            return None;
        }
        // SAFETY: slot `cur` is ours (not full), and the batch has no
        // other reference to it: each builder moves the cursor on.
        let slot = unsafe { q.slot(self.cur) };
        self.cur = queue::next(self.cur, q.mask());
        self.open = true;
        let ssn = self.ssn;
        self.ssn = self.ssn.wrapping_add(1);
        let mut s = SendSlot::new(slot).ok()?;
        s.start(opcode, wr_id, flags, ssn);
        Some(s)
    }

    /// The WQE the last builder made, for a setter; None once the batch
    /// failed, or when no builder ran (an error then).
    pub fn wr_last(&mut self) -> Option<SendSlot<'_>> {
        if self.err != 0 {
            return None;
        }
        if !self.open {
            self.err = EINVAL;
            return None;
        }
        let q = self.queue.as_ref()?;
        // SAFETY: the slot before the cursor was handed to this batch's
        // last builder and is not published yet.
        let slot = unsafe { q.slot(queue::prev(self.cur, q.mask())) };
        SendSlot::new(slot).ok()
    }

    /// Records a setter's error for `ibv_wr_complete`.
    pub fn wr_fail(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }

    /// `ibv_wr_complete`: publishes the batch, or reports its error.
    /// Returns whether anything was published (the doorbell is due).
    pub fn wr_finish(&mut self) -> Result<bool, c_int> {
        self.open = false;
        if self.err != 0 {
            return Err(self.err);
        }
        let q = self.queue.as_ref().ok_or(EINVAL)?;
        let posted = q.prod() != self.cur;
        q.publish(self.cur);
        Ok(posted)
    }

    /// `ibv_wr_abort`: nothing of the batch is published.
    pub fn wr_drop(&mut self) {
        self.open = false;
        // The builders used sequence numbers for WQEs the kernel will not
        // see; a gap in them is harmless (the kernel does not check).
    }
}

/// Rings the doorbell: a POST_SEND command with no work requests, which
/// makes the kernel run the QP's requester (C: `post_send_db`).
///
/// # Safety
/// `qp` is a live QP of this provider.
pub unsafe fn doorbell(qp: *mut ibv_qp) -> c_int {
    let mut resp = ib_uverbs_post_send_resp::default();
    // SAFETY: per the contract; the context outlives its QPs.
    let (fd, handle) = unsafe { ((*(*qp).context).cmd_fd, (*qp).handle) };
    let cmd = PostSendCmd {
        hdr: ib_uverbs_cmd_hdr {
            command: IB_USER_VERBS_CMD_POST_SEND,
            in_words: (size_of::<PostSendCmd>() / 4) as u16,
            out_words: (size_of::<ib_uverbs_post_send_resp>() / 4) as u16,
        },
        core: ib_uverbs_post_send {
            response: &mut resp as *mut ib_uverbs_post_send_resp as u64,
            qp_handle: handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: size_of::<ibv_send_wr>() as u32,
        },
        drv: (),
    };
    // SAFETY: a whole command from our stack to the command file; the
    // kernel writes the response into `resp`, alive across the call.
    let n = unsafe {
        libc::write(
            fd,
            (&cmd as *const PostSendCmd).cast(),
            size_of::<PostSendCmd>(),
        )
    };
    if n == size_of::<PostSendCmd>() as isize {
        0
    } else {
        verbs_rt::errno::errno()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::TestRing;
    use core::ptr::null_mut;

    fn sq(ring: &TestRing) -> SendQueue {
        SendQueue {
            // SAFETY: the ring outlives the queue in each test.
            queue: Some(unsafe { ring.queue.alias() }),
            limits: SqLimits {
                qp_type: IBV_QPT_RC,
                max_sge: 2,
                max_inline: 32,
            },
            ..Default::default()
        }
    }

    fn send(id: u64) -> ibv_send_wr {
        // SAFETY: all-zero is a valid ibv_send_wr.
        let mut w: ibv_send_wr = unsafe { core::mem::zeroed() };
        w.wr_id = id;
        w.opcode = IBV_WR_SEND;
        w
    }

    #[test]
    fn post_send_publishes_the_list_and_stops_at_full() {
        let ring = TestRing::new(4, 9);
        let mut q = sq(&ring);
        let mut w = [send(1), send(2), send(3), send(4)];
        for i in 0..3 {
            w[i].next = &mut w[i + 1];
        }
        // SAFETY: the list above.
        let (posted, res) = unsafe { q.post(&mut w[0]) };
        assert!(posted);
        // Three of four slots: the fourth request finds the ring full.
        assert_eq!(res, Err((ENOMEM, &mut w[3] as *mut _)));
        assert_eq!(ring.queue.prod(), 3);
        assert_eq!(q.ssn, 3);
        // SAFETY: published slots, read back as the kernel would.
        let ids: Vec<u64> = (0..3).map(|i| unsafe { *ring.queue.slot_ptr(i) }).collect();
        assert_eq!(ids, [1, 2, 3]);
    }

    #[test]
    fn a_bad_request_posts_those_before_it() {
        let ring = TestRing::new(8, 9);
        let mut q = sq(&ring);
        let mut w = [send(1), send(2)];
        w[1].num_sge = 3; // more than max_sge
        w[1].sg_list = null_mut();
        w[0].next = &mut w[1];
        // SAFETY: the list above (the bad SGE list is refused unread).
        let (posted, res) = unsafe { q.post(&mut w[0]) };
        assert!(posted);
        assert_eq!(res, Err((EINVAL, &mut w[1] as *mut _)));
        assert_eq!(ring.queue.prod(), 1);
    }

    #[test]
    fn wr_batch_is_published_by_finish_only() {
        let ring = TestRing::new(4, 9);
        let mut q = sq(&ring);
        q.wr_begin();
        assert!(q.wr_last().is_none(), "a setter before any builder");
        assert_eq!(q.wr_finish(), Err(EINVAL));
        q.wr_begin();
        q.wr_new(IBV_WR_SEND, 7, 0).unwrap();
        q.wr_last().unwrap().set_sge(1, 0x100, 10).unwrap();
        q.wr_new(IBV_WR_RDMA_WRITE, 8, 0).unwrap();
        assert_eq!(ring.queue.prod(), 0);
        assert_eq!(q.wr_finish(), Ok(true));
        assert_eq!(ring.queue.prod(), 2);
        // A batch that overflows reports ENOSPC and publishes nothing.
        q.wr_begin();
        assert!(q.wr_new(IBV_WR_SEND, 9, 0).is_some());
        assert!(q.wr_new(IBV_WR_SEND, 10, 0).is_none());
        assert!(q.wr_last().is_none());
        assert_eq!(q.wr_finish(), Err(ENOSPC));
        assert_eq!(ring.queue.prod(), 2);
        // Abort leaves the ring as it was.
        q.wr_begin();
        q.wr_new(IBV_WR_SEND, 11, 0).unwrap();
        q.wr_drop();
        assert_eq!(ring.queue.prod(), 2);
    }

    #[test]
    fn post_recv_fills_and_publishes() {
        let ring = TestRing::new(2, 6);
        let mut rq = RecvQueue {
            // SAFETY: the ring outlives the queue.
            queue: Some(unsafe { ring.queue.alias() }),
            max_sge: 1,
        };
        // SAFETY: all-zero is a valid ibv_recv_wr.
        let mut w: [ibv_recv_wr; 2] = unsafe { core::mem::zeroed() };
        w[0].wr_id = 5;
        w[1].wr_id = 6;
        w[0].next = &mut w[1];
        // SAFETY: the list above.
        let res = unsafe { rq.post(&mut w[0]) };
        assert_eq!(res, Err((ENOMEM, &mut w[1] as *mut _)));
        assert_eq!(ring.queue.prod(), 1);
        let mut none = RecvQueue::default();
        // SAFETY: as above.
        assert_eq!(unsafe { none.post(&mut w[0]) }.unwrap_err().0, EINVAL);
    }
}
