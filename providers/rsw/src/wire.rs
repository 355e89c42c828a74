//! On-the-wire message format between two rsw queue pairs.
//!
//! Every message on a connection starts with a fixed [`HDR_LEN`]-byte
//! little-endian block. The first block of a connection is a [`Hello`]; every
//! later block is a [`Header`], followed by `length` payload bytes for the
//! operations that carry data (SEND, WRITE and READ responses). A fixed size
//! lets the receive state machines read "one block" without parsing first,
//! and lets a reader place payload straight into its destination.
//!
//! Layout of a [`Header`] (offsets in bytes):
//!
//! | off | size | field                                             |
//! |-----|------|---------------------------------------------------|
//! | 0   | 1    | opcode ([`Op`])                                   |
//! | 1   | 1    | flags ([`FLAG_SOLICITED`], [`FLAG_IMM`], RNR retry)|
//! | 2   | 1    | NAK syndrome ([`Syndrome`])                       |
//! | 3   | 1    | reserved, 0                                       |
//! | 4   | 4    | message sequence number                           |
//! | 8   | 4    | payload / requested length                        |
//! | 12  | 4    | rkey                                              |
//! | 16  | 8    | remote address                                    |
//! | 24  | 4    | immediate data (raw bits as the sender posted)    |
//! | 28  | 4    | reserved, 0                                       |
//! | 32  | 8    | compare / add operand, or atomic original value   |
//! | 40  | 8    | swap operand                                      |
//!
//! This module is pure (no I/O) so it can be unit tested in isolation.

/// Size of every header and of the hello block.
pub const HDR_LEN: usize = 48;

/// First four bytes of a hello: "RSW" plus a format generation.
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"RSW1");
/// Protocol version carried in the hello; a peer with another version is
/// refused rather than misread.
pub const PROTO_VERSION: u16 = 1;

/// The request asks for a solicited event at the responder.
pub const FLAG_SOLICITED: u8 = 1 << 0;
/// The request carries immediate data.
pub const FLAG_IMM: u8 = 1 << 1;
const RNR_SHIFT: u8 = 4;
const RNR_MASK: u8 = 0x7;

/// Message types. Requests travel requester → responder on the requester's
/// outgoing connection; responses come back on the same connection, in
/// request order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Send = 1,
    SendImm = 2,
    Write = 3,
    WriteImm = 4,
    ReadReq = 5,
    CmpSwap = 6,
    FetchAdd = 7,
    /// Acknowledges every request up to and including `msn`.
    Ack = 0x81,
    /// Data of the READ with `msn`; `length` payload bytes follow.
    ReadResp = 0x82,
    /// Original value of the atomic with `msn`, in `compare_add`.
    AtomicResp = 0x83,
    /// The request with `msn` failed with `syndrome`; earlier ones succeeded.
    Nak = 0x84,
}

impl Op {
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Send,
            2 => Op::SendImm,
            3 => Op::Write,
            4 => Op::WriteImm,
            5 => Op::ReadReq,
            6 => Op::CmpSwap,
            7 => Op::FetchAdd,
            0x81 => Op::Ack,
            0x82 => Op::ReadResp,
            0x83 => Op::AtomicResp,
            0x84 => Op::Nak,
            _ => return None,
        })
    }

    pub fn is_request(self) -> bool {
        (self as u8) < 0x80
    }

    /// Requests whose payload follows the header.
    pub fn request_has_payload(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::Write | Op::WriteImm)
    }
}

/// Why a responder refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Syndrome {
    /// Bad rkey, range, permission or alignment.
    RemAccess = 1,
    /// Malformed request, e.g. a SEND larger than the receive buffer.
    RemInvReq = 2,
    /// The responder failed for a reason of its own (e.g. its receive
    /// buffer's lkey is invalid).
    RemOp = 3,
    /// No receive was posted before the RNR deadline.
    RnrRetryExc = 4,
}

impl Syndrome {
    pub fn from_u8(v: u8) -> Option<Syndrome> {
        Some(match v {
            1 => Syndrome::RemAccess,
            2 => Syndrome::RemInvReq,
            3 => Syndrome::RemOp,
            4 => Syndrome::RnrRetryExc,
            _ => return None,
        })
    }
}

/// A decoded request or response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub op: Op,
    pub flags: u8,
    pub syndrome: u8,
    pub msn: u32,
    pub length: u32,
    pub rkey: u32,
    pub remote_addr: u64,
    pub imm: u32,
    pub compare_add: u64,
    pub swap: u64,
}

/// Why a block could not be decoded; the connection is then unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    BadOpcode(u8),
    BadMagic,
    BadVersion(u16),
}

impl Header {
    pub fn new(op: Op, msn: u32) -> Header {
        Header {
            op,
            flags: 0,
            syndrome: 0,
            msn,
            length: 0,
            rkey: 0,
            remote_addr: 0,
            imm: 0,
            compare_add: 0,
            swap: 0,
        }
    }

    /// The requester's RNR retry count (0..=7, 7 = forever) carried in the
    /// flags of every request, so a change made with `ibv_modify_qp` after
    /// the connection opened still reaches the responder.
    pub fn rnr_retry(&self) -> u8 {
        (self.flags >> RNR_SHIFT) & RNR_MASK
    }

    pub fn set_rnr_retry(&mut self, n: u8) {
        self.flags = (self.flags & !(RNR_MASK << RNR_SHIFT)) | ((n & RNR_MASK) << RNR_SHIFT);
    }

    pub fn encode(&self, out: &mut [u8; HDR_LEN]) {
        out[0] = self.op as u8;
        out[1] = self.flags;
        out[2] = self.syndrome;
        out[3] = 0;
        out[4..8].copy_from_slice(&self.msn.to_le_bytes());
        out[8..12].copy_from_slice(&self.length.to_le_bytes());
        out[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        out[16..24].copy_from_slice(&self.remote_addr.to_le_bytes());
        out[24..28].copy_from_slice(&self.imm.to_le_bytes());
        out[28..32].copy_from_slice(&[0; 4]);
        out[32..40].copy_from_slice(&self.compare_add.to_le_bytes());
        out[40..48].copy_from_slice(&self.swap.to_le_bytes());
    }

    pub fn decode(b: &[u8; HDR_LEN]) -> Result<Header, WireError> {
        let op = Op::from_u8(b[0]).ok_or(WireError::BadOpcode(b[0]))?;
        Ok(Header {
            op,
            flags: b[1],
            syndrome: b[2],
            msn: le32(&b[4..8]),
            length: le32(&b[8..12]),
            rkey: le32(&b[12..16]),
            remote_addr: le64(&b[16..24]),
            imm: le32(&b[24..28]),
            compare_add: le64(&b[32..40]),
            swap: le64(&b[40..48]),
        })
    }
}

/// First block on every connection, sent by the connecting (requester) side.
/// It names both ends so the acceptor can refuse a connection meant for a
/// QP that used to own this port, or one from an unexpected peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub src_gid: [u8; 16],
    pub src_qpn: u32,
    pub dst_qpn: u32,
    /// The requester's starting PSN (informational).
    pub psn: u32,
}

impl Hello {
    pub fn encode(&self, out: &mut [u8; HDR_LEN]) {
        *out = [0; HDR_LEN];
        out[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&PROTO_VERSION.to_le_bytes());
        out[8..24].copy_from_slice(&self.src_gid);
        out[24..28].copy_from_slice(&self.src_qpn.to_le_bytes());
        out[28..32].copy_from_slice(&self.dst_qpn.to_le_bytes());
        out[32..36].copy_from_slice(&self.psn.to_le_bytes());
    }

    pub fn decode(b: &[u8; HDR_LEN]) -> Result<Hello, WireError> {
        if le32(&b[0..4]) != HELLO_MAGIC {
            return Err(WireError::BadMagic);
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != PROTO_VERSION {
            return Err(WireError::BadVersion(version));
        }
        let mut src_gid = [0u8; 16];
        src_gid.copy_from_slice(&b[8..24]);
        Ok(Hello {
            src_gid,
            src_qpn: le32(&b[24..28]),
            dst_qpn: le32(&b[28..32]),
            psn: le32(&b[32..36]),
        })
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Sequence-number comparison that survives wrap-around: true when `a`
/// comes before `b` in a window of 2^31.
pub fn msn_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let mut h = Header::new(Op::CmpSwap, 0xdead_beef);
        h.flags = FLAG_SOLICITED | FLAG_IMM;
        h.set_rnr_retry(5);
        h.length = 8;
        h.rkey = 0x1234_5678;
        h.remote_addr = 0x0102_0304_0506_0708;
        h.imm = 0xa1b2_c3d4;
        h.compare_add = u64::MAX - 1;
        h.swap = 42;
        let mut b = [0u8; HDR_LEN];
        h.encode(&mut b);
        let d = Header::decode(&b).unwrap();
        assert_eq!(d, h);
        assert_eq!(d.rnr_retry(), 5);
        assert_eq!(
            d.flags & (FLAG_SOLICITED | FLAG_IMM),
            FLAG_SOLICITED | FLAG_IMM
        );
    }

    #[test]
    fn header_is_little_endian_at_fixed_offsets() {
        let mut h = Header::new(Op::Write, 0x0403_0201);
        h.length = 0x0807_0605;
        h.remote_addr = 0x1817_1615_1413_1211;
        let mut b = [0u8; HDR_LEN];
        h.encode(&mut b);
        assert_eq!(b[0], 3);
        assert_eq!(&b[4..8], &[1, 2, 3, 4]);
        assert_eq!(&b[8..12], &[5, 6, 7, 8]);
        assert_eq!(
            &b[16..24],
            &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
        );
    }

    #[test]
    fn rnr_retry_does_not_disturb_other_flags() {
        let mut h = Header::new(Op::Send, 0);
        h.flags = FLAG_SOLICITED;
        h.set_rnr_retry(7);
        assert_eq!(h.rnr_retry(), 7);
        assert_eq!(h.flags & FLAG_SOLICITED, FLAG_SOLICITED);
        h.set_rnr_retry(0);
        assert_eq!(h.rnr_retry(), 0);
        assert_eq!(h.flags, FLAG_SOLICITED);
    }

    #[test]
    fn bad_opcode_is_rejected() {
        let mut b = [0u8; HDR_LEN];
        b[0] = 0x42;
        assert_eq!(Header::decode(&b), Err(WireError::BadOpcode(0x42)));
        b[0] = 0;
        assert_eq!(Header::decode(&b), Err(WireError::BadOpcode(0)));
    }

    #[test]
    fn hello_round_trip_and_checks() {
        let h = Hello {
            src_gid: [7; 16],
            src_qpn: 40000,
            dst_qpn: 40001,
            psn: 0xabcdef,
        };
        let mut b = [0u8; HDR_LEN];
        h.encode(&mut b);
        assert_eq!(Hello::decode(&b), Ok(h));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Hello::decode(&bad), Err(WireError::BadMagic));
        let mut bad = b;
        bad[4] = 9;
        assert_eq!(Hello::decode(&bad), Err(WireError::BadVersion(9)));
        // A hello never decodes as a request header and vice versa.
        assert!(Header::decode(&b).is_err());
    }

    #[test]
    fn opcode_classes() {
        assert!(Op::Send.is_request() && Op::FetchAdd.is_request());
        assert!(!Op::Ack.is_request() && !Op::Nak.is_request());
        assert!(Op::Write.request_has_payload() && !Op::ReadReq.request_has_payload());
        for v in 0..=255u8 {
            if let Some(op) = Op::from_u8(v) {
                assert_eq!(op as u8, v);
            }
            if let Some(s) = Syndrome::from_u8(v) {
                assert_eq!(s as u8, v);
            }
        }
    }

    #[test]
    fn msn_ordering_wraps() {
        assert!(msn_before(1, 2));
        assert!(!msn_before(2, 1));
        assert!(!msn_before(5, 5));
        assert!(msn_before(u32::MAX, 0));
        assert!(!msn_before(0, u32::MAX));
    }
}
