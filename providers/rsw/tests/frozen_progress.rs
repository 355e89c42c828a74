//! A program that polls gets its QPs connected and its messages through
//! while the progress thread cannot run at all: on a machine with as many
//! polling threads as cores the progress thread may not get a core for
//! milliseconds, so a polling thread completes its QP's connect, accepts
//! the peer's connection and reads its hello itself (`Qp::drive_setup`).
//! The progress thread is frozen here in a signal handler that blocks on a
//! pipe until the test lets it go.

mod common;

use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use common::*;
use verbs_abi::*;

static HOLD_RD: AtomicI32 = AtomicI32::new(-1);
static FROZEN_WR: AtomicI32 = AtomicI32::new(-1);

extern "C" fn freeze(_: libc::c_int) {
    let mut b = 0u8;
    // SAFETY: write and read are async-signal-safe; one byte each, to and
    // from pipes the test made.
    unsafe {
        libc::write(FROZEN_WR.load(Ordering::Relaxed), &b as *const u8 as _, 1);
        libc::read(HOLD_RD.load(Ordering::Relaxed), &mut b as *mut u8 as _, 1);
    }
}

/// The progress thread's id, once it waits in epoll.
fn progress_tid() -> libc::pid_t {
    let tid: libc::pid_t = progress_task()
        .file_name()
        .and_then(|n| n.to_str()?.parse().ok())
        .expect("a thread id");
    // And frozen only while it waits in epoll (holding none of the
    // engine's locks): its current system call, as the kernel shows it.
    // (A kernel or sandbox that does not show it: go on after naming.)
    let waiting = || {
        let Ok(sys) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
            return true;
        };
        let nr = sys
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<i64>().ok());
        matches!(
            nr,
            Some(libc::SYS_epoll_wait | libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2)
        )
    };
    assert!(wait_until(waiting), "the progress thread never waited");
    tid
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

/// Stops the progress thread until the returned descriptor is written.
fn freeze_progress() -> i32 {
    let (hold_rd, hold_wr) = pipe();
    let (frozen_rd, frozen_wr) = pipe();
    HOLD_RD.store(hold_rd, Ordering::Relaxed);
    FROZEN_WR.store(frozen_wr, Ordering::Relaxed);
    // SAFETY: a plain handler for a signal nothing else in this test
    // binary uses; tgkill names a thread of ours.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = freeze as *const () as usize;
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, null_mut()), 0);
        let tid = progress_tid();
        assert_eq!(
            libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR2),
            0
        );
        let mut p = libc::pollfd {
            fd: frozen_rd,
            events: libc::POLLIN,
            revents: 0,
        };
        assert_eq!(libc::poll(&mut p, 1, 5000), 1, "the progress thread froze");
    }
    hold_wr
}

#[test]
fn a_polling_program_connects_without_the_progress_thread() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq_a = c.cq(16, null_mut());
    let cq_b = c.cq(16, null_mut());
    let a = c.qp(pd, cq_a, cq_a);
    let b = c.qp(pd, cq_b, cq_b);
    let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    let mut src = Buf::new(pd, 64, access);
    let dst = Buf::new(pd, 64, access);
    src.bytes_mut()[..5].copy_from_slice(b"hello");

    let release = freeze_progress();
    connect(a, &ConnOpts::default(), b, &ConnOpts::default());
    assert_eq!(post_recv(b, 7, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 5)];
    let mut wr = send_wr(9, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut wr), 0);

    // Both programs poll, as two spinning processes would.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut sent, mut got) = (None, None);
    while sent.is_none() || got.is_none() {
        assert!(
            Instant::now() < deadline,
            "no completion without the progress thread (send {sent:?}, receive {got:?})"
        );
        let mut wc = [ibv_wc::zeroed()];
        if poll(cq_a, &mut wc) == 1 {
            sent = Some((wc[0].wr_id, wc[0].status, wc[0].opcode));
        }
        if poll(cq_b, &mut wc) == 1 {
            got = Some((wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len));
        }
    }
    // SAFETY: one byte to our own pipe.
    unsafe { libc::write(release, b"x".as_ptr() as _, 1) };
    assert_eq!(sent, Some((9, IBV_WC_SUCCESS, IBV_WC_SEND)));
    assert_eq!(got, Some((7, IBV_WC_SUCCESS, IBV_WC_RECV, 5)));
    assert_eq!(&dst.bytes()[..5], b"hello");
    destroy_qp(a);
    destroy_qp(b);
}
