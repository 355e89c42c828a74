//! The data path of one connected stream rsocket, speaking rdma-core's
//! rsocket protocol (`wire`) on an RC QP.
//!
//! Each side owns a receive buffer registered for remote write and hands
//! it to the peer half by half: the first half in the connect private
//! data, each later half as an SGE written into the peer's target SGL
//! (two slots, used in turn) when the reader has consumed a half. A
//! sender writes each chunk (from its registered bounce buffer, or
//! inline) at the current target SGE and advances it, so chunks land back
//! to back and never cross a half. The immediate data names every
//! message; the zero-length receive it consumes produces the completion
//! that tells the reader. On iWARP, which has no immediate data, a message
//! is a plain RDMA WRITE followed by a 4-byte SEND carrying the same word
//! (rdma-core's `RS_OPT_MSG_SEND`), and receives take those 4 bytes.
//!
//! Flow control: the sender numbers its data messages (u16) and may send
//! up to the number the peer last granted (`OP_SGL`): the peer's count of
//! messages its reader consumed plus its receive queue depth. The reader
//! grants again after consuming half its queue or a half of its buffer.
//! Control messages (credits, shutdown, disconnect) take their own few
//! send-queue entries, so data never starves them; we post a few receives
//! beyond the credits we grant, for the peer's control messages.
//!
//! `riowrite` is a plain RDMA WRITE into a region the peer announced with
//! `riomap` (an entry written into our target area's iomap table); the
//! same QP keeps it in order with the stream.

use core::ptr::null_mut;

use verbs_abi::*;

use super::verbs::{self, Mr};
use super::wire::{self, ConnData, Iomap, Sge, IOMAP_LEN, SGE_LEN, SGL_SIZE};
use crate::error::Res;

/// Receives posted beyond the credits we grant: the peer's control
/// messages (at most `CTRL_SLOTS` of its own in flight) land there.
pub const RESERVE: u32 = 8;
/// Send-queue entries kept for control messages (rdma-core's
/// `RS_QP_CTRL_SIZE`).
const CTRL_SLOTS: u32 = 4;
/// Bytes of the word a SEND carries in place of immediate data.
const MSG_LEN: usize = 4;

/// wr_id bits: a receive (the low bits: its message slot); a control
/// message's send. Other sends carry the bounce-buffer position their
/// completion frees up to.
const RECV_FLAG: u64 = 1 << 63;
const CTRL_FLAG: u64 = 1 << 62;
const MARK_MASK: u64 = CTRL_FLAG - 1;

/// Sizes a connection is built with (from the socket options).
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub rbuf: u32,
    pub sbuf: u32,
    pub sq: u32,
    pub slots: u32,
    pub inline: u32,
    pub iomaps: u32,
}

/// A fixed-capacity FIFO of u32 (no allocation once built).
struct Fifo {
    buf: Box<[u32]>,
    head: usize,
    len: usize,
}

impl Fifo {
    fn new(cap: usize) -> Fifo {
        Fifo {
            buf: vec![0; cap.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }
    fn full(&self) -> bool {
        self.len == self.buf.len()
    }
    fn push(&mut self, v: u32) -> bool {
        if self.full() {
            return false;
        }
        let i = (self.head + self.len) % self.buf.len();
        self.buf[i] = v;
        self.len += 1;
        true
    }
    fn front(&self) -> Option<u32> {
        (self.len > 0).then(|| self.buf[self.head])
    }
    fn pop(&mut self) -> Option<u32> {
        let v = self.front()?;
        self.head = (self.head + 1) % self.buf.len();
        self.len -= 1;
        Some(v)
    }
}

/// Memory the provider writes into behind our back (the ring, the iomap
/// table) or reads from (the bounce buffer): only reached through raw
/// pointers.
struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn new(len: usize) -> Region {
        let b = vec![0u8; len.max(1)].into_boxed_slice();
        let len = b.len();
        Region {
            ptr: Box::into_raw(b).cast(),
            len,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw of a boxed slice of `len` bytes in
        // `new`, freed once; its MR was deregistered first (field order of
        // `Conn`).
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// A region this side mapped with `riomap`.
pub struct LocalMap {
    pub addr: usize,
    pub len: usize,
    pub offset: u64,
    index: u32,
    announced: bool,
    _mr: Mr,
}

/// Progress of the connection as the data path sees it.
#[derive(Default)]
pub struct Ends {
    /// The peer shut its writing side (or closed): EOF after the data.
    pub fin_in: bool,
    /// The peer closed, or the connection is gone: writes fail with EPIPE.
    pub peer_closed: bool,
    /// A transfer failed (not a flush): the connection is broken.
    pub reset: bool,
}

/// What the peer told us when connecting, as we use it.
#[derive(Clone, Copy, Default)]
struct Peer {
    /// Its target SGL (`length` in SGEs) and the slot we write next.
    sgl: Sge,
    sgl_next: u32,
    /// Its iomap table: address, key, entries.
    iomap: Sge,
    /// Its SGEs and iomap entries go in the other byte order.
    swap: bool,
}

pub struct Conn {
    // Field order is drop order: the QP goes (in `Drop`) before its CQ,
    // the MRs before their memory and the PD.
    id: *mut rdma_cm_id,
    cq: *mut ibv_cq,
    cc: *mut ibv_comp_channel,
    pd: *mut ibv_pd,
    ring_mr: Option<Mr>,
    bounce_mr: Option<Mr>,
    target_mr: Option<Mr>,
    /// The receive buffer, then (iWARP) a word per receive.
    ring: Region,
    bounce: Region,
    /// The target SGL, then the iomap table: written by the peer.
    target: Region,
    sizes: Sizes,
    /// Entries of our iomap table (`sizes.iomaps` as the wire rounds it).
    iomaps: u32,
    max_inline: u32,
    /// iWARP: messages are SENDs, not immediate data.
    msg_send: bool,
    started: bool,
    peer: Peer,
    /// The part of its buffer the peer hands out at a time.
    peer_half: u32,
    // Sending.
    target_sge: usize,
    sseq_no: u16,
    sseq_comp: u16,
    data_free: u32,
    ctrl_free: u32,
    sb_tail: u64,
    sb_head: u64,
    // Receiving.
    rxq: Fifo,
    front_used: u32,
    rx_pos: u64,
    pub rx_avail: usize,
    rseq_no: u16,
    rseq_comp: u16,
    /// The peer has sent us something. Until then we grant nothing: it
    /// holds the credits of our connect data, and on iWARP a message of
    /// ours that reaches the initiator with the MPA reply fails its
    /// connect (siw: EINVAL), so the initiator's message goes first.
    heard: bool,
    /// Consumed bytes of the receive buffer not yet handed back.
    rbuf_free: u32,
    rbuf_free_offset: u32,
    recv_slot: u32,
    pub ends: Ends,
    pub local_maps: Vec<LocalMap>,
}

// SAFETY: the raw pointers are verbs objects and heap memory owned by this
// connection; libibverbs objects may be used from any thread, and the
// rsocket serialises every use behind its mutex.
unsafe impl Send for Conn {}

impl Conn {
    /// The PD, CQ, QP and buffers of a connection on `id` (whose device
    /// is known: after route resolution or on a connect request).
    ///
    /// # Safety
    /// `id` is a live id with `verbs` set and no QP.
    pub unsafe fn new(id: *mut rdma_cm_id, sizes: Sizes) -> Res<Box<Conn>> {
        let sizes = Sizes {
            // Halves of the receive buffer are what the peer fills.
            rbuf: sizes.rbuf.clamp(4096, 1 << 26) & !63,
            sbuf: sizes.sbuf.clamp(4096, 1 << 26),
            sq: sizes.sq.clamp(16, 4096),
            slots: sizes.slots.clamp(16, 4096),
            inline: sizes.inline.min(4096),
            iomaps: sizes.iomaps,
        };
        let iomaps = wire::iomap_size_from_byte(wire::iomap_size_to_byte(sizes.iomaps.min(1024)));
        // SAFETY: caller guarantee.
        let ctx = unsafe { (*id).verbs };
        if ctx.is_null() {
            return Err(libc::ENODEV);
        }
        // SAFETY: a live context and its device.
        let msg_send = unsafe { (*(*ctx).device).transport_type } == IBV_TRANSPORT_IWARP;
        let recvs = sizes.slots + RESERVE;
        let msg_area = if msg_send {
            recvs as usize * MSG_LEN
        } else {
            0
        };
        let target_len = SGL_SIZE as usize * SGE_LEN + iomaps as usize * IOMAP_LEN;
        let mut c = Box::new(Conn {
            id,
            cq: null_mut(),
            cc: null_mut(),
            pd: null_mut(),
            ring_mr: None,
            bounce_mr: None,
            target_mr: None,
            ring: Region::new(sizes.rbuf as usize + msg_area),
            bounce: Region::new(sizes.sbuf as usize),
            target: Region::new(target_len),
            sizes,
            iomaps,
            max_inline: 0,
            msg_send,
            started: false,
            peer: Peer::default(),
            peer_half: 0,
            target_sge: 0,
            sseq_no: 0,
            sseq_comp: 0,
            data_free: sizes.sq - CTRL_SLOTS,
            ctrl_free: CTRL_SLOTS,
            sb_tail: 0,
            sb_head: 0,
            rxq: Fifo::new(recvs as usize),
            front_used: 0,
            rx_pos: 0,
            rx_avail: 0,
            rseq_no: 0,
            rseq_comp: (sizes.slots / 2) as u16,
            heard: false,
            // The second half is free from the start: it goes to the peer
            // in our first credit message.
            rbuf_free: sizes.rbuf / 2,
            rbuf_free_offset: sizes.rbuf / 2,
            recv_slot: 0,
            ends: Ends::default(),
            local_maps: Vec::new(),
        });
        // SAFETY: `ctx` is the id's open device; every object made here is
        // recorded in `c` and released by its Drop on failure.
        unsafe {
            c.pd = verbs::ibv_alloc_pd(ctx);
            if c.pd.is_null() {
                return Err(crate::error::errno());
            }
            c.cc = verbs::ibv_create_comp_channel(ctx);
            if c.cc.is_null() {
                return Err(crate::error::errno());
            }
            set_nonblocking((*c.cc).fd);
            let cqe = (sizes.sq + recvs) as i32;
            c.cq = verbs::ibv_create_cq(ctx, cqe, null_mut(), c.cc, 0);
            if c.cq.is_null() {
                return Err(crate::error::errno());
            }
            let remote = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as i32;
            c.ring_mr = Some(Mr::new(c.pd, c.ring.ptr, c.ring.len, remote)?);
            c.target_mr = Some(Mr::new(c.pd, c.target.ptr, c.target.len, remote)?);
            c.bounce_mr = Some(Mr::new(
                c.pd,
                c.bounce.ptr,
                c.bounce.len,
                IBV_ACCESS_LOCAL_WRITE as i32,
            )?);
            let mut attr = ibv_qp_init_attr::zeroed();
            attr.send_cq = c.cq;
            attr.recv_cq = c.cq;
            attr.qp_type = IBV_QPT_RC;
            attr.sq_sig_all = 1;
            attr.cap.max_send_wr = sizes.sq;
            attr.cap.max_recv_wr = recvs;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            // Control payloads (an SGE, an iomap entry) always go inline.
            attr.cap.max_inline_data = sizes.inline.max(IOMAP_LEN as u32);
            if crate::cma::rdma_create_qp(id, c.pd, &mut attr) != 0 {
                return Err(crate::error::errno());
            }
            c.max_inline = attr.cap.max_inline_data;
            if c.max_inline < IOMAP_LEN as u32 {
                return Err(libc::EOPNOTSUPP);
            }
            for _ in 0..recvs {
                c.post_recv()?;
            }
        }
        Ok(c)
    }

    /// What this side tells its peer.
    pub fn conn_data(&self) -> ConnData {
        let rkey = |m: &Option<Mr>| m.as_ref().map(|m| m.rkey()).unwrap_or(0);
        ConnData {
            flags: wire::our_flags(),
            credits: self.sizes.slots as u16,
            iomap_size: self.iomaps,
            target_sgl: Sge {
                addr: self.target.ptr as u64,
                key: rkey(&self.target_mr),
                length: SGL_SIZE,
            },
            data_buf: Sge {
                addr: self.ring.ptr as u64,
                key: rkey(&self.ring_mr),
                length: self.sizes.rbuf / 2,
            },
        }
    }

    /// The peer's connect data arrived: the connection may carry data.
    pub fn start(&mut self, peer: ConnData) {
        self.peer = Peer {
            sgl: peer.target_sgl,
            sgl_next: 1 % peer.target_sgl.length,
            iomap: Sge {
                addr: peer.target_sgl.addr + peer.target_sgl.length as u64 * SGE_LEN as u64,
                key: peer.target_sgl.key,
                length: peer.iomap_size,
            },
            swap: peer.swapped(),
        };
        self.set_target_sgl(0, peer.data_buf);
        self.sseq_comp = peer.credits;
        self.peer_half = peer.data_buf.length;
        self.started = true;
    }

    pub fn comp_fd(&self) -> i32 {
        // SAFETY: a live completion channel.
        unsafe { (*self.cc).fd }
    }

    /// Arms the CQ so the next completion wakes the channel descriptor.
    pub fn arm(&self) {
        // SAFETY: a live CQ.
        unsafe { verbs::arm_cq(self.cq) };
    }

    /// Takes the completion channel's events (after a wakeup).
    pub fn drain_events(&self) {
        // SAFETY: the live channel of our CQ.
        unsafe { verbs::drain_cq_events(self.cc) };
    }

    fn qp(&self) -> *mut ibv_qp {
        // SAFETY: a live id (the rsocket destroys the connection first).
        unsafe { (*self.id).qp }
    }

    pub fn all_sent(&self) -> bool {
        self.data_free == self.sizes.sq - CTRL_SLOTS && self.ctrl_free == CTRL_SLOTS
    }

    /// Send-queue entries one message takes.
    fn per_msg(&self) -> u32 {
        if self.msg_send {
            2
        } else {
            1
        }
    }

    // -- the target area (written by the peer) --------------------------------

    fn target_sgl(&self, i: usize) -> Sge {
        let mut b = [0u8; SGE_LEN];
        for (k, v) in b.iter_mut().enumerate() {
            // SAFETY: slot `i` < SGL_SIZE lies inside the target
            // allocation; the peer may write it at any time, so it is read
            // volatile, byte by byte (tearing cannot matter: the peer
            // writes a slot only once we have used it up, before telling
            // us).
            *v = unsafe { self.target.ptr.add(i * SGE_LEN + k).read_volatile() };
        }
        Sge::from_bytes(&b)
    }

    fn set_target_sgl(&mut self, i: usize, s: Sge) {
        for (k, v) in s.to_bytes(false).iter().enumerate() {
            // SAFETY: as in `target_sgl`; the slot is ours until we hand
            // it back by using it up.
            unsafe { self.target.ptr.add(i * SGE_LEN + k).write_volatile(*v) };
        }
    }

    /// The peer's mapping covering `offset`.
    fn remote_map(&self, offset: u64) -> Option<Iomap> {
        let base = SGL_SIZE as usize * SGE_LEN;
        (0..self.iomaps as usize).find_map(|i| {
            let mut b = [0u8; IOMAP_LEN];
            for (k, v) in b.iter_mut().enumerate() {
                // SAFETY: entry `i` < iomaps lies inside the target
                // allocation; the peer writes it behind our back.
                *v = unsafe {
                    self.target
                        .ptr
                        .add(base + i * IOMAP_LEN + k)
                        .read_volatile()
                };
            }
            let m = Iomap::from_bytes(&b);
            m.covers(offset).then_some(m)
        })
    }

    // -- completions --------------------------------------------------------

    /// Polls the CQ dry and applies what it says.
    pub fn progress(&mut self) {
        let mut wc = [ibv_wc::zeroed(); 16];
        loop {
            // SAFETY: our live CQ.
            let n = match unsafe { verbs::poll_cq(self.cq, &mut wc) } {
                Ok(n) => n,
                Err(_) => {
                    self.ends.reset = true;
                    0
                }
            };
            for w in &wc[..n] {
                self.complete(w);
            }
            if n < wc.len() {
                break;
            }
        }
        self.update_credits();
    }

    fn complete(&mut self, w: &ibv_wc) {
        if w.wr_id & RECV_FLAG == 0 {
            if w.wr_id & CTRL_FLAG != 0 {
                self.ctrl_free += 1;
            } else {
                self.data_free += 1;
                self.sb_head = self.sb_head.max(w.wr_id & MARK_MASK);
            }
            if w.status != IBV_WC_SUCCESS && w.status != IBV_WC_WR_FLUSH_ERR {
                self.ends.reset = true;
                self.ends.peer_closed = true;
            }
            return;
        }
        if w.status != IBV_WC_SUCCESS {
            // Flushed: the connection is going away.
            self.ends.peer_closed = true;
            self.ends.fin_in = true;
            return;
        }
        self.heard = true;
        let m = if w.wc_flags & IBV_WC_WITH_IMM != 0 {
            u32::from_be(w.imm_data())
        } else {
            let slot = (w.wr_id & !RECV_FLAG) as usize;
            let at = self.sizes.rbuf as usize + slot * MSG_LEN;
            let mut b = [0u8; MSG_LEN];
            if at + MSG_LEN <= self.ring.len {
                // SAFETY: inside the ring allocation (checked); the SEND
                // that filled it completed.
                unsafe {
                    core::ptr::copy_nonoverlapping(self.ring.ptr.add(at), b.as_mut_ptr(), MSG_LEN)
                };
            }
            // The sender's own order, as rdma-core writes it.
            let v = u32::from_ne_bytes(b);
            if self.peer.swap {
                v.swap_bytes()
            } else {
                v
            }
        };
        // SAFETY: our live QP; the receive's buffer (if any) is ours.
        if unsafe { self.post_recv() }.is_err() {
            self.ends.reset = true;
        }
        let v = wire::msg_data(m);
        match wire::msg_op(m) {
            wire::OP_SGL => self.sseq_comp = v as u16,
            // The entry is already in our table.
            wire::OP_IOMAP_SGL | wire::OP_WRITE => {}
            wire::OP_CTRL => match v {
                wire::CTRL_DISCONNECT => {
                    self.ends.fin_in = true;
                    self.ends.peer_closed = true;
                }
                wire::CTRL_SHUTDOWN => self.ends.fin_in = true,
                _ => {}
            },
            // Data (rdma-core takes every other op as data too).
            _ => {
                if v == 0 {
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                } else if self.rx_avail + v as usize <= self.sizes.rbuf as usize && self.rxq.push(v)
                {
                    self.rx_avail += v as usize;
                } else {
                    // More than we granted room for.
                    self.ends.reset = true;
                }
            }
        }
    }

    /// Posts one receive (with its message word's slot on iWARP).
    ///
    /// # Safety
    /// The QP is live.
    unsafe fn post_recv(&mut self) -> Res<()> {
        if !self.msg_send {
            // SAFETY: caller guarantee.
            return unsafe { verbs::post_recv(self.qp(), RECV_FLAG, None) };
        }
        let slot = self.recv_slot;
        self.recv_slot = (slot + 1) % (self.sizes.slots + RESERVE);
        let sge = ibv_sge {
            addr: self.ring.ptr as u64 + self.sizes.rbuf as u64 + (slot as usize * MSG_LEN) as u64,
            length: MSG_LEN as u32,
            lkey: self.ring_mr.as_ref().map(|m| m.lkey()).unwrap_or(0),
        };
        // SAFETY: caller guarantee; the slot lies in the registered ring
        // and is not reused before this receive completes (receives
        // complete in order, and there are as many slots as receives).
        unsafe { verbs::post_recv(self.qp(), RECV_FLAG | slot as u64, Some(sge)) }
    }

    // -- sending ------------------------------------------------------------

    /// Posts one message: a write of `src` at `remote` carrying `m` (as
    /// immediate data, or in a SEND after it on iWARP), or with `m` None
    /// a plain RDMA WRITE. `mark` is the wr_id (with CTRL_FLAG for a
    /// control message).
    fn post(&mut self, src: Src, remote: (u64, u32), m: Option<u32>, mark: u64) -> Res<()> {
        let (addr, len, lkey, flags) = match src {
            Src::Inline(p, n) => (p as u64, n, 0, IBV_SEND_INLINE),
            Src::Bounce(off, n) => (
                self.bounce.ptr as u64 + off,
                n,
                self.bounce_mr.as_ref().map(|m| m.lkey()).unwrap_or(0),
                0,
            ),
            Src::None => (0, 0, 0, 0),
        };
        let mut sge = ibv_sge {
            addr,
            length: len,
            lkey,
        };
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = mark;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(len > 0);
        wr.send_flags = flags | IBV_SEND_SIGNALED;
        wr.opcode = IBV_WR_RDMA_WRITE;
        if let (Some(v), false) = (m, self.msg_send) {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.set_imm_data(v.to_be());
        }
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: remote.0,
            rkey: remote.1,
        };
        let per = match (m, self.msg_send) {
            (Some(_), true) => 2,
            _ => 1,
        };
        let pool = if mark & CTRL_FLAG != 0 {
            self.ctrl_free
        } else {
            self.data_free
        };
        if pool < per {
            return Err(libc::EAGAIN);
        }
        // On iWARP a message with nothing to write is the SEND alone.
        let write = !(self.msg_send && m.is_some() && len == 0);
        if write {
            // SAFETY: our live QP; `wr` and `sge` live through the call,
            // and an inline payload is copied before it returns.
            unsafe { verbs::post_send(self.qp(), &mut wr) }?;
            self.take(mark, 1);
        }
        if let (Some(v), true) = (m, self.msg_send) {
            let word = if self.peer.swap { v.swap_bytes() } else { v };
            let b = word.to_ne_bytes();
            let mut sge = ibv_sge {
                addr: b.as_ptr() as u64,
                length: MSG_LEN as u32,
                lkey: 0,
            };
            let mut wr = ibv_send_wr::zeroed();
            wr.wr_id = mark;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
            // SAFETY: as above; the word is copied inline.
            unsafe { verbs::post_send(self.qp(), &mut wr) }?;
            self.take(mark, 1);
        }
        Ok(())
    }

    fn take(&mut self, mark: u64, n: u32) {
        if mark & CTRL_FLAG != 0 {
            self.ctrl_free -= n;
        } else {
            self.data_free -= n;
        }
    }

    /// rdma-core's `rs_give_credits`: after consuming half the receive
    /// buffer or half the granted messages.
    fn credits_due(&self) -> bool {
        let half = self.sizes.rbuf / 2;
        self.started
            && self.heard
            && !self.ends.peer_closed
            && self.ctrl_free >= 2
            && (self.rbuf_free >= half || self.rseq_no.wrapping_sub(self.rseq_comp) as i16 >= 0)
    }

    fn update_credits(&mut self) {
        // At most two rounds: a half handed back, then the count alone.
        for _ in 0..2 {
            if !self.credits_due() || self.send_credits().is_err() {
                return;
            }
        }
    }

    fn send_credits(&mut self) -> Res<()> {
        let half = self.sizes.rbuf / 2;
        let grant = wire::msg(
            wire::OP_SGL,
            self.rseq_no.wrapping_add(self.sizes.slots as u16) as u32,
        );
        if self.rbuf_free >= half {
            let sge = Sge {
                addr: self.ring.ptr as u64 + self.rbuf_free_offset as u64,
                key: self.ring_mr.as_ref().map(|m| m.rkey()).unwrap_or(0),
                length: half,
            };
            let b = sge.to_bytes(self.peer.swap);
            let slot = self.peer.sgl.addr + self.peer.sgl_next as u64 * SGE_LEN as u64;
            self.post(
                Src::Inline(b.as_ptr(), SGE_LEN as u32),
                (slot, self.peer.sgl.key),
                Some(grant),
                CTRL_FLAG,
            )?;
            self.rbuf_free -= half;
            self.rbuf_free_offset = (self.rbuf_free_offset + half) % self.sizes.rbuf;
            self.peer.sgl_next = (self.peer.sgl_next + 1) % self.peer.sgl.length;
        } else {
            let at = (self.peer.sgl.addr, self.peer.sgl.key);
            self.post(Src::None, at, Some(grant), CTRL_FLAG)?;
        }
        self.rseq_comp = self.rseq_no.wrapping_add((self.sizes.slots / 2) as u16);
        Ok(())
    }

    /// Sends a SHUTDOWN (`close` false) or DISCONNECT; false when the
    /// control entries are busy for now.
    pub fn send_end(&mut self, close: bool) -> Res<bool> {
        if self.ctrl_free < self.per_msg() {
            return Ok(false);
        }
        let v = if close {
            wire::CTRL_DISCONNECT
        } else {
            wire::CTRL_SHUTDOWN
        };
        let at = (self.peer.sgl.addr, self.peer.sgl.key);
        self.post(Src::None, at, Some(wire::msg(wire::OP_CTRL, v)), CTRL_FLAG)?;
        Ok(true)
    }

    /// rdma-core's keepalive: a zero-length RDMA WRITE without immediate
    /// data, which the peer's hardware acknowledges and its rsocket never
    /// sees; a dead peer fails it (retries exhausted) and so the
    /// connection. False when the control entries are busy.
    pub fn send_keepalive(&mut self) -> Res<bool> {
        if self.ctrl_free == 0 {
            return Ok(false);
        }
        let at = (self.peer.sgl.addr, self.peer.sgl.key);
        self.post(Src::None, at, None, CTRL_FLAG)?;
        Ok(true)
    }

    /// Room for one more data message right now (bytes, capped by the
    /// target SGE and the contiguous part of our bounce buffer).
    fn room(&self) -> usize {
        if !self.started || self.data_free < self.per_msg() || self.sseq_no == self.sseq_comp {
            return 0;
        }
        let t = self.target_sgl(self.target_sge);
        // Half an SGE (a quarter of the peer's buffer) per message keeps
        // several in flight while its reader empties the first.
        t.length.min((self.peer_half / 2).max(1)) as usize
    }

    fn bounce_room(&self) -> usize {
        let s = self.bounce.len as u64;
        let free = s - (self.sb_tail - self.sb_head);
        free.min(s - self.sb_tail % s) as usize
    }

    /// Leaves a sliver at the bounce buffer's end unused rather than send
    /// a message of a few bytes from it: the next completion past it
    /// frees it with the rest.
    fn skip_bounce_tail(&mut self, want: usize) {
        let s = self.bounce.len as u64;
        let contig = s - self.sb_tail % s;
        let free = s - (self.sb_tail - self.sb_head);
        if (contig as usize) < want.min(4096) && free > contig {
            self.sb_tail += contig;
        }
    }

    pub fn writable(&self) -> bool {
        self.room() > 0 && self.bounce_room() > 0
    }

    /// Sends as much of `bufs` as fits now; the bytes taken.
    ///
    /// # Safety
    /// Every iovec names readable memory.
    pub unsafe fn send(&mut self, bufs: &[libc::iovec]) -> Res<usize> {
        let mut total = 0;
        for b in bufs {
            let mut off = 0;
            while off < b.iov_len {
                let room = self.room();
                if room == 0 {
                    return Ok(total);
                }
                let want = (b.iov_len - off).min(room);
                // SAFETY: inside the caller's buffer.
                let src = unsafe { (b.iov_base as *const u8).add(off) };
                let n = if want as u32 <= self.max_inline.min(self.sizes.inline) {
                    self.post_data(Src::Inline(src, want as u32), want)?
                } else {
                    self.skip_bounce_tail(want);
                    let n = want.min(self.bounce_room());
                    if n == 0 {
                        return Ok(total);
                    }
                    let at = self.sb_tail % self.bounce.len as u64;
                    // SAFETY: `n` bytes fit contiguously in the bounce
                    // buffer at `at` (bounce_room), which no posted write
                    // still reads (they read before sb_head); the source
                    // is the caller's.
                    unsafe {
                        core::ptr::copy_nonoverlapping(src, self.bounce.ptr.add(at as usize), n)
                    };
                    self.post_data(Src::Bounce(at, n as u32), n)?
                };
                off += n;
                total += n;
            }
        }
        Ok(total)
    }

    fn post_data(&mut self, src: Src, n: usize) -> Res<usize> {
        let i = self.target_sge;
        let t = self.target_sgl(i);
        let release = match src {
            Src::Bounce(..) => self.sb_tail + n as u64,
            _ => self.sb_tail,
        };
        // The SGE moves before the write goes: once it is used up the
        // peer may rewrite the slot at any time.
        let rest = Sge {
            addr: t.addr + n as u64,
            length: t.length - n as u32,
            ..t
        };
        self.set_target_sgl(i, rest);
        let m = Some(wire::msg(wire::OP_DATA, n as u32));
        if let Err(e) = self.post(src, (t.addr, t.key), m, release) {
            // Nothing went: the slot is still ours.
            self.set_target_sgl(i, t);
            return Err(e);
        }
        if rest.length == 0 {
            self.target_sge = (i + 1) % SGL_SIZE as usize;
        }
        self.sb_tail = release;
        self.sseq_no = self.sseq_no.wrapping_add(1);
        Ok(n)
    }

    // -- receiving ----------------------------------------------------------

    /// Copies up to the iovecs' room out of the ring; the bytes copied.
    /// `peek` leaves them there.
    ///
    /// # Safety
    /// Every iovec names writable memory.
    pub unsafe fn recv(&mut self, bufs: &[libc::iovec], peek: bool) -> usize {
        let r = self.sizes.rbuf as u64;
        let mut total = 0;
        // A peek walks a copy of the reader's position.
        let (mut pos, mut used, mut qi) = (self.rx_pos, self.front_used, 0usize);
        for b in bufs {
            let mut off = 0;
            while off < b.iov_len {
                if qi >= self.rxq.len {
                    return self.finish_recv(total, peek);
                }
                let len = self.rxq.buf[(self.rxq.head + qi) % self.rxq.buf.len()];
                let at = (pos % r) as usize;
                // Messages never cross the buffer's end when the peer
                // keeps to its SGEs; one that does is cut there.
                let n = ((len - used) as usize)
                    .min(b.iov_len - off)
                    .min(r as usize - at);
                // SAFETY: `at + n` <= the ring's data part; the peer
                // finished writing it before its completion; the
                // destination is the caller's.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        self.ring.ptr.add(at),
                        (b.iov_base as *mut u8).add(off),
                        n,
                    )
                };
                off += n;
                total += n;
                pos += n as u64;
                used += n as u32;
                if !peek {
                    self.rbuf_free += n as u32;
                }
                if used == len {
                    used = 0;
                    qi += 1;
                    if !peek {
                        self.rseq_no = self.rseq_no.wrapping_add(1);
                    }
                }
                if !peek {
                    self.rx_pos = pos;
                    self.front_used = used;
                    if used == 0 {
                        self.rxq.pop();
                        qi = 0;
                    }
                }
            }
        }
        self.finish_recv(total, peek)
    }

    fn finish_recv(&mut self, total: usize, peek: bool) -> usize {
        if !peek {
            self.rx_avail -= total;
            self.update_credits();
        }
        total
    }

    // -- iomap --------------------------------------------------------------

    /// Maps `addr..addr+len` for the peer's riowrite at `offset`. The
    /// peer hears of it before anything sent after this call (at once, or
    /// as soon as the connection is up and credits allow).
    pub fn iomap(&mut self, addr: usize, len: usize, offset: u64, connected: bool) -> Res<u64> {
        let index = (0..self.peer.iomap.length)
            .find(|i| self.local_maps.iter().all(|m| m.index != *i))
            .ok_or(libc::ENOMEM)?;
        if len > u32::MAX as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's buffer; riomap's contract keeps it valid
        // until riounmap or close.
        let mr = unsafe {
            Mr::new(
                self.pd,
                addr as *mut u8,
                len,
                (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as i32,
            )
        }?;
        self.local_maps.push(LocalMap {
            addr,
            len,
            offset,
            index,
            announced: false,
            _mr: mr,
        });
        if connected {
            self.announce_pending();
        }
        Ok(offset)
    }

    /// Tells the peer about mappings it does not know yet.
    pub fn announce_pending(&mut self) {
        for i in 0..self.local_maps.len() {
            let m = &self.local_maps[i];
            if m.announced {
                continue;
            }
            let e = Iomap {
                offset: m.offset,
                sge: Sge {
                    addr: m.addr as u64,
                    key: m._mr.rkey(),
                    length: m.len as u32,
                },
            };
            if self.announce(m.index, e).is_err() {
                return;
            }
            self.local_maps[i].announced = true;
        }
    }

    pub fn iounmap(&mut self, addr: usize, len: usize) -> Res<()> {
        let i = self
            .local_maps
            .iter()
            .position(|m| m.addr == addr && m.len == len)
            .ok_or(libc::EINVAL)?;
        let m = &self.local_maps[i];
        // rdma-core leaves the peer's entry in place; an empty one keeps
        // the peer from writing into memory that is no longer ours to
        // offer (rdma-core peers read the table the same way).
        if m.announced && !self.ends.peer_closed {
            let _ = self.announce(m.index, Iomap::default());
        }
        self.local_maps.remove(i);
        Ok(())
    }

    /// Writes entry `index` of the peer's iomap table. It counts as a
    /// data message, as rdma-core counts it.
    fn announce(&mut self, index: u32, e: Iomap) -> Res<()> {
        if !self.started || self.sseq_no == self.sseq_comp {
            return Err(libc::EAGAIN);
        }
        let b = e.to_bytes(self.peer.swap);
        let at = self.peer.iomap.addr + index as u64 * IOMAP_LEN as u64;
        let mark = self.sb_tail;
        self.post(
            Src::Inline(b.as_ptr(), IOMAP_LEN as u32),
            (at, self.peer.iomap.key),
            Some(wire::msg(wire::OP_IOMAP_SGL, index)),
            mark,
        )?;
        self.sseq_no = self.sseq_no.wrapping_add(1);
        Ok(())
    }

    pub fn has_remote_map(&self, offset: u64) -> bool {
        self.remote_map(offset).is_some()
    }

    /// Writes as much of `data` as fits now at the peer's `offset`.
    ///
    /// # Safety
    /// `data..data+len` is readable.
    pub unsafe fn iowrite(&mut self, data: *const u8, len: usize, offset: u64) -> Res<usize> {
        let mut done = 0;
        while done < len {
            let at = offset + done as u64;
            let Some(m) = self.remote_map(at) else {
                return if done > 0 {
                    Ok(done)
                } else {
                    Err(libc::EINVAL)
                };
            };
            if self.data_free == 0 {
                break;
            }
            let left = m.sge.length as u64 - (at - m.offset);
            let remote = (m.sge.addr + (at - m.offset), m.sge.key);
            let want = ((len - done) as u64).min(left) as usize;
            // SAFETY: inside the caller's buffer.
            let src = unsafe { data.add(done) };
            let n = if want as u32 <= self.max_inline.min(self.sizes.inline) {
                let mark = self.sb_tail;
                self.post(Src::Inline(src, want as u32), remote, None, mark)?;
                want
            } else {
                let n = want.min(self.bounce_room());
                if n == 0 {
                    break;
                }
                let at = self.sb_tail % self.bounce.len as u64;
                // SAFETY: as in `send`.
                unsafe { core::ptr::copy_nonoverlapping(src, self.bounce.ptr.add(at as usize), n) };
                let mark = self.sb_tail + n as u64;
                self.post(Src::Bounce(at, n as u32), remote, None, mark)?;
                self.sb_tail = mark;
                n
            };
            done += n;
        }
        Ok(done)
    }
}

#[derive(Clone, Copy)]
enum Src {
    Inline(*const u8, u32),
    Bounce(u64, u32),
    None,
}

fn set_nonblocking(fd: i32) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.local_maps.clear();
        // SAFETY: the objects were made in `new` (null when not) and are
        // released once, QP before CQ before channel, MRs before the PD.
        unsafe {
            if !(*self.id).qp.is_null() {
                crate::cma::rdma_destroy_qp(self.id);
            }
            if !self.cq.is_null() {
                verbs::ibv_destroy_cq(self.cq);
            }
            if !self.cc.is_null() {
                verbs::ibv_destroy_comp_channel(self.cc);
            }
            self.ring_mr = None;
            self.bounce_mr = None;
            self.target_mr = None;
            if !self.pd.is_null() {
                verbs::dealloc_pd(self.pd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_keeps_order_and_capacity() {
        let mut f = Fifo::new(3);
        assert!(f.push(1) && f.push(2) && f.push(3));
        assert!(!f.push(4));
        assert_eq!(f.pop(), Some(1));
        assert!(f.push(4));
        assert_eq!(
            (f.pop(), f.pop(), f.pop(), f.pop()),
            (Some(2), Some(3), Some(4), None)
        );
    }
}
