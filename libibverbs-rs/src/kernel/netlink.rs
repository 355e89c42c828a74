//! The kernel's RDMA netlink (`NETLINK_RDMA`, the `RDMA_NLDEV` client):
//! the device list with driver ids and uverbs character devices, as
//! rdma-core 44 reads it. Only the two requests discovery needs.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_RDMA: i32 = 20;
const RDMA_NL_NLDEV: u16 = 5;
const RDMA_NLDEV_CMD_GET: u16 = 1;
const RDMA_NLDEV_CMD_GET_CHARDEV: u16 = 15;
const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
const SYS_ATTR_COPY_ON_FORK: u16 = 93;

const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_NODE_GUID: u16 = 6;
const ATTR_DEV_NODE_TYPE: u16 = 14;
const ATTR_CHARDEV_TYPE: u16 = 69;
const ATTR_CHARDEV_NAME: u16 = 70;
const ATTR_CHARDEV_ABI: u16 = 71;
const ATTR_CHARDEV: u16 = 72;
const ATTR_UVERBS_DRIVER_ID: u16 = 73;

const NLMSG_HDRLEN: usize = 16;
const NLA_HDRLEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

/// One device of the `RDMA_NLDEV_CMD_GET` dump.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NlDevice {
    pub index: u32,
    pub name: String,
    pub num_ports: u32,
    /// As the kernel stores it (network order when read as bytes).
    pub node_guid: u64,
    /// The kernel's `RDMA_NODE_*`.
    pub node_type: u8,
}

/// The uverbs character device of one RDMA device.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NlChardev {
    pub name: String,
    pub abi: u64,
    /// `huge_encode_dev` form, decoded by [`decode_dev`].
    pub dev: u64,
    /// `RDMA_DRIVER_*`, or None when the kernel does not say.
    pub driver_id: Option<u32>,
}

/// `huge_encode_dev` to a glibc `dev_t`.
pub(crate) fn decode_dev(v: u64) -> libc::dev_t {
    let major = ((v & 0xfff00) >> 8) as u32;
    let minor = ((v & 0xff) | ((v >> 12) & 0xfff00)) as u32;
    libc::makedev(major, minor)
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn msg_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// A request: header plus attributes.
fn request(op: u16, flags: u16, seq: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, data) in attrs {
        let len = NLA_HDRLEN + data.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(data);
        body.resize(align4(body.len()), 0);
    }
    let total = NLMSG_HDRLEN + body.len();
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&msg_type(op).to_ne_bytes());
    m.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&body);
    m
}

/// The attributes of one message body, as (type, payload) pairs.
pub(crate) fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= NLA_HDRLEN {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < NLA_HDRLEN || len > b.len() {
            break;
        }
        out.push((kind, &b[NLA_HDRLEN..len]));
        b = &b[align4(len).min(b.len())..];
    }
    out
}

fn get_u32(a: &[(u16, &[u8])], k: u16) -> Option<u32> {
    let v = a.iter().find(|(t, _)| *t == k)?.1;
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

fn get_u64(a: &[(u16, &[u8])], k: u16) -> Option<u64> {
    let v = a.iter().find(|(t, _)| *t == k)?.1;
    Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
}

fn get_u8(a: &[(u16, &[u8])], k: u16) -> Option<u8> {
    a.iter().find(|(t, _)| *t == k)?.1.first().copied()
}

fn get_str(a: &[(u16, &[u8])], k: u16) -> Option<String> {
    let v = a.iter().find(|(t, _)| *t == k)?.1;
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    Some(String::from_utf8_lossy(&v[..end]).into_owned())
}

struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    fn open() -> Option<Socket> {
        // SAFETY: plain socket creation.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_RDMA,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A bounded wait: a kernel that never answers must not hang discovery.
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        // SAFETY: tv is a valid timeval of the size given.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                core::mem::size_of::<libc::timeval>() as u32,
            )
        };
        Some(Socket { fd, seq: 1 })
    }

    /// Sends one request and collects the bodies of every answer until
    /// DONE (dumps) or the single reply; Err on a netlink error.
    fn ask(&mut self, op: u16, flags: u16, attrs: &[(u16, &[u8])]) -> Result<Vec<Vec<u8>>, i32> {
        self.seq += 1;
        let seq = self.seq;
        let m = request(op, flags, seq, attrs);
        // SAFETY: m is a readable buffer of its length; the kernel is the
        // destination of an unbound netlink socket by default.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if n < 0 {
            return Err(verbs_rt::errno::errno());
        }
        let dump = flags & libc::NLM_F_DUMP as u16 != 0;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32768];
        loop {
            // SAFETY: buf is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = verbs_rt::errno::errno();
                if e == libc::EINTR {
                    continue;
                }
                return Err(e);
            }
            let mut b = &buf[..n as usize];
            let mut done = false;
            while b.len() >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes(b[0..4].try_into().unwrap_or_default()) as usize;
                let kind = u16::from_ne_bytes([b[4], b[5]]);
                let mseq = u32::from_ne_bytes(b[8..12].try_into().unwrap_or_default());
                if len < NLMSG_HDRLEN || len > b.len() {
                    break;
                }
                if mseq == seq {
                    match kind {
                        NLMSG_DONE => done = true,
                        NLMSG_ERROR => {
                            let code = b
                                .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
                                .map(|v| i32::from_ne_bytes(v.try_into().unwrap_or_default()))
                                .unwrap_or(-libc::EIO);
                            if code != 0 {
                                return Err(-code);
                            }
                            done = true;
                        }
                        _ => {
                            out.push(b[NLMSG_HDRLEN..len].to_vec());
                            if !dump {
                                done = true;
                            }
                        }
                    }
                }
                b = &b[align4(len).min(b.len())..];
            }
            if done {
                return Ok(out);
            }
        }
    }
}

/// The RDMA devices of this network namespace, or None when netlink
/// cannot tell (no RDMA netlink in this kernel, or a refused socket).
pub(crate) fn devices() -> Option<Vec<(NlDevice, Option<NlChardev>)>> {
    let mut s = Socket::open()?;
    let bodies = s
        .ask(RDMA_NLDEV_CMD_GET, libc::NLM_F_DUMP as u16, &[])
        .ok()?;
    let mut out = Vec::new();
    for body in bodies {
        let a = attrs(&body);
        let (Some(index), Some(name), Some(num_ports), Some(node_guid), Some(node_type)) = (
            get_u32(&a, ATTR_DEV_INDEX),
            get_str(&a, ATTR_DEV_NAME),
            get_u32(&a, ATTR_PORT_INDEX),
            get_u64(&a, ATTR_NODE_GUID),
            get_u8(&a, ATTR_DEV_NODE_TYPE),
        ) else {
            continue;
        };
        let dev = NlDevice {
            index,
            name,
            num_ports,
            node_guid,
            node_type,
        };
        let cdev = chardev(&mut s, index);
        out.push((dev, cdev));
    }
    Some(out)
}

/// Whether the kernel copies pinned pages at fork (its RDMA netlink says
/// so since 5.13; an older kernel leaves the attribute out). None when
/// there is no RDMA netlink to ask.
pub(crate) fn copy_on_fork() -> Option<bool> {
    let mut s = Socket::open()?;
    let bodies = s.ask(RDMA_NLDEV_CMD_SYS_GET, 0, &[]).ok()?;
    let a = attrs(bodies.first()?);
    Some(get_u8(&a, SYS_ATTR_COPY_ON_FORK).unwrap_or(0) != 0)
}

fn chardev(s: &mut Socket, index: u32) -> Option<NlChardev> {
    let idx = index.to_ne_bytes();
    let bodies = s
        .ask(
            RDMA_NLDEV_CMD_GET_CHARDEV,
            0,
            &[(ATTR_DEV_INDEX, &idx), (ATTR_CHARDEV_TYPE, b"uverbs\0")],
        )
        .ok()?;
    let a = attrs(bodies.first()?);
    Some(NlChardev {
        name: get_str(&a, ATTR_CHARDEV_NAME)?,
        abi: get_u64(&a, ATTR_CHARDEV_ABI)?,
        dev: get_u64(&a, ATTR_CHARDEV)?,
        driver_id: get_u32(&a, ATTR_UVERBS_DRIVER_ID),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_and_attribute_walk() {
        let m = request(
            RDMA_NLDEV_CMD_GET_CHARDEV,
            0,
            7,
            &[(1, &5u32.to_ne_bytes()), (69, b"uverbs\0")],
        );
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), (5 << 10) + 15);
        assert_eq!(m.len() % 4, 0);
        let a = attrs(&m[NLMSG_HDRLEN..]);
        assert_eq!(get_u32(&a, 1), Some(5));
        assert_eq!(get_str(&a, 69).as_deref(), Some("uverbs"));
        assert_eq!(get_u64(&a, 72), None);
    }

    #[test]
    fn huge_dev_decoding() {
        // major 231, minor 192 (uverbs0) as huge_encode_dev writes it.
        let v = (192u64 & 0xff) | (231u64 << 8);
        assert_eq!(decode_dev(v), libc::makedev(231, 192));
    }
}
