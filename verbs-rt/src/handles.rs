//! The one table type for objects handed to C callers.
//!
//! Applications hold raw pointers; a stale one (destroyed, deregistered) or
//! one that was never ours must get EINVAL, not a read of freed memory. So
//! every object a library hands out is entered here by the address the
//! application holds, and the first layer that would read through such a
//! pointer looks it up instead. Removing the entry first is what makes a
//! second or racing destroy fail. A forked child starts with empty tables
//! ([`ForkFresh`]).

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::fork::ForkFresh;

/// Live objects of one kind: application pointer -> `V`.
pub struct Handles<V: 'static> {
    map: ForkFresh<Mutex<HashMap<usize, V>>>,
}

fn empty<V>() -> Mutex<HashMap<usize, V>> {
    Mutex::new(HashMap::new())
}

impl<V: Clone + 'static> Handles<V> {
    pub const fn new() -> Handles<V> {
        Handles {
            map: ForkFresh::new(empty::<V>),
        }
    }

    pub fn insert<T>(&self, p: *const T, v: V) {
        self.map.get().lock().insert(p as usize, v);
    }

    pub fn get<T>(&self, p: *const T) -> Option<V> {
        self.map.get().lock().get(&(p as usize)).cloned()
    }

    /// How many live objects of this kind the process holds (for the
    /// limits `ibv_query_device` reports).
    pub fn len(&self) -> usize {
        self.map.get().lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// ENOMEM once `max` objects exist: the device's limit holds.
    pub fn room_for_one(&self, max: u32) -> Result<(), i32> {
        if self.len() >= max as usize {
            Err(libc::ENOMEM)
        } else {
            Ok(())
        }
    }

    /// The first entry `pred` accepts (a scan: for rare lookups by
    /// something other than the pointer).
    pub fn find(&self, pred: impl Fn(&V) -> bool) -> Option<V> {
        self.map.get().lock().values().find(|v| pred(v)).cloned()
    }

    /// Every live entry (a copy: for reports that walk all objects).
    pub fn values(&self) -> Vec<V> {
        self.map.get().lock().values().cloned().collect()
    }

    /// Every live entry (a snapshot, for the misuse checker's scans and
    /// exit summary).
    pub fn entries(&self) -> Vec<(usize, V)> {
        let m = self.map.get().lock();
        m.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    pub fn contains<T>(&self, p: *const T) -> bool {
        self.map.get().lock().contains_key(&(p as usize))
    }

    pub fn remove<T>(&self, p: *const T) -> Option<V> {
        self.map.get().lock().remove(&(p as usize))
    }

    /// Runs `f` with the table locked (tests: a fork while another thread
    /// holds the lock).
    #[doc(hidden)]
    pub fn with_locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let _g = self.map.get().lock();
        f()
    }

    /// Runs `check` on the entry under the table's lock; `Err(EINVAL)`
    /// when there is none. Destroy verbs use it to claim an object (a flag
    /// the check sets) while keeping it findable until they are done:
    /// acknowledging its events, which a destroy waits for, looks it up.
    pub fn claim<T>(
        &self,
        p: *const T,
        check: impl FnOnce(&V) -> Result<(), i32>,
    ) -> Result<V, i32> {
        let m = self.map.get().lock();
        let v = m.get(&(p as usize)).ok_or(libc::EINVAL)?;
        check(v)?;
        Ok(v.clone())
    }

    /// Removes the entry if `check` allows it (under the table's lock, so
    /// nothing can slip in between); `Err(EINVAL)` when there is none.
    pub fn remove_if<T>(
        &self,
        p: *const T,
        check: impl FnOnce(&V) -> Result<(), i32>,
    ) -> Result<V, i32> {
        let mut m = self.map.get().lock();
        let v = m.get(&(p as usize)).ok_or(libc::EINVAL)?;
        check(v)?;
        m.remove(&(p as usize)).ok_or(libc::EINVAL)
    }
}

impl<V: Clone + 'static> Default for Handles<V> {
    fn default() -> Self {
        Handles::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static T: Handles<u32> = Handles::new();

    #[test]
    fn lookups_by_address_and_checked_removal() {
        let (a, b) = (1u8, 2u8);
        T.insert(&a, 10);
        T.insert(&b, 20);
        assert_eq!(T.get(&a), Some(10));
        assert_eq!(T.len(), 2);
        assert_eq!(T.room_for_one(2), Err(libc::ENOMEM));
        assert_eq!(T.remove_if(&a, |_| Err(libc::EBUSY)), Err(libc::EBUSY));
        assert_eq!(T.remove_if(&a, |_| Ok(())), Ok(10));
        assert_eq!(T.remove_if(&a, |_| Ok(())), Err(libc::EINVAL));
        assert_eq!(T.get(&a), None);
        assert_eq!(T.find(|v| *v == 20), Some(20));
        assert_eq!(T.remove(&b), Some(20));
        assert!(T.is_empty());
    }
}
