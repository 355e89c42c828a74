//! Posting work requests through the kernel (rdma-core's
//! `ibv_cmd_post_send`, `_post_recv`, `_post_srq_recv` in cmd.c), for the
//! providers whose queues live in the kernel (hfi1, qib, ipath): the
//! chain becomes the kernel's `ib_uverbs_send_wr` / `ib_uverbs_recv_wr`
//! array followed by every request's scatter/gather entries, in one legacy
//! command. When posting fails the kernel's response counts, from 1, up to
//! the request it stopped at.

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_issue::{Issue, Kernel, LegacyCmd, HDR};
use super::write::ptr_u64;
use verbs_rt::export;

/// The longest legacy request: `in_words` is 16 bits of 4-byte words.
const MAX_REQ: usize = u16::MAX as usize * 4;

/// The two chains rdma-core walks.
trait Wr {
    fn next(&self) -> *mut Self;
    fn sges(&self) -> (*mut ibv_sge, c_int);
}

impl Wr for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn sges(&self) -> (*mut ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

impl Wr for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn sges(&self) -> (*mut ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

/// A request laid out: header, core payload (zeroed, for the caller), the
/// WQEs, the scatter/gather entries.
struct Built {
    buf: Vec<u64>,
    size: usize,
    wr_count: u32,
    sge_count: u32,
}

impl Built {
    /// # Safety
    /// `P` is the core payload the request was built for.
    unsafe fn payload<P>(&mut self) -> &mut P {
        // SAFETY: the payload follows the header, 8-byte aligned.
        unsafe { &mut *self.buf.as_mut_ptr().cast::<u8>().add(HDR).cast::<P>() }
    }
}

/// Lays out the chain at `wr` after a `core`-byte payload, one `W` per
/// request from `wqe`. A request that cannot be carried fails the post with
/// EINVAL at that request (rdma-core would read through the bad pointer or
/// send a header the kernel refuses); a chain too long for one command
/// fails at its first, as the kernel's refusal would.
///
/// # Safety
/// `wr` is NULL or a chain of live requests whose lists are readable.
unsafe fn build<T: Wr, W>(
    wr: *mut T,
    core: usize,
    wqe: impl Fn(&T) -> Result<W, c_int>,
) -> Result<Built, (c_int, *mut T)> {
    let fixed = HDR + core;
    let (mut n, mut sges) = (0usize, 0usize);
    let mut i = wr;
    while !i.is_null() {
        // SAFETY: a live request, per the contract.
        let r = unsafe { &*i };
        let (list, ns) = r.sges();
        if ns < 0 || (ns > 0 && list.is_null()) {
            return Err((libc::EINVAL, i));
        }
        n += 1;
        sges += ns as usize;
        // Checked as we go: a cyclic chain ends here too.
        if fixed + n * size_of::<W>() + sges * size_of::<ibv_sge>() > MAX_REQ {
            return Err((libc::EINVAL, wr));
        }
        i = r.next();
    }
    let size = fixed + n * size_of::<W>() + sges * size_of::<ibv_sge>();
    let mut buf = vec![0u64; size.div_ceil(8)];
    // SAFETY: `buf` holds `size` bytes: the WQEs, then the sges, after
    // the fixed part; the lists are readable per the contract.
    unsafe {
        let mut w = buf.as_mut_ptr().cast::<u8>().add(fixed).cast::<W>();
        let mut s = w.add(n).cast::<ibv_sge>();
        let mut i = wr;
        while !i.is_null() {
            let r = &*i;
            w.write_unaligned(wqe(r).map_err(|e| (e, i))?);
            w = w.add(1);
            let (list, ns) = r.sges();
            if ns > 0 {
                core::ptr::copy_nonoverlapping(list, s, ns as usize);
                s = s.add(ns as usize);
            }
            i = r.next();
        }
    }
    Ok(Built {
        buf,
        size,
        wr_count: n as u32,
        sge_count: sges as u32,
    })
}

/// rdma-core's ending: the request the kernel counted to, else the first
/// one when the command failed as a whole.
///
/// # Safety
/// `wr` is NULL or a live chain; `bad_wr` NULL or writable.
unsafe fn report<T: Wr>(wr: *mut T, bad: u32, rc: c_int, bad_wr: *mut *mut T) {
    if bad_wr.is_null() {
        return;
    }
    let mut at = wr;
    if bad != 0 {
        // The kernel counts within the chain it was given; stop at its
        // end should it ever count further.
        for _ in 1..bad {
            // SAFETY: a live request of the chain.
            let next = unsafe { (*at).next() };
            if next.is_null() {
                break;
            }
            at = next;
        }
    } else if rc == 0 {
        return;
    }
    // SAFETY: checked non-NULL; the caller's slot.
    unsafe { *bad_wr = at };
}

/// One send request as the kernel takes it.
///
/// # Safety
/// For UD, `r.wr.ud.ah` is NULL or a live AH.
unsafe fn send_wqe(r: &ibv_send_wr, qp_type: ibv_qp_type) -> Result<ib_uverbs_send_wr, c_int> {
    let mut t = ib_uverbs_send_wr {
        wr_id: r.wr_id,
        num_sge: r.num_sge as u32,
        opcode: r.opcode,
        send_flags: r.send_flags,
        ex: r.imm_data(),
        wr: ib_uverbs_send_wr_wr::zeroed(),
    };
    // SAFETY: reading the union member the QP type or opcode selects.
    unsafe {
        if qp_type == IBV_QPT_UD {
            let ud = r.wr.ud;
            if ud.ah.is_null() {
                return Err(libc::EINVAL);
            }
            t.wr.ud = ib_uverbs_send_wr_ud {
                ah: (*ud.ah).handle,
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
                reserved: 0,
            };
        } else {
            match r.opcode {
                IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                    t.wr.rdma = ib_uverbs_send_wr_rdma {
                        remote_addr: r.wr.rdma.remote_addr,
                        rkey: r.wr.rdma.rkey,
                        reserved: 0,
                    };
                }
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                    let a = r.wr.atomic;
                    t.wr.atomic = ib_uverbs_send_wr_atomic {
                        remote_addr: a.remote_addr,
                        compare_add: a.compare_add,
                        swap: a.swap,
                        rkey: a.rkey,
                        reserved: 0,
                    };
                }
                _ => {}
            }
        }
    }
    Ok(t)
}

fn recv_wqe(r: &ibv_recv_wr) -> Result<ib_uverbs_recv_wr, c_int> {
    Ok(ib_uverbs_recv_wr {
        wr_id: r.wr_id,
        num_sge: r.num_sge as u32,
        reserved: 0,
    })
}

/// # Safety
/// `qp` a live QP of a kernel context; `wr` a chain of live requests;
/// `bad_wr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { post_send(qp, wr, bad_wr, &mut Kernel) }
    })
}

pub(crate) unsafe fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_post_send`.
    unsafe {
        let qp_type = (*qp).qp_type;
        let mut b = match build(wr, size_of::<ib_uverbs_post_send>(), |r| {
            send_wqe(r, qp_type)
        }) {
            Ok(b) => b,
            Err((rc, at)) => {
                report(at, 0, rc, bad_wr);
                return rc;
            }
        };
        let mut resp = ib_uverbs_post_send_resp::default();
        let (wr_count, sge_count) = (b.wr_count, b.sge_count);
        let p = b.payload::<ib_uverbs_post_send>();
        p.response = ptr_u64(core::ptr::addr_of_mut!(resp));
        p.qp_handle = (*qp).handle;
        p.wr_count = wr_count;
        p.sge_count = sge_count;
        p.wqe_size = size_of::<ib_uverbs_send_wr>() as u32;
        let rc = k.write(
            (*qp).context,
            &LegacyCmd {
                command: IB_USER_VERBS_CMD_POST_SEND,
                req: b.buf.as_mut_ptr().cast(),
                req_size: b.size,
                resp_size: size_of::<ib_uverbs_post_send_resp>(),
            },
        );
        report(wr, core::ptr::read_volatile(&resp.bad_wr), rc, bad_wr);
        rc
    }
}

/// # Safety
/// `qp` a live QP of a kernel context; `wr` a chain of live requests;
/// `bad_wr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { post_recv(qp, wr, bad_wr, &mut Kernel) }
    })
}

pub(crate) unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_post_recv`.
    unsafe {
        let mut b = match build(wr, size_of::<ib_uverbs_post_recv>(), recv_wqe) {
            Ok(b) => b,
            Err((rc, at)) => {
                report(at, 0, rc, bad_wr);
                return rc;
            }
        };
        let mut resp = ib_uverbs_post_recv_resp::default();
        let (wr_count, sge_count) = (b.wr_count, b.sge_count);
        let p = b.payload::<ib_uverbs_post_recv>();
        p.response = ptr_u64(core::ptr::addr_of_mut!(resp));
        p.qp_handle = (*qp).handle;
        p.wr_count = wr_count;
        p.sge_count = sge_count;
        p.wqe_size = size_of::<ib_uverbs_recv_wr>() as u32;
        let rc = k.write(
            (*qp).context,
            &LegacyCmd {
                command: IB_USER_VERBS_CMD_POST_RECV,
                req: b.buf.as_mut_ptr().cast(),
                req_size: b.size,
                resp_size: size_of::<ib_uverbs_post_recv_resp>(),
            },
        );
        report(wr, core::ptr::read_volatile(&resp.bad_wr), rc, bad_wr);
        rc
    }
}

/// # Safety
/// `srq` a live SRQ of a kernel context; `wr` a chain of live requests;
/// `bad_wr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { post_srq_recv(srq, wr, bad_wr, &mut Kernel) }
    })
}

pub(crate) unsafe fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_post_srq_recv`.
    unsafe {
        let mut b = match build(wr, size_of::<ib_uverbs_post_srq_recv>(), recv_wqe) {
            Ok(b) => b,
            Err((rc, at)) => {
                report(at, 0, rc, bad_wr);
                return rc;
            }
        };
        let mut resp = ib_uverbs_post_srq_recv_resp::default();
        let (wr_count, sge_count) = (b.wr_count, b.sge_count);
        let p = b.payload::<ib_uverbs_post_srq_recv>();
        p.response = ptr_u64(core::ptr::addr_of_mut!(resp));
        p.srq_handle = (*srq).handle;
        p.wr_count = wr_count;
        p.sge_count = sge_count;
        p.wqe_size = size_of::<ib_uverbs_recv_wr>() as u32;
        let rc = k.write(
            (*srq).context,
            &LegacyCmd {
                command: IB_USER_VERBS_CMD_POST_SRQ_RECV,
                req: b.buf.as_mut_ptr().cast(),
                req_size: b.size,
                resp_size: size_of::<ib_uverbs_post_srq_recv_resp>(),
            },
        );
        report(wr, core::ptr::read_volatile(&resp.bad_wr), rc, bad_wr);
        rc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_issue::testing::*;

    fn sge(addr: u64, length: u32, lkey: u32) -> ibv_sge {
        ibv_sge { addr, length, lkey }
    }

    /// The sge at byte `o` of a request.
    fn sge_at(b: &[u8], o: usize) -> ibv_sge {
        sge(u64_at(b, o), u32_at(b, o + 8), u32_at(b, o + 12))
    }

    fn qp(f: &FakeCtx, t: ibv_qp_type) -> ibv_qp {
        let mut q = ibv_qp::zeroed();
        q.context = f.ctx();
        q.handle = 0x71;
        q.qp_type = t;
        q
    }

    #[test]
    fn post_send_marshals_rc_requests() {
        let f = FakeCtx::new();
        let mut q = qp(&f, IBV_QPT_RC);
        let mut s0 = [sge(0x1000, 16, 1), sge(0x2000, 32, 2)];
        let mut s1 = [sge(0x3000, 48, 3)];
        let mut w = [
            ibv_send_wr::zeroed(),
            ibv_send_wr::zeroed(),
            ibv_send_wr::zeroed(),
        ];
        w[0].wr_id = 0xa0;
        w[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        w[0].send_flags = IBV_SEND_SIGNALED;
        w[0].set_imm_data(0x1234_5678);
        w[0].sg_list = s0.as_mut_ptr();
        w[0].num_sge = 2;
        w[0].wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0xbeef_0000,
            rkey: 0x77,
        };
        w[1].wr_id = 0xa1;
        w[1].opcode = IBV_WR_SEND;
        w[1].sg_list = s1.as_mut_ptr();
        w[1].num_sge = 1;
        // A SEND carries no remote part even if the union holds one.
        w[1].wr.rdma = ibv_send_wr_rdma {
            remote_addr: 5,
            rkey: 5,
        };
        w[2].wr_id = 0xa2;
        w[2].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
        w[2].wr.atomic = ibv_send_wr_atomic {
            remote_addr: 0x8000,
            compare_add: 1,
            swap: 2,
            rkey: 9,
        };
        let wp = w.as_mut_ptr();
        // SAFETY: the chain lives in `w`.
        unsafe {
            (*wp).next = wp.add(1);
            (*wp.add(1)).next = wp.add(2);
        }
        let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
        // SAFETY: every object outlives the call.
        let rc = unsafe { ibv_cmd_post_send(&mut q, wp, &mut bad) };
        assert_eq!(rc, 0);
        assert!(bad.is_null());
        let b = f.take();
        let size = 8 + 24 + 3 * 56 + 3 * 16;
        assert_eq!(b.len(), size);
        assert_eq!(legacy_hdr(&b), (28, (size / 4) as u16, 1));
        assert_ne!(u64_at(&b, 8), 0);
        assert_eq!(
            (
                u32_at(&b, 16),
                u32_at(&b, 20),
                u32_at(&b, 24),
                u32_at(&b, 28)
            ),
            (0x71, 3, 3, 56)
        );
        let (w0, w1, w2) = (32, 32 + 56, 32 + 112);
        assert_eq!(
            (u64_at(&b, w0), u32_at(&b, w0 + 8), u32_at(&b, w0 + 12)),
            (0xa0, 2, IBV_WR_RDMA_WRITE_WITH_IMM)
        );
        assert_eq!(
            (u32_at(&b, w0 + 16), u32_at(&b, w0 + 20)),
            (IBV_SEND_SIGNALED, 0x1234_5678)
        );
        assert_eq!(
            (
                u64_at(&b, w0 + 24),
                u32_at(&b, w0 + 32),
                u32_at(&b, w0 + 36)
            ),
            (0xbeef_0000, 0x77, 0)
        );
        assert_eq!(
            (u64_at(&b, w1), u32_at(&b, w1 + 8), u32_at(&b, w1 + 12)),
            (0xa1, 1, IBV_WR_SEND)
        );
        assert!(b[w1 + 24..w1 + 56].iter().all(|&x| x == 0));
        assert_eq!(
            (u64_at(&b, w2), u32_at(&b, w2 + 8), u32_at(&b, w2 + 12)),
            (0xa2, 0, IBV_WR_ATOMIC_CMP_AND_SWP)
        );
        assert_eq!(
            (
                u64_at(&b, w2 + 24),
                u64_at(&b, w2 + 32),
                u64_at(&b, w2 + 40),
                u32_at(&b, w2 + 48)
            ),
            (0x8000, 1, 2, 9)
        );
        let s = 32 + 168;
        assert_eq!(
            [sge_at(&b, s), sge_at(&b, s + 16), sge_at(&b, s + 32)],
            [s0[0], s0[1], s1[0]]
        );
    }

    #[test]
    fn post_send_ud_names_the_ah_handle() {
        let f = FakeCtx::new();
        let mut q = qp(&f, IBV_QPT_UD);
        let mut ah = ibv_ah::zeroed();
        ah.handle = 0x4a;
        let mut w = ibv_send_wr::zeroed();
        w.opcode = IBV_WR_SEND;
        w.wr.ud = ibv_send_wr_ud {
            ah: &mut ah,
            remote_qpn: 0x11,
            remote_qkey: 0x22,
        };
        let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
        // SAFETY: every object outlives the call.
        assert_eq!(unsafe { ibv_cmd_post_send(&mut q, &mut w, &mut bad) }, 0);
        let b = f.take();
        assert_eq!(b.len(), 32 + 56);
        assert_eq!(
            (
                u32_at(&b, 56),
                u32_at(&b, 60),
                u32_at(&b, 64),
                u32_at(&b, 68)
            ),
            (0x4a, 0x11, 0x22, 0)
        );
        // No AH: refused at that request, nothing written.
        w.wr.ud.ah = core::ptr::null_mut();
        // SAFETY: as above.
        let rc = unsafe { ibv_cmd_post_send(&mut q, &mut w, &mut bad) };
        assert_eq!(rc, libc::EINVAL);
        assert_eq!(bad, &mut w as *mut ibv_send_wr);
        assert!(f.take().is_empty());
    }

    #[test]
    fn post_send_reports_the_request_the_kernel_counted_to() {
        let f = FakeCtx::new();
        let mut q = qp(&f, IBV_QPT_RC);
        let mut w = [
            ibv_send_wr::zeroed(),
            ibv_send_wr::zeroed(),
            ibv_send_wr::zeroed(),
        ];
        let wp = w.as_mut_ptr();
        // SAFETY: the chain lives in `w`.
        unsafe {
            (*wp).next = wp.add(1);
            (*wp.add(1)).next = wp.add(2);
        }
        let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
        // The kernel posted the first, failed on the second.
        let mut kernel = WriteFake(|req: &[u8], resp: *mut core::ffi::c_void| {
            assert_eq!(u32_at(req, 20), 3);
            // SAFETY: the response the request names.
            unsafe { *resp.cast::<u32>() = 2 };
            libc::ENOMEM
        });
        // SAFETY: every object outlives the call.
        let rc = unsafe { post_send(&mut q, wp, &mut bad, &mut kernel) };
        assert_eq!(rc, libc::ENOMEM);
        assert_eq!(bad, wp.wrapping_add(1));
        // A failure the kernel did not count: the first request.
        let mut f2 = FakeCtx::new();
        q.context = f2.ctx();
        f2.close_reader();
        bad = core::ptr::null_mut();
        // SAFETY: as above.
        let rc = unsafe { ibv_cmd_post_send(&mut q, wp, &mut bad) };
        assert_eq!((rc, bad), (libc::EPIPE, wp));
        // A count past the chain stops at its last request.
        q.context = f.ctx();
        let mut kernel = WriteFake(|_: &[u8], resp: *mut core::ffi::c_void| {
            // SAFETY: as above.
            unsafe { *resp.cast::<u32>() = 7 };
            libc::EINVAL
        });
        // SAFETY: as above.
        let rc = unsafe { post_send(&mut q, wp, &mut bad, &mut kernel) };
        assert_eq!((rc, bad), (libc::EINVAL, wp.wrapping_add(2)));
    }

    #[test]
    fn post_send_refuses_what_cannot_be_framed() {
        let f = FakeCtx::new();
        let mut q = qp(&f, IBV_QPT_RC);
        let mut w = [ibv_send_wr::zeroed(), ibv_send_wr::zeroed()];
        w[1].num_sge = -1;
        let wp = w.as_mut_ptr();
        // SAFETY: the chain lives in `w`.
        unsafe { (*wp).next = wp.add(1) };
        let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
        // SAFETY: every object outlives the call.
        let rc = unsafe { ibv_cmd_post_send(&mut q, wp, &mut bad) };
        assert_eq!((rc, bad), (libc::EINVAL, wp.wrapping_add(1)));
        // More scatter/gather than 16-bit in_words can carry.
        let mut big = vec![sge(0, 0, 0); 16384];
        // SAFETY: as above; `big` outlives the call.
        let rc = unsafe {
            (*wp.add(1)).num_sge = 16384;
            (*wp.add(1)).sg_list = big.as_mut_ptr();
            ibv_cmd_post_send(&mut q, wp, &mut bad)
        };
        assert_eq!((rc, bad), (libc::EINVAL, wp));
        assert!(f.take().is_empty());
    }

    #[test]
    fn post_recv_and_srq_recv() {
        let f = FakeCtx::new();
        let mut q = qp(&f, IBV_QPT_RC);
        let mut s = [sge(0x10, 1, 2), sge(0x20, 3, 4)];
        let mut w = [ibv_recv_wr::zeroed(), ibv_recv_wr::zeroed()];
        w[0].wr_id = 5;
        w[0].sg_list = s.as_mut_ptr();
        w[0].num_sge = 2;
        w[1].wr_id = 6;
        let wp = w.as_mut_ptr();
        // SAFETY: the chain lives in `w`.
        unsafe { (*wp).next = wp.add(1) };
        let mut bad: *mut ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: every object outlives the calls.
        assert_eq!(unsafe { ibv_cmd_post_recv(&mut q, wp, &mut bad) }, 0);
        let b = f.take();
        let size = 32 + 2 * 16 + 2 * 16;
        assert_eq!(b.len(), size);
        assert_eq!(legacy_hdr(&b), (29, (size / 4) as u16, 1));
        assert_eq!(
            (
                u32_at(&b, 16),
                u32_at(&b, 20),
                u32_at(&b, 24),
                u32_at(&b, 28)
            ),
            (0x71, 2, 2, 16)
        );
        assert_eq!((u64_at(&b, 32), u32_at(&b, 40), u32_at(&b, 44)), (5, 2, 0));
        assert_eq!((u64_at(&b, 48), u32_at(&b, 56)), (6, 0));
        assert_eq!([sge_at(&b, 64), sge_at(&b, 80)], s);

        let mut srq = ibv_srq::zeroed();
        srq.context = f.ctx();
        srq.handle = 0x52;
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_cmd_post_srq_recv(&mut srq, wp, &mut bad) }, 0);
        let b = f.take();
        assert_eq!(legacy_hdr(&b), (36, (size / 4) as u16, 1));
        assert_eq!(
            (
                u32_at(&b, 16),
                u32_at(&b, 20),
                u32_at(&b, 24),
                u32_at(&b, 28)
            ),
            (0x52, 2, 2, 16)
        );
        assert!(bad.is_null());

        let mut kernel = WriteFake(|_: &[u8], resp: *mut core::ffi::c_void| {
            // SAFETY: the response the request names.
            unsafe { *resp.cast::<u32>() = 2 };
            libc::ENOMEM
        });
        // SAFETY: as above.
        let rc = unsafe { post_srq_recv(&mut srq, wp, &mut bad, &mut kernel) };
        assert_eq!((rc, bad), (libc::ENOMEM, wp.wrapping_add(1)));
        let mut kernel = WriteFake(|_: &[u8], resp: *mut core::ffi::c_void| {
            // SAFETY: as above.
            unsafe { *resp.cast::<u32>() = 1 };
            libc::EINVAL
        });
        bad = core::ptr::null_mut();
        // SAFETY: as above.
        let rc = unsafe { post_recv(&mut q, wp, &mut bad, &mut kernel) };
        assert_eq!((rc, bad), (libc::EINVAL, wp));
    }
}
