//! The run's start: pid 1's listeners received, the bridge serving them, the write watch
//! started, netbox kept to one CPU until the probe has reported.

use std::net::TcpListener;
use std::sync::Arc;

use bridge::{Listener, Session, SessionListener, Stderr};

use super::{setup_failed, Lent, Pid1, Settings, StartUp, Supervisor};
use crate::error::WrapperError;
use crate::sandbox::handshake::{self, SyncMsg};
use crate::supervise::bridge_task::BridgeTask;
use crate::supervise::stage::Stage;
use crate::supervise::writewatch::{WatchContext, WriteWatch};
use crate::supervise::{check_host_listener_answers, SandboxGuard, Supervised};

impl<'a> Supervisor<'a> {
    /// Receives the sandbox's listeners and starts serving them, with the write watcher.
    pub(in crate::supervise) async fn start(
        run: Supervised<'a>,
    ) -> Result<Supervisor<'a>, WrapperError> {
        let Supervised {
            placeholders,
            resolved_fds,
            refusal_status,
            inspector,
            upstream_proxy,
            mut sandbox,
            timeout,
            fetch,
            channel,
            session,
            log,
            log_path,
            host_listener,
            stderr,
            probe_report,
            protected,
            read_only,
            allow_nested_userns,
            allowed_sockets,
            reap_pid1,
            cpus,
            tally,
            cpu_cgroup_tasks,
            capture,
            git_watch,
            grown,
            own_checks,
        } = run;
        let channel = handshake::AsyncChannel::new(channel).map_err(WrapperError::Spawn)?;
        let exited = sandbox
            .pidfd
            .try_clone()
            .and_then(crate::sys::fd::register_readable)
            .map_err(WrapperError::Spawn)?;
        // The control half of the host-loopback check (the listener answers us), while the
        // sandbox sets up and netbox would only wait.
        check_host_listener_answers(&host_listener)?;

        let (listeners, pid1_cpu) =
            receive_listeners(&channel, &mut sandbox, &session, capture.as_ref()).await?;
        // Started now, so its thread is up when the probe's first write waits for it.
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = WriteWatch::spawn(WatchContext {
            log: Arc::clone(&log),
            session: Arc::clone(&session),
            capture: capture.clone(),
            cut: Arc::clone(&cut),
            pid1: u32::try_from(sandbox.pid.as_raw()).unwrap_or(0),
            protected,
            read_only,
            notices: stderr != Stderr::Quiet,
            cpu_cgroup_tasks: cpu_cgroup_tasks.clone(),
            share_root: !allow_nested_userns,
            allowed_sockets: allowed_sockets.clone(),
        })
        .ok();
        // netbox keeps to one CPU until the probe has reported, apart from pid 1's, so
        // that the sandbox's messages and probe connections cannot queue it behind the
        // sandbox (cpu.rs). As soon as nothing can fail any more and the watcher's thread
        // is started: pid 1 has just yielded its CPU to netbox (and may soon want it
        // back). No thread starts while it lasts (a thread would inherit it; `allow`
        // restores this one only).
        let pinned_from = cpus.map(|(allowed, cpu)| {
            crate::cpu::stay_on(crate::cpu::apart_from(&allowed, cpu, pid1_cpu));
            allowed
        });
        let bridge = BridgeTask::serve(
            listeners,
            Arc::clone(&log),
            bridge::BridgeConfig {
                refusal_status,
                inspector,
                upstream_proxy,
                ..bridge::BridgeConfig::default()
            },
        );
        Ok(Supervisor {
            stage: Stage::SettingUp,
            failure: None,
            first_report: None,
            bridge,
            watch,
            cut,
            terminal: None,
            cancelled: None,
            timed_out: false,
            git_watch,
            pid1: Pid1 {
                sandbox,
                exited,
                channel_open: true,
                channel,
                reap_pid1,
            },
            lent: Lent {
                placeholders,
                probe_report,
                tally,
                grown,
            },
            settings: Settings {
                timeout,
                fetch,
                session,
                log_path,
                log,
                host_listener,
                stderr,
            },
            start_up: StartUp {
                pinned_from,
                resolved_fds: Some(resolved_fds),
                cpu_cgroup_tasks,
                own_checks,
            },
        })
    }
}

/// The sandbox's listeners, handed over by pid 1 once it has set up (or why it could not):
/// the proxy's, capture's, and with capture the DNS stub's UDP and TCP sockets last, each
/// served under `session`. Also the CPU pid 1 runs on.
pub(super) async fn receive_listeners(
    channel: &handshake::AsyncChannel,
    sandbox: &mut SandboxGuard,
    session: &Arc<Session>,
    capture: Option<&crate::plan::capture::CapturePlan>,
) -> Result<(Vec<SessionListener>, Option<usize>), WrapperError> {
    let (listener_fds, proxies, capture_ports, pid1_cpu) = match channel.recv().await {
        Ok(Some((
            SyncMsg::Listeners {
                cpu,
                count,
                capture_ports,
            },
            fds,
        ))) if count > 0
            && fds.len()
                == count + capture_ports.len() + 2 * usize::from(!capture_ports.is_empty()) =>
        {
            (fds, count, capture_ports, cpu)
        }
        Ok(Some((SyncMsg::SetupFailed { step, detail, hint }, _))) => {
            sandbox.reap();
            return Err(setup_failed(step, detail, hint));
        }
        other => {
            return Err(WrapperError::Handshake(format!(
                "expected the proxy listeners, got {other:?}"
            )));
        }
    };
    let mut listeners = Vec::new();
    let mut fds = listener_fds.into_iter();
    for (at, fd) in fds.by_ref().take(proxies + capture_ports.len()).enumerate() {
        let std_listener = TcpListener::from(fd);
        std_listener
            .set_nonblocking(true)
            .map_err(WrapperError::Spawn)?;
        let listener =
            tokio::net::TcpListener::from_std(std_listener).map_err(WrapperError::Spawn)?;
        listeners.push(SessionListener {
            session: Arc::clone(session),
            listener: if at < proxies {
                Listener::Tcp(listener)
            } else {
                Listener::Captured(listener)
            },
        });
    }
    let dns_ports = capture.map(|c| c.ports.clone()).unwrap_or_default();
    // With capture, the DNS stub's sockets come last: UDP, then TCP.
    if let (Some(udp), Some(tcp)) = (fds.next(), fds.next()) {
        let udp = std::net::UdpSocket::from(udp);
        udp.set_nonblocking(true).map_err(WrapperError::Spawn)?;
        let udp = tokio::net::UdpSocket::from_std(udp).map_err(WrapperError::Spawn)?;
        let tcp = TcpListener::from(tcp);
        tcp.set_nonblocking(true).map_err(WrapperError::Spawn)?;
        let tcp = tokio::net::TcpListener::from_std(tcp).map_err(WrapperError::Spawn)?;
        listeners.push(SessionListener {
            session: Arc::clone(session),
            listener: Listener::Dns(udp, dns_ports.clone()),
        });
        listeners.push(SessionListener {
            session: Arc::clone(session),
            listener: Listener::DnsTcp(tcp, dns_ports),
        });
    }
    Ok((listeners, pid1_cpu))
}
