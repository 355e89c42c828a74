//! The progress thread asks for the kernel's shortest time slice, so a
//! program that busy-polls on the core the thread is pinned to (MPI binds
//! ranks to cores) does not hold it off for a whole default slice (3-4 ms
//! under EEVDF) each time a message needs it.

mod common;

use common::*;

/// The `se.slice` the scheduler reports for our progress thread, if this
/// kernel reports one.
fn progress_slice() -> Option<u64> {
    let sched = std::fs::read_to_string(progress_task().join("sched")).ok()?;
    let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
    line.split(':').nth(1)?.trim().parse().ok()
}

/// Whether the kernel takes a slice request from an unprivileged
/// SCHED_OTHER thread (Linux 6.12 and later).
fn kernel_has_custom_slices() -> bool {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = r.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = v.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let minor: u32 = v.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (major, minor) >= (6, 12)
}

#[test]
fn progress_thread_runs_with_a_short_slice() {
    let p = Pair::new();
    healthy_pair(&p, 1);
    match progress_slice() {
        Some(ns) if kernel_has_custom_slices() => assert_eq!(ns, 100_000),
        other => eprintln!("kernel without custom slices ({other:?}): nothing to check"),
    }
}
