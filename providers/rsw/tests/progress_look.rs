//! A passive target's progress thread keeps looking for the next request
//! after serving a READ whose requester waits for it (`wire::FLAG_WAITS`:
//! nothing else of the requester's is unanswered), instead of sleeping in
//! `epoll`; for READs without the flag it sleeps between requests as
//! before. A hand-written requester on a raw socket sends the READs and
//! checks every byte of the answers; nobody polls the responder's CQ.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ptr::null_mut;

use common::*;
use rsw::wire::{Header, Op, FLAG_WAITS, HDR_LEN};
use verbs_abi::*;

const N: u32 = 200;
const LEN: usize = 64;

/// How many times the progress thread went to sleep (blocked) so far. A
/// thread that looks without sleeping yields the core now and then, which
/// the kernel counts as involuntary.
fn progress_sleeps() -> u64 {
    let s = std::fs::read_to_string(progress_task().join("status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .expect("voluntary_ctxt_switches")
        .trim()
        .parse()
        .unwrap()
}

/// Whether the progress thread is asleep (state S: in `epoll_wait`, as
/// nothing else here blocks it).
fn progress_asleep() -> bool {
    let stat = std::fs::read_to_string(progress_task().join("stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..].starts_with('S')
}

/// Sends READs `msn0..msn0 + N` one at a time, each after the answer to
/// the one before (and, with `settle`, once the progress thread is
/// asleep), and checks each answer's bytes; returns how often the
/// progress thread slept meanwhile.
fn reads(s: &mut TcpStream, buf: &Buf, msn0: u32, flags: u8, settle: bool) -> u64 {
    let mem = buf.bytes().to_vec();
    let before = progress_sleeps();
    for i in 0..N {
        let msn = msn0 + i;
        let off = (i as usize * 24) % (buf.len - LEN);
        let mut h = Header::new(Op::ReadReq, msn);
        h.length = LEN as u32;
        h.remote_addr = buf.addr() + off as u64;
        h.rkey = buf.rkey();
        h.flags |= flags;
        let mut hb = [0u8; HDR_LEN];
        h.encode(&mut hb);
        s.write_all(&hb).unwrap();
        let r = read_response(s);
        assert_eq!(
            (r.op, r.msn, r.length),
            (Op::ReadResp, msn, LEN as u32),
            "{r:?}"
        );
        let mut data = [0u8; LEN];
        s.read_exact(&mut data).unwrap();
        assert!(data[..] == mem[off..off + LEN], "READ {msn}: wrong bytes");
        if settle {
            assert!(
                wait_until(progress_asleep),
                "the progress thread never slept"
            );
        }
    }
    progress_sleeps() - before
}

#[test]
fn a_waiting_requester_keeps_the_progress_thread_looking() {
    // A window no scheduling hiccup of a loaded test machine outlasts, set
    // before the progress thread starts (it reads it once).
    std::env::set_var("RSW_PROGRESS_SPIN_US", "2000000");
    let peer = 5301;
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let mut a = c.qp_attr(pd, cq, cq);
    let q = c.create_qp(&mut a);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer, &o);
    let mut buf = Buf::new(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    for (i, b) in buf.bytes_mut().iter_mut().enumerate() {
        *b = (i * 13 + 7) as u8;
    }
    let mut s = TcpStream::connect(("127.0.0.1", qpn(q) as u16)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(&hello(peer, qpn(q))).unwrap();

    // Without the flag the thread sleeps once the answer is out (the next
    // READ waits for that here; without the wait 82 to 200 of 200 READs
    // found it asleep, fewer on a loaded machine), and each READ wakes it.
    let asleep = reads(&mut s, &buf, 0, 0, true);
    // With it, from the second READ on it does not sleep at all (1 of
    // 200, measured, also beside two CPU hogs; 32 to 200 without looking).
    let looking = reads(&mut s, &buf, N, FLAG_WAITS, false);
    assert!(
        asleep >= N as u64 - 2,
        "{N} READs without the flag: the progress thread slept {asleep} times"
    );
    assert!(
        looking <= N as u64 / 10,
        "{N} waiting READs: the progress thread slept {looking} times"
    );
    assert_eq!(qp_state(q), IBV_QPS_RTR);
    drop(buf);
}
