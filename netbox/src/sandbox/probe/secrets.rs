//! The secrets row: CMD's environment holds each secret's placeholder (the control), and a
//! placeholder sent to the probe's canary, a host no secret goes to, is refused by the
//! bridge as misdirected. Whether the values themselves are anywhere CMD can read is
//! netbox's to check, outside: only it holds them (run/mod.rs).

use std::ffi::OsString;

use super::network::{header_value, read_answer, send_request, status_line};
use super::{check, Check, Outcome, ProbeInput};

/// The row's name in the report.
pub const SECRETS_CHECK: &str = "secrets swapped in by the bridge alone";

pub(super) fn secrets(input: &ProbeInput, env: &[(OsString, OsString)]) -> Check {
    let host = input
        .canary
        .rsplit_once(':')
        .map_or(input.canary.as_str(), |(host, _)| host);
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    for (name, placeholder) in &input.secrets {
        let held = env
            .iter()
            .any(|(k, v)| k == name.as_str() && v == placeholder.as_str());
        control.push(Outcome {
            attempt: format!("find {name}'s placeholder in CMD's environment"),
            ok: held,
            result: if held { "found" } else { "missing" }.into(),
        });
        // Plain HTTP through the bridge: the forward path reads every header.
        let answer = send_request(
            input.proxy,
            &format!(
                "GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\
                 Authorization: Bearer {placeholder}\r\nConnection: close\r\n\r\n"
            ),
        )
        .and_then(read_answer);
        let reason = answer
            .as_ref()
            .ok()
            .and_then(|a| header_value(a, "x-netbox-reason"))
            .map(str::to_owned);
        forbidden.push(Outcome {
            attempt: format!("send {name}'s placeholder to {host} through the bridge"),
            ok: answer
                .as_ref()
                .is_ok_and(|a| a.starts_with("HTTP/1.1 403 "))
                && reason.as_deref() == Some("secret-misdirected"),
            result: match reason {
                Some(reason) => format!("{} ({reason})", status_line(&answer)),
                None => status_line(&answer),
            },
        });
    }
    check(SECRETS_CHECK, forbidden, control)
}
