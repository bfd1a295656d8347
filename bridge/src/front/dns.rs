//! The sandbox's DNS stub, on 127.0.0.53:53 inside its namespace (the sandbox's
//! resolv.conf names it). A program that ignores the proxy settings resolves a name
//! itself: an allowed name gets a session address (addresses.rs), which capture then maps
//! back to the name; any other name gets NXDOMAIN, logged. Nothing is resolved here: the
//! bridge resolves the name when a connection to its session address arrives, with every
//! check a proxied connection gets.

use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};

use crate::log::{Attempt, End, EventLog, Proto};
use crate::policy::Reason;
use crate::session::Session;
use crate::target::{normalise_host, Host, Target};

/// How long a client may keep a session address: the session's, really; short, so that a
/// long-lived client asks again rather than keeping an address past a policy's end.
const TTL_SECONDS: u32 = 60;

/// Largest DNS message read or written over UDP (EDNS's common size).
pub const MAX_UDP_MESSAGE: usize = 1232;

/// The answer to one DNS message, if it deserves one (a response, or bytes that are no
/// message, get none). A refused name is logged.
pub fn answer(query: &[u8], session: &Session, ports: &[u16], log: &EventLog) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    let question = match (request.metadata.op_code, request.queries.as_slice()) {
        (OpCode::Query, [question]) if question.query_class() == DNSClass::IN => question.clone(),
        (OpCode::Query, [_]) => return reply(response, ResponseCode::NotImp),
        (OpCode::Query, _) => return reply(response, ResponseCode::FormErr),
        _ => return reply(response, ResponseCode::NotImp),
    };
    response.add_query(question.clone());
    let asked = question.name().to_ascii();
    let name = match normalise_host(asked.trim_end_matches('.')) {
        Ok(Host::Name(name)) => name,
        // An address spelled as a name, or no name at all: nothing to hand out.
        _ => return reply(response, ResponseCode::NXDomain),
    };
    if name == crate::session::addresses::PROBE_NAME {
        let address = match question.query_type() {
            RecordType::A => RData::A(A(crate::session::addresses::PROBE_ADDRESS)),
            RecordType::AAAA => RData::AAAA(AAAA(crate::session::addresses::PROBE_ADDRESS_V6)),
            _ => return reply(response, ResponseCode::NoError),
        };
        response.add_answer(Record::from_rdata(
            question.name().clone(),
            TTL_SECONDS,
            address,
        ));
        return reply(response, ResponseCode::NoError);
    }
    if !allowed(session, &name, ports) {
        // Once per name: a resolver asks for A and AAAA, and again at each lookup (glibc
        // keeps no negative cache); the log needs the name, not every question.
        if session.addresses.first_refusal(&name) {
            refused(session, &name, log);
        }
        return reply(response, ResponseCode::NXDomain);
    }
    let v6 = match question.query_type() {
        RecordType::A => false,
        RecordType::AAAA => true,
        // An allowed name has no other records here: an empty answer, not an error.
        _ => return reply(response, ResponseCode::NoError),
    };
    let Some(address) = session.addresses.address_for(&name, v6) else {
        return reply(response, ResponseCode::ServFail);
    };
    let rdata = match address {
        std::net::IpAddr::V4(v4) => RData::A(A(v4)),
        std::net::IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    response.add_answer(Record::from_rdata(
        question.name().clone(),
        TTL_SECONDS,
        rdata,
    ));
    reply(response, ResponseCode::NoError)
}

fn reply(mut response: Message, code: ResponseCode) -> Option<Vec<u8>> {
    response.metadata.response_code = code;
    response.to_vec().ok()
}

/// Whether the policy lets the name through on any port capture listens on.
fn allowed(session: &Session, name: &str, ports: &[u16]) -> bool {
    let policy = session.policy();
    // Relaying, every name is the remote bridge's to judge, but a name under `.invalid`
    // resolves nowhere (RFC 6761), so the stub makes up no address for one either (the
    // live probe's canary is one).
    if policy.is_relaying() && crate::policy::is_invalid(&Host::Name(name.to_owned())) {
        return false;
    }
    ports.iter().any(|&port| {
        let target = Target {
            host: Host::Name(name.to_owned()),
            port,
        };
        policy.decide(&target).is_allow()
    })
}

/// A refused lookup, logged as a `net` record of its own (`proto: "dns"`, no port).
fn refused(session: &Session, name: &str, log: &EventLog) {
    let mut attempt = Attempt::begin(Arc::clone(&session.id), Proto::Dns);
    attempt.target = Some(Target {
        host: Host::Name(name.to_owned()),
        port: 53,
    });
    attempt.reason = Reason::NotAllowed;
    attempt.detail = Some(format!(
        "a lookup of {name} in the sandbox's DNS: not on the allowlist for a port capture \
         carries (a name allowed only on other ports goes through the proxy)"
    ));
    let mut event = attempt.finish(End::Refused, 0, 0);
    event.port = None;
    log.record(&event);
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;

    fn ask(name: &str, kind: RecordType) -> Vec<u8> {
        let mut query = Message::query();
        query.metadata.id = 7;
        query.metadata.recursion_desired = true;
        query.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        query.to_vec().unwrap()
    }

    #[test]
    fn the_probe_name_is_answered_whatever_the_policy_and_hands_out_nothing() {
        let session = Session::new("s", Arc::new(crate::policy::Policy::default()), 8);
        let log = EventLog::open(None, crate::log::Stderr::Quiet).unwrap();
        let name = format!("{}.", crate::session::addresses::PROBE_NAME);
        for (kind, want) in [
            (RecordType::A, "198.18.0.0"),
            (RecordType::AAAA, "2001:2::"),
        ] {
            let got =
                Message::from_vec(&answer(&ask(&name, kind), &session, &[443], &log).unwrap())
                    .unwrap();
            assert_eq!(got.metadata.response_code, ResponseCode::NoError);
            let address = match got.answers[0].data.clone() {
                RData::A(a) => a.0.to_string(),
                RData::AAAA(a) => a.0.to_string(),
                other => panic!("{other:?}"),
            };
            assert_eq!(address, want);
        }
        // No session address was handed out for it.
        assert_eq!(
            session.addresses.name_for("198.18.0.1".parse().unwrap()),
            None
        );
        // Control: another name is refused under the same (empty) policy.
        let other = answer(&ask("b.test.", RecordType::A), &session, &[443], &log).unwrap();
        let other = Message::from_vec(&other).unwrap();
        assert_eq!(other.metadata.response_code, ResponseCode::NXDomain);
    }

    #[test]
    fn allowed_names_get_session_addresses_and_others_nxdomain() {
        let mut policy = crate::policy::Policy::default();
        policy
            .add_rule(crate::policy::Action::Allow, "a.test:443", "--allow")
            .unwrap();
        let session = Session::new("s", Arc::new(policy), 8);
        let log = EventLog::open(None, crate::log::Stderr::Quiet).unwrap();
        let ports = [80, 443];
        let parse = |bytes: Option<Vec<u8>>| Message::from_vec(&bytes.unwrap()).unwrap();

        let got = parse(answer(
            &ask("A.Test.", RecordType::A),
            &session,
            &ports,
            &log,
        ));
        assert_eq!(got.metadata.id, 7);
        assert_eq!(got.metadata.response_code, ResponseCode::NoError);
        assert_eq!(got.answers.len(), 1);
        assert_eq!(
            got.answers[0].data,
            RData::A(A("198.18.0.1".parse().unwrap()))
        );
        let got = parse(answer(
            &ask("a.test.", RecordType::AAAA),
            &session,
            &ports,
            &log,
        ));
        assert_eq!(
            got.answers[0].data,
            RData::AAAA(AAAA("2001:2::1".parse().unwrap()))
        );
        let got = parse(answer(
            &ask("a.test.", RecordType::MX),
            &session,
            &ports,
            &log,
        ));
        assert_eq!(got.metadata.response_code, ResponseCode::NoError);
        assert!(got.answers.is_empty());

        let got = parse(answer(
            &ask("b.test.", RecordType::A),
            &session,
            &ports,
            &log,
        ));
        assert_eq!(got.metadata.response_code, ResponseCode::NXDomain);
        assert!(got.answers.is_empty());
        assert_eq!(log.counts(), (0, 1));
        // Asked again (AAAA, say): refused again, logged once.
        let got = parse(answer(
            &ask("b.test.", RecordType::AAAA),
            &session,
            &ports,
            &log,
        ));
        assert_eq!(got.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(log.counts(), (0, 1));
        // On a port capture does not listen on, the rule opens nothing here.
        let got = parse(answer(
            &ask("a.test.", RecordType::A),
            &session,
            &[80],
            &log,
        ));
        assert_eq!(got.metadata.response_code, ResponseCode::NXDomain);
        // Garbage gets no answer.
        assert!(answer(b"\x00\x01garbage", &session, &ports, &log).is_none());
    }
}
