//! The arithmetic of RC over RoCEv2, pure so that it is tested on its
//! own: 24-bit PSNs that wrap, a message cut into packets by the path
//! MTU (which opcode each packet carries), and the responder's judgement
//! of a request's PSN (IBA 9.7).

use super::opcode::Opcode;

/// PSNs are 24 bits.
pub(crate) const PSN_MASK: u32 = 0x00ff_ffff;

/// `a + n` in PSN space.
pub(crate) fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// `a - b` in PSN space as a signed distance (-2^23 .. 2^23): positive
/// when `a` comes after `b`.
pub(crate) fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// Bytes of a packet's payload at `ibv_mtu` (1 = 256 .. 5 = 4096).
pub(crate) fn mtu_bytes(path_mtu: u32) -> usize {
    128usize << path_mtu.clamp(1, 5)
}

/// Packets a message of `len` bytes takes (a message of 0 bytes takes
/// one).
pub(crate) fn packets(len: usize, mtu: usize) -> u32 {
    len.div_ceil(mtu).max(1) as u32
}

/// The bytes packet `i` of a `len`-byte message carries.
pub(crate) fn segment(len: usize, mtu: usize, i: u32) -> std::ops::Range<usize> {
    let start = (i as usize * mtu).min(len);
    start..(start + mtu).min(len)
}

/// The operation a multi-packet opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Send { imm: bool },
    Write { imm: bool },
    ReadResponse,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    First,
    Middle,
    Last,
    Only,
}

impl Place {
    /// Packet `i` of `n`.
    pub(crate) fn of(i: u32, n: u32) -> Place {
        match (i == 0, i + 1 == n) {
            (true, true) => Place::Only,
            (true, false) => Place::First,
            (false, true) => Place::Last,
            (false, false) => Place::Middle,
        }
    }

    pub(crate) fn starts(self) -> bool {
        matches!(self, Place::First | Place::Only)
    }

    pub(crate) fn ends(self) -> bool {
        matches!(self, Place::Last | Place::Only)
    }
}

/// The opcode of packet `i` of `n` of a message of `kind`.
pub(crate) fn opcode(kind: Kind, i: u32, n: u32) -> Opcode {
    use Opcode::*;
    match (kind, Place::of(i, n)) {
        (Kind::Send { .. }, Place::First) => RcSendFirst,
        (Kind::Send { .. }, Place::Middle) => RcSendMiddle,
        (Kind::Send { imm: false }, Place::Last) => RcSendLast,
        (Kind::Send { imm: true }, Place::Last) => RcSendLastImm,
        (Kind::Send { imm: false }, Place::Only) => RcSendOnly,
        (Kind::Send { imm: true }, Place::Only) => RcSendOnlyImm,
        (Kind::Write { .. }, Place::First) => RcWriteFirst,
        (Kind::Write { .. }, Place::Middle) => RcWriteMiddle,
        (Kind::Write { imm: false }, Place::Last) => RcWriteLast,
        (Kind::Write { imm: true }, Place::Last) => RcWriteLastImm,
        (Kind::Write { imm: false }, Place::Only) => RcWriteOnly,
        (Kind::Write { imm: true }, Place::Only) => RcWriteOnlyImm,
        (Kind::ReadResponse, Place::First) => RcReadResponseFirst,
        (Kind::ReadResponse, Place::Middle) => RcReadResponseMiddle,
        (Kind::ReadResponse, Place::Last) => RcReadResponseLast,
        (Kind::ReadResponse, Place::Only) => RcReadResponseOnly,
    }
}

/// What a SEND, WRITE or READ response opcode is, and where its packet
/// sits; None for the other opcodes.
pub(crate) fn classify(op: Opcode) -> Option<(Kind, Place)> {
    use Opcode::*;
    let send = |imm| Kind::Send { imm };
    let write = |imm| Kind::Write { imm };
    Some(match op {
        RcSendFirst => (send(false), Place::First),
        RcSendMiddle => (send(false), Place::Middle),
        RcSendLast => (send(false), Place::Last),
        RcSendLastImm => (send(true), Place::Last),
        RcSendOnly => (send(false), Place::Only),
        RcSendOnlyImm => (send(true), Place::Only),
        RcSendLastInv => (send(false), Place::Last),
        RcSendOnlyInv => (send(false), Place::Only),
        RcWriteFirst => (write(false), Place::First),
        RcWriteMiddle => (write(false), Place::Middle),
        RcWriteLast => (write(false), Place::Last),
        RcWriteLastImm => (write(true), Place::Last),
        RcWriteOnly => (write(false), Place::Only),
        RcWriteOnlyImm => (write(true), Place::Only),
        RcReadResponseFirst => (Kind::ReadResponse, Place::First),
        RcReadResponseMiddle => (Kind::ReadResponse, Place::Middle),
        RcReadResponseLast => (Kind::ReadResponse, Place::Last),
        RcReadResponseOnly => (Kind::ReadResponse, Place::Only),
        _ => return None,
    })
}

/// The UC opcode of an RC SEND or WRITE opcode (UC's are RC's with the
/// transport bits 001); None for operations UC does not have.
pub(crate) fn to_uc(op: Opcode) -> Option<Opcode> {
    match op as u8 {
        b @ 0x00..=0x0b => Opcode::from_u8(b | 0x20),
        _ => None,
    }
}

/// The RC opcode of the same operation as UC opcode `op`.
pub(crate) fn from_uc(op: Opcode) -> Option<Opcode> {
    match op as u8 {
        b @ 0x20..=0x2b => Opcode::from_u8(b & 0x1f),
        _ => None,
    }
}

/// A request's PSN against the one the responder expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PsnCheck {
    Expected,
    /// Already executed: answered again (ACK, or the READ's responses),
    /// not executed again.
    Duplicate,
    /// Ahead of what is expected (packets were lost): one NAK sequence
    /// error until the expected one arrives.
    OutOfSequence,
}

/// IBA 9.7.5.1.1: the half of PSN space behind the expected PSN is
/// duplicates, the half ahead is out of sequence.
pub(crate) fn check_psn(psn: u32, expected: u32) -> PsnCheck {
    match psn_diff(psn, expected) {
        0 => PsnCheck::Expected,
        d if d < 0 => PsnCheck::Duplicate,
        _ => PsnCheck::OutOfSequence,
    }
}

/// Whether a packet at `place` of `kind` may follow what the responder
/// is in the middle of (`current`: the kind of a message started and not
/// ended). A message starts only between messages; a middle or last
/// continues one of its own kind only.
pub(crate) fn continues(current: Option<Kind>, kind: Kind, place: Place) -> bool {
    let same = |a: Kind, b: Kind| {
        matches!(
            (a, b),
            (Kind::Send { .. }, Kind::Send { .. }) | (Kind::Write { .. }, Kind::Write { .. })
        )
    };
    match current {
        None => place.starts(),
        Some(c) => !place.starts() && same(c, kind),
    }
}

/// The local ACK timeout of `timeout` (4.096 us * 2^timeout), in ns;
/// None for 0, which is infinite.
pub(crate) fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// A message the requester sent and has not had answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Outstanding {
    pub(crate) psn: u32,
    /// PSNs it takes: its packets, or a READ's responses.
    pub(crate) npkts: u32,
    /// Packets sent (a READ: its request sent when `sent == npkts`).
    pub(crate) sent: u32,
    pub(crate) read: bool,
    /// Its first PSNs answered: a READ's responses received in order,
    /// other messages' packets acknowledged (an ACK or NAK inside it).
    pub(crate) got: u32,
}

impl Outstanding {
    pub(crate) fn last(&self) -> u32 {
        psn_add(self.psn, self.npkts - 1)
    }

    /// The first PSN of it not yet answered.
    pub(crate) fn unanswered(&self) -> u32 {
        psn_add(self.psn, self.got)
    }

    /// An acknowledgement of PSN `p` (a READ: none counts, its responses
    /// do) inside it: its packets up to `p` are answered. True if that
    /// is news.
    pub(crate) fn acknowledge(&mut self, p: u32) -> bool {
        let d = psn_diff(p, self.psn);
        if self.read || d < 0 || d as u32 >= self.npkts.min(self.sent) {
            return false;
        }
        let got = d as u32 + 1;
        let news = got > self.got;
        self.got = self.got.max(got);
        news
    }
}

/// Go back N: every packet from PSN `p` on is to be sent again (a READ
/// from its first response missing: its request again, for the rest).
/// Returns the index of the first message with packets to send.
pub(crate) fn rewind<'a>(msgs: impl Iterator<Item = &'a mut Outstanding>, p: u32) -> Option<usize> {
    let mut first = None;
    for (i, m) in msgs.enumerate() {
        let d = psn_diff(p, m.psn);
        if d < 0 {
            m.sent = 0;
            m.got = 0;
        } else if d < m.npkts as i32 {
            if m.read {
                m.got = m.got.min(d as u32);
                m.sent = 0;
            } else {
                m.sent = m.sent.min(d as u32);
            }
        }
        if first.is_none() && m.sent < m.npkts {
            first = Some(i);
        }
    }
    first
}

/// Whether an ACK or response with PSN `p` answers something sent: from
/// just before the oldest message outstanding (`oldest`) to the last PSN
/// sent (before `next`).
pub(crate) fn answers_sent(oldest: Option<u32>, next: u32, p: u32) -> bool {
    oldest.is_some_and(|o| psn_diff(p, o) >= -1 && psn_diff(p, next) < 0)
}

/// Whether an acknowledgement of PSN `p` completes message `m` (a READ
/// completes by its responses only).
pub(crate) fn acked(m: &Outstanding, p: u32) -> bool {
    psn_diff(p, m.last()) >= 0 && m.sent >= m.npkts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uc_opcodes_are_rc_sends_and_writes_moved() {
        use Opcode::*;
        assert_eq!(to_uc(RcSendFirst), Some(UcSendFirst));
        assert_eq!(to_uc(RcWriteOnlyImm), Some(UcWriteOnlyImm));
        assert_eq!(to_uc(RcReadRequest), None);
        assert_eq!(to_uc(RcSendOnlyInv), None);
        assert_eq!(from_uc(UcWriteLastImm), Some(RcWriteLastImm));
        assert_eq!(from_uc(RcSendOnly), None);
        for &op in Opcode::ALL {
            if let Some(u) = to_uc(op) {
                assert_eq!(from_uc(u), Some(op));
                assert!(classify(op).is_some());
            }
        }
        assert_eq!(
            classify(RcSendLastInv),
            Some((Kind::Send { imm: false }, Place::Last))
        );
        assert_eq!(
            classify(RcSendOnlyInv),
            Some((Kind::Send { imm: false }, Place::Only))
        );
    }

    #[test]
    fn psns_wrap_at_24_bits() {
        assert_eq!(psn_add(0xff_fffe, 1), 0xff_ffff);
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_add(0xff_fff0, 0x20), 0x10);
        assert_eq!(psn_diff(0x10, 0xff_fff0), 0x20);
        assert_eq!(psn_diff(0xff_fff0, 0x10), -0x20);
        assert_eq!(psn_diff(5, 5), 0);
        assert_eq!(psn_diff(0x7f_ffff, 0), 0x7f_ffff);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
        // Bits above 24 are not PSN.
        assert_eq!(psn_diff(0x0100_0005, 5), 0);
    }

    #[test]
    fn responder_judges_psns_across_the_wrap() {
        assert_eq!(check_psn(7, 7), PsnCheck::Expected);
        assert_eq!(check_psn(0xff_ffff, 0), PsnCheck::Duplicate);
        assert_eq!(check_psn(0, 0xff_ffff), PsnCheck::OutOfSequence);
        assert_eq!(check_psn(3, 0xff_fffe), PsnCheck::OutOfSequence);
        assert_eq!(check_psn(0xff_fffe, 3), PsnCheck::Duplicate);
        assert_eq!(check_psn(0x80_0010, 0x10), PsnCheck::Duplicate);
        assert_eq!(check_psn(0x80_000f, 0x10), PsnCheck::OutOfSequence);
    }

    #[test]
    fn messages_are_cut_by_the_mtu() {
        assert_eq!(mtu_bytes(1), 256);
        assert_eq!(mtu_bytes(3), 1024);
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(4096, 1024), 4);
        assert_eq!(segment(2500, 1024, 0), 0..1024);
        assert_eq!(segment(2500, 1024, 1), 1024..2048);
        assert_eq!(segment(2500, 1024, 2), 2048..2500);
        assert_eq!(segment(0, 1024, 0), 0..0);
        // The segments cover the message once, in order.
        for len in [0, 1, 255, 256, 257, 4095, 4096, 65536, 65537] {
            let n = packets(len, 256);
            let mut at = 0;
            for i in 0..n {
                let s = segment(len, 256, i);
                assert_eq!(s.start, at);
                assert!(s.len() <= 256 && (s.len() == 256 || i + 1 == n));
                at = s.end;
            }
            assert_eq!(at, len);
        }
    }

    #[test]
    fn opcodes_of_each_packet() {
        use Opcode::*;
        let send = Kind::Send { imm: false };
        let send_imm = Kind::Send { imm: true };
        let write_imm = Kind::Write { imm: true };
        assert_eq!(opcode(send, 0, 1), RcSendOnly);
        assert_eq!(opcode(send_imm, 0, 1), RcSendOnlyImm);
        let ops: Vec<_> = (0..3).map(|i| opcode(send_imm, i, 3)).collect();
        assert_eq!(ops, [RcSendFirst, RcSendMiddle, RcSendLastImm]);
        let ops: Vec<_> = (0..2).map(|i| opcode(write_imm, i, 2)).collect();
        assert_eq!(ops, [RcWriteFirst, RcWriteLastImm]);
        assert_eq!(opcode(Kind::Write { imm: false }, 0, 1), RcWriteOnly);
        let ops: Vec<_> = (0..3).map(|i| opcode(Kind::ReadResponse, i, 3)).collect();
        assert_eq!(
            ops,
            [
                RcReadResponseFirst,
                RcReadResponseMiddle,
                RcReadResponseLast
            ]
        );
        // classify undoes opcode; the immediate shows on the last only.
        for kind in [send, send_imm, write_imm, Kind::ReadResponse] {
            for n in 1..4 {
                for i in 0..n {
                    let place = Place::of(i, n);
                    let want = match kind {
                        Kind::Send { .. } if !place.ends() => send,
                        Kind::Write { .. } if !place.ends() => Kind::Write { imm: false },
                        k => k,
                    };
                    assert_eq!(classify(opcode(kind, i, n)), Some((want, place)));
                }
            }
        }
        assert_eq!(classify(RcAck), None);
        assert_eq!(classify(RcReadRequest), None);
    }

    #[test]
    fn message_order_is_enforced() {
        let send = Kind::Send { imm: false };
        let write = Kind::Write { imm: false };
        assert!(continues(None, send, Place::First));
        assert!(continues(None, write, Place::Only));
        assert!(!continues(None, send, Place::Middle));
        assert!(!continues(None, send, Place::Last));
        assert!(continues(Some(send), Kind::Send { imm: true }, Place::Last));
        assert!(continues(Some(write), write, Place::Middle));
        assert!(!continues(Some(send), write, Place::Middle));
        assert!(!continues(Some(send), send, Place::First));
    }

    #[test]
    fn ack_timeouts() {
        assert_eq!(ack_timeout_ns(0), None);
        assert_eq!(ack_timeout_ns(1), Some(8192));
        // ibv_rc_pingpong's 14: 67 ms.
        assert_eq!(ack_timeout_ns(14), Some(67_108_864));
    }
    fn msg(psn: u32, npkts: u32, read: bool) -> Outstanding {
        Outstanding {
            psn,
            npkts,
            sent: npkts,
            read,
            got: 0,
        }
    }

    #[test]
    fn go_back_n_from_a_naked_psn() {
        // Three messages across the wrap: SEND of 4 packets, READ of 3
        // responses (2 received), WRITE of 2; all sent.
        let mut m = [msg(0xff_fffe, 4, false), msg(2, 3, true), msg(5, 2, false)];
        m[1].got = 2;
        // A NAK sequence error at the SEND's third packet: it resends
        // from there, the READ asks again from scratch, the WRITE again.
        let mut a = m;
        assert_eq!(rewind(a.iter_mut(), 0), Some(0));
        assert_eq!((a[0].sent, a[1].sent, a[1].got, a[2].sent), (2, 0, 0, 0));
        // From the READ's missing third response: the SEND is untouched,
        // the READ resent for its rest.
        let mut a = m;
        assert_eq!(rewind(a.iter_mut(), 4), Some(1));
        assert_eq!((a[0].sent, a[1].sent, a[1].got, a[2].sent), (4, 0, 2, 0));
        assert_eq!(a[1].unanswered(), 4);
        // From the WRITE's second packet.
        let mut a = m;
        assert_eq!(rewind(a.iter_mut(), 6), Some(2));
        assert_eq!((a[0].sent, a[1].sent, a[2].sent), (4, 3, 1));
        // Past everything: nothing to resend.
        let mut a = m;
        assert_eq!(rewind(a.iter_mut(), 7), None);
        // A rewind never moves a message forward.
        let mut a = m;
        a[0].sent = 1;
        assert_eq!(rewind(a.iter_mut(), 1), Some(0));
        assert_eq!(a[0].sent, 1);
    }

    #[test]
    fn which_acks_count_and_what_they_complete() {
        let send = msg(0xff_fffe, 4, false); // PSNs fffffe..1
        let read = msg(2, 3, true);
        assert_eq!(send.last(), 1);
        // Stale (before the oldest outstanding, less one), or ahead of
        // anything sent: ignored.
        assert!(answers_sent(Some(0xff_fffe), 5, 0xff_fffd));
        assert!(!answers_sent(Some(0xff_fffe), 5, 0xff_fffc));
        assert!(answers_sent(Some(0xff_fffe), 5, 4));
        assert!(!answers_sent(Some(0xff_fffe), 5, 5));
        assert!(!answers_sent(None, 5, 4));
        // An ACK completes a message once it covers its last packet.
        assert!(!acked(&send, 0));
        assert!(acked(&send, 1));
        assert!(acked(&send, 3));
        let mut part = send;
        part.sent = 2;
        assert!(!acked(&part, 1), "not all of it was sent");
        // A READ's unanswered PSN moves with its responses.
        let mut r = read;
        assert_eq!(r.unanswered(), 2);
        r.got = 2;
        assert_eq!(r.unanswered(), 4);
        // An ACK inside a message answers its packets up to there.
        let mut s = send;
        assert!(!s.acknowledge(0xff_fffd), "before it");
        assert!(s.acknowledge(0xff_ffff));
        assert_eq!((s.got, s.unanswered()), (2, 0));
        assert!(!s.acknowledge(0xff_fffe), "old news");
        assert!(s.acknowledge(0));
        assert_eq!(s.unanswered(), 1);
        assert!(!s.acknowledge(2), "past it: completes it instead");
        let mut part = send;
        part.sent = 2;
        assert!(!part.acknowledge(0), "not sent yet");
        assert!(!r.acknowledge(3), "a READ is answered by its responses");
        // A timeout goes back to the first packet not answered.
        let mut a = [s, msg(2, 3, false)];
        let una = a[0].unanswered();
        assert_eq!(rewind(a.iter_mut(), una), Some(0));
        assert_eq!((a[0].sent, a[0].got, a[1].sent), (3, 3, 0));
    }
}
