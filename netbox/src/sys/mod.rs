//! Thin safe wrappers over the kernel interfaces nix does not cover. Every `unsafe` block in
//! netbox lives here, one file per interface, each with the invariant that makes it
//! sound.

pub mod fd;
pub mod memory;
pub mod mount_api;
pub mod mountid;
pub mod netdev;
pub mod notified;
pub mod process;
pub mod pty;
pub mod resolve;
pub mod rtnl;
pub mod seccomp;
pub mod sockdiag;
pub mod socket;
pub mod unixdiag;
pub mod xattr;
