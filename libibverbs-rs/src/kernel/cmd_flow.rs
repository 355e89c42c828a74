//! Flow steering rules (rdma-core's `ibv_cmd_create_flow` in cmd.c and
//! cmd_flow.c): each `ibv_flow_spec_*` of the rule becomes the kernel's
//! `ib_uverbs_flow_spec_*` (`ib_spec_to_kern_spec`), sent in the extended
//! CREATE_FLOW command with the provider's part after the specs.

use core::ffi::{c_int, c_void};
use core::mem::size_of;

use verbs_abi::driver::{verbs_counters, verbs_flow_action};
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_issue::{destroy_err, ExCmd, ExReq, Issue, Kernel, EX_HDRS};
use verbs_rt::export;

// ---- the user's specs (verbs.h) ---------------------------------------------
//
// Each starts with `enum ibv_flow_spec_type type; uint16_t size;`, so the
// filters sit where C's alignment puts them: right after `size` for the
// 2-byte-aligned ETH and TCP/UDP filters, at 8 for the others.

/// The common head; as a struct it only reads `type` and `size` (the
/// specs themselves carry the two fields inline, so a 2-byte-aligned
/// filter follows `size` directly).
#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_hdr {
    r#type: u32,
    size: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_eth {
    r#type: u32,
    size: u16,
    val: ib_uverbs_flow_eth_filter,
    mask: ib_uverbs_flow_eth_filter,
}

/// `struct ibv_flow_ipv4_filter`: addresses only.
#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_ipv4_filter {
    src_ip: u32,
    dst_ip: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_ipv4 {
    r#type: u32,
    size: u16,
    val: ibv_flow_ipv4_filter,
    mask: ibv_flow_ipv4_filter,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_esp {
    r#type: u32,
    size: u16,
    val: ib_uverbs_flow_spec_esp_filter,
    mask: ib_uverbs_flow_spec_esp_filter,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_tcp_udp {
    r#type: u32,
    size: u16,
    val: ib_uverbs_flow_tcp_udp_filter,
    mask: ib_uverbs_flow_tcp_udp_filter,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_gre {
    r#type: u32,
    size: u16,
    val: ib_uverbs_flow_gre_filter,
    mask: ib_uverbs_flow_gre_filter,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_mpls {
    r#type: u32,
    size: u16,
    val: ib_uverbs_flow_mpls_filter,
    mask: ib_uverbs_flow_mpls_filter,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_action_tag {
    r#type: u32,
    size: u16,
    tag_id: u32,
}

/// `ibv_flow_spec_action_handle` and `ibv_flow_spec_counter_action`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ibv_flow_spec_ptr {
    r#type: u32,
    size: u16,
    ptr: *const c_void,
}

/// Where the filters of the variable-size specs (IPv4 ext, IPv6, VXLAN
/// tunnel) start: after the 8-byte header.
const VAR_VAL: usize = 8;

// ---- the kernel's specs -------------------------------------------------------

/// rdma-core's `struct ibv_kern_spec_ipv4`: the plain IPv4 spec, addresses
/// only (the kernel takes a spec shorter than its own).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ibv_kern_spec_ipv4 {
    r#type: u32,
    size: u16,
    reserved: u16,
    val: [u32; 2],
    mask: [u32; 2],
}

/// rdma-core's `struct ibv_kern_spec`: room for the largest kernel spec.
const KERN_SPEC_MAX: usize = size_of::<ib_uverbs_flow_spec_ipv6>();

/// Kernel spec bytes: the struct's own, header filled.
fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: plain-data structs with no padding left uninitialised (all
    // built from zeroed defaults).
    unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// `buffer_is_zero`.
fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// `get_filters_size` for a spec whose filter may be longer or shorter
/// than the kernel's: (user filter size, bytes to copy). The kernel's
/// filter is understood up to `min` bytes; a longer user filter must mask
/// nothing beyond.
///
/// # Safety
/// `ib` is a spec of at least `hdr.size` readable bytes.
unsafe fn filters_size(ib: *const u8, size: u16, min: usize) -> Result<(usize, usize), c_int> {
    let ib_filter = (size as isize - VAR_VAL as isize) / 2;
    if ib_filter < min as isize {
        return Err(libc::EINVAL);
    }
    let ib_filter = ib_filter as usize;
    if ib_filter > min {
        // SAFETY: the mask's tail, inside the spec per the contract.
        let tail = unsafe {
            core::slice::from_raw_parts(ib.add(VAR_VAL + ib_filter + min), ib_filter - min)
        };
        if !is_zero(tail) {
            return Err(libc::EOPNOTSUPP);
        }
    }
    Ok((ib_filter, min.min(ib_filter)))
}

/// A kernel spec whose filter is copied in part: `T` zeroed, its header
/// set, `n` bytes of value and mask from the user's spec.
///
/// # Safety
/// As for [`filters_size`]; `T` is a kernel spec of header, value, mask.
unsafe fn partial<T: Copy + Default>(
    ib: *const u8,
    ib_filter: usize,
    n: usize,
    kern_type: u32,
    out: &mut [u8],
) -> usize {
    let k = T::default();
    let size = size_of::<T>();
    let filter = (size - size_of::<ib_uverbs_flow_spec_hdr>()) / 2;
    out[..size].copy_from_slice(bytes_of(&k));
    out[..4].copy_from_slice(&kern_type.to_ne_bytes());
    out[4..6].copy_from_slice(&(size as u16).to_ne_bytes());
    let v = size_of::<ib_uverbs_flow_spec_hdr>();
    // SAFETY: both filters lie inside the user's spec, per the contract.
    unsafe {
        let src = core::slice::from_raw_parts(ib.add(VAR_VAL), n);
        out[v..v + n].copy_from_slice(src);
        let src = core::slice::from_raw_parts(ib.add(VAR_VAL + ib_filter), n);
        out[v + filter..v + filter + n].copy_from_slice(src);
    }
    size
}

/// A kernel spec `k` of value and mask copied whole, with its header.
fn whole<T: Copy>(mut k: T, kern_type: u32, out: &mut [u8]) -> usize {
    let size = size_of::<T>();
    // SAFETY: every kernel spec begins with `ib_uverbs_flow_spec_hdr`.
    unsafe {
        let h = (&mut k as *mut T).cast::<ib_uverbs_flow_spec_hdr>();
        (*h).r#type = kern_type;
        (*h).size = size as u16;
    }
    out[..size].copy_from_slice(bytes_of(&k));
    size
}

/// `ib_spec_to_kern_spec`: the kernel spec for the user's at `ib`, written
/// at the start of `out`; its size.
///
/// # Safety
/// `ib` is a user spec readable for its type's struct and its `size`;
/// action handles and counters point at live objects.
unsafe fn to_kern(ib: *const u8, out: &mut [u8]) -> Result<usize, c_int> {
    // SAFETY: per the contract: each read covers the struct of the type
    // the spec names.
    unsafe {
        let hdr = ib.cast::<ibv_flow_spec_hdr>().read_unaligned();
        let t = hdr.r#type;
        let inner = t & IBV_FLOW_SPEC_INNER;
        let base = t & !IBV_FLOW_SPEC_INNER;
        // The types with an inner (tunnelled) form.
        let has_inner = matches!(
            base,
            IBV_FLOW_SPEC_ETH
                | IBV_FLOW_SPEC_IPV4
                | IBV_FLOW_SPEC_IPV4_EXT
                | IBV_FLOW_SPEC_IPV6
                | IBV_FLOW_SPEC_ESP
                | IBV_FLOW_SPEC_TCP
                | IBV_FLOW_SPEC_UDP
                | IBV_FLOW_SPEC_MPLS
        );
        if inner != 0 && !has_inner {
            return Err(libc::EINVAL);
        }
        Ok(match base {
            IBV_FLOW_SPEC_ETH => {
                let s = ib.cast::<ibv_flow_spec_eth>().read_unaligned();
                let k = ib_uverbs_flow_spec_eth {
                    hdr: Default::default(),
                    val: s.val,
                    mask: s.mask,
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_IPV4 => {
                let s = ib.cast::<ibv_flow_spec_ipv4>().read_unaligned();
                let k = ibv_kern_spec_ipv4 {
                    r#type: t,
                    size: size_of::<ibv_kern_spec_ipv4>() as u16,
                    reserved: 0,
                    val: [s.val.src_ip, s.val.dst_ip],
                    mask: [s.mask.src_ip, s.mask.dst_ip],
                };
                out[..size_of::<ibv_kern_spec_ipv4>()].copy_from_slice(bytes_of(&k));
                size_of::<ibv_kern_spec_ipv4>()
            }
            IBV_FLOW_SPEC_IPV4_EXT => {
                // Up to `flags`: the whole kernel filter.
                let min = size_of::<ib_uverbs_flow_ipv4_filter>();
                let (f, n) = filters_size(ib, hdr.size, min)?;
                partial::<ib_uverbs_flow_spec_ipv4>(ib, f, n, IBV_FLOW_SPEC_IPV4 | inner, out)
            }
            IBV_FLOW_SPEC_IPV6 => {
                // Up to `hop_limit`: not the kernel's reserved byte.
                let min = core::mem::offset_of!(ib_uverbs_flow_ipv6_filter, hop_limit) + 1;
                let (f, n) = filters_size(ib, hdr.size, min)?;
                partial::<ib_uverbs_flow_spec_ipv6>(ib, f, n, t, out)
            }
            IBV_FLOW_SPEC_ESP => {
                let s = ib.cast::<ibv_flow_spec_esp>().read_unaligned();
                let k = ib_uverbs_flow_spec_esp {
                    hdr: Default::default(),
                    val: s.val,
                    mask: s.mask,
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_TCP | IBV_FLOW_SPEC_UDP => {
                let s = ib.cast::<ibv_flow_spec_tcp_udp>().read_unaligned();
                let k = ib_uverbs_flow_spec_tcp_udp {
                    hdr: Default::default(),
                    val: s.val,
                    mask: s.mask,
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_GRE => {
                let s = ib.cast::<ibv_flow_spec_gre>().read_unaligned();
                let k = ib_uverbs_flow_spec_gre {
                    hdr: Default::default(),
                    val: s.val,
                    mask: s.mask,
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_MPLS => {
                let s = ib.cast::<ibv_flow_spec_mpls>().read_unaligned();
                let k = ib_uverbs_flow_spec_mpls {
                    hdr: Default::default(),
                    val: s.val,
                    mask: s.mask,
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_VXLAN_TUNNEL => {
                let min = size_of::<ib_uverbs_flow_tunnel_filter>();
                let (f, n) = filters_size(ib, hdr.size, min)?;
                partial::<ib_uverbs_flow_spec_tunnel>(ib, f, n, t, out)
            }
            IBV_FLOW_SPEC_ACTION_TAG => {
                let s = ib.cast::<ibv_flow_spec_action_tag>().read_unaligned();
                let k = ib_uverbs_flow_spec_action_tag {
                    tag_id: s.tag_id,
                    ..Default::default()
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_ACTION_DROP => whole(ib_uverbs_flow_spec_action_drop::default(), t, out),
            IBV_FLOW_SPEC_ACTION_HANDLE => {
                // The action is the first member of rdma-core's
                // verbs_flow_action, which holds the kernel handle.
                let s = ib.cast::<ibv_flow_spec_ptr>().read_unaligned();
                if s.ptr.is_null() {
                    return Err(libc::EINVAL);
                }
                let k = ib_uverbs_flow_spec_action_handle {
                    handle: (*s.ptr.cast::<verbs_flow_action>()).handle,
                    ..Default::default()
                };
                whole(k, t, out)
            }
            IBV_FLOW_SPEC_ACTION_COUNT => {
                // Likewise verbs_counters around ibv_counters.
                let s = ib.cast::<ibv_flow_spec_ptr>().read_unaligned();
                if s.ptr.is_null() {
                    return Err(libc::EINVAL);
                }
                let k = ib_uverbs_flow_spec_action_count {
                    handle: (*s.ptr.cast::<verbs_counters>()).handle,
                    ..Default::default()
                };
                whole(k, t, out)
            }
            _ => return Err(libc::EINVAL),
        })
    }
}

/// rdma-core's `struct ibv_create_flow`: headers and core payload, the
/// rule's attributes included.
const CREATE_CORE: usize = EX_HDRS + size_of::<ib_uverbs_create_flow>();

/// # Safety
/// `qp` a live QP of a kernel context; `flow_id` the provider's new flow;
/// `flow_attr` a rule followed by its `num_of_specs` specs; `ucmd` NULL
/// or `ucmd_size` bytes of the provider's part.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_flow(
    qp: *mut ibv_qp,
    flow_id: *mut ibv_flow,
    flow_attr: *mut ibv_flow_attr,
    ucmd: *mut c_void,
    ucmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { create_flow(qp, flow_id, flow_attr, ucmd, ucmd_size, &mut Kernel) }
    })
}

pub(crate) unsafe fn create_flow(
    qp: *mut ibv_qp,
    flow_id: *mut ibv_flow,
    flow_attr: *mut ibv_flow_attr,
    ucmd: *mut c_void,
    ucmd_size: usize,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_create_flow`.
    unsafe {
        let a = &*flow_attr;
        let ucmd_size = if ucmd.is_null() { 0 } else { ucmd_size };
        let room = CREATE_CORE + a.num_of_specs as usize * KERN_SPEC_MAX + ucmd_size;
        let mut buf = vec![0u64; room.div_ceil(8)];
        // SAFETY: `buf` holds `room` bytes, ours alone.
        let bytes = core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), room);
        let mut c = ib_uverbs_create_flow {
            comp_mask: 0,
            qp_handle: (*qp).handle,
            flow_attr: ib_uverbs_flow_attr {
                r#type: a.r#type,
                size: 0,
                priority: a.priority,
                num_of_specs: a.num_of_specs,
                reserved: [0; 2],
                port: a.port,
                flags: a.flags,
            },
        };
        let mut ib = flow_attr.add(1).cast::<u8>();
        let mut at = CREATE_CORE;
        for _ in 0..a.num_of_specs {
            let n = match to_kern(ib, &mut bytes[at..]) {
                Ok(n) => n,
                Err(e) => {
                    verbs_rt::errno::set_errno(e);
                    return e;
                }
            };
            c.flow_attr.size = c.flow_attr.size.wrapping_add(n as u16);
            at += n;
            ib = ib.add(ib.cast::<ibv_flow_spec_hdr>().read_unaligned().size as usize);
        }
        bytes[EX_HDRS..CREATE_CORE].copy_from_slice(bytes_of(&c));
        let core = at;
        if ucmd_size != 0 {
            bytes[at..at + ucmd_size]
                .copy_from_slice(core::slice::from_raw_parts(ucmd.cast::<u8>(), ucmd_size));
        }
        let mut resp = ib_uverbs_create_flow_resp::default();
        let rc = k.write_ex(
            (*qp).context,
            &ExCmd {
                command: IB_USER_VERBS_EX_CMD_CREATE_FLOW,
                req: bytes.as_mut_ptr().cast(),
                core_req: core,
                req_size: core + ucmd_size,
                resp: (&mut resp as *mut ib_uverbs_create_flow_resp).cast(),
                core_resp: size_of::<ib_uverbs_create_flow_resp>(),
                resp_size: size_of::<ib_uverbs_create_flow_resp>(),
            },
        );
        if rc != 0 {
            return rc;
        }
        (*flow_id).context = (*qp).context;
        (*flow_id).handle = core::ptr::read_volatile(&resp.flow_handle);
    }
    0
}

/// # Safety
/// `flow_id` is a live flow of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_flow(flow_id: *mut ibv_flow) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { destroy_flow(flow_id, &mut Kernel) }
    })
}

pub(crate) unsafe fn destroy_flow(flow_id: *mut ibv_flow, k: &mut impl Issue) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_destroy_flow`.
    let mut rc = unsafe {
        let mut req = ExReq::new(ib_uverbs_destroy_flow {
            comp_mask: 0,
            flow_handle: (*flow_id).handle,
        });
        let c = req.cmd::<()>(IB_USER_VERBS_EX_CMD_DESTROY_FLOW, None);
        k.write_ex((*flow_id).context, &c)
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_issue::testing::*;
    use core::mem::offset_of;

    const EXT: u32 = IB_USER_VERBS_CMD_FLAG_EXTENDED;

    #[test]
    fn user_spec_layouts_are_c() {
        assert_eq!(
            (
                size_of::<ibv_flow_spec_eth>(),
                offset_of!(ibv_flow_spec_eth, val)
            ),
            (40, 6)
        );
        assert_eq!(offset_of!(ibv_flow_spec_eth, mask), 22);
        assert_eq!(
            (
                size_of::<ibv_flow_spec_ipv4>(),
                offset_of!(ibv_flow_spec_ipv4, mask)
            ),
            (24, 16)
        );
        assert_eq!(
            (
                size_of::<ibv_flow_spec_esp>(),
                offset_of!(ibv_flow_spec_esp, mask)
            ),
            (24, 16)
        );
        assert_eq!(
            (
                size_of::<ibv_flow_spec_tcp_udp>(),
                offset_of!(ibv_flow_spec_tcp_udp, val)
            ),
            (16, 6)
        );
        assert_eq!(offset_of!(ibv_flow_spec_tcp_udp, mask), 10);
        assert_eq!(
            (
                size_of::<ibv_flow_spec_gre>(),
                offset_of!(ibv_flow_spec_gre, mask)
            ),
            (24, 16)
        );
        assert_eq!(
            (
                size_of::<ibv_flow_spec_mpls>(),
                offset_of!(ibv_flow_spec_mpls, mask)
            ),
            (16, 12)
        );
        assert_eq!(size_of::<ibv_flow_spec_action_tag>(), 12);
        assert_eq!(
            (
                size_of::<ibv_flow_spec_ptr>(),
                offset_of!(ibv_flow_spec_ptr, ptr)
            ),
            (16, 8)
        );
        assert_eq!(size_of::<ibv_kern_spec_ipv4>(), 24);
        assert_eq!(KERN_SPEC_MAX, 88);
        assert_eq!(CREATE_CORE, 48);
    }

    /// A rule and its specs, laid out as an application builds them.
    struct Rule {
        buf: Vec<u64>,
        len: usize,
    }

    impl Rule {
        fn new(a: ibv_flow_attr) -> Rule {
            let mut buf = vec![0u64; 64];
            // SAFETY: the rule header first, as C has it (`flow_attr + 1`
            // is where the specs begin).
            unsafe { buf.as_mut_ptr().cast::<ibv_flow_attr>().write(a) };
            Rule {
                buf,
                len: size_of::<ibv_flow_attr>(),
            }
        }
        fn push_bytes(&mut self, b: &[u8]) {
            // SAFETY: inside `buf` (asserted).
            unsafe {
                assert!(self.len + b.len() <= self.buf.len() * 8);
                let p = self.buf.as_mut_ptr().cast::<u8>().add(self.len);
                core::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
            }
            self.len += b.len();
        }
        /// A spec of `size` bytes, `fill` writing its body.
        fn spec(&mut self, t: u32, size: u16, fill: impl FnOnce(&mut [u8])) {
            let mut s = vec![0u8; size as usize];
            s[..4].copy_from_slice(&t.to_ne_bytes());
            s[4..6].copy_from_slice(&size.to_ne_bytes());
            fill(&mut s);
            self.push_bytes(&s);
        }
        fn attr(&mut self) -> *mut ibv_flow_attr {
            self.buf.as_mut_ptr().cast()
        }
    }

    fn attr(n: u8) -> ibv_flow_attr {
        ibv_flow_attr {
            comp_mask: 0,
            r#type: IBV_FLOW_ATTR_NORMAL,
            size: 0,
            priority: 3,
            num_of_specs: n,
            port: 1,
            flags: IBV_FLOW_ATTR_FLAGS_DONT_TRAP,
        }
    }

    fn qp(f: &FakeCtx) -> ibv_qp {
        let mut q = ibv_qp::zeroed();
        q.context = f.ctx();
        q.handle = 0x2a;
        q
    }

    #[test]
    fn create_flow_translates_every_spec() {
        let f = FakeCtx::new();
        let mut q = qp(&f);
        let mut action = verbs_flow_action::zeroed();
        action.handle = 0x61;
        let mut counters = verbs_counters::zeroed();
        counters.handle = 0x62;
        let mut r = Rule::new(attr(9));
        // ETH, inner: value from byte 6, mask from 22.
        r.spec(IBV_FLOW_SPEC_ETH | IBV_FLOW_SPEC_INNER, 40, |s| {
            s[6..12].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
            s[22..28].copy_from_slice(&[0xff; 6]);
            s[18..20].copy_from_slice(&0x0800u16.to_be_bytes());
        });
        // IPv4 (addresses only).
        r.spec(IBV_FLOW_SPEC_IPV4, 24, |s| {
            s[8..12].copy_from_slice(&[10, 0, 0, 1]);
            s[16..20].copy_from_slice(&[0xff; 4]);
        });
        // IPv4 ext, inner: becomes IPV4 | INNER, 12-byte filters.
        r.spec(IBV_FLOW_SPEC_IPV4_EXT | IBV_FLOW_SPEC_INNER, 32, |s| {
            s[8..12].copy_from_slice(&[192, 168, 0, 1]);
            s[16] = 17; // proto
            s[20..24].copy_from_slice(&[0xff; 4]);
            s[28] = 0xff;
        });
        // IPv6: 39 of the 40 filter bytes reach the kernel.
        r.spec(IBV_FLOW_SPEC_IPV6, 88, |s| {
            s[8] = 0xfe;
            s[46] = 64; // hop_limit
            s[47] = 0x5a; // value padding: not copied
            s[48] = 0xff;
            s[86] = 0xff;
        });
        // UDP: filters at 6 and 10.
        r.spec(IBV_FLOW_SPEC_UDP, 16, |s| {
            s[6..8].copy_from_slice(&4791u16.to_be_bytes());
            s[10..12].copy_from_slice(&[0xff; 2]);
        });
        r.spec(IBV_FLOW_SPEC_VXLAN_TUNNEL, 16, |s| {
            s[8..12].copy_from_slice(&[0, 0, 1, 0]);
            s[12..16].copy_from_slice(&[0xff; 4]);
        });
        r.spec(IBV_FLOW_SPEC_ACTION_TAG, 12, |s| {
            s[8..12].copy_from_slice(&0x77u32.to_ne_bytes())
        });
        let ap = &mut action as *mut verbs_flow_action as u64;
        r.spec(IBV_FLOW_SPEC_ACTION_HANDLE, 16, |s| {
            s[8..16].copy_from_slice(&ap.to_ne_bytes())
        });
        let cp = &mut counters as *mut verbs_counters as u64;
        r.spec(IBV_FLOW_SPEC_ACTION_COUNT, 16, |s| {
            s[8..16].copy_from_slice(&cp.to_ne_bytes())
        });
        let mut flow = ibv_flow::zeroed();
        let mut ucmd = [0x0102_0304_0506_0708u64];
        let mut k = WriteFake(|_: &[u8], resp: *mut c_void| {
            // SAFETY: the response the command names.
            unsafe { (*resp.cast::<ib_uverbs_create_flow_resp>()).flow_handle = 0x1f };
            0
        });
        // SAFETY: every object outlives the call.
        let rc = unsafe {
            create_flow(
                &mut q,
                &mut flow,
                r.attr(),
                ucmd.as_mut_ptr().cast(),
                8,
                &mut k,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!((flow.handle, flow.context), (0x1f, f.ctx()));
        let b = f.take();
        let specs = 40 + 24 + 32 + 88 + 16 + 16 + 16 + 16 + 16;
        assert_eq!(b.len(), 48 + specs + 8);
        let h = ex_hdr(&b);
        assert_eq!(
            (h.0, h.1, h.2, h.4, h.5, h.6),
            (EXT | 50, ((24 + specs) / 8) as u16, 1, 1, 0, 0)
        );
        assert_ne!(h.3, 0);
        // The core payload and the rule's attributes.
        assert_eq!((u32_at(&b, 24), u32_at(&b, 28)), (0, 0x2a));
        assert_eq!(
            (u32_at(&b, 32), u16_at(&b, 36), u16_at(&b, 38)),
            (IBV_FLOW_ATTR_NORMAL, specs as u16, 3)
        );
        assert_eq!(
            (b[40], b[41], b[42], b[43], u32_at(&b, 44)),
            (9, 0, 0, 1, IBV_FLOW_ATTR_FLAGS_DONT_TRAP)
        );
        let mut o = 48;
        // ETH
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4)),
            (IBV_FLOW_SPEC_ETH | IBV_FLOW_SPEC_INNER, 40)
        );
        assert_eq!(&b[o + 8..o + 14], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&b[o + 20..o + 22], &0x0800u16.to_be_bytes());
        assert_eq!(&b[o + 24..o + 30], &[0xff; 6]);
        o += 40;
        // IPv4
        assert_eq!((u32_at(&b, o), u16_at(&b, o + 4)), (IBV_FLOW_SPEC_IPV4, 24));
        assert_eq!(
            (&b[o + 8..o + 12], &b[o + 16..o + 20]),
            (&[10, 0, 0, 1][..], &[0xff; 4][..])
        );
        o += 24;
        // IPv4 ext
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4)),
            (IBV_FLOW_SPEC_IPV4 | IBV_FLOW_SPEC_INNER, 32)
        );
        assert_eq!((&b[o + 8..o + 12], b[o + 16]), (&[192, 168, 0, 1][..], 17));
        assert_eq!((&b[o + 20..o + 24], b[o + 28]), (&[0xff; 4][..], 0xff));
        o += 32;
        // IPv6
        assert_eq!((u32_at(&b, o), u16_at(&b, o + 4)), (IBV_FLOW_SPEC_IPV6, 88));
        assert_eq!((b[o + 8], b[o + 46], b[o + 47]), (0xfe, 64, 0));
        assert_eq!((b[o + 48], b[o + 86], b[o + 87]), (0xff, 0xff, 0));
        o += 88;
        // UDP
        assert_eq!((u32_at(&b, o), u16_at(&b, o + 4)), (IBV_FLOW_SPEC_UDP, 16));
        assert_eq!(
            (&b[o + 8..o + 10], &b[o + 12..o + 14]),
            (&4791u16.to_be_bytes()[..], &[0xff; 2][..])
        );
        o += 16;
        // VXLAN
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4)),
            (IBV_FLOW_SPEC_VXLAN_TUNNEL, 16)
        );
        assert_eq!(
            (&b[o + 8..o + 12], &b[o + 12..o + 16]),
            (&[0, 0, 1, 0][..], &[0xff; 4][..])
        );
        o += 16;
        // Actions
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4), u32_at(&b, o + 8)),
            (IBV_FLOW_SPEC_ACTION_TAG, 16, 0x77)
        );
        o += 16;
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4), u32_at(&b, o + 8)),
            (IBV_FLOW_SPEC_ACTION_HANDLE, 16, 0x61)
        );
        o += 16;
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4), u32_at(&b, o + 8)),
            (IBV_FLOW_SPEC_ACTION_COUNT, 16, 0x62)
        );
        o += 16;
        // The provider's part last.
        assert_eq!(u64_at(&b, o), ucmd[0]);
    }

    #[test]
    fn more_specs_esp_gre_mpls_drop() {
        let f = FakeCtx::new();
        let mut q = qp(&f);
        let mut r = Rule::new(attr(4));
        r.spec(IBV_FLOW_SPEC_ESP | IBV_FLOW_SPEC_INNER, 24, |s| {
            s[8..12].copy_from_slice(&0x1234u32.to_ne_bytes());
            s[16..20].copy_from_slice(&[0xff; 4]);
        });
        r.spec(IBV_FLOW_SPEC_GRE, 24, |s| {
            s[10..12].copy_from_slice(&0x6558u16.to_be_bytes());
            s[18..20].copy_from_slice(&[0xff; 2]);
        });
        r.spec(IBV_FLOW_SPEC_MPLS, 16, |s| {
            s[8..12].copy_from_slice(&[0, 1, 0x41, 0x40]);
            s[12..16].copy_from_slice(&[0xff, 0xff, 0xf0, 0]);
        });
        r.spec(IBV_FLOW_SPEC_ACTION_DROP, 8, |_| {});
        let mut flow = ibv_flow::zeroed();
        let null = core::ptr::null_mut();
        // SAFETY: every object outlives the call.
        let rc = unsafe { ibv_cmd_create_flow(&mut q, &mut flow, r.attr(), null, 0) };
        assert_eq!(rc, 0);
        let b = f.take();
        assert_eq!(b.len(), 48 + 24 + 24 + 16 + 8);
        let h = ex_hdr(&b);
        assert_eq!((h.1, h.2, h.4, h.5), (((24 + 72) / 8) as u16, 1, 0, 0));
        let o = 48;
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4)),
            (IBV_FLOW_SPEC_ESP | IBV_FLOW_SPEC_INNER, 24)
        );
        assert_eq!(
            (u32_at(&b, o + 8), &b[o + 16..o + 20]),
            (0x1234, &[0xff; 4][..])
        );
        let o = o + 24;
        assert_eq!((u32_at(&b, o), u16_at(&b, o + 4)), (IBV_FLOW_SPEC_GRE, 24));
        assert_eq!(
            (&b[o + 10..o + 12], &b[o + 18..o + 20]),
            (&0x6558u16.to_be_bytes()[..], &[0xff; 2][..])
        );
        let o = o + 24;
        assert_eq!((u32_at(&b, o), u16_at(&b, o + 4)), (IBV_FLOW_SPEC_MPLS, 16));
        assert_eq!(
            (&b[o + 8..o + 12], &b[o + 12..o + 16]),
            (&[0, 1, 0x41, 0x40][..], &[0xff, 0xff, 0xf0, 0][..])
        );
        let o = o + 16;
        assert_eq!(
            (u32_at(&b, o), u16_at(&b, o + 4)),
            (IBV_FLOW_SPEC_ACTION_DROP, 8)
        );
    }

    #[test]
    fn filter_sizes_are_checked_as_rdma_core_does() {
        let f = FakeCtx::new();
        let mut q = qp(&f);
        let mut flow = ibv_flow::zeroed();
        let null = core::ptr::null_mut();
        let run = |r: &mut Rule, q: &mut ibv_qp, flow: &mut ibv_flow| {
            // SAFETY: every object outlives the call.
            unsafe { ibv_cmd_create_flow(q, flow, r.attr(), null, 0) }
        };
        // A VXLAN filter longer than the kernel's, masking nothing more:
        // accepted, cut to the kernel's 4 bytes.
        let mut r = Rule::new(attr(1));
        r.spec(IBV_FLOW_SPEC_VXLAN_TUNNEL, 24, |s| {
            s[8..16].copy_from_slice(&[1, 2, 3, 4, 9, 9, 9, 9]);
            s[16..20].copy_from_slice(&[0xff; 4]);
        });
        assert_eq!(run(&mut r, &mut q, &mut flow), 0);
        let b = f.take();
        assert_eq!(
            (u16_at(&b, 52), &b[56..60], &b[60..64]),
            (16, &[1, 2, 3, 4][..], &[0xff; 4][..])
        );
        // ... masking more: EOPNOTSUPP, nothing sent.
        let mut r = Rule::new(attr(1));
        r.spec(IBV_FLOW_SPEC_VXLAN_TUNNEL, 24, |s| s[20] = 1);
        assert_eq!(run(&mut r, &mut q, &mut flow), libc::EOPNOTSUPP);
        // Shorter than the kernel's: EINVAL.
        let mut r = Rule::new(attr(1));
        r.spec(IBV_FLOW_SPEC_IPV4_EXT, 24, |_| {});
        assert_eq!(run(&mut r, &mut q, &mut flow), libc::EINVAL);
        // Types without an inner form, unknown types, missing actions.
        for (t, size) in [
            (IBV_FLOW_SPEC_GRE | IBV_FLOW_SPEC_INNER, 24),
            (IBV_FLOW_SPEC_VXLAN_TUNNEL | IBV_FLOW_SPEC_INNER, 16),
            (IBV_FLOW_SPEC_ACTION_DROP | IBV_FLOW_SPEC_INNER, 8),
            (0x33, 16),
            (IBV_FLOW_SPEC_ACTION_HANDLE, 16),
            (IBV_FLOW_SPEC_ACTION_COUNT, 16),
        ] {
            let mut r = Rule::new(attr(1));
            r.spec(t, size, |_| {});
            assert_eq!(run(&mut r, &mut q, &mut flow), libc::EINVAL, "type {t:#x}");
        }
        assert!(f.take().is_empty());
    }

    #[test]
    fn create_flow_error_and_destroy() {
        let mut f = FakeCtx::new();
        let mut q = qp(&f);
        let mut flow = ibv_flow::zeroed();
        flow.context = f.ctx();
        flow.handle = 0x3c;
        // SAFETY: every object outlives the calls.
        unsafe {
            assert_eq!(ibv_cmd_destroy_flow(&mut flow), 0);
            let b = f.take();
            assert_eq!(b.len(), 32);
            assert_eq!(ex_hdr(&b), (EXT | 51, 1, 0, 0, 0, 0, 0));
            assert_eq!((u32_at(&b, 24), u32_at(&b, 28)), (0, 0x3c));
            f.close_reader();
            assert_eq!(ibv_cmd_destroy_flow(&mut flow), libc::EPIPE);
            let mut r = Rule::new(attr(1));
            r.spec(IBV_FLOW_SPEC_ACTION_DROP, 8, |_| {});
            let mut nf = ibv_flow::zeroed();
            let rc = ibv_cmd_create_flow(&mut q, &mut nf, r.attr(), core::ptr::null_mut(), 0);
            assert_eq!((rc, nf.handle), (libc::EPIPE, 0));
            assert!(nf.context.is_null());
        }
    }
}
