//! Address handles, including building one from a received completion.

use core::ffi::{c_int, c_uint};
use core::mem::size_of;

use verbs_abi::*;

use crate::context::{
    gid_entry, query_port_full, sysfs_gid_type, IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
    IBV_GID_TYPE_SYSFS_ROCE_V2,
};
use crate::device::{context_ops, object_ops, release};
use crate::util::{ptr_ret, set_errno};
use verbs_rt::export;

/// IP protocol number of UDP: a RoCE v2 packet.
const NEXT_HDR_UDP: u8 = 17;
/// GRH next-header value of an IB transport header: IB or RoCE v1.
const NEXT_HDR_IB: u8 = 0x1b;

/// # Safety
/// `pd` is NULL or a PD; `attr` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    export!(ptr, (pd, attr), {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, ctx) = unsafe { object_ops(pd) }?;
        let create = ops.create_ah.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own PD.
        let ah = unsafe { create(pd, attr) };
        if !ah.is_null() {
            // SAFETY: an AH the provider just returned.
            unsafe {
                (*ah).context = ctx;
                (*ah).pd = pd;
            }
        }
        Ok(ah)
    })
}

/// # Safety
/// `ah` is NULL or an AH.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { release(ah, |ops| ops.destroy_ah) }
    })
}

/// What the 40-byte GRH area in front of a UD payload carried.
#[derive(Debug, PartialEq)]
pub(crate) enum Received {
    /// RoCE v2 over IPv4: the IPv4 header occupies the last 20 bytes.
    V4 {
        saddr: [u8; 4],
        daddr: [u8; 4],
        ttl: u8,
        tos: u8,
    },
    /// An IPv6-shaped GRH: IB, RoCE v1 or RoCE v2 over IPv6.
    V6 {
        sgid: [u8; 16],
        dgid: [u8; 16],
        next_hdr: u8,
        hop_limit: u8,
        tclass: u8,
    },
}

/// One's-complement checksum of an IPv4 header with its check field zero.
pub(crate) fn ipv4_checksum(hdr: &[u8; 20]) -> [u8; 2] {
    let mut sum: u32 = 0;
    for (i, pair) in hdr.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    (!(sum as u16)).to_be_bytes()
}

/// Decides how a GRH area is to be read: an IPv6 version nibble means a
/// GRH, unless the tail is a well-formed IPv4 header with a correct
/// checksum (a RoCE v2 IPv4 packet whose first 20 bytes are not a header).
pub(crate) fn parse_grh(grh: &[u8; 40]) -> Result<Received, c_int> {
    let mut ip4 = [0u8; 20];
    ip4.copy_from_slice(&grh[20..]);
    let as_v4 = || Received::V4 {
        saddr: [ip4[12], ip4[13], ip4[14], ip4[15]],
        daddr: [ip4[16], ip4[17], ip4[18], ip4[19]],
        ttl: ip4[8],
        tos: ip4[1],
    };
    let flow = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
    if flow >> 28 != 6 {
        return if ip4[0] >> 4 == 4 {
            Ok(as_v4())
        } else {
            Err(libc::EPROTONOSUPPORT)
        };
    }
    if ip4[0] & 0xf == 5 && ipv4_checksum(&ip4) == [ip4[10], ip4[11]] {
        return Ok(as_v4());
    }
    let mut sgid = [0u8; 16];
    let mut dgid = [0u8; 16];
    sgid.copy_from_slice(&grh[8..24]);
    dgid.copy_from_slice(&grh[24..40]);
    Ok(Received::V6 {
        sgid,
        dgid,
        next_hdr: grh[6],
        hop_limit: grh[7],
        tclass: ((flow >> 20) & 0xff) as u8,
    })
}

/// An IPv4 address as the IPv4-mapped GID (`::ffff:a.b.c.d`).
pub(crate) fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// Our GID index holding `gid` with the given type, searching only the
/// port's table (an empty slot never matches).
///
/// # Safety
/// `ctx` is NULL or an open context.
unsafe fn find_gid_index(
    ctx: *mut ibv_context,
    port: u8,
    gid: [u8; 16],
    sysfs_type: c_uint,
) -> Result<u8, c_int> {
    let ops = context_ops(ctx)?;
    // SAFETY: context_ops found the context open; ops is its provider.
    let len = unsafe { query_port_full(ops, ctx, port) }?.gid_tbl_len;
    for index in 0..u32::try_from(len).unwrap_or(0).min(256) {
        // SAFETY: as above.
        let e = match unsafe { gid_entry(ctx, port.into(), index, 0) } {
            Ok(e) => e,
            Err(libc::ENODATA) => continue,
            Err(e) => return Err(e),
        };
        if e.gid.raw() == gid && sysfs_gid_type(e.gid_type) == sysfs_type {
            return Ok(index as u8);
        }
    }
    Err(libc::ENOENT)
}

/// Fills `ah_attr` to reply to the sender of `wc`. 0, or -1 with errno, as
/// rdma-core.
///
/// # Safety
/// `context` is NULL or an open context; `wc` and `ah_attr` NULL or valid;
/// `grh` NULL or the 40 bytes in front of the received payload.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    export!(minus_one, (context, port_num, wc, grh, ah_attr), {
        if wc.is_null() || ah_attr.is_null() || grh.is_null() {
            return Err(libc::EINVAL);
        }
        const _: () = assert!(size_of::<ibv_grh>() == 40);
        // SAFETY: non-NULL per the checks; a GRH area is 40 bytes.
        let (wc, bytes) = unsafe { (&*wc, &*(grh as *const [u8; 40])) };
        let mut a = ibv_ah_attr::zeroed();
        a.grh.flow_label = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) & 0xfffff;
        a.dlid = wc.slid;
        a.sl = wc.sl;
        a.src_path_bits = wc.dlid_path_bits;
        a.port_num = port_num;
        if wc.wc_flags & IBV_WC_GRH != 0 {
            a.is_global = 1;
            match parse_grh(bytes)? {
                Received::V4 {
                    saddr,
                    daddr,
                    ttl,
                    tos,
                } => {
                    // A multicast destination names no GID of ours.
                    if daddr[0] >> 4 == 0xe {
                        return Err(libc::EINVAL);
                    }
                    // SAFETY: forwarded contract.
                    a.grh.sgid_index = unsafe {
                        find_gid_index(
                            context,
                            port_num,
                            v4_mapped(daddr),
                            IBV_GID_TYPE_SYSFS_ROCE_V2,
                        )
                    }?;
                    a.grh.dgid = ibv_gid::from_raw(v4_mapped(saddr));
                    a.grh.hop_limit = ttl;
                    a.grh.traffic_class = tos;
                }
                Received::V6 {
                    sgid,
                    dgid,
                    next_hdr,
                    hop_limit,
                    tclass,
                } => {
                    if dgid[0] == 0xff {
                        return Err(libc::EINVAL);
                    }
                    let t = match next_hdr {
                        NEXT_HDR_UDP => IBV_GID_TYPE_SYSFS_ROCE_V2,
                        NEXT_HDR_IB => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
                        _ => return Err(libc::EPROTONOSUPPORT),
                    };
                    // SAFETY: forwarded contract.
                    a.grh.sgid_index = unsafe { find_gid_index(context, port_num, dgid, t) }?;
                    a.grh.dgid = ibv_gid::from_raw(sgid);
                    a.grh.hop_limit = hop_limit;
                    a.grh.traffic_class = tclass;
                }
            }
        }
        // SAFETY: non-NULL caller buffer.
        unsafe { ah_attr.write(a) };
        Ok(())
    })
}

/// # Safety
/// As for `ibv_init_ah_from_wc`, with `pd` NULL or a PD.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    export!(raw::ptr, (pd, wc, grh, port_num), {
        // SAFETY: forwarded contract.
        let ctx = match unsafe { object_ops(pd) } {
            Ok((_, ctx)) => ctx,
            Err(e) => return ptr_ret(Err(e)),
        };
        let mut attr = ibv_ah_attr::zeroed();
        // SAFETY: forwarded contract; attr is writable.
        if unsafe { ibv_init_ah_from_wc(ctx, port_num, wc, grh, &mut attr) } != 0 {
            return core::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { ibv_create_ah(pd, &mut attr) }
    })
}

/// The next hop's MAC and VLAN toward a RoCE GID, from the kernel's route
/// and neighbour tables (rdma-core's providers call it to build AHs).
/// Only kernel devices have an interface behind their GIDs; ours have none
/// to ask. Unlike the other int verbs this one reports a *negative* errno,
/// as rdma-core's does.
///
/// # Safety
/// `context` is NULL or an open context; `attr` NULL or valid; `eth_mac`
/// 6 writable bytes; `vid` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    export!(raw::int, untraced, {
        let r = (|| {
            let ops = context_ops(context)?;
            if attr.is_null() || eth_mac.is_null() {
                return Err(libc::EINVAL);
            }
            if !core::ptr::eq(ops, &crate::kernel::ops::KERNEL_OPS) {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: the caller's attribute.
            let a = unsafe { &*attr };
            let mut sgid = ibv_gid { raw: [0; 16] };
            // SAFETY: an open context; `sgid` is writable.
            if unsafe {
                crate::context::ibv_query_gid(
                    context,
                    a.port_num,
                    a.grh.sgid_index.into(),
                    &mut sgid,
                )
            } != 0
            {
                return Err(libc::EINVAL);
            }
            // SAFETY: both unions are plain 16 bytes.
            let (s, d) = unsafe { (sgid.raw, a.grh.dgid.raw) };
            let (mac, v) = crate::kernel::resolve_eth_l2(&s, &d)?;
            // SAFETY: the caller's 6-byte MAC buffer and optional VLAN slot.
            unsafe {
                core::ptr::copy_nonoverlapping(mac.as_ptr(), eth_mac, 6);
                if !vid.is_null() {
                    *vid = v;
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -e
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_grh(saddr: [u8; 4], daddr: [u8; 4], ttl: u8, tos: u8, good_sum: bool) -> [u8; 40] {
        let mut g = [0u8; 40];
        let h = &mut g[20..];
        h[0] = 0x45;
        h[1] = tos;
        h[2..4].copy_from_slice(&60u16.to_be_bytes());
        h[8] = ttl;
        h[9] = 17;
        h[12..16].copy_from_slice(&saddr);
        h[16..20].copy_from_slice(&daddr);
        let mut hdr = [0u8; 20];
        hdr.copy_from_slice(h);
        let sum = ipv4_checksum(&hdr);
        h[10..12].copy_from_slice(&sum);
        if !good_sum {
            h[10] ^= 0xff;
        }
        g
    }

    #[test]
    fn checksum_matches_known_header() {
        // A textbook header: 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7
        let hdr: [u8; 20] = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&hdr), [0xb8, 0x61]);
    }

    #[test]
    fn ipv4_grh_is_recognised() {
        let g = v4_grh([10, 0, 0, 1], [10, 0, 0, 2], 64, 3, true);
        assert_eq!(
            parse_grh(&g),
            Ok(Received::V4 {
                saddr: [10, 0, 0, 1],
                daddr: [10, 0, 0, 2],
                ttl: 64,
                tos: 3
            })
        );
    }

    #[test]
    fn ipv6_grh_is_recognised() {
        let mut g = [0u8; 40];
        // version 6, traffic class 0x12, flow label 0x34567
        g[0..4].copy_from_slice(&((6u32 << 28) | (0x12 << 20) | 0x34567).to_be_bytes());
        g[6] = NEXT_HDR_UDP;
        g[7] = 9;
        g[8] = 0xfe;
        g[24] = 0x20;
        match parse_grh(&g).unwrap() {
            Received::V6 {
                sgid,
                dgid,
                next_hdr,
                hop_limit,
                tclass,
            } => {
                assert_eq!(sgid[0], 0xfe);
                assert_eq!(dgid[0], 0x20);
                assert_eq!((next_hdr, hop_limit, tclass), (NEXT_HDR_UDP, 9, 0x12));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ipv6_version_with_bad_ipv4_tail_is_ipv6() {
        let mut g = v4_grh([1, 2, 3, 4], [5, 6, 7, 8], 1, 0, false);
        g[0] = 0x60;
        assert!(matches!(parse_grh(&g), Ok(Received::V6 { .. })));
        let mut g = v4_grh([1, 2, 3, 4], [5, 6, 7, 8], 1, 0, true);
        g[0] = 0x60;
        assert!(matches!(parse_grh(&g), Ok(Received::V4 { .. })));
    }

    #[test]
    fn unknown_version_is_refused() {
        let g = [0u8; 40];
        assert_eq!(parse_grh(&g), Err(libc::EPROTONOSUPPORT));
    }

    #[test]
    fn eth_l2_resolution_reports_negative_errno() {
        let mut attr = ibv_ah_attr::zeroed();
        // SAFETY: NULL and unknown contexts are checked, never dereferenced.
        unsafe {
            let r = ibv_resolve_eth_l2_from_gid(
                core::ptr::null_mut(),
                &mut attr,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            );
            assert_eq!(r, -libc::EINVAL);
            let r = ibv_resolve_eth_l2_from_gid(
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            );
            assert_eq!(r, -libc::EINVAL);
        }
    }

    #[test]
    fn mapped_address() {
        let g = v4_mapped([192, 168, 1, 2]);
        assert_eq!(&g[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&g[12..], &[192, 168, 1, 2]);
    }
}
