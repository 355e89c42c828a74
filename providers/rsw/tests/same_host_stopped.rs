//! The same-host path needs no CPU at the target: with the target process
//! stopped (SIGSTOP: none of its threads runs), an RDMA WRITE into it, an
//! RDMA READ from it and a SEND_WITH_IMM to it all complete, and the
//! WRITE's bytes and the SEND's completion are there when it runs again. Over TCP the same operations would wait for the
//! target's progress thread.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use rsw::testing::{local, shm};
use verbs_abi::*;

const LEN: usize = 1 << 20;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8 ^ 0x5a
}

fn line(r: &mut impl BufRead) -> String {
    let mut l = String::new();
    assert!(r.read_line(&mut l).unwrap() > 0, "peer closed");
    l.trim().to_string()
}

/// A SEND_WITH_IMM of "hello" (immediate 0x5eed).
fn send_hello(q: *mut ibv_qp, cq: *mut ibv_cq, pd: *mut ibv_pd) {
    let mut m = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    m.bytes_mut()[..5].copy_from_slice(b"hello");
    let mut sg = [m.sge(0, 5)];
    let mut w = send_wr(9, IBV_WR_SEND_WITH_IMM, &mut sg, IBV_SEND_SIGNALED);
    w.set_imm_data(0x5eedu32.to_be());
    assert_eq!(post_send(q, &mut w), 0);
    let wc = wait_wc(cq);
    assert_eq!((wc.wr_id, wc.status), (9, IBV_WC_SUCCESS));
}

#[test]
fn stopped_target_is_written_and_read() {
    let (pid, from_child, mut to_child) = fork_child(30, |mut to_parent, from_parent| {
        let mut from_parent = BufReader::new(from_parent);
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let cq = c.cq(16, null_mut());
        let q = c.qp(pd, cq, cq);
        let target = Buf::new(
            pd,
            LEN,
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
        );
        let inbox = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
        writeln!(to_parent, "{} {} {}", qpn(q), target.addr(), target.rkey()).unwrap();
        let peer: u32 = line(&mut from_parent).parse().unwrap();
        let o = ConnOpts::default();
        to_init(q, o.access);
        to_rtr(q, peer, &o);
        to_rts(q, &o);
        assert_eq!(post_recv(q, 77, &mut [inbox.sge(0, 64)]), 0);
        writeln!(to_parent, "ready").unwrap();
        // No verbs call from here on: the parent stops us, writes, reads,
        // lets us go and says "check".
        assert_eq!(line(&mut from_parent), "check");
        let got = target.snapshot();
        let bad = (1..LEN).filter(|&i| got[i] != pattern(i)).count();
        assert_eq!(bad, 0, "bytes differ from the pattern");
        // The SEND made while we were stopped is in our receive.
        let r = wait_wc(cq);
        assert_eq!(
            (r.wr_id, r.status, r.opcode, r.byte_len),
            (77, IBV_WC_SUCCESS, IBV_WC_RECV, 5)
        );
        assert_eq!(u32::from_be(r.imm_data()), 0x5eed);
        assert_eq!(&inbox.snapshot()[..5], b"hello");
        writeln!(to_parent, "ok").unwrap();
        assert_eq!(line(&mut from_parent), "bye");
    });
    let mut from_child = BufReader::new(from_child);
    let info = line(&mut from_child);
    let f: Vec<u64> = info.split(' ').map(|x| x.parse().unwrap()).collect();
    let (peer, raddr, rkey) = (f[0] as u32, f[1], f[2] as u32);

    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    writeln!(to_child, "{}", qpn(q)).unwrap();
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer, &o);
    to_rts(q, &o);
    assert_eq!(line(&mut from_child), "ready");

    let mut src = Buf::new(pd, LEN, IBV_ACCESS_LOCAL_WRITE);
    for (i, b) in src.bytes_mut().iter_mut().enumerate() {
        *b = pattern(i);
    }
    let back = Buf::new(pd, LEN, IBV_ACCESS_LOCAL_WRITE);
    let rdma = ibv_send_wr_rdma {
        remote_addr: raddr,
        rkey,
    };
    // A first WRITE while the target runs (it brings the offer).
    let mut sg = [src.sge(0, 1)];
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = rdma;
    assert_eq!(post_send(q, &mut w), 0);
    assert_eq!(wait_wc(cq).status, IBV_WC_SUCCESS);

    if shm::enabled() {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let mut st = 0;
        // SAFETY: waits for our own child to stop.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, libc::WUNTRACED) }, pid);
        assert!(libc::WIFSTOPPED(st), "child status {st:#x}");
        let before = local::direct_ops();
        let mut sg = [src.sge(0, LEN as u32)];
        let mut w = send_wr(2, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma = rdma;
        let mut sg2 = [back.sge(0, LEN as u32)];
        let mut r = send_wr(3, IBV_WR_RDMA_READ, &mut sg2, IBV_SEND_SIGNALED);
        r.wr.rdma = rdma;
        w.next = &mut r;
        assert_eq!(post_send(q, &mut w), 0);
        let wcs = wait_wcs(cq, 2);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
            (2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)
        );
        assert_eq!(
            (wcs[1].wr_id, wcs[1].status, wcs[1].opcode, wcs[1].byte_len),
            (3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, LEN as u32)
        );
        assert_eq!(local::direct_ops() - before, 2);
        assert!(
            back.snapshot() == src.snapshot(),
            "READ brought other bytes"
        );
        let before = local::direct_ops();
        send_hello(q, cq, pd);
        assert_eq!(local::direct_ops() - before, 1);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    } else {
        // Over TCP the target's CPU places the data.
        let mut sg = [src.sge(0, LEN as u32)];
        let mut w = send_wr(2, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma = rdma;
        assert_eq!(post_send(q, &mut w), 0);
        assert_eq!(wait_wc(cq).status, IBV_WC_SUCCESS);
        send_hello(q, cq, pd);
    }
    writeln!(to_child, "check").unwrap();
    assert_eq!(line(&mut from_child), "ok");
    writeln!(to_child, "bye").unwrap();
    expect_child_ok(pid, Duration::from_secs(20));
}
