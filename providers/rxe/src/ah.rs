//! Address handles. The kernel keeps the address vector and hands back
//! its number (`ah_num`), which UD send WQEs name; kernels before AH
//! numbers (0) take the vector itself in each WQE, so for them we build it
//! here as rxe's C provider does (source GID from the GID table, IP
//! addresses from the GIDs, destination MAC from libibverbs).

use core::cell::UnsafeCell;
use core::ffi::c_int;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::CreateAhResp;
use crate::ffi;

#[repr(C)]
pub struct Ah {
    /// What libibverbs and the program see; first, so the pointers agree.
    ibv: UnsafeCell<ibv_ah>,
    /// The vector, for kernels without AH numbers only.
    pub av: rxe_av,
    /// The kernel's AH number; 0 on kernels that predate them.
    pub num: u32,
}

impl Ah {
    pub fn ibv(&self) -> *mut ibv_ah {
        self.ibv.get()
    }

    /// Our AH behind a program's pointer.
    ///
    /// # Safety
    /// `ah` is NULL or an AH this provider created and not yet destroyed.
    pub unsafe fn from_ibv<'a>(ah: *mut ibv_ah) -> Option<&'a Ah> {
        // SAFETY: per the contract; `ibv` is the first field.
        unsafe { ah.cast::<Ah>().as_ref() }
    }

    #[cfg(test)]
    pub fn test_new(num: u32) -> Box<Ah> {
        Box::new(Ah {
            ibv: UnsafeCell::new(ibv_ah::zeroed()),
            av: rxe_av::default(),
            num,
        })
    }
}

/// Whether a GID is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
pub fn is_v4_mapped(raw: &[u8; 16]) -> bool {
    raw[..10].iter().all(|&b| b == 0) && raw[10] == 0xff && raw[11] == 0xff
}

/// A GID as the socket address rxe's kernel reads (C: `rdma_gid2ip`).
pub fn gid_to_ip(raw: &[u8; 16]) -> rxe_av_addr {
    let mut out = rxe_av_addr::zeroed();
    if is_v4_mapped(raw) {
        // SAFETY: all-zero is a valid sockaddr_in.
        let mut sin: libc::sockaddr_in = unsafe { core::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_addr.s_addr = u32::from_ne_bytes([raw[12], raw[13], raw[14], raw[15]]);
        out._sockaddr_in = sin;
    } else {
        // SAFETY: all-zero is a valid sockaddr_in6.
        let mut sin6: libc::sockaddr_in6 = unsafe { core::mem::zeroed() };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_addr.s6_addr = *raw;
        out._sockaddr_in6 = sin6;
    }
    out
}

/// The address vector of `attr`, its source GID being `sgid`; the MAC is
/// left for the caller to resolve.
pub fn av_from(attr: &ibv_ah_attr, sgid: &[u8; 16]) -> rxe_av {
    // SAFETY: the GID union is 16 plain bytes either way.
    let dgid = unsafe { attr.grh.dgid.raw };
    rxe_av {
        port_num: attr.port_num,
        network_type: if is_v4_mapped(&dgid) {
            RXE_NETWORK_TYPE_IPV4
        } else {
            RXE_NETWORK_TYPE_IPV6
        },
        dmac: [0; 6],
        grh: rxe_global_route {
            dgid: rxe_gid { raw: dgid },
            flow_label: attr.grh.flow_label,
            sgid_index: attr.grh.sgid_index,
            hop_limit: attr.grh.hop_limit,
            traffic_class: attr.grh.traffic_class,
        },
        sgid_addr: gid_to_ip(sgid),
        dgid_addr: gid_to_ip(&dgid),
    }
}

/// C: `rxe_create_av`, for kernels without AH numbers.
///
/// # Safety
/// `pd` is a live PD; `attr` a valid attribute.
unsafe fn old_kernel_av(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> Result<rxe_av, c_int> {
    // SAFETY: per the contract.
    unsafe {
        let ctx = (*pd).context;
        let a = &*attr;
        let mut sgid = ibv_gid { raw: [0; 16] };
        let rc = ffi::ibv_query_gid(ctx, a.port_num, a.grh.sgid_index.into(), &mut sgid);
        if rc != 0 {
            return Err(verbs_rt::errno::errno());
        }
        let mut av = av_from(a, &sgid.raw);
        let rc = ffi::ibv_resolve_eth_l2_from_gid(
            ctx,
            attr,
            av.dmac.as_mut_ptr(),
            core::ptr::null_mut(),
        );
        if rc != 0 {
            return Err(rc.abs());
        }
        Ok(av)
    }
}

/// # Safety
/// `pd` a live PD of an rxe context; `attr` valid.
unsafe fn create(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> Result<*mut ibv_ah, c_int> {
    let mut ah = Box::new(Ah {
        ibv: UnsafeCell::new(ibv_ah::zeroed()),
        av: rxe_av::default(),
        num: 0,
    });
    let mut resp = CreateAhResp::default();
    // SAFETY: live objects; the response is ours and of its size.
    let rc = unsafe { ffi::ibv_cmd_create_ah(pd, ah.ibv(), attr, resp.as_core(), resp.size()) };
    if rc != 0 {
        return Err(rc);
    }
    ah.num = resp.drv.ah_num;
    if ah.num == 0 {
        // SAFETY: per the contract.
        match unsafe { old_kernel_av(pd, attr) } {
            Ok(av) => ah.av = av,
            Err(e) => {
                // SAFETY: the AH we just created, unknown to the program.
                unsafe { ffi::ibv_cmd_destroy_ah(ah.ibv()) };
                return Err(e);
            }
        }
    }
    Ok(Box::into_raw(ah).cast())
}

pub unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: libibverbs passes a live PD and the program's attribute.
    verbs_rt::errno::ptr_or_errno(unsafe { create(pd, attr) })
}

pub unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: an AH of ours (libibverbs checked it), destroyed once.
    unsafe {
        let rc = ffi::ibv_cmd_destroy_ah(ah);
        if rc == 0 {
            drop(Box::from_raw(ah.cast::<Ah>()));
        }
        rc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    #[test]
    fn gids_become_socket_addresses() {
        let ip = gid_to_ip(&v4([10, 0, 0, 1]));
        // SAFETY: a v4-mapped GID fills the sockaddr_in member.
        let sin = unsafe { ip._sockaddr_in };
        assert_eq!(sin.sin_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 0, 1]);
        let mut g6 = [0u8; 16];
        g6[0] = 0xfe;
        g6[1] = 0x80;
        g6[15] = 1;
        // SAFETY: any other GID fills the sockaddr_in6 member.
        let sin6 = unsafe { gid_to_ip(&g6)._sockaddr_in6 };
        assert_eq!(sin6.sin6_family, libc::AF_INET6 as libc::sa_family_t);
        assert_eq!(sin6.sin6_addr.s6_addr, g6);
    }

    #[test]
    fn av_takes_the_route_and_the_network_type() {
        // SAFETY: all-zero is a valid ibv_ah_attr.
        let mut a: ibv_ah_attr = unsafe { core::mem::zeroed() };
        a.port_num = 1;
        a.grh.dgid.raw = v4([10, 0, 0, 2]);
        a.grh.sgid_index = 3;
        a.grh.hop_limit = 64;
        a.grh.flow_label = 9;
        let av = av_from(&a, &v4([10, 0, 0, 1]));
        assert_eq!((av.port_num, av.network_type), (1, RXE_NETWORK_TYPE_IPV4));
        assert_eq!(
            (av.grh.sgid_index, av.grh.hop_limit, av.grh.flow_label),
            (3, 64, 9)
        );
        // SAFETY: v4-mapped source.
        let s = unsafe { av.sgid_addr._sockaddr_in };
        assert_eq!(s.sin_addr.s_addr.to_ne_bytes(), [10, 0, 0, 1]);
        a.grh.dgid.raw = [0xfe; 16];
        assert_eq!(av_from(&a, &[0; 16]).network_type, RXE_NETWORK_TYPE_IPV6);
    }
}
