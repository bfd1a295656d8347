//! Resource limits for CMD: `--memory` (address space, RLIMIT_AS), `--fsize` (largest
//! file CMD may write, RLIMIT_FSIZE) and `--pids` (processes and threads at once,
//! RLIMIT_NPROC, or a pids cgroup when netbox runs as host root, which RLIMIT_NPROC does
//! not bind: cgroup.rs). All are set hard and soft alike just before CMD is executed, so
//! neither CMD nor anything it starts can raise them again (raising a hard limit needs
//! CAP_SYS_RESOURCE, which the sandbox has dropped). RLIMIT_AS and RLIMIT_FSIZE have no
//! exemption for root. The live probe checks each one that was asked for (probe.rs).
//!
//! `--cpus` has no rlimit: it is a cgroup's CPU quota (cgroup.rs), as is, for root, a
//! memory cgroup on top of `--memory`.

use serde::{Deserialize, Serialize};

/// Below this an address-space limit leaves no room for the probe to check it: its child
/// is a copy of netbox's pid 1, whose own footprint (~24 MiB in a debug build) counts.
pub const MIN_MEMORY: u64 = 32 << 20;

/// The most `--pids` accepts: the probe starts that many processes on every run, so the
/// limit must be one the host can afford to reach (and far below pid_max).
pub const MAX_PIDS: u64 = 4096;

/// The limits a run asked for; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes of address space.
    pub memory: Option<u64>,
    /// Bytes: no file may be written past this offset.
    pub file_size: Option<u64>,
    /// Processes CMD may have at once, itself included.
    pub pids: Option<u64>,
    /// Thousandths of a CPU the sandbox may use (`--cpus 1.5` is 1500); a cgroup's quota.
    pub cpu_millis: Option<u64>,
}

impl Limits {
    /// Whether no rlimit is asked for (`--cpus` is not one).
    pub fn no_rlimits(&self) -> bool {
        self.memory.is_none() && self.file_size.is_none() && self.pids.is_none()
    }

    /// The process count the kernel is told: CMD's processes plus the sandbox's pid 1,
    /// which runs as the same user in the same namespaces and so counts too.
    pub fn sandbox_pids(&self) -> Option<u64> {
        self.pids.map(|n| n.saturating_add(1))
    }
}

/// A line to say when the open-file limit (already raised to its hard limit at start)
/// cannot hold `max_connections` at once: each takes two fds (the client's and the
/// upstream's), the refusals in flight past it one each (256), the tunnels' splice pipes
/// two each (`MAX_SPLICING_DIRECTIONS`), a shared bridge's clients that have not named
/// their tenant one each (`unidentified`, `--max-unidentified`, of which a lobby holds up
/// to `CEILING_FACTOR` times), the admin listener's one each (64, as many times), and
/// netbox needs a few of its own.
pub fn open_file_note(max_connections: usize, unidentified: usize) -> Option<String> {
    use bridge::session::lobby::CEILING_FACTOR;
    use nix::sys::resource::{getrlimit, Resource};
    const OWN_FDS: u64 = 64
        + 256
        + 64 * CEILING_FACTOR as u64
        + 2 * bridge::carry::tunnel::MAX_SPLICING_DIRECTIONS as u64;
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let lobby = unidentified.saturating_mul(CEILING_FACTOR);
    let own = OWN_FDS.saturating_add(u64::try_from(lobby).ok()?);
    let wanted = u64::try_from(max_connections)
        .ok()?
        .saturating_mul(2)
        .saturating_add(own);
    (soft < wanted).then(|| {
        format!(
            "netbox: the open-file limit ({soft}) holds about {} connections at once, fewer \
             than --max-connections {max_connections}; raise it (ulimit -n) or lower \
             --max-connections{}",
            soft.saturating_sub(own) / 2,
            if unidentified > 0 {
                " or --max-unidentified"
            } else {
                ""
            }
        )
    })
}

/// Sets every requested limit, hard and soft, on the calling process; none when a test
/// breaks this control on purpose.
pub fn apply(limits: &Limits) -> nix::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    if crate::testhooks::hooks().skip_limits {
        return Ok(());
    }
    if let Some(bytes) = limits.memory {
        setrlimit(Resource::RLIMIT_AS, bytes, bytes)?;
    }
    if let Some(bytes) = limits.file_size {
        setrlimit(Resource::RLIMIT_FSIZE, bytes, bytes)?;
    }
    if let Some(count) = limits.sandbox_pids() {
        setrlimit(Resource::RLIMIT_NPROC, count, count)?;
    }
    Ok(())
}

/// A size as `N`, `NK`, `NM`, `NG` or `NT` (powers of 1024; `KiB`, `MB` and lower case
/// are accepted too).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (use e.g. 512K, 64M, 2G)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{text}`: unknown unit (use K, M, G or T)")),
    };
    let bytes = number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if bytes == 0 {
        return Err("a limit of 0 would stop everything; give a size above 0".into());
    }
    Ok(bytes)
}

/// `--memory`: a size of at least [`MIN_MEMORY`].
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if bytes < MIN_MEMORY {
        return Err(format!(
            "{text} leaves no room for a program to start; give at least 32M"
        ));
    }
    Ok(bytes)
}

/// `--cpus`: a number of CPUs with up to three decimals, at least 0.01 and at most the
/// machine's, in thousandths.
pub fn parse_cpus(text: &str) -> Result<u64, String> {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    parse_cpus_of(text, online)
}

fn parse_cpus_of(text: &str, online: u64) -> Result<u64, String> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty()
        || !digits(whole)
        || !digits(fraction)
        || fraction.len() > 3
        || whole.len() > 6
    {
        return Err(format!(
            "`{text}` is not a number of CPUs (use e.g. 0.5, 2, 1.25)"
        ));
    }
    // Both are at most six ASCII digits here, so they parse; empty is 0.
    let whole: u64 = whole.parse().unwrap_or(0);
    let fraction: u64 = format!("{fraction:0<3}").parse().unwrap_or(0);
    let millis = whole * 1000 + fraction;
    if millis < 10 {
        return Err(format!(
            "{text} CPUs is too little to run anything; give at least 0.01"
        ));
    }
    if millis > online * 1000 {
        return Err(format!(
            "{text} CPUs is more than this machine has ({online}); give at most {online}"
        ));
    }
    Ok(millis)
}

/// `--pids`: a count of at least 1.
pub fn parse_pids(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => {
            Err("a limit of 0 processes leaves no room for CMD itself; give at least 1".into())
        }
        Ok(n) if n > MAX_PIDS => Err(format!(
            "{n} is more than netbox can prove (its probe starts that many); give at most {MAX_PIDS}"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a number of processes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in [
            "",
            "M",
            "-1M",
            "1.5G",
            "12Q",
            "0",
            "0M",
            "99999999999999999999T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_memory("1M").is_err());
        assert!(parse_memory("16M").is_err());
        assert_eq!(parse_memory("32M"), Ok(32 << 20));
        assert!(parse_pids("4097").is_err());
        assert!(parse_pids("18446744073709551614").is_err());
        assert!(parse_pids("0").is_err());
        assert!(parse_pids("many").is_err());
        assert_eq!(parse_pids("16"), Ok(16));
    }

    #[test]
    fn cpus_parse_to_thousandths_within_the_machine() {
        assert_eq!(parse_cpus_of("1", 2), Ok(1000));
        assert_eq!(parse_cpus_of("0.5", 2), Ok(500));
        assert_eq!(parse_cpus_of(".25", 2), Ok(250));
        assert_eq!(parse_cpus_of("1.125", 2), Ok(1125));
        assert_eq!(parse_cpus_of("2", 2), Ok(2000));
        for bad in [
            "", ".", "0", "0.001", "2.5", "-1", "1e3", "1.2345", "a", "1,5",
        ] {
            assert!(parse_cpus_of(bad, 2).is_err(), "{bad}");
        }
    }
}
