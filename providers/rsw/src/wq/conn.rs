//! What the RC engines keep per connection, defined beside the QP so the
//! engines (`engine::requester`, `engine::completer`, `engine::responder`)
//! sit below nothing they use; what they keep per QP is in their own
//! `info` modules. The small methods here only edit the state; everything
//! that touches a socket or a CQ is in the engines.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use verbs_abi::*;

use crate::transport::local::Peer;
use crate::transport::{Conn, Endpoints};
use crate::wire::{Header, Hello, Op, Syndrome, HDR_LEN};

// ---- the requester's connection ------------------------------------------------

/// Our outgoing connection: the requests we transmit, the responses we read.
pub struct OutConn {
    pub(crate) conn: Conn,
    pub(crate) connected: bool,
    pub(crate) events: u32,
    pub(crate) tx_active: bool,
    pub(crate) tx_seq: u64,
    pub(crate) tx_hdr: [u8; HDR_LEN],
    pub(crate) tx_total: usize,
    pub(crate) tx_off: usize,
    /// The socket was full at the last send: bytes accepted after that
    /// prove the peer's host is taking data.
    pub(crate) tx_was_full: bool,
    /// The last send took less than it was offered: the socket is full
    /// until `poll(2)` says it has room.
    pub(crate) tx_short: bool,
    pub(crate) next_msn: u32,
    pub(crate) rx_hdr: [u8; HDR_LEN],
    pub(crate) rx_got: usize,
    /// A READ response whose payload is being received.
    pub(crate) rx_read: Option<ReadRx>,
    /// The peer's process is on this host and let us reach its memory
    /// (`transport::local`): one-sided requests go straight there.
    pub(crate) direct: Option<Arc<Peer>>,
    /// `direct` is new: tell the peer (a flagged doorbell) before the next
    /// request.
    pub(crate) announce: bool,
    /// The same-host peer had no receive posted for the head SEND (RNR)
    /// since this time (0: not waiting); see `samehost::rnr_wait`.
    pub(crate) rnr_since: u64,
    /// When that wait's timer next fires.
    pub(crate) rnr_tick: u64,
    /// The QP's CQs' poll counts when the wait began or last ticked: a
    /// program still polling needs no doorbell.
    pub(crate) rnr_polls: u64,
    /// The same-host peer was rung once for being in RTR (its
    /// `IBV_EVENT_COMM_EST` needs one doorbell, not one per request).
    pub(crate) rtr_rung: bool,
}

/// How long a same-host SEND waits for a receive by polling alone before
/// it asks the peer to ring it.
pub const RNR_DIRECT_NS: u64 = 1_000_000;

impl OutConn {
    /// Makes header `h` (then `payload` bytes of WQE `seq`) what goes out
    /// next.
    #[inline]
    pub(crate) fn start_tx(&mut self, h: &Header, seq: u64, payload: usize) {
        h.encode(&mut self.tx_hdr);
        self.tx_active = true;
        self.tx_seq = seq;
        self.tx_off = 0;
        self.tx_total = HDR_LEN + payload;
    }
}

pub(crate) struct ReadRx {
    pub(crate) seq: u64,
    pub(crate) left: u32,
    pub(crate) done: u32,
    pub(crate) status: ibv_wc_status,
}

// ---- the responder's connections -----------------------------------------------

/// Bytes at the end of every SEND/WRITE payload that become visible only
/// after the acknowledgement is handed to the kernel. Hardware acknowledges
/// before the target's CPU can see the data; without this, a target that
/// watches the last bytes of a buffer could see them, exit, and take the
/// unsent ACK with it, failing a requester whose operation did succeed.
pub(crate) const TAIL: u32 = 64;

const MAX_QUEUED_RESPONSES: usize = 1024;
const MAX_QUEUED_READ_BYTES: u64 = 8 << 20;

pub(crate) enum Rx {
    Header,
    /// Waiting for a receive WQE (RNR).
    Stalled(Header),
    Payload(Header, u32),
    /// A SEND to a QP on a tag-matching SRQ: its first bytes, the
    /// tag-matching header, are read before it is placed
    /// (`engine::responder::tm`).
    Tmh(Header),
    /// UC: the rest of a message that is dropped (this many bytes).
    Discard(u32),
    /// An injected fault (`faults`) holds the request until the monotonic
    /// time given (u64::MAX: forever, a lost request); then it is NAKed as
    /// RNR retries exceeded (`rnr_exceeded`) or served.
    Held {
        h: Header,
        until: u64,
        rnr_exceeded: bool,
    },
}

pub(crate) struct ReadData {
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) sent: u32,
    /// The PD the READ was checked against (an XRC request's SRQ's).
    pub(crate) pd: u32,
}

pub(crate) struct Resp {
    pub(crate) hdr: [u8; HDR_LEN],
    pub(crate) op: Op,
    pub(crate) off: usize,
    pub(crate) read: Option<ReadData>,
}

pub struct InConn {
    pub(crate) conn: Conn,
    pub(crate) peer_qpn: u32,
    pub(crate) events: u32,
    pub(crate) rx_hdr: [u8; HDR_LEN],
    pub(crate) rx_got: usize,
    pub(crate) rx: Rx,
    pub(crate) resp: VecDeque<Resp>,
    pub(crate) read_bytes: u64,
    /// No more requests are read; the connection closes once the queued
    /// responses are out.
    pub(crate) closing: bool,
    pub(crate) rnr_deadline: Option<u64>,
    /// When the next RNR wait notice is due while stalled.
    pub(crate) rnr_notice_at: u64,
    /// The last bytes of the payload being received (see [`TAIL`]).
    pub(crate) tail: [u8; TAIL as usize],
    /// The peer took our same-host offer: its SENDs and one-sided
    /// requests come through memory, this connection only carries what
    /// cannot (so polling does not read it; the progress thread does).
    pub(crate) peer_direct: bool,
    /// The peer's responder takes ACKs carried on our requests
    /// (`wire::FLAG_ACK`; its hello said so).
    pub(crate) peer_takes_acks: bool,
    /// The last queued response is an ACK held back for our next request
    /// to carry (`responder::owe_ack`); any flush sends it instead.
    pub(crate) ack_owed: bool,
    /// The queued, unsent ACK answers only requests that asked for none
    /// now (`wire::REQ_ACK_LATER`): it may wait for the ACK timer.
    pub(crate) ack_lazy: bool,
    /// The last request read was lone (`wire::FLAG_WAITS`): its requester
    /// has nothing else unanswered.
    pub(crate) last_lone: bool,
    /// A request was read since our requester last put an ACK on one.
    pub(crate) read_since_post: bool,
    /// Our program answers the peer's requests with requests of its own
    /// (it posted after the last one came): a ping-pong, where an ACK the
    /// progress thread holds back rides on the answer (`responder::owe_ack`).
    pub(crate) answering: bool,
}

impl InConn {
    pub(crate) fn backlogged(&self) -> bool {
        self.resp.len() >= MAX_QUEUED_RESPONSES || self.read_bytes >= MAX_QUEUED_READ_BYTES
    }

    pub(crate) fn push_resp(&mut self, h: &Header, read: Option<ReadData>) {
        self.ack_owed = false;
        let mut hdr = [0u8; HDR_LEN];
        h.encode(&mut hdr);
        if let Some(r) = &read {
            self.read_bytes += r.len as u64;
        }
        self.resp.push_back(Resp {
            hdr,
            op: h.op,
            off: 0,
            read,
        });
    }

    /// ACKs are cumulative, so a new one replaces a queued, unsent one.
    pub(crate) fn ack(&mut self, msn: u32, lazy: bool) {
        if let Some(last) = self.resp.back_mut() {
            if last.op == Op::Ack && last.off == 0 {
                last.hdr[4..8].copy_from_slice(&msn.to_le_bytes());
                self.ack_lazy &= lazy;
                return;
            }
        }
        self.push_resp(&Header::new(Op::Ack, msn), None);
        self.ack_lazy = lazy;
    }

    /// Our requester sends a request that could carry an ACK: the program
    /// answers if a request of the peer's came since the last one.
    pub(crate) fn note_request_sent(&mut self) {
        self.answering = std::mem::take(&mut self.read_since_post);
    }

    /// The ACK held back for a request of ours to carry, taken off the
    /// queue: the caller puts its MSN on the request.
    pub(crate) fn take_owed_ack(&mut self) -> Option<u32> {
        let r = self.owed_ack()?;
        let msn = u32::from_le_bytes([r.hdr[4], r.hdr[5], r.hdr[6], r.hdr[7]]);
        self.resp.pop_back();
        Some(msn)
    }

    /// The ACK held back (the last response, not started), forgetting
    /// that it is held: whoever asks sends it or hands it on.
    fn owed_ack(&mut self) -> Option<&Resp> {
        if !std::mem::take(&mut self.ack_owed) {
            return None;
        }
        self.resp.back().filter(|r| r.op == Op::Ack && r.off == 0)
    }

    pub(crate) fn nak(&mut self, msn: u32, syn: Syndrome) {
        let mut h = Header::new(Op::Nak, msn);
        h.syndrome = syn as u8;
        self.push_resp(&h, None);
        self.closing = true;
        self.rx = Rx::Header;
        self.rnr_deadline = None;
        self.rnr_notice_at = 0;
    }
}

/// A connection closing (the QP destroyed or reset, the process exiting)
/// first hands the kernel the ACK it held back, if any: the program has
/// seen the receive completion, so the peer's request did succeed and
/// must not fail for want of its ACK. The one socket call outside the
/// engines, best effort and non-blocking.
impl Drop for InConn {
    fn drop(&mut self) {
        self.send_owed_ack();
    }
}

impl InConn {
    pub(crate) fn send_owed_ack(&mut self) {
        if let Some(r) = self.owed_ack() {
            let v = [crate::util::iov(r.hdr.as_ptr(), HDR_LEN)];
            // SAFETY: the iovec covers the queued header, alive across the
            // call.
            let _ = unsafe { self.conn.send_iov(&v) };
        }
    }
}

/// An accepted connection before it is known to be our peer's.
pub struct PendingConn {
    pub(crate) conn: Conn,
    /// Its event token's id: slot in the low bits, a per-QP count above.
    pub(crate) id: usize,
    pub(crate) ends: Endpoints,
    pub(crate) buf: [u8; HDR_LEN],
    pub(crate) got: usize,
    pub(crate) hello: Option<Hello>,
    /// When it was accepted (monotonic ns).
    pub(crate) accepted: u64,
    pub(crate) _counted: Counted,
    /// When the connection is dropped if it is still pending: strangers
    /// that connect and say nothing, or name a QP that never reaches RTR,
    /// cannot pile up descriptors.
    pub(crate) deadline: u64,
}

/// Pending connections of the whole process (every QP's), for the cap.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Pending connections held now, process-wide.
pub fn pending_connections() -> usize {
    PENDING.load(Ordering::Relaxed)
}

/// One pending connection counted in [`PENDING`] for as long as it lives.
pub(crate) struct Counted;

impl Counted {
    pub(crate) fn new() -> Counted {
        PENDING.fetch_add(1, Ordering::Relaxed);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::Relaxed);
    }
}
