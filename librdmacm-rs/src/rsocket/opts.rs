//! Socket options of an rsocket (`rsetsockopt`/`rgetsockopt`) and
//! `rfcntl`. Buffer and queue sizes shape the connection and so count only
//! when set before it is made (as with rdma-core); a listener passes its
//! options to the sockets it accepts.

use core::ffi::c_int;
use std::sync::Arc;

use super::dgram::DSocket;
use super::stream::{Inner, RSocket, State};
use crate::cma;
use crate::error::{errno, Res};

/// `SOL_RDMA` and its options, from `<rdma/rsocket.h>`.
pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;
pub const RDMA_ROUTE: c_int = 4;

/// An option value as C passes it.
pub enum Val {
    Int(c_int),
    Linger(libc::linger),
    Bytes(Vec<u8>),
}

fn int_of(v: &[u8]) -> Res<c_int> {
    if v.len() < 4 {
        return Err(libc::EINVAL);
    }
    Ok(c_int::from_ne_bytes([v[0], v[1], v[2], v[3]]))
}

fn size_of_opt(v: c_int) -> Res<u32> {
    if v < 0 {
        return Err(libc::EINVAL);
    }
    Ok(v as u32)
}

fn before_connect(g: &Inner) -> Res<()> {
    match g.state {
        State::Open | State::Bound | State::Listening => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

pub fn set(s: &Arc<RSocket>, level: c_int, name: c_int, v: &[u8]) -> Res<()> {
    let mut g = s.lock();
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => g.opts.reuseaddr = int_of(v)? != 0,
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            let on = int_of(v)? != 0;
            if on != g.opts.keepalive {
                g.opts.keepalive = on;
                if let Err(e) = s.keepalive_changed(&mut g) {
                    g.opts.keepalive = false;
                    return Err(e);
                }
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.opts.sndbuf = size_of_opt(int_of(v)?)?,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.opts.rcvbuf = size_of_opt(int_of(v)?)?,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if v.len() < core::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            g.opts.linger = libc::linger {
                l_onoff: int_of(&v[0..4])?,
                l_linger: int_of(&v[4..8])?,
            };
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => g.opts.nodelay = int_of(v)? != 0,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let m = int_of(v)?;
            if m <= 0 {
                return Err(libc::EINVAL);
            }
            g.opts.maxseg = m;
        }
        // Retries are the RC QP's business: accepted and ignored, as
        // rdma-core does.
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => {
            int_of(v)?;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let t = int_of(v)?;
            if t <= 0 {
                return Err(libc::EINVAL);
            }
            g.opts.keepidle = t;
            if g.opts.keepalive {
                s.keepalive_changed(&mut g)?;
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            if g.state != State::Open {
                return Err(libc::EINVAL);
            }
            g.opts.v6only = Some(int_of(v)? != 0);
        }
        (SOL_RDMA, RDMA_SQSIZE | RDMA_RQSIZE | RDMA_INLINE | RDMA_IOMAPSIZE) => {
            before_connect(&g)?;
            let n = size_of_opt(int_of(v)?)?;
            match name {
                RDMA_SQSIZE if n > 0 => g.opts.sq_size = n,
                RDMA_RQSIZE if n > 0 => g.opts.rq_size = n,
                RDMA_INLINE => g.opts.inline = n,
                RDMA_IOMAPSIZE => g.opts.iomap_size = n,
                _ => return Err(libc::EINVAL),
            }
        }
        (SOL_RDMA, RDMA_ROUTE) => {
            // A path record (from rdma_getaddrinfo's ai_route) for the id.
            let id = g.id();
            // SAFETY: our id; `v` is readable for its length.
            let rc = unsafe {
                cma::rdma_set_option(
                    id,
                    verbs_abi::RDMA_OPTION_IB,
                    verbs_abi::RDMA_OPTION_IB_PATH,
                    v.as_ptr() as *mut _,
                    v.len(),
                )
            };
            if rc != 0 {
                return Err(errno());
            }
        }
        (libc::SOL_SOCKET | libc::IPPROTO_TCP | libc::IPPROTO_IPV6 | SOL_RDMA, _) => {
            return Err(libc::ENOPROTOOPT)
        }
        _ => return Err(libc::ENOPROTOOPT),
    }
    Ok(())
}

pub fn get(s: &RSocket, level: c_int, name: c_int) -> Res<Val> {
    let mut g = s.lock();
    let b = |v: bool| Val::Int(c_int::from(v));
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => b(g.opts.reuseaddr),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => b(g.opts.keepalive),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => Val::Int(g.opts.sndbuf as c_int),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => Val::Int(g.opts.rcvbuf as c_int),
        (libc::SOL_SOCKET, libc::SO_LINGER) => Val::Linger(g.opts.linger),
        (libc::SOL_SOCKET, libc::SO_TYPE) => Val::Int(libc::SOCK_STREAM),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => Val::Int(g.family),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => Val::Int(libc::IPPROTO_TCP),
        (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => b(g.state == State::Listening),
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            // Reading the error clears it, as with sockets.
            let e = std::mem::take(&mut g.so_error);
            Val::Int(e)
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => b(g.opts.nodelay),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => Val::Int(g.opts.maxseg),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => Val::Int(g.opts.keepidle),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => Val::Int(1),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => b(g.opts.v6only.unwrap_or(false)),
        (SOL_RDMA, RDMA_SQSIZE) => Val::Int(g.opts.sq_size as c_int),
        (SOL_RDMA, RDMA_RQSIZE) => Val::Int(g.opts.rq_size as c_int),
        (SOL_RDMA, RDMA_INLINE) => Val::Int(g.opts.inline as c_int),
        (SOL_RDMA, RDMA_IOMAPSIZE) => Val::Int(g.opts.iomap_size as c_int),
        (libc::IPPROTO_TCP, libc::TCP_INFO) => Val::Bytes(tcp_info(&g)),
        (SOL_RDMA, RDMA_ROUTE) => Val::Bytes(Vec::new()),
        _ => return Err(libc::ENOPROTOOPT),
    })
}

/// `rfcntl`: the status flags are the rsocket's own (O_NONBLOCK); the
/// descriptor flags are those of the descriptor that numbers it.
pub fn fcntl(s: &RSocket, cmd: c_int, arg: usize) -> Res<c_int> {
    match cmd {
        libc::F_GETFL => {
            let g = s.lock();
            Ok(libc::O_RDWR | if g.nonblock { libc::O_NONBLOCK } else { 0 })
        }
        libc::F_SETFL => {
            s.lock().nonblock = arg as c_int & libc::O_NONBLOCK != 0;
            Ok(0)
        }
        libc::F_GETFD | libc::F_SETFD => {
            // SAFETY: fcntl on the rsocket's own descriptor.
            let r = unsafe { libc::fcntl(s.fd, cmd, arg as c_int) };
            if r < 0 {
                Err(errno())
            } else {
                Ok(r)
            }
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// TCP_INFO as far as it means anything here: the connection's state and
/// the nominal segment size; no retransmissions happen at this layer (RC
/// is reliable below us) and there is no congestion window or RTT
/// estimate, so those read 0.
fn tcp_info(g: &Inner) -> Vec<u8> {
    // SAFETY: tcp_info is plain integers; all-zero is a valid value.
    let mut t: libc::tcp_info = unsafe { core::mem::zeroed() };
    t.tcpi_state = match g.state {
        State::Connected => 1, // TCP_ESTABLISHED
        State::Connecting | State::ResolvingAddr | State::ResolvingRoute => 2, // TCP_SYN_SENT
        State::Accepting => 3, // TCP_SYN_RECV
        State::Listening => 10, // TCP_LISTEN
        _ => 7,                // TCP_CLOSE
    };
    t.tcpi_snd_mss = g.opts.maxseg as u32;
    t.tcpi_rcv_mss = g.opts.maxseg as u32;
    let size = core::mem::size_of::<libc::tcp_info>();
    let mut v = vec![0u8; size];
    // SAFETY: copies the struct's `size` bytes into a buffer that long.
    unsafe { core::ptr::copy_nonoverlapping(&t as *const _ as *const u8, v.as_mut_ptr(), size) };
    v
}

/// Options of a datagram rsocket: its buffers (datagrams that may wait,
/// set before the QP is made) and SO_REUSEADDR (for its address).
pub fn dgram_set(d: &DSocket, level: c_int, name: c_int, v: &[u8]) -> Res<()> {
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => d.set_reuseaddr(int_of(v)? != 0),
        (libc::SOL_SOCKET, libc::SO_SNDBUF | libc::SO_RCVBUF) => {
            let n = size_of_opt(int_of(v)?)? as usize;
            d.set_buf(name == libc::SO_RCVBUF, n)?;
        }
        _ => return Err(libc::ENOPROTOOPT),
    }
    Ok(())
}

pub fn dgram_get(d: &DSocket, level: c_int, name: c_int) -> Res<Val> {
    let (rcv, snd) = d.bufs();
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_TYPE) => Val::Int(libc::SOCK_DGRAM),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => Val::Int(d.family()),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => Val::Int(libc::IPPROTO_UDP),
        (libc::SOL_SOCKET, libc::SO_ERROR) => Val::Int(0),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => Val::Int(rcv as c_int),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => Val::Int(snd as c_int),
        _ => return Err(libc::ENOPROTOOPT),
    })
}

pub fn dgram_fcntl(d: &DSocket, cmd: c_int, arg: usize) -> Res<c_int> {
    match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR
            | if d.lock().nonblock {
                libc::O_NONBLOCK
            } else {
                0
            }),
        libc::F_SETFL => {
            d.lock().nonblock = arg as c_int & libc::O_NONBLOCK != 0;
            Ok(0)
        }
        libc::F_GETFD | libc::F_SETFD => {
            // SAFETY: fcntl on the rsocket's own descriptor.
            let r = unsafe { libc::fcntl(d.fd, cmd, arg as c_int) };
            if r < 0 {
                Err(errno())
            } else {
                Ok(r)
            }
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}
