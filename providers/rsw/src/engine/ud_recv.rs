//! What a UD receive gets, whichever engine fills it (`datagram`,
//! `roce_ud`): bytes written into the claimed receive, the header type
//! its completion reports, and the failure of a receive that cannot be
//! written.

use verbs_abi::*;

use super::{Qp, QpInner};
use crate::guard;
use crate::mr;
use crate::transport::MAX_IOV;
use crate::util::iov;

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
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let table = mr::table();
    let n = table
        .sge_iovs(g.recv.sges(), at, bytes.len(), g.recv.pd_id, true, &mut v)
        .map_err(|_| ())?;
    let mut off = 0;
    for piece in &v[..n] {
        // SAFETY: registered, locally writable memory checked under the MR
        // table lock (held); the source is our local buffer, of which
        // the pieces cover no more than its length; a fault is caught.
        unsafe {
            guard::copy(
                piece.iov_base as *mut u8,
                bytes.as_ptr().add(off),
                piece.iov_len,
            )
        }
        .map_err(|_| ())?;
        off += piece.iov_len;
    }
    Ok(())
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
