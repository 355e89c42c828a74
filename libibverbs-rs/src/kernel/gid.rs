//! GID and P_Key tables of kernel devices: the kernel's GID entry method,
//! with rdma-core's sysfs reading where the kernel lacks it.

use core::ffi::c_int;

use verbs_abi::driver::verbs_device;
use verbs_abi::*;

use super::ioctl::{
    Call, UVERBS_ATTR_F_VALID_OUTPUT, UVERBS_METHOD_QUERY_GID_ENTRY, UVERBS_OBJECT_DEVICE,
};

const ATTR_PORT: u16 = 0;
const ATTR_GID_INDEX: u16 = 1;
const ATTR_FLAGS: u16 = 2;
const ATTR_RESP_ENTRY: u16 = 3;

/// `ibdev_path` of the device of a kernel context.
///
/// # Safety
/// `ctx` is a live kernel context.
unsafe fn ibdev_path(ctx: *mut ibv_context) -> String {
    // SAFETY: a kernel context's device is the provider's verbs_device
    // with our sysfs record.
    let p = unsafe { &(*(*(*ctx).device.cast::<verbs_device>()).sysfs).ibdev_path };
    let b: Vec<u8> = p
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

fn read_attr(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end_matches('\n').to_owned())
}

/// Parses sysfs's `fe80:0000:...` form.
pub(crate) fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let mut raw = [0u8; 16];
    let mut n = 0;
    for (i, part) in s.split(':').enumerate() {
        if i >= 8 {
            return None;
        }
        let v = u16::from_str_radix(part, 16).ok()?;
        raw[i * 2..i * 2 + 2].copy_from_slice(&v.to_be_bytes());
        n += 1;
    }
    (n == 8).then_some(raw)
}

/// rdma-core's sysfs fallback for one entry.
unsafe fn gid_from_sysfs(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    e: &mut ibv_gid_entry,
) -> c_int {
    // SAFETY: forwarded contract.
    let base = format!("{}/ports/{port}", unsafe { ibdev_path(ctx) });
    let Some(raw) = read_attr(&format!("{base}/gids/{index}")).and_then(|s| parse_gid(&s)) else {
        return libc::EINVAL;
    };
    e.gid.raw = raw;
    e.gid_index = index;
    e.port_num = port;
    e.gid_type = match read_attr(&format!("{base}/gid_attrs/types/{index}")).as_deref() {
        Some("RoCE v2") => IBV_GID_TYPE_ROCE_V2,
        Some(_) => {
            let link = read_attr(&format!("{base}/link_layer"));
            if link.as_deref() == Some("Ethernet") {
                IBV_GID_TYPE_ROCE_V1
            } else {
                IBV_GID_TYPE_IB
            }
        }
        None => IBV_GID_TYPE_IB,
    };
    e.ndev_ifindex = read_attr(&format!("{base}/gid_attrs/ndevs/{index}"))
        .and_then(|n| std::ffi::CString::new(n).ok())
        // SAFETY: a NUL-terminated interface name.
        .map_or(0, |n| unsafe { libc::if_nametoindex(n.as_ptr()) });
    if raw == [0; 16] {
        return libc::ENODATA;
    }
    0
}

/// # Safety
/// `ctx` is an open kernel context; `entry` writable.
pub(crate) unsafe extern "C" fn query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
) -> c_int {
    let mut out = ibv_gid_entry::zeroed();
    let mut call = Call::new(UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_GID_ENTRY);
    call.inline_in(ATTR_PORT, port.into(), 8);
    call.inline_in(ATTR_GID_INDEX, index.into(), 8);
    call.inline_in(ATTR_FLAGS, flags.into(), 4);
    call.out(ATTR_RESP_ENTRY, &mut out);
    let _ = UVERBS_ATTR_F_VALID_OUTPUT;
    // SAFETY: a kernel context; `out` lives across the call.
    let mut rc = unsafe { call.run(ctx) };
    if rc == libc::EOPNOTSUPP || rc == libc::ENOTTY || rc == libc::EPROTONOSUPPORT {
        if flags != 0 {
            return libc::EOPNOTSUPP;
        }
        // SAFETY: forwarded contract.
        rc = unsafe { gid_from_sysfs(ctx, port, index, &mut out) };
    }
    if rc == 0 {
        // SAFETY: the caller's entry.
        unsafe { entry.write(out) };
    }
    rc
}

/// # Safety
/// `ctx` is an open kernel context; `pkey` writable.
pub(crate) unsafe extern "C" fn query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut __be16,
) -> c_int {
    // SAFETY: forwarded contract.
    let path = format!("{}/ports/{port}/pkeys/{index}", unsafe { ibdev_path(ctx) });
    let Some(v) =
        read_attr(&path).and_then(|s| u16::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's slot.
    unsafe { pkey.write(v.to_be()) };
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_gid_form() {
        let g = parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456").unwrap();
        assert_eq!(g[0], 0xfe);
        assert_eq!(g[1], 0x80);
        assert_eq!(g[15], 0x56);
        assert!(parse_gid("fe80::1").is_none());
        assert!(parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0001:0000").is_none());
    }
}
