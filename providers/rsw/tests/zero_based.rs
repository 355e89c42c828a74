//! Zero-based addressing (`IBV_ACCESS_ZERO_BASED`): an MR registered so,
//! and a window bound so, are addressed by offset from their first byte,
//! from 0, by RDMA READ, WRITE and atomics; a zero-based MR's local SGEs
//! use offsets too (as device memory's do). Their virtual addresses are
//! outside that range and refused.

mod common;

use std::os::raw::c_void;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

const ALL: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Memory registered as `ibv_reg_mr` registers it (iova = its address),
/// with `access`.
struct Region {
    mem: Vec<u64>,
    mr: *mut ibv_mr,
}

impl Region {
    fn new(pd: *mut ibv_pd, len: usize, access: u32) -> Region {
        let mut mem = vec![0u64; len / 8];
        let p = mem.as_mut_ptr() as *mut c_void;
        // SAFETY: pd is live; the memory lives as long as the Region
        // (deregistered in drop).
        let mr = unsafe { OPS.reg_mr.unwrap()(pd, p, len, p as u64, access) };
        assert!(!mr.is_null(), "reg_mr: errno {}", errno());
        Region { mem, mr }
    }

    fn bytes(&self) -> Vec<u8> {
        let p = self.mem.as_ptr() as *const u8;
        let n = self.mem.len() * 8;
        // SAFETY: n bytes of our buffer; read volatile, the provider
        // writes it.
        (0..n)
            .map(|i| unsafe { std::ptr::read_volatile(p.add(i)) })
            .collect()
    }

    fn fill(&mut self, seed: u8) {
        let p = self.mem.as_mut_ptr() as *mut u8;
        for i in 0..self.mem.len() * 8 {
            // SAFETY: inside our buffer.
            unsafe { p.add(i).write(seed.wrapping_add((i * 13) as u8)) };
        }
    }

    fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    fn key(&self) -> u32 {
        // SAFETY: mr is live.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: mr is live; windows were deallocated by the tests.
        let r = unsafe { OPS.dereg_mr.unwrap()(self.mr) };
        if !std::thread::panicking() {
            assert_eq!(r, 0);
        }
    }
}

fn rdma(p: &Pair, op: ibv_wr_opcode, sge: ibv_sge, raddr: u64, rkey: u32) -> ibv_wc {
    let mut sg = [sge];
    let mut w = send_wr(9, op, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma.remote_addr = raddr;
    w.wr.rdma.rkey = rkey;
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!(wc.wr_id, 9);
    wc
}

fn sge(r: &Region, addr: u64, len: u32) -> ibv_sge {
    ibv_sge {
        addr,
        length: len,
        // SAFETY: mr is live.
        lkey: unsafe { (*r.mr).lkey },
    }
}

/// A zero-based MR: WRITE at offset 0 and at its last bytes, READ and a
/// fetch-and-add at offsets; its virtual address is out of range.
#[test]
fn zero_based_mr_from_offset_0() {
    let p = Pair::new();
    let mut src = Region::new(p.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    src.fill(5);
    let zb = Region::new(p.pd, 4096, ALL | IBV_ACCESS_ZERO_BASED);
    let s = src.bytes();

    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr(), 64),
        0,
        zb.key(),
    );
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 64)
    );
    assert_eq!(zb.bytes()[..64], s[..64]);
    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr() + 64, 64),
        4096 - 64,
        zb.key(),
    );
    assert_eq!(wc.status, IBV_WC_SUCCESS);
    assert_eq!(zb.bytes()[4096 - 64..], s[64..128]);

    let wc = rdma(
        &p,
        IBV_WR_RDMA_READ,
        sge(&src, src.addr() + 1024, 64),
        4096 - 64,
        zb.key(),
    );
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 64)
    );
    assert_eq!(src.bytes()[1024..1088], s[64..128]);

    let before = u64::from_ne_bytes(zb.bytes()[8..16].try_into().unwrap());
    let mut sg = [sge(&src, src.addr() + 2048, 8)];
    let mut w = atomic_wr(10, IBV_WR_ATOMIC_FETCH_AND_ADD, &mut sg, 8, zb.key(), 3, 0);
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!((wc.status, wc.opcode), (IBV_WC_SUCCESS, IBV_WC_FETCH_ADD));
    assert_eq!(src.bytes()[2048..2056], before.to_ne_bytes());
    assert_eq!(zb.bytes()[8..16], before.wrapping_add(3).to_ne_bytes());

    // Past the end: refused.
    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr(), 64),
        4096 - 32,
        zb.key(),
    );
    assert_eq!(wc.status, IBV_WC_REM_ACCESS_ERR);
}

/// The virtual address of a zero-based MR is no address of its key.
#[test]
fn zero_based_mr_refuses_its_virtual_address() {
    let p = Pair::new();
    let src = Region::new(p.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    let zb = Region::new(p.pd, 4096, ALL | IBV_ACCESS_ZERO_BASED);
    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr(), 64),
        zb.addr(),
        zb.key(),
    );
    assert_eq!(wc.status, IBV_WC_REM_ACCESS_ERR);
}

/// A zero-based MR as the local side: its SGEs are offsets. A SEND from
/// offset 100 of it, received into a plain buffer.
#[test]
fn zero_based_mr_local_sges_are_offsets() {
    let p = Pair::new();
    let mut zb = Region::new(p.pd, 4096, ALL | IBV_ACCESS_ZERO_BASED);
    zb.fill(9);
    let dst = Region::new(p.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(p.b, 11, &mut [sge(&dst, dst.addr(), 256)]), 0);
    let mut sg = [sge(&zb, 100, 200)];
    let mut w = send_wr(12, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode),
        (IBV_WC_SUCCESS, 12, IBV_WC_SEND)
    );
    let wc = wait_wc(p.cq_b);
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode, wc.byte_len),
        (IBV_WC_SUCCESS, 11, IBV_WC_RECV, 200)
    );
    assert_eq!(dst.bytes()[..200], zb.bytes()[100..300]);
}

/// Windows bound zero-based, type 2 (`IBV_WR_BIND_MW`) and type 1
/// (`ibv_bind_mw`): offset 0 is the window's first byte, whatever its
/// place in the MR.
#[test]
fn zero_based_windows_from_offset_0() {
    let p = Pair::new();
    let mut src = Region::new(p.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    src.fill(21);
    let s = src.bytes();
    let target = Region::new(p.pd, 8192, ALL | IBV_ACCESS_MW_BIND);
    let access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED;
    let info = ibv_mw_bind_info {
        mr: target.mr,
        addr: target.addr() + 1024,
        length: 2048,
        mw_access_flags: access,
    };

    // Type 2, bound by the responder's QP.
    // SAFETY: pd is live.
    let mw2 = unsafe { OPS.alloc_mw.unwrap()(p.pd, IBV_MW_TYPE_2) };
    assert!(!mw2.is_null());
    let mut w = send_wr(13, IBV_WR_BIND_MW, &mut [], IBV_SEND_SIGNALED);
    w.ext.bind_mw = ibv_send_wr_bind_mw {
        mw: mw2,
        // SAFETY: mw2 is live.
        rkey: unsafe { (*mw2).rkey } + 1,
        bind_info: info,
    };
    assert_eq!(post_send(p.b, &mut w), 0);
    let wc = wait_wc(p.cq_b);
    assert_eq!((wc.status, wc.opcode), (IBV_WC_SUCCESS, IBV_WC_BIND_MW));
    // SAFETY: mw2 is live.
    let k2 = unsafe { (*mw2).rkey };
    let wc = rdma(&p, IBV_WR_RDMA_WRITE, sge(&src, src.addr(), 64), 0, k2);
    assert_eq!(wc.status, IBV_WC_SUCCESS);
    assert_eq!(target.bytes()[1024..1088], s[..64]);
    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr() + 64, 64),
        2048 - 64,
        k2,
    );
    assert_eq!(wc.status, IBV_WC_SUCCESS);
    assert_eq!(target.bytes()[1024 + 2048 - 64..1024 + 2048], s[64..128]);
    let wc = rdma(&p, IBV_WR_RDMA_READ, sge(&src, src.addr() + 512, 64), 0, k2);
    assert_eq!((wc.status, wc.byte_len), (IBV_WC_SUCCESS, 64));
    assert_eq!(src.bytes()[512..576], s[..64]);

    // Type 1, bound with ibv_bind_mw.
    // SAFETY: pd is live.
    let mw1 = unsafe { OPS.alloc_mw.unwrap()(p.pd, IBV_MW_TYPE_1) };
    assert!(!mw1.is_null());
    let mut b = ibv_mw_bind {
        wr_id: 14,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: ibv_mw_bind_info {
            addr: target.addr() + 4096,
            ..info
        },
    };
    // SAFETY: live QP, window and bind description.
    let r = unsafe { (*p.c.ctx).ops.bind_mw.unwrap()(p.b, mw1, &mut b) };
    assert_eq!(r, 0);
    let wc = wait_wc(p.cq_b);
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode),
        (IBV_WC_SUCCESS, 14, IBV_WC_BIND_MW)
    );
    // SAFETY: mw1 is live.
    let k1 = unsafe { (*mw1).rkey };
    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr() + 256, 64),
        64,
        k1,
    );
    assert_eq!(wc.status, IBV_WC_SUCCESS);
    assert_eq!(target.bytes()[4096 + 64..4096 + 128], s[256..320]);

    // Beyond the window's 2048 bytes: refused, though inside the MR.
    let wc = rdma(
        &p,
        IBV_WR_RDMA_WRITE,
        sge(&src, src.addr(), 64),
        2048 - 32,
        k1,
    );
    assert_eq!(wc.status, IBV_WC_REM_ACCESS_ERR);

    // SAFETY: both windows are live; deallocating unbinds them.
    unsafe {
        assert_eq!(OPS.dealloc_mw.unwrap()(mw1), 0);
        assert_eq!(OPS.dealloc_mw.unwrap()(mw2), 0);
    }
}
