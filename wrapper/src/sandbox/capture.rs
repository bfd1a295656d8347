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
//! lives as long as netbox holds its listeners.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};

use bridge::capture::addresses::{LINK_ADDRESS, LINK_ADDRESS_V6};
use netlink_packet_route::route::RouteType;

use crate::plan::capture::CapturePlan;
use crate::sys::rtnl::{Rtnl, TABLE_LOCAL, TABLE_MAIN};

/// The link's end in CMD's namespace.
pub const LINK_NAME: &str = "nb-capture";
/// Its end in the capture namespace.
pub const FAR_LINK_NAME: &str = "nb-sandbox";
/// Both ends' hardware address (locally administered).
const LINK_MAC: [u8; 6] = [0x02, 0x6e, 0x62, 0x00, 0x00, 0x01];

/// The capture namespace, made, listening and linked to CMD's.
pub struct FarSide {
    /// Configures the capture namespace from anywhere; kept for the probe, which reads
    /// what the namespace holds through it.
    pub rtnl: Rtnl,
    /// One per port, at every address, both families where IPv6 is up.
    pub listeners: Vec<TcpListener>,
    /// IPv6 is up (the stub hands out IPv6 addresses too, so they are routed as well).
    pub ipv6: bool,
}

/// Makes the capture namespace, entering it on the calling thread (a thread of its own,
/// while another makes CMD's namespace): `lo` up, every address local (`local 0.0.0.0/0`
/// and `local ::/0` on lo), a listener on each port of `plan`; then, once `cmd_namespace`
/// yields CMD's namespace, the veth pair, its near end put there (the other thread brings
/// it up with [`finish_link`]), and here the way back to the link's addresses.
/// Needs CAP_SYS_ADMIN and CAP_NET_ADMIN in the sandbox's user namespace.
pub fn make_far_side(
    plan: &CapturePlan,
    cmd_namespace: std::sync::mpsc::Receiver<OwnedFd>,
) -> Result<FarSide, (String, String)> {
    let failed = |step: &str| {
        let step = step.to_owned();
        move |e: std::io::Error| (step, e.to_string())
    };
    crate::sandbox::namespaces::unshare_net()
        .map_err(std::io::Error::from)
        .map_err(failed("enter capture's network namespace"))?;
    crate::sys::netdev::bring_loopback_up().map_err(failed("bring lo up (capture)"))?;
    let ipv6 = std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).is_ok();
    let rtnl = Rtnl::open().map_err(failed("open rtnetlink (capture)"))?;
    let lo = nix::net::if_::if_nametoindex("lo")
        .map_err(std::io::Error::from)
        .map_err(failed("find lo (capture)"))?;
    let mut every = vec![IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)];
    let mut own = vec![IpAddr::V4(LINK_ADDRESS)];
    if ipv6 {
        every.push(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        own.push(IpAddr::V6(LINK_ADDRESS_V6));
    }
    for &any in &every {
        rtnl.add_route(TABLE_LOCAL, RouteType::Local, any, 0, lo, None)
            .map_err(failed("make every address local (capture)"))?;
    }
    let mut listeners = Vec::with_capacity(plan.ports.len());
    for &port in &plan.ports {
        // Dual-stack where IPv6 is up: one listener takes both families.
        let listener = if ipv6 {
            TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)))
        } else {
            TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port)))
        }
        .map_err(failed("listen for captured connections"))?;
        bridge::listen::deepen_backlog(&listener)
            .map_err(failed("listen for captured connections"))?;
        listeners.push(listener);
    }
    // The other thread's set-up failed if it sends nothing: it reports why.
    let cmd_namespace = cmd_namespace.recv().map_err(|_| {
        (
            "link capture".to_owned(),
            "CMD's network namespace was not made".to_owned(),
        )
    })?;
    rtnl.add_veth_pair(FAR_LINK_NAME, LINK_NAME, LINK_MAC, cmd_namespace.as_fd())
        .map_err(failed("make capture's link (veth)"))?;
    let far = nix::net::if_::if_nametoindex(FAR_LINK_NAME)
        .map_err(std::io::Error::from)
        .map_err(failed("find capture's link (capture)"))?;
    if ipv6 {
        rtnl.without_link_local(far)
            .map_err(failed("keep IPv6 off capture's link (capture)"))?;
    }
    rtnl.bring_up(far)
        .map_err(failed("bring capture's link up (capture)"))?;
    if ipv6 {
        // A link-local address is looked up on the interface it came in by, where the
        // catch-all on lo is not: local on the link too, or a connection to one would
        // be dropped unanswered.
        let link_local = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0));
        rtnl.add_route(TABLE_LOCAL, RouteType::Local, link_local, 10, far, None)
            .map_err(failed("make link-local addresses local (capture)"))?;
    }
    for &address in &own {
        // More specific than the catch-all, in the same table: the answers to the
        // link's address go back over the link.
        rtnl.add_route(
            TABLE_LOCAL,
            RouteType::Unicast,
            address,
            full_length(address),
            far,
            None,
        )
        .map_err(failed("route back to the sandbox (capture)"))?;
    }
    if crate::testhooks::hooks().extra_capture_link {
        // Both ends here, one up: a way the probe must find.
        let here = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(failed("open capture's namespace (test hook)"))?;
        rtnl.add_veth_pair("nb-extra", "nb-extra-peer", LINK_MAC, here.as_fd())
            .and_then(|()| {
                let extra = nix::net::if_::if_nametoindex("nb-extra")?;
                rtnl.bring_up(extra)
            })
            .map_err(failed("add an extra link (test hook)"))?;
    }
    Ok(FarSide {
        rtnl,
        listeners,
        ipv6,
    })
}

/// Finishes the link in CMD's namespace (the calling thread's): its end up, with the
/// link's own addresses, and every other address routed over it (unless `routes` is
/// false: a test build's broken capture).
pub fn finish_link(far: &FarSide, routes: bool) -> Result<(), (String, String)> {
    let failed = |step: &str| {
        let step = step.to_owned();
        move |e: std::io::Error| (step, e.to_string())
    };
    let here = Rtnl::open().map_err(failed("open rtnetlink"))?;
    let near = nix::net::if_::if_nametoindex(LINK_NAME)
        .map_err(std::io::Error::from)
        .map_err(failed("find capture's link"))?;
    if far.ipv6 {
        here.without_link_local(near)
            .map_err(failed("keep IPv6 off capture's link"))?;
    }
    here.bring_up(near)
        .map_err(failed("bring capture's link up"))?;
    let mut own = vec![IpAddr::V4(LINK_ADDRESS)];
    if far.ipv6 {
        own.push(IpAddr::V6(LINK_ADDRESS_V6));
    }
    for &address in &own {
        here.add_address(near, address)
            .map_err(failed("give capture's link its address"))?;
        let any = match address {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        if routes {
            here.add_route(TABLE_MAIN, RouteType::Unicast, any, 0, near, Some(address))
                .map_err(failed("route every address to capture"))?;
        }
    }
    Ok(())
}

fn full_length(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}
