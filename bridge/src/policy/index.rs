//! The rules by what they match, so that a decision looks up a host's few candidates
//! instead of trying every rule: exact names in one table, `*.SUFFIX` rules by their
//! suffix in another (a name tries each of its parent domains), address rules by their
//! network in a third (an address tries itself masked to each prefix length the rules
//! use, and so does the IPv4 address it embeds). The tables hold rule positions only,
//! hashed by the rule's own name or network, so an allowlist of 10^5–10^6 names or
//! networks (blocklists, generated lists) pays ~10 bytes a rule for its index, builds it
//! in linear time, and decides a host in a few lookups. Candidates come back in the
//! policy's order, so the first rule that matches is still the first.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

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
        // Stable, and pushed in policy order: each key's later rules stay in order.
        index.repeats.sort_by_key(|&(first, _)| first);
        index.repeats.shrink_to_fit();
        // Room was made for every exact rule; a name written many times needs one entry.
        let hasher = &index.hasher;
        index
            .exact
            .shrink_to_fit(|&other| hasher.hash_one(name_at(other)));
        index
    }

    /// Appends to `found` the positions of the rule `first` and of the later rules with
    /// its key, in order.
    fn push_with_repeats(&self, first: u32, found: &mut Vec<usize>) {
        found.push(first as usize);
        let from = self.repeats.partition_point(|&(of, _)| of < first);
        let later = self.repeats[from..]
            .iter()
            .take_while(|&&(of, _)| of == first);
        found.extend(later.map(|&(_, at)| at as usize));
    }

    /// Appends to `found` the positions of the rules in `table` indexed by `name`.
    fn push_named(
        &self,
        table: &HashTable<u32>,
        rules: &[Rule],
        name: &str,
        found: &mut Vec<usize>,
    ) {
        let hash = self.hasher.hash_one(Some(name));
        if let Some(&first) =
            table.find(hash, |&at| indexed_name(&rules[at as usize]) == Some(name))
        {
            self.push_with_repeats(first, found);
        }
    }

    /// Appends to `found` the positions of the address rules for exactly `net`.
    fn push_net(&self, rules: &[Rule], net: IpNet, found: &mut Vec<usize>) {
        let hash = self.hasher.hash_one(Some(&net));
        if let Some(&first) = self
            .nets
            .find(hash, |&at| indexed_net(&rules[at as usize]) == Some(&net))
        {
            self.push_with_repeats(first, found);
        }
    }

    /// The positions of the address rules whose network holds `ip`, in any of its
    /// spellings (the IPv4 address a mapped, NAT64 or 6to4 address embeds), in order: what
    /// `matches_ip` matches, and a superset of what `opens_ip` opens.
    pub(super) fn address_candidates(&self, rules: &[Rule], ip: IpAddr) -> Vec<usize> {
        let mut found = Vec::new();
        // Each length is one a network of that family was parsed with, so it is in range.
        let masked = |ip: IpAddr, len: u8| {
            IpNet::new(ip, len)
                .expect("a prefix length some network of the family has")
                .trunc()
        };
        let mut lists = 0;
        let mut look_up = |ip: IpAddr, lengths: &[u8], found: &mut Vec<usize>| {
            for &len in lengths {
                let before = found.len();
                self.push_net(rules, masked(ip, len), found);
                lists += usize::from(found.len() > before);
            }
        };
        match canonical_ip(ip) {
            v4 @ IpAddr::V4(_) => look_up(v4, &self.v4_lengths, &mut found),
            IpAddr::V6(v6) => {
                look_up(IpAddr::V6(v6), &self.v6_lengths, &mut found);
                if let Some(v4) = embedded_ipv4(v6) {
                    look_up(IpAddr::V4(v4), &self.v4_lengths, &mut found);
                }
            }
        }
        // Each list is in order; merged from several, the policy's order decides.
        if lists > 1 {
            found.sort_unstable();
        }
        found
    }

    /// The positions of the rules that may match `host` (by host alone), in order.
    /// `rules` are the rules the index was built from.
    pub(super) fn candidates(&self, rules: &[Rule], host: &Host) -> Vec<usize> {
        let name = match host {
            Host::Ip(ip) => return self.address_candidates(rules, *ip),
            Host::Name(name) => name.as_str(),
        };
        let mut found = Vec::new();
        self.push_named(&self.exact, rules, name, &mut found);
        // `*.SUFFIX` matches a name with at least one label before `.SUFFIX`: every parent
        // domain of the name is a suffix to look up (not the name itself).
        let mut lists = 0;
        if !self.subdomains.is_empty() {
            for (at, _) in name.match_indices('.') {
                let before = found.len();
                self.push_named(&self.subdomains, rules, &name[at + 1..], &mut found);
                lists += usize::from(found.len() > before);
            }
        }
        // Each list is in order; merged from several, the policy's order decides.
        if lists > 0 {
            found.sort_unstable();
        }
        found
    }

    /// How many distinct exact names the index holds.
    #[cfg(test)]
    pub(super) fn exact_names(&self) -> usize {
        self.exact.len()
    }
}
