//! Forged and garbage peers: raw TCP clients that connect to a QP's
//! listening port (the QPN is the port) and send whatever they like. None of
//! it may crash the process, wedge or spin the progress thread, or touch
//! memory outside an MR the peer was granted. After every scenario a real,
//! connected QP pair served by the same progress thread must still work
//! (SEND and RDMA WRITE, bytes checked) and the progress thread must be idle.
//!
//! The tests serialise on a lock: the CPU measurement needs the progress
//! thread to serve only the scenario at hand.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::raw::c_void;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use rsw::wire::{Header, Op, Syndrome, HDR_LEN};
use verbs_abi::*;

/// The QPN every victim believes its peer has. Nothing needs to listen
/// there: victims stay in RTR and never send.
const FAKE: u32 = 4401;
/// Target MR size and the guard zones around it.
const LEN: usize = 4096;
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xee;
const FILL: u8 = 0x11;
const ALL_REMOTE: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn dial(port: u32) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_write_timeout(Some(WAIT)).unwrap();
    s
}

fn req(op: Op, msn: u32, len: u32, rkey: u32, addr: u64) -> Header {
    let mut h = Header::new(op, msn);
    h.length = len;
    h.rkey = rkey;
    h.remote_addr = addr;
    h
}

fn bytes(h: &Header) -> [u8; HDR_LEN] {
    let mut b = [0u8; HDR_LEN];
    h.encode(&mut b);
    b
}

/// Writes a request; the provider may already have hung up, which is fine.
fn send(s: &mut TcpStream, h: &Header, payload: &[u8]) {
    let _ = s.write_all(&bytes(h));
    let _ = s.write_all(payload);
}

fn read_resp(s: &mut TcpStream) -> Header {
    read_response(s)
}

/// The provider closes the connection (bounded by the read timeout).
fn expect_closed(s: &mut TcpStream) {
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("connection not closed: {e}"),
        }
    }
}

fn expect_nak(s: &mut TcpStream, msn: u32, syn: Syndrome) {
    let r = read_resp(s);
    assert_eq!((r.op, r.msn, r.syndrome), (Op::Nak, msn, syn as u8));
    expect_closed(s);
}

/// A registered range with guard zones on both sides, filled with known
/// bytes so any stray store shows.
struct Target {
    mem: Vec<u64>,
    mr: *mut ibv_mr,
}

impl Target {
    fn new(pd: *mut ibv_pd, access: u32) -> Target {
        let mut mem = vec![0u64; (2 * GUARD + LEN) / 8];
        // SAFETY: mem holds 2 * GUARD + LEN bytes.
        let b =
            unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr() as *mut u8, 2 * GUARD + LEN) };
        b.fill(GUARD_BYTE);
        b[GUARD..GUARD + LEN].fill(FILL);
        // SAFETY: the middle LEN bytes live as long as the Target.
        let mr = unsafe {
            let p = (mem.as_mut_ptr() as *mut u8).add(GUARD) as *mut c_void;
            OPS.reg_mr.unwrap()(pd, p, LEN, p as u64, access)
        };
        assert!(!mr.is_null(), "reg_mr: errno {}", errno());
        Target { mem, mr }
    }

    fn base(&self) -> u64 {
        self.mem.as_ptr() as u64 + GUARD as u64
    }

    fn rkey(&self) -> u32 {
        // SAFETY: mr is live.
        unsafe { (*self.mr).rkey }
    }

    fn snapshot(&self) -> Vec<u8> {
        let p = self.mem.as_ptr() as *const u8;
        // SAFETY: reads within mem; the provider's thread may write it.
        (0..2 * GUARD + LEN)
            .map(|i| unsafe { std::ptr::read_volatile(p.add(i)) })
            .collect()
    }

    fn assert_guards(&self) -> Vec<u8> {
        let s = self.snapshot();
        assert!(s[..GUARD].iter().all(|&b| b == GUARD_BYTE), "low guard hit");
        assert!(
            s[GUARD + LEN..].iter().all(|&b| b == GUARD_BYTE),
            "high guard hit"
        );
        s[GUARD..GUARD + LEN].to_vec()
    }

    fn assert_untouched(&self) {
        assert!(
            self.assert_guards().iter().all(|&b| b == FILL),
            "target changed"
        );
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // SAFETY: mr is live.
        assert_eq!(unsafe { OPS.dereg_mr.unwrap()(self.mr) }, 0);
    }
}

/// A QP in RTR that expects its peer at [`FAKE`], with a posted receive and
/// a target MR with all remote rights, in a PD of its own.
struct Victim {
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    recv: Buf,
    t: Target,
}

impl Victim {
    fn new(c: &Ctx) -> Victim {
        let pd = c.alloc_pd();
        let cq = c.cq(16, null_mut());
        let qp = c.qp(pd, cq, cq);
        let o = ConnOpts::default();
        to_init(qp, o.access);
        to_rtr(qp, FAKE, &o);
        let recv = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
        assert_eq!(post_recv(qp, 1, &mut [recv.sge(0, 64)]), 0);
        let t = Target::new(pd, ALL_REMOTE);
        Victim {
            pd,
            cq,
            qp,
            recv,
            t,
        }
    }

    fn qpn(&self) -> u32 {
        qpn(self.qp)
    }

    /// A connection the victim takes for its peer's.
    fn dial(&self) -> TcpStream {
        let mut s = dial(self.qpn());
        s.write_all(&hello(FAKE, self.qpn())).unwrap();
        s
    }

    /// The QP failed: ERR, and its posted receive is flushed, or failed by
    /// the request that took it (a SEND too long, a WRITE_WITH_IMM with a
    /// refused rkey).
    fn assert_failed(&self) {
        assert_eq!(qp_state(self.qp), IBV_QPS_ERR);
        let w = wait_wc(self.cq);
        assert_eq!(w.wr_id, 1);
        assert!(
            matches!(
                w.status,
                IBV_WC_WR_FLUSH_ERR | IBV_WC_LOC_LEN_ERR | IBV_WC_LOC_ACCESS_ERR
            ),
            "status {}",
            w.status
        );
    }

    fn assert_unharmed(&self) {
        assert_eq!(qp_state(self.qp), IBV_QPS_RTR);
        assert_no_wc(self.cq, Duration::from_millis(10));
        self.t.assert_untouched();
        assert!(self.recv.snapshot().iter().all(|&b| b == 0));
    }
}

/// The real pair still works: a SEND and an RDMA WRITE, bytes checked.
fn healthy(p: &Pair, round: u8) {
    let mut src = p.buf(256);
    let dst = p.buf(256);
    for (i, b) in src.bytes_mut().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7) ^ round;
    }
    let want = src.bytes().to_vec();
    assert_eq!(post_recv(p.b, 77, &mut [dst.sge(0, 128)]), 0);
    let mut sg = [src.sge(0, 128)];
    let mut w = send_wr(78, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!((s.status, s.wr_id), (IBV_WC_SUCCESS, 78));
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.wr_id, r.byte_len), (IBV_WC_SUCCESS, 77, 128));
    let mut sg = [src.sge(128, 128)];
    let mut w = send_wr(79, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr() + 128,
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!((s.status, s.wr_id), (IBV_WC_SUCCESS, 79));
    assert_eq!(dst.snapshot(), want);
}

/// The progress thread is idle: a measurement window, not synchronisation.
/// A spinning thread would use nearly all of it (ticks are 10 ms), even
/// on a loaded machine.
fn assert_quiet() {
    let before = progress_ticks();
    std::thread::sleep(Duration::from_millis(300));
    let used = progress_ticks() - before;
    assert!(used <= 5, "progress thread used {used} ticks in 300 ms");
}

fn after(p: &Pair, round: u8) {
    assert_quiet();
    healthy(p, round);
}

#[test]
fn garbage_instead_of_a_hello() {
    let _s = serial();
    let p = Pair::new();
    healthy(&p, 0);
    let v = Victim::new(&p.c);
    let mut bad_magic = hello(FAKE, v.qpn());
    bad_magic[0] ^= 0x20;
    let mut bad_version = hello(FAKE, v.qpn());
    bad_version[4] = 9;
    let mut noise = [0u8; 3 * HDR_LEN];
    let mut x = 0x1234_5678_9abc_def1u64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut zeros_then_hello = vec![0u8; HDR_LEN];
    zeros_then_hello.extend_from_slice(&hello(FAKE, v.qpn()));
    // A request header where the hello belongs.
    let early_req = bytes(&req(Op::Write, 0, 8, v.t.rkey(), v.t.base()));
    let inputs: [&[u8]; 6] = [
        &[0x55; HDR_LEN],
        &noise,
        &bad_magic,
        &bad_version,
        &zeros_then_hello,
        &early_req,
    ];
    // At the victim and at the real pair's own QPs.
    for port in [v.qpn(), qpn(p.a), qpn(p.b)] {
        for input in inputs {
            let mut s = dial(port);
            let _ = s.write_all(input);
            let _ = s.write_all(&[0xaa; 8]);
            expect_closed(&mut s);
        }
    }
    v.assert_unharmed();
    after(&p, 1);
}

#[test]
fn hello_for_another_qp_or_from_another_peer() {
    let _s = serial();
    let p = Pair::new();
    let v = Victim::new(&p.c);
    let me = v.qpn();
    for h in [
        hello(FAKE, me + 1),
        hello(FAKE, 0),
        hello(FAKE, u32::MAX),
        // Same low 16 bits: a QPN is a port, but must compare in full.
        hello(FAKE, me | 0x1_0000),
        hello(FAKE + 1, me),
        hello(0, me),
    ] {
        let mut s = dial(me);
        s.write_all(&h).unwrap();
        send(&mut s, &req(Op::Send, 0, 4, 0, 0), b"evil");
        expect_closed(&mut s);
    }
    // The real pair refuses strangers too.
    for (port, src) in [(qpn(p.b), qpn(p.b)), (qpn(p.a), FAKE)] {
        let mut s = dial(port);
        s.write_all(&hello(src, port)).unwrap();
        send(&mut s, &req(Op::Send, 0, 4, 0, 0), b"evil");
        expect_closed(&mut s);
    }
    v.assert_unharmed();
    after(&p, 2);
    // The victim still takes its expected peer.
    let mut s = v.dial();
    send(&mut s, &req(Op::Send, 0, 3, 0, 0), b"abc");
    let r = wait_wc(v.cq);
    assert_eq!((r.status, r.wr_id, r.byte_len), (IBV_WC_SUCCESS, 1, 3));
    assert_eq!(&v.recv.snapshot()[..3], b"abc");
    let a = read_resp(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 0));
}

#[test]
fn huge_and_inconsistent_lengths() {
    let _s = serial();
    let p = Pair::new();

    // A SEND larger than the receive: refused before any byte lands.
    for len in [u32::MAX, 0x8000_0000, 65] {
        let v = Victim::new(&p.c);
        let mut s = v.dial();
        send(&mut s, &req(Op::Send, 0, len, 0, 0), &[]);
        expect_nak(&mut s, 0, Syndrome::RemInvReq);
        let w = wait_wc(v.cq);
        assert_eq!((w.status, w.wr_id), (IBV_WC_LOC_LEN_ERR, 1));
        assert_eq!(qp_state(v.qp), IBV_QPS_ERR);
        assert!(v.recv.snapshot().iter().all(|&b| b == 0));
        v.t.assert_untouched();
    }
    // WRITE / READ lengths past the MR, from its first byte.
    for (op, len) in [
        (Op::Write, u32::MAX),
        (Op::WriteImm, u32::MAX),
        (Op::ReadReq, u32::MAX),
        (Op::Write, LEN as u32 + 1),
        (Op::ReadReq, 0x8000_0000),
    ] {
        let v = Victim::new(&p.c);
        let mut s = v.dial();
        send(&mut s, &req(op, 0, len, v.t.rkey(), v.t.base()), &[]);
        expect_nak(&mut s, 0, Syndrome::RemAccess);
        v.assert_failed();
        v.t.assert_untouched();
    }
    // Atomics ignore the length field: exactly 8 bytes change.
    {
        let v = Victim::new(&p.c);
        let mut s = v.dial();
        let fill = u64::from_ne_bytes([FILL; 8]);
        let mut h = req(Op::CmpSwap, 0, u32::MAX, v.t.rkey(), v.t.base() + 8);
        h.compare_add = fill;
        h.swap = 0x0102_0304_0506_0708;
        send(&mut s, &h, &[]);
        let mut h = req(Op::FetchAdd, 1, 12345, v.t.rkey(), v.t.base() + 16);
        h.compare_add = 1;
        send(&mut s, &h, &[]);
        let r = read_resp(&mut s);
        assert_eq!((r.op, r.msn, r.compare_add), (Op::AtomicResp, 0, fill));
        let r = read_resp(&mut s);
        assert_eq!((r.op, r.msn, r.compare_add), (Op::AtomicResp, 1, fill));
        let m = v.t.assert_guards();
        let mut want = vec![FILL; LEN];
        want[8..16].copy_from_slice(&0x0102_0304_0506_0708u64.to_ne_bytes());
        want[16..24].copy_from_slice(&(fill + 1).to_ne_bytes());
        assert_eq!(m, want);
        assert_eq!(qp_state(v.qp), IBV_QPS_RTR);
    }
    // A WRITE announcing more payload than ever comes, then the peer
    // stalls: the progress thread waits without spinning, and only bytes of
    // the granted range are written.
    {
        let v = Victim::new(&p.c);
        let mut s = v.dial();
        send(
            &mut s,
            &req(Op::Write, 0, 1000, v.t.rkey(), v.t.base() + 100),
            &[0x77; 10],
        );
        after(&p, 3);
        assert_eq!(qp_state(v.qp), IBV_QPS_RTR);
        drop(s);
        let m = v.t.assert_guards();
        assert!(m[..100].iter().all(|&b| b == FILL));
        assert!(m[100..110].iter().all(|&b| b == 0x77 || b == FILL));
        assert!(m[110..].iter().all(|&b| b == FILL));
    }
    after(&p, 4);
}

/// Requests naming keys the peer was never given, or keys without the
/// needed right, are refused and leave all memory alone.
#[test]
fn forged_rkeys() {
    let _s = serial();
    let p = Pair::new();
    let pair_mem = p.buf(LEN);
    let pair_before = pair_mem.snapshot();
    let ops = [
        Op::Write,
        Op::WriteImm,
        Op::ReadReq,
        Op::CmpSwap,
        Op::FetchAdd,
    ];
    for op in ops {
        for which in 0..5 {
            let v = Victim::new(&p.c);
            let ro = Target::new(v.pd, IBV_ACCESS_REMOTE_READ);
            let local = Target::new(v.pd, IBV_ACCESS_LOCAL_WRITE);
            let (rkey, addr) = match which {
                0 => (0, v.t.base()),
                1 => (0xdead_beef, v.t.base()),
                // A key of another PD, at its own address.
                2 => (pair_mem.rkey(), pair_mem.addr()),
                // A key with no remote rights at all.
                3 => (local.rkey(), local.base()),
                // Read-only for writes and atomics; a bit-flipped key of the
                // victim's own MR for READs.
                _ if op == Op::ReadReq => (v.t.rkey() ^ 0x100, v.t.base()),
                _ => (ro.rkey(), ro.base()),
            };
            let mut s = v.dial();
            let mut h = req(op, 0, 8, rkey, addr);
            h.compare_add = 5;
            h.swap = 6;
            send(&mut s, &h, &[]);
            expect_nak(&mut s, 0, Syndrome::RemAccess);
            v.assert_failed();
            v.t.assert_untouched();
            ro.assert_untouched();
            local.assert_untouched();
        }
    }
    assert_eq!(pair_mem.snapshot(), pair_before);
    after(&p, 5);
}

/// Where a forged request points: relative to the victim's MR, or fixed.
#[derive(Clone, Copy)]
enum At {
    Rel(i64),
    Abs(u64),
}

/// Valid key, addresses outside the range (including ones where
/// address + length wraps past u64::MAX).
#[test]
fn out_of_range_and_wrapping_addresses() {
    let _s = serial();
    let p = Pair::new();
    let l = LEN as i64;
    let mut cases: Vec<(Op, At, u32)> = Vec::new();
    for op in [Op::Write, Op::ReadReq] {
        for (at, len) in [
            (At::Rel(-1), 2u32),
            (At::Rel(-(GUARD as i64)), GUARD as u32),
            (At::Rel(l - 4), 8),
            (At::Rel(l), 1),
            (At::Rel(1), LEN as u32),
            (At::Abs(0), 1),
            (At::Abs(u64::MAX - 3), 8),
            (At::Abs(u64::MAX), u32::MAX),
            (At::Abs(u64::MAX - LEN as u64 + 1), LEN as u32),
        ] {
            cases.push((op, at, len));
        }
    }
    for op in [Op::CmpSwap, Op::FetchAdd] {
        for at in [
            At::Rel(l),
            At::Rel(l - 4),
            At::Rel(-8),
            At::Rel(4),
            At::Rel(1),
            At::Abs(0),
            At::Abs(u64::MAX - 7),
            At::Abs(u64::MAX),
        ] {
            cases.push((op, at, 8));
        }
    }
    for (op, at, len) in cases {
        let v = Victim::new(&p.c);
        let addr = match at {
            At::Rel(off) => v.t.base().wrapping_add(off as u64),
            At::Abs(a) => a,
        };
        let mut s = v.dial();
        let mut h = req(op, 0, len, v.t.rkey(), addr);
        h.compare_add = u64::MAX;
        h.swap = u64::MAX;
        send(&mut s, &h, &[]);
        // A misaligned atomic is an invalid request, whatever its range.
        let atomic = matches!(op, Op::CmpSwap | Op::FetchAdd);
        let syn = if atomic && addr % 8 != 0 {
            Syndrome::RemInvReq
        } else {
            Syndrome::RemAccess
        };
        expect_nak(&mut s, 0, syn);
        v.assert_failed();
        v.t.assert_untouched();
    }
    after(&p, 6);
}

#[test]
fn zero_and_max_lengths() {
    let _s = serial();
    let p = Pair::new();
    let v = Victim::new(&p.c);
    let mut s = v.dial();
    // Zero-length transfers name no memory: nothing is checked or touched.
    send(&mut s, &req(Op::Write, 0, 0, 0xdead_beef, u64::MAX), &[]);
    send(&mut s, &req(Op::ReadReq, 1, 0, 0, u64::MAX), &[]);
    let a = read_resp(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 0));
    let r = read_resp(&mut s);
    assert_eq!((r.op, r.msn, r.length), (Op::ReadResp, 1, 0));
    v.t.assert_untouched();
    // The whole MR, exactly.
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 13 + 1) as u8).collect();
    send(
        &mut s,
        &req(Op::Write, 2, LEN as u32, v.t.rkey(), v.t.base()),
        &pattern,
    );
    let a = read_resp(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 2));
    assert_eq!(v.t.assert_guards(), pattern);
    send(
        &mut s,
        &req(Op::ReadReq, 3, LEN as u32, v.t.rkey(), v.t.base()),
        &[],
    );
    let r = read_resp(&mut s);
    assert_eq!((r.op, r.msn, r.length), (Op::ReadResp, 3, LEN as u32));
    let mut back = vec![0u8; LEN];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, pattern);
    // A zero-length SEND consumes the receive and writes nothing.
    send(&mut s, &req(Op::Send, 4, 0, 0, 0), &[]);
    let w = wait_wc(v.cq);
    assert_eq!((w.status, w.wr_id, w.byte_len), (IBV_WC_SUCCESS, 1, 0));
    let a = read_resp(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 4));
    assert!(v.recv.snapshot().iter().all(|&b| b == 0));
    assert_eq!(qp_state(v.qp), IBV_QPS_RTR);
    after(&p, 7);
}

#[test]
fn unknown_and_misplaced_opcodes() {
    let _s = serial();
    let p = Pair::new();
    for op in [
        0x00u8, 0x08, 0x42, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0xff,
    ] {
        let v = Victim::new(&p.c);
        let mut s = v.dial();
        let mut b = bytes(&req(Op::Write, 0, 8, v.t.rkey(), v.t.base()));
        b[0] = op;
        s.write_all(&b).unwrap();
        let _ = s.write_all(&[0x99; 8]);
        expect_closed(&mut s);
        v.assert_failed();
        v.t.assert_untouched();
    }
    after(&p, 8);
}

#[test]
fn half_a_hello_or_header_then_silence() {
    let _s = serial();
    let p = Pair::new();
    // Half a hello.
    let v = Victim::new(&p.c);
    let mut s = dial(v.qpn());
    let h = hello(FAKE, v.qpn());
    s.write_all(&h[..20]).unwrap();
    after(&p, 9);
    s.write_all(&h[20..]).unwrap();
    send(&mut s, &req(Op::Send, 0, 2, 0, 0), b"hi");
    let w = wait_wc(v.cq);
    assert_eq!((w.status, w.byte_len), (IBV_WC_SUCCESS, 2));
    assert_eq!(&v.recv.snapshot()[..2], b"hi");

    // Half a header.
    let v = Victim::new(&p.c);
    let mut s = v.dial();
    let b = bytes(&req(Op::Send, 0, 3, 0, 0));
    s.write_all(&b[..20]).unwrap();
    after(&p, 10);
    assert_eq!(qp_state(v.qp), IBV_QPS_RTR);
    s.write_all(&b[20..]).unwrap();
    s.write_all(b"xyz").unwrap();
    let w = wait_wc(v.cq);
    assert_eq!((w.status, w.byte_len), (IBV_WC_SUCCESS, 3));
    assert_eq!(&v.recv.snapshot()[..3], b"xyz");
    let a = read_resp(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 0));

    // Half a header, then the peer goes away.
    let v = Victim::new(&p.c);
    let mut s = v.dial();
    s.write_all(&b[..47]).unwrap();
    drop(s);
    after(&p, 11);
    v.assert_unharmed();
}

#[test]
fn silent_strangers_are_dropped() {
    let _s = serial();
    let p = Pair::new();
    let v = Victim::new(&p.c);
    let mut silent = dial(v.qpn());
    // Still held half a second later: a slow peer is not cut off at once.
    silent
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 1];
    match silent.read(&mut b) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        r => panic!("silent connection not held: {r:?}"),
    }
    // Dropped by the hello deadline (5 s), so strangers that say nothing
    // cannot pile up descriptors.
    silent
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let t0 = Instant::now();
    expect_closed(&mut silent);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "closed after {:?}",
        t0.elapsed()
    );
    after(&p, 12);
    v.assert_unharmed();
}

/// Strangers that connect and say nothing fill the QP's queue of
/// unidentified connections; the real peer, arriving right behind them,
/// still gets through: the oldest silent connection gives way.
#[test]
fn the_peer_gets_through_behind_silent_strangers() {
    let _s = serial();
    let p = Pair::new();
    let v = Victim::new(&p.c);
    let silent: Vec<TcpStream> = (0..20).map(|_| dial(v.qpn())).collect();
    let mut s = v.dial();
    send(&mut s, &req(Op::Send, 0, 3, 0, 0), b"xyz");
    let w = wait_wc(v.cq);
    assert_eq!((w.status, w.wr_id, w.byte_len), (IBV_WC_SUCCESS, 1, 3));
    assert_eq!(&v.recv.snapshot()[..3], b"xyz");
    let a = read_resp(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 0));
    drop(silent);
    after(&p, 14);
}

#[test]
fn flood_of_connections() {
    let _s = serial();
    let p = Pair::new();
    let v = Victim::new(&p.c);
    let me = v.qpn();
    let mut conns = Vec::new();
    let deadline = Instant::now() + WAIT;
    for i in 0..300u32 {
        assert!(Instant::now() < deadline, "flood took too long");
        let port = if i % 3 == 0 { qpn(p.b) } else { me };
        let mut s = dial(port);
        let _ = match i % 5 {
            0 => Ok(()),
            1 => s.write_all(&hello(FAKE, port)[..30]),
            2 => s.write_all(&[i as u8; HDR_LEN]),
            3 => s.write_all(&hello(FAKE, port + 1)),
            // The victim's expected peer, over and over; at the real QP, a
            // stranger.
            _ => s.write_all(&hello(FAKE, port)),
        };
        conns.push(s);
    }
    after(&p, 12);
    assert_eq!(qp_state(v.qp), IBV_QPS_RTR);
    drop(conns);
    after(&p, 13);
    v.t.assert_untouched();
}

/// A peer that asks for data and never reads it: the victim stops reading
/// requests once its responses back up, and the progress thread idles.
#[test]
fn read_flood_from_a_peer_that_never_reads() {
    let _s = serial();
    let p = Pair::new();
    let v = Victim::new(&p.c);
    let mut s = v.dial();
    s.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut msn = 0u32;
    let mut b = bytes(&req(Op::ReadReq, 0, LEN as u32, v.t.rkey(), v.t.base()));
    let mut off = 0;
    let mut stuck = 0;
    // Write requests until the victim's side stays full.
    while stuck < 3 {
        assert!(Instant::now() < deadline, "victim never pushed back");
        if off == HDR_LEN {
            msn += 1;
            b = bytes(&req(Op::ReadReq, msn, LEN as u32, v.t.rkey(), v.t.base()));
            off = 0;
        }
        match s.write(&b[off..]) {
            Ok(k) => {
                off += k;
                stuck = 0;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                stuck += 1;
                std::thread::yield_now();
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    assert!(msn > 1000, "only {msn} requests fit");
    after(&p, 14);
    assert_eq!(qp_state(v.qp), IBV_QPS_RTR);
    drop(s);
    after(&p, 15);
    v.t.assert_untouched();
}

/// A SEND that finds no receive, from a peer asking for one RNR retry: the
/// victim refuses it at the deadline and stays usable; with infinite retry
/// it waits without spinning.
#[test]
fn rnr_from_a_forged_peer() {
    let _s = serial();
    let p = Pair::new();
    let c = &p.c;
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts {
        min_rnr_timer: 1,
        ..ConnOpts::default()
    };
    to_init(q, o.access);
    to_rtr(q, FAKE, &o);
    let mut s = dial(qpn(q));
    s.write_all(&hello(FAKE, qpn(q))).unwrap();
    let mut h = req(Op::Send, 0, 4, 0, 0);
    h.set_rnr_retry(1);
    send(&mut s, &h, b"rnr!");
    // The responder says it waits (so the requester's retry timer does not
    // run out), then gives up.
    let r = read_resp(&mut s);
    assert_eq!((r.op, r.msn), (Op::RnrWait, 0));
    expect_nak(&mut s, 0, Syndrome::RnrRetryExc);
    assert_eq!(qp_state(q), IBV_QPS_RTR);

    // Connections are bound to one per RTR: the peer comes back only after
    // the QP is reset and connected again.
    reset(q);
    to_init(q, o.access);
    to_rtr(q, FAKE, &o);
    let mut s = dial(qpn(q));
    s.write_all(&hello(FAKE, qpn(q))).unwrap();
    let mut h = req(Op::Send, 0, 4, 0, 0);
    h.set_rnr_retry(7);
    send(&mut s, &h, b"wait");
    after(&p, 16);
    let recv = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 5, &mut [recv.sge(0, 8)]), 0);
    let w = wait_wc(cq);
    assert_eq!((w.status, w.wr_id, w.byte_len), (IBV_WC_SUCCESS, 5, 4));
    assert_eq!(&recv.snapshot()[..4], b"wait");
    let mut a = read_resp(&mut s);
    while a.op == Op::RnrWait {
        assert_eq!(a.msn, 0);
        a = read_resp(&mut s);
    }
    assert_eq!((a.op, a.msn), (Op::Ack, 0));
}

/// Accepts one connection within the deadline.
fn accept_bounded(l: &std::net::TcpListener) -> TcpStream {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(WAIT)).unwrap();
                s.set_write_timeout(Some(WAIT)).unwrap();
                return s;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "QP never connected");
                std::thread::yield_now();
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// The other direction: a forged responder answers a READ with nonsense.
/// The requester fails the WR and writes nothing outside the READ's own
/// destination.
#[test]
fn forged_responses_to_a_read() {
    let _s = serial();
    let p = Pair::new();
    let c = &p.c;
    enum Reply {
        Hdr(Header),
        Raw(&'static [u8]),
    }
    let resp = |op: Op, msn: u32, len: u32| {
        let mut h = Header::new(op, msn);
        h.length = len;
        h
    };
    let mut bad_syn = resp(Op::Nak, 0, 0);
    bad_syn.syndrome = 0xff;
    let cases: Vec<(Reply, &[u8], ibv_wc_status)> = vec![
        (
            Reply::Hdr(resp(Op::ReadResp, 0, u32::MAX)),
            &[],
            IBV_WC_BAD_RESP_ERR,
        ),
        (
            Reply::Hdr(resp(Op::ReadResp, 0, 15)),
            &[7; 15],
            IBV_WC_BAD_RESP_ERR,
        ),
        (
            Reply::Hdr(resp(Op::ReadResp, 0, 17)),
            &[7; 17],
            IBV_WC_BAD_RESP_ERR,
        ),
        (
            Reply::Hdr(resp(Op::ReadResp, 9, 16)),
            &[7; 16],
            IBV_WC_BAD_RESP_ERR,
        ),
        (
            Reply::Hdr(resp(Op::AtomicResp, 0, 0)),
            &[],
            IBV_WC_BAD_RESP_ERR,
        ),
        (Reply::Hdr(resp(Op::Ack, 0, 0)), &[], IBV_WC_BAD_RESP_ERR),
        (
            Reply::Hdr(resp(Op::Write, 0, 16)),
            &[7; 16],
            IBV_WC_BAD_RESP_ERR,
        ),
        (Reply::Raw(&[0x99; HDR_LEN]), &[], IBV_WC_BAD_RESP_ERR),
        (Reply::Hdr(bad_syn), &[], IBV_WC_REM_OP_ERR),
        (Reply::Raw(&[0x82; 20]), &[], IBV_WC_RETRY_EXC_ERR),
        // Right header, half the data, then the peer is gone.
        (
            Reply::Hdr(resp(Op::ReadResp, 0, 16)),
            &[7; 8],
            IBV_WC_RETRY_EXC_ERR,
        ),
    ];
    for (reply, data, status) in cases {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fake = l.local_addr().unwrap().port() as u32;
        let pd = c.alloc_pd();
        let cq = c.cq(16, null_mut());
        let q = c.qp(pd, cq, cq);
        let o = ConnOpts::default();
        to_init(q, o.access);
        to_rtr(q, fake, &o);
        to_rts(q, &o);
        let (mut s, _) = FakeWire::accept(accept_bounded(&l));
        let t = Target::new(pd, IBV_ACCESS_LOCAL_WRITE);
        let mut sg = [ibv_sge {
            addr: t.base() + 8,
            length: 16,
            lkey: t.rkey(),
        }];
        let mut w = send_wr(1, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0x1000,
            rkey: 0x1234,
        };
        assert_eq!(post_send(q, &mut w), 0);
        let mut rq = [0u8; HDR_LEN];
        s.read_exact(&mut rq).unwrap();
        let r = Header::decode(&rq).unwrap();
        assert_eq!((r.op, r.length), (Op::ReadReq, 16));
        match reply {
            Reply::Hdr(h) => {
                let _ = s.write_all(&bytes(&h));
            }
            Reply::Raw(b) => {
                let _ = s.write_all(b);
            }
        }
        let _ = s.write_all(data);
        if status == IBV_WC_RETRY_EXC_ERR {
            drop(s);
        }
        let e = wait_wc(cq);
        assert_eq!((e.status, e.wr_id), (status, 1));
        assert_eq!(qp_state(q), IBV_QPS_ERR);
        // Only the READ's own 16 bytes may have changed (with a partial
        // transfer), never anything around them.
        let m = t.assert_guards();
        assert!(m[..8].iter().all(|&b| b == FILL));
        assert!(m[24..].iter().all(|&b| b == FILL));
        if status != IBV_WC_RETRY_EXC_ERR {
            assert!(m[8..24].iter().all(|&b| b == FILL));
        }
    }
    after(&p, 17);
}
