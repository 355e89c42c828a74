//! Test harness: drives the provider the way libibverbs and a C program do,
//! through the `ProviderOps` table and the function pointers the provider
//! stores in the public structs. Every wait is bounded.
#![allow(dead_code)]

use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::provider::{ProviderDevice, DEVICE_NAME_MAX};
use verbs_abi::*;

pub const WAIT: Duration = Duration::from_secs(10);

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An open context on rsw_lo.
pub struct Ctx {
    pub ctx: *mut ibv_context,
    _dev: Box<ibv_device>,
}

impl Ctx {
    pub fn open() -> Ctx {
        let mut devs = vec![
            ProviderDevice {
                name: [0; DEVICE_NAME_MAX],
                node_type: 0,
                transport_type: 0,
                node_guid: 0,
                handle: null_mut(),
            };
            32
        ];
        // SAFETY: room for 32 entries.
        let n = unsafe { OPS.discover.unwrap()(devs.as_mut_ptr(), devs.len()) };
        assert!(n > 0, "no devices");
        let lo = devs[..n as usize]
            .iter()
            .find(|d| {
                // SAFETY: names are NUL-terminated.
                let s = unsafe { std::ffi::CStr::from_ptr(d.name.as_ptr()) };
                s.to_bytes() == b"rsw_lo"
            })
            .expect("rsw_lo device");
        let mut dev = Box::new(ibv_device::zeroed());
        dev.node_type = lo.node_type;
        dev.transport_type = lo.transport_type;
        dev.name = lo.name;
        // SAFETY: handle from discover; dev outlives the context.
        let ctx = unsafe { OPS.open_device.unwrap()(&mut *dev, lo.handle) };
        assert!(!ctx.is_null(), "open_device: errno {}", errno());
        Ctx { ctx, _dev: dev }
    }

    pub fn ops(&self) -> &ibv_context_ops {
        // SAFETY: ctx is open.
        unsafe { &(*self.ctx).ops }
    }

    pub fn vctx(&self) -> &verbs_context {
        let off = std::mem::offset_of!(verbs_context, context);
        // SAFETY: the context is the tail of a verbs_context (abi_compat
        // says so; checked by a test).
        unsafe { &*((self.ctx as *mut u8).sub(off) as *const verbs_context) }
    }

    pub fn alloc_pd(&self) -> *mut ibv_pd {
        // SAFETY: ctx is open.
        let pd = unsafe { OPS.alloc_pd.unwrap()(self.ctx) };
        assert!(!pd.is_null());
        pd
    }

    pub fn cq(&self, cqe: u32, channel: *mut ibv_comp_channel) -> *mut ibv_cq {
        self.cq_ex(cqe, channel, IBV_WC_STANDARD_FLAGS as u64) as *mut ibv_cq
    }

    pub fn cq_ex(&self, cqe: u32, channel: *mut ibv_comp_channel, wc_flags: u64) -> *mut ibv_cq_ex {
        let mut a = ibv_cq_init_attr_ex {
            cqe,
            cq_context: 0x1234 as *mut c_void,
            channel,
            comp_vector: 0,
            wc_flags,
            comp_mask: 0,
            flags: 0,
            parent_domain: null_mut(),
        };
        // SAFETY: ctx is open; a is valid.
        let cq = unsafe { self.vctx().create_cq_ex.unwrap()(self.ctx, &mut a) };
        assert!(!cq.is_null(), "create_cq_ex: errno {}", errno());
        cq
    }

    pub fn channel(&self) -> *mut ibv_comp_channel {
        // SAFETY: ctx is open.
        let ch = unsafe { OPS.create_comp_channel.unwrap()(self.ctx) };
        assert!(!ch.is_null());
        ch
    }

    pub fn qp_attr(
        &self,
        pd: *mut ibv_pd,
        scq: *mut ibv_cq,
        rcq: *mut ibv_cq,
    ) -> ibv_qp_init_attr_ex {
        let mut a = ibv_qp_init_attr_ex::zeroed();
        a.send_cq = scq;
        a.recv_cq = rcq;
        a.cap = ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        };
        a.qp_type = IBV_QPT_RC;
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a.pd = pd;
        a
    }

    pub fn create_qp(&self, a: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
        // SAFETY: ctx is open; a is valid.
        let qp = unsafe { self.vctx().create_qp_ex.unwrap()(self.ctx, a) };
        assert!(!qp.is_null(), "create_qp_ex: errno {}", errno());
        qp
    }

    pub fn qp(&self, pd: *mut ibv_pd, scq: *mut ibv_cq, rcq: *mut ibv_cq) -> *mut ibv_qp {
        let mut a = self.qp_attr(pd, scq, rcq);
        self.create_qp(&mut a)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // Objects are torn down by each test; leaking on a failed assert is
        // fine in a test process.
    }
}

/// A registered, heap-allocated buffer.
pub struct Buf {
    pub mem: Vec<u64>,
    pub len: usize,
    pub mr: *mut ibv_mr,
}

impl Buf {
    pub fn new(pd: *mut ibv_pd, len: usize, access: u32) -> Buf {
        let mut mem = vec![0u64; len.div_ceil(8).max(1)];
        let p = mem.as_mut_ptr() as *mut c_void;
        // SAFETY: pd is ours; the memory lives as long as the Buf.
        let mr = unsafe { OPS.reg_mr.unwrap()(pd, p, len, p as u64, access) };
        assert!(!mr.is_null(), "reg_mr: errno {}", errno());
        Buf { mem, len, mr }
    }

    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: mem has at least len bytes.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr() as *const u8, self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: mem has at least len bytes.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_mut_ptr() as *mut u8, self.len) }
    }

    /// Reads through a volatile pointer: the provider's thread writes the
    /// buffer behind the compiler's back.
    pub fn snapshot(&self) -> Vec<u8> {
        let p = self.mem.as_ptr() as *const u8;
        // SAFETY: reads within the buffer.
        (0..self.len)
            .map(|i| unsafe { std::ptr::read_volatile(p.add(i)) })
            .collect()
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is live.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: mr is live.
        unsafe { (*self.mr).rkey }
    }

    pub fn sge(&self, off: usize, len: u32) -> ibv_sge {
        ibv_sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    pub fn dereg(&mut self) {
        if !self.mr.is_null() {
            // SAFETY: mr is live.
            assert_eq!(unsafe { OPS.dereg_mr.unwrap()(self.mr) }, 0);
            self.mr = null_mut();
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        self.dereg();
    }
}

pub fn qpn(qp: *mut ibv_qp) -> u32 {
    // SAFETY: qp is live.
    unsafe { (*qp).qp_num }
}

pub fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> c_int {
    // SAFETY: qp is live; a is valid.
    unsafe { OPS.modify_qp.unwrap()(qp, a, mask as c_int) }
}

pub fn query(qp: *mut ibv_qp) -> (ibv_qp_attr, ibv_qp_init_attr) {
    let mut a = ibv_qp_attr::zeroed();
    let mut i = ibv_qp_init_attr::zeroed();
    // SAFETY: qp is live; out-pointers are valid.
    assert_eq!(unsafe { OPS.query_qp.unwrap()(qp, &mut a, 0, &mut i) }, 0);
    (a, i)
}

/// Connection parameters for one side.
#[derive(Clone, Copy)]
pub struct ConnOpts {
    pub access: u32,
    pub min_rnr_timer: u8,
    pub rnr_retry: u8,
    pub global: bool,
    pub timeout: u8,
    pub retry_cnt: u8,
}

impl Default for ConnOpts {
    fn default() -> Self {
        ConnOpts {
            access: IBV_ACCESS_LOCAL_WRITE
                | IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ
                | IBV_ACCESS_REMOTE_ATOMIC,
            min_rnr_timer: 12,
            rnr_retry: 7,
            global: true,
            timeout: 14,
            retry_cnt: 7,
        }
    }
}

pub fn to_init(qp: *mut ibv_qp, access: u32) {
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = access;
    assert_eq!(
        modify(
            qp,
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        ),
        0
    );
}

/// Moves a QP back to RESET.
#[allow(dead_code)]
pub fn reset(qp: *mut ibv_qp) {
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_RESET;
    assert_eq!(modify(qp, &mut a, IBV_QP_STATE), 0);
}

/// The attributes and mask of INIT -> RTR towards QP `dest` on
/// this host (over `::ffff:127.0.0.1` when `o.global`).
pub fn rtr_attr(dest: u32, o: &ConnOpts) -> (ibv_qp_attr, u32) {
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = o.min_rnr_timer;
    a.ah_attr.port_num = 1;
    if o.global {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = ibv_gid::from_raw(lo_gid());
        a.ah_attr.grh.sgid_index = 0;
        a.ah_attr.grh.hop_limit = 1;
    }
    let mask = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;
    (a, mask)
}

pub fn to_rtr(qp: *mut ibv_qp, dest: u32, o: &ConnOpts) {
    let (mut a, mask) = rtr_attr(dest, o);
    assert_eq!(modify(qp, &mut a, mask), 0);
}

pub fn to_rts(qp: *mut ibv_qp, o: &ConnOpts) {
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = 1;
    let mask = IBV_QP_STATE
        | IBV_QP_SQ_PSN
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_MAX_QP_RD_ATOMIC;
    assert_eq!(modify(qp, &mut a, mask), 0);
}

/// Brings `a` and `b` to RTS connected to each other.
pub fn connect(a: *mut ibv_qp, oa: &ConnOpts, b: *mut ibv_qp, ob: &ConnOpts) {
    to_init(a, oa.access);
    to_init(b, ob.access);
    to_rtr(a, qpn(b), oa);
    to_rtr(b, qpn(a), ob);
    to_rts(a, oa);
    to_rts(b, ob);
}

/// A connected pair of QPs on one context, each with its own CQ.
pub struct Pair {
    pub c: Ctx,
    pub pd: *mut ibv_pd,
    pub cq_a: *mut ibv_cq,
    pub cq_b: *mut ibv_cq,
    pub a: *mut ibv_qp,
    pub b: *mut ibv_qp,
}

impl Pair {
    pub fn new() -> Pair {
        Pair::with(ConnOpts::default(), ConnOpts::default(), |_| {})
    }

    pub fn with(oa: ConnOpts, ob: ConnOpts, tweak: impl Fn(&mut ibv_qp_init_attr_ex)) -> Pair {
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let cq_a = c.cq(64, null_mut());
        let cq_b = c.cq(64, null_mut());
        let mut aa = c.qp_attr(pd, cq_a, cq_a);
        tweak(&mut aa);
        let a = c.create_qp(&mut aa);
        let mut ab = c.qp_attr(pd, cq_b, cq_b);
        tweak(&mut ab);
        let b = c.create_qp(&mut ab);
        connect(a, &oa, b, &ob);
        Pair {
            c,
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }

    pub fn buf(&self, len: usize) -> Buf {
        Buf::new(
            self.pd,
            len,
            IBV_ACCESS_LOCAL_WRITE
                | IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ
                | IBV_ACCESS_REMOTE_ATOMIC,
        )
    }
}

pub fn send_wr(wr_id: u64, opcode: ibv_wr_opcode, sges: &mut [ibv_sge], flags: u32) -> ibv_send_wr {
    let mut wr = ibv_send_wr::zeroed();
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = sges.as_mut_ptr();
    wr.num_sge = sges.len() as c_int;
    wr.send_flags = flags;
    wr
}

/// A signaled atomic WR (compare-and-swap or fetch-and-add).
pub fn atomic_wr(
    wr_id: u64,
    opcode: ibv_wr_opcode,
    sge: &mut [ibv_sge],
    raddr: u64,
    rkey: u32,
    cmp_add: u64,
    swap: u64,
) -> ibv_send_wr {
    let mut wr = send_wr(wr_id, opcode, sge, IBV_SEND_SIGNALED);
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: raddr,
        compare_add: cmp_add,
        swap,
        rkey,
    };
    wr
}

pub fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> c_int {
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: qp is live; wr is a valid one-element list unless the test
    // linked more.
    unsafe { (*(*qp).context).ops.post_send.unwrap()(qp, wr, &mut bad) }
}

pub fn post_recv(qp: *mut ibv_qp, wr_id: u64, sges: &mut [ibv_sge]) -> c_int {
    let mut wr = ibv_recv_wr {
        wr_id,
        next: null_mut(),
        sg_list: sges.as_mut_ptr(),
        num_sge: sges.len() as c_int,
    };
    let mut bad: *mut ibv_recv_wr = null_mut();
    // SAFETY: qp is live; wr is valid.
    unsafe { (*(*qp).context).ops.post_recv.unwrap()(qp, &mut wr, &mut bad) }
}

pub fn poll(cq: *mut ibv_cq, out: &mut [ibv_wc]) -> c_int {
    // SAFETY: cq is live; out has room for out.len() entries.
    unsafe { (*(*cq).context).ops.poll_cq.unwrap()(cq, out.len() as c_int, out.as_mut_ptr()) }
}

/// Waits (bounded) for exactly one completion.
pub fn wait_wc(cq: *mut ibv_cq) -> ibv_wc {
    let deadline = Instant::now() + WAIT;
    let mut wc = [ibv_wc::zeroed()];
    loop {
        let n = poll(cq, &mut wc);
        assert!(n >= 0, "poll_cq failed");
        if n == 1 {
            return wc[0];
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for a completion"
        );
        std::thread::yield_now();
    }
}

/// Waits for `n` completions.
pub fn wait_wcs(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    (0..n).map(|_| wait_wc(cq)).collect()
}

/// Asserts no completion shows up within `d` (used only to check absence;
/// never for synchronisation).
pub fn assert_no_wc(cq: *mut ibv_cq, d: Duration) {
    let deadline = Instant::now() + d;
    let mut wc = [ibv_wc::zeroed()];
    while Instant::now() < deadline {
        assert_eq!(
            poll(cq, &mut wc),
            0,
            "unexpected completion: status {}",
            wc[0].status
        );
        std::thread::yield_now();
    }
}

/// Polls `cond` until it holds or the deadline passes.
pub fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::yield_now();
    }
    cond()
}

pub fn qp_state(qp: *mut ibv_qp) -> ibv_qp_state {
    query(qp).0.qp_state
}

pub fn destroy_qp(qp: *mut ibv_qp) {
    // SAFETY: qp is live.
    assert_eq!(unsafe { OPS.destroy_qp.unwrap()(qp) }, 0);
}

pub fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: cq is live.
    unsafe { OPS.destroy_cq.unwrap()(cq) }
}

/// Reads one async event without blocking forever: waits for `async_fd`
/// to become readable first.
pub fn get_async(ctx: *mut ibv_context) -> Option<ibv_async_event> {
    // SAFETY: ctx is open.
    let fd = unsafe { (*ctx).async_fd };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, WAIT.as_millis() as c_int) };
    if r != 1 {
        return None;
    }
    let mut ev = ibv_async_event::zeroed();
    // SAFETY: ctx is open; ev is valid.
    if unsafe { OPS.get_async_event.unwrap()(ctx, &mut ev) } != 0 {
        return None;
    }
    Some(ev)
}

pub fn ack_async(ev: &mut ibv_async_event) {
    // SAFETY: ev came from get_async_event.
    unsafe { OPS.ack_async_event.unwrap()(ev) };
}

/// The /proc directory of the progress thread (`rsw-progress`). The
/// thread names itself once it runs, so just after the engine starts it
/// may still carry its parent's name: wait (bounded) for it.
pub fn progress_task() -> std::path::PathBuf {
    let find = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .map(|t| t.unwrap().path())
            .find(|dir| {
                std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == "rsw-progress")
            })
    };
    let mut found = None;
    assert!(
        wait_until(|| {
            found = find();
            found.is_some()
        }),
        "no rsw-progress thread"
    );
    found.unwrap()
}

/// CPU time (clock ticks) used so far by the thread named `rsw-progress`.
pub fn progress_ticks() -> u64 {
    let stat = std::fs::read_to_string(progress_task().join("stat")).unwrap();
    // Fields after the parenthesised name; utime and stime are the 14th
    // and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Reaps a forked child within `d`, killing it (by pid) if it overstays;
/// returns its wait status.
pub fn reap_child(pid: libc::pid_t, d: Duration) -> c_int {
    let deadline = Instant::now() + d;
    let mut status = 0;
    loop {
        // SAFETY: our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return status;
        }
        if Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("child did not finish");
        }
        std::thread::yield_now();
    }
}

/// A thread blocked in `get_cq_event` on `ch`; yields its return value and
/// the CQ it named.
pub fn cq_event_waiter(ch: *mut ibv_comp_channel) -> std::thread::JoinHandle<(c_int, usize)> {
    let chp = ch as usize;
    std::thread::spawn(move || {
        let mut ev_cq: *mut ibv_cq = null_mut();
        let mut ev_ctx: *mut c_void = null_mut();
        // SAFETY: the caller keeps the channel alive until it joins.
        let r = unsafe {
            OPS.get_cq_event.unwrap()(chp as *mut ibv_comp_channel, &mut ev_cq, &mut ev_ctx)
        };
        (r, ev_cq as usize)
    })
}

// ---- forged peers and forked victims ----------------------------------------

/// rsw_lo's first GID, `::ffff:127.0.0.1`.
pub fn lo_gid() -> [u8; 16] {
    rsw::testing::ipv4_mapped([127, 0, 0, 1])
}

/// A hello block from (`src_gid`, `src_qpn`) to `dst_qpn`, as a peer's
/// requester sends it first on its connection.
pub fn hello_from(src_gid: [u8; 16], src_qpn: u32, dst_qpn: u32) -> [u8; rsw::wire::HDR_LEN] {
    let mut b = [0u8; rsw::wire::HDR_LEN];
    rsw::wire::Hello {
        src_gid,
        src_qpn,
        dst_qpn,
        psn: 0,
        features: 0,
    }
    .encode(&mut b);
    b
}

/// A hand-written responder's end of the connection a QP opened to it:
/// after the hello (read raw, as it travels), it speaks the chunk framing
/// the hello declared (`rsw::transport::tcp`): each write one chunk, reads
/// stripped of framing.
pub struct FakeWire {
    pub s: std::net::TcpStream,
    framed: bool,
    /// Bytes left in the chunk being read; a pad follows its end.
    left: usize,
    pad: bool,
}

impl FakeWire {
    /// Reads the hello from `s`; returns the wire and the hello's bytes.
    pub fn accept(mut s: std::net::TcpStream) -> (FakeWire, [u8; rsw::wire::HDR_LEN]) {
        use std::io::Read;
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut hb = [0u8; rsw::wire::HDR_LEN];
        s.read_exact(&mut hb).unwrap();
        let h = rsw::wire::Hello::decode(&hb).expect("a hello");
        let framed = h.features & rsw::wire::FEATURE_FRAMED != 0;
        let w = FakeWire {
            s,
            framed,
            left: 0,
            pad: false,
        };
        (w, hb)
    }

    pub fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        use std::io::Read;
        if !self.framed {
            return self.s.read_exact(buf);
        }
        let mut at = 0;
        while at < buf.len() {
            if self.left == 0 {
                let mut b = [0u8; 5];
                let skip = self.pad as usize;
                self.s.read_exact(&mut b[..skip + 4])?;
                self.left = u32::from_le_bytes(b[skip..skip + 4].try_into().unwrap()) as usize;
                self.pad = true;
                continue;
            }
            let k = self.left.min(buf.len() - at);
            self.s.read_exact(&mut buf[at..at + k])?;
            self.left -= k;
            at += k;
        }
        Ok(())
    }

    pub fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        if !self.framed || b.is_empty() {
            return self.s.write_all(b);
        }
        let mut c = (b.len() as u32).to_le_bytes().to_vec();
        c.extend_from_slice(b);
        c.push(0);
        self.s.write_all(&c)
    }
}

/// A hello from the loopback GID.
pub fn hello(src_qpn: u32, dst_qpn: u32) -> [u8; rsw::wire::HDR_LEN] {
    hello_from(lo_gid(), src_qpn, dst_qpn)
}

/// A close-on-exec pipe (read end, write end), for talking to a forked
/// child.
pub fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are fresh and ours.
    unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(fds[0])),
            std::fs::File::from(OwnedFd::from_raw_fd(fds[1])),
        )
    }
}

/// Sets this process's soft RLIMIT_NOFILE.
pub fn set_nofile(soft: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r.rlim_cur = soft;
    // SAFETY: as above; lowering the soft limit needs no privilege.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
}

/// Forks a victim process that runs `child` with a pipe to the parent and
/// one from it, and returns its pid and the parent's ends (read, write).
/// The child reports a panic on stderr and exits 0 only if `child`
/// returned; an alarm bounds it. Only for test binaries with a single test:
/// no other test thread may run during the fork.
pub fn fork_child(
    alarm_s: u32,
    child: impl FnOnce(std::fs::File, std::fs::File),
) -> (libc::pid_t, std::fs::File, std::fs::File) {
    let (from_child, to_parent) = pipe();
    let (from_parent, to_child) = pipe();
    // SAFETY: the caller's binary runs only this test; the child ends with
    // _exit and never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: bounds the child's life if something blocks.
        unsafe { libc::alarm(alarm_s) };
        drop(from_child);
        drop(to_child);
        // The harness captures this thread's output; report straight to
        // the inherited stderr instead.
        std::panic::set_hook(Box::new(|info| {
            let msg = format!("child: {info}\n");
            // SAFETY: writes a valid buffer to descriptor 2.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }));
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            child(to_parent, from_parent)
        }))
        .is_ok();
        // SAFETY: leaves without running the harness in the child.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    (pid, from_child, to_child)
}

/// Waits (bounded by `d`) for a child of `fork_child` and asserts that all
/// its checks passed.
pub fn expect_child_ok(pid: libc::pid_t, d: Duration) {
    let status = reap_child(pid, d);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "child checks failed");
}

/// A connected pair still works: a SEND and an RDMA WRITE from `a` to `b`,
/// statuses, lengths and bytes checked.
pub fn healthy_pair(p: &Pair, round: u8) {
    let mut src = p.buf(64);
    let dst = p.buf(64);
    src.bytes_mut().fill(round);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 32)]), 0);
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.byte_len), (IBV_WC_SUCCESS, 32));
    let mut sg = [src.sge(32, 32)];
    let mut w = send_wr(3, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr() + 32,
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert!(dst.snapshot().iter().all(|&b| b == round));
}

/// The next response a fake peer reads on its connection, past the
/// same-host offer a responder on this host sends first (a peer may
/// ignore it).
#[allow(dead_code)]
pub fn read_response(s: &mut impl std::io::Read) -> rsw::wire::Header {
    loop {
        let mut b = [0u8; rsw::wire::HDR_LEN];
        s.read_exact(&mut b).expect("response");
        let h = rsw::wire::Header::decode(&b).expect("well-formed response");
        if h.op != rsw::wire::Op::Offer {
            return h;
        }
    }
}
