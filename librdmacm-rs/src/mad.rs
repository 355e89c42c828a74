//! The InfiniBand CM's messages as MADs (management class 0x07, class
//! version 2: connections and service ID resolution), and rdma_cm's header in a REQ's private data: what an
//! rsw device in RoCEv2 mode exchanges on QP1 with the kernel's CM.
//!
//! A MAD is 256 bytes: a 24-byte common header (base version 1, class,
//! class version, method SEND, status, transaction ID, attribute ID) and
//! 232 bytes of message. Fields are big-endian and bit fields are counted
//! from a byte's most significant bit, as the IBA's tables (vol. 1,
//! chapter 12.6) lay them out; offsets below are from the message start.

use std::net::IpAddr;

pub const MAD_LEN: usize = 256;
const HDR_LEN: usize = 24;
const BASE_VERSION: u8 = 1;
pub const CM_CLASS: u8 = 0x07;
const CM_CLASS_VERSION: u8 = 2;
const METHOD_SEND: u8 = 0x03;

/// Attribute IDs of the CM's messages.
pub const ATTR_REQ: u16 = 0x10;
pub const ATTR_MRA: u16 = 0x11;
pub const ATTR_REJ: u16 = 0x12;
pub const ATTR_REP: u16 = 0x13;
pub const ATTR_RTU: u16 = 0x14;
pub const ATTR_DREQ: u16 = 0x15;
pub const ATTR_DREP: u16 = 0x16;
pub const ATTR_SIDR_REQ: u16 = 0x17;
pub const ATTR_SIDR_REP: u16 = 0x18;

/// The GSI's well-known Q_Key.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Private data room of each message on the wire.
pub const REQ_PDATA_WIRE: usize = 92;
pub const REP_PDATA_WIRE: usize = 196;
pub const REJ_PDATA_WIRE: usize = 148;
pub const SIDR_REQ_PDATA_WIRE: usize = 216;
pub const SIDR_REP_PDATA_WIRE: usize = 136;
/// rdma_cm's header at the start of a REQ's private data.
pub const CMA_HDR_LEN: usize = 36;
/// The kernel's response timeout for its CM messages (4.096 us * 2^20,
/// about 4.3 s), which we announce too.
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
const MAX_CM_RETRIES: u8 = 15;

/// Service IDs of rdma_cm's IP port spaces: the port space above the port.
pub fn service_id(ps: u32, port: u16) -> u64 {
    (u64::from(ps & 0xffff) << 16) | u64::from(port)
}

/// The port space and port a service ID names, if it is an rdma_cm one.
pub fn service_of(sid: u64) -> Option<(u32, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some(((sid >> 16) as u32 & 0xffff, sid as u16))
}

/// What a REQ carries (RC or UC, one path: RoCE has no alternate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub ca_guid: u64,
    pub qpn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 0 RC, 1 UC.
    pub transport: u8,
    pub flow_control: bool,
    pub psn: u32,
    pub retry_count: u8,
    /// `IBV_MTU_*`.
    pub path_mtu: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    pub flow_label: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sl: u8,
    pub local_ack_timeout: u8,
    pub pdata: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub qpn: u32,
    pub psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub ca_guid: u64,
    pub pdata: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cm {
    Req(Req),
    /// `mraed`: 0 a REQ, 1 a REP.
    Mra {
        local: u32,
        remote: u32,
        mraed: u8,
        timeout: u8,
    },
    /// `rejected`: 0 a REQ, 1 a REP, 2 other.
    Rej {
        local: u32,
        remote: u32,
        rejected: u8,
        reason: u16,
        pdata: Vec<u8>,
    },
    Rep(Rep),
    Rtu {
        local: u32,
        remote: u32,
    },
    Dreq {
        local: u32,
        remote: u32,
        remote_qpn: u32,
    },
    Drep {
        local: u32,
        remote: u32,
    },
    /// Service ID resolution: which UD QP serves `service_id`.
    SidrReq {
        request_id: u32,
        pkey: u16,
        service_id: u64,
        pdata: Vec<u8>,
    },
    SidrRep {
        request_id: u32,
        status: u8,
        qpn: u32,
        service_id: u64,
        qkey: u32,
        pdata: Vec<u8>,
    },
}

impl Cm {
    fn attr(&self) -> u16 {
        match self {
            Cm::Req(_) => ATTR_REQ,
            Cm::Mra { .. } => ATTR_MRA,
            Cm::Rej { .. } => ATTR_REJ,
            Cm::Rep(_) => ATTR_REP,
            Cm::Rtu { .. } => ATTR_RTU,
            Cm::Dreq { .. } => ATTR_DREQ,
            Cm::Drep { .. } => ATTR_DREP,
            Cm::SidrReq { .. } => ATTR_SIDR_REQ,
            Cm::SidrRep { .. } => ATTR_SIDR_REP,
        }
    }

    /// The comm ID the receiver knows itself by (its "local" one), for
    /// every message but a REQ.
    pub fn remote_comm_id(&self) -> Option<u32> {
        match self {
            Cm::Req(_) | Cm::SidrReq { .. } => None,
            Cm::Rep(r) => Some(r.remote_comm_id),
            Cm::SidrRep { request_id, .. } => Some(*request_id),
            Cm::Mra { remote, .. }
            | Cm::Rej { remote, .. }
            | Cm::Rtu { remote, .. }
            | Cm::Dreq { remote, .. }
            | Cm::Drep { remote, .. } => Some(*remote),
        }
    }

    /// The sender's comm ID.
    pub fn local_comm_id(&self) -> u32 {
        match self {
            Cm::Req(r) => r.local_comm_id,
            Cm::Rep(r) => r.local_comm_id,
            Cm::SidrReq { request_id, .. } | Cm::SidrRep { request_id, .. } => *request_id,
            Cm::Mra { local, .. }
            | Cm::Rej { local, .. }
            | Cm::Rtu { local, .. }
            | Cm::Dreq { local, .. }
            | Cm::Drep { local, .. } => *local,
        }
    }

    /// The whole MAD, with transaction ID `tid`.
    pub fn encode(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut m = [0u8; MAD_LEN];
        m[0] = BASE_VERSION;
        m[1] = CM_CLASS;
        m[2] = CM_CLASS_VERSION;
        m[3] = METHOD_SEND;
        m[8..16].copy_from_slice(&tid.to_be_bytes());
        m[16..18].copy_from_slice(&self.attr().to_be_bytes());
        let b = &mut m[HDR_LEN..];
        let put32 =
            |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        // A 24-bit field in the high bytes of the word at `at`.
        let put24 = |b: &mut [u8], at: usize, v: u32| {
            b[at..at + 3].copy_from_slice(&(v & 0xff_ffff).to_be_bytes()[1..])
        };
        match self {
            Cm::Req(r) => {
                put32(b, 0, r.local_comm_id);
                b[8..16].copy_from_slice(&r.service_id.to_be_bytes());
                b[16..24].copy_from_slice(&r.ca_guid.to_be_bytes());
                put24(b, 32, r.qpn);
                b[35] = r.responder_resources;
                b[39] = r.initiator_depth;
                b[43] = CM_RESPONSE_TIMEOUT << 3 | (r.transport & 3) << 1 | r.flow_control as u8;
                put24(b, 44, r.psn);
                b[47] = CM_RESPONSE_TIMEOUT << 3 | (r.retry_count & 7);
                b[48..50].copy_from_slice(&0xffffu16.to_be_bytes());
                b[50] = (r.path_mtu & 0xf) << 4 | (r.rnr_retry_count & 7);
                b[51] = MAX_CM_RETRIES << 4 | (r.srq as u8) << 3;
                // No LIDs on RoCE: the permissive one, as the kernel sends.
                b[52..56].copy_from_slice(&[0xff; 4]);
                b[56..72].copy_from_slice(&r.local_gid);
                b[72..88].copy_from_slice(&r.remote_gid);
                put32(b, 88, (r.flow_label & 0xf_ffff) << 12);
                // Packet rate: 10 Gb/s; nothing on RoCE enforces it.
                b[91] = 3;
                b[92] = r.traffic_class;
                b[93] = r.hop_limit;
                b[94] = (r.sl & 0xf) << 4 | u8::from(r.hop_limit <= 1) << 3;
                b[95] = (r.local_ack_timeout & 0x1f) << 3;
                let n = r.pdata.len().min(REQ_PDATA_WIRE);
                b[140..140 + n].copy_from_slice(&r.pdata[..n]);
            }
            Cm::Mra {
                local,
                remote,
                mraed,
                timeout,
            } => {
                put32(b, 0, *local);
                put32(b, 4, *remote);
                b[8] = (mraed & 3) << 6;
                b[9] = (timeout & 0x1f) << 3;
            }
            Cm::Rej {
                local,
                remote,
                rejected,
                reason,
                pdata,
            } => {
                put32(b, 0, *local);
                put32(b, 4, *remote);
                b[8] = (rejected & 3) << 6;
                b[10..12].copy_from_slice(&reason.to_be_bytes());
                let n = pdata.len().min(REJ_PDATA_WIRE);
                b[84..84 + n].copy_from_slice(&pdata[..n]);
            }
            Cm::Rep(r) => {
                put32(b, 0, r.local_comm_id);
                put32(b, 4, r.remote_comm_id);
                put24(b, 12, r.qpn);
                put24(b, 20, r.psn);
                b[24] = r.responder_resources;
                b[25] = r.initiator_depth;
                b[26] = (r.target_ack_delay & 0x1f) << 3 | r.flow_control as u8;
                b[27] = (r.rnr_retry_count & 7) << 5 | (r.srq as u8) << 4;
                b[28..36].copy_from_slice(&r.ca_guid.to_be_bytes());
                let n = r.pdata.len().min(REP_PDATA_WIRE);
                b[36..36 + n].copy_from_slice(&r.pdata[..n]);
            }
            Cm::Rtu { local, remote } | Cm::Drep { local, remote } => {
                put32(b, 0, *local);
                put32(b, 4, *remote);
            }
            Cm::Dreq {
                local,
                remote,
                remote_qpn,
            } => {
                put32(b, 0, *local);
                put32(b, 4, *remote);
                put24(b, 8, *remote_qpn);
            }
            Cm::SidrReq {
                request_id,
                pkey,
                service_id,
                pdata,
            } => {
                put32(b, 0, *request_id);
                b[4..6].copy_from_slice(&pkey.to_be_bytes());
                b[8..16].copy_from_slice(&service_id.to_be_bytes());
                let n = pdata.len().min(SIDR_REQ_PDATA_WIRE);
                b[16..16 + n].copy_from_slice(&pdata[..n]);
            }
            Cm::SidrRep {
                request_id,
                status,
                qpn,
                service_id,
                qkey,
                pdata,
            } => {
                put32(b, 0, *request_id);
                b[4] = *status;
                put24(b, 8, *qpn);
                b[12..20].copy_from_slice(&service_id.to_be_bytes());
                put32(b, 20, *qkey);
                let n = pdata.len().min(SIDR_REP_PDATA_WIRE);
                b[96..96 + n].copy_from_slice(&pdata[..n]);
            }
        }
        m
    }

    /// A CM MAD's transaction ID and message; None for anything else (other
    /// classes, versions or methods, attributes we do not speak).
    pub fn decode(m: &[u8]) -> Option<(u64, Cm)> {
        if m.len() < MAD_LEN
            || m[0] != BASE_VERSION
            || m[1] != CM_CLASS
            || m[2] != CM_CLASS_VERSION
            || m[3] != METHOD_SEND
        {
            return None;
        }
        let tid = u64::from_be_bytes(m[8..16].try_into().ok()?);
        let attr = u16::from_be_bytes([m[16], m[17]]);
        let b = &m[HDR_LEN..MAD_LEN];
        let get32 = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let get24 = |at: usize| get32(at) >> 8;
        let get64 = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let gid = |at: usize| -> [u8; 16] { b[at..at + 16].try_into().unwrap_or([0; 16]) };
        let msg = match attr {
            ATTR_REQ => Cm::Req(Req {
                local_comm_id: get32(0),
                service_id: get64(8),
                ca_guid: get64(16),
                qpn: get24(32),
                responder_resources: b[35],
                initiator_depth: b[39],
                transport: (b[43] >> 1) & 3,
                flow_control: b[43] & 1 != 0,
                psn: get24(44),
                retry_count: b[47] & 7,
                path_mtu: b[50] >> 4,
                rnr_retry_count: b[50] & 7,
                srq: b[51] & 0x08 != 0,
                local_gid: gid(56),
                remote_gid: gid(72),
                flow_label: get32(88) >> 12,
                traffic_class: b[92],
                hop_limit: b[93],
                sl: b[94] >> 4,
                local_ack_timeout: b[95] >> 3,
                pdata: b[140..140 + REQ_PDATA_WIRE].to_vec(),
            }),
            ATTR_MRA => Cm::Mra {
                local: get32(0),
                remote: get32(4),
                mraed: b[8] >> 6,
                timeout: b[9] >> 3,
            },
            ATTR_REJ => Cm::Rej {
                local: get32(0),
                remote: get32(4),
                rejected: b[8] >> 6,
                reason: u16::from_be_bytes([b[10], b[11]]),
                pdata: b[84..84 + REJ_PDATA_WIRE].to_vec(),
            },
            ATTR_REP => Cm::Rep(Rep {
                local_comm_id: get32(0),
                remote_comm_id: get32(4),
                qpn: get24(12),
                psn: get24(20),
                responder_resources: b[24],
                initiator_depth: b[25],
                target_ack_delay: b[26] >> 3,
                flow_control: b[26] & 1 != 0,
                rnr_retry_count: b[27] >> 5,
                srq: b[27] & 0x10 != 0,
                ca_guid: get64(28),
                pdata: b[36..36 + REP_PDATA_WIRE].to_vec(),
            }),
            ATTR_RTU => Cm::Rtu {
                local: get32(0),
                remote: get32(4),
            },
            ATTR_DREQ => Cm::Dreq {
                local: get32(0),
                remote: get32(4),
                remote_qpn: get24(8),
            },
            ATTR_DREP => Cm::Drep {
                local: get32(0),
                remote: get32(4),
            },
            ATTR_SIDR_REQ => Cm::SidrReq {
                request_id: get32(0),
                pkey: u16::from_be_bytes([b[4], b[5]]),
                service_id: get64(8),
                pdata: b[16..16 + SIDR_REQ_PDATA_WIRE].to_vec(),
            },
            ATTR_SIDR_REP => Cm::SidrRep {
                request_id: get32(0),
                status: b[4],
                qpn: get24(8),
                service_id: get64(12),
                qkey: get32(20),
                pdata: b[96..96 + SIDR_REP_PDATA_WIRE].to_vec(),
            },
            _ => return None,
        };
        Some((tid, msg))
    }
}

/// rdma_cm's header in a REQ's private data: who connects, to which
/// address (the kernel routes the REQ to its listener by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHdr {
    pub src: IpAddr,
    pub src_port: u16,
    pub dst: IpAddr,
}

fn ip_bytes(ip: &IpAddr) -> [u8; 16] {
    match ip {
        // The IPv4 address in the last four bytes, the rest zero.
        IpAddr::V4(a) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&a.octets());
            b
        }
        IpAddr::V6(a) => a.octets(),
    }
}

impl CmaHdr {
    pub fn encode(&self) -> [u8; CMA_HDR_LEN] {
        let mut b = [0u8; CMA_HDR_LEN];
        b[0] = 0; // rdma_cm's header version
        b[1] = if self.src.is_ipv4() { 4 << 4 } else { 6 << 4 };
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        b[4..20].copy_from_slice(&ip_bytes(&self.src));
        b[20..36].copy_from_slice(&ip_bytes(&self.dst));
        b
    }

    pub fn decode(b: &[u8]) -> Option<CmaHdr> {
        if b.len() < CMA_HDR_LEN || b[0] != 0 {
            return None;
        }
        let ip = |at: usize, v4: bool| -> IpAddr {
            let a: [u8; 16] = b[at..at + 16].try_into().unwrap_or([0; 16]);
            if v4 {
                IpAddr::from([a[12], a[13], a[14], a[15]])
            } else {
                IpAddr::from(a)
            }
        };
        let v4 = match b[1] >> 4 {
            4 => true,
            6 => false,
            _ => return None,
        };
        Some(CmaHdr {
            src: ip(4, v4),
            src_port: u16::from_be_bytes([b[2], b[3]]),
            dst: ip(20, v4),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn v4gid(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    #[test]
    fn service_ids_of_port_spaces() {
        assert_eq!(service_id(0x0106, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(service_of(0x0106_1c06), Some((0x0106, 7174)));
        assert_eq!(service_of(0x1_0000_0000), None);
    }

    #[test]
    fn req_bytes_sit_where_the_iba_puts_them() {
        let r = Req {
            local_comm_id: 0x1122_3344,
            service_id: service_id(0x0106, 0x1c06),
            ca_guid: 0x0102_0304_0506_0708,
            qpn: 0x00ab_cdef,
            responder_resources: 4,
            initiator_depth: 3,
            transport: 0,
            flow_control: true,
            psn: 0x0012_3456,
            retry_count: 7,
            path_mtu: 3,
            rnr_retry_count: 6,
            srq: false,
            local_gid: v4gid([10, 0, 0, 2]),
            remote_gid: v4gid([10, 0, 0, 1]),
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            local_ack_timeout: 17,
            pdata: vec![0xaa, 0xbb],
        };
        let m = Cm::Req(r.clone()).encode(0x0000_0001_dead_beef);
        assert_eq!(&m[..4], &[1, 7, 2, 3]);
        assert_eq!(&m[8..16], &[0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&m[16..18], &[0, 0x10]);
        let b = &m[24..];
        assert_eq!(&b[0..4], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06]);
        assert_eq!(&b[32..36], &[0xab, 0xcd, 0xef, 4]);
        assert_eq!(b[39], 3);
        // Remote CM response timeout 20, RC, flow control.
        assert_eq!(b[43], 20 << 3 | 1);
        assert_eq!(&b[44..48], &[0x12, 0x34, 0x56, 20 << 3 | 7]);
        assert_eq!(&b[48..52], &[0xff, 0xff, 0x36, 0xf0]);
        assert_eq!(&b[52..56], &[0xff; 4]);
        assert_eq!(&b[56..72], &v4gid([10, 0, 0, 2]));
        assert_eq!(&b[72..88], &v4gid([10, 0, 0, 1]));
        assert_eq!(&b[91..96], &[3, 0, 64, 0, 17 << 3]);
        assert_eq!(&b[140..143], &[0xaa, 0xbb, 0]);
        let (tid, back) = Cm::decode(&m).expect("a REQ");
        assert_eq!(tid, 0x0000_0001_dead_beef);
        let mut want = r;
        want.pdata.resize(REQ_PDATA_WIRE, 0);
        assert_eq!(back, Cm::Req(want));
    }

    #[test]
    fn rep_rej_and_the_short_ones_round_trip() {
        let rep = Rep {
            local_comm_id: 5,
            remote_comm_id: 6,
            qpn: 0x11,
            psn: 0xfe_dcba,
            responder_resources: 1,
            initiator_depth: 2,
            target_ack_delay: 15,
            flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            ca_guid: 9,
            pdata: vec![1; REP_PDATA_WIRE],
        };
        let m = Cm::Rep(rep.clone()).encode(1);
        let b = &m[24..];
        assert_eq!(&b[12..16], &[0, 0, 0x11, 0]);
        assert_eq!(&b[20..28], &[0xfe, 0xdc, 0xba, 0, 1, 2, 15 << 3 | 1, 0xf0]);
        assert_eq!(Cm::decode(&m), Some((1, Cm::Rep(rep))));

        let rej = Cm::Rej {
            local: 1,
            remote: 2,
            rejected: 0,
            reason: 8,
            pdata: vec![0; REJ_PDATA_WIRE],
        };
        let m = rej.encode(3);
        assert_eq!(&m[16..18], &[0, 0x12]);
        assert_eq!(&m[24 + 10..24 + 12], &[0, 8]);
        assert_eq!(Cm::decode(&m), Some((3, rej)));

        let dreq = Cm::Dreq {
            local: 7,
            remote: 8,
            remote_qpn: 0x12_3456,
        };
        let m = dreq.encode(4);
        assert_eq!(&m[24..36], &[0, 0, 0, 7, 0, 0, 0, 8, 0x12, 0x34, 0x56, 0]);
        assert_eq!(Cm::decode(&m), Some((4, dreq)));
        for c in [
            Cm::Rtu {
                local: 1,
                remote: 2,
            },
            Cm::Drep {
                local: 3,
                remote: 4,
            },
            Cm::Mra {
                local: 5,
                remote: 6,
                mraed: 1,
                timeout: 20,
            },
        ] {
            assert_eq!(Cm::decode(&c.encode(9)), Some((9, c)));
        }
    }

    #[test]
    fn sidr_bytes() {
        let req = Cm::SidrReq {
            request_id: 0x0102_0304,
            pkey: 0xffff,
            service_id: service_id(0x0111, 7174),
            pdata: vec![7; SIDR_REQ_PDATA_WIRE],
        };
        let m = req.encode(5);
        assert_eq!(&m[16..18], &[0, 0x17]);
        assert_eq!(
            &m[24..40],
            &[1, 2, 3, 4, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]
        );
        assert_eq!(m[24 + 16], 7);
        assert_eq!(Cm::decode(&m), Some((5, req)));
        let rep = Cm::SidrRep {
            request_id: 0x0102_0304,
            status: 0,
            qpn: 0xab_cdef,
            service_id: service_id(0x0111, 7174),
            qkey: 0x0123_4567,
            pdata: vec![9; SIDR_REP_PDATA_WIRE],
        };
        let m = rep.encode(6);
        assert_eq!(&m[16..18], &[0, 0x18]);
        let b = &m[24..];
        assert_eq!(&b[..12], &[1, 2, 3, 4, 0, 0, 0, 0, 0xab, 0xcd, 0xef, 0]);
        assert_eq!(
            &b[12..24],
            &[0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x01, 0x23, 0x45, 0x67]
        );
        assert_eq!((b[95], b[96], b[231]), (0, 9, 9));
        assert_eq!(Cm::decode(&m), Some((6, rep)));
    }

    #[test]
    fn foreign_mads_are_not_ours() {
        let mut m = Cm::Rtu {
            local: 1,
            remote: 2,
        }
        .encode(0);
        m[1] = 0x03; // subnet administration
        assert_eq!(Cm::decode(&m), None);
        let mut m = Cm::Rtu {
            local: 1,
            remote: 2,
        }
        .encode(0);
        m[17] = 0x19; // LAP
        assert_eq!(Cm::decode(&m), None);
        assert_eq!(Cm::decode(&[1, 7, 2, 3]), None);
    }

    #[test]
    fn cma_header_bytes() {
        let h = CmaHdr {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            src_port: 0xabcd,
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        };
        let b = h.encode();
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2] = 0xab;
        want[3] = 0xcd;
        want[16..20].copy_from_slice(&[10, 0, 0, 2]);
        want[32..36].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(b, want);
        assert_eq!(CmaHdr::decode(&b), Some(h));
        let mut bad = b;
        bad[1] = 0x50;
        assert_eq!(CmaHdr::decode(&bad), None);
    }

    /// A REQ the kernel's rdma_cm sent from rxe (rping -c to an rsw
    /// server, ctests/vm/roce/cm_rxe.sh's FIXTURE line): the MAD header,
    /// then the message up to its last non-zero byte.
    const RXE_REQ: &str = "010702030000000000000004c84551730010000000000000\
        735145c80000000000000000010649d6bc65e3fffe8ee0040000000000000000\
        0000120100000001000000a0771e95a7ffff37f0ffffffff0000000000000000\
        0000ffff0a00080100000000000000000000ffff0a00080288b8600000400098\
        0000000000000000000000000000000000000000000000000000000000000000\
        0000000000000000000000000040c8500000000000000000000000000a000801\
        0000000000000000000000000a000802";
    /// The kernel's REP to our REQ (rping -c over rsw to rxe).
    const RXE_REP: &str = "01070203000000004224c1c63cef3b960013000000000000\
        705145c82d1dc8ed00000000000011000000000029cf4f00010178e0bc65e3ff\
        fe8ee004";

    fn mad_of(hex: &str) -> [u8; MAD_LEN] {
        let hex: String = hex.split_whitespace().collect();
        let mut m = [0u8; MAD_LEN];
        for (i, b) in m.iter_mut().enumerate().take(hex.len() / 2) {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
        }
        m
    }

    #[test]
    fn the_kernels_req_decodes() {
        let (tid, m) = Cm::decode(&mad_of(RXE_REQ)).expect("a REQ");
        assert_eq!(tid, 0x0000_0004_c845_5173);
        let Cm::Req(r) = m else {
            panic!("not a REQ: {m:?}")
        };
        assert_eq!(r.local_comm_id, 0x7351_45c8);
        assert_eq!(service_of(r.service_id), Some((0x0106, 18902)));
        assert_eq!(r.ca_guid, 0xbc65_e3ff_fe8e_e004);
        assert_eq!((r.qpn, r.psn), (0x12, 0x77_1e95));
        assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
        assert_eq!((r.transport, r.flow_control, r.srq), (0, false, false));
        assert_eq!((r.retry_count, r.rnr_retry_count, r.path_mtu), (7, 7, 3));
        assert_eq!(r.local_gid, v4gid([10, 0, 8, 1]));
        assert_eq!(r.remote_gid, v4gid([10, 0, 8, 2]));
        assert_eq!(
            (r.flow_label, r.traffic_class, r.hop_limit),
            (0x88b86, 0, 64)
        );
        assert_eq!((r.sl, r.local_ack_timeout), (0, 19));
        let h = CmaHdr::decode(&r.pdata).expect("rdma_cm's header");
        assert_eq!(h.src, IpAddr::V4(Ipv4Addr::new(10, 0, 8, 1)));
        assert_eq!(h.dst, IpAddr::V4(Ipv4Addr::new(10, 0, 8, 2)));
        assert_eq!(h.src_port, 0xc850);
        // Our encoding of what we decoded is the kernel's bytes, but for
        // the packet rate (ours 10 Gb/s, the kernel's none).
        let mut ours = Cm::Req(r).encode(tid);
        ours[24 + 91] = 0;
        assert_eq!(ours, mad_of(RXE_REQ));
    }

    #[test]
    fn the_kernels_rep_decodes() {
        let (_, m) = Cm::decode(&mad_of(RXE_REP)).expect("a REP");
        let Cm::Rep(r) = m else {
            panic!("not a REP: {m:?}")
        };
        assert_eq!(
            (r.local_comm_id, r.remote_comm_id),
            (0x7051_45c8, 0x2d1d_c8ed)
        );
        assert_eq!((r.qpn, r.psn), (0x11, 0x29_cf4f));
        assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
        assert_eq!(
            (r.target_ack_delay, r.rnr_retry_count, r.srq),
            (15, 7, false)
        );
        assert_eq!(r.ca_guid, 0xbc65_e3ff_fe8e_e004);
        assert_eq!(Cm::Rep(r).encode(0x4224_c1c6_3cef_3b96), mad_of(RXE_REP));
    }
}
