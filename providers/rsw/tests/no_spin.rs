//! The progress thread must not spin on a dead connection it is not reading
//! (here: an RNR-stalled incoming connection whose peer resets it). Alone in
//! its own test binary so the process's progress thread serves only it.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use rsw::wire::{Header, Hello, Op, HDR_LEN};
use verbs_abi::*;

#[test]
fn reset_of_a_stalled_connection_does_not_spin() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(4, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, 4300, &o);

    let mut s = TcpStream::connect(("127.0.0.1", qpn(q) as u16)).unwrap();
    let mut b = [0u8; HDR_LEN];
    // The peer named at RTR: its QPN and GID (::ffff:127.0.0.1).
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[127, 0, 0, 1]);
    Hello {
        src_gid: gid,
        src_qpn: 4300,
        dst_qpn: qpn(q),
        psn: 0,
        features: 0,
    }
    .encode(&mut b);
    s.write_all(&b).unwrap();
    // A SEND with no receive posted and infinite RNR retry: it stalls.
    let mut h = Header::new(Op::Send, 0);
    h.length = 8;
    h.set_rnr_retry(7);
    h.encode(&mut b);
    s.write_all(&b).unwrap();
    s.write_all(&[1; 8]).unwrap();
    // COMM_EST proves the request was read and the connection stalled.
    let mut ev = get_async(c.ctx).expect("COMM_EST");
    assert_eq!(ev.event_type, IBV_EVENT_COMM_EST);
    ack_async(&mut ev);

    // Reset (not a clean close) the connection.
    let lin = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid linger struct on our socket.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &lin as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    drop(s);

    // Observe the progress thread for a while (a measurement window, not
    // synchronisation): a spinning thread would use nearly all of it (clock
    // ticks are 10 ms).
    let before = progress_ticks();
    std::thread::sleep(Duration::from_millis(300));
    let used = progress_ticks() - before;
    assert!(used <= 5, "progress thread used {used} ticks in 300 ms");
    assert_eq!(qp_state(q), IBV_QPS_RTR);
}
