//! The option values an rsocket carries (what `rsetsockopt` set), read
//! by the stream when it builds a connection and by `opts` when a program
//! asks. Below both, so neither reaches into the other for them.

use core::ffi::c_int;
use std::time::Duration;

/// The segment size TCP_MAXSEG reports. There are no segments here (a
/// write becomes messages of up to a quarter of the peer's ring); callers
/// only size their writes by it, and some reject values past jumbo frames.
const MAXSEG: c_int = 8192;

#[derive(Clone, Copy, Debug)]
pub struct Opts {
    pub sndbuf: u32,
    pub rcvbuf: u32,
    pub sq_size: u32,
    pub rq_size: u32,
    pub inline: u32,
    pub iomap_size: u32,
    pub reuseaddr: bool,
    pub keepalive: bool,
    pub keepidle: c_int,
    pub nodelay: bool,
    pub maxseg: c_int,
    pub linger: libc::linger,
    pub v6only: Option<bool>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            sndbuf: 256 << 10,
            rcvbuf: 256 << 10,
            sq_size: 128,
            rq_size: 128,
            inline: 64,
            iomap_size: 0,
            reuseaddr: false,
            keepalive: false,
            // Until SO_KEEPALIVE turns on (then the system's), as rdma-core.
            keepidle: 0,
            nodelay: false,
            maxseg: MAXSEG,
            linger: libc::linger {
                l_onoff: 0,
                l_linger: 0,
            },
            v6only: None,
        }
    }
}

impl Opts {
    /// How long close may wait for sent data: SO_LINGER's time when on.
    pub fn linger_timeout(&self) -> Option<Duration> {
        (self.linger.l_onoff != 0).then(|| Duration::from_secs(self.linger.l_linger.max(0) as u64))
    }
}
