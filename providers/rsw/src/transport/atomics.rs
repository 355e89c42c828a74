//! What makes a process's atomics atomic across the device: one lock word
//! per process, at the start of its mailbox file (`transport::mailbox`),
//! which its same-host peers map read-write.
//!
//! A same-host requester cannot run a CPU atomic on another process's
//! memory: it reads the word with `process_vm_readv`, computes, and writes
//! it back with `process_vm_writev`. That is atomic only against others
//! doing the same under the same lock, so every atomic that targets the
//! process takes it: peers' direct ones and its own responder's (for
//! requests that came over TCP). This is what `IBV_ATOMIC_HCA` promises
//! (atomic with respect to the device's other atomics, not to the CPU's).
//!
//! The word holds its holder's pid and tid. A holder that died in the
//! critical section (two syscalls long) is noticed with `tgkill(.., 0)` and
//! its lock taken over; one that lives but does not let go (stopped, say)
//! makes waiters give up after a bounded wait: a requester then sends the
//! atomic over TCP, a responder goes ahead with a warning.
//!
//! A second word names the waiter that goes next. Without it a thread
//! doing atomics back to back took the lock again each time it let go,
//! while a waiter that had gone to sleep only ever found it held (woken,
//! it mostly ran while the holder was preempted inside): a responder
//! waited over half a second, past its requester's retry budget
//! (RETRY_EXC_ERR), and once past its patience went ahead unlocked and
//! lost an update. Now a waiter that had to leave the CPU claims the
//! turn, and others leave a free lock to it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::util::mono_ns;

/// How long a waiter spins before it yields the CPU: a critical section
/// is two short syscalls.
const SPINS: u32 = 200;
/// Then how many times it yields before it sleeps: a holder preempted on
/// the waiter's own core runs only once the waiter leaves the CPU, which
/// `sched_yield` does not promise (EEVDF may pick the yielder again).
const YIELDS: u32 = 16;
/// The first sleep, doubled up to the longest.
const SLEEP_NS: u64 = 20_000;
const MAX_SLEEP_NS: u64 = 1_000_000;

/// Locks taken over from a dead holder, and waits given up, process-wide.
pub static TAKEOVERS: AtomicU64 = AtomicU64::new(0);
pub static GIVEUPS: AtomicU64 = AtomicU64::new(0);

/// A process's atomic lock, at the start of its mailbox file.
#[repr(C)]
#[derive(Default)]
pub struct Lock {
    /// The holder's id (see `me`), 0 when free.
    word: AtomicU64,
    /// The waiter the lock goes to next, 0 for whoever comes first.
    next: AtomicU64,
}

/// A held lock: released when dropped.
pub struct Held<'a>(&'a AtomicU64);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

thread_local! {
    /// This thread's lock word value, and the fork generation it was
    /// computed in (a forked child's thread has other ids).
    static ME: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((u64::MAX, 0)) };
}

fn me() -> u64 {
    let gen = verbs_rt::fork_generation();
    let (g, id) = ME.get();
    if g == gen {
        return id;
    }
    verbs_rt::register_fork_handler();
    // SAFETY: getpid and gettid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let id = ((pid as u32 as u64) << 32) | tid as u32 as u64;
    ME.set((verbs_rt::fork_generation(), id));
    id
}

/// Whether the thread named by a lock word is gone.
fn gone(holder: u64) -> bool {
    let (pid, tid) = ((holder >> 32) as libc::pid_t, holder as u32 as libc::pid_t);
    // SAFETY: signal 0 only checks that the thread exists.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Takes the lock, or None after `patience_ns` of a live holder (or a
/// live waiter whose turn it is) not letting go.
pub fn lock(l: &Lock, patience_ns: u64) -> Option<Held<'_>> {
    let me = me();
    let mut tries = 0u32;
    let mut since = 0;
    let mut sleep = SLEEP_NS;
    loop {
        let next = l.next.load(Ordering::Acquire);
        let holder = if next == 0 || next == me {
            match l
                .word
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    if next == me {
                        let _ = l
                            .next
                            .compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
                    }
                    return Some(Held(&l.word));
                }
                Err(h) => h,
            }
        } else {
            l.word.load(Ordering::Relaxed)
        };
        tries += 1;
        if tries < SPINS || (holder == 0 && (next == 0 || next == me)) {
            std::hint::spin_loop();
            continue;
        }
        if tries < SPINS + YIELDS {
            std::thread::yield_now();
            continue;
        }
        // Leaving the CPU from here on: take the next turn if nobody has.
        if next == 0
            && l.next
                .compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            continue;
        }
        if holder != 0 && gone(holder) {
            // Its critical section died with it: what it read is stale,
            // what it wrote (if anything) is whole.
            if l.word
                .compare_exchange(holder, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                TAKEOVERS.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        if next != 0 && next != me && gone(next) {
            // A waiter that died waiting for its turn.
            let _ = l
                .next
                .compare_exchange(next, 0, Ordering::AcqRel, Ordering::Relaxed);
            continue;
        }
        let now = mono_ns();
        if since == 0 {
            since = now;
        } else if now - since >= patience_ns {
            // Our turn, if we had it, goes to whoever comes first.
            let _ = l
                .next
                .compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
            GIVEUPS.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if next == me {
            // Ours is the next turn and the critical section is short:
            // a short nap lets a holder preempted on this core finish,
            // and the lock waits for us meanwhile.
            std::thread::sleep(std::time::Duration::from_nanos(SLEEP_NS));
        } else {
            std::thread::sleep(std::time::Duration::from_nanos(sleep));
            sleep = (sleep * 2).min(MAX_SLEEP_NS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_and_releases() {
        let w = Lock::default();
        let h = lock(&w, 1_000_000).expect("free lock");
        assert_eq!(w.word.load(Ordering::Relaxed), me());
        assert!(lock(&w, 1_000_000).is_none(), "held by a live thread");
        assert_eq!(w.next.load(Ordering::Relaxed), 0, "a waiter that gave up");
        drop(h);
        assert_eq!(w.word.load(Ordering::Relaxed), 0);
        assert!(lock(&w, 1_000_000).is_some());
    }

    #[test]
    fn a_dead_holder_is_taken_over() {
        // A thread that takes the lock and exits without letting go.
        let w = std::sync::Arc::new(Lock::default());
        let w2 = w.clone();
        std::thread::spawn(move || std::mem::forget(lock(&w2, 1_000_000).unwrap()))
            .join()
            .unwrap();
        assert_ne!(w.word.load(Ordering::Relaxed), 0);
        let h = lock(&w, 10_000_000_000).expect("taken over");
        assert_eq!(w.word.load(Ordering::Relaxed), me());
        drop(h);
    }

    #[test]
    fn a_sleeping_waiter_gets_its_turn() {
        // A thread that holds the lock nearly all the time and takes it
        // again at once (as a program doing same-host atomics back to
        // back, preempted inside at times): a waiter still gets it.
        let w = std::sync::Arc::new(Lock::default());
        let turns = std::sync::Arc::new(AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (w2, turns2, stop2) = (w.clone(), turns.clone(), stop.clone());
        let hammer = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let _h = lock(&w2, u64::MAX).unwrap();
                turns2.fetch_add(1, Ordering::Relaxed);
                let t = mono_ns();
                while mono_ns() - t < 50_000 {
                    std::hint::spin_loop();
                }
            }
        });
        let deadline = mono_ns() + 10_000_000_000;
        while turns.load(Ordering::Relaxed) == 0 {
            assert!(mono_ns() < deadline, "the hammer never ran");
            std::thread::yield_now();
        }
        let got = (0..20)
            .filter(|_| lock(&w, 1_000_000_000).is_some())
            .count();
        stop.store(true, Ordering::Relaxed);
        hammer.join().unwrap();
        assert_eq!(got, 20, "waits given up against a busy holder");
        assert_eq!(w.next.load(Ordering::Relaxed), 0);
        assert!(turns.load(Ordering::Relaxed) > 1, "the hammer took turns");
    }

    #[test]
    fn serialises_read_modify_write() {
        // Non-atomic increments under the lock from four threads lose
        // nothing.
        let w = std::sync::Arc::new(Lock::default());
        let v = std::sync::Arc::new(AtomicU64::new(0));
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let (w, v) = (w.clone(), v.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let _h = lock(&w, u64::MAX).unwrap();
                        let x = v.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        v.store(x + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(v.load(Ordering::Relaxed), 80_000);
    }
}
