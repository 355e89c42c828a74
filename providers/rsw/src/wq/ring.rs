//! A QP's work queues: the send and receive rings, preallocated when the
//! QP is created so posting never allocates. Sequence numbers only grow;
//! a slot is `seq % cap`.

use verbs_abi::*;

use crate::device::MAX_SGE;
use crate::transport::mailbox::Mailbox;
use crate::wire::Op;
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
}

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
}

impl SendWqe {
    const EMPTY: SendWqe = SendWqe {
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
    pub wqes: Box<[SendWqe]>,
    pub(crate) sges: Box<[ibv_sge]>,
    pub(crate) inline_buf: Box<[u8]>,
    pub cap: usize,
    pub max_sge: usize,
    pub max_inline: usize,
    head: u64,
    tx: u64,
    tail: u64,
}

impl SendQueue {
    pub(crate) fn new(cap: usize, max_sge: usize, max_inline: usize) -> SendQueue {
        SendQueue {
            wqes: vec![SendWqe::EMPTY; cap].into_boxed_slice(),
            sges: vec![NO_SGE; cap * max_sge].into_boxed_slice(),
            inline_buf: vec![0u8; cap * max_inline].into_boxed_slice(),
            cap,
            max_sge,
            max_inline,
            head: 0,
            tx: 0,
            tail: 0,
        }
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

    /// Bytes its scatter list holds.
    pub fn room(&self) -> u64 {
        self.sges().iter().map(|s| s.length as u64).sum()
    }
}

/// The receive queue ring: private, or in a mailbox same-host peers take
/// receives from (`transport::mailbox`), which then holds the entries and
/// the indices.
pub struct RecvQueue {
    pub(crate) wr_ids: Box<[u64]>,
    pub(crate) nsge: Box<[u32]>,
    pub(crate) sges: Box<[ibv_sge]>,
    pub cap: usize,
    pub max_sge: usize,
    head: u64,
    tail: u64,
    shared: Option<Arc<Mailbox>>,
}

impl RecvQueue {
    pub fn new(cap: usize, max_sge: usize) -> RecvQueue {
        RecvQueue {
            wr_ids: vec![0; cap].into_boxed_slice(),
            nsge: vec![0; cap].into_boxed_slice(),
            sges: vec![NO_SGE; cap * max_sge].into_boxed_slice(),
            cap,
            max_sge,
            head: 0,
            tail: 0,
            shared: None,
        }
    }

    /// A queue in a mailbox if the same-host path can have one, else
    /// private.
    pub fn shared(cap: usize, max_sge: usize) -> RecvQueue {
        match Mailbox::new(cap, max_sge) {
            Some(m) => RecvQueue {
                shared: Some(Arc::new(m)),
                ..RecvQueue::new(0, 0)
            }
            .with_shape(cap, max_sge),
            None => RecvQueue::new(cap, max_sge),
        }
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
    /// `len`). A mailbox's ring is closed first, so same-host peers stop
    /// taking from it (they send over the connection from then on) and
    /// the receives left in it move here.
    pub fn resized(&mut self, cap: usize) -> RecvQueue {
        let mut q = RecvQueue::new(cap, self.max_sge);
        if let Some(m) = &self.shared {
            m.set_open(false);
            while m.take(|wr_id, sges| q.push(wr_id, sges)) {}
            return q;
        }
        for seq in self.head..self.tail {
            let s = self.slot(seq);
            let b = s * self.max_sge;
            q.push(self.wr_ids[s], &self.sges[b..b + self.nsge[s] as usize]);
        }
        q
    }
}
