//! rtnetlink(7) requests: the links, addresses and routes capture needs, sent on a
//! NETLINK_ROUTE socket. A netlink socket acts on the network namespace it was made in,
//! wherever it is used later, so one made in the capture namespace configures that one
//! from anywhere. Changes need CAP_NET_ADMIN in the namespace's owning user namespace
//! (the sandbox holds it until its capability drop); reading (a dump) needs nothing.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoData, InfoKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage,
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
    pub index: u32,
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

    /// Creates a veth pair: `name` here and `peer` in the namespace open as `peer_ns`,
    /// both down, both with `mac`, neither resolving neighbours (IFF_NOARP: a frame goes
    /// to the link's own address, which the other end shares, so no ARP or neighbour
    /// discovery is ever needed or answered).
    pub fn add_veth_pair(
        &self,
        name: &str,
        peer: &str,
        mac: [u8; 6],
        peer_ns: BorrowedFd<'_>,
    ) -> io::Result<()> {
        let mut peer_link = LinkMessage::default();
        peer_link.header.flags = LinkFlags::Noarp;
        peer_link.header.change_mask = LinkFlags::Noarp;
        peer_link.attributes = vec![
            LinkAttribute::IfName(peer.to_owned()),
            LinkAttribute::Address(mac.to_vec()),
            LinkAttribute::NetNsFd(peer_ns.as_raw_fd()),
        ];
        let mut link = LinkMessage::default();
        link.header.flags = LinkFlags::Noarp;
        link.header.change_mask = LinkFlags::Noarp;
        link.attributes = vec![
            LinkAttribute::IfName(name.to_owned()),
            LinkAttribute::Address(mac.to_vec()),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_link))),
            ]),
        ];
        self.change(RouteNetlinkMessage::NewLink(link))
    }

    /// Keeps IPv6 from giving interface `index` an address of its own making (a
    /// link-local one) when it comes up (IN6_ADDR_GEN_MODE_NONE; refused while the link
    /// is being created, and too late once it is up). Both ends of a link with one
    /// hardware address would otherwise have the same one, which each end would answer
    /// for itself.
    pub fn without_link_local(&self, index: u32) -> io::Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.attributes = vec![LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
            vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
        )])];
        self.request(
            RouteNetlinkMessage::SetLink(link),
            NLM_F_REQUEST | NLM_F_ACK,
        )
    }

    /// Brings interface `index` up.
    pub fn bring_up(&self, index: u32) -> io::Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.header.flags = LinkFlags::Up;
        link.header.change_mask = LinkFlags::Up;
        self.request(
            RouteNetlinkMessage::SetLink(link),
            NLM_F_REQUEST | NLM_F_ACK,
        )
    }

    /// Gives interface `index` the single address `ip` (a /32 or /128), usable at once (no
    /// duplicate address detection: nothing else is on the link).
    pub fn add_address(&self, index: u32, ip: IpAddr) -> io::Result<()> {
        let mut message = AddressMessage::default();
        message.header.family = family(ip);
        message.header.prefix_len = full_length(ip);
        message.header.index = index;
        message.attributes = vec![
            AddressAttribute::Local(ip),
            AddressAttribute::Address(ip),
            AddressAttribute::Flags(AddressFlags::Nodad),
        ];
        self.change(RouteNetlinkMessage::NewAddress(message))
    }

    /// Adds a route to `destination`/`length` in `table`: of `kind` Local (the addresses
    /// are this namespace's own) or Unicast (out of interface `oif`, straight on the link,
    /// from `source` when given).
    pub fn add_route(
        &self,
        table: u8,
        kind: RouteType,
        destination: IpAddr,
        length: u8,
        oif: u32,
        source: Option<IpAddr>,
    ) -> io::Result<()> {
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
        self.change(RouteNetlinkMessage::NewRoute(message))
    }

    /// Every link of the namespace.
    pub fn links(&self) -> io::Result<Vec<Link>> {
        let answers = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        Ok(answers
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => Some(Link {
                    index: link.header.index,
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

    /// Sends a request to create something and waits for the kernel's acknowledgement.
    fn change(&self, message: RouteNetlinkMessage) -> io::Result<()> {
        self.request(
            message,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Sends a request and waits for the kernel's acknowledgement.
    fn request(&self, message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        let sequence = self.send(message, flags)?;
        loop {
            for answer in self.receive()? {
                if answer.header.sequence_number != sequence {
                    continue;
                }
                return match answer.payload {
                    NetlinkPayload::Error(error) => match error.code {
                        None => Ok(()),
                        Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                    },
                    _ => Err(io::Error::other("rtnetlink answered something else")),
                };
            }
        }
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
                    NetlinkPayload::Error(error) => {
                        let code = error.code.map_or(libc::EIO, |c| -c.get());
                        return Err(io::Error::from_raw_os_error(code));
                    }
                    NetlinkPayload::InnerMessage(inner) => found.push(inner),
                    _ => {}
                }
            }
        }
    }

    fn send(&self, message: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        let sequence = self.sequence.get().wrapping_add(1);
        self.sequence.set(sequence);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        packet.finalize();
        let mut buffer = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buffer);
        let sent = nix::sys::socket::send(
            self.socket.as_raw_fd(),
            &buffer,
            nix::sys::socket::MsgFlags::empty(),
        )?;
        if sent != buffer.len() {
            return Err(io::Error::other("rtnetlink took part of a request"));
        }
        Ok(sequence)
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
        )?;
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

impl AsFd for Rtnl {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn full_length(ip: IpAddr) -> u8 {
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
