//! Atomics on the same-host path (`transport::atomics`): done by the
//! requester with no target CPU, and still atomic against every other
//! atomic on the target's memory, whichever way it came.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use rsw::testing::{local, shm};
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

const ROLE: &str = "RSW_ATOMICS_CHILD";
/// Fetch-and-adds the TCP child makes.
const CHILD_ADDS: usize = 2000;

/// The path's counter is process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_u64(b: &Buf, off: usize) -> u64 {
    u64::from_ne_bytes(b.snapshot()[off..off + 8].try_into().unwrap())
}

/// One fetch-and-add of 1 on `q`; the value it found.
fn fetch_add(q: *mut ibv_qp, cq: *mut ibv_cq, res: &Buf, raddr: u64, rkey: u32) -> u64 {
    let mut sg = [res.sge(0, 8)];
    let mut w = atomic_wr(9, IBV_WR_ATOMIC_FETCH_AND_ADD, &mut sg, raddr, rkey, 1, 0);
    assert_eq!(post_send(q, &mut w), 0);
    let wc = wait_wc(cq);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, 8)
    );
    read_u64(res, 0)
}

#[test]
fn atomics_go_direct() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let _s = serial();
    let p = Pair::new();
    let mut target = p.buf(64);
    let res = p.buf(16);
    let t = target.addr() + 16;
    // The first request of a connection carries the offer back: one
    // fetch-and-add of 0 over TCP first.
    let mut sg = [res.sge(0, 8)];
    let mut w = atomic_wr(
        1,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        t,
        target.rkey(),
        0,
        0,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    // SAFETY: in bounds and aligned.
    unsafe { *(target.bytes_mut().as_mut_ptr().add(16) as *mut u64) = u64::MAX - 1 };
    let before = local::direct_ops();

    // Compare-and-swap that matches.
    let mut sg = [res.sge(0, 8)];
    let mut w = atomic_wr(
        2,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        &mut sg,
        t,
        target.rkey(),
        u64::MAX - 1,
        u64::MAX,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode, wc.byte_len),
        (IBV_WC_SUCCESS, 2, IBV_WC_COMP_SWAP, 8)
    );
    assert_eq!(read_u64(&res, 0), u64::MAX - 1);
    assert_eq!(read_u64(&target, 16), u64::MAX);

    // One that does not match leaves memory alone; the result goes to an
    // unaligned SGE.
    let mut sg = [res.sge(3, 8)];
    let mut w = atomic_wr(
        3,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        &mut sg,
        t,
        target.rkey(),
        5,
        6,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert_eq!(read_u64(&res, 3), u64::MAX);
    assert_eq!(read_u64(&target, 16), u64::MAX);

    // Fetch-and-add wraps.
    let mut sg = [res.sge(8, 8)];
    let mut w = atomic_wr(
        4,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        t,
        target.rkey(),
        3,
        0,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!((wc.status, wc.opcode), (IBV_WC_SUCCESS, IBV_WC_FETCH_ADD));
    assert_eq!(read_u64(&res, 8), u64::MAX);
    assert_eq!(read_u64(&target, 16), 2);
    let got = target.snapshot();
    assert!(got[..16].iter().chain(&got[24..]).all(|&b| b == 0));
    let n = local::direct_ops() - before;
    if shm::enabled() {
        assert_eq!(n, 3, "all three went over the same-host path");
    } else {
        assert_eq!(n, 0);
    }

    // What the table does not allow still gets the responder's status: a
    // misaligned target is an invalid request.
    let before = local::direct_ops();
    let mut sg = [res.sge(0, 8)];
    let mut w = atomic_wr(
        5,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        t + 4,
        target.rkey(),
        1,
        0,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_REM_INV_REQ_ERR);
    assert_eq!(local::direct_ops(), before);
    assert_eq!(read_u64(&target, 16), 2);
}

/// Atomics posted together run in posting order, each seeing the ones
/// before it, also past one batch's worth.
#[test]
fn posted_atomics_run_in_order() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let _s = serial();
    let p = Pair::with(ConnOpts::default(), ConnOpts::default(), |a| {
        a.cap.max_send_wr = 64
    });
    let mut target = p.buf(32);
    let res = p.buf(8 * 40);
    // x and y adjacent, z past a word the batch leaves alone.
    let (x, y, z) = (target.addr(), target.addr() + 8, target.addr() + 24);
    fetch_add(p.a, p.cq_a, &res, y, target.rkey());
    // SAFETY: in bounds and aligned.
    unsafe {
        let m = target.bytes_mut().as_mut_ptr() as *mut u64;
        *m = 10;
        *m.add(1) = 0;
        *m.add(2) = 0xdead;
        *m.add(3) = 1;
    }
    // (target, opcode, compare_add, swap, what it must find)
    let mut ops = vec![
        (x, IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, 10),
        (x, IBV_WR_ATOMIC_CMP_AND_SWP, 15, 100, 15),
        (y, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, 0),
        (x, IBV_WR_ATOMIC_CMP_AND_SWP, 15, 7, 100),
        (x, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, 100),
        (z, IBV_WR_ATOMIC_FETCH_AND_ADD, 7, 0, 1),
        (z, IBV_WR_ATOMIC_CMP_AND_SWP, 8, 3, 8),
    ];
    for i in 0..25 {
        ops.push((y, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, i + 1));
    }
    let mut sges: Vec<[ibv_sge; 1]> = (0..ops.len()).map(|i| [res.sge(8 * i, 8)]).collect();
    let mut wrs: Vec<ibv_send_wr> = ops
        .iter()
        .zip(sges.iter_mut())
        .enumerate()
        .map(|(i, (&(at, op, ca, sw, _), sg))| {
            atomic_wr(100 + i as u64, op, sg, at, target.rkey(), ca, sw)
        })
        .collect();
    for i in 0..wrs.len() - 1 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    let before = local::direct_ops();
    assert_eq!(post_send(p.a, &mut wrs[0]), 0);
    let wcs = wait_wcs(p.cq_a, ops.len());
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!((wc.status, wc.wr_id), (IBV_WC_SUCCESS, 100 + i as u64));
    }
    for (i, &(_, _, _, _, want)) in ops.iter().enumerate() {
        assert_eq!(read_u64(&res, 8 * i), want, "op {i}");
    }
    assert_eq!(
        (0..4).map(|i| read_u64(&target, 8 * i)).collect::<Vec<_>>(),
        [101, 26, 0xdead, 3]
    );
    if shm::enabled() {
        assert_eq!(local::direct_ops() - before, ops.len() as u64);
    }
}

/// Atomics posted one by one in a burst (no poll in between) are done
/// together; a program that then waits on memory instead of polling
/// still sees them done.
#[test]
fn a_burst_is_done_together_and_without_a_poll() {
    if std::env::var(ROLE).is_ok() || !shm::enabled() {
        return;
    }
    let _s = serial();
    let p = Pair::with(ConnOpts::default(), ConnOpts::default(), |a| {
        a.cap.max_send_wr = 64
    });
    let target = p.buf(8);
    let res = p.buf(8 * 40);
    fetch_add(p.a, p.cq_a, &res, target.addr(), target.rkey());
    fetch_add(p.a, p.cq_a, &res, target.addr(), target.rkey());
    let post = |i: usize| {
        let mut sg = [res.sge(8 * i, 8)];
        let mut w = atomic_wr(
            200 + i as u64,
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            &mut sg,
            target.addr(),
            target.rkey(),
            1,
            0,
        );
        assert_eq!(post_send(p.a, &mut w), 0);
    };
    // Twenty posted, then polled.
    let (ops, batches) = (local::direct_ops(), local::atomic_batches());
    for i in 0..20 {
        post(i);
    }
    let wcs = wait_wcs(p.cq_a, 20);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!((wc.status, wc.wr_id), (IBV_WC_SUCCESS, 200 + i as u64));
        assert_eq!(read_u64(&res, 8 * i), 2 + i as u64);
    }
    assert_eq!(local::direct_ops() - ops, 20);
    let b = local::atomic_batches() - batches;
    assert!(b <= 3, "{b} batches for 20 atomics posted together");
    // Five posted, then nobody polls: they land anyway.
    for i in 0..5 {
        post(20 + i);
    }
    assert!(
        wait_until(|| read_u64(&target, 0) == 27),
        "held-back atomics never ran"
    );
    let wcs = wait_wcs(p.cq_a, 5);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.status, IBV_WC_SUCCESS);
        assert_eq!(read_u64(&res, 8 * (20 + i)), 22 + i as u64);
    }
}

#[test]
fn atomics_without_rights_are_refused() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let _s = serial();
    let p = Pair::new();
    let target = Buf::new(
        p.pd,
        64,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
    );
    let ok = p.buf(64);
    let res = p.buf(8);
    // Warm up with an allowed one.
    fetch_add(p.a, p.cq_a, &res, ok.addr(), ok.rkey());
    let before = local::direct_ops();
    let mut sg = [res.sge(0, 8)];
    let mut w = atomic_wr(
        6,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        target.addr(),
        target.rkey(),
        1,
        0,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_REM_ACCESS_ERR);
    assert_eq!(local::direct_ops(), before, "not taken directly");
    assert!(target.snapshot().iter().all(|&b| b == 0));
}

/// The child: fetch-and-adds over TCP (`RSW_TRANSPORT=tcp`) on the
/// parent's word while the parent hammers it over the same-host path.
#[test]
fn child_role() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    assert!(!shm::enabled(), "the child runs with RSW_TRANSPORT=tcp");
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let res = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    println!("CHILD {}", qpn(q));
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (peer, raddr, rkey) = (f[0] as u32, f[1], f[2] as u32);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer, &o);
    to_rts(q, &o);
    let got: Vec<String> = (0..CHILD_ADDS)
        .map(|_| fetch_add(q, cq, &res, raddr, rkey).to_string())
        .collect();
    println!("FOUND {}", got.join(" "));
    std::io::stdout().flush().unwrap();
    // Wait for the parent before tearing the QP down.
    let _ = std::io::stdin().lock().read_line(&mut line);
}

#[test]
fn direct_and_tcp_atomics_exclude_each_other() {
    if std::env::var(ROLE).is_ok() || !shm::enabled() {
        return;
    }
    let _s = serial();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, "1")
        .env("RSW_TRANSPORT", "tcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(WAIT * 6).is_err() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let next = |r: &mut BufReader<_>, prefix: &str| -> String {
        let mut l = String::new();
        loop {
            l.clear();
            assert!(r.read_line(&mut l).unwrap() > 0, "child exited early");
            if let Some(i) = l.find(prefix) {
                return l[i + prefix.len()..].trim().to_string();
            }
        }
    };

    // The word, registered for the child's QP and again in the PD of an
    // in-process pair whose requester takes the same-host path.
    let p = Pair::new();
    let word = p.buf(8);
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    // SAFETY: the memory is the live Buf's, which outlives the MR.
    let mr = unsafe { OPS.reg_mr.unwrap()(pd, word.addr() as *mut _, 8, word.addr(), access) };
    assert!(!mr.is_null());
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let peer: u32 = next(&mut from_child, "CHILD ").parse().unwrap();
    // SAFETY: mr is live.
    let rkey = unsafe { (*mr).rkey };
    writeln!(to_child, "{} {} {}", qpn(q), word.addr(), rkey).unwrap();
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer, &o);
    to_rts(q, &o);

    // Hammer the word directly until the child reports what it found.
    let res = p.buf(8);
    let finished = Arc::new(AtomicBool::new(false));
    let f2 = finished.clone();
    let reader = std::thread::spawn(move || {
        let found = next(&mut from_child, "FOUND ");
        f2.store(true, Ordering::Release);
        (found, from_child)
    });
    let before = local::direct_ops();
    let mut ours = Vec::new();
    // A reader that panicked (the child failed) ends the loop too: its
    // join below then fails the test instead of hanging it.
    while !finished.load(Ordering::Acquire) && !reader.is_finished() {
        ours.push(fetch_add(p.a, p.cq_a, &res, word.addr(), word.rkey()));
    }
    let (found, _r) = reader.join().unwrap();
    let theirs: Vec<u64> = found
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), CHILD_ADDS);
    assert!(
        local::direct_ops() - before >= ours.len() as u64 - 1,
        "ours went over the same-host path"
    );
    // Every fetch-and-add saw a value nobody else saw, and together they
    // counted every one.
    let total = (ours.len() + theirs.len()) as u64;
    assert_eq!(read_u64(&word, 0), total, "no update was lost");
    let seen: HashSet<u64> = ours.iter().chain(&theirs).copied().collect();
    assert_eq!(seen.len() as u64, total, "no value was seen twice");
    assert!(seen.iter().all(|&v| v < total));
    assert!(
        ours.len() > 100,
        "the two sides overlapped ({} direct)",
        ours.len()
    );

    writeln!(to_child, "bye").unwrap();
    let st = child.wait().unwrap();
    let _ = done_tx.send(());
    watchdog.join().unwrap();
    assert!(st.success());
    destroy_qp(q);
    // SAFETY: the MR is live and no longer used.
    assert_eq!(unsafe { OPS.dereg_mr.unwrap()(mr) }, 0);
}
