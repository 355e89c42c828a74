//! rsw's log (`VERBS_LOG_LEVEL`, `VERBS_LOG_FILE`, README "Logging"): a
//! forged hello and a registration of unmapped memory each leave a line
//! naming the object and the reason. One test in its own binary: the
//! logger reads the environment once per process.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

#[test]
fn refusals_and_failed_registrations_are_logged() {
    let path = std::env::temp_dir().join(format!("rsw-log-test-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    std::env::set_var("VERBS_LOG_LEVEL", "2");
    std::env::set_var("VERBS_LOG_FILE", &path);
    let read = || std::fs::read_to_string(&path).unwrap_or_default();

    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, std::ptr::null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    const PEER: u32 = 4411;
    to_rtr(q, PEER, &o);

    // A hello with the right QPN but another GID.
    let mut outsider = [0u8; 16];
    outsider[10] = 0xff;
    outsider[11] = 0xff;
    outsider[12..].copy_from_slice(&[8, 8, 8, 8]);
    let mut s = TcpStream::connect(("127.0.0.1", qpn(q) as u16)).unwrap();
    s.write_all(&hello_from(outsider, PEER, qpn(q))).unwrap();
    let want = format!(
        "warning: engine::responder: qp {:#x}: refused a connection from ::ffff:127.0.0.1: forged peer: its GID is not the one given at RTR",
        qpn(q)
    );
    assert!(
        wait_until(|| read().contains(&want)),
        "no {want:?} in:\n{}",
        read()
    );

    // Unmapped memory: EFAULT, with the range.
    // SAFETY: an anonymous mapping, unmapped at once: the range is a hole.
    let hole = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        libc::munmap(p, 8192);
        p
    };
    // SAFETY: pd is live; the provider checks the range.
    let mr = unsafe { OPS.reg_mr.unwrap()(pd, hole, 8192, hole as u64, IBV_ACCESS_LOCAL_WRITE) };
    if mr.is_null() {
        let want =
            format!("error: mr: reg_mr {hole:p}+0x2000: memory not mapped writable (EFAULT)");
        assert!(read().contains(&want), "no {want:?} in:\n{}", read());
    } else {
        // Another thread mapped the hole again; nothing to check.
        // SAFETY: the MR just registered.
        unsafe { OPS.dereg_mr.unwrap()(mr) };
    }
    // A refused modify: the QP, the attributes and the errno.
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_SQD; // RTR -> SQD is no transition
    assert_eq!(modify(q, &mut a, IBV_QP_STATE), libc::EINVAL);
    let want = format!(
        "error: qp::modify: modify_qp qp {:#x}: attributes {:#x} toward state {} refused (errno 22)",
        qpn(q),
        IBV_QP_STATE,
        IBV_QPS_SQD
    );
    assert!(
        read().contains(&want),
        "no {want:?} in:
{}",
        read()
    );

    // Level 2: nothing below warnings.
    assert!(
        !read().contains(": info: ") && !read().contains(": debug: "),
        "{}",
        read()
    );
    let _ = std::fs::remove_file(&path);
}
