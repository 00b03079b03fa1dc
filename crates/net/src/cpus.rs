//! How many CPUs this process may use, and whether its threads should be pinned to them.

/// CPUs available to this process. `std::thread::available_parallelism` already honours both
/// the scheduler affinity mask and the cgroup v1/v2 CPU quota (`cpu.max`), which is what a
/// Kubernetes CPU limit sets.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `pin-threads`: `yes`, `no`, or `auto`, which pins only when the process was given CPUs of
/// its own (docs/architecture.md, "Threads and shards").
pub fn should_pin(setting: &str) -> bool {
    match setting {
        "yes" => true,
        "auto" => {
            let allowed = core_affinity::get_core_ids().map_or(0, |ids| ids.len());
            pins_under_auto(allowed, online_cpus())
        }
        _ => false,
    }
}

/// An affinity mask narrower than the machine (taskset, `docker --cpuset-cpus`, the kubelet's
/// static CPU manager) means an operator set cores aside for this process: pinning then keeps
/// each shard's data in one core's caches. A mask of every CPU means the cores are shared
/// with whatever else runs there, and a pinned thread cannot step aside to an idle core when
/// another process holds its own: measured on a 2-CPU machine with the load generator on the
/// same cores, pinning cost a third of the throughput of one-request-at-a-time clients
/// (docs/benchmarks.md, "Pinning threads").
fn pins_under_auto(allowed: usize, online: usize) -> bool {
    allowed > 0 && allowed < online
}

fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_pins_only_a_process_given_cores_of_its_own() {
        assert!(pins_under_auto(2, 8));
        assert!(!pins_under_auto(8, 8));
        assert!(!pins_under_auto(0, 8), "an unreadable mask pins nothing");
    }

    #[test]
    fn explicit_settings_win() {
        assert!(should_pin("yes"));
        assert!(!should_pin("no"));
        // This process's mask is the whole machine unless the test runs under taskset.
        let whole = core_affinity::get_core_ids().map_or(0, |ids| ids.len()) == online_cpus();
        assert_eq!(should_pin("auto"), !whole);
    }
}
