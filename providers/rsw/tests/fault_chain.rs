//! The provider's fault handler (installed with the first registration, to
//! survive accesses to memory unmapped after registration) must not change
//! what happens to the application's own faults: the default action still
//! kills the process with SIGSEGV, and a handler the application installed
//! before still runs. Children are forked; alone in its binary.

mod common;

use std::os::raw::c_int;

use common::*;
use verbs_abi::*;

fn register_something() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let b = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    std::mem::forget(b);
    std::mem::forget(c);
}

fn crash() -> ! {
    // SAFETY: deliberately faults (the point of the test).
    unsafe { std::ptr::write_volatile(std::ptr::dangling_mut::<u64>().wrapping_add(1 << 40), 1) };
    unreachable!("the store did not fault")
}

extern "C" fn app_handler(_: c_int) {
    // SAFETY: async-signal-safe exit.
    unsafe { libc::_exit(42) };
}

fn run_child(f: fn()) -> c_int {
    // SAFETY: the test binary runs only this test; the child ends with
    // _exit or a signal and never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: bounds the child's life.
        unsafe { libc::alarm(20) };
        f();
        // SAFETY: leaves without running the harness.
        unsafe { libc::_exit(7) };
    }
    reap_child(pid, WAIT)
}

#[test]
fn application_faults_are_untouched() {
    let st = run_child(|| {
        register_something();
        crash();
    });
    assert!(libc::WIFSIGNALED(st), "status {st:#x}");
    assert_eq!(libc::WTERMSIG(st), libc::SIGSEGV);

    let st = run_child(|| {
        // SAFETY: installs a plain handler for SIGSEGV.
        unsafe {
            libc::signal(
                libc::SIGSEGV,
                app_handler as *const () as libc::sighandler_t,
            )
        };
        register_something();
        crash();
    });
    assert!(libc::WIFEXITED(st), "status {st:#x}");
    assert_eq!(libc::WEXITSTATUS(st), 42);
}
