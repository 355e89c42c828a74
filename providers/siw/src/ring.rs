//! The rings siw's queues are: arrays of elements in a mapping shared with
//! the kernel, where each element's `flags` word says whose it is. An SQE
//! or RQE is ours until we set `VALID` in it and the kernel's until it
//! clears the flags again; a CQE is the kernel's until it sets `VALID` and
//! ours until we clear it. Both sides walk a ring in order with a running
//! position taken modulo its length, so no index is ever exchanged.
//!
//! The body of an element is written and read with plain accesses, its
//! flags only atomically: the flag store that hands an element over comes
//! after the body (release), the flag load that takes one over comes
//! before reading it (acquire).

use core::ffi::c_int;
use core::marker::PhantomData;
use core::mem::{offset_of, size_of};
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicU16, AtomicU8, Ordering};

use verbs_abi::uverbs::{
    siw_cqe, siw_rqe, siw_sge, siw_sqe, SIW_MAX_SGE, SIW_WQE_INLINE, SIW_WQE_VALID,
};

use crate::mapping::Mapping;

/// An element's flags word, seen atomically.
pub trait Flag {
    fn get(&self, order: Ordering) -> u16;
    fn set(&self, v: u16, order: Ordering);
}

impl Flag for AtomicU16 {
    fn get(&self, order: Ordering) -> u16 {
        self.load(order)
    }
    fn set(&self, v: u16, order: Ordering) {
        self.store(v, order)
    }
}

impl Flag for AtomicU8 {
    fn get(&self, order: Ordering) -> u16 {
        u16::from(self.load(order))
    }
    fn set(&self, v: u16, order: Ordering) {
        self.store(v as u8, order)
    }
}

/// An element of a shared ring.
///
/// # Safety
/// `FLAGS` is the offset of the element's flags field, an integer of the
/// size and alignment of `Flag`; the element is plain data (any bytes are
/// a value of it).
pub unsafe trait Element: Copy {
    type Flag: Flag;
    const FLAGS: usize;

    /// Writes the element's body, everything but the flags word, to
    /// `dst`: what says something when published with `flags` (the rest
    /// of `dst` may keep what it held, if the kernel does not read it).
    ///
    /// # Safety
    /// `dst` is a whole element that is ours to write.
    unsafe fn write_body(&self, dst: *mut Self, flags: u16) {
        let _ = flags;
        let src = (self as *const Self).cast::<u8>();
        let dst = dst.cast::<u8>();
        let after = Self::FLAGS + size_of::<Self::Flag>();
        // SAFETY: per the contract; the flags word is skipped.
        unsafe {
            core::ptr::copy_nonoverlapping(src, dst, Self::FLAGS);
            core::ptr::copy_nonoverlapping(
                src.add(after),
                dst.add(after),
                size_of::<Self>() - after,
            );
        }
    }
}

/// How many SGEs of an element the kernel reads: `num_sge`, or all of
/// them with inline data (which occupies the SGE array).
fn sges_read(num_sge: u8, flags: u16) -> usize {
    if flags & SIW_WQE_INLINE != 0 {
        SIW_MAX_SGE
    } else {
        usize::from(num_sge).min(SIW_MAX_SGE)
    }
}

// SAFETY: `flags` is a u16 at that offset; the SQE is integers only.
unsafe impl Element for siw_sqe {
    type Flag = AtomicU16;
    const FLAGS: usize = offset_of!(siw_sqe, flags);

    /// Field by field, as rdma-core's siw fills an SQE: the header and the
    /// SGEs in use (one 16-byte store each, no copy call).
    unsafe fn write_body(&self, dst: *mut Self, flags: u16) {
        // SAFETY: per the contract; fields of `dst`, the flags excepted.
        unsafe {
            addr_of_mut!((*dst).id).write(self.id);
            addr_of_mut!((*dst).num_sge).write(self.num_sge);
            addr_of_mut!((*dst).opcode).write(self.opcode);
            addr_of_mut!((*dst).rkey).write(self.rkey);
            addr_of_mut!((*dst).raddr).write(self.raddr);
            // Volatile: one store pair per SGE, where a plain loop would be
            // turned into a call to memcpy (a third of a post's cost).
            let sge = addr_of_mut!((*dst).sge).cast::<siw_sge>();
            for (i, s) in self.sge[..sges_read(self.num_sge, flags)]
                .iter()
                .enumerate()
            {
                sge.add(i).write_volatile(*s);
            }
        }
    }
}

// SAFETY: as for the SQE.
unsafe impl Element for siw_rqe {
    type Flag = AtomicU16;
    const FLAGS: usize = offset_of!(siw_rqe, flags);

    /// The header and the SGEs in use.
    unsafe fn write_body(&self, dst: *mut Self, _flags: u16) {
        // SAFETY: per the contract; fields of `dst`, the flags excepted.
        unsafe {
            addr_of_mut!((*dst).id).write(self.id);
            addr_of_mut!((*dst).num_sge).write(self.num_sge);
            addr_of_mut!((*dst).opcode).write(self.opcode);
            addr_of_mut!((*dst).unused).write(self.unused);
            let sge = addr_of_mut!((*dst).sge).cast::<siw_sge>();
            for (i, s) in self.sge[..sges_read(self.num_sge, 0)].iter().enumerate() {
                sge.add(i).write_volatile(*s);
            }
        }
    }
}

// SAFETY: `flags` is a u8 at that offset; the CQE is integers only.
unsafe impl Element for siw_cqe {
    type Flag = AtomicU8;
    const FLAGS: usize = offset_of!(siw_cqe, flags);
}

/// `n` elements of type `T` at the start of a mapping.
#[derive(Debug)]
pub struct Ring<T> {
    map: Mapping,
    n: u32,
    /// `n - 1` when `n` is a power of two (the kernel makes it one), so a
    /// position is masked rather than divided; 0 otherwise.
    mask: u32,
    _t: PhantomData<T>,
}

impl<T: Element> Ring<T> {
    /// The ring of `n` elements at the start of `map`.
    pub fn new(map: Mapping, n: u32) -> Result<Self, c_int> {
        let bytes = (n as usize).checked_mul(size_of::<T>());
        if n == 0 || bytes.is_none_or(|b| b > map.len()) {
            return Err(libc::EINVAL);
        }
        Ok(Ring {
            map,
            n,
            mask: if n.is_power_of_two() { n - 1 } else { 0 },
            _t: PhantomData,
        })
    }

    /// Maps the kernel queue `key` of the command file `fd`: `n` elements
    /// and `extra` bytes after them.
    pub fn map(fd: c_int, key: u64, n: u32, extra: usize) -> Result<Self, c_int> {
        let len = (n as usize)
            .checked_mul(size_of::<T>())
            .and_then(|b| b.checked_add(extra))
            .ok_or(libc::EINVAL)?;
        Self::new(Mapping::new(fd, key, len)?, n)
    }

    /// How many elements the ring holds.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// The index of running position `pos` (`pos % n`).
    #[inline]
    fn index(&self, pos: u32) -> usize {
        if self.mask != 0 {
            (pos & self.mask) as usize
        } else {
            (pos % self.n) as usize
        }
    }

    /// The element at running position `pos`.
    #[inline]
    fn slot(&self, pos: u32) -> *mut T {
        // SAFETY: the index is below `n`, and the mapping holds `n`
        // elements (checked in `new`); the mapping is page aligned, so the
        // element is aligned.
        unsafe { self.map.as_ptr().cast::<T>().add(self.index(pos)) }
    }

    #[inline]
    fn flag(&self, pos: u32) -> &T::Flag {
        // SAFETY: the flags field of a live element (`Element`'s
        // contract), aligned for its atomic type; shared memory is only
        // ever accessed atomically at this address.
        unsafe { &*self.slot(pos).cast::<u8>().add(T::FLAGS).cast::<T::Flag>() }
    }

    /// The flags of the element at `pos`.
    #[inline]
    pub fn flags(&self, pos: u32, order: Ordering) -> u16 {
        self.flag(pos).get(order)
    }

    /// Whether the element at `pos` holds `VALID`: a work request the
    /// kernel has not taken yet, or a completion we have not taken yet.
    #[inline]
    pub fn is_valid(&self, pos: u32, order: Ordering) -> bool {
        self.flags(pos, order) & SIW_WQE_VALID != 0
    }

    /// Writes `value` into the element at `pos` and then hands it over
    /// with `flags`. The element must be ours (seen without `VALID`).
    ///
    /// The flag store is sequentially consistent, as rdma-core's: the
    /// doorbell decision that may follow reads another element's flags and
    /// must not be ordered before it (see `sq`).
    #[inline]
    pub fn publish(&self, pos: u32, value: &T, flags: u16) {
        // SAFETY: a whole element, ours until the store below; its flags
        // word is only ever written atomically (here, below).
        unsafe { value.write_body(self.slot(pos), flags) };
        self.flag(pos).set(flags, Ordering::SeqCst);
    }

    /// A copy of the element at `pos`, which must be ours to read (seen
    /// with `VALID`, acquired).
    #[inline]
    pub fn read(&self, pos: u32) -> T {
        // SAFETY: a whole element of plain data; the kernel does not write
        // it while its VALID bit is set.
        unsafe { self.slot(pos).read() }
    }

    /// Hands the element at `pos` back (clears its flags) once it has been
    /// read.
    #[inline]
    pub fn clear(&self, pos: u32) {
        self.flag(pos).set(0, Ordering::Release);
    }

    /// The first byte after the elements (siw's CQ control word).
    pub fn tail(&self) -> *mut u8 {
        // SAFETY: one past the last element, inside or at the end of the
        // mapping.
        unsafe { self.map.as_ptr().add(self.n as usize * size_of::<T>()) }
    }
}

/// A queue we post to (SQ, RQ, SRQ): its ring and our next position.
#[derive(Debug)]
pub struct Producer<T> {
    ring: Ring<T>,
    put: u32,
}

impl<T: Element> Producer<T> {
    pub fn new(ring: Ring<T>) -> Self {
        Producer { ring, put: 0 }
    }

    /// The running position of the next element to fill.
    pub fn put(&self) -> u32 {
        self.put
    }

    pub fn ring(&self) -> &Ring<T> {
        &self.ring
    }

    /// Fills the next element from `build` if the kernel has taken what
    /// was there before (else the queue is full: `ENOMEM`, as rdma-core).
    #[inline]
    pub fn push(&mut self, build: impl FnOnce() -> Result<(T, u16), c_int>) -> Result<(), c_int> {
        if self.ring.is_valid(self.put, Ordering::Acquire) {
            return Err(libc::ENOMEM);
        }
        let (value, flags) = build()?;
        self.ring.publish(self.put, &value, flags);
        self.put = self.put.wrapping_add(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_abi::uverbs::SIW_WQE_SIGNALLED;

    fn ring<T: Element>(n: u32, extra: usize) -> Ring<T> {
        Ring::new(Mapping::anonymous(n as usize * size_of::<T>() + extra), n).unwrap()
    }

    #[test]
    fn sizes_checked() {
        let m = Mapping::anonymous(4096);
        assert!(Ring::<siw_sqe>::new(m, 4096 / size_of::<siw_sqe>() as u32 + 1).is_err());
        assert!(Ring::<siw_sqe>::new(Mapping::anonymous(4096), 0).is_err());
        assert_eq!(ring::<siw_cqe>(8, 8).len(), 8);
    }

    #[test]
    fn producer_fills_in_order_and_stops_when_full() {
        let mut p = Producer::new(ring::<siw_sqe>(4, 0));
        for i in 0..4u64 {
            p.push(|| {
                Ok((
                    siw_sqe {
                        id: i,
                        ..Default::default()
                    },
                    SIW_WQE_VALID,
                ))
            })
            .unwrap();
        }
        // Full: the kernel has taken nothing yet.
        assert_eq!(
            p.push(|| panic!("not built when full")).err(),
            Some(libc::ENOMEM)
        );
        // The kernel takes element 0: position 4 is slot 0 again.
        p.ring().clear(0);
        p.push(|| {
            Ok((
                siw_sqe {
                    id: 9,
                    flags: 0xffff,
                    ..Default::default()
                },
                SIW_WQE_VALID | SIW_WQE_SIGNALLED,
            ))
        })
        .unwrap();
        let e = p.ring().read(4);
        assert_eq!(e.id, 9);
        // The flags are the ones published, never the value's.
        assert_eq!(e.flags, SIW_WQE_VALID | SIW_WQE_SIGNALLED);
        assert_eq!(p.ring().read(1).id, 1);
        assert_eq!(p.put(), 5);
    }

    #[test]
    fn only_what_is_used_is_written() {
        let r = ring::<siw_rqe>(2, 0);
        let old = siw_rqe {
            sge: [siw_sge {
                laddr: 7,
                length: 7,
                lkey: 7,
            }; SIW_MAX_SGE],
            num_sge: SIW_MAX_SGE as u8,
            ..Default::default()
        };
        r.publish(0, &old, 0);
        let mut new = siw_rqe {
            id: 1,
            num_sge: 1,
            ..Default::default()
        };
        new.sge[0].length = 4;
        r.publish(0, &new, SIW_WQE_VALID);
        let got = r.read(0);
        assert_eq!((got.id, got.num_sge, got.sge[0].length), (1, 1, 4));
        // The kernel reads one SGE; the others keep what they had.
        assert_eq!(got.sge[1].laddr, 7);
        assert_eq!(sges_read(2, SIW_WQE_VALID), 2);
        assert_eq!(sges_read(2, SIW_WQE_VALID | SIW_WQE_INLINE), SIW_MAX_SGE);
        assert_eq!(sges_read(200, SIW_WQE_VALID), SIW_MAX_SGE);
    }

    #[test]
    fn any_length_wraps() {
        let mut p = Producer::new(ring::<siw_rqe>(3, 0));
        for i in 0..3u64 {
            p.push(|| {
                Ok((
                    siw_rqe {
                        id: i,
                        ..Default::default()
                    },
                    SIW_WQE_VALID,
                ))
            })
            .unwrap();
        }
        p.ring().clear(0);
        p.push(|| {
            Ok((
                siw_rqe {
                    id: 3,
                    ..Default::default()
                },
                SIW_WQE_VALID,
            ))
        })
        .unwrap();
        assert_eq!(p.ring().read(0).id, 3);
        assert_eq!(p.ring().read(4).id, 1);
        assert_eq!(p.ring().index(u32::MAX), (u32::MAX % 3) as usize);
    }

    #[test]
    fn build_errors_leave_the_slot() {
        let mut p = Producer::new(ring::<siw_rqe>(2, 0));
        assert_eq!(p.push(|| Err(libc::EINVAL)).err(), Some(libc::EINVAL));
        assert_eq!(p.put(), 0);
        assert!(!p.ring().is_valid(0, Ordering::Relaxed));
    }

    #[test]
    fn completions_are_taken_and_returned() {
        let r = ring::<siw_cqe>(2, 8);
        assert!(!r.is_valid(0, Ordering::Acquire));
        // The kernel's side: body, then flags.
        r.publish(
            0,
            &siw_cqe {
                id: 5,
                bytes: 10,
                ..Default::default()
            },
            SIW_WQE_VALID,
        );
        assert!(r.is_valid(2, Ordering::Acquire));
        assert_eq!(r.read(0).bytes, 10);
        r.clear(0);
        assert!(!r.is_valid(0, Ordering::Acquire));
        assert_eq!(
            r.tail() as usize - r.slot(0) as usize,
            2 * size_of::<siw_cqe>()
        );
    }
}
