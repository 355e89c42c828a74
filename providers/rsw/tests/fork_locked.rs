//! A fork while another thread holds a provider table's lock (here the
//! live-QP table, which the progress thread and every control verb take):
//! the child must start with fresh tables, not inherit the held lock and
//! deadlock on its first QP. Alone in its binary because of the fork.

mod common;

use std::ptr::null_mut;
use std::sync::mpsc;

use common::*;

#[test]
fn fork_while_the_qp_table_is_locked() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(4, null_mut());
    let q = c.qp(pd, cq, cq);
    let (locked_tx, locked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        rsw::testing::with_qps_locked(|| {
            locked_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        })
    });
    locked_rx.recv().unwrap();
    // SAFETY: the child only makes verbs calls and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: bounds the child: a deadlock ends it with SIGALRM.
        unsafe { libc::alarm(10) };
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let cq = c.cq(4, null_mut());
        let q = c.qp(pd, cq, cq);
        to_init(q, ConnOpts::default().access);
        destroy_qp(q);
        // SAFETY: leaves without running the harness in the child.
        unsafe { libc::_exit(0) };
    }
    let st = reap_child(pid, WAIT);
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert!(libc::WIFEXITED(st), "child status {st:#x} (deadlocked?)");
    assert_eq!(libc::WEXITSTATUS(st), 0);
    destroy_qp(q);
}
