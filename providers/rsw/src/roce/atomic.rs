//! RC atomics over RoCEv2, pure: which operation a request is, and the
//! responder's memory of the atomics it executed, so that a request sent
//! again (its response was lost) is answered with the value it first
//! returned instead of running twice (IBA 9.7.5.1.3; rxe keeps such a
//! list of responses too).

/// Which atomic a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicOp {
    CmpSwap,
    FetchAdd,
}

/// An atomic executed: its PSN, the value it found, the MSN its answer
/// carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Done {
    pub(crate) psn: u32,
    pub(crate) orig: u64,
    pub(crate) msn: u32,
}

/// The last [`Replay::DEPTH`] atomics executed. A requester has at most
/// `max_rd_atomic` (16 at most in rsw, rxe, most NICs) outstanding, so a
/// request sent again is among them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Replay {
    ring: std::collections::VecDeque<Done>,
}

impl Replay {
    pub(crate) const DEPTH: usize = 16;

    pub(crate) fn record(&mut self, d: Done) {
        if self.ring.len() == Self::DEPTH {
            self.ring.pop_front();
        }
        self.ring.push_back(d);
    }

    /// The atomic executed at `psn`, if still remembered.
    pub(crate) fn find(&self, psn: u32) -> Option<Done> {
        self.ring.iter().rev().find(|d| d.psn == psn).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_keeps_the_last_depth_and_finds_by_psn() {
        let mut r = Replay::default();
        assert_eq!(r.find(0), None);
        for i in 0..Replay::DEPTH as u32 + 4 {
            r.record(Done {
                psn: (0xff_fff0 + i) & 0xff_ffff,
                orig: i as u64 * 10,
                msn: i,
            });
        }
        // The 4 oldest are gone; the rest answer, across the PSN wrap.
        for i in 0..4u32 {
            assert_eq!(r.find(0xff_fff0 + i), None);
        }
        let d = r.find(3).expect("PSN 0xfffff0 + 19 wrapped to 3");
        assert_eq!((d.orig, d.msn), (190, 19));
        assert_eq!(r.find(0xff_fff4).map(|d| d.orig), Some(40));
        assert_eq!(r.find(4), None);
    }
}
