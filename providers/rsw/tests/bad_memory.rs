//! Registrations checked as the kernel checks them, and memory that
//! vanishes after registration: no remote operation may crash the target;
//! the worst case is an error completion.

mod common;

use std::os::raw::c_void;
use std::ptr::null_mut;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

const ALL: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;
const MAP: usize = 64 * 1024;

fn reg(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: u32) -> Result<*mut ibv_mr, i32> {
    // SAFETY: pd is live; the provider checks the range.
    let mr = unsafe { OPS.reg_mr.unwrap()(pd, addr, len, addr as u64, access) };
    if mr.is_null() {
        Err(errno())
    } else {
        Ok(mr)
    }
}

fn dereg(mr: *mut ibv_mr) -> i32 {
    // SAFETY: the provider validates the pointer before using it.
    unsafe { OPS.dereg_mr.unwrap()(mr) }
}

fn map(len: usize, prot: i32) -> *mut u8 {
    // SAFETY: an anonymous private mapping; checked below.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: p..p+len is a mapping of ours.
    assert_eq!(unsafe { libc::munmap(p.cast(), len) }, 0);
}

/// Unmaps registered memory, then keeps its addresses from being handed
/// to anyone else (another test thread's mmap, a malloc arena) by an
/// inaccessible placeholder, so the range stays a hole for the test.
/// False when another thread took the range in between.
fn vanish(p: *mut u8, len: usize) -> bool {
    unmap(p, len);
    // SAFETY: claims the just-freed range, refusing to replace anything.
    let q = unsafe {
        libc::mmap(
            p.cast(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    q == p.cast()
}

/// An MR over memory unmapped right after its registration: its address
/// and the MR. Retries when another thread maps into the hole before the
/// placeholder takes it (then the MR is over someone else's memory).
fn vanished_mr(pd: *mut ibv_pd) -> (*mut u8, *mut ibv_mr) {
    for _ in 0..10 {
        let m = map(MAP, libc::PROT_READ | libc::PROT_WRITE);
        let mr = reg(pd, m.cast(), MAP, ALL).unwrap();
        if vanish(m, MAP) {
            return (m, mr);
        }
        assert_eq!(dereg(mr), 0);
    }
    panic!("the unmapped range was reused by another thread every time");
}

/// Whether no page of the range is mapped.
fn is_hole(p: *mut u8, len: usize) -> bool {
    let mut vec = vec![0u8; len.div_ceil(4096)];
    (0..len).step_by(4096).all(|off| {
        // SAFETY: asks about one page; vec has room for its answer.
        let r = unsafe { libc::mincore(p.add(off).cast(), 1, vec.as_mut_ptr()) };
        r != 0 && errno() == libc::ENOMEM
    })
}

/// Registering `[p, p+len)`, whose end at least is a hole we just made,
/// fails with EFAULT. Another thread of this process may map something
/// into the hole meanwhile; a success then is no verdict, and the caller's
/// check is simply not made (reported), rather than failing wrongly.
fn expect_efault_on_hole(pd: *mut ibv_pd, p: *mut u8, len: usize) {
    match reg(pd, p.cast(), len, ALL) {
        Err(e) => assert_eq!(e, libc::EFAULT),
        Ok(mr) => {
            assert_eq!(dereg(mr), 0);
            // SAFETY: the last page of the range, which we unmapped.
            let tail = unsafe { p.add(len - 4096) };
            assert!(!is_hole(tail, 4096), "an unmapped range was registered");
            eprintln!("note: the hole at {p:p} was reused by another thread; not checked");
        }
    }
}

#[test]
fn registrations_are_checked_like_the_kernel() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let mut buf = vec![0u8; 4096];
    let p = buf.as_mut_ptr().cast::<c_void>();
    assert_eq!(reg(pd, null_mut(), 4096, ALL).err(), Some(libc::EFAULT));
    assert_eq!(reg(pd, p, 0, ALL).err(), Some(libc::EINVAL));
    assert_eq!(reg(pd, p, 1 << 46, ALL).err(), Some(libc::EFAULT));
    // Far above where mmap places anything, far below the stack.
    let nowhere = (1usize << 45) as *mut c_void;
    assert!(is_hole(nowhere.cast(), MAP));
    assert_eq!(reg(pd, nowhere, MAP, ALL).err(), Some(libc::EFAULT));
    let gone = map(MAP, libc::PROT_READ | libc::PROT_WRITE);
    unmap(gone, MAP);
    expect_efault_on_hole(pd, gone, MAP);
    // Read-only memory: only registrations we never store into.
    let ro = map(MAP, libc::PROT_READ);
    assert_eq!(
        reg(pd, ro.cast(), MAP, IBV_ACCESS_LOCAL_WRITE).err(),
        Some(libc::EFAULT)
    );
    let mr = reg(pd, ro.cast(), MAP, IBV_ACCESS_REMOTE_READ).expect("read-only for reading");
    assert_eq!(dereg(mr), 0);
    unmap(ro, MAP);
    // No access at all.
    let none = map(MAP, libc::PROT_NONE);
    assert_eq!(reg(pd, none.cast(), MAP, 0).err(), Some(libc::EFAULT));
    unmap(none, MAP);
    // A range that runs off the end of a mapping.
    let half = map(2 * 4096, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: the second page of our two-page mapping.
    let second = unsafe { half.add(4096) };
    unmap(second, 4096);
    expect_efault_on_hole(pd, half, 2 * 4096);
    let mr = reg(pd, half.cast(), 4096, ALL).expect("the mapped page");
    assert_eq!(dereg(mr), 0);
    unmap(half, 4096);
    // The buffer itself is fine.
    let mr = reg(pd, p, 4096, ALL).expect("heap buffer");
    assert_eq!(dereg(mr), 0);
}

#[test]
fn second_dereg_is_einval() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let mut buf = vec![0u8; 256];
    let mr = reg(pd, buf.as_mut_ptr().cast(), 256, ALL).unwrap();
    assert_eq!(dereg(mr), 0);
    assert_eq!(dereg(mr), libc::EINVAL);
    assert_eq!(dereg(0x1000 as *mut ibv_mr), libc::EINVAL);
}

/// A target MR over a mapping that is unmapped right after registration.
struct Vanished {
    p: Pair,
    mr: *mut ibv_mr,
    addr: u64,
}

impl Vanished {
    fn new() -> Vanished {
        let p = Pair::new();
        let (m, mr) = vanished_mr(p.pd);
        Vanished {
            p,
            mr,
            addr: m as u64,
        }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }

    /// Posts `wr` from a; returns its completion status.
    fn run(&self, mut wr: ibv_send_wr) -> ibv_wc_status {
        assert_eq!(post_send(self.p.a, &mut wr), 0);
        let w = wait_wc(self.p.cq_a);
        assert_eq!(w.wr_id, wr.wr_id);
        w.status
    }
}

/// After the damage: the process is alive and its progress thread works.
fn still_serving() {
    let p = Pair::new();
    let mut src = p.buf(64);
    let dst = p.buf(64);
    src.bytes_mut().fill(0x5a);
    let mut sg = [src.sge(0, 64)];
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr(),
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert!(dst.snapshot().iter().all(|&b| b == 0x5a));
}

#[test]
fn remote_write_into_unmapped_memory() {
    let v = Vanished::new();
    let src = v.p.buf(8192);
    let mut sg = [src.sge(0, 8192)];
    let mut w = send_wr(3, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: v.addr,
        rkey: v.rkey(),
    };
    assert_eq!(v.run(w), IBV_WC_REM_ACCESS_ERR);
    assert_eq!(qp_state(v.p.b), IBV_QPS_ERR);
    // A WRITE small enough to land after its ACK (the last bytes of every
    // message are placed then): acknowledged, as hardware writing into
    // pinned pages would, and dropped without harm.
    let v = Vanished::new();
    let src = v.p.buf(16);
    let mut sg = [src.sge(0, 16)];
    let mut w = send_wr(4, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: v.addr,
        rkey: v.rkey(),
    };
    assert_eq!(v.run(w), IBV_WC_SUCCESS);
    still_serving();
}

#[test]
fn atomics_on_unmapped_memory() {
    for op in [IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD] {
        let v = Vanished::new();
        let res = v.p.buf(8);
        let mut sg = [res.sge(0, 8)];
        let mut w = send_wr(5, op, &mut sg, IBV_SEND_SIGNALED);
        w.wr.atomic = ibv_send_wr_atomic {
            remote_addr: v.addr + 64,
            compare_add: 0,
            swap: 1,
            rkey: v.rkey(),
        };
        assert_eq!(v.run(w), IBV_WC_REM_ACCESS_ERR);
        assert_eq!(qp_state(v.p.b), IBV_QPS_ERR);
    }
    still_serving();
}

#[test]
fn read_from_unmapped_memory() {
    let v = Vanished::new();
    let dst = v.p.buf(8192);
    let mut sg = [dst.sge(0, 8192)];
    let mut w = send_wr(6, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: v.addr,
        rkey: v.rkey(),
    };
    // Part of the response may be out when the fault comes, so the
    // responder can only end the connection: the READ fails as if the
    // peer were lost, and the responder reports an access error.
    assert_eq!(v.run(w), IBV_WC_RETRY_EXC_ERR);
    assert!(wait_until(|| qp_state(v.p.b) == IBV_QPS_ERR));
    let mut ev = get_async(v.p.c.ctx).expect("async event");
    assert_eq!(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    ack_async(&mut ev);
    still_serving();
}

/// A SEND of `len` bytes into a receive buffer whose pages are gone: the
/// receive completes with a protection error; the requester's status is
/// returned.
fn send_into_unmapped(len: u32) -> ibv_wc_status {
    let v = Vanished::new();
    let mut rsg = [ibv_sge {
        addr: v.addr,
        length: len,
        // SAFETY: a live MR.
        lkey: unsafe { (*v.mr).lkey },
    }];
    assert_eq!(post_recv(v.p.b, 9, &mut rsg), 0);
    let src = v.p.buf(len as usize);
    let mut sg = [src.sge(0, len)];
    let w = send_wr(7, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    let status = v.run(w);
    let r = wait_wc(v.p.cq_b);
    assert_eq!((r.wr_id, r.status), (9, IBV_WC_LOC_PROT_ERR));
    still_serving();
    status
}

#[test]
fn send_into_an_unmapped_receive_buffer() {
    // The requester learns of the remote failure.
    assert_eq!(send_into_unmapped(8192), IBV_WC_REM_OP_ERR);
}

/// A message no longer than the responder's tail (its last 64 bytes are
/// placed after the header is checked, under the same look at the key
/// table) fails the same way as a long one over TCP. On the same-host
/// path a SEND this short travels inside the receiver's completion slot
/// and the receiver places it, after the requester's completion: there
/// the requester reports success (the README's support table says so).
#[test]
fn short_send_into_an_unmapped_receive_buffer() {
    let status = send_into_unmapped(32);
    if std::env::var("RSW_TRANSPORT").is_ok_and(|t| t == "tcp") {
        assert_eq!(status, IBV_WC_REM_OP_ERR);
    } else {
        assert!(
            status == IBV_WC_REM_OP_ERR || status == IBV_WC_SUCCESS,
            "requester status {status}"
        );
    }
}

#[test]
fn local_buffers_that_vanish() {
    // A SEND gathering from unmapped memory fails locally.
    let p = Pair::new();
    let (m, mr) = vanished_mr(p.pd);
    let dst = p.buf(8192);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 8192)]), 0);
    let mut sg = [ibv_sge {
        addr: m as u64,
        length: 8192,
        // SAFETY: a live MR.
        lkey: unsafe { (*mr).lkey },
    }];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_LOC_PROT_ERR);

    // A READ and an atomic whose results land in unmapped memory.
    let p = Pair::new();
    let (m, mr) = vanished_mr(p.pd);
    let src = p.buf(8192);
    let mut sg = [ibv_sge {
        addr: m as u64,
        length: 8192,
        // SAFETY: a live MR.
        lkey: unsafe { (*mr).lkey },
    }];
    let mut w = send_wr(3, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: src.addr(),
        rkey: src.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_LOC_PROT_ERR);

    let p = Pair::new();
    let (m, mr) = vanished_mr(p.pd);
    let target = p.buf(64);
    let mut sg = [ibv_sge {
        addr: m as u64,
        length: 8,
        // SAFETY: a live MR.
        lkey: unsafe { (*mr).lkey },
    }];
    let mut w = send_wr(4, IBV_WR_ATOMIC_FETCH_AND_ADD, &mut sg, IBV_SEND_SIGNALED);
    w.wr.atomic = ibv_send_wr_atomic {
        remote_addr: target.addr(),
        compare_add: 1,
        swap: 0,
        rkey: target.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_LOC_PROT_ERR);
    still_serving();
}

/// Over the same-host path too (up after a first exchange): a SEND that
/// gathers from memory unmapped since its registration fails locally, and
/// the peer keeps the receive it would have taken.
#[test]
fn a_vanished_gather_spares_the_peer_receive() {
    let p = Pair::new();
    let a = p.buf(64);
    let b = p.buf(64);
    assert_eq!(post_recv(p.b, 1, &mut [b.sge(0, 64)]), 0);
    let mut sg = [a.sge(0, 8)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert_eq!(wait_wc(p.cq_b).status, IBV_WC_SUCCESS);

    let (m, mr) = vanished_mr(p.pd);
    let dst = p.buf(8192);
    assert_eq!(post_recv(p.b, 2, &mut [dst.sge(0, 8192)]), 0);
    let mut sg = [ibv_sge {
        addr: m as u64,
        length: 8192,
        // SAFETY: a live MR.
        lkey: unsafe { (*mr).lkey },
    }];
    let mut w = send_wr(3, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!((wc.status, wc.wr_id), (IBV_WC_LOC_PROT_ERR, 3));
    // Nothing reached the peer: its receive is still posted.
    assert_no_wc(p.cq_b, std::time::Duration::from_millis(50));
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
}
