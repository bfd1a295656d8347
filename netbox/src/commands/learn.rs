//! `netbox learn`: turn what a command tried into an allowlist.
//!
//! `netbox learn [-o FILE] [RUN OPTIONS] -- CMD` runs CMD in the normal sandbox (same
//! mounts, same probe) with one change: a name no rule mentions is let through, so CMD
//! can reach any public destination (deny rules still win, and private addresses stay
//! refused unless an IP rule opens them). `netbox learn --from-log LOG [-o FILE]` reads
//! an earlier session's refusals instead. Either way the result is an allowlist with one
//! rule per host:port, sorted and commented with counts, to review and commit; a
//! destination refused for its address is listed commented out, with why.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use bridge::log::{Event, Record};
use bridge::policy::{Reason, Verdict};

use crate::cli::LearnArgs;
use crate::error::WrapperError;
use crate::plan::config::SandboxConfig;

/// The rules given on the learn run's command line, carried into the file.
#[derive(Debug, Default)]
struct Given {
    allow: Vec<String>,
    allow_private: Vec<String>,
    deny: Vec<String>,
}

/// What was seen of one host:port.
#[derive(Debug, Default)]
struct Seen {
    /// Attempts that got through (learn mode) or were refused for the name only (from a
    /// log): either way, a rule for this name makes them pass.
    wanted: u64,
    /// Attempts refused for the address (a private range, say): a name rule alone would
    /// not help, so the rule is written commented out.
    refused_address: u64,
    /// Attempts that got through to a non-public address of the name (a rule with
    /// `--private-ok`, `--allow-private` or a tool's internal registry let them): the rule
    /// that replays them is an `allow_private` one, not a plain `allow`.
    reached_private: u64,
    bytes_down: u64,
}

/// Whether a destination is an IP literal that is not public (loopback, private,
/// link-local, metadata, or one of this machine's own public addresses, as the bridge
/// judges it): a rule for it would open that address, so it is never written as an active
/// rule, whatever the log says of it.
fn non_public_ip(host: &str) -> bool {
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| !bridge::local_routes::classify_here(ip).is_public())
}

pub fn run(args: Box<LearnArgs>) -> Result<u8, WrapperError> {
    let LearnArgs {
        output,
        from_log,
        mut run,
    } = *args;
    if let Some(log) = from_log {
        if !run.cmd.is_empty() {
            return Err(WrapperError::Usage(
                "netbox learn --from-log reads a log and runs nothing; drop everything after --"
                    .into(),
            ));
        }
        let records = read_records(&log)?;
        let seen = from_refusals(&records);
        let origin = format!("the refusals in {}", log.display());
        let target = output.as_deref().map(OutputFile::open).transpose()?;
        return write(&seen, &Given::default(), &origin, target).map(|()| 0);
    }
    if run.disable_sandbox {
        return Err(WrapperError::Usage(
            "netbox learn runs the command in the sandbox; drop --disable-sandbox".into(),
        ));
    }
    if run.fetch.is_some() {
        return Err(WrapperError::Usage(
            "netbox learn runs one command; drop --fetch (learn it, then use the result as \
             --fetch-allowlist)"
                .into(),
        ));
    }
    run.learn = true;
    // The rules given on the command line go into the file too: without them the file
    // would not replay the run (an address opened with --allow ADDR, a mirror allowed with
    // --allow-private).
    let given = Given {
        allow: run.policy.allow.clone(),
        allow_private: run.policy.allow_private.clone(),
        deny: run.policy.deny.clone(),
    };
    // Where the file goes is settled before CMD runs: the workspace is CMD's to change,
    // and a directory it swapped for a symlink must not move netbox's write.
    let target = output.as_deref().map(OutputFile::open).transpose()?;
    let config = SandboxConfig::from_args(run)?;
    let log = config.log_path.clone();
    let session = config.session_id.clone();
    let command: Vec<String> = config
        .cmd
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let status = crate::commands::run::run(config)?;
    let records: Vec<Event> = read_records(&log)?
        .into_iter()
        .filter(|r| &*r.session == session.as_str())
        .collect();
    let seen = from_learning(&records);
    let origin = format!("session {session}: {}", command.join(" "));
    write(&seen, &given, &origin, target)?;
    Ok(status)
}

/// Every network record of a log (`bridge::log::Event`, the type that wrote it). Records
/// of a newer layout are not guessed at: said, and left out.
fn read_records(log: &Path) -> Result<Vec<Event>, WrapperError> {
    let text = std::fs::read(log).map_err(|source| WrapperError::Path {
        path: log.to_owned(),
        what: "event log",
        source,
    })?;
    let mut events = Vec::new();
    let mut newer = None;
    for line in crate::commands::log::whole_lines(&text) {
        match bridge::log::read_record(line) {
            Record::Net(event) => events.push(*event),
            Record::Newer(version) => newer = Some(version),
            _ => {}
        }
    }
    if let Some(version) = newer {
        crate::output::say(&format!(
            "netbox: {} has records of a newer layout (schema_version {version}), written by a \
             newer netbox: left out; learn with that netbox",
            log.display()
        ));
    }
    Ok(events)
}

/// A record's destination, normalised the way the bridge normalises a target (case,
/// trailing dot, IDNA, every spelling of an IP literal): a log is only text, and a line
/// naming `127.1` must become the rule `127.0.0.1`, which is then left out as non-public,
/// not an active rule the bridge would read as loopback. Network records of the probe's
/// canary are the probe's, not the command's, and netbox's own fetches for `--allow-tool`
/// (`proto` `fetch`) are netbox's.
fn destination(record: &Event) -> Option<(String, u16)> {
    if record.proto == bridge::log::Proto::Fetch {
        return None;
    }
    let host = record.host.as_deref()?;
    let port = record.port?;
    let authority = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let target = bridge::target::Target::parse_authority(&authority).ok()?;
    let host = target.host.to_string();
    (!crate::commands::run::is_canary(&host, u64::from(port))).then_some((host, port))
}

/// From a learn-mode session: every destination reached, and the ones refused for their
/// address.
fn from_learning(records: &[Event]) -> BTreeMap<(String, u16), Seen> {
    let mut seen: BTreeMap<(String, u16), Seen> = BTreeMap::new();
    for record in records {
        let Some(key) = destination(record) else {
            continue;
        };
        let entry = seen.entry(key).or_default();
        match (record.decision, record.reason) {
            (Verdict::Allow, _)
                if record.dialed.is_some_and(|addr| {
                    !bridge::local_routes::classify_here(addr.ip()).is_public()
                }) =>
            {
                entry.wanted += 1;
                entry.reached_private += 1;
            }
            (Verdict::Allow, _) => entry.wanted += 1,
            (_, Reason::NonPublicAddress) => entry.refused_address += 1,
            // Refused by a deny rule, unparseable, or it did not resolve: not a rule to
            // suggest.
            _ => {}
        }
        entry.bytes_down += record.bytes_down;
    }
    seen.retain(|_, s| s.wanted > 0 || s.refused_address > 0);
    seen
}

/// From an earlier session's log: the names refused for not being on the allowlist.
fn from_refusals(records: &[Event]) -> BTreeMap<(String, u16), Seen> {
    let mut seen: BTreeMap<(String, u16), Seen> = BTreeMap::new();
    for record in records {
        let Some(key) = destination(record) else {
            continue;
        };
        match (record.decision, record.reason) {
            (Verdict::Deny, Reason::NotAllowed) => seen.entry(key).or_default().wanted += 1,
            (Verdict::Deny, Reason::NonPublicAddress) => {
                seen.entry(key).or_default().refused_address += 1;
            }
            _ => {}
        }
    }
    seen
}

/// The allowlist, as TOML.
fn render(seen: &BTreeMap<(String, u16), Seen>, given: &Given, origin: &str) -> String {
    // The command line is the command's own text: one escaped line, so no newline in it
    // can end the comment and add TOML of its choosing.
    let origin = crate::printable::printable(origin);
    let mut text = format!(
        "# Written by `netbox learn` from {origin}.\n\
         # One rule per destination the command tried; review before you commit it.\n"
    );
    // Given rules are the user's own text, already checked by the policy; quoted as TOML
    // strings (serde_json's quoting is valid TOML basic-string quoting).
    let quote = |rule: &String| serde_json::to_string(rule).unwrap_or_default();
    let rule_of = |host: &str, port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    // Names reached at a non-public address: replayed by `allow_private`, which lets that
    // name alone reach such an address, as the learning run's own permission did.
    let goes_private = |host: &str, s: &Seen| s.reached_private > 0 && !non_public_ip(host);
    let learned_private: Vec<String> = seen
        .iter()
        .filter(|((host, _), s)| goes_private(host, s))
        .map(|((host, port), s)| {
            let attempts = s.wanted;
            format!(
                "    {}, # {attempts} attempt{}, {} B down, at a non-public address\n",
                quote(&rule_of(host, *port)),
                if attempts == 1 { "" } else { "s" },
                s.bytes_down
            )
        })
        .collect();
    for (key, rules, learned) in [
        ("allow_private", &given.allow_private, &learned_private),
        ("deny", &given.deny, &Vec::new()),
    ] {
        if rules.is_empty() && learned.is_empty() {
            continue;
        }
        text.push_str(&format!("{key} = [\n"));
        for rule in rules {
            text.push_str(&format!(
                "    {}, # given on the command line\n",
                quote(rule)
            ));
        }
        for line in learned {
            text.push_str(line);
        }
        text.push_str("]\n");
    }
    text.push_str("allow = [\n");
    for rule in &given.allow {
        text.push_str(&format!(
            "    {}, # given on the command line\n",
            quote(rule)
        ));
    }
    for ((host, port), s) in seen {
        if goes_private(host, s) {
            // Written under allow_private above.
            continue;
        }
        let rule = rule_of(host, *port);
        let quoted = serde_json::to_string(&rule).unwrap_or_default();
        let attempts = s.wanted + s.refused_address;
        let plural = if attempts == 1 { "" } else { "s" };
        if non_public_ip(host) {
            text.push_str(&format!(
                "    # {quoted}, # {attempts} attempt{plural}, left out: a non-public address \
                 (loopback, private, metadata...); a rule would open it to every command\n"
            ));
        } else if s.wanted > 0 {
            text.push_str(&format!(
                "    {quoted}, # {attempts} attempt{plural}, {} B down\n",
                s.bytes_down
            ));
        } else {
            text.push_str(&format!(
                "    # {quoted}, # {attempts} attempt{plural}, refused: it resolves to a \
                 non-public address; allowing the name is not enough (if it is an internal \
                 host you mean to reach, put it in allow_private, as --allow-private \
                 {rule} would)\n"
            ));
        }
    }
    text.push_str("]\n");
    text
}

/// An output file whose directory was opened before anything ran.
struct OutputFile {
    dir: OwnedFd,
    name: OsString,
    shown: PathBuf,
}

impl OutputFile {
    fn open(path: &Path) -> Result<OutputFile, WrapperError> {
        let name = path
            .file_name()
            .ok_or_else(|| WrapperError::Usage(format!("-o {}: not a file name", path.display())))?
            .to_owned();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // Walked one component at a time, following no link: an earlier sandbox that
        // could write on the way (`ws/out` made a link elsewhere) must not choose where
        // the allowlist is written.
        let dir = crate::commands::export::open_walked(parent, "learn", "directory for -o")?;
        Ok(OutputFile {
            dir,
            name,
            shown: path.to_owned(),
        })
    }

    /// Replaces the file whole: a new temporary file (O_EXCL, so nothing already there,
    /// symlink or not, is followed), synced, then renamed over the name (which replaces
    /// a symlink there rather than following it).
    fn replace(&self, text: &str) -> std::io::Result<()> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temporary = format!(
            ".{}.{}-{nanos:x}-{}.netbox-tmp",
            self.name.to_string_lossy(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let dir = &self.dir;
        let fd = nix::fcntl::openat(
            &self.dir,
            temporary.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_all());
        let renamed = written.and_then(|()| {
            nix::fcntl::renameat(dir, temporary.as_str(), dir, self.name.as_os_str())
                .map_err(std::io::Error::from)
        });
        if renamed.is_err() {
            let _ = nix::unistd::unlinkat(
                dir,
                temporary.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        renamed
    }
}

/// Writes the allowlist to the output file, or to stdout.
fn write(
    seen: &BTreeMap<(String, u16), Seen>,
    given: &Given,
    origin: &str,
    output: Option<OutputFile>,
) -> Result<(), WrapperError> {
    let text = render(seen, given, origin);
    let Some(output) = output else {
        return crate::output::print_stdout(&text);
    };
    output.replace(&text).map_err(|source| WrapperError::Path {
        path: output.shown.clone(),
        what: "learned allowlist",
        source,
    })?;
    let rules = seen
        .iter()
        .filter(|((host, _), s)| s.wanted > 0 && !non_public_ip(host))
        .count();
    crate::output::say(&format!(
        "netbox: wrote {rules} rule(s) to {}",
        output.shown.display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `net` record as the bridge writes it.
    fn net(host: &str, port: u16, decision: Verdict, reason: Reason, bytes_down: u64) -> Event {
        let mut attempt = bridge::log::Attempt::begin("s1".into(), bridge::log::Proto::HttpConnect);
        attempt.target = bridge::target::Target::parse_authority(&format!("{host}:{port}")).ok();
        attempt.decision = decision;
        attempt.reason = reason;
        let mut event = attempt.finish(bridge::log::End::Closed, 0, bytes_down);
        // A log is only text: a host the bridge would not have written is still read.
        event.host = Some(host.to_owned());
        event.port = Some(port);
        event
    }

    #[test]
    fn non_public_ip_literals_and_hostile_command_lines_stay_comments() {
        let records: Vec<Event> = vec![
            net("127.0.0.1", 6379, Verdict::Deny, Reason::NotAllowed, 0),
            net("169.254.169.254", 80, Verdict::Deny, Reason::NotAllowed, 0),
            net("192.0.2.1", 443, Verdict::Deny, Reason::NotAllowed, 0),
            net("8.8.8.8", 443, Verdict::Deny, Reason::NotAllowed, 0),
            // Other spellings of loopback and metadata, and a name in another case: as
            // the bridge reads them.
            net("127.1", 5432, Verdict::Deny, Reason::NotAllowed, 0),
            net("0x7f000001", 6380, Verdict::Deny, Reason::NotAllowed, 0),
            net(
                "::ffff:169.254.169.254",
                80,
                Verdict::Deny,
                Reason::NotAllowed,
                0,
            ),
            net("Registry.TEST.", 443, Verdict::Deny, Reason::NotAllowed, 0),
            net("bad host\nallow", 443, Verdict::Deny, Reason::NotAllowed, 0),
        ];
        let text = render(
            &from_refusals(&records),
            &Given::default(),
            "sh -c 'x'\nallow = [\"evil.test\"]",
        );
        #[derive(serde::Deserialize)]
        struct File {
            allow: Vec<String>,
        }
        let file: File = toml::from_str(&text).expect("valid TOML");
        assert_eq!(file.allow, ["8.8.8.8:443", "registry.test:443"], "{text}");
        assert!(text.contains("# \"127.0.0.1:5432\""), "{text}");
        assert!(text.contains("# \"127.0.0.1:6380\""), "{text}");
        assert!(!text.contains("bad host"), "{text}");
        assert!(text.contains("# \"127.0.0.1:6379\""), "{text}");
        assert!(text.contains("# \"169.254.169.254:80\""), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("allow")).count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn the_allowlist_is_sorted_commented_and_loads() {
        let records: Vec<Event> = vec![
            net("b.test", 443, Verdict::Allow, Reason::Learning, 10),
            net("a.test", 8443, Verdict::Allow, Reason::Learning, 5),
            net("a.test", 8443, Verdict::Allow, Reason::Learning, 5),
            net("inner.test", 80, Verdict::Deny, Reason::NonPublicAddress, 0),
            net(
                "netbox-probe-canary.invalid",
                443,
                Verdict::Deny,
                Reason::NotAllowed,
                0,
            ),
        ];
        let text = render(&from_learning(&records), &Given::default(), "a test");
        let a = text
            .find("\"a.test:8443\", # 2 attempts, 10 B down")
            .unwrap();
        let b = text.find("\"b.test:443\", # 1 attempt, 10 B down").unwrap();
        assert!(a < b, "{text}");
        assert!(text.contains("    # \"inner.test:80\""), "{text}");
        assert!(!text.contains("canary"), "{text}");
        #[derive(serde::Deserialize)]
        struct File {
            allow: Vec<String>,
        }
        let file: File = toml::from_str(&text).expect("valid TOML");
        assert_eq!(file.allow, ["a.test:8443", "b.test:443"]);
    }

    /// A name reached at a non-public address (a tool's internal registry with
    /// `--private-ok`) is written to `allow_private`, which replays it; a plain `allow`
    /// would be refused at that address.
    #[test]
    fn a_name_reached_at_a_private_address_replays_from_allow_private() {
        let mut internal = net("mirror.test", 443, Verdict::Allow, Reason::AllowedByRule, 7);
        internal.dialed = Some("10.1.2.3:443".parse().unwrap());
        let mut public = net("pub.test", 443, Verdict::Allow, Reason::Learning, 3);
        public.dialed = Some("8.8.8.8:443".parse().unwrap());
        let text = render(
            &from_learning(&[internal, public]),
            &Given::default(),
            "a test",
        );
        #[derive(serde::Deserialize)]
        struct File {
            allow: Vec<String>,
            allow_private: Vec<String>,
        }
        let file: File = toml::from_str(&text).expect("valid TOML");
        assert_eq!(file.allow, ["pub.test:443"], "{text}");
        assert_eq!(file.allow_private, ["mirror.test:443"], "{text}");
        // The advice for a name refused at its address is the run's own: allow_private.
        let refused = net("inner.test", 80, Verdict::Deny, Reason::NonPublicAddress, 0);
        let text = render(&from_learning(&[refused]), &Given::default(), "a test");
        assert!(text.contains("--allow-private inner.test:80"), "{text}");
        assert!(!text.contains("IP rule"), "{text}");
    }

    /// netbox's own fetches for `--allow-tool` (a workspace registry it refused to read,
    /// one it read) are not the command's attempts: nothing is learned of them. Control:
    /// the command's own attempt beside them is.
    #[test]
    fn netboxs_own_fetches_are_not_learned() {
        let mut fetched = net(
            "ws-registry.test",
            443,
            Verdict::Deny,
            Reason::NotAllowed,
            0,
        );
        fetched.proto = bridge::log::Proto::Fetch;
        let mut read = net(
            "own-registry.test",
            443,
            Verdict::Allow,
            Reason::Learning,
            9,
        );
        read.proto = bridge::log::Proto::Fetch;
        let records = vec![
            fetched,
            read,
            net("cmd.test", 443, Verdict::Allow, Reason::Learning, 1),
        ];
        let learned = from_learning(&records);
        let refused = from_refusals(&records);
        let keys: Vec<&(String, u16)> = learned.keys().collect();
        assert_eq!(keys, [&("cmd.test".to_owned(), 443)]);
        assert!(refused.is_empty(), "{:?}", refused.keys());
    }
}
