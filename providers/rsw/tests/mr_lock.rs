//! The MR table's read lock must never be taken twice by one thread: the
//! lock is fair to writers, so with a `dereg_mr` waiting for the write lock
//! the second read blocks forever, and with it the progress thread and the
//! deregistering thread. Kept in a file of its own: a regression leaves
//! threads deadlocked, which must not stall other tests.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use verbs_abi::*;

/// A READ completes and the WQE behind it failed locally, so finishing the
/// READ moves the QP to ERR, which flushes the QP's own queued responses
/// (the peer is reading a large buffer from it) — all while another thread
/// registers and deregisters memory as fast as it can.
#[test]
fn read_completion_that_fails_the_qp_under_dereg_pressure() {
    // A deadlock may catch this very thread (polling drives the QP), so the
    // rounds run on a worker and the test waits for it with a deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        rounds();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("deadlock: the rounds did not finish");
}

fn rounds() {
    let churn_ctx = Ctx::open();
    let churn_pd = churn_ctx.alloc_pd() as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                drop(Buf::new(
                    churn_pd as *mut ibv_pd,
                    64,
                    IBV_ACCESS_LOCAL_WRITE,
                ));
                n += 1;
            }
            n
        })
    };
    for round in 0..30 {
        let p = Pair::new();
        let big_src = Buf::new(p.pd, 1 << 22, IBV_ACCESS_REMOTE_READ);
        let big_dst = p.buf(1 << 22);
        let small = p.buf(64);
        let dst = p.buf(64);

        // b reads 4 MiB from a: a's responder keeps a response queued.
        let mut sg = [big_dst.sge(0, 1 << 22)];
        let mut big = send_wr(10, IBV_WR_RDMA_READ, &mut sg, 0);
        big.wr.rdma = ibv_send_wr_rdma {
            remote_addr: big_src.addr(),
            rkey: big_src.rkey(),
        };
        assert_eq!(post_send(p.b, &mut big), 0);

        // a: a small READ, then a SEND whose lkey is wrong.
        let mut rsg = [dst.sge(0, 64)];
        let mut rd = send_wr(1, IBV_WR_RDMA_READ, &mut rsg, IBV_SEND_SIGNALED);
        rd.wr.rdma = ibv_send_wr_rdma {
            remote_addr: small.addr(),
            rkey: small.rkey(),
        };
        let mut bad = [ibv_sge {
            addr: dst.addr(),
            length: 8,
            lkey: dst.lkey() ^ 1,
        }];
        let mut send = send_wr(2, IBV_WR_SEND, &mut bad, IBV_SEND_SIGNALED);
        rd.next = &mut send;
        assert_eq!(post_send(p.a, &mut rd), 0);
        let c1 = wait_wc(p.cq_a);
        assert_eq!((c1.wr_id, c1.status), (1, IBV_WC_SUCCESS), "round {round}");
        let c2 = wait_wc(p.cq_a);
        assert_eq!(
            (c2.wr_id, c2.status),
            (2, IBV_WC_LOC_PROT_ERR),
            "round {round}"
        );
        assert_eq!(qp_state(p.a), IBV_QPS_ERR);
        destroy_qp(p.a);
        destroy_qp(p.b);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(churn.join().expect("churn thread") > 0);
}
