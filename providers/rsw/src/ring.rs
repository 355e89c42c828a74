//! Work queues, a QP's and an SRQ's: the send and receive rings,
//! preallocated when the QP or SRQ is created so posting never allocates
//! (on our heap, or from the allocator of the parent domain it is made
//! on: `ringmem`).
//! Sequence numbers only grow; a slot is `seq % cap`.

use verbs_abi::*;

use crate::device::MAX_SGE;
use crate::ringmem::{Allocator, Slots};
use crate::transport::mailbox::Mailbox;
use crate::wire::Op;
use std::os::raw::c_int;
use std::sync::Arc;
/// An empty scatter/gather entry, to preallocate SGE arrays with.
pub const NO_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// One send work request as queued.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe {
    pub wr_id: u64,
    pub op: Op,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// Message length (payload for SEND/WRITE, requested for READ, 8 for
    /// atomics).
    pub len: u32,
    pub nsge: u32,
    pub inline: bool,
    /// Message sequence number, assigned when transmission starts.
    pub msn: u32,
    /// Non-zero when the WQE failed locally before transmission; it
    /// completes with this status once every earlier WQE has.
    pub local_err: ibv_wc_status,
    /// UD: where the datagram goes (resolved from the AH at post time).
    pub ud: UdDest,
    /// XRC: the SRQ at the receiving side (`remote_srqn`).
    pub xrc_srqn: u32,
    /// A bind's arguments.
    pub bind: BindArgs,
    /// A local operation (bind, local invalidate) that succeeded; it
    /// completes once every earlier WQE has.
    pub local_ok: bool,
    /// Not the application's: a tag-matching rendezvous READ or FIN the
    /// QP issues itself (`engine::rndv`); 0 for the application's.
    pub tm: u8,
}

/// `SendWqe::tm`: a rendezvous READ, whose completion is the tag's.
pub const TM_RNDV_READ: u8 = 1;
/// `SendWqe::tm`: a rendezvous FIN, sent once the READ before it has
/// completed (nothing in flight), completing silently.
pub const TM_FIN: u8 = 2;

/// What an `IBV_WR_BIND_MW` asks for.
#[derive(Clone, Copy, Debug, Default)]
pub struct BindArgs {
    /// The window's current rkey, and the one it gets.
    pub mw_rkey: u32,
    pub new_rkey: u32,
    pub mr_key: u32,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// A UD work request's destination.
#[derive(Clone, Copy, Debug, Default)]
pub struct UdDest {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub qpn: u32,
    pub qkey: u32,
    /// The AH's GRH traffic class, carried as the IP header's TOS / traffic
    /// class, as RoCE v2 carries it.
    pub tclass: u8,
}

impl SendWqe {
    pub const EMPTY: SendWqe = SendWqe {
        wr_id: 0,
        op: Op::Send,
        signaled: false,
        solicited: false,
        imm: 0,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        len: 0,
        nsge: 0,
        inline: false,
        msn: 0,
        local_err: 0,
        ud: UdDest {
            dgid: [0; 16],
            sgid: [0; 16],
            qpn: 0,
            qkey: 0,
            tclass: 0,
        },
        xrc_srqn: 0,
        bind: BindArgs {
            mw_rkey: 0,
            new_rkey: 0,
            mr_key: 0,
            addr: 0,
            len: 0,
            access: 0,
        },
        local_ok: false,
        tm: 0,
    };

    pub fn wc_opcode(&self) -> ibv_wc_opcode {
        match self.op {
            Op::Send | Op::SendImm | Op::SendInv => IBV_WC_SEND,
            Op::BindMw => IBV_WC_BIND_MW,
            Op::AtomicWrite => IBV_WC_ATOMIC_WRITE,
            Op::LocalInv => IBV_WC_LOCAL_INV,
            Op::Write | Op::WriteImm => IBV_WC_RDMA_WRITE,
            Op::ReadReq => IBV_WC_RDMA_READ,
            Op::CmpSwap => IBV_WC_COMP_SWAP,
            Op::FetchAdd => IBV_WC_FETCH_ADD,
            _ => IBV_WC_SEND,
        }
    }

    /// Operations that wait for a response carrying data.
    pub fn expects_data(&self) -> bool {
        matches!(self.op, Op::ReadReq | Op::CmpSwap | Op::FetchAdd)
    }
}

/// The send queue ring. Sequence numbers only grow; `head <= tx <= tail`:
/// `[head, tx)` have been (or are being) transmitted and await a response,
/// `[tx, tail)` wait to be transmitted.
pub struct SendQueue {
    pub(crate) wqes: Slots<SendWqe>,
    pub(crate) sges: Slots<ibv_sge>,
    pub(crate) inline_buf: Slots<u8>,
    pub cap: usize,
    pub max_sge: usize,
    pub max_inline: usize,
    head: u64,
    tx: u64,
    tail: u64,
}

impl SendQueue {
    /// A ring of `cap` WQEs, its arrays from `alloc` when given (see
    /// `ringmem`), tagged `res_type`.
    pub(crate) fn new(
        cap: usize,
        max_sge: usize,
        max_inline: usize,
        alloc: Option<&Arc<Allocator>>,
        res_type: u64,
    ) -> Result<SendQueue, c_int> {
        let n = |per: usize| cap.checked_mul(per).ok_or(libc::ENOMEM);
        Ok(SendQueue {
            wqes: Slots::new(cap, SendWqe::EMPTY, alloc, res_type)?,
            sges: Slots::new(n(max_sge)?, NO_SGE, alloc, res_type)?,
            inline_buf: Slots::new(n(max_inline)?, 0u8, alloc, res_type)?,
            cap,
            max_sge,
            max_inline,
            head: 0,
            tx: 0,
            tail: 0,
        })
    }

    /// A ring of no slots (a queue the QP does not have).
    pub(crate) fn none() -> SendQueue {
        SendQueue {
            wqes: Slots::heap(0, SendWqe::EMPTY),
            sges: Slots::heap(0, NO_SGE),
            inline_buf: Slots::heap(0, 0),
            cap: 0,
            max_sge: 0,
            max_inline: 0,
            head: 0,
            tx: 0,
            tail: 0,
        }
    }

    /// Its memory came from a parent domain's allocator.
    pub(crate) fn is_extern(&self) -> bool {
        self.wqes.is_extern() || self.sges.is_extern() || self.inline_buf.is_extern()
    }

    pub(crate) fn slot(&self, seq: u64) -> usize {
        (seq % self.cap as u64) as usize
    }

    pub fn wqe(&self, seq: u64) -> &SendWqe {
        &self.wqes[self.slot(seq)]
    }

    pub fn wqe_mut(&mut self, seq: u64) -> &mut SendWqe {
        let s = self.slot(seq);
        &mut self.wqes[s]
    }

    pub fn sges(&self, seq: u64) -> &[ibv_sge] {
        let s = self.slot(seq) * self.max_sge;
        &self.sges[s..s + self.wqe(seq).nsge as usize]
    }

    pub fn inline_data(&self, seq: u64) -> &[u8] {
        let s = self.slot(seq) * self.max_inline;
        &self.inline_buf[s..s + self.wqe(seq).len as usize]
    }

    pub fn is_full(&self) -> bool {
        self.tail - self.head == self.cap as u64
    }

    /// Free slots.
    pub fn room(&self) -> u64 {
        self.cap as u64 - (self.tail - self.head)
    }

    /// Some WQE is posted and not completed.
    pub fn has_work(&self) -> bool {
        self.head != self.tail
    }

    /// Some WQE was (or is being) transmitted and awaits its response.
    pub fn in_flight(&self) -> bool {
        self.head < self.tx
    }

    /// WQEs transmitted and not completed.
    pub fn awaiting(&self) -> u64 {
        self.tx.saturating_sub(self.head)
    }

    /// The oldest WQE not completed.
    pub fn oldest(&self) -> Option<u64> {
        self.has_work().then_some(self.head)
    }

    /// The oldest WQE not completed, if it was transmitted.
    pub fn oldest_in_flight(&self) -> Option<u64> {
        self.in_flight().then_some(self.head)
    }

    /// The next WQE to transmit, if any is waiting.
    pub fn next_to_transmit(&self) -> Option<u64> {
        (self.tx < self.tail).then_some(self.tx)
    }

    /// The WQE queued after `seq`, if any (`seq` itself queued).
    pub fn queued_after(&self, seq: u64) -> Option<u64> {
        (seq + 1 < self.tail).then_some(seq + 1)
    }

    /// The WQE `next_to_transmit` named has started going out.
    pub fn transmitted(&mut self) {
        self.tx += 1;
    }

    /// The oldest WQE is completed (an untransmitted one counts as
    /// transmitted).
    pub fn retire_oldest(&mut self) {
        self.head += 1;
        if self.tx < self.head {
            self.tx = self.head;
        }
    }

    /// Every WQE not completed, oldest first.
    pub fn outstanding(&self) -> std::ops::Range<u64> {
        self.head..self.tail
    }

    /// The slot the next posted WQE goes to, until `commit`.
    pub(crate) fn next_seq(&self) -> u64 {
        self.tail
    }

    /// The WQE at `next_seq` is filled in and posted.
    pub(crate) fn commit(&mut self) {
        self.tail += 1;
    }

    pub(crate) fn clear(&mut self) {
        self.head = self.tail;
        self.tx = self.tail;
    }
}

/// A receive WQE taken off its queue (the QP's or an SRQ's) by the message
/// that lands in it: claimed when the message starts, so a shared queue
/// never hands one WQE to two QPs.
#[derive(Clone, Copy)]
pub struct RecvWqe {
    pub wr_id: u64,
    /// The PD its lkeys must belong to (an SRQ's may differ from the QP's).
    pub pd_id: u32,
    nsge: u32,
    sges: [ibv_sge; MAX_SGE as usize],
}

impl RecvWqe {
    pub const EMPTY: RecvWqe = RecvWqe {
        wr_id: 0,
        pd_id: 0,
        nsge: 0,
        sges: [NO_SGE; MAX_SGE as usize],
    };

    pub fn sges(&self) -> &[ibv_sge] {
        &self.sges[..self.nsge as usize]
    }

    /// A receive taken elsewhere (another process's XRC SRQ).
    pub fn set(&mut self, wr_id: u64, pd_id: u32, sges: &[ibv_sge]) {
        let n = sges.len().min(self.sges.len());
        self.wr_id = wr_id;
        self.pd_id = pd_id;
        self.nsge = n as u32;
        self.sges[..n].copy_from_slice(&sges[..n]);
    }

    /// Bytes its scatter list holds.
    pub fn room(&self) -> u64 {
        self.sges().iter().map(|s| s.length as u64).sum()
    }
}

/// The receive queue ring: private, or in a mailbox same-host peers take
/// receives from (`transport::mailbox`), which then holds the entries and
/// the indices.
pub struct RecvQueue {
    wr_ids: Slots<u64>,
    nsge: Slots<u32>,
    sges: Slots<ibv_sge>,
    pub cap: usize,
    pub max_sge: usize,
    head: u64,
    tail: u64,
    shared: Option<Arc<Mailbox>>,
}

impl RecvQueue {
    /// A private ring of `cap` receives, its arrays from `alloc` when
    /// given (see `ringmem`), tagged `res_type`.
    pub fn new(
        cap: usize,
        max_sge: usize,
        alloc: Option<&Arc<Allocator>>,
        res_type: u64,
    ) -> Result<RecvQueue, c_int> {
        Ok(RecvQueue {
            wr_ids: Slots::new(cap, 0, alloc, res_type)?,
            nsge: Slots::new(cap, 0, alloc, res_type)?,
            sges: Slots::new(
                cap.checked_mul(max_sge).ok_or(libc::ENOMEM)?,
                NO_SGE,
                alloc,
                res_type,
            )?,
            cap,
            max_sge,
            head: 0,
            tail: 0,
            shared: None,
        })
    }

    /// A ring of no slots (a queue the QP does not have).
    pub fn none() -> RecvQueue {
        RecvQueue {
            wr_ids: Slots::heap(0, 0),
            nsge: Slots::heap(0, 0),
            sges: Slots::heap(0, NO_SGE),
            cap: 0,
            max_sge: 0,
            head: 0,
            tail: 0,
            shared: None,
        }
    }

    /// A queue in a mailbox if the same-host path can have one, else
    /// private (then from `alloc` when given). The allocator is not asked
    /// for a mailbox ring: it lives in the memfd same-host peers map,
    /// which a buffer of the application's cannot be.
    pub fn shared(
        cap: usize,
        max_sge: usize,
        alloc: Option<&Arc<Allocator>>,
        res_type: u64,
    ) -> Result<RecvQueue, c_int> {
        match Mailbox::new(cap, max_sge) {
            Some(m) => Ok(RecvQueue {
                shared: Some(Arc::new(m)),
                ..RecvQueue::none()
            }
            .with_shape(cap, max_sge)),
            None => RecvQueue::new(cap, max_sge, alloc, res_type),
        }
    }

    /// Its memory came from a parent domain's allocator.
    pub fn is_extern(&self) -> bool {
        self.wr_ids.is_extern() || self.nsge.is_extern() || self.sges.is_extern()
    }

    fn with_shape(mut self, cap: usize, max_sge: usize) -> RecvQueue {
        self.cap = cap;
        self.max_sge = max_sge;
        self
    }

    pub fn mailbox(&self) -> Option<&Arc<Mailbox>> {
        self.shared.as_ref()
    }

    pub fn is_empty(&self) -> bool {
        match &self.shared {
            Some(m) => m.is_empty(),
            None => self.head == self.tail,
        }
    }

    pub fn is_full(&self) -> bool {
        match &self.shared {
            Some(m) => m.is_full(),
            None => self.tail - self.head == self.cap as u64,
        }
    }

    /// Posted receives not yet taken.
    pub fn len(&self) -> usize {
        match &self.shared {
            Some(m) => m.len(),
            None => (self.tail - self.head) as usize,
        }
    }

    /// Checks a receive WR against the queue (its SGE count, room left)
    /// and returns its scatter list: EINVAL or ENOMEM as `ibv_post_recv`
    /// and `ibv_post_srq_recv` report them.
    ///
    /// # Safety
    /// `w.sg_list` must hold `w.num_sge` entries.
    pub unsafe fn checked_sges<'a>(&self, w: &'a ibv_recv_wr) -> Result<&'a [ibv_sge], i32> {
        if w.num_sge < 0 || w.num_sge as usize > self.max_sge {
            return Err(libc::EINVAL);
        }
        if self.is_full() {
            return Err(libc::ENOMEM);
        }
        Ok(if w.num_sge > 0 {
            // SAFETY: per the contract.
            unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }
        } else {
            &[]
        })
    }

    /// Posts a receive (the queue has room).
    pub fn push(&mut self, wr_id: u64, sges: &[ibv_sge]) {
        if let Some(m) = &self.shared {
            return m.push(wr_id, sges);
        }
        let s = self.slot(self.tail);
        self.wr_ids[s] = wr_id;
        self.nsge[s] = sges.len() as u32;
        let b = s * self.max_sge;
        self.sges[b..b + sges.len()].copy_from_slice(sges);
        self.tail += 1;
    }

    /// Forgets every posted receive (reset).
    pub fn clear(&mut self) {
        if let Some(m) = &self.shared {
            m.clear();
        }
        self.head = self.tail;
    }

    pub(crate) fn slot(&self, seq: u64) -> usize {
        (seq % self.cap as u64) as usize
    }

    /// The oldest posted receive: its wr_id and scatter list.
    fn front(&self) -> Option<(u64, &[ibv_sge])> {
        if self.head == self.tail {
            return None;
        }
        let s = self.slot(self.head);
        let b = s * self.max_sge;
        Some((self.wr_ids[s], &self.sges[b..b + self.nsge[s] as usize]))
    }

    pub fn pop(&mut self) -> Option<u64> {
        if let Some(m) = &self.shared {
            let mut id = None;
            m.take(|wr_id, _| id = Some(wr_id));
            return id;
        }
        if self.is_empty() {
            return None;
        }
        let id = self.wr_ids[self.slot(self.head)];
        self.head += 1;
        Some(id)
    }

    /// Takes the oldest posted receive into `w`; false when there is none.
    pub fn take_into(&mut self, w: &mut RecvWqe, pd_id: u32) -> bool {
        if let Some(m) = &self.shared {
            return m.take(|wr_id, sges| {
                w.wr_id = wr_id;
                w.pd_id = pd_id;
                w.nsge = sges.len() as u32;
                w.sges[..sges.len()].copy_from_slice(sges);
            });
        }
        let Some((wr_id, sges)) = self.front() else {
            return false;
        };
        w.wr_id = wr_id;
        w.pd_id = pd_id;
        w.nsge = sges.len() as u32;
        w.sges[..sges.len()].copy_from_slice(sges);
        self.head += 1;
        true
    }

    /// The same receives in a private ring of `cap` slots (`cap` >=
    /// `len`), from `alloc` when given. A mailbox's ring is closed first,
    /// so same-host peers stop taking from it (they send over the
    /// connection from then on) and the receives left in it move here.
    /// When the new ring cannot be had, nothing changes.
    pub fn resized(
        &mut self,
        cap: usize,
        alloc: Option<&Arc<Allocator>>,
        res_type: u64,
    ) -> Result<RecvQueue, c_int> {
        let mut q = RecvQueue::new(cap, self.max_sge, alloc, res_type)?;
        if let Some(m) = &self.shared {
            m.set_open(false);
            while m.take(|wr_id, sges| q.push(wr_id, sges)) {}
            return Ok(q);
        }
        for seq in self.head..self.tail {
            let s = self.slot(seq);
            let b = s * self.max_sge;
            q.push(self.wr_ids[s], &self.sges[b..b + self.nsge[s] as usize]);
        }
        Ok(q)
    }
}
