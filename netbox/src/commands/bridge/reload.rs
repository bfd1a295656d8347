//! Reloading a running `netbox bridge`'s policies: on SIGHUP, and with `--watch` when a
//! file they were read from changes.
//!
//! A reload reads everything again (the allowlists, or the tenants file and each tenant's
//! allowlists) and checks it whole before anything changes: a file that does not parse,
//! or a change only a restart can make (a listener, a connection budget, inspection
//! starting), refuses the reload, logs why (`policy_reload_failed`) and every policy
//! before it stays. Otherwise each session's policy is replaced at once, and each is
//! logged with its new hash (`policy_loaded`). Connections under way keep the policy they
//! started with (`bridge::conn::Conn::policy`); new connections and each new request of a
//! keep-alive connection get the new one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bridge::log::records::{PolicyLoaded, PolicyReloadFailed};
use bridge::session::tenants::Tenants;
use bridge::{EventLog, Policy, Session};

use crate::cli::PolicyArgs;
use crate::plan::tenants::TenantPlan;

/// How often `--watch` looks at the policy files.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What a reload replaces.
pub enum Served {
    /// A bridge without tenants: its one session, and the flags its policy came from.
    Alone {
        session: Arc<Session>,
        args: PolicyArgs,
    },
    /// A bridge with tenants: the session of the listeners where clients name their
    /// tenant, the tenants file, and each tenant's session and what only a restart
    /// changes (its own listeners and its connection budget).
    Tenants {
        gate: Arc<Session>,
        file: PathBuf,
        /// `--max-connections`, and a tenant's budget when the file names none.
        bridge_connections: usize,
        share: usize,
        tenants: BTreeMap<String, TenantState>,
    },
}

pub struct TenantState {
    pub session: Arc<Session>,
    pub listen: Vec<String>,
    pub max_connections: usize,
}

pub struct Reloader {
    served: Mutex<Served>,
    cwd: PathBuf,
    /// The bridge has a session CA: a new policy may inspect only if it does.
    can_inspect: bool,
    /// The bridge takes client certificates (`--client-ca`): a tenants file may name
    /// tenants by them only if it does.
    pub takes_certificates: bool,
    /// The last reload was refused: what is in force is not what the files say.
    refused: std::sync::atomic::AtomicBool,
}

/// A reload's new policies, checked, not yet in force.
enum Next {
    Alone(Box<Policy>),
    Tenants(BTreeMap<String, TenantPlan>),
}

impl Reloader {
    pub fn new(served: Served, cwd: PathBuf, can_inspect: bool) -> Reloader {
        Reloader {
            served: Mutex::new(served),
            cwd,
            can_inspect,
            takes_certificates: false,
            refused: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Logs the policy of every session, as loaded at start.
    pub fn record_start(&self, log: &EventLog) {
        for (tenant, session) in self.sessions() {
            record_loaded(log, "start", tenant.as_deref(), &session);
        }
    }

    /// Each session a reload replaces the policy of, with its tenant's name.
    pub fn sessions(&self) -> Vec<(Option<String>, Arc<Session>)> {
        match &*self.served() {
            Served::Alone { session, .. } => vec![(None, Arc::clone(session))],
            Served::Tenants { tenants, .. } => tenants
                .iter()
                .map(|(name, t)| (Some(name.clone()), Arc::clone(&t.session)))
                .collect(),
        }
    }

    /// Every file the policies were read from, as named (includes too), and the tenants
    /// file: what `--watch` looks at. After a refused reload, the directories holding them
    /// too, until a reload takes: a file created there (an include the refused reload could
    /// not find) changes its directory.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .sessions()
            .iter()
            .flat_map(|(_, s)| {
                let policy = s.policy();
                let mut files = policy.named_files().to_vec();
                files.extend_from_slice(policy.files());
                files
            })
            .collect();
        if let Served::Tenants { file, .. } = &*self.served() {
            files.push(file.clone());
        }
        if self.refused.load(std::sync::atomic::Ordering::Relaxed) {
            return with_directories(files);
        }
        files.sort();
        files.dedup();
        files
    }

    /// Reads every policy again and puts them in force, or refuses and keeps the old
    /// ones; either way logged and said on stderr. Blocking: files are read and tools
    /// may be asked.
    pub fn reload(&self, log: &EventLog, cause: &str) {
        let fetches = crate::plan::tools::fetch::Fetches::new();
        let outcome = self.load_next(&fetches).and_then(|next| self.apply(next));
        // What the load parsed, and the policies replaced or refused, are freed by now
        // (those a connection still holds, when it ends): see `serve`.
        crate::sys::memory::return_free_pages();
        // What the tools' registries were read for, whether or not it is in force now.
        let session = match &*self.served() {
            Served::Alone { session, .. } => Arc::clone(&session.id),
            Served::Tenants { gate, .. } => Arc::clone(&gate.id),
        };
        crate::plan::tools::fetch::log_records(log, &session, fetches.take_records());
        match outcome {
            Ok(()) => {
                self.refused
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                if let Some(metrics) = log.metrics() {
                    metrics.reload(true);
                }
                for (tenant, session) in self.sessions() {
                    record_loaded(log, cause, tenant.as_deref(), &session);
                }
                crate::output::say(&format!(
                    "netbox bridge: policies reloaded ({cause}); connections under way keep \
                     theirs"
                ));
            }
            Err(error) => {
                self.refused
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                if let Some(metrics) = log.metrics() {
                    metrics.reload(false);
                }
                let gate = match &*self.served() {
                    Served::Alone { session, .. } => Arc::clone(&session.id),
                    Served::Tenants { gate, .. } => Arc::clone(&gate.id),
                };
                let failed = PolicyReloadFailed {
                    cause: cause.to_owned(),
                    error: error.clone(),
                };
                log.record_as("policy_reload_failed", &gate, &failed);
                crate::output::say(&format!(
                    "netbox bridge: reload refused ({cause}), the policies before it stay: \
                     {error}"
                ));
            }
        }
    }

    /// The new policies, read and checked; the registry documents read go in `fetches`.
    fn load_next(&self, fetches: &crate::plan::tools::fetch::Fetches) -> Result<Next, String> {
        let (alone_args, tenants_file) = match &*self.served() {
            Served::Alone { args, .. } => (Some(args.clone()), None),
            Served::Tenants {
                file,
                bridge_connections,
                share,
                ..
            } => (None, Some((file.clone(), *bridge_connections, *share))),
        };
        let next = match (alone_args, tenants_file) {
            (Some(args), _) => {
                let untrusted = [self.cwd.clone()];
                let policy = crate::plan::policy::load_policy_with_tools(
                    &args,
                    &self.cwd,
                    &untrusted,
                    &[],
                    fetches,
                )
                .and_then(|(policy, _, _)| crate::plan::policy::refuse_secrets_at_bridge(policy))
                .map_err(|e| e.to_string())?;
                if policy.inspects() && !self.can_inspect {
                    return Err(
                        "the new policy inspects tunnels, and inspection starts only \
                                with the bridge (its CA, --ca-cert): restart it"
                            .into(),
                    );
                }
                Next::Alone(Box::new(policy))
            }
            (None, Some((file, bridge_connections, share))) => {
                let plans = crate::plan::tenants::load(
                    &file,
                    bridge_connections,
                    Some(share),
                    &self.cwd,
                    fetches,
                )
                .map_err(|e| e.to_string())?;
                if !self.takes_certificates && plans.iter().any(|p| !p.client_names.is_empty()) {
                    return Err(
                        "the tenants file names tenants by client_names, and this bridge \
                                takes no client certificates: restart it with --tls-cert, \
                                --tls-key and --client-ca"
                            .into(),
                    );
                }
                if !self.can_inspect && plans.iter().any(|p| p.policy.inspects()) {
                    return Err(
                        "a tenant's new policy inspects tunnels, and inspection starts only \
                         with the bridge (its CA, --ca-cert): restart it"
                            .into(),
                    );
                }
                let mut plans = plans;
                if let Served::Tenants { tenants, .. } = &*self.served() {
                    for plan in &mut plans {
                        if let Some(now) = tenants.get(&plan.name) {
                            plan.policy.keep_placeholders_of(&now.session.policy());
                        }
                    }
                }
                Next::Tenants(plans.into_iter().map(|p| (p.name.clone(), p)).collect())
            }
            (None, None) => return Err("nothing to reload".into()),
        };
        Ok(next)
    }

    /// Puts checked policies in force, all of them or, if one needs a restart, none.
    fn apply(&self, next: Next) -> Result<(), String> {
        let mut served = self.served();
        match (&mut *served, next) {
            (Served::Alone { session, .. }, Next::Alone(policy)) => {
                session.replace_policy(Arc::new(*policy));
                Ok(())
            }
            (
                Served::Tenants {
                    gate,
                    tenants: current,
                    ..
                },
                Next::Tenants(plans),
            ) => {
                for (name, plan) in &plans {
                    let listen: Vec<String> = plan.listen.iter().map(|a| a.to_string()).collect();
                    match current.get(name) {
                        Some(now) if now.listen != listen => {
                            return Err(format!(
                                "tenant {name}'s listeners changed: only a restart changes them"
                            ))
                        }
                        Some(now) if now.max_connections != plan.max_connections => {
                            return Err(format!(
                                "tenant {name}'s max_connections changed: only a restart \
                                 changes it"
                            ))
                        }
                        None if !listen.is_empty() => {
                            return Err(format!(
                                "new tenant {name} has listeners of its own: only a restart \
                                 adds them"
                            ))
                        }
                        _ => {}
                    }
                }
                for (name, now) in current.iter() {
                    if !plans.contains_key(name) && !now.listen.is_empty() {
                        return Err(format!(
                            "tenant {name}, which has listeners of its own, is gone: only a \
                             restart removes them"
                        ));
                    }
                }
                // Every check passed: build the new tenants whole, then swap.
                let (tenants, states) = build_tenants(plans.into_values(), &gate.id, current)?;
                gate.replace_tenants(Arc::new(tenants));
                *current = states;
                Ok(())
            }
            _ => Err("the reload read another kind of policy than the bridge serves".into()),
        }
    }
}

/// The tenants named by checked `plans`, and each as a reload sees it. A tenant in
/// `current` keeps its session (its id, its places); a new one gets a session of its own,
/// `SESSION/NAME`. Every session's policy is replaced only once all of them are built, so
/// a mistake (two tenants with one secret) changes nothing.
pub fn build_tenants(
    plans: impl IntoIterator<Item = TenantPlan>,
    session_id: &str,
    current: &BTreeMap<String, TenantState>,
) -> Result<(Tenants, BTreeMap<String, TenantState>), String> {
    let mut tenants = Tenants::default();
    let mut states = BTreeMap::new();
    let mut policies = Vec::new();
    for plan in plans {
        let session = match current.get(&plan.name) {
            Some(now) => Arc::clone(&now.session),
            None => Arc::new(Session::of_tenant(
                format!("{session_id}/{}", plan.name),
                Arc::new(Policy::deny_all()),
                plan.max_connections,
            )),
        };
        policies.push((Arc::clone(&session), plan.policy));
        tenants.add(&plan.name, Arc::clone(&session), plan.digests)?;
        tenants.add_client_names(&plan.name, &plan.client_names)?;
        states.insert(
            plan.name,
            TenantState {
                session,
                listen: plan.listen.iter().map(|a| a.to_string()).collect(),
                max_connections: plan.max_connections,
            },
        );
    }
    for (session, policy) in policies {
        session.replace_policy(Arc::new(policy));
    }
    Ok((tenants, states))
}

fn record_loaded(log: &EventLog, cause: &str, tenant: Option<&str>, session: &Session) {
    let policy = session.policy();
    let loaded = PolicyLoaded {
        cause: cause.to_owned(),
        tenant: tenant.map(str::to_owned),
        policy_files: policy.files().to_vec(),
        policy_sha256: policy.sha256_hex(),
        allow_rules: policy.allow_count(),
    };
    log.record_as("policy_loaded", &session.id, &loaded);
}

/// SIGHUP, caught from now on (its default action would end the bridge).
pub fn catch_hangup() -> std::io::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
}

/// Reloads on each `hangup`, and with `watch` when a policy file changes, until the
/// bridge stops (the task is aborted). One reload at a time.
pub async fn reload_when_asked(
    reloader: Arc<Reloader>,
    log: Arc<EventLog>,
    watch: bool,
    mut hangup: tokio::signal::unix::Signal,
) {
    let mut seen = fingerprint(&reloader.files());
    let mut ticks = tokio::time::interval(WATCH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let cause = tokio::select! {
            _ = hangup.recv() => "signal",
            _ = ticks.tick(), if watch => {
                let now = fingerprint(&reloader.files());
                if now == seen {
                    continue;
                }
                "watch"
            }
        };
        // Taken before the reload reads anything: a file changed while it reads is a change
        // the next look sees. A broken file is reported once, not every second.
        // Their directories too: a refused reload adds them to the list, and one taken only
        // after the reload would miss a file created while it ran (the missing include).
        let before = fingerprint(&with_directories(reloader.files()));
        let (r, l) = (Arc::clone(&reloader), Arc::clone(&log));
        // A task that panicked reloaded nothing: the policies before it stay.
        let _ = tokio::task::spawn_blocking(move || r.reload(&l, cause)).await;
        // What is looked at from now on, each as it was before the reload read it: a
        // file that changed meanwhile differs at the next look. Files new to the list
        // (a new include, the directories after a refusal) as they are now.
        seen = fingerprint(&reloader.files())
            .into_iter()
            .map(
                |(path, now)| match before.iter().find(|(p, _)| *p == path) {
                    Some((_, then)) => (path, then.clone()),
                    None => (path, now),
                },
            )
            .collect();
    }
}

/// `files` and the directories holding them.
fn with_directories(mut files: Vec<PathBuf>) -> Vec<PathBuf> {
    let directories: Vec<PathBuf> = files
        .iter()
        .filter_map(|f| f.parent().map(PathBuf::from))
        .collect();
    files.extend(directories);
    files.sort();
    files.dedup();
    files
}

/// What identifies each file's content cheaply: its identity and size and change time,
/// the link's too (a symlink pointed elsewhere), or nothing for a file that is gone.
fn fingerprint(files: &[PathBuf]) -> Vec<(PathBuf, [Option<FileStamp>; 2])> {
    use std::os::unix::fs::MetadataExt;
    let stamp = |meta: std::io::Result<std::fs::Metadata>| {
        meta.ok().map(|m| FileStamp {
            device: m.dev(),
            inode: m.ino(),
            size: m.size(),
            modified: (m.mtime(), m.mtime_nsec()),
            changed: (m.ctime(), m.ctime_nsec()),
        })
    };
    files
        .iter()
        .map(|path| {
            let link = stamp(std::fs::symlink_metadata(path));
            (path.clone(), [link, stamp(std::fs::metadata(path))])
        })
        .collect()
}

#[derive(PartialEq, Clone)]
struct FileStamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}
