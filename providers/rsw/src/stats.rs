//! Counters: per QP, kept in the QP's state and bumped under the QP's lock
//! the engines already hold (plain cells, no atomics on the data path),
//! summed per device, and served on request to `rsw-stat <pid>` through
//! an abstract Unix socket, `@rsw-stat.<pid>`, that the progress thread
//! answers. Nothing is written anywhere while nobody asks.
//!
//! Names follow the hardware counters rdma-core users know (`rdma
//! statistic`: rxe's `sent_pkts`, `rcvd_pkts`, `send_rnr_err`,
//! `rcvd_rnr_err`; mlx5's `rnr_nak_retry_err`, `local_ack_timeout_err`,
//! `req_remote_access_errors`, ...). There is no `out_of_sequence`,
//! `packet_seq_err` or retransmission count: requests travel over TCP, which
//! delivers them in order and does the retransmitting (the kernel counts
//! that, `nstat TcpRetransSegs`).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_rt::ForkFresh;

use crate::progress::{engine, token, Kind, Target};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// One QP's counters (a device's are the sum of its QPs').
        #[derive(Default, Debug)]
        pub struct Counters {
            $($(#[$doc])* pub $name: Cell<u64>,)*
        }

        /// A copy of [`Counters`], for reading and summing.
        #[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Snapshot {
            $(pub $name: u64,)*
        }

        impl Counters {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($name: self.$name.get(),)* }
            }
        }

        impl Snapshot {
            pub fn add(&mut self, o: &Snapshot) {
                $(self.$name += o.$name;)*
            }

            /// (name, value) in a fixed order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Requests transmitted (on the wire or through the same-host path).
    sent_pkts,
    /// Their payload bytes.
    sent_bytes,
    /// Requests received by the responder (including SENDs a same-host
    /// peer placed in our receive queue).
    rcvd_pkts,
    rcvd_bytes,
    rx_write_requests,
    rx_read_requests,
    rx_atomic_requests,
    /// RNR NAKs the responder sent (a message waited for a receive).
    send_rnr_err,
    /// RNR NAKs the requester received.
    rcvd_rnr_err,
    /// Requests failed because the RNR retries ran out.
    rnr_nak_retry_err,
    /// Requests failed because the transport retries ran out.
    local_ack_timeout_err,
    /// NAKs received: remote access, invalid request, remote operation.
    req_remote_access_errors,
    req_remote_invalid_request,
    req_remote_operation_errors,
    /// Requests the responder refused for access or as invalid.
    resp_remote_access_errors,
    resp_remote_invalid_request,
    /// Completions with an error status (flushes apart), send and receive
    /// side, and flushed ones.
    req_cqe_error,
    resp_cqe_error,
    req_cqe_flush_error,
    resp_cqe_flush_error,
    /// Faults injected on this QP's requests (`RSW_FAULTS`).
    faults_injected,
    /// RoCEv2 packets of an RC or UC QP handed to the port's socket, the
    /// system calls that took them, those of the calls that took more
    /// than one (`sendmmsg`), and ACKs not sent because a later one
    /// covered them.
    roce_tx_pkts,
    roce_tx_calls,
    roce_tx_batches,
    roce_acks_coalesced,
    /// ACKs, NAKs and atomic responses that waited behind READ responses
    /// still owed, so that responses leave in PSN order.
    roce_replies_held,
}

impl Counters {
    pub fn bump(c: &Cell<u64>) {
        c.set(c.get() + 1);
    }

    pub fn add(c: &Cell<u64>, n: u64) {
        c.set(c.get() + n);
    }
}

/// Counters of destroyed QPs, by device, so device totals keep them.
static RETIRED: ForkFresh<Mutex<BTreeMap<String, Snapshot>>> =
    ForkFresh::new(|| Mutex::new(BTreeMap::new()));

/// A QP of `device` is destroyed: its counts stay in the device's.
pub fn retire(device: &str, s: &Snapshot) {
    RETIRED
        .get()
        .lock()
        .entry(device.to_owned())
        .or_default()
        .add(s);
}

/// One live QP as the report shows it.
pub struct QpReport {
    pub device: String,
    pub qpn: u32,
    pub kind: &'static str,
    pub state: &'static str,
    pub counters: Snapshot,
}

/// The report `rsw-stat` prints: devices (live QPs plus destroyed ones,
/// then `ports`' counters of the device: a RoCEv2 port's), then each live
/// QP.
pub fn render(pid: u32, qps: &[QpReport], ports: &[(String, Vec<(&'static str, u64)>)]) -> String {
    let mut devs = RETIRED.get().lock().clone();
    for q in qps {
        devs.entry(q.device.clone()).or_default().add(&q.counters);
    }
    for (d, _) in ports {
        devs.entry(d.clone()).or_default();
    }
    let mut out = String::new();
    let _ = writeln!(out, "pid {pid}");
    for (d, s) in &devs {
        let _ = writeln!(out, "device {d}");
        let port = ports.iter().filter(|(p, _)| p == d).flat_map(|(_, f)| f);
        for (k, v) in s.fields().iter().chain(port) {
            let _ = writeln!(out, "  {k} {v}");
        }
    }
    for q in qps {
        let _ = writeln!(
            out,
            "qp {:#x} device {} type {} state {}",
            q.qpn, q.device, q.kind, q.state
        );
        for (k, v) in q.counters.fields() {
            let _ = writeln!(out, "  {k} {v}");
        }
    }
    out
}

// ---- the socket rsw-stat asks -------------------------------------------------

/// The engine serial of the stat socket (beside the link watch's).
const SERIAL: u64 = (1 << 43) + 2;

struct Server {
    fd: OwnedFd,
    /// Builds the report (given from above: it walks the QPs).
    report: fn() -> String,
}

static SERVER: ForkFresh<Mutex<Option<Arc<Server>>>> = ForkFresh::new(|| Mutex::new(None));

/// The socket's abstract name for process `pid` (without the leading NUL).
pub fn socket_name(pid: u32) -> String {
    format!("rsw-stat.{pid}")
}

/// Starts answering `rsw-stat`, once per process (again after a fork, for
/// the child's own pid). Failing to (no Unix sockets in a sandbox) only
/// means the counters cannot be read from outside.
pub fn serve(report: fn() -> String) {
    let mut s = SERVER.get().lock();
    if s.is_some() {
        return;
    }
    let Ok(fd) = listen(&socket_name(std::process::id())) else {
        return;
    };
    let Ok(eng) = engine() else { return };
    let srv = Arc::new(Server { fd, report });
    eng.register_qp(SERIAL, &srv);
    if eng
        .add(
            srv.fd.as_raw_fd(),
            token(SERIAL, Kind::Listener),
            libc::EPOLLIN as u32,
        )
        .is_err()
    {
        eng.unregister_qp(SERIAL);
        return;
    }
    *s = Some(srv);
}

fn abstract_addr(name: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace, gone with the process.
    for (d, s) in sa.sun_path[1..].iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    (sa, len as libc::socklen_t)
}

fn listen(name: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (sa, len) = abstract_addr(name);
    // SAFETY: sa is a valid sockaddr_un of length len.
    if unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const _ as *const libc::sockaddr,
            len,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: our bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 8) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

impl Target for Server {
    fn on_event(&self, _kind: Kind, _events: u32) {
        loop {
            // SAFETY: accept on our listening socket; the peer address is
            // not wanted.
            let c = unsafe {
                libc::accept4(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                return;
            }
            // SAFETY: a fresh descriptor we own.
            let c = unsafe { OwnedFd::from_raw_fd(c) };
            // Only this user's processes may read our counters.
            if !same_user(&c) {
                continue;
            }
            // A reader that stops reading holds the progress thread for
            // at most this long.
            let tv = libc::timeval {
                tv_sec: 1,
                tv_usec: 0,
            };
            // SAFETY: setting a plain option on our socket.
            unsafe {
                libc::setsockopt(
                    c.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_SNDTIMEO,
                    &tv as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            let text = (self.report)();
            let mut b = text.as_bytes();
            while !b.is_empty() {
                // SAFETY: b is a live byte slice.
                let n = unsafe {
                    libc::send(
                        c.as_raw_fd(),
                        b.as_ptr().cast(),
                        b.len(),
                        libc::MSG_NOSIGNAL,
                    )
                };
                if n <= 0 {
                    break;
                }
                b = &b[n as usize..];
            }
        }
    }

    fn on_kick(&self) {}

    fn on_timer(&self, _now: u64) {}
}

fn same_user(c: &OwnedFd) -> bool {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are ours and sized for SO_PEERCRED.
    let r = unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    // SAFETY: plain getter.
    r == 0 && (cred.uid == unsafe { libc::geteuid() } || cred.uid == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_sums_devices() {
        let c = Counters::default();
        Counters::bump(&c.sent_pkts);
        Counters::add(&c.sent_bytes, 100);
        let s = c.snapshot();
        let qps = [
            QpReport {
                device: "rsw_x".into(),
                qpn: 0x10,
                kind: "RC",
                state: "RTS",
                counters: s,
            },
            QpReport {
                device: "rsw_x".into(),
                qpn: 0x11,
                kind: "RC",
                state: "ERR",
                counters: s,
            },
        ];
        let ports = [
            ("rsw_x".to_string(), vec![("roce_rx_pkts", 9)]),
            ("rsw_p".to_string(), vec![("roce_rx_pkts", 4)]),
        ];
        let out = render(7, &qps, &ports);
        let dev: Vec<&str> = out
            .lines()
            .skip_while(|l| *l != "device rsw_x")
            .take(3)
            .collect();
        assert_eq!(dev, ["device rsw_x", "  sent_pkts 2", "  sent_bytes 200"]);
        // A port's counters close its device's list; a device with a port
        // and no QP is listed too.
        let x = out.split("device rsw_x\n").nth(1).unwrap();
        let x: Vec<&str> = x.lines().take_while(|l| l.starts_with("  ")).collect();
        assert_eq!(x.last(), Some(&"  roce_rx_pkts 9"));
        assert!(out.contains("device rsw_p\n  sent_pkts 0\n"));
        assert!(out.contains("  roce_rx_pkts 4\n"));
        assert!(out.starts_with("pid 7\n"));
        assert!(out.contains("qp 0x11 device rsw_x type RC state ERR\n  sent_pkts 1\n"));
    }
}
