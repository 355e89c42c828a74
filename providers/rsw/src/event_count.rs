//! How many of one object's events were handed to the application and
//! how many it acknowledged: destroying the object waits for the two to
//! match (as the verbs API documents), and the misuse checker asks.

use parking_lot::{Condvar, Mutex};

/// Counts events handed to the application and acknowledgements received,
/// so destroying the object can wait for the two to match.
#[derive(Default)]
pub struct EventCounter {
    counts: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl EventCounter {
    pub fn delivered(&self) {
        self.counts.lock().0 += 1;
    }

    pub fn acked(&self, n: u64) {
        let mut c = self.counts.lock();
        c.1 += n;
        self.cv.notify_all();
    }

    pub fn acked_total(&self) -> u64 {
        self.counts.lock().1
    }

    /// Delivered events not acknowledged yet.
    pub fn unacked(&self) -> u64 {
        let c = self.counts.lock();
        c.0.saturating_sub(c.1)
    }

    /// Waits up to `d` for every delivered event to be acknowledged (the
    /// misuse checker's grace before it calls a destroy hopeless); true
    /// when they all are.
    pub fn wait_acked_for(&self, d: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + d;
        let mut c = self.counts.lock();
        while c.1 < c.0 {
            if self.cv.wait_until(&mut c, end).timed_out() {
                return c.1 >= c.0;
            }
        }
        true
    }

    /// Blocks until every delivered event is acknowledged (without a bound,
    /// as documented for ibv_destroy_cq / ibv_destroy_qp).
    pub fn wait_all_acked(&self) {
        let mut c = self.counts.lock();
        while c.1 < c.0 {
            self.cv.wait(&mut c);
        }
    }
}
