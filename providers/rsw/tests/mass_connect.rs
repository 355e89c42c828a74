//! Many QPs connecting at once stay within the pending-connection limits:
//! each QP may always hold the one connection its peer makes before the QP
//! reaches RTR, however many QPs there are, while strangers stay capped at
//! a quarter of the descriptor limit. Here 300 QPs of a process limited to
//! 1024 descriptors (cap 256) all get their early connection and a SEND
//! through it. The victim is a forked child; alone in its binary.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ptr::null_mut;
use std::time::Instant;

use common::*;
use rsw::testing::pending_connections;
use rsw::wire::{Header, Op, HDR_LEN};
use verbs_abi::*;

const QPS: usize = 300;
const LIMIT: u64 = 1024;
const PEER_BASE: u32 = 7000;

fn child(mut to_parent: std::fs::File, mut from_parent: std::fs::File) {
    set_nofile(LIMIT);
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(QPS as u32 + 16, null_mut());
    let o = ConnOpts::default();
    let recv = Buf::new(pd, 8 * QPS, IBV_ACCESS_LOCAL_WRITE);
    let qps: Vec<*mut ibv_qp> = (0..QPS)
        .map(|i| {
            let q = c.qp(pd, cq, cq);
            to_init(q, o.access);
            assert_eq!(post_recv(q, i as u64, &mut [recv.sge(8 * i, 8)]), 0);
            q
        })
        .collect();
    for &q in &qps {
        to_parent.write_all(&qpn(q).to_ne_bytes()).unwrap();
    }
    let mut b = [0u8; 1];
    from_parent.read_exact(&mut b).unwrap();
    // Every QP holds its early connection, more than the cap of 256.
    assert!(
        wait_until(|| pending_connections() >= QPS),
        "only {} held",
        pending_connections()
    );
    for (i, &q) in qps.iter().enumerate() {
        to_rtr(q, PEER_BASE + i as u32, &o);
    }
    to_parent.write_all(&[1]).unwrap();
    let wcs = wait_wcs(cq, QPS);
    let mut seen = vec![false; QPS];
    for w in &wcs {
        assert_eq!((w.status, w.byte_len), (IBV_WC_SUCCESS, 4));
        seen[w.wr_id as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    for i in 0..QPS {
        assert_eq!(
            &recv.snapshot()[8 * i..8 * i + 4],
            &(i as u32).to_le_bytes()
        );
    }
}

#[test]
fn every_qp_gets_its_early_connection() {
    let (pid, mut from_child, mut to_child) = fork_child(60, child);
    set_nofile(4096);
    let mut conns = Vec::new();
    for i in 0..QPS {
        let mut q = [0u8; 4];
        from_child.read_exact(&mut q).expect("child started");
        let port = u32::from_ne_bytes(q);
        let mut s = TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
        s.write_all(&hello(PEER_BASE + i as u32, port)).unwrap();
        conns.push(s);
    }
    to_child.write_all(&[1]).unwrap();
    let mut b = [0u8; 1];
    from_child.read_exact(&mut b).expect("child at RTR");
    for (i, s) in conns.iter_mut().enumerate() {
        let mut h = [0u8; HDR_LEN];
        let mut r = Header::new(Op::Send, 0);
        r.length = 4;
        r.encode(&mut h);
        s.write_all(&h).unwrap();
        s.write_all(&(i as u32).to_le_bytes()).unwrap();
    }
    let deadline = Instant::now() + WAIT * 3;
    expect_child_ok(pid, deadline - Instant::now());
    drop(conns);
}
