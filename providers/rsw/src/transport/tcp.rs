//! TCP transport.
//!
//! A QP's number is the TCP port of its listening socket, bound to the
//! wildcard address of an IPv6 dual-stack socket (IPv4 peers arrive as
//! IPv4-mapped addresses). The kernel keeps ports unique per network
//! namespace, which makes QP numbers unique across processes with no daemon
//! and no coordination.
//!
//! **Framing.** A QP pair talks over two connections, one per direction of
//! requests, so small messages flow one way on each. Linux acknowledges
//! every second small segment at once when the reader empties the socket
//! and no data goes back on that connection; that pure ACK is sent (and on
//! a veth pair, processed by the peer) inside the reader's `recv`, before
//! it can answer: a ping-pong over two one-way TCP connections measured
//! 6.3-7.0 us one-way where one two-way connection measured 4.0. A reader
//! that leaves one byte in the socket sends no such ACK (4.1 us). So after
//! the hello, when both ends agree (`wire::FEATURE_FRAMED`), each `sendmsg`
//! travels as a chunk: its length (4 bytes), its bytes, and one pad byte.
//! The reader reads up to the end of a chunk's bytes and no further, so
//! the pad stays in the socket until the next chunk arrives (or a later
//! poll, off the latency path, takes it alone); `SO_RCVLOWAT` 2 keeps the
//! lone pad from waking the progress thread. Chunks are a transport
//! matter: they need not align with messages, and callers see the same
//! byte stream either way. A thread polling a CQ looks at its incoming
//! connection with `poll(2)` before it reads (`fresh_probe`): `recv` on an
//! empty socket takes the socket's lock, which the peer's kernel path
//! needs to queue what it brings, so a spinning reader held the data it
//! waited for in the socket's backlog (TCP `ib_send_lat` 3.65 -> 3.3 us
//! on loopback). Not on the outgoing connection, whose responses come in
//! runs: there the extra call per read cut `ib_send_bw` 2 B to a sixth.
//! (Two ways to save the kernel more ACKs were tried and dropped, see
//! docs/architecture.md: a first chunk of filler that raises `rcv_mss`,
//! which let small messages fill a young
//! connection's congestion window before any ACK was due, so the next one
//! waited for the delayed-ACK timer; and a polling reader that peeks
//! before it takes a lone pad, with which `ibv_srq_pingpong` over TCP
//! failed now and then.)

use std::cell::Cell;
use std::io;
use std::mem::zeroed;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::net::{self as rnet, sockopt, SocketFlags};

use super::sock::{
    self, addr_gid, bound_port, bound_socket, events_now, local_gid, socket, socket_addr,
};
use super::{Connecting, Endpoints, RemoteAddr};

/// Small request/response messages must not wait for Nagle.
fn tune(fd: &OwnedFd) {
    let _ = sockopt::set_tcp_nodelay(fd, true);
}

pub struct TcpListener {
    fd: OwnedFd,
}

impl TcpListener {
    pub fn open() -> io::Result<(TcpListener, u32)> {
        let fd = match bound_socket(libc::SOCK_STREAM, true, 0) {
            Ok(fd) => fd,
            Err(_) => bound_socket(libc::SOCK_STREAM, false, 0)?,
        };
        rnet::listen(&fd, 64)?;
        let port = bound_port(&fd)?;
        Ok((TcpListener { fd }, port as u32))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Accepts one pending connection with the addresses of both ends.
    pub fn accept(&self) -> io::Result<Option<(TcpConn, Endpoints)>> {
        loop {
            let e =
                match rnet::acceptfrom_with(&self.fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)
                {
                    Ok((fd, from)) => {
                        tune(&fd);
                        let peer = from
                            .and_then(|a| SocketAddr::try_from(a).ok())
                            .map_or([0; 16], |a| addr_gid(&a));
                        let local = local_gid(&fd).unwrap_or([0; 16]);
                        let mut c = TcpConn::new(fd);
                        c.ack_early = !over_loopback(&peer, &local);
                        return Ok(Some((c, Endpoints { peer, local })));
                    }
                    Err(e) => io::Error::from(e),
                };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                // The peer gave up before we accepted: try the next one.
                Some(libc::ECONNABORTED) | Some(libc::EPROTO) => continue,
                _ => return Err(e),
            }
        }
    }
}

/// Bytes one read may take beyond what the caller asked for: the start
/// of the messages that follow, so a burst of small messages (or a header
/// and its payload) costs one `recvmsg` instead of two per message.
const STAGE: usize = 64 << 10;

/// Bytes a framed reader takes before it lets the kernel acknowledge
/// them early (`TcpConn::ack_early`): under the 536 at which Linux
/// acknowledges by itself, and above a few small messages, so a
/// ping-pong pays one extra `recv` every few messages, off its latency
/// path.
const ACK_EARLY: usize = 320;

/// Whether a connection between these addresses runs over the loopback
/// device: a loopback address, or both ends at one address.
fn over_loopback(peer: &[u8; 16], local: &[u8; 16]) -> bool {
    let v4_loopback = |g: &[u8; 16]| crate::gid::gid_as_ipv4(g).is_some_and(|a| a[0] == 127);
    peer == local || v4_loopback(peer) || *peer == std::net::Ipv6Addr::LOCALHOST.octets()
}

/// Reads of up to this many bytes go through the stage (see
/// `TcpConn::recv_small`); larger ones land in place.
const SMALL_READ: usize = 256;

/// Whether connections this process opens offer framing (`RSW_FRAMING=0`
/// turns it off, to compare or to talk to a build that predates it).
pub fn framing_wanted() -> bool {
    static ON: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("RSW_FRAMING").as_deref() != Ok("0"));
    *ON
}

/// What a read of a chunk of unknown length asks for beyond its length:
/// a header, the smallest message, so even a first chunk leaves its pad.
const HDR_GUESS: usize = crate::wire::HDR_LEN;

/// Chunks one read at a chunk boundary may ask for. A reader that falls
/// behind a stream of chunks reads them in runs, as unframed reads do:
/// a run ends at a chunk's bytes when the chunks are alike, so its pad
/// stays; when it ends on a pad, the kernel's ACK it lets out costs a
/// stream little (one read per chunk held `ib_send_bw` 2 B to one
/// `recv` and one ACK per message).
const MAX_BURST: usize = 64;

/// The pad byte closing every chunk.
static PAD: [u8; 1] = [0];
/// Iovecs a framed send may use: the caller's (a requester gathers up to
/// twice `MAX_IOV`), the length and the pad.
const FRAMED_IOV: usize = 2 * super::MAX_IOV + 2;
/// Iovecs of a framed send of a few of the caller's.
const FEW_IOV: usize = 8;

/// What a framed sender has left of the chunk in progress: a call may be
/// cut short anywhere, and the next one continues it.
#[derive(Clone, Copy, Default)]
struct TxChunk {
    len: [u8; 4],
    /// Bytes of the length not yet taken by the kernel.
    len_left: usize,
    /// The caller's bytes of this chunk not yet taken.
    data_left: usize,
    pad_left: bool,
    /// The chunk's last byte went but its pad did not: that byte is
    /// reported to the caller only with the pad, so the caller calls again
    /// (and the pad cannot be forgotten, which would leave the byte
    /// unread at the peer).
    withheld: bool,
}

impl TxChunk {
    fn idle(&self) -> bool {
        self.len_left == 0 && self.data_left == 0 && !self.pad_left
    }
}

/// Where a framed reader is in the stream.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RxPhase {
    /// Reading a chunk's length (bytes so far).
    Len(usize, [u8; 4]),
    /// This many bytes of the chunk are still to come.
    Data(usize),
    /// The pad closing a chunk is next.
    Pad,
}

impl RxPhase {
    const START: RxPhase = RxPhase::Len(0, [0; 4]);

    /// Steps over framing bytes at the front of `b`: how many it used and
    /// the phase after them (a data phase uses none).
    fn skip_framing(self, b: &[u8]) -> (usize, RxPhase) {
        match self {
            RxPhase::Pad => (1, RxPhase::START),
            RxPhase::Len(got, mut len) => {
                let k = (4 - got).min(b.len());
                len[got..got + k].copy_from_slice(&b[..k]);
                if got + k < 4 {
                    return (k, RxPhase::Len(got + k, len));
                }
                match u32::from_le_bytes(len) as usize {
                    0 => (k, RxPhase::Pad),
                    n => (k, RxPhase::Data(n)),
                }
            }
            RxPhase::Data(_) => (0, self),
        }
    }
}

/// Copies iovecs covering bytes `skip..skip + take` of `iov` into `out`;
/// returns how many iovecs and bytes that is (fewer bytes when `iov` ends
/// first or `out` fills).
fn slice_iov(
    iov: &[libc::iovec],
    mut skip: usize,
    mut take: usize,
    out: &mut [libc::iovec],
) -> (usize, usize) {
    let (mut n, mut bytes) = (0, 0);
    for v in iov {
        if take == 0 || n == out.len() {
            break;
        }
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        let k = (v.iov_len - skip).min(take);
        out[n] = crate::util::iov((v.iov_base as *const u8).wrapping_add(skip), k);
        n += 1;
        bytes += k;
        take -= k;
        skip = 0;
    }
    (n, bytes)
}

pub struct TcpConn {
    fd: OwnedFd,
    /// Stream bytes read ahead of the caller: `stage[start..]` (the
    /// vector's length is where they end). Its capacity is reserved at
    /// the first read and never grows, so no read allocates after that;
    /// pages are only touched as far as data has come.
    stage: Vec<u8>,
    start: usize,
    /// The last `recvmsg` returned less than it had room for: the socket
    /// was empty then, so the next read reports "would block" without
    /// asking again, until `fresh` says something may have come (the
    /// descriptor fired, or a thread polls).
    drained: bool,
    /// A polling thread asks (`fresh_probe`): look whether the socket is
    /// readable before reading it (see `probe_empty`).
    probe: bool,
    /// What that look also saw of room to send, for the next
    /// [`TcpConn::connect_events`] in the same pass: 0 not looked, 1 room,
    /// 2 full.
    probed_out: Cell<u8>,
    calls: Calls,
    /// Sends are framed (`set_framed`), after `tx_plain` more bytes.
    tx_framed: bool,
    tx_plain: Cell<usize>,
    tx: Cell<TxChunk>,
    /// Reads are framed; where the stream is (`stage[start..]` is parsed
    /// from this phase on).
    rx_framed: bool,
    rx: RxPhase,
    /// The last chunk's length: a read at a chunk boundary asks for this
    /// much after the pad and length, so a ping-pong's same-sized chunks
    /// are read exactly.
    guess: usize,
    /// Chunks of `guess` bytes the next read at a chunk boundary asks
    /// for: one until two such reads in a row fill their asks with no
    /// empty read between, then doubled at each (see [`MAX_BURST`]); one
    /// again once a read finds the socket empty.
    burst: usize,
    /// The last read at a chunk boundary filled its ask.
    behind: bool,
    /// Bytes read since we last took a pad alone, and whether to (see
    /// `ack_early`).
    unacked: usize,
    ack_early: bool,
}

/// How many `recvmsg`/`sendmsg` calls of a connection moved bytes (the
/// ones that found the socket empty or full are not counted): diagnostics
/// and tests, see `qp::socket_calls`.
#[derive(Default)]
pub struct Calls {
    pub reads: Cell<u64>,
    pub writes: Cell<u64>,
}

impl Drop for TcpConn {
    /// Closing a socket with unread bytes makes the kernel reset the
    /// connection and throw away what we queued but it has not sent yet:
    /// the acknowledgements for messages the application has already seen
    /// completed. Hardware would have sent those, so the peer must get
    /// them; discard what we will never read first, so the close is an
    /// orderly one. Bounded: a peer still sending gets its reset.
    fn drop(&mut self) {
        for _ in 0..64 {
            // SAFETY: MSG_TRUNC makes TCP discard up to `len` bytes without
            // writing to the (null) buffer. (libc's `recv`, not the data
            // path's: this is QP teardown, and valgrind's suppression for
            // the null buffer names it.)
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    1 << 20,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n <= 0 {
                break;
            }
        }
    }
}

/// Why a connection could not be started.
#[derive(Debug)]
pub enum ConnectError {
    /// No socket for it here (descriptors, memory, our address).
    Local(io::Error),
    /// The network or the peer said no.
    Remote(io::Error),
}

impl TcpConn {
    fn new(fd: OwnedFd) -> TcpConn {
        TcpConn {
            fd,
            stage: Vec::new(),
            start: 0,
            drained: false,
            probe: false,
            probed_out: Cell::new(0),
            calls: Calls::default(),
            tx_framed: false,
            tx_plain: Cell::new(0),
            tx: Cell::new(TxChunk::default()),
            rx_framed: false,
            rx: RxPhase::START,
            guess: HDR_GUESS,
            burst: 1,
            behind: false,
            unacked: 0,
            ack_early: true,
        }
    }

    /// Frames both directions from now on: reads at once, sends after
    /// `plain` more bytes (the hello a connecting side has queued).
    pub fn set_framed(&mut self, plain: usize) {
        self.rx_framed = true;
        self.tx_framed = true;
        self.tx_plain.set(plain);
        let two: libc::c_int = 2;
        // SAFETY: a valid socket and a c_int option value.
        unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                &two as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }

    pub fn fresh(&mut self) {
        self.drained = false;
        self.probe = false;
        self.probed_out.set(0);
    }

    /// As [`TcpConn::fresh`], for a thread that polls: the next read first
    /// asks `poll(2)` whether anything came.
    pub fn fresh_probe(&mut self) {
        self.drained = false;
        self.probe = true;
        self.probed_out.set(0);
    }

    /// Whether a polling thread's read would find nothing: `poll(2)` reads
    /// the socket's state without its lock, where `recv` takes the lock
    /// that the sender's kernel path needs to queue the data it brings. A
    /// thread spinning on `recv` kept that lock busy: the arriving segment
    /// went to the socket's backlog and waited for the reader's next
    /// release (11 % of the cycles of a TCP ping-pong were that lock).
    fn probe_empty(&mut self) -> bool {
        if !std::mem::take(&mut self.probe) {
            return false;
        }
        // Room to send is asked in the same call: a requester whose big
        // message drains asks both at each poll.
        let ev = events_now(self.fd.as_raw_fd(), libc::POLLIN | libc::POLLOUT);
        let room = ev & libc::POLLOUT as u32 != 0;
        self.probed_out.set(if room { 1 } else { 2 });
        if ev & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) as u32 == 0 {
            self.drained = true;
            return true;
        }
        false
    }

    /// Lets the kernel send the ACK it will owe soon, now, while the
    /// caller has just sent and waits for an answer: once [`ACK_EARLY`]
    /// bytes came since the last time, takes the pad that closes the last
    /// chunk, alone in the socket in a ping-pong, which empties it (Linux
    /// acknowledges a drained socket that got two small segments). Left to
    /// itself the kernel acknowledges once more than `rcv_mss` (536) bytes
    /// came, often inside the `recv` that reads the message that crossed
    /// it: a trip through the peer's kernel on the latency path (TCP
    /// `ib_send_lat` 64 B between namespaces: one `recv` in ten took
    /// 2-3 us, now about one in a hundred). Only the pad: bytes of a chunk
    /// read into the stage would wake no one if the program stopped
    /// polling. Not over loopback, where the kernel acknowledges as the
    /// message arrives, in the sender's call, and an early ACK only met
    /// the peer's next send (64 B over `lo`: 3.19 -> 3.37 us with it).
    pub fn ack_early(&mut self) {
        if !self.rx_framed
            || !self.ack_early
            || self.unacked < ACK_EARLY
            || self.rx != RxPhase::Pad
            || self.start < self.stage.len()
        {
            return;
        }
        let mut pad = 0u8;
        // SAFETY: one byte of ours.
        let r = unsafe {
            sock::recv(
                self.fd.as_raw_fd(),
                &mut pad as *mut u8 as *mut libc::c_void,
                1,
                libc::MSG_DONTWAIT,
            )
        };
        if r == 1 {
            self.rx = RxPhase::START;
            self.unacked = 0;
        }
    }

    pub fn staged(&self) -> usize {
        if !self.rx_framed {
            return self.stage.len() - self.start;
        }
        let (mut at, mut rx, mut n) = (self.start, self.rx, 0);
        while at < self.stage.len() {
            match rx {
                RxPhase::Data(left) => {
                    let k = left.min(self.stage.len() - at);
                    n += k;
                    at += k;
                    rx = if k == left {
                        RxPhase::Pad
                    } else {
                        RxPhase::Data(left - k)
                    };
                }
                _ => {
                    let (k, next) = rx.skip_framing(&self.stage[at..]);
                    at += k;
                    rx = next;
                }
            }
        }
        n
    }

    pub fn calls(&self) -> (u64, u64) {
        (self.calls.reads.get(), self.calls.writes.get())
    }

    /// Connects to `remote` from the address `local` (our GID), so the peer
    /// sees the source address it was told at RTR. Creating or binding the
    /// socket fails with `Err(ConnectError::Local)`; anything the network
    /// answers is `ConnectError::Remote`.
    pub fn connect(remote: &RemoteAddr, local: &[u8; 16]) -> Result<Connecting, ConnectError> {
        if remote.qpn == 0 || remote.qpn > u16::MAX as u32 {
            return Err(ConnectError::Remote(io::Error::from_raw_os_error(
                libc::EADDRNOTAVAIL,
            )));
        }
        let dst = socket_addr(&remote.gid, remote.qpn as u16, remote.ifindex);
        let family = if dst.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let fd = socket(family, libc::SOCK_STREAM).map_err(ConnectError::Local)?;
        tune(&fd);
        // Bind the source only when it is of the peer's family; a mixed
        // pair (IPv4 GID to IPv6 GID) cannot talk and fails at connect.
        let src = socket_addr(local, 0, remote.ifindex);
        if src.is_ipv4() == dst.is_ipv4() && *local != [0; 16] {
            rnet::bind(&fd, &src).map_err(|e| ConnectError::Local(e.into()))?;
        }
        let conn = TcpConn::new(fd);
        loop {
            let e = match rnet::connect(&conn.fd, &dst) {
                Ok(()) => return Ok(Connecting::Ready(super::Conn::Tcp(conn))),
                Err(e) => io::Error::from(e),
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINPROGRESS) => return Ok(Connecting::Pending(super::Conn::Tcp(conn))),
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    return Err(ConnectError::Local(e))
                }
                _ => return Err(ConnectError::Remote(e)),
            }
        }
    }

    /// Bounds how long sent data may stay unacknowledged by the peer's
    /// kernel, and probes an idle connection, so a vanished host ends the
    /// connection instead of leaving it open forever.
    pub fn set_user_timeout(&self, ms: u32) {
        let fd = &self.fd;
        let _ = sockopt::set_tcp_user_timeout(fd, ms);
        // Probe after two seconds of silence, then every two; the user
        // timeout decides when unanswered probes end the connection.
        let _ = sockopt::set_socket_keepalive(fd, true);
        let _ = sockopt::set_tcp_keepidle(fd, Duration::from_secs(2));
        let _ = sockopt::set_tcp_keepintvl(fd, Duration::from_secs(2));
        let _ = sockopt::set_tcp_keepcnt(fd, 3);
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn finish_connect(&self) -> io::Result<()> {
        sockopt::socket_error(&self.fd)??;
        Ok(())
    }

    /// While connecting: what the descriptor would report now (`EPOLL*`
    /// bits: OUT once the connect is done, ERR/HUP if it failed).
    pub fn connect_events(&self) -> u32 {
        match self.probed_out.replace(0) {
            1 => libc::POLLOUT as u32,
            2 => 0,
            _ => events_now(self.fd.as_raw_fd(), libc::POLLOUT),
        }
    }

    /// Sends what `iov` holds, or its start; with framing, as (part of) a
    /// chunk. Returns how many of the caller's bytes went.
    ///
    /// # Safety
    /// Every iovec must describe readable memory.
    pub unsafe fn send_iov(&self, iov: &[libc::iovec]) -> io::Result<usize> {
        if !self.tx_framed {
            // SAFETY: forwarded contract.
            return unsafe { self.sendmsg(iov) };
        }
        let plain = self.tx_plain.get();
        if plain > 0 {
            let mut v = [crate::util::iov(std::ptr::null(), 0); FRAMED_IOV];
            let (n, _) = slice_iov(iov, 0, plain, &mut v);
            // SAFETY: a part of the caller's iovecs.
            let r = unsafe { self.sendmsg(&v[..n])? };
            self.tx_plain.set(plain - r);
            return Ok(r);
        }
        // The length and pad take two iovecs beside the caller's: a send
        // of a few (most are a header and a payload) fits an array that
        // costs nothing to set up, where the full one is a kilobyte of
        // empty iovecs written per call.
        if iov.len() + 2 <= FEW_IOV {
            // SAFETY: forwarded contract.
            unsafe { self.send_chunk::<FEW_IOV>(iov) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { self.send_chunk::<FRAMED_IOV>(iov) }
        }
    }

    /// One `sendmsg` of the chunk in progress (or a new one holding all of
    /// `iov`): what is left of its length, as much of its bytes as `iov`
    /// has, and its pad once those are all in the call.
    ///
    /// # Safety
    /// As [`TcpConn::send_iov`].
    unsafe fn send_chunk<const N: usize>(&self, iov: &[libc::iovec]) -> io::Result<usize> {
        let want: usize = iov.iter().map(|v| v.iov_len).sum();
        if want == 0 {
            return Ok(0);
        }
        let mut c = self.tx.get();
        if c.idle() {
            let len = want.min(u32::MAX as usize);
            c = TxChunk {
                len: (len as u32).to_le_bytes(),
                len_left: 4,
                data_left: len,
                pad_left: true,
                withheld: false,
            };
        }
        let mut v = [crate::util::iov(std::ptr::null(), 0); N];
        let mut n = 0;
        if c.len_left > 0 {
            v[0] = crate::util::iov(c.len[4 - c.len_left..].as_ptr(), c.len_left);
            n = 1;
        }
        // A withheld byte is the caller's first and went already.
        let (k, take) = slice_iov(iov, c.withheld as usize, c.data_left, &mut v[n..N - 1]);
        n += k;
        let pad_now = c.pad_left && take == c.data_left;
        if pad_now {
            v[n] = crate::util::iov(PAD.as_ptr(), 1);
            n += 1;
        }
        // SAFETY: the caller's iovecs, and the length and pad, which live
        // across the call.
        let mut r = unsafe { self.sendmsg(&v[..n])? };
        let l = r.min(c.len_left);
        c.len_left -= l;
        r -= l;
        let d = r.min(take);
        c.data_left -= d;
        r -= d;
        let mut done = d;
        if pad_now && r > 0 {
            c.pad_left = false;
        }
        if c.withheld {
            if !c.pad_left {
                c.withheld = false;
                done += 1;
            }
        } else if d > 0 && c.data_left == 0 && c.pad_left {
            c.withheld = true;
            done -= 1;
        }
        self.tx.set(c);
        Ok(done)
    }

    /// # Safety
    /// Every iovec must describe readable memory.
    unsafe fn sendmsg(&self, iov: &[libc::iovec]) -> io::Result<usize> {
        // SAFETY: a zeroed msghdr is valid; we only set the iovec fields.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len();
        loop {
            // SAFETY: msg points to iovecs the caller vouches for.
            let n = unsafe {
                sock::sendmsg(
                    self.fd.as_raw_fd(),
                    &msg,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                self.calls.writes.set(self.calls.writes.get() + 1);
            }
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// While corked, the kernel keeps what is sent (no partial segment
    /// leaves, whatever the peer's TCP ACKs do) until uncorked. (A process
    /// that dies meanwhile sends it with its FIN, or loses it to an RST
    /// when the socket holds unread bytes.)
    pub fn cork(&self, on: bool) {
        let _ = sockopt::set_tcp_cork(&self.fd, on);
    }

    /// Receives into `iov`: from the bytes read ahead if there are any
    /// (copied, so a destination unmapped since its registration fails
    /// with EFAULT as `recvmsg` would), else with one `recvmsg` that also
    /// reads ahead whatever follows, up to [`STAGE`] bytes. A large
    /// payload still goes straight from the socket into its destination.
    ///
    /// # Safety
    /// Every iovec must describe writable memory.
    pub unsafe fn recv_iov(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        if self.rx_framed {
            // SAFETY: forwarded contract.
            return unsafe { self.recv_framed(iov) };
        }
        let want: usize = iov.iter().map(|v| v.iov_len).sum();
        if self.start < self.stage.len() && want > 0 {
            // SAFETY: forwarded contract.
            return unsafe { self.unstage(iov) };
        }
        if self.drained && want > 0 {
            self.drained = false;
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        if want > 0 && self.probe_empty() {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        if self.stage.capacity() == 0 {
            self.stage.reserve_exact(STAGE);
        }
        self.stage.clear();
        self.start = 0;
        if want > 0 && want <= SMALL_READ {
            // SAFETY: forwarded contract.
            return unsafe { self.recv_small(iov) };
        }
        let mut v = [crate::util::iov(std::ptr::null(), 0); super::MAX_IOV + 1];
        let n = iov.len().min(super::MAX_IOV);
        v[..n].copy_from_slice(&iov[..n]);
        let room = if want > 0 { self.stage.capacity() } else { 0 };
        v[n] = crate::util::iov(self.stage.as_mut_ptr(), room);
        // SAFETY: a zeroed msghdr is valid; we only set the iovec fields.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = v.as_mut_ptr();
        msg.msg_iovlen = n + 1;
        loop {
            // SAFETY: msg points to the caller's iovecs, which it vouches
            // for, and to our stage's reserved (unused) capacity.
            let r = unsafe { sock::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if r > 0 {
                self.calls.reads.set(self.calls.reads.get() + 1);
            }
            if r >= 0 {
                let r = r as usize;
                self.drained = r < want + room;
                if r > want {
                    // SAFETY: the kernel wrote these bytes of the reserved
                    // capacity.
                    unsafe { self.stage.set_len(r - want) };
                }
                return Ok(r.min(want));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// A small read (a header, mostly: what a polling thread asks for
    /// over and over) goes whole into the stage with `recv`, then is
    /// copied out: `recvmsg`'s message and iovec import is a good part of
    /// the cost of a call that finds the socket empty.
    ///
    /// # Safety
    /// As [`TcpConn::recv_iov`]; the stage is empty and reserved.
    unsafe fn recv_small(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let room = self.stage.capacity();
        loop {
            // SAFETY: the stage's reserved, unused capacity, `room` bytes.
            let r = unsafe {
                sock::recv(
                    self.fd.as_raw_fd(),
                    self.stage.as_mut_ptr() as *mut libc::c_void,
                    room,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                self.calls.reads.set(self.calls.reads.get() + 1);
                let r = r as usize;
                self.drained = r < room;
                // SAFETY: the kernel wrote these bytes of the reserved
                // capacity.
                unsafe { self.stage.set_len(r) };
                // SAFETY: forwarded contract.
                return unsafe { self.unstage(iov) };
            }
            if r == 0 {
                return Ok(0);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// [`TcpConn::recv_iov`] on a framed stream: the caller gets the
    /// chunks' bytes, never their framing. A read asks for whole chunks
    /// of the last one's size, ending at a chunk's bytes, so its pad
    /// stays in the socket (see the module comment): one chunk, or a run
    /// of them while the reader is behind ([`MAX_BURST`]).
    ///
    /// # Safety
    /// As [`TcpConn::recv_iov`].
    unsafe fn recv_framed(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let want: usize = iov.iter().map(|v| v.iov_len).sum();
        if want == 0 {
            return Ok(0);
        }
        if self.stage.capacity() == 0 {
            self.stage.reserve_exact(STAGE);
        }
        loop {
            if self.start < self.stage.len() {
                // SAFETY: forwarded contract.
                let n = unsafe { self.unstage_framed(iov)? };
                if n > 0 {
                    return Ok(n);
                }
            }
            // Caught up: the next read asks for one chunk again.
            if self.drained {
                self.drained = false;
                self.caught_up();
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            if self.probe_empty() {
                self.caught_up();
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            self.stage.clear();
            self.start = 0;
            let cap = self.stage.capacity();
            if let RxPhase::Data(left) = self.rx {
                if want > SMALL_READ {
                    // SAFETY: forwarded contract.
                    return unsafe { self.recv_direct(iov, left) };
                }
            }
            let more = (self.burst - 1) * (5 + self.guess);
            let ask = match self.rx {
                RxPhase::Data(left) => left,
                RxPhase::Pad => 5 + self.guess + more,
                RxPhase::Len(got, _) => 4 - got + self.guess + more,
            }
            .min(cap);
            let r = loop {
                // SAFETY: the stage's reserved, unused capacity, at least
                // `ask` bytes.
                let r = unsafe {
                    sock::recv(
                        self.fd.as_raw_fd(),
                        self.stage.as_mut_ptr() as *mut libc::c_void,
                        ask,
                        libc::MSG_DONTWAIT,
                    )
                };
                if r >= 0 {
                    break r as usize;
                }
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    self.caught_up();
                    return Err(e);
                }
            };
            if r == 0 {
                return Ok(0);
            }
            self.calls.reads.set(self.calls.reads.get() + 1);
            self.unacked += r;
            // SAFETY: the kernel wrote these bytes of the reserved capacity.
            unsafe { self.stage.set_len(r) };
            self.drained = r < ask;
            if self.drained {
                self.caught_up();
            } else if !matches!(self.rx, RxPhase::Data(_)) {
                if self.behind {
                    self.burst = (self.burst * 2).min(MAX_BURST);
                }
                self.behind = true;
            }
        }
    }

    fn caught_up(&mut self) {
        self.burst = 1;
        self.behind = false;
    }

    /// A large read inside a chunk's bytes: straight into the caller's
    /// memory, and the rest of the chunk (no further) into the stage.
    ///
    /// # Safety
    /// As [`TcpConn::recv_iov`]; the stage is empty and reserved.
    unsafe fn recv_direct(&mut self, iov: &[libc::iovec], left: usize) -> io::Result<usize> {
        let mut v = [crate::util::iov(std::ptr::null(), 0); super::MAX_IOV + 1];
        let (n, mine) = slice_iov(iov, 0, left, &mut v[..super::MAX_IOV]);
        let room = (left - mine).min(self.stage.capacity());
        v[n] = crate::util::iov(self.stage.as_mut_ptr(), room);
        // SAFETY: a zeroed msghdr is valid; we only set the iovec fields.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = v.as_mut_ptr();
        msg.msg_iovlen = n + 1;
        let r = loop {
            // SAFETY: msg points to part of the caller's iovecs, which it
            // vouches for, and to our stage's reserved (unused) capacity.
            let r = unsafe { sock::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        };
        if r == 0 {
            return Ok(0);
        }
        self.calls.reads.set(self.calls.reads.get() + 1);
        self.unacked += r;
        self.drained = r < mine + room;
        if r > mine {
            // SAFETY: the kernel wrote these bytes of the reserved capacity.
            unsafe { self.stage.set_len(r - mine) };
        }
        let got = r.min(mine);
        self.rx = if got == left {
            // Exactly to the chunk's end: its pad waits in the socket.
            self.drained = true;
            RxPhase::Pad
        } else {
            RxPhase::Data(left - got)
        };
        Ok(got)
    }

    /// Copies chunk bytes read ahead into `iov`, stepping over framing.
    ///
    /// # Safety
    /// As [`TcpConn::unstage`].
    unsafe fn unstage_framed(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let (mut done, mut vi, mut off) = (0, 0, 0);
        while self.start < self.stage.len() {
            let RxPhase::Data(left) = self.rx else {
                let (k, next) = self.rx.skip_framing(&self.stage[self.start..]);
                self.start += k;
                if let RxPhase::Data(n) = next {
                    self.guess = n;
                }
                self.rx = next;
                continue;
            };
            while vi < iov.len() && off == iov[vi].iov_len {
                vi += 1;
                off = 0;
            }
            if vi == iov.len() {
                break;
            }
            let k = left
                .min(self.stage.len() - self.start)
                .min(iov[vi].iov_len - off);
            // SAFETY: the source is initialised stage bytes; the caller
            // vouches for the destination, and a fault there (memory
            // unmapped since) is caught.
            let r = unsafe {
                crate::guard::copy(
                    (iov[vi].iov_base as *mut u8).add(off),
                    self.stage.as_ptr().add(self.start),
                    k,
                )
            };
            if r.is_err() {
                if done > 0 {
                    break;
                }
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            self.start += k;
            done += k;
            off += k;
            if k == left {
                self.rx = RxPhase::Pad;
                if self.start == self.stage.len() {
                    // Read exactly to the chunk's end: its pad waits in
                    // the socket; leave it there until the next `fresh`.
                    self.drained = true;
                }
            } else {
                self.rx = RxPhase::Data(left - k);
            }
        }
        Ok(done)
    }

    /// Copies bytes read ahead into `iov`, as many as fit.
    ///
    /// # Safety
    /// Every iovec must describe memory the application registered for us
    /// to write, or ours.
    unsafe fn unstage(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let mut done = 0;
        for v in iov {
            let k = v.iov_len.min(self.stage.len() - self.start);
            if k == 0 {
                continue;
            }
            // SAFETY: the source is initialised stage bytes; the caller
            // vouches for the destination, and a fault there (memory
            // unmapped since) is caught.
            let r = unsafe {
                crate::guard::copy(
                    v.iov_base as *mut u8,
                    self.stage.as_ptr().add(self.start),
                    k,
                )
            };
            if r.is_err() {
                if done > 0 {
                    break;
                }
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            self.start += k;
            done += k;
            if self.start == self.stage.len() {
                break;
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair over loopback, non-blocking, framed both ways;
    /// `sndbuf` small forces sends to be cut short.
    fn pair(sndbuf: Option<i32>) -> (TcpConn, TcpConn) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let own = |s: std::net::TcpStream| {
            s.set_nonblocking(true).unwrap();
            s.set_nodelay(true).unwrap();
            let fd: OwnedFd = s.into();
            if let Some(n) = sndbuf {
                let _ = sockopt::set_socket_send_buffer_size(&fd, n as usize);
            }
            TcpConn::new(fd)
        };
        let (mut a, mut b) = (own(a), own(b));
        a.set_framed(0);
        b.set_framed(0);
        (a, b)
    }

    fn inq(c: &TcpConn) -> i32 {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int.
        assert_eq!(unsafe { libc::ioctl(c.fd(), libc::FIONREAD, &mut n) }, 0);
        n
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Sends `data` in calls of random sizes, each cut into random
    /// iovecs; resends from where the kernel stopped, as the engines do.
    fn send_some(c: &TcpConn, data: &[u8], at: &mut usize, rng: &mut Rng) {
        while *at < data.len() {
            let n = (1 + rng.below(3000)).min(data.len() - *at);
            let mut v = Vec::new();
            let mut o = *at;
            while o < *at + n {
                let k = (1 + rng.below(700)).min(*at + n - o);
                v.push(crate::util::iov(data[o..].as_ptr(), k));
                o += k;
            }
            // SAFETY: the iovecs cover `data`.
            match unsafe { c.send_iov(&v) } {
                Ok(k) => *at += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("send: {e}"),
            }
        }
    }

    #[test]
    fn a_framed_stream_arrives_whole_through_cut_sends_and_reads() {
        for seed in 1..6u64 {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
            let (a, mut b) = pair(Some(4096));
            let data: Vec<u8> = (0..400_000usize).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut got = vec![0u8; data.len()];
            let (mut sent, mut read) = (0, 0);
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while read < data.len() {
                assert!(std::time::Instant::now() < deadline, "stuck at {read}");
                send_some(&a, &data, &mut sent, &mut rng);
                b.fresh();
                loop {
                    // Small reads (through the stage) and large ones (in
                    // place), over two iovecs.
                    let want = if rng.below(4) == 0 {
                        70_000
                    } else {
                        1 + rng.below(300)
                    };
                    let want = want.min(data.len() - read);
                    if want == 0 {
                        break;
                    }
                    let h = want / 2;
                    let (x, y) = got[read..read + want].split_at_mut(h);
                    let v = [
                        crate::util::iov(x.as_mut_ptr(), x.len()),
                        crate::util::iov(y.as_mut_ptr(), y.len()),
                    ];
                    // SAFETY: the iovecs cover `got`.
                    match unsafe { b.recv_iov(&v) } {
                        Ok(0) => panic!("end of stream"),
                        Ok(k) => read += k,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("recv: {e}"),
                    }
                }
            }
            assert!(got == data, "seed {seed}: bytes differ");
            assert_eq!(b.staged(), 0);
        }
    }

    #[test]
    fn a_reader_leaves_the_pad_until_the_next_chunk() {
        let (mut a, mut b) = pair(None);
        let msg = [5u8; 50];
        let mut got = [0u8; 50];
        for round in 0..3 {
            let v = [crate::util::iov(msg.as_ptr(), msg.len())];
            // SAFETY: the iovec covers `msg`.
            assert_eq!(unsafe { a.send_iov(&v) }.unwrap(), 50);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while inq(&b) < 2 {
                assert!(std::time::Instant::now() < deadline);
                std::thread::yield_now();
            }
            b.fresh();
            // The first chunk's length is not known before it is read:
            // two reads, then one per chunk of the same size.
            let mut n = 0;
            while n < 50 {
                let v = [crate::util::iov(got[n..].as_mut_ptr(), 50 - n)];
                // SAFETY: the iovec covers the rest of `got`.
                n += unsafe { b.recv_iov(&v) }.unwrap();
            }
            assert_eq!(got, msg);
            // The chunk's pad is still in the socket, and a read right
            // after does not take it.
            assert_eq!(inq(&b), 1, "round {round}");
            let v = [crate::util::iov(got.as_mut_ptr(), got.len())];
            // SAFETY: the iovec covers `got`.
            let e = unsafe { b.recv_iov(&v) }.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            assert_eq!(inq(&b), 1);
            std::mem::swap(&mut a, &mut b);
        }
        // The other way too, and a peer's close still reads as the end.
        drop(a);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            b.fresh();
            let v = [crate::util::iov(got.as_mut_ptr(), got.len())];
            // SAFETY: as above.
            match unsafe { b.recv_iov(&v) } {
                Ok(0) => break,
                Ok(k) => panic!("{k} bytes after the end"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline);
                    std::thread::yield_now();
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
    }

    #[test]
    fn a_reader_behind_a_stream_reads_chunks_in_runs() {
        let (a, mut b) = pair(None);
        const N: usize = 200;
        for i in 0..N {
            let msg = [i as u8; 50];
            let v = [crate::util::iov(msg.as_ptr(), msg.len())];
            // SAFETY: the iovec covers `msg`.
            assert_eq!(unsafe { a.send_iov(&v) }.unwrap(), 50);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while inq(&b) < (N * 55) as i32 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::yield_now();
        }
        b.fresh();
        let mut got = [0u8; 50];
        for i in 0..N {
            read_all(&mut b, &mut got);
            assert_eq!(got, [i as u8; 50], "message {i}");
        }
        // One read per chunk at first, then runs of up to MAX_BURST.
        let reads = b.calls().0 as usize;
        assert!(reads <= 16, "{reads} reads for {N} chunks");
        assert_eq!(b.staged(), 0);
    }

    #[test]
    fn a_reader_takes_the_pad_alone_every_few_hundred_bytes() {
        let (a, mut b) = pair(None);
        let send = |c: &TcpConn, m: &[u8]| {
            let v = [crate::util::iov(m.as_ptr(), m.len())];
            // SAFETY: the iovec covers `m`.
            assert_eq!(unsafe { c.send_iov(&v) }.unwrap(), m.len());
        };
        let wait_inq = |c: &TcpConn, n: i32| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while inq(c) < n {
                assert!(std::time::Instant::now() < deadline);
                std::thread::yield_now();
            }
        };
        let mut got = [0u8; 100];
        let mut taken = Vec::new();
        for round in 0..12u8 {
            let msg = [round; 100];
            send(&a, &msg);
            wait_inq(&b, 2);
            read_all(&mut b, &mut got);
            assert_eq!(got, msg);
            // Read on until it would block, as the engines do.
            let v = [crate::util::iov(got.as_mut_ptr(), got.len())];
            // SAFETY: the iovec covers `got`.
            let e = unsafe { b.recv_iov(&v) }.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            assert_eq!(inq(&b), 1, "round {round}: the pad waits");
            b.ack_early();
            if inq(&b) == 0 {
                taken.push(round);
            }
        }
        // About every ACK_EARLY bytes (105 a chunk here), never on the
        // first chunk, never twice in a row; the stream reads on whole.
        let every = ACK_EARLY.div_ceil(105);
        assert!(!taken.is_empty() && taken[0] > 0, "{taken:?}");
        for w in taken.windows(2) {
            assert!(w[1] - w[0] >= every as u8 - 1, "{taken:?}");
        }
        assert!(taken.len() >= 12 / (every + 1), "{taken:?}");

        // With the next chunk behind it, the pad may go but nothing
        // more: what follows reads as it came.
        let (x, y) = ([1u8; 60], [2u8; 60]);
        let mut big = [0u8; 60];
        for _ in 0..8 {
            send(&a, &x);
            send(&a, &y);
            wait_inq(&b, 2 * 65);
            read_all(&mut b, &mut big);
            assert_eq!(big, x);
            let before = inq(&b);
            b.ack_early();
            assert!(inq(&b) >= before - 1, "{before} -> {}", inq(&b));
            read_all(&mut b, &mut big);
            assert_eq!(big, y);
        }
    }

    #[test]
    fn loopback_connections_are_told_apart() {
        let v4 = |a: [u8; 4]| crate::gid::ipv4_mapped(a);
        let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert!(over_loopback(&v4([127, 0, 0, 1]), &v4([127, 0, 0, 1])));
        assert!(over_loopback(&v4([127, 0, 0, 2]), &v4([10, 0, 0, 1])));
        assert!(over_loopback(&v6("::1"), &v6("::1")));
        assert!(over_loopback(&v4([10, 1, 2, 3]), &v4([10, 1, 2, 3])));
        assert!(over_loopback(&v6("fd00::7"), &v6("fd00::7")));
        assert!(!over_loopback(&v4([198, 18, 77, 2]), &v4([198, 18, 77, 1])));
        assert!(!over_loopback(&v6("fd00::8"), &v6("fd00::7")));
    }

    /// Reads exactly `got.len()` bytes, polling with a bound.
    fn read_all(b: &mut TcpConn, got: &mut [u8]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut n = 0;
        while n < got.len() {
            assert!(std::time::Instant::now() < deadline, "stuck at {n}");
            b.fresh();
            let v = [crate::util::iov(got[n..].as_mut_ptr(), got.len() - n)];
            // SAFETY: the iovec covers the rest of `got`.
            match unsafe { b.recv_iov(&v) } {
                Ok(0) => panic!("end of stream"),
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("recv: {e}"),
            }
        }
    }

    /// (unacknowledged segments, congestion window) of `c`'s sending side.
    fn in_flight(c: &TcpConn) -> (u32, u32) {
        // SAFETY: a zeroed tcp_info is valid; getsockopt writes at most
        // `len` bytes of it.
        let mut ti: libc::tcp_info = unsafe { zeroed() };
        let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: as above.
        let r = unsafe {
            libc::getsockopt(
                c.fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                &mut ti as *mut libc::tcp_info as *mut libc::c_void,
                &mut len,
            )
        };
        assert_eq!(r, 0);
        (ti.tcpi_unacked, ti.tcpi_snd_cwnd)
    }

    /// A ping-pong of small messages on young connections (congestion
    /// window 10), two one-way streams as a QP pair has, read to each
    /// chunk's end: the reader's kernel acknowledges often enough that a
    /// sender never has a window's worth unacknowledged (its next message
    /// would wait for the delayed-ACK timer, 40 ms or more: what a filler
    /// chunk raising `rcv_mss` did).
    #[test]
    fn small_messages_never_fill_a_young_window() {
        for size in [48usize, 60, 100, 200] {
            let (a1, mut b1) = pair(None);
            let (mut a2, b2) = pair(None);
            let msg = vec![7u8; size];
            let mut got = vec![0u8; size];
            for round in 0..100 {
                for (tx, rx) in [(&a1, &mut b1), (&b2, &mut a2)] {
                    let v = [crate::util::iov(msg.as_ptr(), size)];
                    // SAFETY: the iovec covers `msg`.
                    assert_eq!(unsafe { tx.send_iov(&v) }.unwrap(), size);
                    let (unacked, cwnd) = in_flight(tx);
                    assert!(
                        unacked < cwnd,
                        "{size} B, round {round}: {unacked} segments unacknowledged, window {cwnd}"
                    );
                    read_all(rx, &mut got);
                    assert_eq!(got, msg);
                }
            }
        }
    }
}
