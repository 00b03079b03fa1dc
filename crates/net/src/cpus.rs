//! How many CPUs this process may use.

/// CPUs available to this process. `std::thread::available_parallelism` already honours both
/// the scheduler affinity mask and the cgroup v1/v2 CPU quota (`cpu.max`), which is what a
/// Kubernetes CPU limit sets.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
