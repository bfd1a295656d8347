//! The rules by what they match, so that a decision looks up a host's few candidates
//! instead of trying every rule: exact names in one table, `*.SUFFIX` rules by their
//! suffix in another (a name tries each of its parent domains), address rules by their
//! network in a third (an address tries itself masked to each prefix length the rules
//! use, and so does the IPv4 address it embeds). The tables hold rule positions only,
//! hashed by the rule's own name or network, so an allowlist of 10^5–10^6 names or
//! networks (blocklists, generated lists) pays ~10 bytes a rule for its index, builds it
//! in linear time, and decides a host in a few lookups, and a try of each rule with the
//! host's key (one name written once per port is a rule per port). The first rule that
//! matches, in the policy's order, is still the first: see [`Candidates::first`].

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::ops::ControlFlow;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use ipnet::IpNet;

use super::rule::HostMatcher;
use super::Rule;
use crate::ipclass::embedded_ipv4;
use crate::target::{canonical_ip, Host};

#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    /// The first `HostMatcher::Exact` rule of each name, by position.
    exact: HashTable<u32>,
    /// The first `HostMatcher::Subdomains` rule of each suffix, by position.
    subdomains: HashTable<u32>,
    /// The first `HostMatcher::Net` rule (IP or CIDR) of each network, by position.
    nets: HashTable<u32>,
    /// The prefix lengths the IPv4 and the IPv6 networks use, each once, ascending.
    v4_lengths: Vec<u8>,
    v6_lengths: Vec<u8>,
    /// For a name, suffix or network written more than once: (the first rule's position,
    /// a later rule's position), sorted, so its later rules are one run found by binary
    /// search. One table entry per distinct key keeps the build linear however often a
    /// name repeats (a host listed once per port, lists concatenated), at 8 bytes a
    /// repeat.
    repeats: Vec<(u32, u32)>,
    hasher: RandomState,
}

/// The name a rule is indexed by, if it matches names.
fn indexed_name(rule: &Rule) -> Option<&str> {
    match &rule.spec.hosts {
        HostMatcher::Exact(name) | HostMatcher::Subdomains(name) => Some(name),
        HostMatcher::Net(_) => None,
    }
}

/// The network an address rule is indexed by (parsing truncates it to its prefix).
fn indexed_net(rule: &Rule) -> Option<&IpNet> {
    match &rule.spec.hosts {
        HostMatcher::Net(net) => Some(net),
        HostMatcher::Exact(_) | HostMatcher::Subdomains(_) => None,
    }
}

/// Puts `position` in `table` under `key`, or chains it to the rule already there. Keys
/// are hashed as `Some(key)`, the way `key_at` gives them back.
fn insert_or_chain<'r, K: std::hash::Hash + Eq + ?Sized + 'r>(
    table: &mut HashTable<u32>,
    repeats: &mut Vec<(u32, u32)>,
    hasher: &RandomState,
    key: &K,
    key_at: impl Fn(u32) -> Option<&'r K>,
    position: u32,
) {
    let entry = table.entry(
        hasher.hash_one(Some(key)),
        |&other| key_at(other) == Some(key),
        |&other| hasher.hash_one(key_at(other)),
    );
    match entry {
        Entry::Occupied(first) => repeats.push((*first.get(), position)),
        Entry::Vacant(place) => {
            place.insert(position);
        }
    }
}

impl RuleIndex {
    pub(super) fn of(rules: &[Rule]) -> RuleIndex {
        let exact_count = rules
            .iter()
            .filter(|r| matches!(r.spec.hosts, HostMatcher::Exact(_)))
            .count();
        let mut index = RuleIndex {
            exact: HashTable::with_capacity(exact_count),
            ..RuleIndex::default()
        };
        let name_at = |at: u32| indexed_name(&rules[at as usize]);
        let net_at = |at: u32| indexed_net(&rules[at as usize]);
        for (at, rule) in rules.iter().enumerate() {
            // Sound: a policy holds at most `MAX_RULES` (2^24) rules.
            let position = u32::try_from(at).expect("a policy holds at most MAX_RULES rules");
            let (repeats, hasher) = (&mut index.repeats, &index.hasher);
            match &rule.spec.hosts {
                HostMatcher::Exact(name) => insert_or_chain(
                    &mut index.exact,
                    repeats,
                    hasher,
                    &**name,
                    name_at,
                    position,
                ),
                HostMatcher::Subdomains(suffix) => insert_or_chain(
                    &mut index.subdomains,
                    repeats,
                    hasher,
                    &**suffix,
                    name_at,
                    position,
                ),
                HostMatcher::Net(net) => {
                    let lengths = match net {
                        IpNet::V4(_) => &mut index.v4_lengths,
                        IpNet::V6(_) => &mut index.v6_lengths,
                    };
                    if !lengths.contains(&net.prefix_len()) {
                        lengths.push(net.prefix_len());
                    }
                    insert_or_chain(&mut index.nets, repeats, hasher, net, net_at, position)
                }
            }
        }
        index.v4_lengths.sort_unstable();
        index.v6_lengths.sort_unstable();
        // By key, then by position: each key's later rules in the policy's order, which
        // `Candidates::first` relies on.
        index.repeats.sort_unstable();
        index.repeats.shrink_to_fit();
        // Room was made for every exact rule, and the networks' table grew by doubling; a
        // key written many times needs one entry.
        let hasher = &index.hasher;
        index
            .exact
            .shrink_to_fit(|&other| hasher.hash_one(name_at(other)));
        index
            .nets
            .shrink_to_fit(|&other| hasher.hash_one(net_at(other)));
        index
    }

    /// The run of rule `first` and the later rules with its key.
    fn run_of(&self, first: u32) -> Run<'_> {
        let from = self.repeats.partition_point(|&(of, _)| of < first);
        let to = from + self.repeats[from..].partition_point(|&(of, _)| of == first);
        Run {
            first,
            later: &self.repeats[from..to],
        }
    }

    /// The run of the rules in `table` whose key (`key_at` a position) is `key`, if any.
    fn run_keyed<'r, K: std::hash::Hash + Eq + ?Sized + 'r>(
        &self,
        table: &HashTable<u32>,
        key: &K,
        key_at: impl Fn(u32) -> Option<&'r K>,
    ) -> Option<Run<'_>> {
        let hash = self.hasher.hash_one(Some(key));
        let first = table.find(hash, |&at| key_at(at) == Some(key))?;
        Some(self.run_of(*first))
    }

    /// The run of the rules in `table` indexed by `name`, if any.
    fn named(&self, table: &HashTable<u32>, rules: &[Rule], name: &str) -> Option<Run<'_>> {
        self.run_keyed(table, name, |at| indexed_name(&rules[at as usize]))
    }

    /// The run of the address rules for exactly `net`, if any.
    fn of_net(&self, rules: &[Rule], net: &IpNet) -> Option<Run<'_>> {
        self.run_keyed(&self.nets, net, |at| indexed_net(&rules[at as usize]))
    }

    /// The address rules whose network holds `ip`, in any of its spellings (the IPv4
    /// address a mapped, NAT64 or 6to4 address embeds): what `matches_ip` matches, and a
    /// superset of what `opens_ip` opens.
    pub(super) fn address_candidates(&self, rules: &[Rule], ip: IpAddr) -> Candidates<'_> {
        let mut runs = Vec::new();
        // Each length is one a network of that family was parsed with, so it is in range.
        let masked = |ip: IpAddr, len: u8| {
            IpNet::new(ip, len)
                .expect("a prefix length some network of the family has")
                .trunc()
        };
        let mut look_up = |ip: IpAddr, lengths: &[u8]| {
            runs.extend(
                lengths
                    .iter()
                    .filter_map(|&len| self.of_net(rules, &masked(ip, len))),
            );
        };
        match canonical_ip(ip) {
            v4 @ IpAddr::V4(_) => look_up(v4, &self.v4_lengths),
            IpAddr::V6(v6) => {
                look_up(IpAddr::V6(v6), &self.v6_lengths);
                if let Some(v4) = embedded_ipv4(v6) {
                    look_up(IpAddr::V4(v4), &self.v4_lengths);
                }
            }
        }
        Candidates { runs }
    }

    /// The rules that may match `host` (by host alone). `rules` are the rules the index
    /// was built from.
    pub(super) fn candidates(&self, rules: &[Rule], host: &Host) -> Candidates<'_> {
        let name = match host {
            Host::Ip(ip) => return self.address_candidates(rules, *ip),
            Host::Name(name) => name.as_str(),
        };
        let mut runs: Vec<Run<'_>> = self.named(&self.exact, rules, name).into_iter().collect();
        // `*.SUFFIX` matches a name with at least one label before `.SUFFIX`: every parent
        // domain of the name is a suffix to look up (not the name itself).
        if !self.subdomains.is_empty() {
            let parents = name.match_indices('.').map(|(at, _)| &name[at + 1..]);
            runs.extend(parents.filter_map(|parent| self.named(&self.subdomains, rules, parent)));
        }
        Candidates { runs }
    }

    /// How many distinct exact names the index holds.
    #[cfg(test)]
    pub(super) fn exact_names(&self) -> usize {
        self.exact.len()
    }
}

/// One key's rules: its first and its repeats, in the policy's order.
#[derive(Debug, Clone, Copy)]
struct Run<'a> {
    first: u32,
    later: &'a [(u32, u32)],
}

impl<'a> Run<'a> {
    fn positions(self) -> impl Iterator<Item = usize> + 'a {
        std::iter::once(self.first)
            .chain(self.later.iter().map(|&(_, at)| at))
            .map(|at| at as usize)
    }
}

/// The rules that may match a host: a run for each key it was looked up by (its name and
/// each parent domain's wildcards, or its network at each prefix length). Each run is in
/// the policy's order; across runs, the policy's order is found without merging them, so
/// a host whose key many rules share (a network written once per port) costs no sort and
/// no copy of their positions.
#[derive(Debug)]
pub(super) struct Candidates<'a> {
    runs: Vec<Run<'a>>,
}

impl Candidates<'_> {
    /// The first rule, in the policy's order, whose position `wanted` accepts.
    pub(super) fn first(&self, mut wanted: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut best: Option<usize> = None;
        self.visit(|at| {
            // Past the best so far, nothing later in this run can win.
            if best.is_some_and(|best| at > best) {
                return ControlFlow::Break(());
            }
            if wanted(at) {
                best = Some(at);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        });
        best
    }

    /// Shows `visit` each run's positions in order, leaving a run when it says to break
    /// (nothing later in that run matters to it: the run is in the policy's order).
    pub(super) fn visit(&self, mut visit: impl FnMut(usize) -> ControlFlow<()>) {
        for run in &self.runs {
            for at in run.positions() {
                if visit(at).is_break() {
                    break;
                }
            }
        }
    }

    /// Every candidate's position, in the policy's order.
    #[cfg(test)]
    pub(super) fn positions(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.runs.iter().flat_map(|run| run.positions()).collect();
        all.sort_unstable();
        all
    }
}
