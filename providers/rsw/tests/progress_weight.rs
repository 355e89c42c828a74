//! Over TCP the progress thread serves the requests nobody polls for.
//! While those are one-sided (WRITEs here), a program waiting for one
//! spins on its memory and only this thread's getting a core ends the
//! wait, so it asks for ten nice steps more than its starter, where the
//! process may; serving SENDs, whose program polls or waits for the
//! completion, it gives them back.

mod common;

use std::time::Instant;

use common::*;
use verbs_abi::*;

/// The progress thread's nice value (field 19 of its `stat`).
fn progress_nice() -> i32 {
    let stat = std::fs::read_to_string(progress_task().join("stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(16).unwrap().parse().unwrap()
}

fn my_nice() -> i32 {
    // SAFETY: no memory arguments; errno cleared because -1 is valid.
    unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    }
}

/// Whether a thread of this process may raise its own priority (what the
/// progress thread will try), asked on a throwaway thread.
fn may_raise(by: i32) -> bool {
    std::thread::spawn(move || {
        let n = my_nice();
        // SAFETY: no memory arguments; 0 is the calling thread.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n - by) == 0 }
    })
    .join()
    .unwrap()
}

#[test]
fn one_sided_requests_raise_the_progress_threads_weight() {
    // Read once, as the first device opens: only this test is in here.
    std::env::set_var("RSW_TRANSPORT", "tcp");
    let base = my_nice();
    let p = Pair::new();
    let mut src = p.buf(4096);
    let dst = p.buf(4096);
    assert_eq!(progress_nice(), base, "before any request");

    // WRITEs a -> b; b's CQ is never polled, so its progress thread
    // serves every one of them.
    for i in 0..20u32 {
        let fill = (i as u8).wrapping_mul(31).wrapping_add(5);
        src.bytes_mut()[..256].fill(fill);
        let mut sge = [src.sge(0, 256)];
        let mut wr = send_wr(i as u64, IBV_WR_RDMA_WRITE, &mut sge, IBV_SEND_SIGNALED);
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: dst.addr() + (i as u64 * 64) % 2048,
            rkey: dst.rkey(),
        };
        assert_eq!(post_send(p.a, &mut wr), 0);
        let wc = wait_wc(p.cq_a);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (i as u64, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)
        );
        let at = ((i as u64 * 64) % 2048) as usize;
        assert!(
            dst.bytes()[at..at + 256].iter().all(|&b| b == fill),
            "WRITE {i}: bytes"
        );
    }
    let boosted = (base - 10).max(-20);
    if may_raise(base - boosted) && boosted < base {
        assert!(
            wait_until(|| progress_nice() == boosted),
            "after 20 WRITEs the progress thread runs at nice {}, not {boosted}",
            progress_nice()
        );
    } else {
        assert_eq!(progress_nice(), base, "no privilege to raise it: unchanged");
        eprintln!("this process may not raise a thread's priority: only checked it stays");
        return;
    }

    // SENDs a -> b, again served by b's progress thread: the boost goes
    // (at most one change a millisecond, so it may take a few).
    let start = Instant::now();
    let mut i = 0u64;
    while progress_nice() != base && start.elapsed() < WAIT {
        let mut rsge = [dst.sge(2048, 64)];
        assert_eq!(post_recv(p.b, 1000 + i, &mut rsge), 0);
        let mut sge = [src.sge(0, 64)];
        let mut wr = send_wr(i, IBV_WR_SEND, &mut sge, IBV_SEND_SIGNALED);
        assert_eq!(post_send(p.a, &mut wr), 0);
        let wc = wait_wc(p.cq_a);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (i, IBV_WC_SUCCESS, IBV_WC_SEND)
        );
        let wc = wait_wc(p.cq_b);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
            (1000 + i, IBV_WC_SUCCESS, IBV_WC_RECV, 64)
        );
        i += 1;
    }
    assert_eq!(progress_nice(), base, "after {i} SENDs");
}
