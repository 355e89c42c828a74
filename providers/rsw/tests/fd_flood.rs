//! Descriptor exhaustion: with `ulimit -n 256`, an outsider opens 312
//! connections carrying valid-looking hellos to QPs that have not reached
//! RTR. The victim must keep its descriptors: pending connections stay
//! under a quarter of the limit (plus the one each QP is owed), and the
//! victim can still open files and create QPs. Then, with no descriptor left, moving a QP to RTR fails with
//! EMFILE (and leaves it in INIT) instead of failing later at the first
//! post. The victim is a forked child; alone in its binary because of the
//! fork.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;

use std::ptr::null_mut;
use std::time::Instant;

use common::*;
use rsw::testing::pending_connections;
use rsw::testing::refused_connections;
use rsw::wire::{Hello, HDR_LEN};
use verbs_abi::*;

const QPS: usize = 12;
const PER_QP: usize = 26;
const LIMIT: u64 = 256;

fn child(mut to_parent: File, mut from_parent: File) {
    set_nofile(LIMIT);
    let c = Ctx::open();
    // The advertised QP limit is what 256 descriptors can hold (three per
    // connected QP, 64 kept for the application).
    let mut ex = ibv_device_attr_ex::zeroed();
    // SAFETY: ctx is open; ex is a valid out-struct of the given size.
    let rc = unsafe {
        rsw::verbs_rs_provider_v1.query_device_ex.unwrap()(
            c.ctx,
            null_mut(),
            &mut ex,
            std::mem::size_of_val(&ex),
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(ex.orig_attr.max_qp, ((LIMIT - 64) / 3) as i32);
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let access = ConnOpts::default().access;
    let qps: Vec<*mut ibv_qp> = (0..QPS)
        .map(|_| {
            let q = c.qp(pd, cq, cq);
            to_init(q, access);
            q
        })
        .collect();
    for &q in &qps {
        to_parent.write_all(&qpn(q).to_ne_bytes()).unwrap();
    }
    let mut b = [0u8; 1];
    from_parent.read_exact(&mut b).unwrap();
    // Every connection was either held or refused.
    let total = (QPS * PER_QP) as u64;
    assert!(
        wait_until(|| refused_connections() + pending_connections() as u64 >= total),
        "refused {} pending {}",
        refused_connections(),
        pending_connections()
    );
    // A quarter of the limit, plus the one connection each QP is owed
    // (it becomes that QP's incoming connection, a descriptor it needs
    // anyway).
    let held = pending_connections() as u64;
    assert!(held <= LIMIT / 4 + QPS as u64, "{held} connections held");
    assert!(held > 0, "nothing held: the cap is not what is tested");
    // The victim's own descriptors still work.
    let f = File::open("/dev/null").expect("open() after the flood");
    drop(f);
    let extra = c.qp(pd, cq, cq);
    to_init(extra, access);
    let other = c.qp(pd, cq, cq);
    to_init(other, access);

    // No descriptor left: RTR cannot open its connection and says so.
    let mut filler = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => filler.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
                break;
            }
        }
    }
    let (mut a, mask) = rtr_attr(qpn(other), &ConnOpts::default());
    assert_eq!(modify(extra, &mut a, mask), libc::EMFILE);
    assert_eq!(qp_state(extra), IBV_QPS_INIT);
    drop(filler);
    assert_eq!(modify(extra, &mut a, mask), 0);
    assert_eq!(qp_state(extra), IBV_QPS_RTR);
    to_parent.write_all(&[1]).unwrap();
}

#[test]
fn a_connection_flood_cannot_take_the_victims_descriptors() {
    let (pid, mut from_child, mut to_child) = fork_child(60, child);
    set_nofile(4096);
    let mut ports = Vec::new();
    for _ in 0..QPS {
        let mut q = [0u8; 4];
        from_child.read_exact(&mut q).expect("child started");
        ports.push(u32::from_ne_bytes(q));
    }
    let mut conns = Vec::new();
    for &port in &ports {
        for i in 0..PER_QP {
            let mut s = TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
            let mut h = [0u8; HDR_LEN];
            Hello {
                src_gid: lo_gid(),
                src_qpn: 6000 + i as u32,
                dst_qpn: port,
                psn: 0,
                features: 0,
            }
            .encode(&mut h);
            // The victim may have closed it already.
            let _ = s.write_all(&h);
            conns.push(s);
        }
    }
    to_child.write_all(&[1]).unwrap();
    let deadline = Instant::now() + WAIT * 3;
    let mut b = [0u8; 1];
    let got = from_child.read(&mut b).unwrap_or(0);
    expect_child_ok(pid, deadline - Instant::now());
    drop(conns);
    assert_eq!(got, 1);
}
