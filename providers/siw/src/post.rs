//! The data path in: the application's chains of work requests go into
//! siw's mapped queues (`wqe` builds each element), and an SQ the kernel
//! may have gone idle on gets the doorbell, the one system call of a post.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::Doorbell;
use crate::qp::Qp;
use crate::ring::{Element, Producer, Ring};
use crate::srq::Srq;
use crate::wqe::{self, SendWr};

/// A work request of a chain.
trait Chained {
    fn next(&self) -> *mut Self;
}

impl Chained for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl Chained for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// The scatter/gather list of a work request.
///
/// # Safety
/// `list` holds `n` entries when `n` is positive.
unsafe fn sges<'a>(list: *const ibv_sge, n: c_int) -> Result<&'a [ibv_sge], c_int> {
    match n {
        0 => Ok(&[]),
        n if n < 0 || list.is_null() => Err(libc::EINVAL),
        // SAFETY: per the contract.
        n => Ok(unsafe { core::slice::from_raw_parts(list, n as usize) }),
    }
}

/// Queues one element per work request of the chain from `first` until
/// one fails, which it returns with its errno.
///
/// # Safety
/// `first` is NULL or the head of a chain of live work requests.
#[inline]
unsafe fn post_chain<W: Chained, T: Element>(
    q: &mut Producer<T>,
    first: *mut W,
    mut build: impl FnMut(&W) -> Result<(T, u16), c_int>,
) -> Result<(), (*mut W, c_int)> {
    let mut cur = first;
    while !cur.is_null() {
        // SAFETY: per the contract.
        let wr = unsafe { &*cur };
        q.push(|| build(wr)).map_err(|e| (cur, e))?;
        cur = wr.next();
    }
    Ok(())
}

/// The SQE of a send work request.
#[inline]
fn send_sqe(w: &ibv_send_wr, sig_all: bool) -> Result<(siw_sqe, u16), c_int> {
    // SAFETY: the application's list of `num_sge` entries.
    let sges = unsafe { sges(w.sg_list, w.num_sge) }?;
    // SAFETY: both unions hold plain integers in every member; the views
    // read are the ones the opcode gives meaning to (the others are
    // ignored by `sqe_of`).
    let (rdma, invalidate_rkey) = unsafe { (w.wr.rdma, w.imm.invalidate_rkey) };
    let wr = SendWr {
        wr_id: w.wr_id,
        opcode: w.opcode,
        send_flags: w.send_flags,
        remote_addr: rdma.remote_addr,
        rkey: rdma.rkey,
        invalidate_rkey,
        sges,
    };
    wqe::sqe_of(&wr, sig_all, |sge, dst| {
        // SAFETY: inline data is read from the application's buffer at
        // posting time, which the verbs contract makes readable for the
        // SGE's length.
        unsafe {
            core::ptr::copy_nonoverlapping(sge.addr as *const u8, dst.as_mut_ptr(), dst.len())
        }
    })
}

/// The RQE of a receive work request.
#[inline]
fn recv_rqe(w: &ibv_recv_wr) -> Result<(siw_rqe, u16), c_int> {
    // SAFETY: the application's list of `num_sge` entries.
    let sges = unsafe { sges(w.sg_list, w.num_sge) }?;
    Ok((wqe::rqe_of(w.wr_id, sges)?, SIW_WQE_VALID))
}

/// Whether the kernel must hear of `count` SQEs just queued from running
/// position `start`. While the SQE before them is still there (VALID) the
/// kernel has it to take and goes on to ours after it; once it has taken
/// it, it may have found nothing more and gone idle. A refill of the
/// whole ring always rings. rdma-core's siw decides the same way.
///
/// The load is sequentially consistent and follows the SeqCst flag store
/// of our SQEs (`Ring::publish`): either we see the kernel's clearing of
/// the SQE before, or the kernel, which clears with a full barrier before
/// looking at the next SQE, sees ours.
pub fn needs_doorbell(ring: &Ring<siw_sqe>, start: u32, count: u32) -> bool {
    count > 0 && (count >= ring.len() || !ring.is_valid(start.wrapping_sub(1), Ordering::SeqCst))
}

/// Tells the kernel the QP's SQ has work: an empty `post_send` command on
/// the command file.
fn doorbell(cmd_fd: c_int, qp_handle: u32) -> Result<(), c_int> {
    let mut resp = ib_uverbs_post_send_resp::default();
    let cmd = Doorbell::new(qp_handle, &mut resp);
    // SAFETY: a whole command from our stack; the kernel writes its answer
    // to `resp`, alive until we return.
    let n = unsafe {
        libc::write(
            cmd_fd,
            (&cmd as *const Doorbell).cast(),
            size_of::<Doorbell>(),
        )
    };
    // The answer (no bad work request: there were none) is not needed.
    core::hint::black_box(&resp);
    if n == size_of::<Doorbell>() as isize {
        Ok(())
    } else if n < 0 {
        Err(verbs_rt::errno::errno())
    } else {
        Err(libc::EIO)
    }
}

/// Queues a chain of send work requests; returns the errno of the first
/// one that could not be queued (set in `bad`) and whether the doorbell
/// is due.
///
/// # Safety
/// `wr` is NULL or a chain of live work requests.
unsafe fn queue_sends(qp: &Qp, wr: *mut ibv_send_wr, bad: &mut *mut ibv_send_wr) -> (c_int, bool) {
    let Some(sq) = qp.sq() else {
        *bad = wr;
        return (libc::ENOMEM, false);
    };
    let mut q = sq.lock();
    let start = q.put();
    let sig_all = qp.sig_all();
    // SAFETY: per the contract.
    let rc = match unsafe { post_chain(&mut q, wr, |w| send_sqe(w, sig_all)) } {
        Ok(()) => 0,
        Err((w, e)) => {
            if e == libc::ENOMEM {
                log::error!(
                    "siw: QP[{}]: SQ overflow, idx {}",
                    qp.id(),
                    q.put() % q.ring().len()
                );
            }
            *bad = w;
            e
        }
    };
    let count = q.put().wrapping_sub(start);
    (rc, needs_doorbell(q.ring(), start, count))
}

/// `ibv_post_send`.
///
/// # Safety
/// `qp` is one of our QPs; `wr` a chain of work requests; `bad_wr` the
/// caller's.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: per the contract.
    let (qp, bad) = unsafe { (Qp::from_base(qp), &mut *bad_wr) };
    *bad = null_mut();
    // SAFETY: per the contract.
    let (mut rc, ring) = unsafe { queue_sends(qp, wr, bad) };
    if ring {
        if let Err(e) = doorbell(qp.cmd_fd(), qp.handle()) {
            // The SQEs are queued (the next doorbell has the kernel take
            // them) but the kernel was not told: reported as rdma-core's
            // siw does, with `bad_wr` at the first WR not queued, if any.
            if rc == 0 {
                rc = e;
            }
        }
    }
    rc
}

/// Queues a chain of receive work requests on `q`.
///
/// # Safety
/// As for `post_recv`.
unsafe fn queue_recvs(
    q: &mut Producer<siw_rqe>,
    wr: *mut ibv_recv_wr,
    bad: &mut *mut ibv_recv_wr,
    what: core::fmt::Arguments<'_>,
) -> c_int {
    // SAFETY: per the contract.
    match unsafe { post_chain(q, wr, recv_rqe) } {
        Ok(()) => 0,
        Err((w, e)) => {
            if e == libc::ENOMEM {
                log::error!("siw: {what}: RQ overflow, idx {}", q.put() % q.ring().len());
            }
            *bad = w;
            e
        }
    }
}

/// `ibv_post_recv`.
///
/// # Safety
/// `qp` is one of our QPs; `wr` a chain of work requests; `bad_wr` the
/// caller's.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract.
    let (qp, bad) = unsafe { (Qp::from_base(qp), &mut *bad_wr) };
    *bad = null_mut();
    let Some(rq) = qp.rq() else {
        // Receives go to the SRQ; a QP without either has no room.
        *bad = wr;
        return if qp.has_srq() {
            libc::EINVAL
        } else {
            libc::ENOMEM
        };
    };
    // SAFETY: per the contract.
    unsafe { queue_recvs(&mut rq.lock(), wr, bad, format_args!("QP[{}]", qp.id())) }
}

/// `ibv_post_srq_recv`.
///
/// # Safety
/// `srq` is one of our SRQs; `wr` a chain of work requests; `bad_wr` the
/// caller's.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract.
    let (s, bad) = unsafe { (Srq::from_base(srq), &mut *bad_wr) };
    *bad = null_mut();
    // SAFETY: per the contract.
    unsafe { queue_recvs(&mut s.rq().lock(), wr, bad, format_args!("SRQ[{srq:p}]")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_wr(id: u64, opcode: ibv_wr_opcode, sge: &mut ibv_sge) -> ibv_send_wr {
        let mut w = ibv_send_wr::zeroed();
        w.wr_id = id;
        w.opcode = opcode;
        w.sg_list = sge;
        w.num_sge = 1;
        w
    }

    fn recv_wr(id: u64, sge: &mut ibv_sge) -> ibv_recv_wr {
        ibv_recv_wr {
            wr_id: id,
            next: null_mut(),
            sg_list: sge,
            num_sge: 1,
        }
    }

    fn sge() -> ibv_sge {
        ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 5,
        }
    }

    #[test]
    fn a_chain_fills_the_sq_and_the_first_post_rings() {
        let qp = Qp::for_test(4, 4, true);
        let (mut s1, mut s2) = (sge(), sge());
        let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, &mut s2);
        w2.wr.rdma.remote_addr = 0x9000;
        w2.wr.rdma.rkey = 0x42;
        let mut w1 = send_wr(1, IBV_WR_SEND, &mut s1);
        w1.next = &mut w2;
        let mut bad = null_mut();
        // SAFETY: a live chain.
        let (rc, ring) = unsafe { queue_sends(&qp, &mut w1, &mut bad) };
        assert_eq!((rc, ring, bad), (0, true, null_mut()));
        let q = qp.sq().unwrap().lock();
        let e = q.ring().read(1);
        assert_eq!(
            (e.id, e.opcode, e.raddr, e.rkey),
            (2, SIW_OP_WRITE, 0x9000, 0x42)
        );
        assert_eq!(e.flags, SIW_WQE_VALID | SIW_WQE_SIGNALLED);
        drop(q);
        // The kernel has not taken SQE 1 yet: a new post needs no doorbell.
        let mut s3 = sge();
        let mut w3 = send_wr(3, IBV_WR_RDMA_READ, &mut s3);
        // SAFETY: as above.
        let (rc, ring) = unsafe { queue_sends(&qp, &mut w3, &mut bad) };
        assert_eq!((rc, ring), (0, false));
        // Once it has taken everything, the next post rings again.
        let q = qp.sq().unwrap().lock();
        for pos in 0..3 {
            q.ring().clear(pos);
        }
        drop(q);
        // SAFETY: as above.
        let (rc, ring) = unsafe { queue_sends(&qp, &mut w3, &mut bad) };
        assert_eq!((rc, ring), (0, true));
    }

    #[test]
    fn overflow_and_bad_requests_stop_the_chain() {
        let qp = Qp::for_test(2, 0, false);
        let mut s = [sge(), sge(), sge()];
        let [a, b, c] = &mut s;
        let mut w3 = send_wr(3, IBV_WR_SEND, c);
        let mut w2 = send_wr(2, IBV_WR_SEND, b);
        let mut w1 = send_wr(1, IBV_WR_SEND, a);
        w2.next = &mut w3;
        w1.next = &mut w2;
        let mut bad = null_mut();
        // SAFETY: a live chain.
        let (rc, ring) = unsafe { queue_sends(&qp, &mut w1, &mut bad) };
        // Two fit; the third finds the ring full. The two are the kernel's.
        assert_eq!((rc, bad, ring), (libc::ENOMEM, &mut w3 as *mut _, true));

        let qp = Qp::for_test(4, 0, false);
        let mut x = sge();
        let mut bad_op = send_wr(7, IBV_WR_ATOMIC_FETCH_AND_ADD, &mut x);
        // SAFETY: as above.
        let (rc, ring) = unsafe { queue_sends(&qp, &mut bad_op, &mut bad) };
        assert_eq!(
            (rc, bad, ring),
            (libc::EINVAL, &mut bad_op as *mut _, false)
        );
        let mut neg = send_wr(8, IBV_WR_SEND, &mut x);
        neg.num_sge = -1;
        // SAFETY: as above.
        let (rc, _) = unsafe { queue_sends(&qp, &mut neg, &mut bad) };
        assert_eq!(rc, libc::EINVAL);
        // A QP with no RQ takes no receive.
        let mut r = recv_wr(1, &mut x);
        let mut rbad = null_mut();
        // SAFETY: our test QP; a live request.
        let rc = unsafe { post_recv((&*qp as *const Qp).cast_mut().cast(), &mut r, &mut rbad) };
        assert_eq!((rc, rbad), (libc::ENOMEM, &mut r as *mut _));
    }

    #[test]
    fn receives_go_to_the_rq_and_the_srq() {
        let qp = Qp::for_test(1, 2, false);
        let (mut s1, mut s2, mut s3) = (sge(), sge(), sge());
        let mut r3 = recv_wr(3, &mut s3);
        let mut r2 = recv_wr(2, &mut s2);
        let mut r1 = recv_wr(1, &mut s1);
        r2.next = &mut r3;
        r1.next = &mut r2;
        let mut bad = null_mut();
        let q = (&*qp as *const Qp).cast_mut().cast();
        // SAFETY: our test QP; a live chain.
        let rc = unsafe { post_recv(q, &mut r1, &mut bad) };
        assert_eq!((rc, bad), (libc::ENOMEM, &mut r3 as *mut _));
        let rq = qp.rq().unwrap().lock();
        let e = rq.ring().read(1);
        assert_eq!(
            (e.id, e.flags, e.num_sge, e.sge[0].lkey),
            (2, SIW_WQE_VALID, 1, 5)
        );
        drop(rq);

        let srq = Srq::for_test(4);
        let s = (&*srq as *const Srq).cast_mut().cast();
        r1.next = null_mut();
        // SAFETY: our test SRQ; a live request.
        let rc = unsafe { post_srq_recv(s, &mut r1, &mut bad) };
        assert_eq!((rc, bad), (0, null_mut()));
        assert_eq!(srq.rq().lock().ring().read(0).id, 1);
    }

    /// What a post and a poll cost in this library alone: one signalled
    /// SEND posted, taken and completed by a stand-in for the kernel, and
    /// polled. `cargo test --release -p siw-rs -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn post_and_poll_cost() {
        let qp = Qp::for_test(1024, 0, false);
        let cq = crate::cq::Cq::for_test(1024);
        let mut s = sge();
        let mut w = send_wr(1, IBV_WR_SEND, &mut s);
        w.send_flags = IBV_SEND_SIGNALED;
        let cqe = siw_cqe {
            id: 1,
            opcode: SIW_OP_SEND,
            bytes: 64,
            qp_id: 1,
            ..Default::default()
        };
        let mut bad = null_mut();
        let n = 2_000_000u32;
        let t = std::time::Instant::now();
        let mut polled = 0;
        for pos in 0..n {
            // SAFETY: a live request.
            let (rc, ring) = unsafe { queue_sends(&qp, &mut w, &mut bad) };
            assert!(rc == 0 && ring);
            // The kernel takes the SQE and completes it.
            qp.sq().unwrap().lock().ring().clear(pos);
            cq.complete_for_test(pos, &cqe);
            polled += cq.poll(4, |_, wc| assert_eq!(wc.wr_id, 1));
        }
        assert_eq!(polled, n as usize);
        let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
        println!("post + take + complete + poll: {ns:.1} ns per work request");
    }

    #[test]
    fn doorbell_rules() {
        let qp = Qp::for_test(4, 0, false);
        let q = qp.sq().unwrap().lock();
        let r = q.ring();
        assert!(!needs_doorbell(r, 0, 0));
        // Nothing before position 0 is valid: the kernel is idle.
        assert!(needs_doorbell(r, 0, 1));
        r.publish(3, &siw_sqe::default(), SIW_WQE_VALID);
        assert!(!needs_doorbell(r, 4, 1));
        // A refill of the whole ring rings whatever it finds.
        assert!(needs_doorbell(r, 4, 4));
    }
}
