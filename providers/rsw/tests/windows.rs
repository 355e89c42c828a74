//! Memory windows bound the way applications bind them. A type 2 window
//! bound with `IBV_WR_BIND_MW` takes only the low 8 bits of the WR's rkey
//! (the key the application owns: 1024, 0xBA, 17, `ibv_inc_rkey(...)`),
//! the upper 24 being the window's, as rxe, irdma and mlx5 do; `mw->rkey`
//! shows the new key once the bind is posted. Type 2 windows cannot be
//! bound empty, only the QP a window is bound to may invalidate it (a
//! local invalidate from another QP is `IBV_WC_MW_BIND_ERR`, a
//! SEND_WITH_INV arriving on another QP an invalid request), and a reader
//! holding the key of a window since rebound gets `IBV_WC_REM_ACCESS_ERR`.

mod common;

use std::ptr::null_mut;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

const ALL_REMOTE: u32 = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

/// Two QPs of one PD connected: `a` the requester, `b` the responder,
/// which binds the windows (type 2B: requests reach them through `b`).
struct Rig {
    c: Ctx,
    pd: *mut ibv_pd,
    cq_a: *mut ibv_cq,
    cq_b: *mut ibv_cq,
    a: *mut ibv_qp,
    b: *mut ibv_qp,
    /// `a`'s source and result buffer.
    src: Buf,
    /// The memory windows cover, registered for binding.
    target: Buf,
}

impl Rig {
    fn new() -> Rig {
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let (cq_a, cq_b) = (c.cq(64, null_mut()), c.cq(64, null_mut()));
        let (a, b) = (c.qp(pd, cq_a, cq_a), c.qp(pd, cq_b, cq_b));
        let o = ConnOpts::default();
        connect(a, &o, b, &o);
        let mut src = Buf::new(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
        for (i, x) in src.bytes_mut().iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
        let target = Buf::new(
            pd,
            8192,
            IBV_ACCESS_LOCAL_WRITE | ALL_REMOTE | IBV_ACCESS_MW_BIND,
        );
        Rig {
            c,
            pd,
            cq_a,
            cq_b,
            a,
            b,
            src,
            target,
        }
    }

    /// A new connected pair in place of one an error put in ERR (the
    /// windows and buffers stay).
    fn fresh_pair(&mut self) {
        let (a, b) = (
            self.c.qp(self.pd, self.cq_a, self.cq_a),
            self.c.qp(self.pd, self.cq_b, self.cq_b),
        );
        let o = ConnOpts::default();
        connect(a, &o, b, &o);
        self.a = a;
        self.b = b;
    }

    fn alloc_mw(&self, t: ibv_mw_type) -> *mut ibv_mw {
        // SAFETY: pd is live.
        let mw = unsafe { OPS.alloc_mw.unwrap()(self.pd, t) };
        assert!(!mw.is_null(), "alloc_mw: errno {}", errno());
        mw
    }

    /// Posts a signaled `IBV_WR_BIND_MW` on `qp` asking for `key`, of
    /// `[off, off + len)` of the target; returns its completion.
    fn bind(
        &self,
        qp: *mut ibv_qp,
        cq: *mut ibv_cq,
        mw: *mut ibv_mw,
        key: u32,
        (off, len): (usize, u64),
        access: u32,
    ) -> ibv_wc {
        let mut w = send_wr(500, IBV_WR_BIND_MW, &mut [], IBV_SEND_SIGNALED);
        w.ext.bind_mw = ibv_send_wr_bind_mw {
            mw,
            rkey: key,
            bind_info: ibv_mw_bind_info {
                mr: self.target.mr,
                addr: self.target.addr() + off as u64,
                length: len,
                mw_access_flags: access,
            },
        };
        assert_eq!(post_send(qp, &mut w), 0);
        let wc = wait_wc(cq);
        assert_eq!(wc.wr_id, 500);
        wc
    }

    /// A signaled local invalidate of `rkey` on `qp`; its completion.
    fn local_inv(&self, qp: *mut ibv_qp, cq: *mut ibv_cq, rkey: u32) -> ibv_wc {
        let mut w = send_wr(501, IBV_WR_LOCAL_INV, &mut [], IBV_SEND_SIGNALED);
        w.set_invalidate_rkey(rkey);
        assert_eq!(post_send(qp, &mut w), 0);
        let wc = wait_wc(cq);
        assert_eq!(wc.wr_id, 501);
        wc
    }

    /// `a` WRITEs 64 bytes of its source (from `src_off`) to `raddr`
    /// through `rkey`; the status.
    fn write(&self, rkey: u32, raddr: u64, src_off: usize) -> ibv_wc_status {
        let mut sg = [self.src.sge(src_off, 64)];
        let mut w = send_wr(77, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma.remote_addr = raddr;
        w.wr.rdma.rkey = rkey;
        assert_eq!(post_send(self.a, &mut w), 0);
        let wc = wait_wc(self.cq_a);
        assert_eq!(wc.wr_id, 77);
        if wc.status == IBV_WC_SUCCESS {
            assert_eq!((wc.opcode, wc.byte_len), (IBV_WC_RDMA_WRITE, 64));
        }
        wc.status
    }

    /// `a` READs 64 bytes at `raddr` through `rkey` into its source
    /// buffer at `dst_off`; the status.
    fn read(&self, rkey: u32, raddr: u64, dst_off: usize) -> ibv_wc_status {
        let mut sg = [self.src.sge(dst_off, 64)];
        let mut w = send_wr(78, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma.remote_addr = raddr;
        w.wr.rdma.rkey = rkey;
        assert_eq!(post_send(self.a, &mut w), 0);
        let wc = wait_wc(self.cq_a);
        assert_eq!(wc.wr_id, 78);
        if wc.status == IBV_WC_SUCCESS {
            assert_eq!((wc.opcode, wc.byte_len), (IBV_WC_RDMA_READ, 64));
        }
        wc.status
    }

    fn target_at(&self, off: usize) -> &[u8] {
        &self.target.bytes()[off..off + 64]
    }
}

fn mw_rkey(mw: *mut ibv_mw) -> u32 {
    // SAFETY: mw is live.
    unsafe { std::ptr::read_volatile(&raw const (*mw).rkey) }
}

fn expect_ok(wc: &ibv_wc, opcode: ibv_wc_opcode) {
    assert_eq!(
        (wc.status, wc.opcode),
        (IBV_WC_SUCCESS, opcode),
        "completion"
    );
}

/// Keys as applications pass them: the bind succeeds with the window's
/// index and the key's low 8 bits, `mw->rkey` shows it, and WRITE, READ
/// and atomics through it reach exactly the window's range.
#[test]
fn type2_bind_takes_the_low_8_bits_of_the_wr_rkey() {
    let mut r = Rig::new();
    let mw = r.alloc_mw(IBV_MW_TYPE_2);
    let first = mw_rkey(mw);
    for (round, asked) in [1024u32, 0xBA, 17, 0x1234_56ff].into_iter().enumerate() {
        let want = (first & !0xff) | (asked & 0xff);
        let wc = r.bind(r.b, r.cq_b, mw, asked, (1024, 2048), ALL_REMOTE);
        expect_ok(&wc, IBV_WC_BIND_MW);
        assert_eq!(mw_rkey(mw), want, "mw->rkey after binding with {asked:#x}");
        let base = r.target.addr() + 1024;

        // WRITE at the window's first and last 64 bytes.
        assert_eq!(r.write(want, base, 64 * round), IBV_WC_SUCCESS);
        assert_eq!(
            r.target_at(1024),
            &r.src.bytes()[64 * round..64 * round + 64]
        );
        assert_eq!(r.write(want, base + 2048 - 64, 128), IBV_WC_SUCCESS);
        assert_eq!(r.target_at(1024 + 2048 - 64), &r.src.bytes()[128..192]);
        // READ it back elsewhere in the source.
        assert_eq!(r.read(want, base, 2048), IBV_WC_SUCCESS);
        assert_eq!(&r.src.bytes()[2048..2112], r.target_at(1024));
        // Fetch-and-add on the window's second word.
        let word = u64::from_ne_bytes(r.target.bytes()[1032..1040].try_into().unwrap());
        let mut sg = [r.src.sge(3000, 8)];
        let mut w = atomic_wr(
            79,
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            &mut sg,
            base + 8,
            want,
            5,
            0,
        );
        assert_eq!(post_send(r.a, &mut w), 0);
        let wc = wait_wc(r.cq_a);
        assert_eq!(
            (wc.status, wc.wr_id, wc.opcode),
            (IBV_WC_SUCCESS, 79, IBV_WC_FETCH_ADD)
        );
        assert_eq!(r.src.bytes()[3000..3008], word.to_ne_bytes());
        assert_eq!(
            r.target.bytes()[1032..1040],
            word.wrapping_add(5).to_ne_bytes()
        );

        // Invalidated: the key no longer works (and the pair fails).
        expect_ok(&r.local_inv(r.b, r.cq_b, want), IBV_WC_LOCAL_INV);
        assert_eq!(r.write(want, base, 0), IBV_WC_REM_ACCESS_ERR);
        r.fresh_pair();
    }
    // SAFETY: mw is live and unbound.
    assert_eq!(unsafe { OPS.dealloc_mw.unwrap()(mw) }, 0);
}

/// A type 2 window cannot be bound with length 0: a bind error, and the
/// QP fails as after any bind error.
#[test]
fn type2_zero_length_bind_fails() {
    let r = Rig::new();
    let mw = r.alloc_mw(IBV_MW_TYPE_2);
    // A whole key (index and next tag), as ibv_inc_rkey makes it.
    let key = (mw_rkey(mw) & !0xff) | 1;
    let wc = r.bind(r.b, r.cq_b, mw, key, (0, 0), IBV_ACCESS_REMOTE_WRITE);
    assert_eq!(wc.status, IBV_WC_MW_BIND_ERR);
    assert_eq!(qp_state(r.b), IBV_QPS_ERR);
    // SAFETY: mw is live.
    assert_eq!(unsafe { OPS.dealloc_mw.unwrap()(mw) }, 0);
}

/// Only the QP a type 2B window is bound to may invalidate it: a local
/// invalidate from another QP of the PD is a bind error and leaves the
/// window bound; a SEND_WITH_INV arriving on another QP is an invalid
/// request and leaves it bound too.
#[test]
fn type2_invalidate_only_from_the_bound_qp() {
    let mut r = Rig::new();
    let mw = r.alloc_mw(IBV_MW_TYPE_2);
    let key = (mw_rkey(mw) & !0xff) | 0x11;
    expect_ok(
        &r.bind(r.b, r.cq_b, mw, key, (0, 4096), ALL_REMOTE),
        IBV_WC_BIND_MW,
    );
    let k = mw_rkey(mw);
    let (bound_a, bound_b) = (r.a, r.b);

    // A second pair of the same PD: its b is not the window's QP.
    r.fresh_pair();
    let wc = r.local_inv(r.b, r.cq_b, k);
    assert_eq!(wc.status, IBV_WC_MW_BIND_ERR);
    assert_eq!(qp_state(r.b), IBV_QPS_ERR);

    r.fresh_pair();
    let dst = Buf::new(r.pd, 64, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(r.b, 600, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [r.src.sge(0, 16)];
    let mut w = send_wr(601, IBV_WR_SEND_WITH_INV, &mut sg, IBV_SEND_SIGNALED);
    w.set_invalidate_rkey(k);
    assert_eq!(post_send(r.a, &mut w), 0);
    let wc = wait_wc(r.cq_a);
    assert_eq!((wc.wr_id, wc.status), (601, IBV_WC_REM_INV_REQ_ERR));
    // The refusing responder failed, and its receive with it.
    let wc = wait_wc(r.cq_b);
    assert_eq!((wc.wr_id, wc.status), (600, IBV_WC_WR_FLUSH_ERR));

    // Still bound, through its own QP.
    r.a = bound_a;
    r.b = bound_b;
    assert_eq!(r.write(k, r.target.addr() + 256, 0), IBV_WC_SUCCESS);
    assert_eq!(r.target_at(256), &r.src.bytes()[..64]);
    expect_ok(&r.local_inv(r.b, r.cq_b, k), IBV_WC_LOCAL_INV);
    // SAFETY: mw is live and unbound.
    assert_eq!(unsafe { OPS.dealloc_mw.unwrap()(mw) }, 0);
}

/// Invalidated and rebound under another key: a reader holding the old
/// key gets a remote access error (not a retry error: the responder
/// answers), one with the new key reads.
#[test]
fn rebound_window_refuses_the_old_key() {
    let mut r = Rig::new();
    let mw = r.alloc_mw(IBV_MW_TYPE_2);
    expect_ok(
        &r.bind(r.b, r.cq_b, mw, 1, (512, 1024), IBV_ACCESS_REMOTE_READ),
        IBV_WC_BIND_MW,
    );
    let old = mw_rkey(mw);
    expect_ok(&r.local_inv(r.b, r.cq_b, old), IBV_WC_LOCAL_INV);
    expect_ok(
        &r.bind(r.b, r.cq_b, mw, 2, (512, 1024), IBV_ACCESS_REMOTE_READ),
        IBV_WC_BIND_MW,
    );
    let new = mw_rkey(mw);
    assert_ne!(new, old);
    assert_eq!(new >> 8, old >> 8);
    let base = r.target.addr() + 512;
    assert_eq!(r.read(new, base, 1024), IBV_WC_SUCCESS);
    assert_eq!(&r.src.bytes()[1024..1088], r.target_at(512));
    assert_eq!(r.read(old, base, 1024), IBV_WC_REM_ACCESS_ERR);
    r.fresh_pair();
    // The window stays bound to the old pair's b, in ERR now: only that
    // QP could use or invalidate it; it goes with dealloc.
    // SAFETY: mw is live.
    assert_eq!(unsafe { OPS.dealloc_mw.unwrap()(mw) }, 0);
}
