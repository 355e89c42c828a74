//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: `getaddrinfo` seen through RDMA
//! eyes. Everything is allocated with `malloc` so the result can be freed
//! by `rdma_freeaddrinfo` alone.

use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;

use verbs_abi::*;

use crate::device;
use crate::error::{set_errno, to_c, Res};
use verbs_rt::export;

/// # Safety
/// `src` readable for `len` bytes.
unsafe fn copy_addr(src: *const libc::sockaddr, len: libc::socklen_t) -> Res<*mut libc::sockaddr> {
    // SAFETY: plain allocation, filled from the caller's readable source.
    unsafe {
        let p = libc::malloc(len as usize) as *mut libc::sockaddr;
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        core::ptr::copy_nonoverlapping(src as *const u8, p as *mut u8, len as usize);
        Ok(p)
    }
}

fn hints_to_ai(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: addrinfo is plain data; all-zero is the empty hint.
    let mut ai: libc::addrinfo = unsafe { core::mem::zeroed() };
    if h.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if h.ai_family != AF_IB {
        ai.ai_family = h.ai_family;
    }
    ai.ai_socktype = match h.ai_qp_type as ibv_qp_type {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.ai_port_space as rdma_port_space {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// Fills `rai` from the first `getaddrinfo` answer.
///
/// # Safety
/// `ai` must be a valid addrinfo.
unsafe fn from_ai(rai: &mut rdma_addrinfo, h: &rdma_addrinfo, ai: &libc::addrinfo) -> Res<()> {
    rai.ai_qp_type = if h.ai_qp_type != 0 {
        h.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    rai.ai_port_space = if h.ai_port_space != 0 {
        h.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
            libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
            _ => 0,
        }
    };
    rai.ai_family = ai.ai_family;
    // SAFETY: `ai` fields are valid per getaddrinfo.
    unsafe {
        let a = copy_addr(ai.ai_addr, ai.ai_addrlen)?;
        let name = if ai.ai_canonname.is_null() {
            null_mut()
        } else {
            libc::strdup(ai.ai_canonname)
        };
        if ai.ai_flags & libc::AI_PASSIVE != 0 {
            rai.ai_flags = RAI_PASSIVE;
            rai.ai_src_canonname = name;
            rai.ai_src_addr = a;
            rai.ai_src_len = ai.ai_addrlen;
        } else {
            rai.ai_dst_canonname = name;
            rai.ai_dst_addr = a;
            rai.ai_dst_len = ai.ai_addrlen;
        }
    }
    Ok(())
}

/// Returns 0, a `getaddrinfo` error code (EAI_*), or -1 with errno.
///
/// # Safety
/// Strings must be null or NUL-terminated; `hints` null or valid; `res`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    export!(raw::minus_one, (node, service, hints, res), {
        if (node.is_null() && service.is_null() && hints.is_null()) || res.is_null() {
            return to_c(Err(libc::EINVAL));
        }
        if let Err(e) = device::all() {
            return to_c(Err(e));
        }
        let empty = rdma_addrinfo::zeroed();
        // SAFETY: null or valid per the caller.
        let h = unsafe { hints.as_ref() }.unwrap_or(&empty);
        // SAFETY: calloc of one zeroed result, owned by the caller afterwards.
        let rai =
            unsafe { libc::calloc(1, core::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
        if rai.is_null() {
            return to_c(Err(libc::ENOMEM));
        }
        // SAFETY: freshly allocated and zeroed.
        let r = unsafe { &mut *rai };
        let result: Result<(), c_int> = (|| {
            if !node.is_null() || !service.is_null() {
                let mut ai: *mut libc::addrinfo = null_mut();
                let aih = hints_to_ai(h);
                let hp = if hints.is_null() {
                    core::ptr::null()
                } else {
                    &aih as *const libc::addrinfo
                };
                // SAFETY: valid strings and hints; `ai` receives the list.
                let rc = unsafe { libc::getaddrinfo(node, service, hp, &mut ai) };
                if rc != 0 {
                    return Err(rc);
                }
                // SAFETY: getaddrinfo returned a non-empty list.
                let conv = unsafe { from_ai(r, h, &*ai) };
                // SAFETY: the list came from getaddrinfo.
                unsafe { libc::freeaddrinfo(ai) };
                conv.map_err(|e| {
                    set_errno(e);
                    -1
                })?;
            } else {
                r.ai_flags = h.ai_flags;
                r.ai_family = h.ai_family;
                r.ai_qp_type = h.ai_qp_type;
                r.ai_port_space = h.ai_port_space;
                if h.ai_dst_len != 0 && !h.ai_dst_addr.is_null() {
                    // SAFETY: the hint's address is readable for its length.
                    r.ai_dst_addr =
                        unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) }.map_err(|e| {
                            set_errno(e);
                            -1
                        })?;
                    r.ai_dst_len = h.ai_dst_len;
                }
            }
            if r.ai_src_len == 0 && h.ai_src_len != 0 && !h.ai_src_addr.is_null() {
                // SAFETY: as above for the source hint.
                r.ai_src_addr = unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) }.map_err(|e| {
                    set_errno(e);
                    -1
                })?;
                r.ai_src_len = h.ai_src_len;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                // SAFETY: checked non-null.
                unsafe { *res = rai };
                0
            }
            Err(rc) => {
                // SAFETY: `rai` is ours and partially filled with malloc'd parts.
                unsafe { rdma_freeaddrinfo(rai) };
                rc
            }
        }
    })
}

/// # Safety
/// `res` must come from `rdma_getaddrinfo` (or be null).
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    export!(raw::void, (res), {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: every node and its members were malloc'd by us.
            unsafe {
                let next = (*p).ai_next;
                for m in [
                    (*p).ai_connect,
                    (*p).ai_route,
                    (*p).ai_src_canonname as *mut c_void,
                    (*p).ai_dst_canonname as *mut c_void,
                    (*p).ai_src_addr as *mut c_void,
                    (*p).ai_dst_addr as *mut c_void,
                ] {
                    libc::free(m);
                }
                libc::free(p as *mut c_void);
                p = next;
            }
        }
    })
}
