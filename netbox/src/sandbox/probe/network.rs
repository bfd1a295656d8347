//! The network rows: the empty namespace and the cut, host sockets (and those decided at
//! connect), and the egress policy through the bridge with its control.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};

use bridge::log::records::{Check, Outcome};

use super::capture::{read_dns_answer, send_dns_query};
use super::filesystem::probe_name;
use super::verdict::{check, refused, succeeded};
use super::{ProbeInput, PROBE_IO_TIMEOUT};

pub(super) fn network_namespace(input: &ProbeInput, egress: &PendingEgress) -> Check {
    let connected = match &egress.health {
        Ok(_) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    };
    let control = vec![succeeded(
        format!("connect to the bridge at {}", input.proxy),
        connected,
    )];
    check("empty network namespace", no_way_out(input), control)
}

/// After `--fetch`'s cut: the same empty namespace, and now the bridge's port refuses too,
/// while a listener of the probe's own on loopback answers (so "refused" is not loopback
/// itself being broken).
pub(super) fn network_cut(input: &ProbeInput, proxy_v6: bool) -> Check {
    let mut forbidden = no_way_out(input);
    forbidden.push(refused(
        format!("connect to the closed bridge port {}", input.proxy),
        TcpStream::connect_timeout(&input.proxy, PROBE_IO_TIMEOUT).map(drop),
        &[libc::ECONNREFUSED],
    ));
    let v6_proxy = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, input.proxy.port()));
    // Where the bridge listened on ::1 it must refuse there too; without IPv6 on lo, ::1
    // cannot be reached at all, which is as good.
    let v6_refusals: &[i32] = if proxy_v6 {
        &[libc::ECONNREFUSED]
    } else {
        &[libc::ECONNREFUSED, libc::EADDRNOTAVAIL, libc::ENETUNREACH]
    };
    forbidden.push(refused(
        format!("connect to the closed bridge port {v6_proxy}"),
        TcpStream::connect_timeout(&v6_proxy, PROBE_IO_TIMEOUT).map(drop),
        v6_refusals,
    ));
    // Capture's listeners closed with the bridge; its namespace stays (pid 1 holds it), so
    // what it carried is refused there at once (IPv6 too, where it is up); and the DNS
    // stub is closed.
    if let Some(capture) = input.capture {
        use bridge::session::addresses::{PROBE_ADDRESS, PROBE_ADDRESS_V6};
        let mut carried = vec![SocketAddr::from((PROBE_ADDRESS, capture.port))];
        if crate::sys::netdev::ipv6_up() {
            carried.push(SocketAddr::from((PROBE_ADDRESS_V6, capture.port)));
        }
        for captured in carried {
            forbidden.push(refused(
                format!("connect to {captured}, which capture carried before the cut"),
                TcpStream::connect_timeout(&captured, PROBE_IO_TIMEOUT).map(drop),
                &[libc::ECONNREFUSED],
            ));
        }
        let stub = SocketAddr::from((crate::sandbox::DNS_STUB, 53));
        forbidden.push(refused(
            format!("ask the DNS stub at {stub}, closed with the bridge"),
            send_dns_query(bridge::session::addresses::PROBE_NAME)
                .and_then(read_dns_answer)
                .map(drop),
            &[libc::ECONNREFUSED],
        ));
        forbidden.push(refused(
            format!("connect to the DNS stub at {stub} over TCP"),
            TcpStream::connect_timeout(&stub, PROBE_IO_TIMEOUT).map(drop),
            &[libc::ECONNREFUSED],
        ));
    }
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let answered =
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).and_then(|listener| {
            let addr = listener.local_addr()?;
            TcpStream::connect_timeout(&addr, PROBE_IO_TIMEOUT)?;
            listener.accept().map(drop)
        });
    let control = vec![succeeded(
        "connect to a loopback listener of the probe's own".into(),
        answered,
    )];
    check("network cut", forbidden, control)
}

/// The attempts that must find no way out of the namespace: an interface other than lo,
/// a route off the machine, the parent's listener on host loopback.
pub(super) fn no_way_out(input: &ProbeInput) -> Vec<Outcome> {
    // Some hosts give every new namespace down fallback tunnel devices (sit0, tunl0);
    // what must not exist is an interface that is up, other than lo.
    let up: Result<Vec<String>, _> = nix::ifaddrs::getifaddrs().map(|addrs| {
        let mut names: Vec<String> = addrs
            .filter(|a| a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP))
            .map(|a| a.interface_name)
            .collect();
        names.sort();
        names.dedup();
        names
    });
    // With capture, its link leads to netbox's listeners alone (the capture row proves
    // what is at its far end).
    let link = crate::sandbox::capture::LINK_NAME;
    let expected: &[&str] = if input.capture.is_some() {
        &["lo", link]
    } else {
        &["lo"]
    };
    let only_lo = Outcome {
        attempt: if input.capture.is_some() {
            format!("find an interface that is up, other than lo and {link}")
        } else {
            "find an interface that is up, other than lo".into()
        },
        ok: up.as_ref().is_ok_and(|names| names == expected),
        result: match &up {
            Ok(names) => format!("up: {}", names.join(",")),
            Err(e) => e.to_string(),
        },
    };
    let routes = off_box_routes(input.capture.is_some());
    let no_routes = Outcome {
        attempt: "find a route that leaves the machine".into(),
        ok: routes.as_ref().is_ok_and(Vec::is_empty),
        result: match &routes {
            Ok(r) if r.is_empty() => "none".into(),
            Ok(r) => r.join("; "),
            Err(e) => format!("cannot read routes: {e}"),
        },
    };
    let host = refused(
        format!("connect to host loopback listener {}", input.host_listener),
        TcpStream::connect_timeout(&input.host_listener, PROBE_IO_TIMEOUT).map(drop),
        &[libc::ECONNREFUSED],
    );
    vec![only_lo, no_routes, host]
}

/// Routes that use an interface other than `lo` (and with capture, its link).
pub(super) fn off_box_routes(capture: bool) -> std::io::Result<Vec<String>> {
    let leaves =
        |iface: &str| iface != "lo" && !(capture && iface == crate::sandbox::capture::LINK_NAME);
    let mut found = Vec::new();
    let v4 = std::fs::read_to_string("/proc/net/route")?;
    for line in v4.lines().skip(1) {
        if let Some(iface) = line.split_whitespace().next() {
            if leaves(iface) {
                found.push(line.to_owned());
            }
        }
    }
    if let Ok(v6) = std::fs::read_to_string("/proc/net/ipv6_route") {
        for line in v6.lines() {
            if let Some(iface) = line.split_whitespace().last() {
                if leaves(iface) {
                    found.push(line.to_owned());
                }
            }
        }
    }
    Ok(found)
}

pub(super) fn host_sockets(input: &ProbeInput) -> Check {
    use std::os::unix::net::{UnixListener, UnixStream};
    // Abstract sockets belong to the network namespace: the host's are out of reach. (Host
    // sockets with a path are decided at each connect: `unix_sockets_at_connect`.)
    let forbidden = vec![refused(
        "connect to the host's abstract socket @/org/freedesktop/systemd1/private".into(),
        connect_abstract(b"/org/freedesktop/systemd1/private"),
        &[libc::ECONNREFUSED],
    )];
    // Control: a socket of the sandbox's own, in its temp root, works.
    let own = input.temp_dir.join(format!("{}.sock", probe_name()));
    let control = vec![succeeded(
        format!("connect to a socket of our own at {}", own.display()),
        UnixListener::bind(&own).and_then(|listener| {
            let connected = UnixStream::connect(&own).map(drop);
            drop(listener);
            let _ = std::fs::remove_file(&own);
            connected
        }),
    )];
    check("host unix sockets", forbidden, control)
}

/// A Unix socket listening at a path in the sandbox's temp root, bound outside the
/// sandbox's network namespace (by pid 1's mounting thread, before it joins it): to the
/// sandbox, a host socket, which the kernel alone would connect to.
pub struct ForeignSocket {
    pub(super) path: PathBuf,
    pub(super) _listener: std::os::unix::net::UnixListener,
}

impl ForeignSocket {
    pub fn bind(temp_dir: &Path) -> Option<ForeignSocket> {
        let path = temp_dir.join(format!("{}-outside.sock", probe_name()));
        let listener = std::os::unix::net::UnixListener::bind(&path).ok()?;
        Some(ForeignSocket {
            path,
            _listener: listener,
        })
    }
}

impl Drop for ForeignSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Unix sockets decided at connect (supervise/unixsockets.rs), under the filter: a socket
/// bound outside the sandbox's network namespace, listening, is refused; one the sandbox
/// binds itself connects. Both are gone before CMD starts.
pub fn unix_sockets_at_connect(input: &ProbeInput, foreign: Option<ForeignSocket>) -> Check {
    use std::os::unix::net::{UnixListener, UnixStream};
    let forbidden = vec![match &foreign {
        Some(foreign) => refused(
            format!(
                "connect to {}, a socket listening outside the sandbox's network namespace",
                foreign.path.display()
            ),
            UnixStream::connect(&foreign.path).map(drop),
            &[libc::ECONNREFUSED],
        ),
        None => Outcome {
            attempt: "bind a socket outside the sandbox's network namespace".into(),
            ok: false,
            result: "could not be made".into(),
        },
    }];
    drop(foreign);
    let own = input.temp_dir.join(format!("{}-own.sock", probe_name()));
    let control = vec![succeeded(
        format!(
            "connect to a socket of the sandbox's own at {}",
            own.display()
        ),
        UnixListener::bind(&own).and_then(|listener| {
            let connected = UnixStream::connect(&own).map(drop);
            drop(listener);
            let _ = std::fs::remove_file(&own);
            connected
        }),
    )];
    check("unix sockets decided at connect", forbidden, control)
}

/// Connects to each allowed socket once, under the filter, and closes at once: what netbox
/// decided is its own check ("allowed sockets"); the host's answer is the service's (it
/// may not be running), so nothing is judged here.
pub fn connect_allowed_sockets(input: &ProbeInput) {
    for path in &input.allowed_sockets {
        let _ = std::os::unix::net::UnixStream::connect(path);
    }
}

pub(super) fn connect_abstract(name: &[u8]) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    std::os::unix::net::UnixStream::connect_addr(&addr).map(drop)
}

/// The egress check's two requests, sent and not yet answered.
pub(super) struct PendingEgress {
    pub(super) canary: std::io::Result<TcpStream>,
    pub(super) health: std::io::Result<TcpStream>,
}

pub(super) fn start_egress(input: &ProbeInput) -> PendingEgress {
    PendingEgress {
        canary: send_request(
            input.proxy,
            &format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", input.canary),
        ),
        health: send_request(
            input.proxy,
            &format!(
                "GET {} HTTP/1.1\r\nHost: netbox\r\nConnection: close\r\n\r\n",
                bridge::HEALTH_PATH
            ),
        ),
    }
}

pub(super) fn finish_egress(input: &ProbeInput, pending: PendingEgress) -> Check {
    let canary = pending.canary.and_then(read_answer);
    let health = pending.health.and_then(read_answer);
    egress_verdict(
        &input.canary,
        input.refusal_status,
        input.proxy,
        canary,
        health,
    )
}

/// The egress row's verdict from the bridge's two answers: the canary refused with the
/// refusal status and said to be refused by policy, and the health control answered 200.
fn egress_verdict(
    canary_target: &str,
    refusal_status: u16,
    proxy: SocketAddr,
    canary: std::io::Result<String>,
    health: std::io::Result<String>,
) -> Check {
    let want = format!("HTTP/1.1 {refusal_status} ");
    // A refusal by policy, said so: a bridge that failed otherwise (a remote one that
    // could not be reached, or that let the canary through to its failed lookup) answers
    // with the same status and another reason.
    let reason = canary
        .as_ref()
        .ok()
        .and_then(|r| header_value(r, "x-netbox-reason"));
    let forbidden = vec![Outcome {
        attempt: format!("CONNECT {canary_target} through the bridge"),
        ok: canary.as_ref().is_ok_and(|r| r.starts_with(&want)) && reason == Some("policy"),
        result: match reason {
            Some(reason) => format!("{} ({reason})", status_line(&canary)),
            None => status_line(&canary),
        },
    }];
    let control = vec![Outcome {
        attempt: format!("GET {} from the bridge at {}", bridge::HEALTH_PATH, proxy),
        ok: health
            .as_ref()
            .is_ok_and(|r| r.starts_with("HTTP/1.1 200 ")),
        result: status_line(&health),
    }];
    check("egress policy", forbidden, control)
}

/// A header's value in an HTTP answer's head (the first of that name).
pub(super) fn header_value<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer
        .split("\r\n\r\n")
        .next()?
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(field, _)| field.trim().eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

pub(super) fn status_line(result: &std::io::Result<String>) -> String {
    match result {
        Ok(text) => text.lines().next().unwrap_or("(empty)").to_owned(),
        Err(e) => e.to_string(),
    }
}

/// Connects and sends a request.
pub(super) fn send_request(addr: SocketAddr, request: &str) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_IO_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_IO_TIMEOUT))?;
    stream.write_all(request.as_bytes())?;
    Ok(stream)
}

/// Reads the answer until the bridge closes (or resets) the connection.
pub(super) fn read_answer(mut stream: TcpStream) -> std::io::Result<String> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset && !answer.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> std::io::Result<String> {
        Ok(text.to_owned())
    }

    fn verdict(canary: std::io::Result<String>, health: std::io::Result<String>) -> bool {
        let proxy = SocketAddr::from(([127, 0, 0, 1], 3128));
        egress_verdict("canary.invalid:443", 502, proxy, canary, health).passed
    }

    const REFUSED: &str = "HTTP/1.1 502 Bad Gateway\r\nX-Netbox-Reason: policy\r\n\r\nrefused";
    const HEALTHY: &str = "HTTP/1.1 200 OK\r\n\r\nok";

    #[test]
    fn the_egress_row_passes_only_on_a_refusal_by_policy_beside_a_healthy_bridge() {
        assert!(verdict(answer(REFUSED), answer(HEALTHY)));
        // Refused for another reason (a remote bridge that could not be reached).
        let other = "HTTP/1.1 502 Bad Gateway\r\nX-Netbox-Reason: upstream_unreachable\r\n\r\n";
        assert!(!verdict(answer(other), answer(HEALTHY)));
        // Let through, or refused with another status.
        assert!(!verdict(
            answer("HTTP/1.1 200 Connection established\r\n\r\n"),
            answer(HEALTHY)
        ));
        let forbidden = "HTTP/1.1 403 Forbidden\r\nX-Netbox-Reason: policy\r\n\r\n";
        assert!(!verdict(answer(forbidden), answer(HEALTHY)));
        // The control: a bridge that answers nothing proves nothing.
        let reset = || Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!verdict(answer(REFUSED), reset()));
        assert!(!verdict(reset(), answer(HEALTHY)));
    }

    #[test]
    fn a_header_is_found_by_name_in_the_head_only() {
        let head = "HTTP/1.1 502 x\r\nX-NETBOX-REASON:  policy \r\n\r\nX-Netbox-Reason: body";
        assert_eq!(header_value(head, "x-netbox-reason"), Some("policy"));
        assert_eq!(
            header_value(
                "HTTP/1.1 502 x\r\n\r\nx-netbox-reason: no",
                "x-netbox-reason"
            ),
            None
        );
        assert_eq!(
            status_line(&answer("HTTP/1.1 200 OK\r\nA: b")),
            "HTTP/1.1 200 OK"
        );
    }
}
