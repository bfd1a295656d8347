//! The proxy a bridge goes out through: `netbox --bridge URL` (a shared netbox bridge
//! that judges every connection) and `netbox bridge --upstream-proxy URL` (a company's
//! proxy), read before anything starts. Its name is looked up at each dial, by the
//! bridge's resolver (netbox calls no NSS function: it is linked statically).
//!
//! Credentials never come on the command line, where every user of the machine can read
//! them (`/proc/PID/cmdline`): they come from a file, one line, `TOKEN` (sent as
//! `Bearer TOKEN`) or `USER:PASSWORD` (sent as `Basic`; for a netbox bridge the user is
//! the tenant's name).

use std::path::Path;

use base64::Engine;
use bridge::egress::upstream_proxy::{NoProxy, ProxyTls, UpstreamProxy};
use bridge::target::Target;
use http::HeaderValue;

use crate::error::WrapperError;

/// Credentials files are one short line; anything longer is a mistake.
const MAX_CREDENTIALS_BYTES: u64 = 4096;

/// The files an upstream proxy's options name.
#[derive(Default)]
pub struct ProxyFiles<'a> {
    /// One line: TOKEN or USER:PASSWORD.
    pub credentials: Option<&'a Path>,
    /// `https://`: the CA (PEM) its certificate must come from (default: the system's).
    pub ca: Option<&'a Path>,
    /// `https://`: a client certificate (PEM) to present, and its key.
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
}

/// Certificates and keys read, at most.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads `url` (`http://HOST:PORT` or `https://HOST:PORT`) and the files. `flag` names the
/// option in every error; `judges` says the proxy is a netbox bridge judging for this one.
pub fn upstream_proxy(
    flag: &str,
    url: &str,
    files: &ProxyFiles<'_>,
    no_proxy: Option<&str>,
    judges: bool,
) -> Result<UpstreamProxy, WrapperError> {
    // A URL with credentials in it is refused, and not echoed with them.
    let shown = match url.split_once('@') {
        Some((before, after)) => match before.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…@{after}"),
            None => format!("…@{after}"),
        },
        None => url.to_owned(),
    };
    let usage = |what: String| WrapperError::Usage(format!("{flag} {shown:?}: {what}"));
    let (https, target) = parse_url(url).map_err(usage)?;
    let authorization = match files.credentials {
        Some(path) => Some(read_credentials(path)?),
        None => None,
    };
    let except = match no_proxy {
        Some(list) => NoProxy::parse(list).map_err(WrapperError::Usage)?,
        None => NoProxy::default(),
    };
    let tls = match (https, files.ca, files.cert.zip(files.key)) {
        (false, None, None) => None,
        (false, _, _) => {
            return Err(usage(
                "a CA or a client certificate is for an https:// proxy".into(),
            ))
        }
        (true, ca, client) => {
            let ca = ca.map(|path| read_pem(path, "CA file")).transpose()?;
            let client = match client {
                Some((cert, key)) => Some((
                    read_pem(cert, "client certificate")?,
                    read_pem(key, "client key")?,
                )),
                None => None,
            };
            let client = client.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
            Some(ProxyTls::new(&target.host, ca.as_deref(), client).map_err(usage)?)
        }
    };
    let scheme = if https { "https" } else { "http" };
    Ok(UpstreamProxy {
        name: format!("{scheme}://{target}"),
        host: target.host,
        port: target.port,
        authorization,
        except,
        tls,
        judges,
    })
}

/// A certificate, CA or key file (PEM), as bytes; `what` names it in the error.
pub fn read_pem(path: &Path, what: &'static str) -> Result<Vec<u8>, WrapperError> {
    crate::plan::read_small_file(path, MAX_PEM_BYTES)
        .map(String::into_bytes)
        .map_err(|source| WrapperError::Path {
            path: path.to_owned(),
            what,
            source,
        })
}

/// `http://HOST:PORT` or `https://HOST:PORT` (a trailing `/` allowed), nothing else;
/// whether it is `https`, and the authority.
fn parse_url(url: &str) -> Result<(bool, Target), String> {
    let (https, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err("give the proxy as http://HOST:PORT or https://HOST:PORT".into()),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err(
            "credentials do not go in the URL, where any user of this machine can \
                    read them: put them in a file and name it with the token-file option"
                .into(),
        );
    }
    if authority.contains(['/', '?', '#']) {
        return Err("give the proxy as http://HOST:PORT, with no path".into());
    }
    Target::parse_authority(authority)
        .map(|target| (https, target))
        .map_err(|e| format!("{e} (give the proxy as http://HOST:PORT)"))
}

/// The credentials file's line as a `Proxy-Authorization` value.
fn read_credentials(path: &Path) -> Result<HeaderValue, WrapperError> {
    let bad = |what: &str| {
        WrapperError::Usage(format!(
            "credentials file {}: {what}; it holds one line, TOKEN or USER:PASSWORD",
            path.display()
        ))
    };
    let text = crate::plan::read_small_file(path, MAX_CREDENTIALS_BYTES).map_err(|source| {
        WrapperError::Path {
            path: path.to_owned(),
            what: "credentials file",
            source,
        }
    })?;
    let line = text.trim_end_matches(['\n', '\r']);
    if line.is_empty() {
        return Err(bad("it is empty"));
    }
    if line.contains(['\n', '\r']) {
        return Err(bad("it has more than one line"));
    }
    if !line.chars().all(|c| c.is_ascii_graphic()) {
        return Err(bad(
            "it has spaces or characters that are not printable ASCII",
        ));
    }
    let value = match line.split_once(':') {
        Some(("", _)) => return Err(bad("USER:PASSWORD has no user")),
        Some(_) => format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(line)
        ),
        None => format!("Bearer {line}"),
    };
    let mut value = HeaderValue::from_str(&value).map_err(|_| bad("it is not a header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_authorities_are_taken() {
        let parsed = |url: &str| {
            let (https, target) = parse_url(url).unwrap();
            format!("{https} {target}")
        };
        assert_eq!(parsed("http://egress.test:3129"), "false egress.test:3129");
        assert_eq!(parsed("http://Egress.TEST.:3129"), "false egress.test:3129");
        assert_eq!(parsed("http://[::1]:3129/"), "false [::1]:3129");
        assert_eq!(parsed("https://egress.test:3129"), "true egress.test:3129");
        for bad in [
            "egress.test:3129",
            "http://user:secret@egress.test:3129",
            "http://egress.test:3129/path",
            "http://egress.test",
            "socks5://egress.test:1080",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_are_a_token_or_user_and_password() {
        let dir = std::env::temp_dir().join(format!("netbox-upstream-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        let read = |text: &str| {
            std::fs::write(&file, text).unwrap();
            read_credentials(&file).map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(read("abc123\n").unwrap(), "Bearer abc123");
        assert_eq!(read("team-a:abc123").unwrap(), "Basic dGVhbS1hOmFiYzEyMw==");
        for bad in [
            "",
            "\n",
            "two\nlines",
            "a token",
            ":nouser",
            "tab\there",
            "é",
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
