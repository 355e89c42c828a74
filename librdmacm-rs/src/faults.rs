//! Injected connection-manager faults: the `cm:` rules of `RSW_FAULTS`
//! (and of the file `RSW_FAULTS_FILE`), whose other rules the rsw
//! provider carries out. Each makes one step of an active connection
//! fail with the event and status rdma-core's librdmacm delivers for the
//! real failure:
//!
//! ```text
//! cm:addr=timeout|unreachable      RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT / -EHOSTUNREACH
//! cm:route=timeout|unreachable     RDMA_CM_EVENT_ROUTE_ERROR, -ETIMEDOUT / -EHOSTUNREACH
//! cm:connect=reject                RDMA_CM_EVENT_REJECTED, status 28 (consumer reject)
//! cm:connect=noservice             RDMA_CM_EVENT_REJECTED, status 8 (nobody listens)
//! cm:connect=timeout               RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT
//! cm:connect=error                 RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET
//! options: :after=N (that many calls pass first, per process), :count=N
//! ```
//!
//! The event comes at once rather than after the CM's own timeout. A
//! wrong `cm:` rule makes those steps fail with EINVAL (and says why on
//! stderr), so a run meant to meet faults never quietly meets none.

use std::sync::LazyLock;

use parking_lot::Mutex;
use verbs_abi::*;

/// A step of an active connection a rule can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Addr,
    Route,
    Connect,
}

/// How a struck step ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This event with this status.
    Event(rdma_cm_event_type, i32),
    /// A REJECTED with this reason code.
    Rejected(u16),
}

#[derive(Clone, Debug, PartialEq)]
struct Rule {
    step: Step,
    outcome: Outcome,
    after: u64,
    count: u64,
    /// Calls seen and strikes made so far.
    seen: u64,
    struck: u64,
}

fn number(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("`{s}` is not a number"))
}

fn rule(r: &str) -> Result<Rule, String> {
    let parts: Vec<&str> = r.split(':').map(str::trim).collect();
    let what = parts.get(1).ok_or("cm: needs a step")?;
    let (step, how) = what
        .split_once('=')
        .ok_or_else(|| format!("`{what}`: expected addr=, route= or connect="))?;
    use Outcome::*;
    let (step, outcome) = match (step, how) {
        ("addr", "timeout") => (
            Step::Addr,
            Event(RDMA_CM_EVENT_ADDR_ERROR, -libc::ETIMEDOUT),
        ),
        ("addr", "unreachable") => (
            Step::Addr,
            Event(RDMA_CM_EVENT_ADDR_ERROR, -libc::EHOSTUNREACH),
        ),
        ("route", "timeout") => (
            Step::Route,
            Event(RDMA_CM_EVENT_ROUTE_ERROR, -libc::ETIMEDOUT),
        ),
        ("route", "unreachable") => (
            Step::Route,
            Event(RDMA_CM_EVENT_ROUTE_ERROR, -libc::EHOSTUNREACH),
        ),
        ("connect", "reject") => (Step::Connect, Rejected(28)),
        ("connect", "noservice") => (Step::Connect, Rejected(8)),
        ("connect", "timeout") => (
            Step::Connect,
            Event(RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT),
        ),
        ("connect", "error") => (
            Step::Connect,
            Event(RDMA_CM_EVENT_CONNECT_ERROR, -libc::ECONNRESET),
        ),
        _ => return Err(format!("unknown CM fault `{what}`")),
    };
    let mut r = Rule {
        step,
        outcome,
        after: 0,
        count: u64::MAX,
        seen: 0,
        struck: 0,
    };
    for o in &parts[2..] {
        match o.split_once('=') {
            Some(("after", v)) => r.after = number(v)?,
            Some(("count", v)) => r.count = number(v)?,
            _ => return Err(format!("unknown option `{o}` (after=, count=)")),
        }
    }
    Ok(r)
}

/// The `cm:` rules of a spec (the others are rsw's).
fn parse(spec: &str) -> Result<Vec<Rule>, String> {
    verbs_rt::fault_spec::rules(spec)
        .filter(|r| *r == "cm" || r.starts_with("cm:"))
        .map(|r| rule(r).map_err(|e| format!("in `{r}`: {e}")))
        .collect()
}

fn from_env() -> Result<Vec<Rule>, String> {
    parse(&verbs_rt::fault_spec::from_env()?)
}

static RULES: LazyLock<Mutex<Result<Vec<Rule>, String>>> = LazyLock::new(|| {
    let r = from_env();
    if let Err(e) = &r {
        log::error!("RSW_FAULTS: {e}");
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "librdmacm: RSW_FAULTS: {e}; address and route resolution and connect fail with EINVAL"
        );
    }
    Mutex::new(r)
});

/// Whether the step fails now, and how (`Err(EINVAL)`: the rules are
/// wrong). One predictable branch when no rule is configured.
pub fn strike(step: Step) -> Result<Option<Outcome>, i32> {
    let mut g = RULES.lock();
    let rules = g.as_mut().map_err(|_| libc::EINVAL)?;
    if rules.is_empty() {
        return Ok(None);
    }
    let o = take(rules, step);
    if let Some(o) = o {
        log::info!("injected CM fault at {step:?}: {o:?}");
    }
    Ok(o)
}

/// The first rule for `step` that strikes this call; every rule for the
/// step counts the call.
fn take(rules: &mut [Rule], step: Step) -> Option<Outcome> {
    let mut hit = None;
    for r in rules.iter_mut().filter(|r| r.step == step) {
        let k = r.seen;
        r.seen += 1;
        if hit.is_none() && k >= r.after && r.struck < r.count {
            r.struck += 1;
            hit = Some(r.outcome);
        }
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_cm_rules() {
        let r = parse("seed=1;qp=*:rnr\ncm:connect=reject:after=1:count=2 # c\ncm:addr=timeout")
            .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].step, Step::Connect);
        assert_eq!(r[0].outcome, Outcome::Rejected(28));
        assert_eq!((r[0].after, r[0].count), (1, 2));
        assert_eq!(
            r[1].outcome,
            Outcome::Event(RDMA_CM_EVENT_ADDR_ERROR, -libc::ETIMEDOUT)
        );
    }

    #[test]
    fn bad_rules_are_named() {
        for (s, needle) in [
            ("cm:connect=maybe", "unknown CM fault"),
            ("cm:addr", "expected addr="),
            ("cm:route=timeout:after=x", "not a number"),
            ("cm:connect=error:colour=red", "unknown option"),
            ("cm", "needs a step"),
        ] {
            let e = parse(s).unwrap_err();
            assert!(e.contains(needle) && e.contains(s), "{s}: {e}");
        }
    }

    #[test]
    fn after_and_count_per_step() {
        let mut rules =
            parse("cm:connect=timeout:after=1:count=1;cm:connect=error:after=1").unwrap();
        let timeout = Some(Outcome::Event(RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT));
        let error = Some(Outcome::Event(
            RDMA_CM_EVENT_CONNECT_ERROR,
            -libc::ECONNRESET,
        ));
        assert_eq!(take(&mut rules, Step::Connect), None);
        assert_eq!(take(&mut rules, Step::Addr), None);
        assert_eq!(take(&mut rules, Step::Connect), timeout);
        assert_eq!(take(&mut rules, Step::Connect), error);
        assert_eq!(take(&mut rules, Step::Route), None);
    }
}
