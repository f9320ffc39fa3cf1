//! The worker's router: in a cluster in shared mode, which server each slot talks to.
//!
//! Every server of a shared cluster accepts every request, and one whose poll hands out a task
//! prefers the executions it owns; the result then goes back on the same connection, to the
//! owner. The worker reads `/v1/health` of the address it was given, learns the live servers and
//! the addresses they advertise (`nodes[].addr`), and spreads its slots over them: slot `i`
//! talks to node `(i + offset) % n`, the offset random per worker so that workers with few slots
//! do not all start on the same node. A node whose address does not answer is left out for
//! [`UNREACHABLE`] (its slots use the configured address meanwhile); a node that leaves the live
//! list has its slots' polls ended so that they move at once, and the results on their way to it
//! sent to the configured address instead (the worker does that, told by the `on_left`
//! callback). Anything else (a single server, a standby cluster, a health answer without
//! addresses) keeps every slot on the configured address. The TypeScript SDK's
//! `worker/nodes.ts` and the Python SDK's `_worker/nodes.py` do the same; see docs/clusters.md,
//! "Workers connect to every server".

use crate::backoff::{Level, Logger};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a node whose address failed is left out before its slots try it again.
pub(crate) const UNREACHABLE: Duration = Duration::from_secs(10);

/// Told the addresses that left the live list.
pub(crate) type OnLeft = Box<dyn Fn(&BTreeSet<String>) + Send + Sync>;

/// The clock the router reads (a test's own in the unit tests).
pub(crate) type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Whether `addr` is an `http://` URL with a host (and a port that is a number, if any). The
/// SDK speaks plain HTTP only, so an advertised `https://` address is not one it could use: a
/// cluster that advertises only those keeps every slot on the configured address.
fn usable(addr: &str) -> bool {
    let Some(scheme_end) = addr.find("://") else {
        return false;
    };
    if !addr[..scheme_end].eq_ignore_ascii_case("http") {
        return false;
    }
    let rest = &addr[scheme_end + 3..];
    if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        match h.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return false,
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port_ok = match port {
        None => true,
        Some(p) => p.is_empty() || p.parse::<u16>().is_ok(),
    };
    !host.is_empty() && port_ok
}

/// The live nodes' advertised addresses of a health answer (`role` "shared", `live` true, an
/// `http://` URL), without a trailing `/`, once each, sorted.
pub(crate) fn live_addresses(health: &Value) -> Vec<String> {
    if health.get("role").and_then(Value::as_str) != Some("shared") {
        return Vec::new();
    }
    let Some(nodes) = health.get("nodes").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = BTreeSet::new();
    for n in nodes {
        if n.get("live") != Some(&Value::Bool(true)) {
            continue;
        }
        let Some(addr) = n.get("addr").and_then(Value::as_str) else {
            continue;
        };
        if usable(addr) {
            out.insert(addr.trim_end_matches('/').to_string());
        }
    }
    out.into_iter().collect()
}

struct State {
    addrs: Vec<String>,
    /// Nodes left out, until when.
    unreachable: HashMap<String, Instant>,
}

/// Which node each slot talks to.
pub(crate) struct Nodes {
    /// The configured address (for the log lines).
    server: String,
    logger: Logger,
    offset: usize,
    now: Clock,
    on_left: OnLeft,
    st: Mutex<State>,
}

impl Nodes {
    pub(crate) fn new(
        server: &str,
        logger: Logger,
        offset: usize,
        now: Clock,
        on_left: OnLeft,
    ) -> Nodes {
        Nodes {
            server: server.to_string(),
            logger,
            offset,
            now,
            on_left,
            st: Mutex::new(State {
                addrs: Vec::new(),
                unreachable: HashMap::new(),
            }),
        }
    }

    fn log(&self, level: Level, message: &str) {
        (self.logger)(level, &format!("orbit {}", message))
    }

    /// The live nodes' addresses as last read (empty when not spreading).
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.st.lock().unwrap().addrs.clone()
    }

    /// Takes a new live list; `on_left` is told the nodes that left it, at once.
    pub(crate) fn update(&self, addrs: Vec<String>) {
        let left: BTreeSet<String> = {
            let mut st = self.st.lock().unwrap();
            if st.addrs == addrs {
                return;
            }
            let before = std::mem::replace(&mut st.addrs, addrs.clone());
            before.into_iter().filter(|a| !addrs.contains(a)).collect()
        };
        if addrs.is_empty() {
            self.log(Level::Info, "slots use the configured address");
        } else {
            self.log(
                Level::Info,
                &format!(
                    "slots spread over {} node(s): {}",
                    addrs.len(),
                    addrs.join(", ")
                ),
            );
        }
        if !left.is_empty() {
            (self.on_left)(&left);
        }
    }

    /// The address slot `index` talks to, or None for the configured address.
    pub(crate) fn target_for(&self, index: usize) -> Option<String> {
        let mut st = self.st.lock().unwrap();
        let n = st.addrs.len();
        if n == 0 {
            return None;
        }
        let addr = st.addrs[(index + self.offset) % n].clone();
        match st.unreachable.get(&addr) {
            None => Some(addr),
            Some(until) if (self.now)() < *until => None,
            Some(_) => {
                st.unreachable.remove(&addr);
                Some(addr)
            }
        }
    }

    /// A request to `addr` failed to connect: its slots use the configured address for a while.
    pub(crate) fn unreachable(&self, addr: &str, why: &str) {
        {
            let mut st = self.st.lock().unwrap();
            if st.unreachable.contains_key(addr) {
                return;
            }
            let until = (self.now)() + UNREACHABLE;
            st.unreachable.insert(addr.to_string(), until);
        }
        self.log(
            Level::Warn,
            &format!(
                "node {} did not answer ({}); its slots use {} for {} s",
                addr,
                why,
                self.server,
                UNREACHABLE.as_secs()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    //! The router without a server: which addresses of a health answer it spreads slots over,
    //! how evenly, and how a node that does not answer or leaves is handled. Against real shared
    //! servers: tests/cluster_shared_spread_rust_test.ts.

    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn node(addr: Value, live: bool) -> Value {
        json!({ "node_id": addr.to_string(), "addr": addr, "live": live })
    }

    #[test]
    fn live_addresses_are_the_live_shared_nodes_http_addresses_sorted_once_each() {
        let mut health = json!({
            "role": "shared",
            "nodes": [
                node(json!("http://b:7233/"), true),
                node(json!("http://a:7233"), true),
                node(json!("http://c:7233"), false),
                node(Value::Null, true),
                node(json!(7233), true),
                node(json!("not a url"), true),
                node(json!("ftp://d:21"), true),
                node(json!("http://:7233"), true),
                node(json!("http://e:notaport"), true),
                node(json!("http://f g:7233"), true),
                // No TLS in this SDK: an https address is not one it can use.
                node(json!("https://a:7233"), true),
                node(json!("http://[::1]:7233"), true),
                node(json!("http://a:7233"), true),
                json!({ "node_id": "x", "addr": "http://x:1", "live": "true" }),
            ],
        });
        assert_eq!(
            live_addresses(&health),
            vec!["http://[::1]:7233", "http://a:7233", "http://b:7233"]
        );
        // Anything but a shared cluster: every slot stays on the configured address.
        for role in [
            json!("single"),
            json!("leader"),
            json!("standby"),
            Value::Null,
        ] {
            health["role"] = role.clone();
            assert!(live_addresses(&health).is_empty(), "{}", role);
        }
        assert!(live_addresses(&json!({ "role": "shared" })).is_empty());
        assert!(live_addresses(&json!({ "role": "shared", "nodes": {} })).is_empty());
        assert!(live_addresses(&Value::Null).is_empty());
        assert!(live_addresses(&json!("ok")).is_empty());
    }

    struct Router {
        nodes: Nodes,
        lines: Arc<Mutex<Vec<String>>>,
        left: Arc<Mutex<Vec<BTreeSet<String>>>>,
        /// The router's clock: `start` plus this.
        elapsed: Arc<Mutex<Duration>>,
    }

    fn router(offset: usize) -> Router {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let logger: Logger = Arc::new(move |level: Level, line: &str| {
            l.lock()
                .unwrap()
                .push(format!("{} {}", level.as_str(), line));
        });
        let left = Arc::new(Mutex::new(Vec::new()));
        let lf = left.clone();
        let elapsed = Arc::new(Mutex::new(Duration::ZERO));
        let e = elapsed.clone();
        let start = Instant::now();
        let nodes = Nodes::new(
            "http://lb:7233",
            logger,
            offset,
            Arc::new(move || start + *e.lock().unwrap()),
            Box::new(move |gone: &BTreeSet<String>| lf.lock().unwrap().push(gone.clone())),
        );
        Router {
            nodes,
            lines,
            left,
            elapsed,
        }
    }

    fn addrs(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn slots_spread_evenly_over_the_live_nodes_and_none_known_is_the_configured_address() {
        let r = router(5);
        assert_eq!(r.nodes.target_for(0), None);
        r.nodes.update(addrs(&["http://a", "http://b", "http://c"]));
        let mut count: HashMap<Option<String>, usize> = HashMap::new();
        for i in 0..8 {
            *count.entry(r.nodes.target_for(i)).or_default() += 1;
        }
        let mut sizes: Vec<usize> = count.values().copied().collect();
        sizes.sort();
        assert_eq!(sizes, vec![2, 3, 3]);
        assert!(!count.contains_key(&None));
        // Two slots on two nodes: one each, whatever the offset.
        for offset in [0, 1, 7] {
            let two = router(offset);
            two.nodes.update(addrs(&["http://a", "http://b"]));
            assert_ne!(two.nodes.target_for(0), two.nodes.target_for(1));
            assert!(two.nodes.target_for(0).is_some());
        }
    }

    #[test]
    fn a_node_that_did_not_answer_is_left_out_for_a_while_then_tried_again() {
        let r = router(0);
        r.nodes.update(addrs(&["http://a", "http://b"]));
        assert_eq!(r.nodes.target_for(1).as_deref(), Some("http://b"));
        r.nodes.unreachable("http://b", "connection refused");
        r.nodes.unreachable("http://b", "connection refused"); // logged once
        assert_eq!(r.nodes.target_for(1), None);
        assert_eq!(r.nodes.target_for(0).as_deref(), Some("http://a"));
        *r.elapsed.lock().unwrap() = UNREACHABLE - Duration::from_millis(1);
        assert_eq!(r.nodes.target_for(1), None);
        *r.elapsed.lock().unwrap() = UNREACHABLE;
        assert_eq!(r.nodes.target_for(1).as_deref(), Some("http://b"));
        let lines = r.lines.lock().unwrap();
        let warned: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("node http://b did not answer"))
            .collect();
        assert_eq!(warned.len(), 1, "{:?}", lines);
        assert_eq!(
            warned[0],
            "WARN orbit node http://b did not answer (connection refused); its slots use http://lb:7233 for 10 s"
        );
    }

    #[test]
    fn the_slots_of_a_node_that_left_the_live_list_are_told_at_once() {
        let r = router(0);
        r.nodes.update(addrs(&["http://a", "http://b", "http://c"]));
        r.nodes.update(addrs(&["http://a", "http://b", "http://c"])); // unchanged: nothing
        assert!(r.left.lock().unwrap().is_empty());
        r.nodes.update(addrs(&["http://a", "http://c", "http://d"]));
        assert_eq!(
            *r.left.lock().unwrap(),
            vec![BTreeSet::from(["http://b".to_string()])]
        );
        r.nodes.update(Vec::new());
        assert_eq!(
            r.left.lock().unwrap()[1],
            BTreeSet::from(["http://a", "http://c", "http://d"].map(String::from))
        );
        assert_eq!(r.nodes.target_for(0), None);
        assert!(r.nodes.addresses().is_empty());
        let lines = r.lines.lock().unwrap().join("\n");
        assert!(
            lines.contains("INFO orbit slots use the configured address"),
            "{}",
            lines
        );
        assert!(
            lines.contains("INFO orbit slots spread over 3 node(s): http://a, http://c, http://d"),
            "{}",
            lines
        );
        // One line per change: three changes.
        assert_eq!(lines.lines().count(), 3, "{}", lines);
    }
}
