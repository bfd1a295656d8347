//! Capture's part of the sandbox's network: a second network namespace of netbox's (the
//! capture namespace) where every address is local and netbox's listeners wait at every
//! address on the ports the allowlist names, joined to CMD's namespace by a veth pair.
//! In CMD's namespace every address but loopback's and the link's own is routed over the
//! link, so a connection made without the proxy lands on netbox's listener there, whose
//! accepted socket's local address is the one dialled; a port with no listener is refused
//! at once (a reset from the capture namespace). The listeners are not in CMD's namespace,
//! so they take no port from it: a server in the sandbox may listen at every address on
//! any port (but the proxy's and the DNS stub's).
//!
//! The link needs neither ARP nor neighbour discovery: both ends have the same hardware
//! address and resolve no neighbours (IFF_NOARP), so every frame is addressed to the
//! receiving end. The capture namespace has nothing but `lo` and its end of the link; it
//! lives as long as pid 1, which keeps a netlink socket there (for the probe, and so that
//! after `--fetch`'s cut, with netbox's listeners closed, what it carried is refused).

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};

use bridge::session::addresses::{LINK_ADDRESS, LINK_ADDRESS_V6};
use netlink_packet_route::route::RouteType;

use crate::plan::capture::CapturePlan;
use crate::sys::rtnl::{full_length, Change, Rtnl, TABLE_LOCAL, TABLE_MAIN};

/// The link's end in CMD's namespace.
pub const LINK_NAME: &str = "nb-capture";
/// Its end in the capture namespace.
pub const FAR_LINK_NAME: &str = "nb-sandbox";
/// Both ends' hardware address (locally administered).
const LINK_MAC: [u8; 6] = [0x02, 0x6e, 0x62, 0x00, 0x00, 0x01];

/// The capture namespace, made and listening, not yet linked.
pub struct FarSide {
    /// Configures the capture namespace from anywhere; kept for the probe, which reads
    /// what the namespace holds through it.
    pub rtnl: Rtnl,
    /// The namespace itself, for the link's far end to be put in.
    namespace: OwnedFd,
    /// One per port, at every address, both families where IPv6 is up.
    pub listeners: Vec<TcpListener>,
    /// IPv6 is up (the stub hands out IPv6 addresses too, so they are routed as well).
    pub ipv6: bool,
}

/// Makes the capture namespace, entering it on the calling thread: `lo` up, every address
/// local (`local 0.0.0.0/0` and `local ::/0` on lo), a listener on each port of `plan`.
/// Needs CAP_SYS_ADMIN and CAP_NET_ADMIN in the sandbox's user namespace. The caller then
/// enters CMD's own namespace and calls [`link`]. (One thread makes both namespaces, one
/// after the other: on two CPUs, with the mounting thread on the other, a thread of its
/// own for this waited longer for a CPU than the work takes.)
pub fn make_far_side(plan: &CapturePlan) -> Result<FarSide, (String, String)> {
    crate::sandbox::namespaces::unshare_net()
        .map_err(std::io::Error::from)
        .map_err(failed("enter capture's network namespace"))?;
    let namespace = std::fs::File::open("/proc/thread-self/ns/net")
        .map(OwnedFd::from)
        .map_err(failed("open capture's network namespace"))?;
    crate::sys::netdev::bring_loopback_up().map_err(failed("bring lo up (capture)"))?;
    let ipv6 = crate::sys::netdev::ipv6_up();
    let rtnl = Rtnl::open().map_err(failed("open rtnetlink (capture)"))?;
    let lo = nix::net::if_::if_nametoindex("lo")
        .map_err(std::io::Error::from)
        .map_err(failed("find lo (capture)"))?;
    let every = every_address(ipv6).into_iter().map(|any| {
        let change = Change::route(TABLE_LOCAL, RouteType::Local, any, 0, lo, None);
        ("make every address local (capture)", change)
    });
    rtnl.apply(every.collect()).map_err(refused)?;
    let mut listeners = Vec::with_capacity(plan.ports.len());
    for &port in &plan.ports {
        // Dual-stack where IPv6 is up: one listener takes both families.
        #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
        let listener = if ipv6 {
            TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)))
        } else {
            TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port)))
        }
        .map_err(failed("listen for captured connections"))?;
        bridge::serve::listen::deepen_backlog(&listener)
            .map_err(failed("listen for captured connections"))?;
        listeners.push(listener);
    }
    Ok(FarSide {
        rtnl,
        namespace,
        listeners,
        ipv6,
    })
}

/// Joins CMD's namespace (the calling thread's) to the capture namespace: the veth pair;
/// in the capture namespace, its end up and the way back to the link's addresses; here,
/// its end up with those addresses, and every other address routed over it (unless
/// `routes` is false: a test build's broken capture).
pub fn link(far: &FarSide, routes: bool) -> Result<(), (String, String)> {
    let here = Rtnl::open().map_err(failed("open rtnetlink"))?;
    let pair = Change::veth_pair(LINK_NAME, FAR_LINK_NAME, LINK_MAC, far.namespace.as_fd());
    here.apply(vec![("make capture's link (veth)", pair)])
        .map_err(refused)?;
    let near = nix::net::if_::if_nametoindex(LINK_NAME)
        .map_err(std::io::Error::from)
        .map_err(failed("find capture's link"))?;
    let far_index = far
        .rtnl
        .index_of(FAR_LINK_NAME)
        .map_err(failed("find capture's link (capture)"))?;
    let own = own_addresses(far.ipv6);
    // The capture namespace's end: up, with no address of its own (IPv6 would make
    // one), and the way back to the link's addresses, more specific than the catch-all in
    // the same table. A link-local address is looked up on the interface it came in by,
    // where the catch-all on lo is not: local on the link too, or a connection to one
    // would be dropped unanswered.
    let mut there = Vec::new();
    if far.ipv6 {
        there.push((
            "keep IPv6 off capture's link (capture)",
            Change::without_link_local(far_index),
        ));
    }
    there.push((
        "bring capture's link up (capture)",
        Change::bring_up(far_index),
    ));
    for &address in &own {
        let back = Change::route(
            TABLE_LOCAL,
            RouteType::Unicast,
            address,
            full_length(address),
            far_index,
            None,
        );
        there.push(("route back to the sandbox (capture)", back));
    }
    if far.ipv6 {
        let link_local = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0));
        let local = Change::route(
            TABLE_LOCAL,
            RouteType::Local,
            link_local,
            10,
            far_index,
            None,
        );
        there.push(("make link-local addresses local (capture)", local));
    }
    far.rtnl.apply(there).map_err(refused)?;
    if crate::testhooks::hooks().extra_capture_link {
        // Both ends in the capture namespace, one up: a way the probe must find.
        let extra = Change::veth_pair("nb-extra", "nb-extra-peer", LINK_MAC, far.namespace.as_fd());
        far.rtnl
            .apply(vec![("add an extra link (test hook)", extra)])
            .map_err(refused)?;
        let index = far
            .rtnl
            .index_of("nb-extra")
            .map_err(failed("add an extra link (test hook)"))?;
        far.rtnl
            .apply(vec![(
                "add an extra link (test hook)",
                Change::bring_up(index),
            )])
            .map_err(refused)?;
    }
    // CMD's end: up, with the link's addresses, every other address routed over it.
    let mut here_changes = Vec::new();
    if far.ipv6 {
        here_changes.push((
            "keep IPv6 off capture's link",
            Change::without_link_local(near),
        ));
    }
    here_changes.push(("bring capture's link up", Change::bring_up(near)));
    for (&address, any) in own.iter().zip(every_address(far.ipv6)) {
        here_changes.push((
            "give capture's link its address",
            Change::address(near, address),
        ));
        if routes {
            let every = Change::route(TABLE_MAIN, RouteType::Unicast, any, 0, near, Some(address));
            here_changes.push(("route every address to capture", every));
        }
    }
    here.apply(here_changes).map_err(refused)?;
    // Until both of these hold, a connection made at once (the probe's, CMD's) gets no
    // SYN-ACK and TCP tries again a second later (measured: 1-2% of runs took 1.02 s):
    // - the far end, brought up while its peer was down, sends nothing until the kernel's
    //   link watch, on a worker of its own, has taken in its carrier and started its
    //   transmit queue (a packet sent before is dropped);
    // - an IPv6 address is added at once but made the namespace's own (its local route)
    //   by the kernel's address worker, later, even without duplicate address detection
    //   (an answer to it before is dropped). IPv4 addresses are local as they are added.
    let deadline = std::time::Instant::now() + LINK_WAIT;
    wait_until(deadline, || far.rtnl.is_up(FAR_LINK_NAME));
    if far.ipv6 {
        wait_until(deadline, || here.is_local(IpAddr::V6(LINK_ADDRESS_V6)));
    }
    Ok(())
}

/// How long the link may take to carry packets before the run goes on without waiting.
const LINK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Asks `ready` until it says yes, until `deadline` at most, pausing briefly in between
/// (the kernel's workers need the CPU this would spin on). Past the deadline, or if the
/// kernel cannot say, the run goes on: a connection is only late, and the probe still
/// checks that capture works.
fn wait_until(deadline: std::time::Instant, ready: impl Fn() -> std::io::Result<bool>) {
    while matches!(ready(), Ok(false)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

/// A step that failed, with why.
fn failed(step: &str) -> impl FnOnce(std::io::Error) -> (String, String) + '_ {
    move |e| (step.to_owned(), e.to_string())
}

/// A change the kernel refused, as a failed step.
fn refused((step, e): (&str, std::io::Error)) -> (String, String) {
    (step.to_owned(), e.to_string())
}

/// The unspecified address of each family in use, IPv4's first.
fn every_address(ipv6: bool) -> Vec<IpAddr> {
    let mut every = vec![IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)];
    if ipv6 {
        every.push(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    }
    every
}

/// The link's own addresses in CMD's namespace, IPv4's first.
fn own_addresses(ipv6: bool) -> Vec<IpAddr> {
    let mut own = vec![IpAddr::V4(LINK_ADDRESS)];
    if ipv6 {
        own.push(IpAddr::V6(LINK_ADDRESS_V6));
    }
    own
}
