//! fork() after the provider is in use: the child starts afresh (its own
//! progress thread and tables) and runs RC traffic; the parent is unaffected.
//! Alone in its binary so no other test thread is running during fork.

mod common;

use std::ptr::null_mut;

use common::*;
use verbs_abi::*;

/// A connected pair on one context exchanges a SEND and a WRITE.
fn traffic(c: &Ctx) -> bool {
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let a = c.qp(pd, cq, cq);
    let b = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let mut src = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    src.bytes_mut().fill(0x3c);
    if post_recv(b, 1, &mut [dst.sge(0, 32)]) != 0 {
        return false;
    }
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    if post_send(a, &mut w) != 0 {
        return false;
    }
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(3, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr() + 32,
        rkey: dst.rkey(),
    };
    if post_send(a, &mut w) != 0 {
        return false;
    }
    let w = wait_wcs(cq, 3);
    let ok =
        w.iter().all(|c| c.status == IBV_WC_SUCCESS) && dst.snapshot().iter().all(|&x| x == 0x3c);
    if !ok {
        eprintln!(
            "statuses {:?} data {:?}",
            w.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            dst.snapshot()
        );
    }
    ok
}

#[test]
fn fork_after_use() {
    let c = Ctx::open();
    // The parent uses the provider first: its progress thread runs and its
    // tables are populated.
    assert!(traffic(&c));
    let keep = Buf::new(c.alloc_pd(), 16, IBV_ACCESS_LOCAL_WRITE);

    // SAFETY: the child only calls the provider and async-signal-unsafe
    // code that glibc makes safe after fork (malloc); it ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: bound the child in case something blocks.
        unsafe { libc::alarm(20) };
        let c2 = Ctx::open();
        let ok = traffic(&c2);
        // SAFETY: leaves the child without running the parent's test
        // harness teardown.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let status = reap_child(pid, WAIT * 2);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "child traffic failed");
    // The parent still works, including its old registrations.
    assert!(traffic(&c));
    assert_ne!(keep.lkey(), 0);
}
