//! Drops every capability for good: bounding, ambient, inheritable, effective, permitted,
//! then sets no_new_privs (capabilities(7), prctl(2)).
//!
//! Why all of it (measured on kernel 6.18, 2026-11-29): with capabilities still held in the
//! user namespace, the sandbox can remount `/` read-write and unmount `.git`: not a sandbox.
//! `capset(0)` alone is not enough: capabilities come back on execve unless the bounding set
//! is emptied or no_new_privs is set; netbox does both. After the drop every mount
//! operation is EPERM, and a nested user namespace cannot undo the mounts (MNT_LOCKED).

use caps::{CapSet, Capability};

/// Drops every capability and sets no_new_privs; verifies the result.
pub fn drop_all() -> Result<(), String> {
    caps::clear(None, CapSet::Ambient).map_err(|e| format!("clear ambient: {e}"))?;
    // Dropping from the bounding set needs CAP_SETPCAP, so it goes before the others.
    for cap in caps::all() {
        if caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("drop {cap} from bounding set: {e}"))?;
        }
    }
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set).map_err(|e| format!("clear {set:?}: {e}"))?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("set no_new_privs: {e}"))?;
    let left: Vec<Capability> = [
        CapSet::Ambient,
        CapSet::Bounding,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ]
    .iter()
    .flat_map(|&set| caps::read(None, set).unwrap_or_default())
    .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("capabilities still held after the drop: {left:?}"))
    }
}
