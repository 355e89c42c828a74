//! The spin lock each queue is guarded by, as rxe's C provider guards its
//! queues with a `pthread_spinlock_t`: the critical sections are a few
//! stores into a ring, so a waiter spins instead of sleeping.
//!
//! Two verbs families hold a lock across calls: `ibv_wr_start` locks the
//! send queue and `ibv_wr_complete`/`ibv_wr_abort` unlock it, and
//! `ibv_start_poll` locks a CQ that `ibv_end_poll` unlocks. For them the
//! lock has a guard-less [`SpinLock::acquire`]/[`SpinLock::release`] pair
//! and [`SpinLock::held`], the data seen by the thread that holds it.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

pub struct SpinLock<T> {
    locked: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: the data is only reached by the thread holding the lock (a guard,
// or the acquire/release contract), so sharing the lock shares `T` between
// threads one at a time, which `T: Send` allows.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: owning the lock owns the data.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(data: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Takes the lock until the guard drops.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        self.acquire();
        SpinGuard { lock: self }
    }

    /// Takes the lock with no guard: the caller releases it with
    /// [`SpinLock::release`], possibly in another verb call.
    #[inline]
    pub fn acquire(&self) {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Wait reading, not writing, so the holder's cache line stays
            // put until it lets go.
            while self.locked.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        }
    }

    /// Gives the lock up.
    ///
    /// # Safety
    /// The calling thread holds the lock through [`SpinLock::acquire`] and
    /// no reference from [`SpinLock::held`] outlives this call.
    #[inline]
    pub unsafe fn release(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// The data, for the thread that holds the lock without a guard.
    ///
    /// # Safety
    /// The calling thread holds the lock through [`SpinLock::acquire`], and
    /// the reference is dropped before [`SpinLock::release`] and before any
    /// other reference to the data is made.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn held(&self) -> &mut T {
        // SAFETY: per the contract, this thread has exclusive access.
        unsafe { &mut *self.data.get() }
    }

    /// The data through exclusive access to the lock itself (creation,
    /// destruction: no other thread can see the object).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, and `&mut self` makes this the
        // only reference made through it.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard acquired the lock; no reference through it
        // outlives it.
        unsafe { self.lock.release() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_other_threads() {
        let lock = std::sync::Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn held_across_calls() {
        let lock = SpinLock::new(5u32);
        lock.acquire();
        // SAFETY: acquired above, released below, reference dropped first.
        unsafe { *lock.held() += 1 };
        // SAFETY: as above.
        unsafe { lock.release() };
        assert_eq!(*lock.lock(), 6);
    }
}
