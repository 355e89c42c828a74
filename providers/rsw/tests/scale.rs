//! 1,000 connected RC QPs in one process pair: each QP of the parent
//! RDMA-WRITEs into its own slot of the child's buffer and SENDs into the
//! child QP's receive, and every byte, completion and slot is checked. Run
//! by `make test` over the same-host path and again over TCP
//! (`RSW_TRANSPORT=tcp`). The child is forked; alone in its binary.

mod common;

use std::io::{Read, Write};
use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use verbs_abi::*;

const QPS: usize = 1000;
const SLOT: usize = 64;

fn read_u32s(f: &mut std::fs::File, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; 4 * n];
    f.read_exact(&mut b).unwrap();
    b.chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn write_u32s(f: &mut std::fs::File, v: &[u32]) {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    f.write_all(&b).unwrap();
}

fn pattern(q: usize, i: usize) -> u8 {
    (q * 7 + i) as u8
}

fn child(mut to_parent: std::fs::File, mut from_parent: std::fs::File) {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(QPS as u32 + 16, null_mut());
    let o = ConnOpts::default();
    // One MR for every QP's WRITE slot, one for the SENDs.
    let target = Buf::new(pd, QPS * SLOT, o.access);
    let inbox = Buf::new(pd, QPS * 8, IBV_ACCESS_LOCAL_WRITE);
    let qps: Vec<*mut ibv_qp> = (0..QPS).map(|_| c.qp(pd, cq, cq)).collect();
    for (i, &q) in qps.iter().enumerate() {
        to_init(q, o.access);
        assert_eq!(post_recv(q, i as u64, &mut [inbox.sge(8 * i, 8)]), 0);
    }
    let mut mine: Vec<u32> = qps.iter().map(|&q| qpn(q)).collect();
    mine.push(target.rkey());
    write_u32s(&mut to_parent, &mine);
    to_parent.write_all(&target.addr().to_ne_bytes()).unwrap();
    let peers = read_u32s(&mut from_parent, QPS);
    for (i, &q) in qps.iter().enumerate() {
        to_rtr(q, peers[i], &o);
        to_rts(q, &o);
    }
    to_parent.write_all(b"R").unwrap();
    // Every SEND arrives, into its own QP's receive, after its WRITE.
    let mut seen = vec![false; QPS];
    for _ in 0..QPS {
        let w = wait_wc(cq);
        assert_eq!(
            (w.status, w.opcode, w.byte_len),
            (IBV_WC_SUCCESS, IBV_WC_RECV, 8)
        );
        let i = w.wr_id as usize;
        assert!(!seen[i], "receive {i} completed twice");
        seen[i] = true;
        assert_eq!(w.qp_num, qpn(qps[i]));
        assert_eq!(w.src_qp, peers[i]);
    }
    let t = target.snapshot();
    let m = inbox.snapshot();
    for q in 0..QPS {
        let slot = &t[q * SLOT..(q + 1) * SLOT];
        assert!(
            (0..SLOT).all(|i| slot[i] == pattern(q, i)),
            "slot {q} differs"
        );
        assert_eq!(&m[8 * q..8 * q + 8], &(q as u64).to_le_bytes());
    }
    to_parent.write_all(b"K").unwrap();
    let mut bye = [0u8; 1];
    from_parent.read_exact(&mut bye).unwrap();
}

#[test]
fn a_thousand_qps_between_two_processes() {
    set_nofile(8192);
    let (pid, mut from_child, mut to_child) = fork_child(60, child);
    let theirs = read_u32s(&mut from_child, QPS + 1);
    let mut addr = [0u8; 8];
    from_child.read_exact(&mut addr).unwrap();
    let (raddr, rkey) = (u64::from_ne_bytes(addr), theirs[QPS]);

    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(2 * QPS as u32 + 16, null_mut());
    let o = ConnOpts::default();
    let mut src = Buf::new(pd, QPS * SLOT + QPS * 8, IBV_ACCESS_LOCAL_WRITE);
    for q in 0..QPS {
        for i in 0..SLOT {
            src.bytes_mut()[q * SLOT + i] = pattern(q, i);
        }
        let m = QPS * SLOT + 8 * q;
        src.bytes_mut()[m..m + 8].copy_from_slice(&(q as u64).to_le_bytes());
    }
    let qps: Vec<*mut ibv_qp> = (0..QPS).map(|_| c.qp(pd, cq, cq)).collect();
    let mine: Vec<u32> = qps.iter().map(|&q| qpn(q)).collect();
    write_u32s(&mut to_child, &mine);
    for (i, &q) in qps.iter().enumerate() {
        to_init(q, o.access);
        to_rtr(q, theirs[i], &o);
        to_rts(q, &o);
    }
    let mut r = [0u8; 1];
    from_child.read_exact(&mut r).unwrap();
    for (q, &qp) in qps.iter().enumerate() {
        let mut s1 = [src.sge(q * SLOT, SLOT as u32)];
        let mut w1 = send_wr(2 * q as u64, IBV_WR_RDMA_WRITE, &mut s1, IBV_SEND_SIGNALED);
        w1.wr.rdma = ibv_send_wr_rdma {
            remote_addr: raddr + (q * SLOT) as u64,
            rkey,
        };
        let mut s2 = [src.sge(QPS * SLOT + 8 * q, 8)];
        let mut w2 = send_wr(2 * q as u64 + 1, IBV_WR_SEND, &mut s2, IBV_SEND_SIGNALED);
        w1.next = &mut w2;
        assert_eq!(post_send(qp, &mut w1), 0);
    }
    let mut done = vec![false; 2 * QPS];
    for _ in 0..2 * QPS {
        let w = wait_wc(cq);
        assert_eq!(w.status, IBV_WC_SUCCESS, "wr {}", w.wr_id);
        assert!(!done[w.wr_id as usize]);
        done[w.wr_id as usize] = true;
    }
    from_child.read_exact(&mut r).unwrap();
    assert_eq!(&r, b"K");
    to_child.write_all(b"B").unwrap();
    expect_child_ok(pid, Duration::from_secs(60));
}
