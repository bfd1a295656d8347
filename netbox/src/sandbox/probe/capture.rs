//! The capture row: a connection to an address nobody has reaches netbox, the DNS stub
//! answers an allowed name and refuses the rest, and capture's namespace leads nowhere.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};

use bridge::log::records::{Check, Outcome};

use super::verdict::{check, refused, succeeded};
use super::{CaptureProbe, ProbeInput, PROBE_IO_TIMEOUT};

/// The control is the probe's own connection to the bridge, made for the egress check: a
/// connection of its own would cost a connect here and an accept in netbox.
/// Capture: a connection to an address that is no one's (the first of the DNS stub's range,
/// which it never hands out) lands on netbox's listener, which refuses it without a byte
/// (it is never dialled); a port capture does not listen on refuses at once; the DNS stub
/// answers the canary's name with NXDOMAIN. Nothing else could have answered: the
/// namespace has only loopback, and the host's loopback stays unreachable (the network
/// row).
// Whole: one row's attempts in order (IPv4, IPv6, the DNS stub, a closed port), each
// outcome pushed as it is made.
pub(super) fn capture_check(
    capture: CaptureProbe,
    pending: PendingCapture,
    namespace: Option<&crate::sys::rtnl::Rtnl>,
) -> Check {
    use bridge::session::addresses::PROBE_ADDRESS;
    let captured = SocketAddr::from((PROBE_ADDRESS, capture.port));
    // Taken and reset so soon that the connect itself may see the reset: as good.
    let reached = match pending.v4 {
        Ok(mut s) => s.set_read_timeout(Some(PROBE_IO_TIMEOUT)).and_then(|()| {
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(0) => Ok(()),
                Ok(n) => Err(std::io::Error::other(format!("{n} bytes came back"))),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
                Err(e) => Err(e),
            }
        }),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
        Err(e) => Err(e),
    };
    let refused_by_netbox = Outcome {
        attempt: format!("connect to {captured}, an address no one has, and be answered"),
        ok: reached.is_ok(),
        result: match &reached {
            Ok(()) => "taken by netbox's listener and refused, nothing answered".into(),
            Err(e) => format!("not captured: {e}"),
        },
    };
    let mut forbidden = vec![refused_by_netbox];
    // IPv6 too, where it is up (the stub hands out IPv6 addresses then).
    if let Some(v6) = pending.v6 {
        let captured =
            SocketAddr::from((bridge::session::addresses::PROBE_ADDRESS_V6, capture.port));
        let reached = match v6 {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
            Err(e) => Err(e),
        };
        forbidden.push(Outcome {
            attempt: format!("connect to {captured}, an address no one has"),
            ok: reached.is_ok(),
            result: match &reached {
                Ok(()) => "taken by netbox's listener".into(),
                Err(e) => format!("not captured: {e}"),
            },
        });
    }
    let conf = std::fs::read_to_string("/etc/resolv.conf");
    let stub_line = format!("nameserver {}", crate::sandbox::DNS_STUB);
    let nameservers: Vec<String> = conf
        .as_ref()
        .map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|l| l.starts_with("nameserver"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    forbidden.push(Outcome {
        attempt: "read /etc/resolv.conf, which must name the DNS stub alone".into(),
        ok: nameservers == [stub_line],
        result: match &conf {
            Ok(_) => nameservers.join("; "),
            Err(e) => e.to_string(),
        },
    });
    let closed = SocketAddr::from((PROBE_ADDRESS, capture.closed_port));
    let closed_port = refused(
        format!("connect to {closed}, a port capture does not listen on"),
        TcpStream::connect_timeout(&closed, PROBE_IO_TIMEOUT).map(drop),
        &[libc::ECONNREFUSED],
    );
    let name = pending.canary_name;
    let answer = pending
        .canary
        .and_then(read_dns_answer)
        .map(|(code, _)| code);
    let dns = Outcome {
        attempt: format!("resolve {name}, which the policy denies, in the sandbox's DNS"),
        ok: matches!(answer, Ok(3)),
        result: match answer {
            Ok(3) => "NXDOMAIN".into(),
            Ok(code) => format!("answered with code {code}"),
            Err(e) => e.to_string(),
        },
    };
    forbidden.extend([closed_port, dns, capture_namespace_leads_nowhere(namespace)]);
    let probe_name = bridge::session::addresses::PROBE_NAME;
    let answered = pending
        .probe_name
        .and_then(read_dns_answer)
        .map(|answer| address_in(&answer));
    let mut control = vec![Outcome {
        attempt: format!("resolve {probe_name}, which the stub always answers"),
        ok: matches!(answered, Ok(Some(a)) if a == PROBE_ADDRESS),
        result: match answered {
            Ok(Some(a)) => format!("answered {a}"),
            Ok(None) => "no address in the answer".into(),
            Err(e) => e.to_string(),
        },
    }];
    // Capture's listeners are not in this namespace: a port they carry is still free here,
    // at every address.
    if let Some(port) = capture.unprivileged_port {
        let every = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
        #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
        let listened = std::net::TcpListener::bind(every)
            .or_else(|_| std::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))));
        control.push(succeeded(
            format!("listen at every address on port {port}, which capture carries"),
            listened.map(drop),
        ));
    }
    check("capture", forbidden, control)
}

/// What capture's link leads to: a namespace with nothing up but `lo` and the link's far
/// end. No way leads out of it: every address is local to it, and an interface is the only
/// way anywhere else.
pub(super) fn capture_namespace_leads_nowhere(
    namespace: Option<&crate::sys::rtnl::Rtnl>,
) -> Outcome {
    use crate::sandbox::capture::FAR_LINK_NAME;
    let attempt =
        format!("find an interface up other than lo and {FAR_LINK_NAME} in capture's namespace");
    let up = match namespace {
        Some(namespace) => namespace.links().map(|links| {
            links
                .into_iter()
                .filter(|l| l.up)
                .map(|l| l.name)
                .collect::<Vec<String>>()
        }),
        None => Err(std::io::Error::other("it cannot be read")),
    };
    Outcome {
        attempt,
        ok: up
            .as_ref()
            .is_ok_and(|up| up.iter().all(|name| name == "lo" || name == FAR_LINK_NAME)),
        result: match up {
            Ok(up) => format!("up: {}", up.join(",")),
            Err(e) => format!("cannot read it: {e}"),
        },
    }
}

/// Capture's round trips, started with the probe so that netbox answers them while the
/// local checks run: a connection to a captured port of an address no one has (IPv6 too,
/// where it is up), and the DNS stub asked for the canary's name and the probe's own.
pub(super) struct PendingCapture {
    pub(super) v4: std::io::Result<TcpStream>,
    pub(super) v6: Option<std::io::Result<TcpStream>>,
    pub(super) canary_name: String,
    pub(super) canary: std::io::Result<std::net::UdpSocket>,
    pub(super) probe_name: std::io::Result<std::net::UdpSocket>,
}

pub(super) fn start_capture(input: &ProbeInput, capture: CaptureProbe) -> PendingCapture {
    use bridge::session::addresses::{PROBE_ADDRESS, PROBE_ADDRESS_V6, PROBE_NAME};
    let connect = |ip: std::net::IpAddr| {
        TcpStream::connect_timeout(&SocketAddr::new(ip, capture.port), PROBE_IO_TIMEOUT)
    };
    let ipv6 = crate::sys::netdev::ipv6_up();
    let canary_name = input
        .canary
        .rsplit_once(':')
        .map_or(input.canary.as_str(), |(host, _)| host)
        .to_owned();
    PendingCapture {
        v4: connect(PROBE_ADDRESS.into()),
        v6: ipv6.then(|| connect(PROBE_ADDRESS_V6.into())),
        canary: send_dns_query(&canary_name),
        canary_name,
        probe_name: send_dns_query(PROBE_NAME),
    }
}

/// The IPv4 address a DNS answer's one record carries (the last four bytes of a NOERROR
/// answer with one record).
pub(super) fn address_in((code, answer): &(u8, Vec<u8>)) -> Option<std::net::Ipv4Addr> {
    let records = answer
        .get(6..8)
        .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
    (*code == 0 && records == 1 && answer.len() >= 4).then(|| {
        let at = answer.len() - 4;
        std::net::Ipv4Addr::new(answer[at], answer[at + 1], answer[at + 2], answer[at + 3])
    })
}

/// The id of the probe's DNS queries.
pub(super) const DNS_ID: [u8; 2] = [0x6e, 0x62];

/// Asks the DNS stub for `name`'s IPv4 address; the answer is read from the returned
/// socket.
pub(super) fn send_dns_query(name: &str) -> std::io::Result<std::net::UdpSocket> {
    // Header: id, a standard query with recursion desired, one question.
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&DNS_ID);
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let len = u8::try_from(label.len()).map_err(|_| std::io::Error::other("label"))?;
        query.push(len);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let socket = std::net::UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.set_read_timeout(Some(PROBE_IO_TIMEOUT))?;
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    socket.connect(SocketAddr::from((crate::sandbox::DNS_STUB, 53)))?;
    socket.send(&query)?;
    Ok(socket)
}

/// The response code and the answer to a query [`send_dns_query`] sent.
pub(super) fn read_dns_answer(socket: std::net::UdpSocket) -> std::io::Result<(u8, Vec<u8>)> {
    let mut answer = [0u8; 512];
    let n = socket.recv(&mut answer)?;
    if n < 4 || answer[..2] != DNS_ID {
        return Err(std::io::Error::other("not an answer to the question"));
    }
    Ok((answer[3] & 0x0f, answer[..n].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_names_an_address_only_with_one_record_and_no_error() {
        // A header of 12 bytes (ANCOUNT at 6..8), then the record's last 4 bytes.
        let mut answer = vec![0x6e, 0x62, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
        answer.extend([198, 18, 0, 7]);
        let at = address_in(&(0, answer.clone()));
        assert_eq!(at, Some(std::net::Ipv4Addr::new(198, 18, 0, 7)));
        // Refused (an rcode), or no record: no address.
        assert_eq!(address_in(&(5, answer.clone())), None);
        answer[7] = 0;
        assert_eq!(address_in(&(0, answer)), None);
        assert_eq!(address_in(&(0, vec![1, 2])), None);
    }
}
