//! The rules by what they match, so that a decision looks up a host's few candidates
//! instead of trying every rule: exact names in one table, `*.SUFFIX` rules by their
//! suffix in another (a name tries each of its parent domains), address rules in a list
//! of their own. The tables hold rule positions only, hashed by the rule's own name, so
//! an allowlist of 10^5–10^6 names (blocklists, generated lists) pays ~10 bytes a rule for
//! its index, loads in linear time, and decides a connection in a few lookups. Candidates
//! come back in the policy's order, so the first rule that matches is still the first.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::rule::HostMatcher;
use super::Rule;
use crate::target::Host;

#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    /// Positions of `HostMatcher::Exact` rules, a name's duplicates included.
    exact: HashTable<u32>,
    /// Positions of `HostMatcher::Subdomains` rules, by their suffix.
    subdomains: HashTable<u32>,
    /// Address rules (IP and CIDR): matched against IP literals and resolved addresses.
    nets: Vec<usize>,
    hasher: RandomState,
}

/// The name a rule is indexed by, if it matches names.
fn indexed_name(rule: &Rule) -> Option<&str> {
    match &rule.spec.hosts {
        HostMatcher::Exact(name) | HostMatcher::Subdomains(name) => Some(name),
        HostMatcher::Net(_) => None,
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
        let hash_of = |hasher: &RandomState, at: u32| {
            hasher.hash_one(indexed_name(&rules[at as usize]).unwrap_or_default())
        };
        for (at, rule) in rules.iter().enumerate() {
            // Sound: a policy holds at most `MAX_RULES` (2^24) rules.
            let position = u32::try_from(at).expect("a policy holds at most MAX_RULES rules");
            let table = match &rule.spec.hosts {
                HostMatcher::Exact(_) => &mut index.exact,
                HostMatcher::Subdomains(_) => &mut index.subdomains,
                HostMatcher::Net(_) => {
                    index.nets.push(at);
                    continue;
                }
            };
            let hash = hash_of(&index.hasher, position);
            let hasher = &index.hasher;
            table.insert_unique(hash, position, |&other| hash_of(hasher, other));
        }
        index
    }

    /// Appends to `found` the positions in `table` of the rules indexed by `name`.
    fn push_named(
        &self,
        table: &HashTable<u32>,
        rules: &[Rule],
        name: &str,
        found: &mut Vec<usize>,
    ) {
        let hash = self.hasher.hash_one(name);
        found.extend(
            table
                .iter_hash(hash)
                .map(|&at| at as usize)
                .filter(|&at| indexed_name(&rules[at]) == Some(name)),
        );
    }

    /// The positions of the rules that may match `host` (by host alone), in order.
    /// `rules` are the rules the index was built from.
    pub(super) fn candidates(&self, rules: &[Rule], host: &Host) -> Vec<usize> {
        let name = match host {
            Host::Ip(_) => return self.nets.clone(),
            Host::Name(name) => name.as_str(),
        };
        let mut found = Vec::new();
        self.push_named(&self.exact, rules, name, &mut found);
        // `*.SUFFIX` matches a name with at least one label before `.SUFFIX`: every parent
        // domain of the name is a suffix to look up (not the name itself).
        if !self.subdomains.is_empty() {
            for (at, _) in name.match_indices('.') {
                self.push_named(&self.subdomains, rules, &name[at + 1..], &mut found);
            }
        }
        // A table gives a name's duplicates in no set order; the policy's order decides.
        found.sort_unstable();
        found
    }

    /// The positions of the address rules, in order.
    pub(super) fn nets(&self) -> &[usize] {
        &self.nets
    }
}
