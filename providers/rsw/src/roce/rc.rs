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

#[cfg(test)]
mod tests {
    use super::*;

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
}
