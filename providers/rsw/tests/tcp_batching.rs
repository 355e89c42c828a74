//! The TCP path reads ahead: one `recvmsg` takes a header with its payload
//! and whatever follows, so a burst of small SENDs costs a few reads, not
//! two per message. A hand-written requester on a raw socket decides how
//! the bytes arrive; the QP under test is the responder.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::ptr::null_mut;

use common::*;
use rsw::wire::{Header, Op, FLAG_IMM, HDR_LEN, REQ_ACK_LATER};
use verbs_abi::*;

/// The read-ahead buffer's size in the provider (`transport::tcp`).
const STAGE: usize = 64 << 10;

struct Responder {
    _c: Ctx,
    pd: *mut ibv_pd,
    q: *mut ibv_qp,
    cq: *mut ibv_cq,
    buf: Buf,
    slot: usize,
    s: TcpStream,
}

impl Responder {
    /// A QP in RTR with `slots` receive slots of `slot` bytes and a raw
    /// connection from its "peer" (QPN `peer`), hello sent and taken.
    fn new(peer: u32, slots: usize, slot: usize) -> Responder {
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let cq = c.cq(256, null_mut());
        let mut a = c.qp_attr(pd, cq, cq);
        a.cap.max_recv_wr = 128;
        let q = c.create_qp(&mut a);
        let o = ConnOpts::default();
        to_init(q, o.access);
        to_rtr(q, peer, &o);
        let buf = Buf::new(pd, slots * slot, IBV_ACCESS_LOCAL_WRITE);
        let mut s = TcpStream::connect(("127.0.0.1", qpn(q) as u16)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(&hello(peer, qpn(q))).unwrap();
        let r = Responder {
            _c: c,
            pd,
            q,
            cq,
            buf,
            slot,
            s,
        };
        // The hello is read (the connection is the QP's) before we count.
        assert!(wait_until(|| r.reads() >= 1), "hello never read");
        r
    }

    fn post(&self, from: usize, n: usize) {
        for i in from..from + n {
            let mut sg = [self.buf.sge(i * self.slot, self.slot as u32)];
            assert_eq!(post_recv(self.q, i as u64, &mut sg), 0);
        }
    }

    /// Reads by the QP's incoming connection that returned bytes.
    fn reads(&self) -> u64 {
        rsw::testing::socket_calls(self.q).expect("live QP")[0].0
    }

    /// Writes by the QP's incoming connection that sent bytes.
    fn writes(&self) -> u64 {
        rsw::testing::socket_calls(self.q).expect("live QP")[0].1
    }

    /// Waits for the cumulative ACK of message `msn` (RNR notices and
    /// earlier ACKs may come first); returns how many ACKs came.
    fn wait_ack(&mut self, msn: u32) -> usize {
        let mut acks = 0;
        loop {
            let h = read_response(&mut self.s);
            match h.op {
                Op::Ack if h.msn == msn => return acks + 1,
                Op::Ack => {
                    assert!(h.msn < msn, "ack beyond: {h:?}");
                    acks += 1;
                }
                Op::RnrWait => assert!(h.msn <= msn, "RNR beyond: {h:?}"),
                _ => panic!("unexpected response {h:?}"),
            }
        }
    }

    /// Asserts `n` receive completions for messages `payloads` in order:
    /// wr_id, byte_len, immediate, and the bytes in each slot.
    fn check(&self, first_slot: usize, payloads: &[Vec<u8>]) {
        let wcs = wait_wcs(self.cq, payloads.len());
        let mem = self.buf.snapshot();
        for (i, (w, p)) in wcs.iter().zip(payloads).enumerate() {
            let slot = first_slot + i;
            assert_eq!(
                (w.status, w.wr_id, w.opcode, w.byte_len),
                (IBV_WC_SUCCESS, slot as u64, IBV_WC_RECV, p.len() as u32),
                "completion {i}"
            );
            assert_eq!(w.wc_flags & IBV_WC_WITH_IMM, IBV_WC_WITH_IMM);
            assert_eq!(w.imm_data(), 0x1000 + i as u32);
            let at = slot * self.slot;
            assert!(mem[at..at + p.len()] == p[..], "payload {i}");
        }
    }
}

/// The wire bytes of SENDs with immediates `0x1000 + i`, msn from `msn0`.
fn sends(msn0: u32, payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let mut h = Header::new(Op::SendImm, msn0 + i as u32);
        h.length = p.len() as u32;
        h.flags = FLAG_IMM;
        h.imm = 0x1000 + i as u32;
        // Wait for a receive as long as it takes (RNR retry 7).
        h.set_rnr_retry(7);
        let mut hb = [0u8; HDR_LEN];
        h.encode(&mut hb);
        out.extend_from_slice(&hb);
        out.extend_from_slice(p);
    }
    out
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 31 + k * 7) as u8).collect()
}

#[test]
fn a_burst_of_small_sends_takes_a_few_reads() {
    const N: usize = 48;
    let mut r = Responder::new(5101, N, 64);
    r.post(0, N);
    let payloads: Vec<Vec<u8>> = (0..N).map(|i| payload(i, 1 + i % 60)).collect();
    let (reads0, writes0) = (r.reads(), r.writes());
    // One write: the bytes arrive together (well within a loopback
    // segment), as a requester's queued messages do.
    r.s.write_all(&sends(0, &payloads)).unwrap();
    r.check(0, &payloads);
    let acks = r.wait_ack(N as u32 - 1);
    let reads = r.reads() - reads0;
    let writes = r.writes() - writes0;
    // Two reads per message before read-ahead (header, then payload), and
    // an ACK each.
    assert!(reads <= 4, "{N} SENDs took {reads} reads");
    assert!(
        writes <= 4 && acks <= 4,
        "{N} SENDs took {writes} writes, {acks} ACKs"
    );
    assert_eq!(qp_state(r.q), IBV_QPS_RTR);
}

#[test]
fn messages_split_across_reads_and_larger_than_the_buffer() {
    // Small messages around one that straddles the read-ahead buffer, and
    // the stream cut in uneven pieces so headers and payloads arrive split.
    let sizes = [
        5,
        STAGE - HDR_LEN - 5,
        3,
        STAGE + 1000,
        17,
        4096,
        1,
        2 * STAGE + 7,
        9,
    ];
    let slot = 2 * STAGE + 64;
    let mut r = Responder::new(5102, sizes.len(), slot);
    r.post(0, sizes.len());
    let payloads: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(i, n))
        .collect();
    let bytes = sends(0, &payloads);
    let mut off = 0;
    let mut piece = 1;
    while off < bytes.len() {
        let end = (off + piece).min(bytes.len());
        r.s.write_all(&bytes[off..end]).unwrap();
        off = end;
        // Uneven cuts: 1, 30, 59, ... bytes, then large ones.
        piece = (piece * 7 + 29) % 70_001 + 1;
    }
    r.check(0, &payloads);
    r.wait_ack(sizes.len() as u32 - 1);
}

#[test]
fn messages_read_ahead_wait_for_their_receives() {
    // No receive posted: the first SEND stalls (RNR) with the rest already
    // read ahead; they must all land, in order, once receives come.
    const N: usize = 6;
    let mut r = Responder::new(5103, N, 128);
    let payloads: Vec<Vec<u8>> = (0..N).map(|i| payload(i, 10 + i)).collect();
    r.s.write_all(&sends(0, &payloads)).unwrap();
    // The responder says it waits for a receive for message 0.
    let h = read_response(&mut r.s);
    assert_eq!((h.op, h.msn), (Op::RnrWait, 0));
    // Receives for the first two: those two complete, the third stalls.
    r.post(0, 2);
    r.check(0, &payloads[..2]);
    assert_no_wc(r.cq, std::time::Duration::from_millis(20));
    // The rest, one at a time, each answered as it comes.
    for (i, p) in payloads.iter().enumerate().skip(2) {
        r.post(i, 1);
        let w = wait_wc(r.cq);
        assert_eq!(
            (w.status, w.wr_id, w.byte_len),
            (IBV_WC_SUCCESS, i as u64, p.len() as u32)
        );
        assert_eq!(w.imm_data(), 0x1000 + i as u32);
        let at = i * 128;
        assert_eq!(&r.buf.snapshot()[at..at + p.len()], &p[..]);
    }
    r.wait_ack(N as u32 - 1);
    assert_eq!(qp_state(r.q), IBV_QPS_RTR);
}

#[test]
fn a_mixed_burst_completes_in_order() {
    // SENDs around WRITEs (with and without immediate) in one burst: the
    // SENDs' shared ACK must not let a later completion overtake them.
    let mut r = Responder::new(5104, 8, 64);
    let mut target = Buf::new(r.pd, 256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    target.bytes_mut().fill(0);
    r.post(0, 8);
    let mut bytes = Vec::new();
    let mut msn = 0;
    let mut push = |h: &mut Header, p: &[u8]| {
        h.msn = msn;
        msn += 1;
        h.length = p.len() as u32;
        h.set_rnr_retry(7);
        let mut hb = [0u8; HDR_LEN];
        h.encode(&mut hb);
        bytes.extend_from_slice(&hb);
        bytes.extend_from_slice(p);
    };
    // (what, immediate) of each receive completion expected, in order.
    let mut want = Vec::new();
    for round in 0..3u32 {
        for k in 0..2u32 {
            let mut h = Header::new(Op::SendImm, 0);
            h.flags = FLAG_IMM;
            h.imm = round * 10 + k;
            push(&mut h, &[round as u8 + 1; 20]);
            want.push((IBV_WC_RECV, round * 10 + k, 20));
        }
        let mut w = Header::new(Op::Write, 0);
        w.rkey = target.rkey();
        w.remote_addr = target.addr() + round as u64 * 64;
        push(&mut w, &[0xa0 + round as u8; 64]);
        if round < 2 {
            let mut wi = Header::new(Op::WriteImm, 0);
            wi.flags = FLAG_IMM;
            wi.imm = 0x100 + round;
            wi.rkey = target.rkey();
            wi.remote_addr = target.addr() + 192 + round as u64 * 8;
            push(&mut wi, &[0xc0 + round as u8; 8]);
            want.push((IBV_WC_RECV_RDMA_WITH_IMM, 0x100 + round, 8));
        }
    }
    let last = msn - 1;
    r.s.write_all(&bytes).unwrap();
    let wcs = wait_wcs(r.cq, want.len());
    for (i, (w, &(op, imm, len))) in wcs.iter().zip(&want).enumerate() {
        assert_eq!(
            (w.status, w.wr_id, w.opcode, w.imm_data(), w.byte_len),
            (IBV_WC_SUCCESS, i as u64, op, imm, len),
            "completion {i}"
        );
    }
    let mem = r.buf.snapshot();
    for (i, (op, imm, _)) in want.iter().enumerate() {
        if *op == IBV_WC_RECV {
            assert_eq!(&mem[i * 64..i * 64 + 20], &[(imm / 10) as u8 + 1; 20]);
        }
    }
    r.wait_ack(last);
    let t = target.snapshot();
    for round in 0..3usize {
        assert_eq!(&t[round * 64..round * 64 + 64], &[0xa0 + round as u8; 64]);
    }
    assert_eq!(&t[192..200], &[0xc0; 8]);
    assert_eq!(&t[200..208], &[0xc1; 8]);
    assert_eq!(qp_state(r.q), IBV_QPS_RTR);
}

#[test]
fn a_burst_of_writes_is_acknowledged() {
    // More WRITEs in one burst than the ACKs one push releases at most:
    // every byte lands and the last ACK arrives, with no later traffic to
    // carry it out.
    const N: usize = 40;
    let mut r = Responder::new(5105, 1, 64);
    let target = write_target(&r, N);
    let bytes = writes(&target, 0, N, |_| false);
    let t0 = std::time::Instant::now();
    r.s.write_all(&bytes).unwrap();
    r.wait_ack(N as u32 - 1);
    // A held ACK nobody released would still leave, at the kernel's
    // 200 ms cork ceiling: far later than a pushed one.
    let took = t0.elapsed();
    assert!(
        took < std::time::Duration::from_millis(150),
        "ACKs took {took:?}"
    );
    check_writes(&target, N);
    assert_no_wc(r.cq, std::time::Duration::from_millis(10));
    assert_eq!(qp_state(r.q), IBV_QPS_RTR);
}

#[test]
fn a_posted_list_goes_out_in_few_writes() {
    // A requester facing a hand-written responder: a list of SENDs posted
    // at once leaves in a few `sendmsg` calls, every request intact and in
    // order, and completes on one cumulative ACK.
    const N: usize = 16;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap().port() as u32;
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(64, null_mut());
    let mut a = c.qp_attr(pd, cq, cq);
    a.cap.max_send_wr = 64;
    let q = c.create_qp(&mut a);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, fake, &o);
    to_rts(q, &o);
    let (mut s, mut hb) = FakeWire::accept(l.accept().unwrap().0);
    let mut src = Buf::new(pd, N * 32, IBV_ACCESS_LOCAL_WRITE);
    for i in 0..N {
        src.bytes_mut()[i * 32..i * 32 + 32].copy_from_slice(&payload(i, 32));
    }
    let mut sges: Vec<[ibv_sge; 1]> = (0..N).map(|i| [src.sge(i * 32, 32)]).collect();
    let mut wrs: Vec<ibv_send_wr> = sges
        .iter_mut()
        .enumerate()
        .map(|(i, sg)| send_wr(i as u64, IBV_WR_SEND, sg, IBV_SEND_SIGNALED))
        .collect();
    for i in 0..N - 1 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    let before = rsw::testing::socket_calls(q).unwrap()[1].1;
    assert_eq!(post_send(q, &mut wrs[0]), 0);
    for i in 0..N {
        s.read_exact(&mut hb).unwrap();
        let h = Header::decode(&hb).unwrap();
        assert_eq!(
            (h.op, h.msn, h.length),
            (Op::Send, i as u32, 32),
            "request {i}"
        );
        let mut p = [0u8; 32];
        s.read_exact(&mut p).unwrap();
        assert_eq!(&p[..], &payload(i, 32)[..], "payload {i}");
    }
    let writes = rsw::testing::socket_calls(q).unwrap()[1].1 - before;
    // One per request before they were gathered.
    assert!(writes <= 3, "{N} SENDs took {writes} writes");
    let ack = Header::new(Op::Ack, N as u32 - 1);
    ack.encode(&mut hb);
    s.write_all(&hb).unwrap();
    let wcs = wait_wcs(cq, N);
    for (i, w) in wcs.iter().enumerate() {
        assert_eq!(
            (w.status, w.wr_id, w.opcode),
            (IBV_WC_SUCCESS, i as u64, IBV_WC_SEND)
        );
    }
}

#[test]
fn a_write_is_acknowledged_after_its_last_bytes_land() {
    // The requester completes a WRITE on its ACK, and a program may read
    // the target at once (through another channel): every byte must be
    // there, the last 64 (which the responder places at the end) too.
    // Each WRITE overwrites the same 100 bytes with a new pattern.
    const N: usize = 400;
    let mut r = Responder::new(5106, 1, 64);
    let target = Buf::new(r.pd, 100, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    for i in 0..N {
        let mut h = Header::new(Op::Write, i as u32);
        h.rkey = target.rkey();
        h.remote_addr = target.addr();
        h.length = 100;
        let mut hb = [0u8; HDR_LEN];
        h.encode(&mut hb);
        let mut bytes = hb.to_vec();
        bytes.extend_from_slice(&payload(i, 100));
        r.s.write_all(&bytes).unwrap();
        r.wait_ack(i as u32);
        assert_eq!(&target.snapshot()[..], &payload(i, 100)[..], "WRITE {i}");
    }
    assert_eq!(qp_state(r.q), IBV_QPS_RTR);
}

/// A zeroed target for `n` WRITEs of 64 bytes.
fn write_target(r: &Responder, n: usize) -> Buf {
    let mut target = Buf::new(
        r.pd,
        n * 64,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
    );
    target.bytes_mut().fill(0);
    target
}

/// Every one of `n` WRITEs (see [`writes`]) landed.
fn check_writes(target: &Buf, n: usize) {
    let t = target.snapshot();
    for i in 0..n {
        assert_eq!(&t[i * 64..i * 64 + 64], &payload(i, 64)[..], "WRITE {i}");
    }
}

/// `n` WRITEs of 64 bytes into `target`, message numbers from `msn0`,
/// the ones in `lazy` asking for no ACK now.
fn writes(target: &Buf, msn0: u32, n: usize, lazy: impl Fn(usize) -> bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for i in 0..n {
        let mut h = Header::new(Op::Write, msn0 + i as u32);
        h.rkey = target.rkey();
        h.remote_addr = target.addr() + i as u64 * 64;
        h.length = 64;
        if lazy(i) {
            h.syndrome |= REQ_ACK_LATER;
        }
        let mut hb = [0u8; HDR_LEN];
        h.encode(&mut hb);
        bytes.extend_from_slice(&hb);
        bytes.extend_from_slice(&payload(i, 64));
    }
    bytes
}

#[test]
fn writes_that_ask_for_no_ack_get_one_for_the_last() {
    // Nothing follows them: the responder's ACK timer sends one ACK, for
    // the last, instead of one each.
    const N: usize = 40;
    let mut r = Responder::new(5107, 1, 64);
    let target = write_target(&r, N);
    r.s.write_all(&writes(&target, 0, N, |_| true)).unwrap();
    assert_eq!(r.wait_ack(N as u32 - 1), 1, "ACKs for {N} WRITEs");
    check_writes(&target, N);
    assert_no_wc(r.cq, std::time::Duration::from_millis(10));
    assert_eq!(qp_state(r.q), IBV_QPS_RTR);
}

#[test]
fn a_write_that_asks_acknowledges_the_quiet_ones_before_it() {
    const N: usize = 12;
    let mut r = Responder::new(5108, 1, 64);
    let target = write_target(&r, N);
    r.s.write_all(&writes(&target, 0, N, |i| i + 1 < N))
        .unwrap();
    assert_eq!(r.wait_ack(N as u32 - 1), 1, "ACKs for {N} WRITEs");
    check_writes(&target, N);
    // A bad key on a quiet WRITE is still NAKed, after the ACK of the
    // ones before it.
    let mut bad = writes(&target, N as u32, 2, |_| true);
    bad[12..16].copy_from_slice(&(target.rkey() ^ 0x100).to_le_bytes());
    r.s.write_all(&bad[..HDR_LEN + 64]).unwrap();
    let h = read_response(&mut r.s);
    assert_eq!((h.op, h.msn), (Op::Nak, N as u32), "{h:?}");
}
