//! A forked child that lives on holds copies of the parent's sockets. When
//! the parent destroys a QP, its sockets stay open in the child, so closing
//! them does not end their epoll watches; the progress thread must still
//! not keep waking up for them. Alone in its binary: no other test thread
//! may run during fork, and the process's progress thread serves only it.

mod common;

use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use verbs_abi::*;

#[test]
fn destroyed_qp_whose_sockets_a_child_holds_does_not_spin() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let a = c.qp(pd, cq, cq);
    let b = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let src = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(b, 1, &mut [dst.sge(0, 8)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    assert_eq!(wait_wcs(cq, 2).len(), 2);

    // The child only waits for the parent to let it go (EOF on a pipe).
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child calls only async-signal-safe functions.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut byte = 0u8;
        // SAFETY: plain syscalls on our own descriptors; alarm bounds the
        // child's life in case the parent dies first.
        unsafe {
            libc::alarm(20);
            libc::close(fds[1]);
            libc::read(fds[0], (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: the parent's copy of the read end.
    unsafe { libc::close(fds[0]) };

    // b goes away in this process only; a then sends to b's socket, which
    // becomes readable with nobody reading it.
    destroy_qp(b);
    assert_eq!(post_send(a, &mut w), 0);

    // A measurement window, not synchronisation: a spinning thread would
    // use nearly all of it (clock ticks are 10 ms).
    let before = progress_ticks();
    std::thread::sleep(Duration::from_millis(300));
    let used = progress_ticks() - before;

    // SAFETY: closing the write end lets the child exit.
    unsafe { libc::close(fds[1]) };
    let status = reap_child(pid, WAIT);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert!(used <= 5, "progress thread used {used} ticks in 300 ms");
}
