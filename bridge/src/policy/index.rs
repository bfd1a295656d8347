//! The rules by what they match, so that a decision looks up a host's few candidates
//! instead of trying every rule: exact names in one table, `*.SUFFIX` rules by their
//! suffix in another (a name tries each of its parent domains), address rules in a list
//! of their own. The tables hold rule positions only, hashed by the rule's own name, so
//! an allowlist of 10^5–10^6 names (blocklists, generated lists) pays ~10 bytes a rule for
//! its index, builds it in linear time, and decides a name in a few lookups. Address rules
//! are tried one by one: a list of 10^6 CIDRs costs milliseconds a decision.
//! Candidates come back in the policy's order, so the first rule that matches is still
//! the first.

use std::borrow::Cow;
use std::hash::{BuildHasher, RandomState};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::rule::HostMatcher;
use super::Rule;
use crate::target::Host;

#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    /// The first `HostMatcher::Exact` rule of each name, by position.
    exact: HashTable<u32>,
    /// The first `HostMatcher::Subdomains` rule of each suffix, by position.
    subdomains: HashTable<u32>,
    /// For a name or suffix written more than once: (the first rule's position, a later
    /// rule's position), sorted, so a name's later rules are one run found by binary
    /// search. One table entry per distinct name keeps the build linear however often a
    /// name repeats (a host listed once per port, lists concatenated), at 8 bytes a
    /// repeat.
    repeats: Vec<(u32, u32)>,
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
        let name_at = |at: u32| indexed_name(&rules[at as usize]).unwrap_or_default();
        for (at, rule) in rules.iter().enumerate() {
            // Sound: a policy holds at most `MAX_RULES` (2^24) rules.
            let position = u32::try_from(at).expect("a policy holds at most MAX_RULES rules");
            let (table, name) = match &rule.spec.hosts {
                HostMatcher::Exact(name) => (&mut index.exact, name),
                HostMatcher::Subdomains(suffix) => (&mut index.subdomains, suffix),
                HostMatcher::Net(_) => {
                    index.nets.push(at);
                    continue;
                }
            };
            let hasher = &index.hasher;
            let entry = table.entry(
                hasher.hash_one(&**name),
                |&other| name_at(other) == &**name,
                |&other| hasher.hash_one(name_at(other)),
            );
            match entry {
                Entry::Occupied(first) => index.repeats.push((*first.get(), position)),
                Entry::Vacant(place) => {
                    place.insert(position);
                }
            }
        }
        // Stable, and pushed in policy order: each name's later rules stay in order.
        index.repeats.sort_by_key(|&(first, _)| first);
        index.repeats.shrink_to_fit();
        // Room was made for every exact rule; a name written many times needs one entry.
        let hasher = &index.hasher;
        index
            .exact
            .shrink_to_fit(|&other| hasher.hash_one(name_at(other)));
        index
    }

    /// Appends to `found` the positions of the rules in `table` indexed by `name`.
    fn push_named(
        &self,
        table: &HashTable<u32>,
        rules: &[Rule],
        name: &str,
        found: &mut Vec<usize>,
    ) {
        let hash = self.hasher.hash_one(name);
        let Some(&first) = table.find(hash, |&at| indexed_name(&rules[at as usize]) == Some(name))
        else {
            return;
        };
        found.push(first as usize);
        let from = self.repeats.partition_point(|&(of, _)| of < first);
        let later = self.repeats[from..]
            .iter()
            .take_while(|&&(of, _)| of == first);
        found.extend(later.map(|&(_, at)| at as usize));
    }

    /// The positions of the rules that may match `host` (by host alone), in order.
    /// `rules` are the rules the index was built from.
    pub(super) fn candidates(&self, rules: &[Rule], host: &Host) -> Cow<'_, [usize]> {
        let name = match host {
            Host::Ip(_) => return Cow::Borrowed(&self.nets),
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
        Cow::Owned(found)
    }

    /// The positions of the address rules, in order.
    pub(super) fn nets(&self) -> &[usize] {
        &self.nets
    }

    /// How many distinct exact names the index holds.
    #[cfg(test)]
    pub(super) fn exact_names(&self) -> usize {
        self.exact.len()
    }
}
