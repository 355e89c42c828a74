//! The proof that the codec speaks rxe's wire format: packets rxe sent in
//! the VM test bed (`providers/rsw/tests/fixtures/roce_rxe.txt`, made by
//! `ctests/vm/roce/capture.sh`) parse to the fields the programs that sent
//! them asked for, carry the ICRC we compute, and re-encode to the same
//! bytes.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::headers::{NakCode, Syndrome};
use super::icrc;
use super::opcode::{Opcode, Transport};
use super::packet::{self, Packet};

const FIXTURES: &str = include_str!("../../tests/fixtures/roce_rxe.txt");

fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    FIXTURES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, hex) = l.split_once(' ').expect("name hex");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            (name, bytes)
        })
        .collect()
}

fn fixture(name: &str) -> Vec<u8> {
    fixtures()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
        .1
}

/// The UDP payload of an IP packet.
fn ib_of(ip: &[u8]) -> &[u8] {
    let hl = if ip[0] >> 4 == 4 { 20 } else { 40 };
    &ip[hl + 8..]
}

/// What a payload holds.
#[derive(Clone, Copy, Debug)]
enum Data {
    /// 0, 1, 2, ... (ops.py's buffer; every packet of a message starts
    /// at a multiple of 256).
    Counting,
    /// One byte repeated (rdma-core's pingpongs fill with 0x7b).
    Fill(u8),
    /// Whatever the program had in its buffer (perftest).
    Any,
}

/// Name, opcode, PSN where the program chose it, AckReq, payload length,
/// payload.
type Want = (&'static str, Opcode, Option<u32>, bool, usize, Data);

#[rustfmt::skip]
const WANT: &[Want] = &[
    ("rc_send_first", Opcode::RcSendFirst, None, false, 256, Data::Fill(0x7b)),
    ("rc_send_middle", Opcode::RcSendMiddle, None, false, 256, Data::Fill(0x7b)),
    ("rc_send_last", Opcode::RcSendLast, None, true, 88, Data::Fill(0x7b)),
    ("rc_ack", Opcode::RcAck, None, false, 0, Data::Any),
    ("rc_send_last_imm", Opcode::RcSendLastImm, Some(0x103), true, 88, Data::Counting),
    ("rc_send_only", Opcode::RcSendOnly, Some(0x300), true, 5, Data::Fill(0)),
    ("rc_rnr_nak", Opcode::RcAck, Some(0x300), false, 0, Data::Any),
    ("rc_send_only_imm", Opcode::RcSendOnlyImm, Some(0x100), true, 37, Data::Counting),
    ("rc_ack_msn1", Opcode::RcAck, Some(0x100), false, 0, Data::Any),
    ("rc_write_first", Opcode::RcWriteFirst, Some(0x105), false, 256, Data::Counting),
    ("rc_write_middle", Opcode::RcWriteMiddle, Some(0x106), false, 256, Data::Counting),
    ("rc_write_last_imm", Opcode::RcWriteLastImm, Some(0x107), true, 88, Data::Counting),
    ("rc_write_last", Opcode::RcWriteLast, None, true, 88, Data::Any),
    ("rc_write_only", Opcode::RcWriteOnly, Some(0x109), true, 8, Data::Counting),
    ("rc_write_only_imm", Opcode::RcWriteOnlyImm, Some(0x104), true, 37, Data::Counting),
    ("rc_send_only_inv", Opcode::RcSendOnlyInv, Some(0x108), true, 37, Data::Counting),
    ("rc_read_request", Opcode::RcReadRequest, None, true, 0, Data::Any),
    ("rc_read_response_first", Opcode::RcReadResponseFirst, None, false, 256, Data::Any),
    ("rc_read_response_middle", Opcode::RcReadResponseMiddle, None, false, 256, Data::Any),
    ("rc_read_response_last", Opcode::RcReadResponseLast, None, false, 88, Data::Any),
    ("rc_read_request_small", Opcode::RcReadRequest, None, true, 0, Data::Any),
    ("rc_read_response_only", Opcode::RcReadResponseOnly, None, false, 37, Data::Any),
    ("rc_compare_swap", Opcode::RcCompareSwap, None, true, 0, Data::Any),
    ("rc_atomic_ack", Opcode::RcAtomicAck, None, false, 0, Data::Any),
    ("rc_fetch_add", Opcode::RcFetchAdd, None, true, 0, Data::Any),
    ("uc_send_first", Opcode::UcSendFirst, None, false, 256, Data::Fill(0x7b)),
    ("uc_send_middle", Opcode::UcSendMiddle, None, false, 256, Data::Fill(0x7b)),
    ("uc_send_last", Opcode::UcSendLast, None, false, 88, Data::Fill(0x7b)),
    ("uc_send_only_imm", Opcode::UcSendOnlyImm, Some(0x704), false, 37, Data::Counting),
    ("uc_write_first", Opcode::UcWriteFirst, Some(0x700), false, 256, Data::Counting),
    ("uc_write_middle", Opcode::UcWriteMiddle, Some(0x701), false, 256, Data::Counting),
    ("uc_write_last_imm", Opcode::UcWriteLastImm, Some(0x702), false, 88, Data::Counting),
    ("uc_write_only", Opcode::UcWriteOnly, Some(0x703), false, 8, Data::Counting),
    ("ud_send_only", Opcode::UdSendOnly, None, false, 64, Data::Fill(0x7b)),
    ("ud_send_only_imm", Opcode::UdSendOnlyImm, Some(0x500), false, 21, Data::Fill(0)),
    ("v6_rc_send_only", Opcode::RcSendOnly, None, true, 37, Data::Fill(0x7b)),
    ("v6_rc_ack", Opcode::RcAck, None, false, 0, Data::Any),
    ("v6_ud_send_only", Opcode::UdSendOnly, None, false, 64, Data::Fill(0x7b)),
    ("v6_ud_send_only_imm", Opcode::UdSendOnlyImm, Some(0x500), false, 21, Data::Fill(0)),
    ("rc_write_bad_rkey", Opcode::RcWriteOnly, Some(0x900), true, 8, Data::Fill(0)),
    ("rc_nak_remote_access", Opcode::RcAck, Some(0x900), false, 0, Data::Any),
];

#[test]
fn every_fixture_is_expected_and_every_captured_opcode_is_covered() {
    let all = fixtures();
    assert_eq!(all.len(), WANT.len());
    for ((name, _), want) in all.iter().zip(WANT) {
        assert_eq!(*name, want.0);
    }
    let mut ops: Vec<Opcode> = WANT.iter().map(|w| w.1).collect();
    ops.sort_by_key(|&op| op as u8);
    ops.dedup();
    // Every opcode but these, which no capture asked rxe for (the
    // unit tests of `packet` cover them).
    let missing: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|op| !ops.contains(op))
        .collect();
    assert_eq!(
        missing,
        [
            Opcode::RcSendLastInv,
            Opcode::UcSendLastImm,
            Opcode::UcSendOnly,
            Opcode::UcWriteLast,
            Opcode::UcWriteOnlyImm
        ]
    );
}

#[test]
fn rxe_packets_parse_to_what_their_senders_asked() {
    for (name, ip) in fixtures() {
        let &(_, op, psn, ack_req, len, data) = WANT.iter().find(|w| w.0 == name).unwrap();
        let p = Packet::parse(ib_of(&ip)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let bth = p.hdr.bth;
        assert_eq!(bth.opcode, op, "{name}");
        if let Some(psn) = psn {
            assert_eq!(bth.psn, psn, "{name}");
        }
        assert_eq!(bth.ack_req, ack_req, "{name}");
        assert_eq!(bth.pkey, 0xffff, "{name}: the default partition");
        assert_eq!(
            (bth.tver, bth.migreq, bth.fecn, bth.becn),
            (0, false, false, false),
            "{name}"
        );
        assert_eq!(bth.pad, packet::pad_for(len), "{name}");
        // rxe sets SE only when asked; nobody asked here.
        assert!(!bth.se, "{name}");
        assert_eq!(p.payload.len(), len, "{name}");
        match data {
            Data::Counting => assert!(
                p.payload.iter().enumerate().all(|(i, &b)| b == i as u8),
                "{name}"
            ),
            Data::Fill(x) => assert!(p.payload.iter().all(|&b| b == x), "{name}"),
            Data::Any => {}
        }
        if op.transport() == Transport::Ud {
            let deth = p.hdr.deth.unwrap();
            assert_eq!(deth.qkey, 0x1111_1111, "{name}: both programs' Q_Key");
            // Both sides' QPs got the same number on their devices.
            assert_eq!(deth.src_qp, bth.dest_qp, "{name}");
        }
    }
}

#[test]
fn rxe_extension_headers_hold_the_programs_values() {
    let get = |name: &str| {
        let ip = fixture(name);
        let p = Packet::parse(ib_of(&ip)).unwrap();
        p.hdr
    };
    // ops.py's immediates are Python integers stored in the little-endian
    // __be32 field, so the wire holds their bytes reversed.
    let imm = |name: &str| get(name).imm.unwrap().imm;
    assert_eq!(imm("rc_send_only_imm"), 0x1234_5678u32.swap_bytes());
    assert_eq!(imm("rc_send_last_imm"), 0x0a0b_0c0du32.swap_bytes());
    assert_eq!(imm("rc_write_only_imm"), 0x0102_0304u32.swap_bytes());
    assert_eq!(imm("rc_write_last_imm"), 0x0506_0708u32.swap_bytes());
    assert_eq!(imm("uc_write_last_imm"), 0x1122_3344u32.swap_bytes());
    assert_eq!(imm("uc_send_only_imm"), 0x5566_7788u32.swap_bytes());
    assert_eq!(imm("ud_send_only_imm"), 0x7f00_0001u32.swap_bytes());
    assert_eq!(imm("v6_ud_send_only_imm"), 0x7f00_0001u32.swap_bytes());

    // RDMA WRITEs: the whole length in the first packet's RETH; ops.py
    // writes at buf + 64 with immediate and at buf without.
    let w_imm = get("rc_write_only_imm").reth.unwrap();
    let w_first = get("rc_write_first").reth.unwrap();
    let w_only = get("rc_write_only").reth.unwrap();
    assert_eq!(
        (w_imm.dma_len, w_first.dma_len, w_only.dma_len),
        (37, 600, 8)
    );
    assert_eq!(w_imm.va, w_first.va);
    assert_eq!(w_only.va + 64, w_first.va);
    assert_eq!(
        w_only.rkey ^ 0x5a00,
        w_first.rkey,
        "the WRITE rxe left unanswered"
    );
    assert_eq!(w_imm.rkey, w_first.rkey);
    // SEND with invalidate names the same MR's rkey.
    assert_eq!(get("rc_send_only_inv").ieth.unwrap().rkey, w_first.rkey);
    let uc_first = get("uc_write_first").reth.unwrap();
    let uc_only = get("uc_write_only").reth.unwrap();
    assert_eq!((uc_first.dma_len, uc_only.dma_len), (600, 8));
    assert_eq!(uc_only.va + 128, uc_first.va);
    assert_eq!(uc_only.rkey, uc_first.rkey);

    // READ: the request asks for the whole message, then responses.
    assert_eq!(get("rc_read_request").reth.unwrap().dma_len, 600);
    assert_eq!(get("rc_read_request_small").reth.unwrap().dma_len, 37);
    let req = get("rc_read_request").bth;
    assert_eq!(get("rc_read_response_first").bth.psn, req.psn);
    assert_eq!(get("rc_read_response_middle").bth.psn, req.psn + 1);
    assert_eq!(get("rc_read_response_last").bth.psn, req.psn + 2);
    assert_eq!(
        get("rc_read_response_only").bth.psn,
        get("rc_read_request_small").bth.psn
    );
    assert!(get("rc_read_response_middle").aeth.is_none());

    // ACKs: credits 31 (none counted, rxe's only value), MSN counts
    // messages; the RNR NAK carries ops.py's min_rnr_timer.
    let ack = |name: &str| get(name).aeth.unwrap();
    assert_eq!(ack("rc_ack_msn1").syndrome, Syndrome::Ack { credits: 31 });
    assert_eq!(ack("rc_ack_msn1").msn, 1);
    assert_eq!(ack("rc_ack").syndrome, Syndrome::Ack { credits: 31 });
    assert_eq!(ack("rc_ack").msn, 1);
    assert_eq!(get("rc_ack").bth.psn, get("rc_send_last").bth.psn);
    assert_eq!(ack("rc_rnr_nak").syndrome, Syndrome::RnrNak { timer: 14 });
    assert_eq!(ack("rc_rnr_nak").msn, 0);
    // A WRITE with a bad rkey: NAK, remote access error, no message done.
    assert_eq!(get("rc_write_bad_rkey").reth.unwrap().dma_len, 8);
    let nak = ack("rc_nak_remote_access");
    assert_eq!(nak.syndrome, Syndrome::Nak(NakCode::RemoteAccessError));
    assert_eq!(nak.msn, 0);
    assert_eq!(
        ack("rc_read_response_first").syndrome,
        Syndrome::Ack { credits: 31 }
    );
    assert_eq!(get("v6_rc_ack").bth.psn, get("v6_rc_send_only").bth.psn);

    // Atomics: perftest adds 1, and compares and swaps 0.
    let fa = get("rc_fetch_add").atomic.unwrap();
    assert_eq!((fa.swap_add, fa.compare), (1, 0));
    assert_eq!(fa.va % 8, 0);
    let cs = get("rc_compare_swap").atomic.unwrap();
    assert_eq!((cs.swap_add, cs.compare), (0, 0));
    let aack = get("rc_atomic_ack");
    assert_eq!(aack.bth.psn, get("rc_compare_swap").bth.psn);
    assert!(aack.atomic_ack.is_some());
}

#[test]
fn our_icrc_is_rxes() {
    for (name, ip) in fixtures() {
        let c = icrc::icrc_of_ip_packet(&ip).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(c.computed, c.carried, "{name}");
        assert_eq!(c.dst_port, super::PORT, "{name}");
        // From the facts alone, the way a sender computes it.
        let ib = ib_of(&ip);
        let from_facts = if ip[0] >> 4 == 4 {
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            let id = u16::from_be_bytes([ip[4], ip[5]]);
            assert_ne!(id, 0, "{name}: rxe sends hashed IDs");
            assert_eq!(&ip[6..8], &[0x40, 0], "{name}: DF");
            icrc::icrc_ipv4_with_id(src, dst, id, c.src_port, c.dst_port, ib).unwrap()
        } else {
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
            icrc::icrc_ipv6(src, dst, c.src_port, c.dst_port, ib).unwrap()
        };
        assert_eq!(from_facts, c.carried, "{name}");
        // Any covered bit flipped breaks it.
        let mut bad = ip.clone();
        let last = bad.len() - 5;
        bad[last] ^= 0x10;
        assert!(!icrc::icrc_of_ip_packet(&bad).unwrap().ok(), "{name}");
    }
}

#[test]
fn rxe_packets_re_encode_to_their_bytes() {
    for (name, ip) in fixtures() {
        let ib = ib_of(&ip);
        let p = Packet::parse(ib).unwrap();
        let mut buf = [0u8; 512];
        let n = packet::encode(&p.hdr, p.payload, &mut buf).unwrap();
        icrc::write(
            &mut buf[..n],
            icrc::icrc_of_ip_packet(&ip).unwrap().computed,
        );
        assert_eq!(&buf[..n], ib, "{name}");
    }
}

#[test]
fn the_ipv4_identification_is_found_from_the_icrc() {
    let mut n = 0;
    for (name, ip) in fixtures() {
        if ip[0] >> 4 != 4 {
            continue;
        }
        let c = icrc::icrc_of_ip_packet(&ip).unwrap();
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let ib = ib_of(&ip);
        let id = u16::from_be_bytes([ip[4], ip[5]]);
        let got = icrc::solve_ipv4_id(src, dst, c.src_port, c.dst_port, ib);
        assert_eq!(got, Some(id), "{name}");
        // A flipped bit anywhere covered: no identification (or, one in
        // 2^16, another one; never the real one).
        for at in [0, 13, ib.len() - 5] {
            let mut bad = ib.to_vec();
            bad[at] ^= 0x04;
            let got = icrc::solve_ipv4_id(src, dst, c.src_port, c.dst_port, &bad);
            assert_ne!(got, Some(id), "{name} byte {at}");
            assert_eq!(got, None, "{name} byte {at}");
        }
        // Another source port or address, too.
        let got = icrc::solve_ipv4_id(src, dst, c.src_port ^ 1, c.dst_port, ib);
        assert_eq!(got, None, "{name}");
        n += 1;
    }
    assert!(n >= 30, "{n} IPv4 packets");
}

#[test]
fn rxe_ud_sends_decode_and_our_encoder_makes_the_same_bytes() {
    use super::ud::{self, Ips};
    for name in [
        "ud_send_only",
        "ud_send_only_imm",
        "v6_ud_send_only",
        "v6_ud_send_only_imm",
    ] {
        let ip = fixture(name);
        let ib = ib_of(&ip);
        let c = icrc::icrc_of_ip_packet(&ip).unwrap();
        let ips = if ip[0] >> 4 == 4 {
            Ips::V4 {
                src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
                dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
                id: u16::from_be_bytes([ip[4], ip[5]]),
            }
        } else {
            Ips::V6 {
                src: Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap()),
                dst: Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap()),
            }
        };
        let (s, payload) = ud::parse(ib, Some(&ips), c.src_port).expect(name);
        assert_eq!(s.pkey, 0xffff, "{name}");
        assert_eq!(s.qkey, 0x1111_1111, "{name}: the pingpongs' Q_Key");
        assert_eq!(s.imm.is_some(), name.ends_with("_imm"), "{name}");
        let mut buf = [0u8; 256];
        let n = ud::encode(&s, payload, &ips, c.src_port, &mut buf).unwrap();
        assert_eq!(&buf[..n], ib, "{name}");
        // The GRH area is the packet's IP header as sent (TTL and all).
        let grh = ud::grh_area(
            &ips,
            ip[1],
            if ip[0] >> 4 == 4 { ip[8] } else { ip[7] },
            ib.len(),
        );
        if ip[0] >> 4 == 4 {
            assert_eq!(&grh[..20], &[0; 20], "{name}");
            assert_eq!(&grh[20..], &ip[..20], "{name}");
        } else {
            // Flow label aside (rxe sets one; a socket does not tell it).
            let mut hdr = ip[..40].to_vec();
            hdr[1] &= 0xf0;
            hdr[2] = 0;
            hdr[3] = 0;
            let tclass = (ip[0] << 4) | (ip[1] >> 4);
            let grh = ud::grh_area(&ips, tclass, ip[7], ib.len());
            assert_eq!(&grh[..], &hdr[..], "{name}");
        }
    }
}
