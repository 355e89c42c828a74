//! The CM's own wire protocol, spoken over one TCP connection per RDMA
//! connection (the TCP connection stays open for the life of the RDMA
//! connection, so a dead peer shows up as end-of-stream).
//!
//! Every message is a 12-byte header followed by a body:
//!
//! ```text
//! header: magic "RSCM" | version u8 (1) | kind u8 | 0u16 | body length u32 LE
//! REQ, REP body (35 bytes + private data):
//!   qpn u32 | starting psn u32 | gid [16] | responder_resources u8 |
//!   initiator_depth u8 | retry_count u8 | rnr_retry_count u8 |
//!   flow_control u8 | srq u8 | path_mtu u8 | traffic_class u8 |
//!   port space u16 | private data length u8 | private data |
//!   [ECE vendor id u32 | ECE options u32, only when the vendor is not 0]
//! REJ body: reason u16 | private data length u8 | private data
//! MRA, RTU, DREQ, DREP: empty body
//! SIDR_REQ body (27 bytes + private data):
//!   qpn u32 | qkey u32 | gid [16] | port space u16 | private data length u8 |
//!   private data
//! SIDR_REP body (26 bytes + private data):
//!   status u8 | qpn u32 | qkey u32 | gid [16] | private data length u8 |
//!   private data
//! ```
//!
//! The message kinds mirror the InfiniBand CM: REQ (connect), MRA (the
//! passive library got the REQ and handed it to its application, so the
//! active side stops its short timer), REP (accept), RTU (ready to use),
//! REJ (reject), DREQ/DREP (disconnect request/reply). Integers are
//! little-endian. Private data limits are those of the IB CM as seen
//! through rdma_cm's TCP port space: 56 bytes with a REQ, 196 with a REP,
//! 148 with a REJ.
//!
//! Datagram ids (UD QPs: `RDMA_PS_UDP`, `RDMA_PS_IPOIB`, UD ids of
//! `RDMA_PS_IB`) use the IB CM's service ID resolution instead: the active
//! side opens a TCP connection to the listener as for a connection and
//! sends SIDR_REQ (its QP number, Q_Key and GID, and up to 180 bytes of
//! private data: the SIDR REQ's 216 less rdma_cm's 36-byte header). The
//! passive library answers MRA when the request reaches its application,
//! then SIDR_REP once the application accepts (status 0, with its QP
//! number and Q_Key) or rejects (status 2); a listener that cannot take
//! the request (none on the port, other port space or QP type) answers
//! status 1 at once. SIDR_REP carries up to 136 bytes of private data.
//! After the SIDR_REP the active side closes the connection: a datagram
//! "connection" holds nothing open.

pub const MAGIC: [u8; 4] = *b"RSCM";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 12;
/// Bodies are small; anything larger is a stranger on the port.
pub const MAX_BODY: usize = 1024;
/// The longest valid message: a buffer this long holds a complete first
/// message or fails to decode.
pub const MAX_FRAME: usize = HEADER_LEN + MAX_BODY;

pub const REQ_PDATA: usize = 56;
pub const REP_PDATA: usize = 196;
pub const REJ_PDATA: usize = 148;
pub const SIDR_REQ_PDATA: usize = 180;
pub const SIDR_REP_PDATA: usize = 136;

/// SIDR_REP statuses (the IB spec's `ib_cm_sidr_status` values).
pub const SIDR_SUCCESS: u8 = 0;
pub const SIDR_UNSUPPORTED: u8 = 1;
pub const SIDR_REJECT: u8 = 2;

/// IB CM reject reasons we produce (the values are the IB spec's).
pub const REJ_TIMEOUT: u16 = 1;
pub const REJ_INVALID_SERVICE_ID: u16 = 8;
pub const REJ_CONSUMER_DEFINED: u16 = 28;
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

/// A reject reason's meaning, for the log.
pub fn rej_reason_name(reason: u16) -> &'static str {
    match reason {
        REJ_TIMEOUT => "timeout",
        REJ_INVALID_SERVICE_ID => "invalid service ID: nobody listens on that port",
        REJ_CONSUMER_DEFINED => "consumer defined: the peer called rdma_reject",
        REJ_VENDOR_OPTION_NOT_SUPPORTED => "vendor option not supported",
        _ => "other",
    }
}

const KIND_REQ: u8 = 1;
const KIND_MRA: u8 = 2;
const KIND_REP: u8 = 3;
const KIND_RTU: u8 = 4;
const KIND_REJ: u8 = 5;
const KIND_DREQ: u8 = 6;
const KIND_DREP: u8 = 7;
const KIND_SIDR_REQ: u8 = 8;
const KIND_SIDR_REP: u8 = 9;

const CONN_FIXED: usize = 35;
const SIDR_REQ_FIXED: usize = 27;
const SIDR_REP_FIXED: usize = 26;

/// A service ID resolution request: who asks, from which UD QP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidrReq {
    pub qpn: u32,
    pub qkey: u32,
    pub gid: [u8; 16],
    pub port_space: u16,
    pub pdata: Vec<u8>,
}

/// The answer: a status and, on success, the UD QP to send to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidrRep {
    pub status: u8,
    pub qpn: u32,
    pub qkey: u32,
    pub gid: [u8; 16],
    pub pdata: Vec<u8>,
}

/// The connection parameters a REQ or REP carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnInfo {
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub flow_control: u8,
    pub srq: u8,
    /// `IBV_MTU_*` of the sender's port (REQ) or the agreed path (REP).
    pub path_mtu: u8,
    pub traffic_class: u8,
    pub port_space: u16,
    pub pdata: Vec<u8>,
    /// Enhanced connection establishment: vendor id and options (0, 0:
    /// none, and not on the wire).
    pub ece: (u32, u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Req(ConnInfo),
    Mra,
    Rep(ConnInfo),
    Rtu,
    Rej { reason: u16, pdata: Vec<u8> },
    Dreq,
    Drep,
    SidrReq(SidrReq),
    SidrRep(SidrRep),
}

#[derive(Debug, PartialEq, Eq)]
pub enum WireError {
    Magic,
    Version,
    Kind,
    Length,
}

fn header(kind: u8, body_len: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
}

fn put_conn(c: &ConnInfo, out: &mut Vec<u8>) {
    out.extend_from_slice(&c.qpn.to_le_bytes());
    out.extend_from_slice(&c.psn.to_le_bytes());
    out.extend_from_slice(&c.gid);
    out.extend_from_slice(&[
        c.responder_resources,
        c.initiator_depth,
        c.retry_count,
        c.rnr_retry_count,
        c.flow_control,
        c.srq,
        c.path_mtu,
        c.traffic_class,
    ]);
    out.extend_from_slice(&c.port_space.to_le_bytes());
    out.push(c.pdata.len() as u8);
    out.extend_from_slice(&c.pdata);
    if c.ece.0 != 0 {
        out.extend_from_slice(&c.ece.0.to_le_bytes());
        out.extend_from_slice(&c.ece.1.to_le_bytes());
    }
}

fn get_conn(b: &[u8], max_pdata: usize) -> Result<ConnInfo, WireError> {
    if b.len() < CONN_FIXED {
        return Err(WireError::Length);
    }
    let n = b[CONN_FIXED - 1] as usize;
    let end = CONN_FIXED + n;
    if n > max_pdata || (b.len() != end && b.len() != end + ECE_LEN) {
        return Err(WireError::Length);
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let ece = if b.len() > end {
        (u32_at(end), u32_at(end + 4))
    } else {
        (0, 0)
    };
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[8..24]);
    Ok(ConnInfo {
        qpn: u32_at(0),
        psn: u32_at(4),
        gid,
        responder_resources: b[24],
        initiator_depth: b[25],
        retry_count: b[26],
        rnr_retry_count: b[27],
        flow_control: b[28],
        srq: b[29],
        path_mtu: b[30],
        traffic_class: b[31],
        port_space: u16::from_le_bytes([b[32], b[33]]),
        pdata: b[CONN_FIXED..end].to_vec(),
        ece,
    })
}

/// The ECE trailer of a REQ or REP.
const ECE_LEN: usize = 8;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The private data that ends a SIDR body of `fixed` bytes, whose last
/// fixed byte is its length.
fn sidr_pdata(b: &[u8], fixed: usize, max: usize) -> Result<Vec<u8>, WireError> {
    if b.len() < fixed {
        return Err(WireError::Length);
    }
    let n = b[fixed - 1] as usize;
    if n > max || b.len() != fixed + n {
        return Err(WireError::Length);
    }
    Ok(b[fixed..].to_vec())
}

fn get_sidr_req(b: &[u8]) -> Result<SidrReq, WireError> {
    let pdata = sidr_pdata(b, SIDR_REQ_FIXED, SIDR_REQ_PDATA)?;
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[8..24]);
    Ok(SidrReq {
        qpn: u32_at(b, 0),
        qkey: u32_at(b, 4),
        gid,
        port_space: u16::from_le_bytes([b[24], b[25]]),
        pdata,
    })
}

fn get_sidr_rep(b: &[u8]) -> Result<SidrRep, WireError> {
    let pdata = sidr_pdata(b, SIDR_REP_FIXED, SIDR_REP_PDATA)?;
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[9..25]);
    Ok(SidrRep {
        status: b[0],
        qpn: u32_at(b, 1),
        qkey: u32_at(b, 5),
        gid,
        pdata,
    })
}

impl Msg {
    /// Appends the encoded message to `out`. Private data must already be
    /// within its limit (the API checks it and fails with EINVAL).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Msg::Req(c) | Msg::Rep(c) => {
                let kind = if matches!(self, Msg::Req(_)) {
                    KIND_REQ
                } else {
                    KIND_REP
                };
                let ece = if c.ece.0 != 0 { ECE_LEN } else { 0 };
                header(kind, CONN_FIXED + c.pdata.len() + ece, out);
                put_conn(c, out);
            }
            Msg::Rej { reason, pdata } => {
                header(KIND_REJ, 3 + pdata.len(), out);
                out.extend_from_slice(&reason.to_le_bytes());
                out.push(pdata.len() as u8);
                out.extend_from_slice(pdata);
            }
            Msg::SidrReq(r) => {
                header(KIND_SIDR_REQ, SIDR_REQ_FIXED + r.pdata.len(), out);
                out.extend_from_slice(&r.qpn.to_le_bytes());
                out.extend_from_slice(&r.qkey.to_le_bytes());
                out.extend_from_slice(&r.gid);
                out.extend_from_slice(&r.port_space.to_le_bytes());
                out.push(r.pdata.len() as u8);
                out.extend_from_slice(&r.pdata);
            }
            Msg::SidrRep(r) => {
                header(KIND_SIDR_REP, SIDR_REP_FIXED + r.pdata.len(), out);
                out.push(r.status);
                out.extend_from_slice(&r.qpn.to_le_bytes());
                out.extend_from_slice(&r.qkey.to_le_bytes());
                out.extend_from_slice(&r.gid);
                out.push(r.pdata.len() as u8);
                out.extend_from_slice(&r.pdata);
            }
            Msg::Mra => header(KIND_MRA, 0, out),
            Msg::Rtu => header(KIND_RTU, 0, out),
            Msg::Dreq => header(KIND_DREQ, 0, out),
            Msg::Drep => header(KIND_DREP, 0, out),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        self.encode(&mut v);
        v
    }

    /// Decodes the first message of `buf`: `Ok(None)` if it is not complete
    /// yet, else the message and how many bytes it used.
    pub fn decode(buf: &[u8]) -> Result<Option<(Msg, usize)>, WireError> {
        if buf.len() >= 4 && buf[..4] != MAGIC {
            return Err(WireError::Magic);
        }
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        if buf[4] != VERSION {
            return Err(WireError::Version);
        }
        let kind = buf[5];
        let len = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
        if len > MAX_BODY {
            return Err(WireError::Length);
        }
        if buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let body = &buf[HEADER_LEN..HEADER_LEN + len];
        let empty = |m: Msg| {
            if len == 0 {
                Ok(m)
            } else {
                Err(WireError::Length)
            }
        };
        let msg = match kind {
            KIND_REQ => Msg::Req(get_conn(body, REQ_PDATA)?),
            KIND_REP => Msg::Rep(get_conn(body, REP_PDATA)?),
            KIND_REJ => {
                if len < 3 || body[2] as usize > REJ_PDATA || len != 3 + body[2] as usize {
                    return Err(WireError::Length);
                }
                Msg::Rej {
                    reason: u16::from_le_bytes([body[0], body[1]]),
                    pdata: body[3..].to_vec(),
                }
            }
            KIND_MRA => empty(Msg::Mra)?,
            KIND_RTU => empty(Msg::Rtu)?,
            KIND_DREQ => empty(Msg::Dreq)?,
            KIND_DREP => empty(Msg::Drep)?,
            KIND_SIDR_REQ => Msg::SidrReq(get_sidr_req(body)?),
            KIND_SIDR_REP => Msg::SidrRep(get_sidr_rep(body)?),
            _ => return Err(WireError::Kind),
        };
        Ok(Some((msg, HEADER_LEN + len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pdata: usize) -> ConnInfo {
        ConnInfo {
            qpn: 0x1234_5678,
            psn: 0x00ab_cdef,
            gid: [7; 16],
            responder_resources: 4,
            initiator_depth: 2,
            retry_count: 7,
            rnr_retry_count: 6,
            flow_control: 1,
            srq: 1,
            path_mtu: 5,
            traffic_class: 32,
            port_space: 0x106,
            pdata: (0..pdata as u8).collect(),
            ece: (0, 0),
        }
    }

    #[test]
    fn ece_travels_after_the_private_data_only_when_set() {
        let plain = sample(5);
        let mut a = Vec::new();
        Msg::Req(plain.clone()).encode(&mut a);
        let with = ConnInfo {
            ece: (0x15b3, 0x1234_5678),
            ..plain
        };
        let mut b = Vec::new();
        Msg::Rep(with.clone()).encode(&mut b);
        assert_eq!(b.len(), a.len() + 8);
        assert_eq!(
            &b[b.len() - 8..],
            &[0xb3, 0x15, 0, 0, 0x78, 0x56, 0x34, 0x12]
        );
        assert_eq!(Msg::decode(&b), Ok(Some((Msg::Rep(with), b.len()))));
        // A trailer of another length is no REQ.
        let mut c = a.clone();
        c.extend_from_slice(&[1, 2, 3, 4]);
        c[8..12].copy_from_slice(&((a.len() - HEADER_LEN + 4) as u32).to_le_bytes());
        assert_eq!(Msg::decode(&c), Err(WireError::Length));
    }

    fn sidr_req(pdata: usize) -> SidrReq {
        SidrReq {
            qpn: 0x00ab_cdef,
            qkey: 0x0123_4567,
            gid: [9; 16],
            port_space: 0x111,
            pdata: (0..pdata as u8).rev().collect(),
        }
    }

    fn sidr_rep(pdata: usize) -> SidrRep {
        SidrRep {
            status: SIDR_SUCCESS,
            qpn: 0x0012_3456,
            qkey: 0x0123_4567,
            gid: [5; 16],
            pdata: (0..pdata as u8).collect(),
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let msgs = vec![
            Msg::Req(sample(0)),
            Msg::Req(sample(REQ_PDATA)),
            Msg::Rep(sample(REP_PDATA)),
            Msg::Rej {
                reason: 28,
                pdata: vec![9; REJ_PDATA],
            },
            Msg::Rej {
                reason: 8,
                pdata: vec![],
            },
            Msg::Mra,
            Msg::Rtu,
            Msg::Dreq,
            Msg::Drep,
            Msg::SidrReq(sidr_req(0)),
            Msg::SidrReq(sidr_req(SIDR_REQ_PDATA)),
            Msg::SidrRep(sidr_rep(SIDR_REP_PDATA)),
            Msg::SidrRep(SidrRep {
                status: SIDR_REJECT,
                ..sidr_rep(3)
            }),
        ];
        let mut stream = Vec::new();
        for m in &msgs {
            m.encode(&mut stream);
        }
        let mut off = 0;
        for m in &msgs {
            let (got, used) = Msg::decode(&stream[off..]).unwrap().unwrap();
            assert_eq!(&got, m);
            off += used;
        }
        assert_eq!(off, stream.len());
    }

    #[test]
    fn partial_input_waits() {
        let b = Msg::Req(sample(10)).to_bytes();
        for cut in 0..b.len() {
            assert_eq!(Msg::decode(&b[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(Msg::decode(&b).unwrap().is_some());
    }

    /// Mangled and random input never panics, never claims more bytes than
    /// it was given, and `MAX_FRAME` bytes always decide (the CM's read
    /// limit depends on that).
    #[test]
    fn mangled_input_is_safe() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid = [
            Msg::Req(sample(REQ_PDATA)).to_bytes(),
            Msg::Rep(sample(40)).to_bytes(),
            Msg::Rej {
                reason: 28,
                pdata: vec![3; 20],
            }
            .to_bytes(),
            Msg::Drep.to_bytes(),
            Msg::SidrReq(sidr_req(30)).to_bytes(),
            Msg::SidrRep(sidr_rep(SIDR_REP_PDATA)).to_bytes(),
        ];
        for i in 0..50_000 {
            let mut b = if i % 4 == 3 {
                let n = (rnd() % (MAX_FRAME as u64 + 64)) as usize;
                let mut v: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
                if n >= 6 && rnd() % 2 == 0 {
                    v[..4].copy_from_slice(&MAGIC);
                    v[4] = VERSION;
                    v[5] = (rnd() % 11) as u8;
                }
                v
            } else {
                valid[i % valid.len()].clone()
            };
            for _ in 0..rnd() % 4 {
                if !b.is_empty() {
                    let at = (rnd() as usize) % b.len();
                    b[at] = rnd() as u8;
                }
            }
            if rnd() % 3 == 0 {
                b.truncate((rnd() as usize) % (b.len() + 1));
            }
            match Msg::decode(&b) {
                Ok(Some((_, used))) => assert!(used <= b.len() && used >= HEADER_LEN),
                Ok(None) => assert!(b.len() < MAX_FRAME),
                Err(_) => {}
            }
            b.resize(MAX_FRAME, 0);
            assert_ne!(Msg::decode(&b), Ok(None));
        }
    }

    #[test]
    fn strangers_are_refused() {
        assert_eq!(Msg::decode(b"GET / HTTP/1.1\r\n"), Err(WireError::Magic));
        let mut b = Msg::Rtu.to_bytes();
        b[4] = 9;
        assert_eq!(Msg::decode(&b), Err(WireError::Version));
        let mut b = Msg::Rtu.to_bytes();
        b[5] = 99;
        assert_eq!(Msg::decode(&b), Err(WireError::Kind));
        let mut b = Msg::Rtu.to_bytes();
        b[8] = 0xff;
        b[9] = 0xff;
        assert_eq!(Msg::decode(&b), Err(WireError::Length));
        // A REQ claiming more private data than the REQ allows.
        let mut c = sample(0);
        c.pdata = vec![0; REQ_PDATA + 1];
        let b = Msg::Req(c).to_bytes();
        assert_eq!(Msg::decode(&b), Err(WireError::Length));
        // SIDR messages past their private data limits.
        let mut r = sidr_req(0);
        r.pdata = vec![0; SIDR_REQ_PDATA + 1];
        assert_eq!(
            Msg::decode(&Msg::SidrReq(r).to_bytes()),
            Err(WireError::Length)
        );
        let mut r = sidr_rep(0);
        r.pdata = vec![0; SIDR_REP_PDATA + 1];
        assert_eq!(
            Msg::decode(&Msg::SidrRep(r).to_bytes()),
            Err(WireError::Length)
        );
        // Length byte disagreeing with the body length.
        let mut b = Msg::Rej {
            reason: 1,
            pdata: vec![1, 2],
        }
        .to_bytes();
        b[HEADER_LEN + 2] = 5;
        assert_eq!(Msg::decode(&b), Err(WireError::Length));
    }
}
