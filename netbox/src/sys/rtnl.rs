//! rtnetlink(7) requests: the links, addresses and routes capture needs, sent on a
//! NETLINK_ROUTE socket. A netlink socket acts on the network namespace it was made in,
//! wherever it is used later, so one made in the capture namespace configures that one
//! from anywhere. Changes need CAP_NET_ADMIN in the namespace's owning user namespace
//! (the sandbox holds it until its capability drop); reading (a dump) needs nothing.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoData, InfoKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage, State,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

/// The local routing table (what the kernel asks first: which addresses are this
/// namespace's own).
pub const TABLE_LOCAL: u8 = 255;
/// The main routing table.
pub const TABLE_MAIN: u8 = 254;

/// A NETLINK_ROUTE socket, bound to the network namespace it was made in.
pub struct Rtnl {
    socket: OwnedFd,
    sequence: std::cell::Cell<u32>,
}

/// A link, as a dump reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub up: bool,
}

impl Rtnl {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Rtnl> {
        use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
        let socket = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        // Connected to the kernel: nothing but its answers is read.
        let kernel = nix::sys::socket::NetlinkAddr::new(0, 0);
        nix::sys::socket::connect(socket.as_raw_fd(), &kernel)?;
        // A wait for an answer lasts a second at most (the kernel answers at once).
        let second = nix::sys::time::TimeVal::new(1, 0);
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &second)?;
        Ok(Rtnl {
            socket,
            sequence: std::cell::Cell::new(0),
        })
    }

    /// The index of the interface called `name`.
    pub fn index_of(&self, name: &str) -> io::Result<u32> {
        self.link(name).map(|link| link.header.index)
    }

    /// Whether the link `name` is operationally up: its carrier taken in by the kernel's
    /// link watch, which is also what starts its transmit queue.
    pub fn is_up(&self, name: &str) -> io::Result<bool> {
        let link = self.link(name)?;
        Ok(link
            .attributes
            .iter()
            .any(|a| matches!(a, LinkAttribute::OperState(State::Up))))
    }

    /// Whether `address` is this namespace's own: the kernel's route to it is local, as
    /// `ip route get` shows it.
    pub fn is_local(&self, address: IpAddr) -> io::Result<bool> {
        let mut ask = RouteMessage::default();
        ask.header.address_family = family(address);
        ask.header.destination_prefix_length = full_length(address);
        ask.attributes = vec![RouteAttribute::Destination(route_address(address))];
        match self.ask(RouteNetlinkMessage::GetRoute(ask)) {
            Ok(RouteNetlinkMessage::NewRoute(route)) => Ok(route.header.kind == RouteType::Local),
            Ok(_) => Err(io::Error::other("rtnetlink answered something else")),
            // No route at all: not local.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENETUNREACH | libc::EHOSTUNREACH)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The link `name`, as the kernel describes it.
    fn link(&self, name: &str) -> io::Result<LinkMessage> {
        let mut ask = LinkMessage::default();
        ask.attributes = vec![LinkAttribute::IfName(name.to_owned())];
        match self.ask(RouteNetlinkMessage::GetLink(ask))? {
            RouteNetlinkMessage::NewLink(link) => Ok(link),
            _ => Err(io::Error::other("rtnetlink answered something else")),
        }
    }

    /// Sends one request and waits for the kernel's answer to it (its refusal as an error).
    fn ask(&self, request: RouteNetlinkMessage) -> io::Result<RouteNetlinkMessage> {
        let sequence = self.send(request, NLM_F_REQUEST)?;
        loop {
            for answer in self.receive()? {
                if answer.header.sequence_number != sequence {
                    continue;
                }
                return match answer.payload {
                    NetlinkPayload::InnerMessage(message) => Ok(message),
                    NetlinkPayload::Error(error) => Err(refusal(error.code)),
                    _ => Err(io::Error::other("rtnetlink answered something else")),
                };
            }
        }
    }

    /// Sends `changes` in one datagram (the kernel takes each in turn) and waits for the
    /// kernel's answer to each. The first it refused, by what it was for, with why; the
    /// ones after it may have been made all the same (the caller gives the namespace up).
    pub fn apply(
        &self,
        changes: Vec<(&'static str, Change<'_>)>,
    ) -> Result<(), (&'static str, io::Error)> {
        let mut datagram = Vec::new();
        // Each change's sequence number, place and purpose, until the kernel answers it.
        let mut unanswered = Vec::with_capacity(changes.len());
        for (place, (what, change)) in changes.into_iter().enumerate() {
            let sequence = self.next_sequence();
            datagram.extend(serialize(change.message, change.flags, sequence));
            unanswered.push((sequence, place, what));
        }
        let Some(&(_, _, first)) = unanswered.first() else {
            return Ok(());
        };
        self.send_bytes(&datagram).map_err(|e| (first, e))?;
        let mut refused: Option<(usize, &'static str, io::Error)> = None;
        while let Some(&(_, _, waiting_for)) = unanswered.first() {
            for answer in self.receive().map_err(|e| (waiting_for, e))? {
                let sequence = answer.header.sequence_number;
                let Some(at) = unanswered.iter().position(|u| u.0 == sequence) else {
                    continue;
                };
                let (_, place, what) = unanswered.remove(at);
                let outcome = match answer.payload {
                    // No code: the acknowledgement.
                    NetlinkPayload::Error(error) if error.code.is_none() => Ok(()),
                    NetlinkPayload::Error(error) => Err(refusal(error.code)),
                    _ => Err(io::Error::other("rtnetlink answered something else")),
                };
                if let Err(e) = outcome {
                    if refused.as_ref().is_none_or(|r| place < r.0) {
                        refused = Some((place, what, e));
                    }
                }
            }
        }
        match refused {
            Some((_, what, e)) => Err((what, e)),
            None => Ok(()),
        }
    }

    /// Every link of the namespace.
    pub fn links(&self) -> io::Result<Vec<Link>> {
        let answers = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        Ok(answers
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => Some(Link {
                    up: link.header.flags.contains(LinkFlags::Up),
                    name: link
                        .attributes
                        .iter()
                        .find_map(|a| match a {
                            LinkAttribute::IfName(name) => Some(name.clone()),
                            _ => None,
                        })
                        .unwrap_or_default(),
                }),
                _ => None,
            })
            .collect())
    }

    /// Sends a dump request and collects its answers.
    fn dump(&self, message: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        let sequence = self.send(message, NLM_F_REQUEST | NLM_F_DUMP)?;
        let mut found = Vec::new();
        loop {
            for answer in self.receive()? {
                if answer.header.sequence_number != sequence {
                    continue;
                }
                match answer.payload {
                    NetlinkPayload::Done(_) => return Ok(found),
                    NetlinkPayload::Error(error) => return Err(refusal(error.code)),
                    NetlinkPayload::InnerMessage(inner) => found.push(inner),
                    _ => {}
                }
            }
        }
    }

    fn next_sequence(&self) -> u32 {
        let sequence = self.sequence.get().wrapping_add(1).max(1);
        self.sequence.set(sequence);
        sequence
    }

    fn send(&self, message: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        let sequence = self.next_sequence();
        self.send_bytes(&serialize(message, flags, sequence))?;
        Ok(sequence)
    }

    fn send_bytes(&self, datagram: &[u8]) -> io::Result<()> {
        let sent = nix::sys::socket::send(
            self.socket.as_raw_fd(),
            datagram,
            nix::sys::socket::MsgFlags::empty(),
        )?;
        if sent != datagram.len() {
            return Err(io::Error::other("rtnetlink took part of a request"));
        }
        Ok(())
    }

    /// One datagram's messages.
    fn receive(&self) -> io::Result<Vec<NetlinkMessage<RouteNetlinkMessage>>> {
        // A dump's datagram holds up to a page or so of messages; 32 KiB is the most the
        // kernel puts in one.
        let mut buffer = vec![0u8; 32 << 10];
        let n = nix::sys::socket::recv(
            self.socket.as_raw_fd(),
            &mut buffer,
            nix::sys::socket::MsgFlags::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::EAGAIN => io::Error::new(
                io::ErrorKind::TimedOut,
                "the kernel did not answer within a second",
            ),
            e => io::Error::from(e),
        })?;
        let mut messages = Vec::new();
        let mut at = 0;
        while at + 16 <= n {
            let length = buffer[at..at + 4]
                .try_into()
                .map(u32::from_ne_bytes)
                .map_err(|_| io::Error::other("short rtnetlink message"))?;
            let length = usize::try_from(length).unwrap_or(usize::MAX);
            if length < 16 || at + length > n {
                return Err(io::Error::other("malformed rtnetlink message"));
            }
            let message = NetlinkMessage::deserialize(&buffer[at..at + length])
                .map_err(|e| io::Error::other(format!("rtnetlink: {e}")))?;
            messages.push(message);
            // Messages are 4-byte aligned.
            at += (length + 3) & !3;
        }
        Ok(messages)
    }
}

/// What the kernel's error message says: its code (negative errno), or EIO for an
/// acknowledgement where an answer was wanted.
fn refusal(code: Option<std::num::NonZeroI32>) -> io::Error {
    io::Error::from_raw_os_error(code.map_or(libc::EIO, |c| -c.get()))
}

/// One message with its header flags, as [`serialize`] puts it on the wire.
fn serialize(message: RouteNetlinkMessage, flags: u16, sequence: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = sequence;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
    packet.finalize();
    let mut buffer = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buffer);
    buffer
}

/// One change to a namespace's links, addresses or routes, for [`Rtnl::apply`]. `'fd`:
/// a namespace fd it names stays open until it is sent.
pub struct Change<'fd> {
    message: RouteNetlinkMessage,
    flags: u16,
    _namespace: std::marker::PhantomData<BorrowedFd<'fd>>,
}

const CREATE: u16 = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
const SET: u16 = NLM_F_REQUEST | NLM_F_ACK;

impl<'fd> Change<'fd> {
    fn new(message: RouteNetlinkMessage, flags: u16) -> Change<'fd> {
        Change {
            message,
            flags,
            _namespace: std::marker::PhantomData,
        }
    }

    /// A veth pair: `name` here and `peer` in the namespace open as `peer_ns`, both down,
    /// both with `mac`, neither resolving neighbours (IFF_NOARP: a frame goes to the
    /// link's own address, which the other end shares, so no ARP or neighbour discovery
    /// is ever needed or answered). One queue each way: a veth made with one per CPU (the
    /// default) is cut to one as it is made, which waits for an expedited RCU grace period
    /// (`synchronize_net`, an interrupt to every CPU) on every start-up.
    pub fn veth_pair(
        name: &str,
        peer: &str,
        mac: [u8; 6],
        peer_ns: BorrowedFd<'fd>,
    ) -> Change<'fd> {
        let mut peer_link = LinkMessage::default();
        peer_link.header.flags = LinkFlags::Noarp;
        peer_link.header.change_mask = LinkFlags::Noarp;
        peer_link.attributes = vec![
            LinkAttribute::IfName(peer.to_owned()),
            LinkAttribute::Address(mac.to_vec()),
            LinkAttribute::NetNsFd(peer_ns.as_raw_fd()),
            LinkAttribute::NumTxQueues(1),
            LinkAttribute::NumRxQueues(1),
        ];
        let mut link = LinkMessage::default();
        link.header.flags = LinkFlags::Noarp;
        link.header.change_mask = LinkFlags::Noarp;
        link.attributes = vec![
            LinkAttribute::IfName(name.to_owned()),
            LinkAttribute::Address(mac.to_vec()),
            LinkAttribute::NumTxQueues(1),
            LinkAttribute::NumRxQueues(1),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_link))),
            ]),
        ];
        Change::new(RouteNetlinkMessage::NewLink(link), CREATE)
    }

    /// Keeps IPv6 from giving interface `index` an address of its own making (a
    /// link-local one) when it comes up (IN6_ADDR_GEN_MODE_NONE; refused while the link
    /// is being created, and too late once it is up). Both ends of a link with one
    /// hardware address would otherwise have the same one, which each end would answer
    /// for itself.
    pub fn without_link_local(index: u32) -> Change<'fd> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.attributes = vec![LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
            vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
        )])];
        Change::new(RouteNetlinkMessage::SetLink(link), SET)
    }

    /// Brings interface `index` up.
    pub fn bring_up(index: u32) -> Change<'fd> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.header.flags = LinkFlags::Up;
        link.header.change_mask = LinkFlags::Up;
        Change::new(RouteNetlinkMessage::SetLink(link), SET)
    }

    /// Gives interface `index` the single address `ip` (a /32 or /128), usable at once (no
    /// duplicate address detection: nothing else is on the link).
    pub fn address(index: u32, ip: IpAddr) -> Change<'fd> {
        let mut message = AddressMessage::default();
        message.header.family = family(ip);
        message.header.prefix_len = full_length(ip);
        message.header.index = index;
        message.attributes = vec![
            AddressAttribute::Local(ip),
            AddressAttribute::Address(ip),
            AddressAttribute::Flags(AddressFlags::Nodad),
        ];
        Change::new(RouteNetlinkMessage::NewAddress(message), CREATE)
    }

    /// A route to `destination`/`length` in `table`: of `kind` Local (the addresses are
    /// this namespace's own) or Unicast (out of interface `oif`, straight on the link,
    /// from `source` when given).
    pub fn route(
        table: u8,
        kind: RouteType,
        destination: IpAddr,
        length: u8,
        oif: u32,
        source: Option<IpAddr>,
    ) -> Change<'fd> {
        let mut message = RouteMessage::default();
        message.header.address_family = family(destination);
        message.header.destination_prefix_length = length;
        message.header.table = table;
        message.header.protocol = RouteProtocol::Boot;
        message.header.kind = kind;
        message.header.scope = match kind {
            RouteType::Local => RouteScope::Host,
            _ => RouteScope::Link,
        };
        if length > 0 {
            message
                .attributes
                .push(RouteAttribute::Destination(route_address(destination)));
        }
        message.attributes.push(RouteAttribute::Oif(oif));
        if let Some(source) = source {
            message
                .attributes
                .push(RouteAttribute::PrefSource(route_address(source)));
        }
        Change::new(RouteNetlinkMessage::NewRoute(message), CREATE)
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// The prefix length of `ip` alone: 32 or 128.
pub fn full_length(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}
