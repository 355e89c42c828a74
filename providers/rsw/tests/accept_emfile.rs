//! A peer that opens connections until the process runs out of descriptors:
//! `accept()` fails with EMFILE while the connection stays queued, so the
//! listener stays readable. The progress thread must not spin on it, must
//! keep serving connected QPs, and must accept again once descriptors are
//! available. The victim runs in a forked child with a lowered
//! RLIMIT_NOFILE; the parent plays the peer. Alone in its binary: no other
//! test thread may run during fork.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;

use std::os::unix::fs::FileExt;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use common::*;
use rsw::wire::{Header, Hello, Op, HDR_LEN};
use verbs_abi::*;

const FAKE: u32 = 4402;
const IDLE_CONNS: usize = 12;

/// CPU ticks of the progress thread through a stat file opened in advance:
/// once descriptors run out, opening /proc files is no longer possible.
struct Ticks(File);

impl Ticks {
    fn open() -> Ticks {
        Ticks(File::open(progress_task().join("stat")).unwrap())
    }

    fn get(&self) -> u64 {
        let mut b = [0u8; 1024];
        let n = self.0.read_at(&mut b, 0).unwrap();
        let s = std::str::from_utf8(&b[..n]).unwrap();
        let rest = &s[s.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// The victim's side: returns normally only if every check passed.
fn child(mut to_parent: File, mut from_parent: File) {
    let p = Pair::new();
    healthy_pair(&p, 1);
    let pd = p.c.alloc_pd();
    let cq = p.c.cq(16, null_mut());
    let v = p.c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(v, o.access);
    to_rtr(v, FAKE, &o);
    let recv = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(v, 9, &mut [recv.sge(0, 64)]), 0);
    let ticks = Ticks::open();

    // Room for only a few more descriptors.
    let mut orig = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(
        // SAFETY: orig is a valid rlimit.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut orig) },
        0
    );
    set_nofile(open_fds() + 3);
    to_parent.write_all(&qpn(v).to_ne_bytes()).unwrap();
    // The parent has queued more connections than we can accept.
    let mut b = [0u8; 1];
    from_parent.read_exact(&mut b).unwrap();

    // A measurement window, not synchronisation: a thread spinning on the
    // readable listener would use nearly all of it (ticks are 10 ms).
    let before = ticks.get();
    std::thread::sleep(Duration::from_millis(400));
    let used = ticks.get() - before;
    assert!(used <= 6, "progress thread used {used} ticks in 400 ms");
    healthy_pair(&p, 2);

    // Descriptors come back: the listener takes the queued connections and
    // then the real peer's.
    set_nofile(orig.rlim_cur);
    to_parent.write_all(&[1]).unwrap();
    let w = wait_wc(cq);
    assert_eq!((w.status, w.wr_id, w.byte_len), (IBV_WC_SUCCESS, 9, 6));
    assert_eq!(&recv.snapshot()[..6], b"resume");
    healthy_pair(&p, 3);
}

#[test]
fn accept_out_of_descriptors_does_not_spin() {
    let (pid, mut from_child, mut to_child) = fork_child(30, child);
    let mut q = [0u8; 4];
    from_child.read_exact(&mut q).expect("child started");
    let port = u32::from_ne_bytes(q);
    // Idle connections: queued by the kernel, more than the child can take.
    let idle: Vec<TcpStream> = (0..IDLE_CONNS)
        .map(|_| TcpStream::connect(("127.0.0.1", port as u16)).unwrap())
        .collect();
    to_child.write_all(&[1]).unwrap();
    let mut b = [0u8; 1];
    from_child.read_exact(&mut b).expect("child checked");
    // The expected peer, behind the idle ones.
    let mut s = TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
    let mut h = [0u8; HDR_LEN];
    // The peer the victim was told of at RTR: its QPN and GID, from its
    // address (connections are bound to all three).
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[127, 0, 0, 1]);
    Hello {
        src_gid: gid,
        src_qpn: FAKE,
        dst_qpn: port,
        psn: 0,
        features: 0,
    }
    .encode(&mut h);
    s.write_all(&h).unwrap();
    let mut r = Header::new(Op::Send, 0);
    r.length = 6;
    r.encode(&mut h);
    s.write_all(&h).unwrap();
    s.write_all(b"resume").unwrap();
    let deadline = Instant::now() + WAIT * 2;
    expect_child_ok(pid, deadline - Instant::now());
    drop(idle);
}
