//! What a UD receive gets, whichever engine fills it (`datagram`,
//! `roce_ud`): bytes written into the claimed receive, the header type
//! its completion reports, and the failure of a receive that cannot be
//! written.

use verbs_abi::*;

use super::{Qp, QpInner};
use crate::mr;

/// The claimed receive cannot take the datagram: it completes with
/// `status` and, as on hardware, the QP fails.
pub fn fail_recv(qp: &Qp, g: &mut QpInner, status: ibv_wc_status) {
    // A UD QP has no destination QPN: the completion's src_qp stays 0.
    qp.fail_claimed(g, status);
    qp.enter_error(
        g,
        &format_args!(
            "a datagram's receive failed with {}",
            crate::trace::wc_status_name(status)
        ),
    );
}

/// Copies `bytes` into the claimed receive at offset `at`; Err when its
/// memory is not (or no longer) registered and writable there.
pub fn write_recv(g: &QpInner, at: u64, bytes: &[u8]) -> Result<(), ()> {
    mr::table()
        .scatter(g.recv.sges(), at, g.recv.pd_id, bytes)
        .map_err(|_| ())
}

/// What a RoCE NIC reports in `sl` of a UD receive: the network header
/// type of the packet (mlx5: 2 for IPv4, 1 for IPv6). UCX reads it to
/// know which GRH layout it got, and drops datagrams without it.
pub fn roce_header_type(src: &[u8; 16], dst: &[u8; 16]) -> u8 {
    match (crate::gid::gid_as_ipv4(src), crate::gid::gid_as_ipv4(dst)) {
        (Some(_), Some(_)) => 2,
        _ => 1,
    }
}
