//! A QP facing a hand-written peer on a raw TCP socket: what the provider
//! does with strangers, garbage and nonsensical responses.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use rsw::wire::{Header, Hello, Op, HDR_LEN};
use verbs_abi::*;

fn connect_to(qpn: u32) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", qpn as u16)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// A QP in RTR whose peer is "QPN" `peer` (a port we control or not).
fn responder_qp(c: &Ctx, peer: u32) -> (*mut ibv_qp, *mut ibv_cq, Buf) {
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer, &o);
    let buf = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 1, &mut [buf.sge(0, 64)]), 0);
    (q, cq, buf)
}

#[test]
fn strangers_are_ignored_and_the_real_peer_gets_through() {
    let c = Ctx::open();
    let (q, cq, buf) = responder_qp(&c, 4242);
    let me = qpn(q);
    // Wrong destination QPN, wrong source QPN, and plain garbage: all
    // dropped without touching the QP.
    for h in [hello(4242, me + 1), hello(4243, me), [0x55u8; HDR_LEN]] {
        let mut s = connect_to(me);
        s.write_all(&h).unwrap();
        let mut send = Header::new(Op::Send, 0);
        send.length = 4;
        let mut hb = [0u8; HDR_LEN];
        send.encode(&mut hb);
        let _ = s.write_all(&hb);
        let _ = s.write_all(b"evil");
        let mut x = [0u8; 1];
        // The provider closes the connection.
        assert!(matches!(s.read(&mut x), Ok(0) | Err(_)));
    }
    assert_eq!(qp_state(q), IBV_QPS_RTR);
    assert_no_wc(cq, Duration::from_millis(20));

    // The expected peer is accepted and its SEND lands.
    let mut s = connect_to(me);
    s.write_all(&hello(4242, me)).unwrap();
    let mut send = Header::new(Op::SendImm, 0);
    send.length = 5;
    send.flags = rsw::wire::FLAG_IMM;
    send.imm = 0xabcd;
    let mut hb = [0u8; HDR_LEN];
    send.encode(&mut hb);
    s.write_all(&hb).unwrap();
    s.write_all(b"hello").unwrap();
    let r = wait_wc(cq);
    assert_eq!(
        (r.status, r.wr_id, r.byte_len, r.src_qp),
        (IBV_WC_SUCCESS, 1, 5, 4242)
    );
    assert_eq!(r.imm_data(), 0xabcd);
    assert_eq!(&buf.snapshot()[..5], b"hello");
    // And it is acknowledged.
    let a = read_response(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 0));
    // Receiving in RTR established the connection.
    let mut ev = get_async(c.ctx).expect("COMM_EST");
    assert_eq!(ev.event_type, IBV_EVENT_COMM_EST);
    ack_async(&mut ev);
}

#[test]
fn garbage_after_hello_is_an_invalid_request() {
    let c = Ctx::open();
    let (q, cq, _buf) = responder_qp(&c, 4244);
    let mut s = connect_to(qpn(q));
    s.write_all(&hello(4244, qpn(q))).unwrap();
    // A response opcode where a request belongs.
    let mut hb = [0u8; HDR_LEN];
    Header::new(Op::Ack, 0).encode(&mut hb);
    s.write_all(&hb).unwrap();
    let mut ev = get_async(c.ctx).expect("QP_REQ_ERR");
    assert_eq!(ev.event_type, IBV_EVENT_QP_REQ_ERR);
    // SAFETY: QP events carry the QP.
    assert_eq!(unsafe { ev.element.qp }, q);
    ack_async(&mut ev);
    assert_eq!(qp_state(q), IBV_QPS_ERR);
    let w = wait_wc(cq);
    assert_eq!((w.status, w.wr_id), (IBV_WC_WR_FLUSH_ERR, 1));
}

#[test]
fn nonsensical_response_is_bad_resp_err() {
    // A fake responder: we listen, the QP connects to us as its peer.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap().port() as u32;
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, fake, &o);
    to_rts(q, &o);
    let (mut s, mut hb) = FakeWire::accept(l.accept().unwrap().0);
    let h = Hello::decode(&hb).unwrap();
    assert_eq!((h.src_qpn, h.dst_qpn, h.src_gid), (qpn(q), fake, lo_gid()));

    let buf = Buf::new(pd, 16, IBV_ACCESS_LOCAL_WRITE);
    let mut sg = [buf.sge(0, 16)];
    let mut w1 = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    let mut w2 = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    w1.next = &mut w2;
    assert_eq!(post_send(q, &mut w1), 0);
    let mut req = [0u8; HDR_LEN];
    s.read_exact(&mut req).unwrap();
    let r = Header::decode(&req).unwrap();
    assert_eq!((r.op, r.msn, r.length), (Op::Send, 0, 16));
    assert_eq!(r.rnr_retry(), 7);
    let mut payload = [0u8; 16];
    s.read_exact(&mut payload).unwrap();
    // Answer the first SEND with READ data it never asked for.
    let mut resp = Header::new(Op::ReadResp, 0);
    resp.length = 16;
    resp.encode(&mut hb);
    s.write_all(&hb).unwrap();
    let e = wait_wc(cq);
    assert_eq!((e.status, e.wr_id), (IBV_WC_BAD_RESP_ERR, 1));
    let f = wait_wc(cq);
    assert_eq!((f.status, f.wr_id), (IBV_WC_WR_FLUSH_ERR, 2));
    assert_eq!(qp_state(q), IBV_QPS_ERR);
}

#[test]
fn held_connection_is_used_after_rtr() {
    // The peer connects and sends before this QP reaches RTR.
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    let buf = Buf::new(pd, 16, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 3, &mut [buf.sge(0, 16)]), 0);
    let mut s = connect_to(qpn(q));
    s.write_all(&hello(4246, qpn(q))).unwrap();
    let mut hb = [0u8; HDR_LEN];
    let mut send = Header::new(Op::Send, 0);
    send.length = 3;
    send.encode(&mut hb);
    s.write_all(&hb).unwrap();
    s.write_all(b"abc").unwrap();
    // Nothing is delivered in INIT.
    assert_no_wc(cq, Duration::from_millis(30));
    to_rtr(q, 4246, &o);
    let r = wait_wc(cq);
    assert_eq!((r.status, r.wr_id, r.byte_len), (IBV_WC_SUCCESS, 3, 3));
    assert_eq!(&buf.snapshot()[..3], b"abc");
}

#[test]
fn an_rnr_notice_overtaken_by_a_riding_ack_is_ignored() {
    // The peer's responder waited for a receive for our SEND (an RNR wait
    // notice on our connection), then took it and let the ACK ride on its
    // own SEND, on the other connection. If we read that SEND first, the
    // notice arrives for a message already complete: it must not fail
    // the QP (it did, 1 run in 10 of pyverbs' rdma_cm async traffic test).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap().port() as u32;
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, fake, &o);
    to_rts(q, &o);
    let (mut out, hb) = FakeWire::accept(l.accept().unwrap().0);
    let h = Hello::decode(&hb).unwrap();
    assert!(h.features & rsw::wire::FEATURE_ACK_ON_REQUEST != 0);
    // Our requester toward the QP: a hello that takes ACKs on requests.
    let mut inc = connect_to(qpn(q));
    let mut hello_b = [0u8; HDR_LEN];
    Hello {
        src_gid: lo_gid(),
        src_qpn: fake,
        dst_qpn: qpn(q),
        psn: 0,
        features: rsw::wire::FEATURE_ACK_ON_REQUEST,
    }
    .encode(&mut hello_b);
    inc.write_all(&hello_b).unwrap();

    let buf = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 7, &mut [buf.sge(32, 32)]), 0);
    let mut sg = [buf.sge(0, 16)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);
    let mut req = [0u8; HDR_LEN];
    out.read_exact(&mut req).unwrap();
    let r = Header::decode(&req).unwrap();
    assert_eq!((r.op, r.msn, r.length), (Op::Send, 0, 16));
    let mut payload = [0u8; 16];
    out.read_exact(&mut payload).unwrap();

    // Our SEND to the QP, carrying the ACK for its message 0.
    let mut s = Header::new(Op::Send, 0);
    s.length = 4;
    s.flags |= rsw::wire::FLAG_ACK;
    s.compare_add = 0;
    s.encode(&mut req);
    inc.write_all(&req).unwrap();
    inc.write_all(&[1, 2, 3, 4]).unwrap();
    let mut wcs = wait_wcs(cq, 2);
    wcs.sort_by_key(|w| w.wr_id);
    assert_eq!(
        (wcs[0].status, wcs[0].wr_id, wcs[0].opcode),
        (IBV_WC_SUCCESS, 1, IBV_WC_SEND)
    );
    assert_eq!(
        (wcs[1].status, wcs[1].wr_id, wcs[1].opcode),
        (IBV_WC_SUCCESS, 7, IBV_WC_RECV)
    );
    assert_eq!(
        (wcs[1].byte_len, &buf.bytes()[32..36]),
        (4, &[1u8, 2, 3, 4][..])
    );

    // Only now the notice for message 0, then a second SEND and its ACK:
    // the QP works on.
    Header::new(Op::RnrWait, 0).encode(&mut req);
    out.write_all(&req).unwrap();
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);
    out.read_exact(&mut req).unwrap();
    let r = Header::decode(&req).unwrap();
    assert_eq!((r.op, r.msn), (Op::Send, 1));
    out.read_exact(&mut payload).unwrap();
    Header::new(Op::Ack, 1).encode(&mut req);
    out.write_all(&req).unwrap();
    let w2 = wait_wc(cq);
    assert_eq!((w2.status, w2.wr_id), (IBV_WC_SUCCESS, 2));
    assert_eq!(qp_state(q), IBV_QPS_RTS);
}
