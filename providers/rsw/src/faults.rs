//! Fault injection: what `RSW_FAULTS` (or the file `RSW_FAULTS_FILE`)
//! asks for, parsed once, and the per-QP state that decides, request by
//! request, which fault strikes.
//!
//! The faults themselves are carried out by the engines, each through the
//! error path real hardware takes (a NAK the peer's responder sends, an
//! RNR wait, a retry timer running out, a CQ overflowing, a port event),
//! so this module only says *what* and *when*. Decisions are deterministic:
//! every QP draws from its own generator, seeded from the spec's seed and
//! the QP's ordinal in the process, so a run repeats exactly.
//!
//! Grammar (rules separated by `;` or new lines; `#` starts a comment):
//!
//! ```text
//! seed=N
//! qp=SEL:ACTION[:p=F][:after=N][:count=N]     SEL: * or a QP number
//! conn:kill[:OPTIONS]                          same as qp=*:kill
//! port[=DEVICE]:down@T,up@T,...                T: 500ms, 2s, 100us
//! cq:overrun[:after=N]
//! roce:PACKET[:op=CLASS][:p=F][:after=N][:count=N]
//! cm:...                                       librdmacm's (its `faults`)
//! ACTION: delay=T | rnr | rnr=N | fail=STATUS | kill
//! PACKET: drop | dup | late
//! ```
//!
//! A rule counts the QP's requests (`after`) and passes over those its
//! fault cannot happen to on hardware: RNR only strikes a request that
//! consumes a receive, a remote access error only one naming remote memory,
//! and on UC nothing a responder would have to answer.
//!
//! `roce:` rules are the wire's faults on a RoCEv2-mode device's packets
//! as its port sends them: lost, sent twice, or sent after the next one.
//! `op=` picks the packets a rule counts and strikes by class (`ack`,
//! `nak`, `send`, `send_middle`, `read_req`, `read_resp_last`, `ud`...,
//! see `roce_ud::classes`); `after` counts those packets.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::RwLock;
use verbs_abi::*;

/// What a request is, for the faults that only some requests can meet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Req {
    /// It consumes a receive at the responder (SEND, WRITE_WITH_IMM): the
    /// only kind a responder answers RNR.
    pub takes_recv: bool,
    /// It names remote memory by rkey (RDMA WRITE, READ, atomics): the
    /// only kind a responder refuses with a remote access error.
    pub uses_rkey: bool,
    /// An unreliable (UC) QP's: no responder answers it, so only delays,
    /// local errors and killed connections happen to it.
    pub unreliable: bool,
}

impl Req {
    fn meets(self, a: Action) -> bool {
        if self.unreliable {
            return match a {
                Action::Fail(st) => is_local(st),
                _ => !matches!(a, Action::Rnr(_)),
            };
        }
        match a {
            Action::Rnr(_) | Action::Fail(IBV_WC_RNR_RETRY_EXC_ERR) => self.takes_recv,
            Action::Fail(IBV_WC_REM_ACCESS_ERR) => self.uses_rkey,
            _ => true,
        }
    }
}

/// What happens to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delivered this many nanoseconds late.
    Delay(u64),
    /// The responder answers RNR this many times (255: every time) as if
    /// no receive were posted.
    Rnr(u8),
    /// The work request completes with this status.
    Fail(ibv_wc_status),
    /// Both connections of the QP die, as if the cable were cut.
    Kill,
}

#[derive(Clone, Debug, PartialEq)]
pub struct QpRule {
    /// None: every QP.
    pub qpn: Option<u32>,
    pub action: Action,
    /// Chance of striking an eligible request; None: always.
    pub p: Option<f64>,
    /// Requests of the QP that pass untouched first.
    pub after: u64,
    /// Strikes at most this many times per QP.
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PortRule {
    /// None: every device.
    pub device: Option<String>,
    /// (nanoseconds after the first device is opened, port up).
    pub events: Vec<(u64, bool)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub seed: u64,
    pub qp: Vec<QpRule>,
    pub port: Vec<PortRule>,
    /// Every CQ overruns at its completion number `after + 1`.
    pub cq_overrun_after: Option<u64>,
    pub roce: Vec<PacketRule>,
}

/// What a `roce:` rule does to a packet a RoCEv2 port sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketAction {
    /// Not sent: lost on the wire.
    Drop,
    /// Sent twice.
    Dup,
    /// Sent right after the next packet the port sends: reordered.
    Late,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PacketRule {
    pub action: PacketAction,
    /// The class of packets it counts and strikes; None: every packet.
    pub op: Option<String>,
    pub p: Option<f64>,
    /// Packets of its class that pass untouched first.
    pub after: u64,
    pub count: u64,
}

/// The statuses `fail=` accepts, as `ibv_wc_status_str` spells them
/// without the prefix, and where each is made.
const STATUSES: &[(&str, ibv_wc_status)] = &[
    ("REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR),
    ("REM_INV_REQ_ERR", IBV_WC_REM_INV_REQ_ERR),
    ("REM_OP_ERR", IBV_WC_REM_OP_ERR),
    ("RNR_RETRY_EXC_ERR", IBV_WC_RNR_RETRY_EXC_ERR),
    ("RETRY_EXC_ERR", IBV_WC_RETRY_EXC_ERR),
    ("LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR),
    ("LOC_LEN_ERR", IBV_WC_LOC_LEN_ERR),
    ("LOC_QP_OP_ERR", IBV_WC_LOC_QP_OP_ERR),
];

/// Statuses the requester makes itself (its own buffers or state);
/// the others come from the peer's responder or the retry timer.
pub fn is_local(status: ibv_wc_status) -> bool {
    matches!(
        status,
        IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_LEN_ERR | IBV_WC_LOC_QP_OP_ERR
    )
}

fn number(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("`{s}` is not a number"))
}

/// A duration with its unit: ns, us, ms or s.
fn duration_ns(s: &str) -> Result<u64, String> {
    let (digits, mult) = if let Some(d) = s.strip_suffix("ns") {
        (d, 1)
    } else if let Some(d) = s.strip_suffix("us") {
        (d, 1_000)
    } else if let Some(d) = s.strip_suffix("ms") {
        (d, 1_000_000)
    } else if let Some(d) = s.strip_suffix('s') {
        (d, 1_000_000_000)
    } else {
        return Err(format!("`{s}` needs a unit (ns, us, ms or s)"));
    };
    number(digits)?
        .checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too long"))
}

fn status(s: &str) -> Result<ibv_wc_status, String> {
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("IBV_WC_").unwrap_or(&upper);
    STATUSES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, v)| v)
        .ok_or_else(|| {
            let names: Vec<&str> = STATUSES.iter().map(|(n, _)| *n).collect();
            format!("unknown status `{s}` (one of {})", names.join(", "))
        })
}

fn action(s: &str) -> Result<Action, String> {
    let (k, v) = s.split_once('=').map_or((s, None), |(k, v)| (k, Some(v)));
    match (k, v) {
        ("delay", Some(v)) => Ok(Action::Delay(duration_ns(v)?)),
        ("rnr", None) => Ok(Action::Rnr(1)),
        ("rnr", Some(v)) => match number(v)? {
            n @ 1..=254 => Ok(Action::Rnr(n as u8)),
            _ => Err(format!("rnr={v}: between 1 and 254")),
        },
        ("fail", Some(v)) => Ok(Action::Fail(status(v)?)),
        ("kill", None) => Ok(Action::Kill),
        _ => Err(format!(
            "unknown action `{s}` (delay=T, rnr, rnr=N, fail=STATUS, kill)"
        )),
    }
}

fn qp_rule(qpn: Option<u32>, action_s: &str, opts: &[&str]) -> Result<QpRule, String> {
    let mut r = QpRule {
        qpn,
        action: action(action_s)?,
        p: None,
        after: 0,
        count: u64::MAX,
    };
    for o in opts {
        match o.split_once('=') {
            Some(("p", v)) => {
                let p: f64 = v.parse().map_err(|_| format!("p={v}: not a number"))?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("p={v}: between 0 and 1"));
                }
                r.p = Some(p);
            }
            Some(("after", v)) => r.after = number(v)?,
            Some(("count", v)) => r.count = number(v)?,
            _ => return Err(format!("unknown option `{o}` (p=, after=, count=)")),
        }
    }
    Ok(r)
}

fn packet_rule(action_s: &str, opts: &[&str]) -> Result<PacketRule, String> {
    let action = match action_s {
        "drop" => PacketAction::Drop,
        "dup" => PacketAction::Dup,
        "late" => PacketAction::Late,
        _ => {
            return Err(format!(
                "unknown packet fault `{action_s}` (drop, dup, late)"
            ))
        }
    };
    let mut r = PacketRule {
        action,
        op: None,
        p: None,
        after: 0,
        count: u64::MAX,
    };
    for o in opts {
        match o.split_once('=') {
            Some(("op", v)) if !v.is_empty() => r.op = Some(v.to_ascii_lowercase()),
            Some(("p", v)) => {
                let p: f64 = v.parse().map_err(|_| format!("p={v}: not a number"))?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("p={v}: between 0 and 1"));
                }
                r.p = Some(p);
            }
            Some(("after", v)) => r.after = number(v)?,
            Some(("count", v)) => r.count = number(v)?,
            _ => return Err(format!("unknown option `{o}` (op=, p=, after=, count=)")),
        }
    }
    Ok(r)
}

fn port_rule(device: Option<&str>, events: &str) -> Result<PortRule, String> {
    let mut out = Vec::new();
    for e in events.split(',') {
        let (what, at) = e
            .split_once('@')
            .ok_or_else(|| format!("`{e}`: expected down@TIME or up@TIME"))?;
        let up = match what {
            "down" => false,
            "up" => true,
            _ => return Err(format!("`{what}`: expected down or up")),
        };
        out.push((duration_ns(at)?, up));
    }
    out.sort_by_key(|&(t, _)| t);
    Ok(PortRule {
        device: device.map(str::to_owned),
        events: out,
    })
}

fn rule(c: &mut Config, r: &str) -> Result<(), String> {
    let parts: Vec<&str> = r.split(':').map(str::trim).collect();
    let head = parts[0];
    if let Some(v) = head.strip_prefix("seed=") {
        if parts.len() > 1 {
            return Err("seed takes no options".into());
        }
        c.seed = number(v)?;
    } else if let Some(sel) = head.strip_prefix("qp=") {
        let qpn = match sel {
            "*" => None,
            n => Some(
                u32::try_from(number(n)?)
                    .ok()
                    .filter(|&q| q < 1 << 24)
                    .ok_or_else(|| format!("qp={n}: not a QP number"))?,
            ),
        };
        let a = parts.get(1).ok_or("qp=SEL needs an action")?;
        c.qp.push(qp_rule(qpn, a, &parts[2..])?);
    } else if head == "conn" {
        if parts.get(1) != Some(&"kill") {
            return Err("conn: only conn:kill".into());
        }
        c.qp.push(qp_rule(None, "kill", &parts[2..])?);
    } else if head == "port" || head.starts_with("port=") {
        let dev = head.strip_prefix("port=");
        match parts.as_slice() {
            [_, ev] => c.port.push(port_rule(dev, ev)?),
            _ => return Err("port: expected port[=DEVICE]:down@T,up@T".into()),
        }
    } else if head == "cq" {
        if parts.get(1) != Some(&"overrun") {
            return Err("cq: only cq:overrun".into());
        }
        let mut after = 0;
        for o in &parts[2..] {
            match o.split_once('=') {
                Some(("after", v)) => after = number(v)?,
                _ => return Err(format!("cq:overrun: unknown option `{o}` (after=)")),
            }
        }
        c.cq_overrun_after = Some(after);
    } else if head == "roce" {
        let a = parts.get(1).ok_or("roce needs drop, dup or late")?;
        c.roce.push(packet_rule(a, &parts[2..])?);
    } else if head == "cm" {
        // librdmacm's (connection manager faults): it checks them.
    } else {
        return Err(format!(
            "unknown rule `{head}` (seed=, qp=, conn:, port:, cq:, roce:, cm:)"
        ));
    }
    Ok(())
}

/// Parses a whole spec; the error names the rule that is wrong.
pub fn parse(spec: &str) -> Result<Config, String> {
    let mut c = Config::default();
    for r in verbs_rt::fault_spec::rules(spec) {
        rule(&mut c, r).map_err(|e| format!("in `{r}`: {e}"))?;
    }
    Ok(c)
}

/// The spec from the environment: `RSW_FAULTS_FILE`'s rules, then
/// `RSW_FAULTS`'s.
fn from_env() -> Result<Option<Config>, String> {
    let spec = verbs_rt::fault_spec::from_env()?;
    if spec.trim().is_empty() {
        return Ok(None);
    }
    parse(&spec).map(Some)
}

type Loaded = Result<Option<Arc<Config>>, String>;

static CONFIG: LazyLock<RwLock<Loaded>> = LazyLock::new(|| {
    let c = from_env().map(|c| c.map(Arc::new));
    ACTIVE.store(matches!(c, Ok(Some(_))), Ordering::Release);
    RwLock::new(c)
});
/// Faults are configured (a cheap test for the rare paths that ask).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// QPs given fault state so far in this process (see [`QpFaults::for_qp`]).
static ORDINAL: AtomicU64 = AtomicU64::new(0);

/// The configuration, or why the spec is wrong (devices refuse to open
/// then: a run meant to meet faults must not quietly meet none).
pub fn config() -> Loaded {
    CONFIG.read().clone()
}

pub fn active() -> bool {
    LazyLock::force(&CONFIG);
    ACTIVE.load(Ordering::Acquire)
}

/// Replaces the configuration (None: no faults) for QPs, CQs and devices
/// set up from now on, as if the environment had said it: a bad spec is
/// kept as the error devices refuse to open with. For tests, which run
/// many scenarios in one process.
pub fn configure(spec: Option<&str>) -> Result<(), String> {
    let c = spec.map(parse).transpose().map(|c| c.map(Arc::new));
    let mut w = CONFIG.write();
    ACTIVE.store(matches!(c, Ok(Some(_))), Ordering::Release);
    *w = c.clone();
    c.map(|_| ())
}

// ---- decisions ------------------------------------------------------------

/// splitmix64: small, fast, and the same everywhere.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One QP's faults: its rules with how often each has seen and struck.
#[derive(Debug)]
pub struct QpFaults {
    rules: Vec<(QpRule, u64)>,
    rng: Rng,
    /// Requests transmitted so far.
    pub requests: u64,
    /// A delayed request waits until this monotonic time (0: none).
    pub hold_until: u64,
    /// The decision made for the request at the head of transmission,
    /// kept while it is held back.
    pub decided: Option<(u64, Option<Action>)>,
}

impl QpFaults {
    /// The state for QP `qpn` under the current configuration (None
    /// without one), drawing from the generator of the QP's ordinal: the
    /// how-manieth QP of the process to connect. Not its number, which is
    /// a port the kernel picks anew each run: a program that connects its
    /// QPs in the same order meets the same faults every run.
    pub fn for_qp(qpn: u32) -> Option<Box<QpFaults>> {
        if !active() {
            return None;
        }
        let c = config().ok().flatten()?;
        let ordinal = ORDINAL.fetch_add(1, Ordering::Relaxed);
        Some(QpFaults::new(&c, qpn, ordinal))
    }

    pub fn new(c: &Config, qpn: u32, ordinal: u64) -> Box<QpFaults> {
        let rules: Vec<_> =
            c.qp.iter()
                .filter(|r| r.qpn.is_none_or(|q| q == qpn))
                .map(|r| (r.clone(), 0))
                .collect();
        let mut mix = Rng::new(c.seed ^ ordinal.rotate_left(32));
        Box::new(QpFaults {
            rules,
            rng: Rng::new(mix.next_u64()),
            requests: 0,
            hold_until: 0,
            decided: None,
        })
    }

    /// What happens to the next request (call once per request). A rule
    /// passes over requests its fault cannot happen to (see [`Req`]).
    pub fn next(&mut self, req: Req) -> Option<Action> {
        let k = self.requests;
        self.requests += 1;
        for (r, struck) in self.rules.iter_mut() {
            if k < r.after || *struck >= r.count {
                continue;
            }
            if !req.meets(r.action) {
                continue;
            }
            if let Some(p) = r.p {
                if self.rng.unit() >= p {
                    continue;
                }
            }
            *struck += 1;
            return Some(r.action);
        }
        None
    }

    /// The decision for send-queue entry `seq`, made once however often
    /// its transmission is attempted.
    pub fn decide(&mut self, seq: u64, req: Req) -> Option<Action> {
        match self.decided {
            Some((s, a)) if s == seq => a,
            _ => {
                let a = self.next(req);
                self.decided = Some((seq, a));
                a
            }
        }
    }
}

/// A RoCEv2 port's `roce:` rules, each with the packets it counted and
/// struck; draws from the spec's seed and the port's ordinal.
#[derive(Debug)]
pub struct PacketFaults {
    rules: Vec<(PacketRule, u64, u64)>,
    rng: Rng,
}

/// Ports given packet faults so far in this process.
static PORT_ORDINAL: AtomicU64 = AtomicU64::new(0);

impl PacketFaults {
    /// The state for a port opened now; None without `roce:` rules.
    pub fn for_port() -> Option<PacketFaults> {
        if !active() {
            return None;
        }
        let c = config().ok().flatten()?;
        let ordinal = PORT_ORDINAL.fetch_add(1, Ordering::Relaxed);
        PacketFaults::new(&c, ordinal)
    }

    pub fn new(c: &Config, ordinal: u64) -> Option<PacketFaults> {
        if c.roce.is_empty() {
            return None;
        }
        let mut mix = Rng::new(!c.seed ^ ordinal.rotate_left(32));
        Some(PacketFaults {
            rules: c.roce.iter().map(|r| (r.clone(), 0, 0)).collect(),
            rng: Rng::new(mix.next_u64()),
        })
    }

    /// What happens to a packet of these classes (call once per packet):
    /// every rule of a class it is counts it, the first that strikes wins.
    pub fn next(&mut self, classes: &[&str]) -> Option<PacketAction> {
        let mut hit = None;
        for (r, seen, struck) in self.rules.iter_mut() {
            if r.op.as_deref().is_some_and(|op| !classes.contains(&op)) {
                continue;
            }
            *seen += 1;
            if hit.is_some() || *seen <= r.after || *struck >= r.count {
                continue;
            }
            if r.p.is_some_and(|p| self.rng.unit() >= p) {
                continue;
            }
            *struck += 1;
            hit = Some(r.action);
        }
        hit
    }
}

/// The completion number (1-based) at which a CQ created now overruns.
pub fn cq_overrun_at() -> u64 {
    if !active() {
        return 0;
    }
    config()
        .ok()
        .flatten()
        .and_then(|c| c.cq_overrun_after)
        .map_or(0, |a| a + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brief_example_parses() {
        let c = parse(
            "seed=42;qp=*:rnr:p=0.1;qp=0x12:fail=REM_ACCESS_ERR:after=5;conn:kill:after=100;\
             port:down@2s,up@3s;cq:overrun",
        )
        .unwrap();
        assert_eq!(c.seed, 42);
        assert_eq!(c.qp.len(), 3);
        assert_eq!(c.qp[0].qpn, None);
        assert_eq!(c.qp[0].action, Action::Rnr(1));
        assert_eq!(c.qp[0].p, Some(0.1));
        assert_eq!(c.qp[1].qpn, Some(0x12));
        assert_eq!(c.qp[1].action, Action::Fail(IBV_WC_REM_ACCESS_ERR));
        assert_eq!(c.qp[1].after, 5);
        assert_eq!(c.qp[2].action, Action::Kill);
        assert_eq!(c.qp[2].after, 100);
        assert_eq!(
            c.port,
            vec![PortRule {
                device: None,
                events: vec![(2_000_000_000, false), (3_000_000_000, true)]
            }]
        );
        assert_eq!(c.cq_overrun_after, Some(0));
    }

    #[test]
    fn file_form_comments_and_units() {
        let c = parse(
            "# a comment\nqp=7:delay=250us:count=2\n\nport=rsw_lo:up@1500ms,down@10ms # end\n\
             cq:overrun:after=3\nqp=*:fail=ibv_wc_retry_exc_err",
        )
        .unwrap();
        assert_eq!(c.qp[0].action, Action::Delay(250_000));
        assert_eq!(c.qp[0].count, 2);
        assert_eq!(c.port[0].device.as_deref(), Some("rsw_lo"));
        assert_eq!(
            c.port[0].events,
            vec![(10_000_000, false), (1_500_000_000, true)]
        );
        assert_eq!(c.cq_overrun_after, Some(3));
        assert_eq!(c.qp[1].action, Action::Fail(IBV_WC_RETRY_EXC_ERR));
        assert_eq!(parse("  ;; \n").unwrap(), Config::default());
        // librdmacm's rules are left to it.
        assert_eq!(parse("cm:connect=reject").unwrap(), Config::default());
    }

    #[test]
    fn bad_specs_name_the_rule() {
        for (spec, needle) in [
            ("qp=*:explode", "unknown action"),
            ("qp=*:fail=WR_FLUSH_ERR", "unknown status"),
            ("qp=*:rnr:p=1.5", "between 0 and 1"),
            ("qp=*:delay=5", "needs a unit"),
            ("qp=0x1000000:kill", "not a QP number"),
            ("qp=*", "needs an action"),
            ("port:sideways@1s", "expected down or up"),
            ("port:down", "expected down@TIME"),
            ("cq:underrun", "only cq:overrun"),
            ("seed=abc", "not a number"),
            ("frobnicate", "unknown rule"),
            ("qp=*:kill:color=red", "unknown option"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(needle), "{spec}: {e}");
            assert!(e.contains('`'), "{spec}: {e}");
        }
    }

    #[test]
    fn after_and_count() {
        let c = parse("qp=5:fail=REM_OP_ERR:after=2:count=2").unwrap();
        let mut f = QpFaults::new(&c, 5, 0);
        let got: Vec<_> = (0..6).map(|_| f.next(Req::default())).collect();
        let fail = Some(Action::Fail(IBV_WC_REM_OP_ERR));
        assert_eq!(got, vec![None, None, fail, fail, None, None]);
        // Another QP is untouched.
        let mut g = QpFaults::new(&c, 6, 0);
        assert!((0..6).all(|_| g.next(Req::default()).is_none()));
    }

    #[test]
    fn deterministic_per_seed_and_ordinal() {
        let c = parse("seed=42;qp=*:rnr:p=0.3").unwrap();
        let run = |c: &Config, qpn, ordinal| {
            let mut f = QpFaults::new(c, qpn, ordinal);
            let r = Req {
                takes_recv: true,
                uses_rkey: true,
                unreliable: false,
            };
            (0..1000).map(|_| f.next(r).is_some()).collect::<Vec<_>>()
        };
        let a = run(&c, 100, 0);
        // The QP number (a port, new each run) does not change the draws;
        // the ordinal and the seed do.
        assert_eq!(a, run(&c, 4321, 0));
        assert_ne!(a, run(&c, 100, 1));
        let hits = a.iter().filter(|&&x| x).count();
        assert!((230..370).contains(&hits), "{hits} of 1000 at p=0.3");
        let c2 = parse("seed=43;qp=*:rnr:p=0.3").unwrap();
        assert_ne!(a, run(&c2, 100, 0));
    }

    #[test]
    fn a_decision_is_made_once_per_request() {
        let c = parse("qp=*:delay=1ms:count=1").unwrap();
        let mut f = QpFaults::new(&c, 1, 0);
        assert_eq!(f.decide(0, Req::default()), Some(Action::Delay(1_000_000)));
        assert_eq!(f.decide(0, Req::default()), Some(Action::Delay(1_000_000)));
        assert_eq!(f.decide(1, Req::default()), None);
        assert_eq!(f.requests, 2);
    }

    #[test]
    fn faults_strike_only_requests_they_can_happen_to() {
        let c = parse("qp=*:rnr:count=1;qp=*:fail=REM_ACCESS_ERR:count=1").unwrap();
        let mut f = QpFaults::new(&c, 1, 0);
        let send = Req {
            takes_recv: true,
            ..Req::default()
        };
        let write = Req {
            takes_recv: false,
            uses_rkey: true,
            unreliable: false,
        };
        let uc_send = Req {
            takes_recv: true,
            uses_rkey: false,
            unreliable: true,
        };
        assert_eq!(f.next(uc_send), None);
        assert_eq!(f.next(Req::default()), None);
        assert_eq!(f.next(write), Some(Action::Fail(IBV_WC_REM_ACCESS_ERR)));
        assert_eq!(f.next(write), None);
        assert_eq!(f.next(send), Some(Action::Rnr(1)));
        assert_eq!(f.next(send), None);
    }

    #[test]
    fn packet_rules_count_their_class() {
        let c = parse("roce:drop:op=ack:after=1:count=2;roce:dup:op=READ_REQ").unwrap();
        assert_eq!(c.roce[0].action, PacketAction::Drop);
        assert_eq!(c.roce[1].op.as_deref(), Some("read_req"));
        let mut f = PacketFaults::new(&c, 0).unwrap();
        let ack = ["ack"];
        let send = ["send", "send_only"];
        let got: Vec<_> = [&ack[..], &send, &ack, &ack, &send, &ack]
            .iter()
            .map(|k| f.next(k))
            .collect();
        let d = Some(PacketAction::Drop);
        assert_eq!(got, [None, None, d, d, None, None]);
        assert_eq!(f.next(&["read_req"]), Some(PacketAction::Dup));
        assert!(PacketFaults::new(&parse("qp=*:kill").unwrap(), 0).is_none());
        for (spec, needle) in [
            ("roce:explode", "unknown packet fault"),
            ("roce", "needs drop"),
            ("roce:drop:color=red", "unknown option"),
            ("roce:late:p=2", "between 0 and 1"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn packet_loss_draws_are_seeded() {
        let c = parse("seed=7;roce:drop:p=0.05").unwrap();
        let run = |ordinal| {
            let mut f = PacketFaults::new(&c, ordinal).unwrap();
            (0..2000)
                .map(|_| f.next(&["ud"]).is_some())
                .collect::<Vec<_>>()
        };
        let a = run(0);
        assert_eq!(a, run(0));
        assert_ne!(a, run(1));
        let hits = a.iter().filter(|&&x| x).count();
        assert!((60..140).contains(&hits), "{hits} of 2000 at p=0.05");
    }

    #[test]
    fn splitmix_reference_values() {
        // splitmix64 seeded with 0 (the published sequence).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }
}
