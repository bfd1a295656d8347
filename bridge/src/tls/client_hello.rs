//! The server name a tunnel's TLS client asks for, read from its first bytes without
//! terminating TLS: the ClientHello is reassembled from however many records and TCP
//! segments carry it (post-quantum key shares make it several KiB), and its SNI extension
//! read. The bytes are only looked at; the caller replays them upstream unchanged.
//!
//! Hand-written rather than tls-parser: the reassembly across records is the caller's
//! part either way, and what is read here is six length-prefixed fields, where the crate
//! would bring nom and its derive macros into the boundary. Fuzzed (fuzz/, `client_hello`).

/// TLS record types (RFC 8446 §5.1): 20 change_cipher_spec, 21 alert, 22 handshake,
/// 23 application_data.
const CHANGE_CIPHER_SPEC_RECORD: u8 = 20;
const HANDSHAKE_RECORD: u8 = 22;
const APPLICATION_DATA_RECORD: u8 = 23;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME_EXTENSION: u16 = 0;
const HOST_NAME: u8 = 0;
/// A record's payload at most (RFC 8446 §5.1: 2^14 bytes of plaintext).
const MAX_RECORD_BYTES: usize = 1 << 14;
/// A ClientHello this long is refused rather than buffered further: real ones, with
/// post-quantum key shares and every extension browsers send, stay under 4 KiB.
pub const MAX_HELLO_BYTES: usize = 16 * 1024;

/// What the first bytes of a tunnel say, so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet: look again once there are `need` (each record is then read
    /// once, not once a byte: a hello trickled in tiny pieces costs no more to read).
    Incomplete { need: usize },
    /// Not TLS: the first byte is not a TLS record's (22, or the alert, change-cipher-spec
    /// and application-data types, which are malformed before a ClientHello).
    NotTls,
    /// A TLS handshake that cannot be read as a ClientHello (truncated fields, a second
    /// server name, lengths that disagree, one longer than `MAX_HELLO_BYTES`).
    Malformed(&'static str),
    /// A whole ClientHello, and the host name it asks for, if any (as sent: the caller
    /// normalises it), with the bytes it took (every record that carries it).
    ClientHello {
        server_name: Option<Vec<u8>>,
        consumed: usize,
    },
}

/// Reads a ClientHello from the start of `bytes` (all a client has sent so far).
pub fn read(bytes: &[u8]) -> Hello {
    let Some(&first) = bytes.first() else {
        return Hello::Incomplete { need: 1 };
    };
    // Any TLS record type: TLS stacks read these too (some skip a leading alert), so they
    // are never taken for another protocol.
    if matches!(first, CHANGE_CIPHER_SPEC_RECORD..=APPLICATION_DATA_RECORD)
        && first != HANDSHAKE_RECORD
    {
        return Hello::Malformed("a TLS record before the ClientHello");
    }
    if first != HANDSHAKE_RECORD {
        return Hello::NotTls;
    }
    // The handshake message, reassembled from the fragments of consecutive records.
    let mut message = Vec::new();
    let mut offset = 0;
    loop {
        let Some(header) = bytes.get(offset..offset + 5) else {
            return Hello::Incomplete { need: offset + 5 };
        };
        if header[0] != HANDSHAKE_RECORD {
            return Hello::Malformed("a record of another type inside the ClientHello");
        }
        if header[1] != 3 {
            return Hello::Malformed("a record of another version");
        }
        let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if length == 0 || length > MAX_RECORD_BYTES {
            return Hello::Malformed("a record length out of range");
        }
        let Some(fragment) = bytes.get(offset + 5..offset + 5 + length) else {
            return Hello::Incomplete {
                need: offset + 5 + length,
            };
        };
        message.extend_from_slice(fragment);
        offset += 5 + length;
        if message[0] != CLIENT_HELLO {
            return Hello::Malformed("not a ClientHello");
        }
        if message.len() < 4 {
            continue;
        }
        let body_length =
            usize::from(message[1]) << 16 | usize::from(message[2]) << 8 | usize::from(message[3]);
        if body_length + 4 > MAX_HELLO_BYTES {
            return Hello::Malformed("a ClientHello longer than netbox reads");
        }
        if message.len() < body_length + 4 {
            continue;
        }
        if message.len() > body_length + 4 {
            // Another handshake message after the ClientHello in the same flight: none
            // may follow it before the server answers.
            return Hello::Malformed("bytes after the ClientHello in its record");
        }
        return match server_name(&message[4..]) {
            Ok(server_name) => Hello::ClientHello {
                server_name,
                consumed: offset,
            },
            Err(why) => Hello::Malformed(why),
        };
    }
}

/// The host name in a ClientHello's body (RFC 8446 §4.1.2, RFC 6066 §3).
fn server_name(body: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    let mut fields = Fields(body);
    fields.skip(2, "no version")?;
    fields.skip(32, "no random")?;
    let session_id = fields.length(1, "no session id")?;
    fields.skip(session_id, "a short session id")?;
    let suites = fields.length(2, "no cipher suites")?;
    fields.skip(suites, "short cipher suites")?;
    let compression = fields.length(1, "no compression methods")?;
    fields.skip(compression, "short compression methods")?;
    if fields.0.is_empty() {
        // No extensions at all (TLS 1.2 allows it): no name.
        return Ok(None);
    }
    let extensions_length = fields.length(2, "no extensions length")?;
    let mut extensions = Fields(fields.take(extensions_length, "short extensions")?);
    if !fields.0.is_empty() {
        return Err("bytes after the extensions");
    }
    let mut name = None;
    while !extensions.0.is_empty() {
        let kind = u16::try_from(extensions.length(2, "a short extension type")?)
            .map_err(|_| "an extension type out of range")?;
        let length = extensions.length(2, "a short extension length")?;
        let data = extensions.take(length, "a short extension")?;
        if kind != SERVER_NAME_EXTENSION {
            continue;
        }
        if name.is_some() {
            return Err("two server name extensions");
        }
        name = Some(host_name(data)?);
    }
    Ok(name.flatten())
}

/// The one `host_name` entry of a server_name extension (an empty list names nothing).
fn host_name(data: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    let mut fields = Fields(data);
    let list_length = fields.length(2, "no server name list")?;
    let mut list = Fields(fields.take(list_length, "a short server name list")?);
    if !fields.0.is_empty() {
        return Err("bytes after the server name list");
    }
    let mut host = None;
    while !list.0.is_empty() {
        let kind = list.length(1, "a short server name type")?;
        let length = list.length(2, "a short server name length")?;
        let name = list.take(length, "a short server name")?;
        if kind == usize::from(HOST_NAME) {
            if host.is_some() {
                return Err("two host names");
            }
            if name.is_empty() {
                return Err("an empty host name");
            }
            host = Some(name.to_vec());
        }
    }
    Ok(host)
}

/// The fields of a message still to read.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, short: &'static str) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err(short);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn skip(&mut self, n: usize, short: &'static str) -> Result<(), &'static str> {
        self.take(n, short).map(|_| ())
    }

    /// A big-endian length of `width` bytes.
    fn length(&mut self, width: usize, short: &'static str) -> Result<usize, &'static str> {
        Ok(self
            .take(width, short)?
            .iter()
            .fold(0, |n, b| n << 8 | usize::from(*b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A ClientHello body with these extensions (type, data).
    fn body(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(32);
        body.extend([9u8; 32]);
        body.extend([0, 4, 0x13, 0x01, 0x13, 0x02]);
        body.extend([1, 0]);
        let mut ext = Vec::new();
        for (kind, data) in extensions {
            ext.extend(kind.to_be_bytes());
            ext.extend(u16::try_from(data.len()).unwrap().to_be_bytes());
            ext.extend(data);
        }
        body.extend(u16::try_from(ext.len()).unwrap().to_be_bytes());
        body.extend(ext);
        body
    }

    fn sni(names: &[&[u8]]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for name in names {
            list.push(HOST_NAME);
            list.extend(u16::try_from(name.len()).unwrap().to_be_bytes());
            list.extend(*name);
        }
        let mut data = u16::try_from(list.len()).unwrap().to_be_bytes().to_vec();
        data.extend(list);
        (SERVER_NAME_EXTENSION, data)
    }

    /// The handshake message for `body`, cut into records of at most `record` bytes.
    fn records(body: &[u8], record: usize) -> Vec<u8> {
        let mut message = vec![CLIENT_HELLO];
        message.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
        message.extend(body);
        let mut out = Vec::new();
        for chunk in message.chunks(record) {
            out.extend([HANDSHAKE_RECORD, 3, 1]);
            out.extend(u16::try_from(chunk.len()).unwrap().to_be_bytes());
            out.extend(chunk);
        }
        out
    }

    #[test]
    fn reads_the_name_in_one_record_or_many() {
        // A large hello, as post-quantum key shares make it (key_share: 1,216 bytes).
        let hello = body(&[
            (10, vec![0, 2, 0, 29]),
            sni(&[b"a.test"]),
            (51, vec![5; 1216]),
        ]);
        for record in [16_384, 512, 7, 1] {
            let bytes = records(&hello, record);
            assert_eq!(
                read(&bytes),
                Hello::ClientHello {
                    server_name: Some(b"a.test".to_vec()),
                    consumed: bytes.len()
                },
                "records of {record}"
            );
            // Any prefix is incomplete, never a verdict.
            for cut in [1, 4, 5, bytes.len() / 2, bytes.len() - 1] {
                assert!(
                    matches!(read(&bytes[..cut]), Hello::Incomplete { need } if need > cut),
                    "{record}/{cut}"
                );
            }
        }
    }

    #[test]
    fn no_name_not_tls_and_malformed() {
        let bytes = records(&body(&[(10, vec![0, 2, 0, 29])]), 16_384);
        assert!(matches!(
            read(&bytes),
            Hello::ClientHello {
                server_name: None,
                ..
            }
        ));
        assert_eq!(read(b"GET / HTTP/1.1\r\n\r\n"), Hello::NotTls);
        assert_eq!(read(b"SSH-2.0-OpenSSH_9.6\r\n"), Hello::NotTls);
        // A handshake record that does not start a ClientHello (a ServerHello), another
        // version's record, a leading alert: TLS, malformed, never another protocol.
        for bytes in [
            &[22, 3, 3, 0, 4, 2, 0, 0, 0][..],
            &[22, 0, 0, 0, 4, 1, 0, 0, 0],
            &[21, 3, 1, 0, 2, 1, 90],
            &[20, 3, 3, 0, 1, 1],
        ] {
            assert!(matches!(read(bytes), Hello::Malformed(_)), "{bytes:?}");
        }
        for (what, hello) in [
            ("two names", body(&[sni(&[b"a.test", b"b.test"])])),
            (
                "two extensions",
                body(&[sni(&[b"a.test"]), sni(&[b"b.test"])]),
            ),
            ("empty name", body(&[sni(&[b""])])),
        ] {
            assert!(
                matches!(read(&records(&hello, 16_384)), Hello::Malformed(_)),
                "{what}"
            );
        }
        // A record of another type in the middle of the hello.
        let mut bytes = records(&body(&[sni(&[b"a.test"])]), 20);
        bytes[25] = 23;
        assert!(matches!(read(&bytes), Hello::Malformed(_)));
        // A declared length past the limit.
        assert!(matches!(
            read(&[22, 3, 1, 0, 4, 1, 0x01, 0x00, 0x00]),
            Hello::Malformed(_)
        ));
    }

    proptest! {
        /// Whatever the bytes, a verdict comes without a panic, and a ClientHello's
        /// records lie within them.
        #[test]
        fn any_bytes_get_a_verdict(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            if let Hello::ClientHello { consumed, .. } = read(&bytes) {
                prop_assert!(consumed <= bytes.len());
            }
        }

        /// A real hello with any name, cut into records of any size, reads back the name.
        #[test]
        fn any_name_in_any_records(name in "[a-z0-9.-]{1,253}", record in 1usize..600) {
            let bytes = records(&body(&[sni(&[name.as_bytes()])]), record);
            prop_assert_eq!(
                read(&bytes),
                Hello::ClientHello { server_name: Some(name.into_bytes()), consumed: bytes.len() }
            );
        }
    }
}
