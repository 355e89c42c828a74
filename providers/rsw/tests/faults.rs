//! Fault injection (`RSW_FAULTS`, set here through `rsw::testing::configure_faults`)
//! and the counters: each fault reaches the application as the exact
//! completion statuses, async events and QP states real hardware gives,
//! and the counters count exactly what was sent.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::ptr::null_mut;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

/// The fault configuration is process-wide: one scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    // Every count below is of the connection's responder: no same-host path.
    std::env::set_var("RSW_TRANSPORT", "tcp");
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pair whose faults are configured, by `spec(qpn_a, qpn_b)`, after the
/// QPs exist and before they connect.
fn pair(oa: ConnOpts, ob: ConnOpts, spec: impl Fn(u32, u32) -> String) -> Pair {
    rsw::testing::configure_faults(None).unwrap();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let s = spec(0, 0);
    // A CQ takes its overrun rule at creation.
    if s.starts_with("cq:") {
        rsw::testing::configure_faults(Some(&s)).unwrap();
    }
    let cq_a = c.cq(64, null_mut());
    let cq_b = c.cq(64, null_mut());
    let a = c.create_qp(&mut c.qp_attr(pd, cq_a, cq_a));
    let b = c.create_qp(&mut c.qp_attr(pd, cq_b, cq_b));
    rsw::testing::configure_faults(Some(&spec(qpn(a), qpn(b)))).unwrap();
    connect(a, &oa, b, &ob);
    Pair {
        c,
        pd,
        cq_a,
        cq_b,
        a,
        b,
    }
}

fn write_wr(wr_id: u64, sg: &mut [ibv_sge], raddr: u64, rkey: u32) -> ibv_send_wr {
    let mut wr = send_wr(wr_id, IBV_WR_RDMA_WRITE, sg, IBV_SEND_SIGNALED);
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: raddr,
        rkey,
    };
    wr
}

/// Posts `n` signaled 8-byte WRITEs from a to b's buffer, wr_id 1..=n,
/// byte i+1 in slot i.
fn post_writes(p: &Pair, src: &mut Buf, dst: &Buf, n: u64) {
    for i in 0..n {
        src.bytes_mut()[i as usize * 8] = i as u8 + 1;
        let mut sg = [src.sge(i as usize * 8, 8)];
        let mut wr = write_wr(i + 1, &mut sg, dst.addr() + i * 8, dst.rkey());
        assert_eq!(post_send(p.a, &mut wr), 0);
    }
}

fn statuses(wcs: &[ibv_wc]) -> Vec<(u64, ibv_wc_status)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// The next async event of the context, acknowledged.
fn next_event(ctx: *mut ibv_context) -> ibv_event_type {
    let mut ev = get_async(ctx).expect("an async event");
    let t = ev.event_type;
    ack_async(&mut ev);
    t
}

fn teardown(p: Pair) {
    destroy_qp(p.a);
    destroy_qp(p.b);
    rsw::testing::configure_faults(None).unwrap();
}

/// `fail=REM_ACCESS_ERR:after=2`: the third request is refused by the
/// peer's responder exactly as a bad rkey is: the requester gets
/// REM_ACCESS_ERR then flushes, the responder QP_ACCESS_ERR and ERR, and
/// the refused WRITE leaves the target untouched.
#[test]
fn remote_access_error_after_two() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |a, _| {
        format!("qp={a:#x}:fail=REM_ACCESS_ERR:after=2")
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    post_writes(&p, &mut src, &dst, 4);
    let wcs = wait_wcs(p.cq_a, 4);
    assert_eq!(
        statuses(&wcs),
        vec![
            (1, IBV_WC_SUCCESS),
            (2, IBV_WC_SUCCESS),
            (3, IBV_WC_REM_ACCESS_ERR),
            (4, IBV_WC_WR_FLUSH_ERR)
        ]
    );
    assert_eq!(
        &dst.snapshot()[..24],
        &[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(next_event(p.c.ctx), IBV_EVENT_QP_ACCESS_ERR);
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    assert!(wait_until(|| qp_state(p.b) == IBV_QPS_ERR));
    teardown(p);
}

/// `fail=REM_OP_ERR` on a SEND: the responder fails on its own receive
/// (LOC_PROT_ERR there), the requester sees REM_OP_ERR.
#[test]
fn remote_operation_error_on_send() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |a, _| {
        format!("qp={a}:fail=rem_op_err")
    });
    let src = p.buf(64);
    let dst = p.buf(64);
    assert_eq!(post_recv(p.b, 70, &mut [dst.sge(0, 64)]), 0);
    assert_eq!(post_recv(p.b, 71, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 16)];
    let mut wr = send_wr(9, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(statuses(&[wait_wc(p.cq_a)]), vec![(9, IBV_WC_REM_OP_ERR)]);
    assert_eq!(
        statuses(&wait_wcs(p.cq_b, 2)),
        vec![(70, IBV_WC_LOC_PROT_ERR), (71, IBV_WC_WR_FLUSH_ERR)]
    );
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    assert_eq!(qp_state(p.b), IBV_QPS_ERR);
    teardown(p);
}

/// `fail=REM_INV_REQ_ERR`: REM_INV_REQ_ERR at the requester, QP_REQ_ERR
/// at the responder.
#[test]
fn remote_invalid_request() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |a, _| {
        format!("qp={a}:fail=IBV_WC_REM_INV_REQ_ERR")
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    post_writes(&p, &mut src, &dst, 2);
    assert_eq!(
        statuses(&wait_wcs(p.cq_a, 2)),
        vec![(1, IBV_WC_REM_INV_REQ_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    );
    assert_eq!(next_event(p.c.ctx), IBV_EVENT_QP_REQ_ERR);
    teardown(p);
}

/// A local status fails the request at the requester, as its own failed
/// check would; the peer never hears of it and stays usable.
#[test]
fn local_protection_error() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |a, _| {
        format!("qp={a}:fail=LOC_PROT_ERR:after=1:count=1")
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    post_writes(&p, &mut src, &dst, 3);
    assert_eq!(
        statuses(&wait_wcs(p.cq_a, 3)),
        vec![
            (1, IBV_WC_SUCCESS),
            (2, IBV_WC_LOC_PROT_ERR),
            (3, IBV_WC_WR_FLUSH_ERR)
        ]
    );
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
    assert_eq!(dst.snapshot()[8], 0);
    teardown(p);
}

/// `rnr=3` against an RNR retry count of 1: the requester's retries run
/// out (RNR_RETRY_EXC_ERR) though a receive is posted; the responder stays
/// usable and keeps its receive.
#[test]
fn rnr_retries_exhausted() {
    let _l = lock();
    let oa = ConnOpts {
        rnr_retry: 1,
        min_rnr_timer: 1,
        ..Default::default()
    };
    let p = pair(oa, Default::default(), |a, _| format!("qp={a}:rnr=3"));
    let src = p.buf(64);
    let dst = p.buf(64);
    assert_eq!(post_recv(p.b, 70, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 16)];
    let mut wr = send_wr(5, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(
        statuses(&[wait_wc(p.cq_a)]),
        vec![(5, IBV_WC_RNR_RETRY_EXC_ERR)]
    );
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
    assert_no_wc(p.cq_b, Duration::from_millis(20));
    teardown(p);
}

/// `rnr=2` with retries to spare: the SEND waits two RNR periods, then
/// lands; both sides count one RNR NAK.
#[test]
fn rnr_then_delivered() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |a, _| {
        format!("qp={a}:rnr=2:count=1")
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    src.bytes_mut()[..4].copy_from_slice(b"rnr!");
    assert_eq!(post_recv(p.b, 70, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 4)];
    let mut wr = send_wr(5, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    let t = Instant::now();
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(statuses(&[wait_wc(p.cq_a)]), vec![(5, IBV_WC_SUCCESS)]);
    // min_rnr_timer 12 is 0.64 ms a period.
    assert!(t.elapsed() >= Duration::from_micros(1280));
    let w = wait_wc(p.cq_b);
    assert_eq!((w.wr_id, w.status, w.byte_len), (70, IBV_WC_SUCCESS, 4));
    assert_eq!(&dst.snapshot()[..4], b"rnr!");
    let s = stat_lines();
    assert_eq!(qp_counter(&s, qpn(p.a), "rcvd_rnr_err"), 1);
    assert_eq!(qp_counter(&s, qpn(p.b), "send_rnr_err"), 1);
    assert_eq!(qp_counter(&s, qpn(p.a), "faults_injected"), 1);
    teardown(p);
}

/// `fail=RETRY_EXC_ERR`: the request is lost; the requester's retry timer
/// runs out (RETRY_EXC_ERR, then flush), the responder never hears of it.
#[test]
fn lost_request_exhausts_retries() {
    let _l = lock();
    let oa = ConnOpts {
        timeout: 14,
        retry_cnt: 1,
        ..Default::default()
    };
    let p = pair(oa, Default::default(), |a, _| {
        format!("qp={a}:fail=RETRY_EXC_ERR:after=1")
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    post_writes(&p, &mut src, &dst, 3);
    assert_eq!(
        statuses(&wait_wcs(p.cq_a, 3)),
        vec![
            (1, IBV_WC_SUCCESS),
            (2, IBV_WC_RETRY_EXC_ERR),
            (3, IBV_WC_WR_FLUSH_ERR)
        ]
    );
    assert_eq!(dst.snapshot()[8], 0);
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
    let s = stat_lines();
    assert_eq!(qp_counter(&s, qpn(p.a), "local_ack_timeout_err"), 1);
    assert_eq!(qp_counter(&s, qpn(p.a), "req_cqe_error"), 1);
    assert_eq!(qp_counter(&s, qpn(p.a), "req_cqe_flush_error"), 1);
    teardown(p);
}

/// `kill:after=1`: the connection dies under the second request; both
/// sides' next requests exhaust their retries, as over a cut cable.
#[test]
fn killed_connection() {
    let _l = lock();
    let o = ConnOpts {
        timeout: 14,
        retry_cnt: 1,
        ..Default::default()
    };
    let p = pair(o, o, |a, _| format!("qp={a}:kill:after=1"));
    let src = p.buf(64);
    let dst = p.buf(64);
    // One at a time: a request whose ACK is still on its way when the
    // cable is cut fails too.
    for i in 1..=2 {
        let mut sg = [src.sge(0, 8)];
        let mut wr = write_wr(i, &mut sg, dst.addr(), dst.rkey());
        assert_eq!(post_send(p.a, &mut wr), 0);
        let want = if i == 1 {
            IBV_WC_SUCCESS
        } else {
            IBV_WC_RETRY_EXC_ERR
        };
        assert_eq!(statuses(&[wait_wc(p.cq_a)]), vec![(i, want)]);
    }
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    // The peer's request finds nobody either.
    let mut sg = [dst.sge(0, 8)];
    let mut wr = write_wr(40, &mut sg, src.addr(), src.rkey());
    assert_eq!(post_send(p.b, &mut wr), 0);
    assert_eq!(
        statuses(&[wait_wc(p.cq_b)]),
        vec![(40, IBV_WC_RETRY_EXC_ERR)]
    );
    teardown(p);
}

/// `delay=`: the request arrives that much later, and succeeds.
#[test]
fn delayed_delivery() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |a, _| {
        format!("qp={a}:delay=60ms:count=1")
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    let t = Instant::now();
    post_writes(&p, &mut src, &dst, 2);
    assert_eq!(
        statuses(&wait_wcs(p.cq_a, 2)),
        vec![(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    );
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
    assert_eq!((dst.snapshot()[0], dst.snapshot()[8]), (1, 2));
    teardown(p);
}

/// `cq:overrun:after=2`: the third completion overruns the CQ:
/// IBV_EVENT_CQ_ERR, and its QP goes to ERR with IBV_EVENT_QP_FATAL.
#[test]
fn cq_overrun() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |_, _| {
        "cq:overrun:after=2".into()
    });
    let mut src = p.buf(64);
    let dst = p.buf(64);
    post_writes(&p, &mut src, &dst, 3);
    assert_eq!(
        statuses(&wait_wcs(p.cq_a, 2)),
        vec![(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    );
    let mut ev = get_async(p.c.ctx).expect("CQ_ERR");
    assert_eq!(ev.event_type, IBV_EVENT_CQ_ERR);
    // SAFETY: a CQ event names the CQ.
    assert_eq!(unsafe { ev.element.cq }, p.cq_a);
    ack_async(&mut ev);
    assert_eq!(next_event(p.c.ctx), IBV_EVENT_QP_FATAL);
    assert!(wait_until(|| qp_state(p.a) == IBV_QPS_ERR));
    // An overrun CQ reports the error once drained.
    assert_eq!(poll(p.cq_a, &mut [ibv_wc::zeroed()]), -1);
    teardown(p);
}

/// A bad spec: the device refuses to open (EINVAL), rather than run a
/// test that was meant to meet faults without them.
#[test]
fn bad_spec_refuses_open() {
    let _l = lock();
    let e = rsw::testing::configure_faults(Some("qp=*:fail=NOPE")).unwrap_err();
    assert!(e.contains("unknown status `NOPE`"), "{e}");
    let mut devs = vec![
        verbs_abi::provider::ProviderDevice {
            name: [0; verbs_abi::provider::DEVICE_NAME_MAX],
            node_type: 0,
            transport_type: 0,
            node_guid: 0,
            handle: null_mut(),
        };
        32
    ];
    // SAFETY: room for 32 entries.
    let n = unsafe { OPS.discover.unwrap()(devs.as_mut_ptr(), devs.len()) };
    assert!(n > 0);
    let mut dev = Box::new(ibv_device::zeroed());
    // SAFETY: a handle from discover.
    let ctx = unsafe { OPS.open_device.unwrap()(&mut *dev, devs[0].handle) };
    assert!(ctx.is_null());
    assert_eq!(errno(), libc::EINVAL);
    rsw::testing::configure_faults(None).unwrap();
}

// ---- counters ---------------------------------------------------------------

/// What `rsw-stat <our pid>` would print, read from our own socket.
fn stat_lines() -> Vec<String> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("rsw-stat.{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let mut s = UnixStream::connect_addr(&addr).expect("the stat socket");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().map(str::to_owned).collect()
}

/// A counter of QP `qpn` in the report.
fn qp_counter(lines: &[String], qpn: u32, name: &str) -> u64 {
    let head = format!("qp {qpn:#x} ");
    let start = lines
        .iter()
        .position(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("qp {qpn:#x} not in the report"));
    lines[start + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name}"))
        .parse()
        .unwrap()
}

fn device_counter(lines: &[String], dev: &str, name: &str) -> u64 {
    let start = lines
        .iter()
        .position(|l| *l == format!("device {dev}"))
        .expect("device in the report");
    lines[start + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix(&format!("{name} ")))
        .expect("counter")
        .parse()
        .unwrap()
}

/// Traffic of known size, counted exactly on both sides, and the device's
/// totals keep a destroyed QP's counts.
#[test]
fn counters_count_exactly() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |_, _| String::new());
    rsw::testing::configure_faults(None).unwrap();
    let before = stat_lines();
    let dev_sent = device_counter(&before, "rsw_lo", "sent_pkts");
    let mut src = p.buf(4096);
    let dst = p.buf(4096);
    for i in 0..3 {
        assert_eq!(post_recv(p.b, 100 + i, &mut [dst.sge(0, 4096)]), 0);
    }
    for i in 0..3 {
        let mut sg = [src.sge(0, 100)];
        let mut wr = send_wr(i, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
        assert_eq!(post_send(p.a, &mut wr), 0);
    }
    post_writes(&p, &mut src, &dst, 1);
    let mut sg = [src.sge(1000, 20)];
    let mut wr = send_wr(7, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr(),
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert!(wait_wcs(p.cq_a, 5)
        .iter()
        .all(|w| w.status == IBV_WC_SUCCESS));
    assert!(wait_wcs(p.cq_b, 3)
        .iter()
        .all(|w| w.status == IBV_WC_SUCCESS));
    let s = stat_lines();
    let (a, b) = (qpn(p.a), qpn(p.b));
    assert_eq!(qp_counter(&s, a, "sent_pkts"), 5);
    assert_eq!(qp_counter(&s, a, "sent_bytes"), 308);
    assert_eq!(qp_counter(&s, b, "rcvd_pkts"), 5);
    assert_eq!(qp_counter(&s, b, "rcvd_bytes"), 308);
    assert_eq!(qp_counter(&s, b, "rx_write_requests"), 1);
    assert_eq!(qp_counter(&s, b, "rx_read_requests"), 1);
    assert_eq!(qp_counter(&s, b, "rx_atomic_requests"), 0);
    assert_eq!(qp_counter(&s, a, "rcvd_pkts"), 0);
    assert_eq!(qp_counter(&s, a, "req_cqe_error"), 0);
    assert!(s
        .iter()
        .any(|l| *l == format!("qp {a:#x} device rsw_lo type RC state RTS")));
    assert_eq!(device_counter(&s, "rsw_lo", "sent_pkts"), dev_sent + 5);
    destroy_qp(p.a);
    let s = stat_lines();
    assert!(!s.iter().any(|l| l.starts_with(&format!("qp {a:#x} "))));
    assert_eq!(device_counter(&s, "rsw_lo", "sent_pkts"), dev_sent + 5);
    destroy_qp(p.b);
}

/// An overrun found by the polling thread itself (its poll drives the
/// responder, whose first receive completion overruns the CQ): the poll
/// reports the error, CQ_ERR and QP_FATAL come, nothing deadlocks.
#[test]
fn cq_overrun_met_while_polling() {
    let _l = lock();
    let p = pair(Default::default(), Default::default(), |_, _| {
        "cq:overrun".into()
    });
    let src = p.buf(64);
    let dst = p.buf(64);
    assert_eq!(post_recv(p.b, 70, &mut [dst.sge(0, 64)]), 0);
    // Busy polling, as ibv_rc_pingpong does, so the poll's own progress
    // meets the SEND; on another thread, so a deadlock fails the test
    // instead of hanging it.
    let cq = p.cq_b as usize;
    let (tx, rx) = std::sync::mpsc::channel();
    let poller = std::thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        let mut wc = [ibv_wc::zeroed()];
        let mut n = 0;
        while Instant::now() < deadline {
            n = poll(cq as *mut ibv_cq, &mut wc);
            if n != 0 {
                break;
            }
        }
        let _ = tx.send(n);
    });
    // Unsignaled: a's CQ stays out of it.
    let mut sg = [src.sge(0, 8)];
    let mut wr = send_wr(1, IBV_WR_SEND, &mut sg, 0);
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(
        rx.recv_timeout(WAIT * 2),
        Ok(-1),
        "the poll hung or did not fail"
    );
    poller.join().unwrap();
    let mut ev = get_async(p.c.ctx).expect("CQ_ERR");
    assert_eq!(ev.event_type, IBV_EVENT_CQ_ERR);
    // SAFETY: a CQ event names the CQ.
    assert_eq!(unsafe { ev.element.cq }, p.cq_b);
    ack_async(&mut ev);
    let mut ev = get_async(p.c.ctx).expect("QP_FATAL");
    assert_eq!(ev.event_type, IBV_EVENT_QP_FATAL);
    // SAFETY: a QP event names the QP.
    assert_eq!(unsafe { ev.element.qp }, p.b);
    ack_async(&mut ev);
    assert!(wait_until(|| qp_state(p.b) == IBV_QPS_ERR));
    teardown(p);
}

/// UC: nothing answers a UC request, so remote statuses and RNR pass it
/// by (the WRITE lands); a local status still fails it.
#[test]
fn uc_meets_only_what_uc_can() {
    let _l = lock();
    rsw::testing::configure_faults(None).unwrap();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq_a = c.cq(16, null_mut());
    let cq_b = c.cq(16, null_mut());
    let mk = |cq| {
        let mut at = c.qp_attr(pd, cq, cq);
        at.qp_type = IBV_QPT_UC;
        c.create_qp(&mut at)
    };
    let (a, b) = (mk(cq_a), mk(cq_b));
    rsw::testing::configure_faults(Some(&format!(
        "qp={:#x}:fail=REM_ACCESS_ERR:count=1;qp={:#x}:rnr;qp={:#x}:fail=LOC_LEN_ERR:after=1",
        qpn(a),
        qpn(a),
        qpn(a)
    )))
    .unwrap();
    let o = ConnOpts::default();
    for (q, peer) in [(a, b), (b, a)] {
        to_init(q, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        let (mut at, _) = rtr_attr(qpn(peer), &o);
        let mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        assert_eq!(modify(q, &mut at, mask), 0);
    }
    for q in [a, b] {
        let mut at = ibv_qp_attr::zeroed();
        at.qp_state = IBV_QPS_RTS;
        assert_eq!(modify(q, &mut at, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    }
    let p = Pair {
        c,
        pd,
        cq_a,
        cq_b,
        a,
        b,
    };
    let mut src = p.buf(64);
    let dst = p.buf(64);
    post_writes(&p, &mut src, &dst, 2);
    assert_eq!(
        statuses(&wait_wcs(p.cq_a, 2)),
        vec![(1, IBV_WC_SUCCESS), (2, IBV_WC_LOC_LEN_ERR)]
    );
    assert!(wait_until(|| dst.snapshot()[0] == 1));
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
    teardown(p);
}

/// `fail=RNR_RETRY_EXC_ERR` against a requester that retries RNR forever
/// (`rnr_retry` 7): it waits, as on hardware, and its RNR wait notices
/// keep its short transport retry budget from running out.
#[test]
fn rnr_forever_waits() {
    let _l = lock();
    let oa = ConnOpts {
        timeout: 14,
        retry_cnt: 1,
        ..Default::default()
    };
    let p = pair(oa, Default::default(), |a, _| {
        format!("qp={a}:fail=RNR_RETRY_EXC_ERR")
    });
    let src = p.buf(64);
    let dst = p.buf(64);
    assert_eq!(post_recv(p.b, 70, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut wr = send_wr(5, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut wr), 0);
    // Four transport retry budgets (about 135 ms each).
    assert_no_wc(p.cq_a, Duration::from_millis(600));
    assert_no_wc(p.cq_b, Duration::from_millis(1));
    assert_eq!(qp_state(p.a), IBV_QPS_RTS);
    let s = stat_lines();
    assert_eq!(qp_counter(&s, qpn(p.a), "rcvd_rnr_err"), 1);
    assert_eq!(qp_counter(&s, qpn(p.a), "local_ack_timeout_err"), 0);
    teardown(p);
}
