//! Two processes: the test binary runs itself again as the peer.
//!
//! The parent RDMA-WRITEs into the child's memory while the child makes no
//! verbs call at all (it watches a flag byte), so only the child's progress
//! thread can place the data; then they exchange a SEND each way.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::time::Instant;

use common::*;
use verbs_abi::*;

const ROLE: &str = "RSW_MULTIPROC_CHILD";
const ROLE_EXIT: &str = "RSW_MULTIPROC_EXITER";
const LEN: usize = 1 << 20;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// A line to the parent, which reads our stdout.
fn say(line: &str) {
    println!("{line}");
    std::io::stdout().flush().unwrap();
}

/// Child side of the handshake: tells the parent our QP number and the
/// target buffer, reads the parent's QP number and connects to it.
fn child_connect(q: *mut ibv_qp, target: &Buf) {
    say(&format!(
        "CHILD {} {} {}",
        qpn(q),
        target.addr(),
        target.rkey()
    ));
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let peer: u32 = line.trim().parse().unwrap();
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer, &o);
    to_rts(q, &o);
}

/// The child side; a no-op unless started by `parent_writes_into_idle_child`.
#[test]
fn child_role() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let target = Buf::new(
        pd,
        LEN + 1,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
    );
    let msg = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    child_connect(q, &target);
    assert_eq!(post_recv(q, 1, &mut [msg.sge(0, 64)]), 0);
    say("READY");

    // No verbs calls until the flag (last byte) flips.
    let flag = (target.addr() + LEN as u64) as *const u8;
    let deadline = Instant::now() + WAIT;
    // SAFETY: the flag byte is inside the target buffer.
    while unsafe { std::ptr::read_volatile(flag) } == 0 {
        assert!(Instant::now() < deadline, "flag never set");
        std::hint::spin_loop();
    }
    let got = target.snapshot();
    let ok = (0..LEN).all(|i| got[i] == pattern(i));
    // Reply with a SEND, after which the parent expects ours first.
    let r = wait_wc(cq);
    assert_eq!((r.status, r.byte_len), (IBV_WC_SUCCESS, 5));
    assert_eq!(&msg.snapshot()[..5], b"ping!");
    let mut sg = [msg.sge(0, 5)];
    msg_fill(&msg, b"pong!");
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);
    assert_eq!(wait_wc(cq).status, IBV_WC_SUCCESS);
    say(if ok { "RESULT OK" } else { "RESULT BAD" });
    // Wait for the parent to finish before tearing down the QP.
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

fn msg_fill(b: &Buf, data: &[u8]) {
    let p = b.addr() as *mut u8;
    for (i, x) in data.iter().enumerate() {
        // SAFETY: within the buffer.
        unsafe { std::ptr::write_volatile(p.add(i), *x) };
    }
}

/// The test binary run again as the peer in `role` (a test name, enabled
/// by the environment variable `env`), spoken to line by line. A watchdog
/// kills it (by its pid) if it hangs, so every read below ends.
struct Child {
    child: std::process::Child,
    to_child: std::process::ChildStdin,
    from_child: BufReader<std::process::ChildStdout>,
    done_tx: std::sync::mpsc::Sender<()>,
    watchdog: std::thread::JoinHandle<()>,
}

impl Child {
    fn spawn(role: &str, env: &str) -> Child {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", role, "--nocapture", "--test-threads=1"])
            .env(env, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let pid = child.id() as libc::pid_t;
        let watchdog = std::thread::spawn(move || {
            if done_rx.recv_timeout(WAIT * 3).is_err() {
                // SAFETY: signalling our own child process.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        Child {
            to_child: child.stdin.take().unwrap(),
            from_child: BufReader::new(child.stdout.take().unwrap()),
            child,
            done_tx,
            watchdog,
        }
    }

    /// The next line containing `prefix`, from the prefix on.
    fn next(&mut self, prefix: &str) -> String {
        let mut l = String::new();
        loop {
            l.clear();
            assert!(
                self.from_child.read_line(&mut l).unwrap() > 0,
                "child exited early"
            );
            // The harness may have printed "test child_role ... " first.
            if let Some(i) = l.find(prefix) {
                return l[i..].trim().to_string();
            }
        }
    }

    /// Reads the child's "CHILD qpn addr rkey" line, creates our QP and
    /// connects it to the child's; returns the QP, its CQ, the child's QP
    /// number and its target buffer's address and rkey.
    fn connect(&mut self, c: &Ctx, pd: *mut ibv_pd) -> (*mut ibv_qp, *mut ibv_cq, u32, u64, u32) {
        let hello = self.next("CHILD ");
        let f: Vec<&str> = hello.split(' ').collect();
        let (peer, raddr, rkey): (u32, u64, u32) = (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        let cq = c.cq(16, null_mut());
        let q = c.qp(pd, cq, cq);
        writeln!(self.to_child, "{}", qpn(q)).unwrap();
        let o = ConnOpts::default();
        to_init(q, o.access);
        to_rtr(q, peer, &o);
        to_rts(q, &o);
        self.next("READY");
        (q, cq, peer, raddr, rkey)
    }

    /// Waits for the child to exit; true if it succeeded.
    fn finish(mut self) -> bool {
        let st = self.child.wait().unwrap();
        let _ = self.done_tx.send(());
        self.watchdog.join().unwrap();
        st.success()
    }
}

#[test]
fn parent_writes_into_idle_child() {
    if std::env::var(ROLE).is_ok() || std::env::var(ROLE_EXIT).is_ok() {
        return;
    }
    let mut child = Child::spawn("child_role", ROLE);
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let (q, cq, peer, raddr, rkey) = child.connect(&c, pd);

    let mut data = Buf::new(pd, LEN, IBV_ACCESS_LOCAL_WRITE);
    for (i, x) in data.bytes_mut().iter_mut().enumerate() {
        *x = pattern(i);
    }
    let msg = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 10, &mut [msg.sge(0, 64)]), 0);
    let mut one = Buf::new(pd, 1, IBV_ACCESS_LOCAL_WRITE);
    one.bytes_mut()[0] = 1;
    // Data, then the flag: RC ordering makes the flag land last.
    let mut s1 = [data.sge(0, LEN as u32)];
    let mut w1 = send_wr(1, IBV_WR_RDMA_WRITE, &mut s1, 0);
    w1.wr.rdma = ibv_send_wr_rdma {
        remote_addr: raddr,
        rkey,
    };
    let mut s2 = [one.sge(0, 1)];
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, &mut s2, IBV_SEND_SIGNALED);
    w2.wr.rdma = ibv_send_wr_rdma {
        remote_addr: raddr + LEN as u64,
        rkey,
    };
    w1.next = &mut w2;
    assert_eq!(post_send(q, &mut w1), 0);
    let wc = wait_wc(cq);
    assert_eq!((wc.status, wc.wr_id), (IBV_WC_SUCCESS, 2));

    msg_fill(&msg, b"ping!");
    let mut s3 = [msg.sge(0, 5)];
    let mut w3 = send_wr(3, IBV_WR_SEND, &mut s3, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w3), 0);
    let mut got = wait_wcs(cq, 2);
    got.sort_by_key(|w| w.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (3, IBV_WC_SUCCESS));
    assert_eq!(
        (got[1].wr_id, got[1].status, got[1].src_qp),
        (10, IBV_WC_SUCCESS, peer)
    );
    assert_eq!(&msg.snapshot()[..5], b"pong!");

    assert_eq!(child.next("RESULT "), "RESULT OK");
    writeln!(child.to_child, "bye").unwrap();
    assert!(child.finish());
}

/// A target that exits the moment it sees the last byte of a WRITE: the
/// WRITE was received, so its requester must still see it succeed (the
/// acknowledgement leaves before the data becomes visible).
#[test]
fn exiting_child_role() {
    if std::env::var(ROLE_EXIT).is_err() {
        return;
    }
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let target = Buf::new(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    child_connect(q, &target);
    say("READY");
    let last = (target.addr() + 4095) as *const u8;
    let deadline = Instant::now() + WAIT;
    // SAFETY: inside the buffer.
    while unsafe { std::ptr::read_volatile(last) } == 0 {
        assert!(Instant::now() < deadline, "data never arrived");
        std::hint::spin_loop();
    }
    // Gone at once, without tearing anything down.
    // SAFETY: ends the process.
    unsafe { libc::_exit(0) };
}

#[test]
fn write_to_a_target_that_exits_on_sight_succeeds() {
    if std::env::var(ROLE).is_ok() || std::env::var(ROLE_EXIT).is_ok() {
        return;
    }
    for round in 0..5 {
        let mut child = Child::spawn("exiting_child_role", ROLE_EXIT);
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let (q, cq, _, raddr, rkey) = child.connect(&c, pd);
        let mut data = Buf::new(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
        data.bytes_mut().fill(0x5a);
        let mut sg = [data.sge(0, 4096)];
        let mut w = send_wr(round, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: raddr,
            rkey,
        };
        assert_eq!(post_send(q, &mut w), 0);
        let wc = wait_wc(cq);
        assert_eq!(
            (wc.status, wc.wr_id),
            (IBV_WC_SUCCESS, round),
            "round {round}"
        );
        assert!(child.finish());
        destroy_qp(q);
    }
}
