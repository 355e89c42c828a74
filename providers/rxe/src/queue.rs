//! A ring the kernel shares with us through an mmap of the command file:
//! `struct rxe_queue_buf` (the element size, the index mask, and the
//! producer and consumer indices on cache lines of their own), then the
//! elements. We produce into the send, receive and SRQ rings and the
//! kernel consumes; the kernel produces into a CQ and we consume.
//!
//! Indices are stored masked: slot `i` is at `data + (i << log2_elem_size)`
//! and one slot always stays empty, so `producer == consumer` is empty and
//! `consumer == producer + 1` is full. The side that fills a slot
//! publishes it with a release store of its index, and the other side reads
//! that index with an acquire load before it touches the slot.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use verbs_abi::uverbs::{mminfo, rxe_queue_buf};

/// Where the elements start.
pub const DATA_OFFSET: usize = size_of::<rxe_queue_buf>();

/// The index after `i`.
#[inline]
pub fn next(i: u32, mask: u32) -> u32 {
    i.wrapping_add(1) & mask
}

/// The index before `i` (the element a `ibv_wr_set_*` call amends).
#[inline]
pub fn prev(i: u32, mask: u32) -> u32 {
    i.wrapping_sub(1) & mask
}

/// Whether a ring holds nothing to consume.
#[inline]
pub fn is_empty(prod: u32, cons: u32) -> bool {
    prod == cons
}

/// Whether the producer may not fill slot `prod`.
#[inline]
pub fn is_full(prod: u32, cons: u32, mask: u32) -> bool {
    cons == next(prod, mask)
}

/// Byte offset of slot `i` from the start of the elements.
#[inline]
pub fn slot_offset(i: u32, mask: u32, log2_elem_size: u32) -> usize {
    ((i & mask) as usize) << log2_elem_size
}

/// One mapped ring.
pub struct Queue {
    base: NonNull<u8>,
    /// Bytes mapped; 0 for memory we do not own (tests).
    map_len: usize,
    mask: u32,
    log2: u32,
}

// SAFETY: the mapping is process-wide memory; a Queue is only reached
// under its owner's lock.
unsafe impl Send for Queue {}

impl Queue {
    /// Maps the ring the kernel described in `mi` from the command file.
    pub fn map(cmd_fd: c_int, mi: &mminfo) -> Result<Queue, c_int> {
        let len = mi.size as usize;
        if len < DATA_OFFSET {
            return Err(libc::EINVAL);
        }
        // SAFETY: a fresh shared mapping of the device file; the kernel
        // checks the offset and the size against the queue it made.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                cmd_fd,
                mi.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(verbs_rt::errno::errno());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or(libc::ENOMEM)?;
        // SAFETY: the header lies inside the mapping (len >= DATA_OFFSET);
        // the kernel wrote it before returning the command.
        let (log2, mask) = unsafe {
            let h = base.as_ptr().cast::<rxe_queue_buf>();
            ((*h).log2_elem_size, (*h).index_mask)
        };
        // SAFETY: the mapping covers what `checked` reads about it.
        unsafe { Queue::checked(base, len, len, mask, log2) }
    }

    /// A ring over memory laid out as the kernel lays it out.
    ///
    /// # Safety
    /// `base` is 8-byte aligned and `mem_len` bytes from it stay valid, and
    /// reached by no one else as Rust memory, while the Queue lives; the
    /// Queue unmaps `map_len` bytes at drop when it is not 0.
    unsafe fn checked(
        base: NonNull<u8>,
        mem_len: usize,
        map_len: usize,
        mask: u32,
        log2: u32,
    ) -> Result<Queue, c_int> {
        let q = Queue {
            base,
            map_len,
            mask,
            log2,
        };
        // The elements must fit the memory, and each must be a whole
        // number of 8-byte words (slots are seen as `[u64]`).
        let fits = (3..24).contains(&log2)
            && mask.checked_add(1).is_some_and(u32::is_power_of_two)
            && ((mask as usize + 1) << log2)
                .checked_add(DATA_OFFSET)
                .is_some_and(|need| need <= mem_len)
            && (base.as_ptr() as usize).is_multiple_of(8);
        if fits {
            Ok(q)
        } else {
            Err(libc::EINVAL)
        }
    }

    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        1 << self.log2
    }

    fn index(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: offset is that of one of the header's u32 indices, inside
        // the mapping and 4-byte aligned; the kernel reads and writes them
        // only as whole 32-bit values.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(offset).cast::<u32>()) }
    }

    fn producer(&self) -> &AtomicU32 {
        self.index(core::mem::offset_of!(rxe_queue_buf, producer_index))
    }

    fn consumer(&self) -> &AtomicU32 {
        self.index(core::mem::offset_of!(rxe_queue_buf, consumer_index))
    }

    // ---- as the producer (send, receive, SRQ rings) ----

    /// Our own producer index (only we move it).
    #[inline]
    pub fn prod(&self) -> u32 {
        self.producer().load(Ordering::Relaxed)
    }

    /// Whether slot `prod` may not be filled: the kernel has not consumed
    /// the one after it yet.
    #[inline]
    pub fn full_at(&self, prod: u32) -> bool {
        is_full(prod, self.consumer().load(Ordering::Acquire), self.mask)
    }

    /// Hands every slot before `prod` to the kernel.
    #[inline]
    pub fn publish(&self, prod: u32) {
        self.producer().store(prod & self.mask, Ordering::Release);
    }

    // ---- as the consumer (CQ) ----

    /// Our own consumer index (only we move it).
    #[inline]
    pub fn cons(&self) -> u32 {
        self.consumer().load(Ordering::Relaxed)
    }

    /// The kernel's producer index; slots before it are filled.
    #[inline]
    pub fn filled_up_to(&self) -> u32 {
        self.producer().load(Ordering::Acquire)
    }

    /// Gives every slot before `cons` back to the kernel.
    #[inline]
    pub fn release(&self, cons: u32) {
        self.consumer().store(cons & self.mask, Ordering::Release);
    }

    /// Slot `i`'s address.
    #[inline]
    pub fn slot_ptr(&self, i: u32) -> *mut u64 {
        // SAFETY: the offset is below the element area's size (masked
        // index), which `checked` found inside the mapping.
        unsafe {
            self.base
                .as_ptr()
                .add(DATA_OFFSET + slot_offset(i, self.mask, self.log2))
                .cast::<u64>()
        }
    }

    /// Slot `i` as words.
    ///
    /// # Safety
    /// The slot is ours: as producer, at or after our producer index and
    /// before the kernel's consumer index; as consumer, published by the
    /// kernel and not yet released. No other reference to it is live.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot(&self, i: u32) -> &mut [u64] {
        // SAFETY: per the contract; the slot is 8-byte aligned and
        // elem_size bytes long inside the mapping (`checked`).
        unsafe { core::slice::from_raw_parts_mut(self.slot_ptr(i), self.elem_size() / 8) }
    }
}

#[cfg(test)]
impl Queue {
    /// A second view of the same ring that never unmaps it.
    ///
    /// # Safety
    /// The ring's memory outlives the view.
    pub unsafe fn alias(&self) -> Queue {
        Queue {
            base: self.base,
            map_len: 0,
            mask: self.mask,
            log2: self.log2,
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if self.map_len != 0 {
            // SAFETY: our own mapping, unmapped once; nothing refers to it
            // after the owner dropped the queue.
            unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
        }
    }
}

/// A ring in ordinary memory, laid out as the kernel lays one out, for the
/// tests of what is written into and read from the slots.
#[cfg(test)]
pub struct TestRing {
    mem: Vec<u64>,
    pub queue: Queue,
}

#[cfg(test)]
impl TestRing {
    pub fn new(slots: u32, log2_elem_size: u32) -> TestRing {
        let bytes = DATA_OFFSET + ((slots as usize) << log2_elem_size);
        let mut mem = vec![0u64; bytes / 8];
        // SAFETY: the header fits the buffer.
        unsafe {
            let h = mem.as_mut_ptr().cast::<rxe_queue_buf>();
            (*h).log2_elem_size = log2_elem_size;
            (*h).index_mask = slots - 1;
        }
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the Vec's heap buffer does not move while it lives in
        // the TestRing beside the Queue; map_len 0 leaves it unmapped.
        let queue = unsafe { Queue::checked(base, bytes, 0, slots - 1, log2_elem_size) }.unwrap();
        TestRing { mem, queue }
    }

    /// The kernel's side: sets the index it owns.
    pub fn kernel_sets(&mut self, producer: Option<u32>, consumer: Option<u32>) {
        let h = self.mem.as_mut_ptr().cast::<rxe_queue_buf>();
        // SAFETY: the header lies in the buffer.
        unsafe {
            if let Some(p) = producer {
                (*h).producer_index = p;
            }
            if let Some(c) = consumer {
                (*h).consumer_index = c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_three_cache_lines() {
        assert_eq!(DATA_OFFSET, 384);
        assert_eq!(core::mem::offset_of!(rxe_queue_buf, producer_index), 128);
        assert_eq!(core::mem::offset_of!(rxe_queue_buf, consumer_index), 256);
    }

    #[test]
    fn index_arithmetic_wraps_at_the_mask() {
        assert_eq!(next(0, 7), 1);
        assert_eq!(next(7, 7), 0);
        assert_eq!(prev(0, 7), 7);
        assert_eq!(prev(5, 7), 4);
        assert!(is_empty(3, 3));
        assert!(!is_empty(4, 3));
        // One slot stays free: 7 filled of 8 is full.
        assert!(is_full(6, 7, 7));
        assert!(is_full(7, 0, 7));
        assert!(!is_full(5, 7, 7));
        assert!(!is_full(0, 0, 7));
        assert_eq!(slot_offset(9, 7, 6), 64);
        assert_eq!(slot_offset(3, 7, 8), 768);
    }

    #[test]
    fn producer_fills_until_one_slot_is_left() {
        let mut r = TestRing::new(4, 6);
        let q = &r.queue;
        let mut prod = q.prod();
        let mut filled = 0;
        while !q.full_at(prod) {
            prod = next(prod, q.mask());
            filled += 1;
        }
        assert_eq!(filled, 3);
        q.publish(prod);
        assert_eq!(q.prod(), 3);
        // The kernel consumes two; two more fit.
        r.kernel_sets(None, Some(2));
        let q = &r.queue;
        assert!(!q.full_at(3));
        assert!(!q.full_at(0));
        assert!(q.full_at(1));
    }

    #[test]
    fn consumer_sees_what_the_kernel_filled() {
        let mut r = TestRing::new(8, 7);
        assert!(is_empty(r.queue.filled_up_to(), r.queue.cons()));
        r.kernel_sets(Some(2), None);
        let q = &r.queue;
        assert_eq!(q.filled_up_to(), 2);
        q.release(next(q.cons(), q.mask()));
        assert_eq!(q.cons(), 1);
        assert_eq!(q.slot_ptr(1) as usize - q.slot_ptr(0) as usize, 128);
        assert_eq!(q.slot_ptr(9), q.slot_ptr(1));
    }

    #[test]
    fn rejects_a_header_that_overruns_the_mapping() {
        let mut mem = vec![0u64; (DATA_OFFSET + 4 * 64) / 8];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the buffer outlives the attempts; nothing is unmapped.
        unsafe {
            assert!(Queue::checked(base, mem.len() * 8, 0, 3, 6).is_ok());
            assert_eq!(
                Queue::checked(base, mem.len() * 8, 0, 7, 6).err(),
                Some(libc::EINVAL)
            );
            assert_eq!(
                Queue::checked(base, mem.len() * 8, 0, 2, 6).err(),
                Some(libc::EINVAL)
            );
            assert_eq!(
                Queue::checked(base, mem.len() * 8, 0, 3, 2).err(),
                Some(libc::EINVAL)
            );
        }
    }
}
