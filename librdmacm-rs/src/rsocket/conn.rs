//! The data path of one connected stream rsocket: an RC QP whose every
//! message is an RDMA WRITE WITH IMMEDIATE.
//!
//! Each side owns a receive ring (registered for remote write) and tells
//! its peer where it is in the connection's private data ([`Hello`]). A
//! sender copies a chunk into its registered bounce buffer (or sends it
//! inline) and writes it at its running position in the peer's ring; the
//! immediate names the message's kind and length, and the zero-length
//! receive it consumes (reposted as soon as it is polled) produces the
//! completion that tells the reader. Chunks never wrap around the ring
//! end, and RC delivers in order, so the reader finds the messages back to
//! back and needs no header.
//!
//! Flow control is one counter: a credit message says how many data
//! messages the reader has fully consumed since the last one. The sender
//! keeps the lengths of its unacknowledged messages in a FIFO, so the
//! count also tells it how many ring bytes were freed. Data messages are
//! limited to the `slots` receives the peer announced; credits, FIN/CLOSE
//! and iomap announcements ride on a few extra receives the reader keeps
//! posted ([`RESERVE`]) and reposts at once: a side sends a credit only
//! after consuming half the window, so at most a couple are ever in flight.
//!
//! `riowrite` is a plain RDMA WRITE into a region the peer announced with
//! `riomap` (an entry written into the peer's iomap table, after the
//! ring); the same QP keeps it in order with the stream.

use core::ptr::null_mut;

use verbs_abi::*;

use super::verbs::{self, Mr};
use crate::error::Res;

/// Receives posted beyond the data slots, for control messages.
pub const RESERVE: u32 = 8;
/// Bytes of one iomap table entry.
const IOMAP_ENTRY: usize = 32;
/// Wire version of [`Hello`].
const MAGIC: u32 = 0x5253_4b31; // "RSK1"
pub const HELLO_LEN: usize = 36;

const KIND_SHIFT: u32 = 30;
const VALUE_MASK: u32 = (1 << KIND_SHIFT) - 1;
const KIND_DATA: u32 = 0;
const KIND_CREDIT: u32 = 1;
const KIND_CTRL: u32 = 2;
const KIND_IOMAP: u32 = 3;
const CTRL_FIN: u32 = 1;
const CTRL_CLOSE: u32 = 2;

/// Receive completions carry this id; sends carry the bounce buffer
/// position their completion frees up to.
const RECV_ID: u64 = u64::MAX;

/// What each side tells the other when connecting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    pub ring_addr: u64,
    pub rkey: u32,
    pub ring_size: u32,
    /// Data messages the sender may have unacknowledged.
    pub slots: u32,
    pub table_addr: u64,
    /// Entries of the iomap table (how many regions the peer may map).
    pub iomaps: u32,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..12].copy_from_slice(&self.ring_addr.to_le_bytes());
        b[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        b[16..20].copy_from_slice(&self.ring_size.to_le_bytes());
        b[20..24].copy_from_slice(&self.slots.to_le_bytes());
        b[24..32].copy_from_slice(&self.table_addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.iomaps.to_le_bytes());
        b
    }

    /// The peer's hello; None when it is not one of ours or is unusable.
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() < HELLO_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        if u32_at(0) != MAGIC {
            return None;
        }
        let h = Hello {
            ring_addr: u64_at(4),
            rkey: u32_at(12),
            ring_size: u32_at(16),
            slots: u32_at(20),
            table_addr: u64_at(24),
            iomaps: u32_at(32),
        };
        (h.ring_size > 0 && h.ring_size <= VALUE_MASK && h.slots > 0 && h.slots <= 1 << 16)
            .then_some(h)
    }
}

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

#[derive(Clone, Copy, Default)]
struct RemoteMap {
    offset: u64,
    addr: u64,
    len: u64,
    rkey: u32,
    valid: bool,
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

pub struct Conn {
    // Field order is drop order: the QP goes (in `Drop`) before its CQ,
    // the MRs before their memory and the PD.
    id: *mut rdma_cm_id,
    cq: *mut ibv_cq,
    cc: *mut ibv_comp_channel,
    pd: *mut ibv_pd,
    ring_mr: Option<Mr>,
    bounce_mr: Option<Mr>,
    ring: Region,
    bounce: Region,
    sizes: Sizes,
    max_inline: u32,
    peer: Hello,
    // Sending.
    sent: u64,
    acked: u64,
    unacked: Fifo,
    sq_free: u32,
    sb_tail: u64,
    sb_head: u64,
    pending_credit: bool,
    // Receiving.
    rxq: Fifo,
    front_used: u32,
    rx_pos: u64,
    /// Where the next message lands in the ring (cumulative).
    rx_in: u64,
    pub rx_avail: usize,
    unrep_msgs: u32,
    unrep_bytes: u64,
    pub ends: Ends,
    remote_maps: Box<[RemoteMap]>,
    pub local_maps: Vec<LocalMap>,
}

// SAFETY: the raw pointers are verbs objects and heap memory owned by this
// connection; libibverbs objects may be used from any thread, and the
// rsocket serialises every use behind its mutex.
unsafe impl Send for Conn {}

fn clamp(v: u32, lo: u32, hi: u32) -> u32 {
    v.clamp(lo, hi)
}

impl Conn {
    /// The PD, CQ, QP and rings of a connection on `id` (whose device is
    /// known: after route resolution or on a connect request).
    ///
    /// # Safety
    /// `id` is a live id with `verbs` set and no QP.
    pub unsafe fn new(id: *mut rdma_cm_id, sizes: Sizes) -> Res<Box<Conn>> {
        let sizes = Sizes {
            rbuf: clamp(sizes.rbuf, 4096, 1 << 26),
            sbuf: clamp(sizes.sbuf, 4096, 1 << 26),
            sq: clamp(sizes.sq, 4, 4096),
            slots: clamp(sizes.slots, 2, 4096),
            inline: sizes.inline.min(4096),
            iomaps: sizes.iomaps.min(1024),
        };
        // SAFETY: caller guarantee.
        let ctx = unsafe { (*id).verbs };
        if ctx.is_null() {
            return Err(libc::ENODEV);
        }
        let table = sizes.iomaps as usize * IOMAP_ENTRY;
        let mut c = Box::new(Conn {
            id,
            cq: null_mut(),
            cc: null_mut(),
            pd: null_mut(),
            ring_mr: None,
            bounce_mr: None,
            ring: Region::new(sizes.rbuf as usize + table),
            bounce: Region::new(sizes.sbuf as usize),
            sizes,
            max_inline: 0,
            peer: Hello::default(),
            sent: 0,
            acked: 0,
            unacked: Fifo::new(1),
            sq_free: sizes.sq,
            sb_tail: 0,
            sb_head: 0,
            pending_credit: false,
            rxq: Fifo::new(sizes.slots as usize),
            front_used: 0,
            rx_pos: 0,
            rx_in: 0,
            rx_avail: 0,
            unrep_msgs: 0,
            unrep_bytes: 0,
            ends: Ends::default(),
            remote_maps: Box::new([]),
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
            let cqe = (sizes.sq + sizes.slots + RESERVE) as i32;
            c.cq = verbs::ibv_create_cq(ctx, cqe, null_mut(), c.cc, 0);
            if c.cq.is_null() {
                return Err(crate::error::errno());
            }
            c.ring_mr = Some(Mr::new(
                c.pd,
                c.ring.ptr,
                c.ring.len,
                (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as i32,
            )?);
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
            attr.cap.max_recv_wr = sizes.slots + RESERVE;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = sizes.inline.max(IOMAP_ENTRY as u32);
            if crate::cma::rdma_create_qp(id, c.pd, &mut attr) != 0 {
                return Err(crate::error::errno());
            }
            c.max_inline = attr.cap.max_inline_data;
            let qp = (*id).qp;
            for _ in 0..sizes.slots + RESERVE {
                verbs::post_empty_recv(qp, RECV_ID)?;
            }
        }
        Ok(c)
    }

    /// What this side tells its peer.
    pub fn hello(&self) -> Hello {
        let mr = self.ring_mr.as_ref().map(|m| m.rkey()).unwrap_or(0);
        Hello {
            ring_addr: self.ring.ptr as u64,
            rkey: mr,
            ring_size: self.sizes.rbuf,
            slots: self.sizes.slots,
            table_addr: self.ring.ptr as u64 + self.sizes.rbuf as u64,
            iomaps: self.sizes.iomaps,
        }
    }

    /// The peer's hello arrived: the connection may carry data.
    pub fn start(&mut self, peer: Hello) {
        self.peer = peer;
        self.unacked = Fifo::new(peer.slots as usize);
        self.remote_maps =
            vec![RemoteMap::default(); self.sizes.iomaps as usize].into_boxed_slice();
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
        self.sq_free == self.sizes.sq
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
        self.maybe_credit();
    }

    fn complete(&mut self, w: &ibv_wc) {
        if w.wr_id != RECV_ID {
            self.sq_free += 1;
            self.sb_head = self.sb_head.max(w.wr_id);
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
        // SAFETY: our live QP; the receive carries no buffer.
        if unsafe { verbs::post_empty_recv(self.qp(), RECV_ID) }.is_err() {
            self.ends.reset = true;
        }
        let imm = u32::from_be(w.imm_data());
        let value = imm & VALUE_MASK;
        match imm >> KIND_SHIFT {
            KIND_DATA => {
                // The reader copies each message straight out of the ring:
                // one that is empty, wraps, overfills the ring or exceeds
                // the slots we granted breaks the connection instead.
                let r = self.sizes.rbuf as u64;
                let fits = value > 0
                    && self.rx_in % r + value as u64 <= r
                    && self.rx_in + value as u64 - self.rx_pos <= r;
                if fits && self.rxq.push(value) {
                    self.rx_in += value as u64;
                    self.rx_avail += value as usize;
                } else {
                    self.ends.reset = true;
                }
            }
            KIND_CREDIT => {
                for _ in 0..value {
                    match self.unacked.pop() {
                        Some(len) => self.acked += len as u64,
                        None => break,
                    }
                }
            }
            KIND_CTRL => {
                self.ends.fin_in = true;
                if value == CTRL_CLOSE {
                    self.ends.peer_closed = true;
                }
            }
            _ => self.install_remote_map(value as usize),
        }
    }

    fn install_remote_map(&mut self, index: usize) {
        if index >= self.remote_maps.len() {
            return;
        }
        let mut e = [0u8; IOMAP_ENTRY];
        // SAFETY: the entry lies inside our ring allocation (table after
        // the ring, `iomaps` entries); the peer wrote it before the
        // completion we just polled.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.ring
                    .ptr
                    .add(self.sizes.rbuf as usize + index * IOMAP_ENTRY),
                e.as_mut_ptr(),
                IOMAP_ENTRY,
            )
        };
        let u64_at = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(e[i..i + 4].try_into().unwrap_or_default());
        self.remote_maps[index] = RemoteMap {
            offset: u64_at(0),
            addr: u64_at(8),
            len: u64_at(16),
            rkey: u32_at(24),
            valid: u32_at(28) != 0,
        };
    }

    // -- sending ------------------------------------------------------------

    /// Posts one write; `imm` None for a plain RDMA WRITE. The payload is
    /// either inline from `src` or `len` bytes of the bounce buffer at
    /// `bounce_at`.
    fn post(&mut self, src: Src, remote: (u64, u32), imm: Option<u32>, release: u64) -> Res<()> {
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
        wr.wr_id = release;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(len > 0);
        wr.send_flags = flags | IBV_SEND_SIGNALED;
        match imm {
            Some(v) => {
                wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.set_imm_data(v.to_be());
            }
            None => wr.opcode = IBV_WR_RDMA_WRITE,
        }
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: remote.0,
            rkey: remote.1,
        };
        // SAFETY: our live QP; `wr` and `sge` live through the call, and
        // the inline payload is copied by the provider before it returns.
        unsafe { verbs::post_send(self.qp(), &mut wr) }?;
        self.sq_free -= 1;
        Ok(())
    }

    /// A control message (no payload) to the peer's ring start.
    fn post_ctrl(&mut self, imm: u32) -> Res<()> {
        let remote = (self.peer.ring_addr, self.peer.rkey);
        let mark = self.sb_tail;
        self.post(Src::None, remote, Some(imm), mark)
    }

    fn maybe_credit(&mut self) {
        let due = self.unrep_msgs > 0
            && (self.pending_credit
                || self.unrep_msgs >= (self.sizes.slots / 2).max(1)
                || self.unrep_bytes >= self.sizes.rbuf as u64 / 2);
        if !due || self.ends.peer_closed {
            return;
        }
        if self.sq_free == 0 {
            self.pending_credit = true;
            return;
        }
        let n = self.unrep_msgs;
        if self.post_ctrl((KIND_CREDIT << KIND_SHIFT) | n).is_ok() {
            self.unrep_msgs = 0;
            self.unrep_bytes = 0;
            self.pending_credit = false;
        }
    }

    /// Sends a FIN (`close` false) or CLOSE; false when the send queue is
    /// full for now.
    pub fn send_end(&mut self, close: bool) -> Res<bool> {
        if self.sq_free == 0 {
            return Ok(false);
        }
        let v = if close { CTRL_CLOSE } else { CTRL_FIN };
        self.post_ctrl((KIND_CTRL << KIND_SHIFT) | v)?;
        Ok(true)
    }

    /// Room for one more data message right now (bytes, capped by the
    /// contiguous parts of the peer's ring and our bounce buffer).
    fn room(&self) -> usize {
        // One send slot stays free for credits, so a writer filling the
        // queue never starves the peer of them.
        if self.sq_free <= 1 || self.unacked.full() {
            return 0;
        }
        let r = self.peer.ring_size as u64;
        let ring_free = r - (self.sent - self.acked);
        let ring_contig = r - self.sent % r;
        // A quarter ring per message keeps several in flight.
        ring_free.min(ring_contig).min((r / 4).max(1)) as usize
    }

    fn bounce_room(&self) -> usize {
        let s = self.bounce.len as u64;
        let free = s - (self.sb_tail - self.sb_head);
        free.min(s - self.sb_tail % s) as usize
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
        let r = self.peer.ring_size as u64;
        let remote = (self.peer.ring_addr + self.sent % r, self.peer.rkey);
        let release = match src {
            Src::Bounce(..) => self.sb_tail + n as u64,
            _ => self.sb_tail,
        };
        self.post(
            src,
            remote,
            Some((KIND_DATA << KIND_SHIFT) | n as u32),
            release,
        )?;
        self.sb_tail = release;
        self.sent += n as u64;
        self.unacked.push(n as u32);
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
                let n = ((len - used) as usize).min(b.iov_len - off);
                // SAFETY: the message lies contiguously in our ring at
                // `pos % r` (checked when it arrived, in `complete`) and
                // the peer finished writing it before its completion; the
                // destination is the caller's.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        self.ring.ptr.add((pos % r) as usize),
                        (b.iov_base as *mut u8).add(off),
                        n,
                    )
                };
                off += n;
                total += n;
                pos += n as u64;
                used += n as u32;
                if used == len {
                    used = 0;
                    qi += 1;
                    if !peek {
                        self.unrep_msgs += 1;
                        self.unrep_bytes += len as u64;
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
            self.maybe_credit();
        }
        total
    }

    // -- iomap --------------------------------------------------------------

    /// Maps `addr..addr+len` for the peer's riowrite at `offset`. The
    /// peer hears of it before anything sent after this call (at once, or
    /// as soon as the connection is up and the send queue has room).
    pub fn iomap(&mut self, addr: usize, len: usize, offset: u64, connected: bool) -> Res<u64> {
        let index = (0..self.peer.iomaps)
            .find(|i| self.local_maps.iter().all(|m| m.index != *i))
            .ok_or(libc::ENOMEM)?;
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
            if self.local_maps[i].announced || self.sq_free == 0 {
                continue;
            }
            let m = &self.local_maps[i];
            let (index, offset, addr, len, rkey) =
                (m.index, m.offset, m.addr as u64, m.len as u64, m._mr.rkey());
            if self.announce(index, offset, addr, len, rkey, true).is_ok() {
                self.local_maps[i].announced = true;
            }
        }
    }

    pub fn iounmap(&mut self, addr: usize, len: usize) -> Res<()> {
        let i = self
            .local_maps
            .iter()
            .position(|m| m.addr == addr && m.len == len)
            .ok_or(libc::EINVAL)?;
        let m = &self.local_maps[i];
        let (index, offset) = (m.index, m.offset);
        if m.announced && !self.ends.peer_closed && self.sq_free > 0 {
            self.announce(index, offset, 0, 0, 0, false)?;
        }
        self.local_maps.remove(i);
        Ok(())
    }

    fn announce(
        &mut self,
        index: u32,
        offset: u64,
        addr: u64,
        len: u64,
        rkey: u32,
        valid: bool,
    ) -> Res<()> {
        let mut e = [0u8; IOMAP_ENTRY];
        e[0..8].copy_from_slice(&offset.to_le_bytes());
        e[8..16].copy_from_slice(&addr.to_le_bytes());
        e[16..24].copy_from_slice(&len.to_le_bytes());
        e[24..28].copy_from_slice(&rkey.to_le_bytes());
        e[28..32].copy_from_slice(&u32::from(valid).to_le_bytes());
        let remote = (
            self.peer.table_addr + index as u64 * IOMAP_ENTRY as u64,
            self.peer.rkey,
        );
        let mark = self.sb_tail;
        self.post(
            Src::Inline(e.as_ptr(), IOMAP_ENTRY as u32),
            remote,
            Some((KIND_IOMAP << KIND_SHIFT) | index),
            mark,
        )
    }

    /// The peer's mapping covering `offset`, as (remote address, bytes
    /// left in it, rkey).
    fn remote_target(&self, offset: u64) -> Option<(u64, u64, u32)> {
        self.remote_maps
            .iter()
            .find(|m| m.valid && offset >= m.offset && offset - m.offset < m.len)
            .map(|m| {
                (
                    m.addr + (offset - m.offset),
                    m.len - (offset - m.offset),
                    m.rkey,
                )
            })
    }

    pub fn has_remote_map(&self, offset: u64) -> bool {
        self.remote_target(offset).is_some()
    }

    /// Writes as much of `data` as fits now at the peer's `offset`.
    ///
    /// # Safety
    /// `data..data+len` is readable.
    pub unsafe fn iowrite(&mut self, data: *const u8, len: usize, offset: u64) -> Res<usize> {
        let mut done = 0;
        while done < len {
            let Some((raddr, left, rkey)) = self.remote_target(offset + done as u64) else {
                return if done > 0 {
                    Ok(done)
                } else {
                    Err(libc::EINVAL)
                };
            };
            if self.sq_free <= 1 {
                break;
            }
            let want = ((len - done) as u64).min(left) as usize;
            // SAFETY: inside the caller's buffer.
            let src = unsafe { data.add(done) };
            let n = if want as u32 <= self.max_inline.min(self.sizes.inline) {
                let mark = self.sb_tail;
                self.post(Src::Inline(src, want as u32), (raddr, rkey), None, mark)?;
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
                self.post(Src::Bounce(at, n as u32), (raddr, rkey), None, mark)?;
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
    fn hello_round_trip_and_rejects_strangers() {
        let h = Hello {
            ring_addr: 0x1234_5678_9abc,
            rkey: 77,
            ring_size: 1 << 20,
            slots: 64,
            table_addr: 0x1234_5678_9abc + (1 << 20),
            iomaps: 2,
        };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert_eq!(Hello::decode(&bad), None);
        assert_eq!(Hello::decode(&h.encode()[..HELLO_LEN - 1]), None);
        let zero = Hello { slots: 0, ..h };
        assert_eq!(Hello::decode(&zero.encode()), None);
    }

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
