//! Small helpers shared by the benchmarks: rates, sizes, process figures.

use std::time::Duration;

pub fn gbps(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9) / 1e9
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Peak resident set size of this process (VmHWM), in bytes.
pub fn peak_rss() -> Option<u64> {
    proc_status_kib("self", "VmHWM:").map(|k| k * 1024)
}

/// Current resident set size of this process (VmRSS), in bytes.
pub fn current_rss() -> Option<u64> {
    proc_status_kib("self", "VmRSS:").map(|k| k * 1024)
}

/// A `kB` field of `/proc/<pid>/status`.
fn proc_status_kib(pid: &str, field: &str) -> Option<u64> {
    kib_field(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        field,
    )
}

/// The figure of a `Field:   N kB` line of a /proc text (status, meminfo).
fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Peak RSS of another process (a server under test), in bytes.
pub fn peak_rss_of(pid: u32) -> Option<u64> {
    proc_status_kib(&pid.to_string(), "VmHWM:").map(|k| k * 1024)
}

/// Prints the peak RSS of the server under test, when its PID was given.
pub fn print_server_rss(pid: Option<u32>) {
    if let Some(pid) = pid {
        match peak_rss_of(pid) {
            Some(rss) => println!("server peak RSS {:.0} MiB (pid {pid})", mib(rss)),
            None => println!("server peak RSS: pid {pid} not readable"),
        }
    }
}

/// Asks the kernel to drop clean page-cache pages, so reads hit the device.
/// Needs root; returns false where it is not allowed.
pub fn drop_page_cache() -> bool {
    nix::unistd::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

/// Writes back what the machine has dirty (sync), then waits until the
/// kernel's dirty and writeback pages are under 16 MiB or `max` has passed,
/// so that what is measured next does not run beside the writeback of what
/// was written before. Returns the time it took.
pub async fn settle(max: Duration) -> anyhow::Result<Duration> {
    let started = std::time::Instant::now();
    tokio::task::spawn_blocking(nix::unistd::sync).await?;
    while started.elapsed() < max {
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        let kib = |field| kib_field(&meminfo, field).unwrap_or(0);
        if kib("Dirty:") + kib("Writeback:") < 16 * 1024 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(started.elapsed())
}

/// Current resident set size of another process, in bytes.
pub fn rss_of(pid: u32) -> Option<u64> {
    proc_status_kib(&pid.to_string(), "VmRSS:").map(|k| k * 1024)
}

/// User + system CPU time another process has used so far, from
/// `/proc/<pid>/stat`.
pub fn cpu_time_of(pid: u32) -> anyhow::Result<Duration> {
    cpu_time_at(&format!("/proc/{pid}/stat"))
}

/// User + system CPU time from a `/proc` stat file: a process's, or one
/// thread's (`/proc/<pid>/task/<tid>/stat`).
pub fn cpu_time_at(path: &str) -> anyhow::Result<Duration> {
    let f = stat_fields(path)?;
    anyhow::ensure!(f.len() > 13, "short {path}");
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    // /proc reports clock ticks of USER_HZ, 100 on Linux.
    Ok(Duration::from_millis(ticks * 10))
}

/// The fields of a `/proc` stat file after the command name (which may hold
/// spaces): the first is field 3 (state), so field N is at index N - 3.
pub fn stat_fields(path: &str) -> anyhow::Result<Vec<String>> {
    let stat = std::fs::read_to_string(path)?;
    let rest = stat
        .rsplit_once(')')
        .ok_or_else(|| anyhow::anyhow!("{path} without a command name"))?
        .1;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::kib_field;

    #[test]
    fn a_kib_field_is_read_by_its_whole_name() {
        let meminfo = "Dirty:              2048 kB\nWriteback:             0 kB\nWritebackTmp:        512 kB\n";
        assert_eq!(kib_field(meminfo, "Dirty:"), Some(2048));
        assert_eq!(kib_field(meminfo, "Writeback:"), Some(0));
        assert_eq!(kib_field(meminfo, "Shmem:"), None);
    }
}
