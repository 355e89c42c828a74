//! An injected port outage (`port=rsw_lo:down@..,up@..`): the port goes
//! DOWN with IBV_EVENT_PORT_ERR and back to ACTIVE with
//! IBV_EVENT_PORT_ACTIVE; meanwhile QPs send nothing, so a request whose
//! retry budget outlasts the outage succeeds after it, and one whose budget
//! is shorter fails with IBV_WC_RETRY_EXC_ERR. (Its own test binary: the
//! outage is timed from the first device the process opens.)

mod common;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

fn port_state(ctx: *mut ibv_context) -> ibv_port_state {
    let mut a = ibv_port_attr::zeroed();
    let size = std::mem::size_of::<ibv_port_attr>();
    // SAFETY: ctx is open; a is ours and `size` bytes long.
    let rc = unsafe { OPS.query_port.unwrap()(ctx, 1, &mut a, size) };
    assert_eq!(rc, 0);
    a.state
}

fn write(p: &Pair, src: &Buf, dst: &Buf, wr_id: u64) {
    let mut sg = [src.sge(0, 8)];
    let mut wr = send_wr(wr_id, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr(),
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut wr), 0);
}

fn event(ctx: *mut ibv_context) -> (ibv_event_type, i32) {
    let mut ev = get_async(ctx).expect("a port event");
    // SAFETY: port events carry the port number.
    let r = (ev.event_type, unsafe { ev.element.port_num });
    ack_async(&mut ev);
    r
}

#[test]
fn port_down_then_up() {
    std::env::set_var("RSW_TRANSPORT", "tcp");
    rsw::testing::configure_faults(Some("port=rsw_lo:down@300ms,up@2s")).unwrap();
    // Patient: 1 s per try, 8 tries. Hasty: 67 ms per try, 2 tries.
    let patient = Pair::with(
        ConnOpts {
            timeout: 18,
            ..Default::default()
        },
        ConnOpts::default(),
        |_| {},
    );
    let hasty_o = ConnOpts {
        timeout: 14,
        retry_cnt: 1,
        ..Default::default()
    };
    let hasty = Pair::with(hasty_o, hasty_o, |_| {});
    assert_eq!(port_state(patient.c.ctx), IBV_PORT_ACTIVE);
    let (src, dst) = (patient.buf(64), patient.buf(64));
    let (hsrc, hdst) = (hasty.buf(64), hasty.buf(64));
    // Before the outage, traffic flows.
    write(&patient, &src, &dst, 1);
    assert_eq!(wait_wc(patient.cq_a).status, IBV_WC_SUCCESS);

    assert_eq!(event(patient.c.ctx), (IBV_EVENT_PORT_ERR, 1));
    assert_eq!(event(hasty.c.ctx), (IBV_EVENT_PORT_ERR, 1));
    assert_eq!(port_state(patient.c.ctx), IBV_PORT_DOWN);
    write(&patient, &src, &dst, 2);
    write(&hasty, &hsrc, &hdst, 3);
    let w = wait_wc(hasty.cq_a);
    assert_eq!((w.wr_id, w.status), (3, IBV_WC_RETRY_EXC_ERR));
    // The port is still down: the patient request is still waiting.
    assert_eq!(port_state(patient.c.ctx), IBV_PORT_DOWN);
    assert_eq!(poll(patient.cq_a, &mut [ibv_wc::zeroed()]), 0);

    assert_eq!(event(patient.c.ctx), (IBV_EVENT_PORT_ACTIVE, 1));
    assert_eq!(port_state(patient.c.ctx), IBV_PORT_ACTIVE);
    let w = wait_wc(patient.cq_a);
    assert_eq!((w.wr_id, w.status), (2, IBV_WC_SUCCESS));
    assert_eq!(qp_state(patient.a), IBV_QPS_RTS);
    destroy_qp(patient.a);
    destroy_qp(patient.b);
    destroy_qp(hasty.a);
    destroy_qp(hasty.b);
}
