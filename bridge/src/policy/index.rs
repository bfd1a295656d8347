//! The rules by what they match, so that a decision looks up a host's few candidates
//! instead of trying every rule: exact names in a map, `*.SUFFIX` rules by their suffix
//! (a name tries each of its parent domains), address rules in a list of their own.
//! Each list keeps rule positions in order, so the first rule that matches is still the
//! first in the policy's order: an allowlist of 10^5–10^6 names (blocklists, generated
//! lists) decides a connection in a few lookups, and loads in linear time.

use std::collections::HashMap;

use super::rule::HostMatcher;
use super::Rule;
use crate::target::Host;

#[derive(Debug, Clone, Default)]
pub(super) struct RuleIndex {
    exact: HashMap<String, Vec<usize>>,
    subdomains: HashMap<String, Vec<usize>>,
    /// Address rules (IP and CIDR): matched against IP literals and resolved addresses.
    nets: Vec<usize>,
}

impl RuleIndex {
    pub(super) fn of(rules: &[Rule]) -> RuleIndex {
        let mut index = RuleIndex::default();
        for (at, rule) in rules.iter().enumerate() {
            match &rule.spec.hosts {
                HostMatcher::Exact(name) => index.exact.entry(name.clone()).or_default().push(at),
                HostMatcher::Subdomains(suffix) => {
                    index.subdomains.entry(suffix.clone()).or_default().push(at);
                }
                HostMatcher::Net(_) => index.nets.push(at),
            }
        }
        index
    }

    /// The positions of the rules that may match `host` (by host alone), in order.
    pub(super) fn candidates(&self, host: &Host) -> Vec<usize> {
        let mut found: Vec<usize> = match host {
            Host::Ip(_) => return self.nets.clone(),
            Host::Name(name) => self.exact.get(name).cloned().unwrap_or_default(),
        };
        let Host::Name(name) = host else {
            return found;
        };
        // `*.SUFFIX` matches a name with at least one label before `.SUFFIX`: every parent
        // domain of the name is a suffix to look up (not the name itself).
        let mut lists = 0;
        for (at, _) in name.match_indices('.') {
            if let Some(list) = self.subdomains.get(&name[at + 1..]) {
                found.extend_from_slice(list);
                lists += 1;
            }
        }
        if lists > 0 {
            found.sort_unstable();
        }
        found
    }

    /// The positions of the address rules, in order.
    pub(super) fn nets(&self) -> &[usize] {
        &self.nets
    }
}
