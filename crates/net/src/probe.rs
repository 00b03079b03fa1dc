//! Start-up probe for io_uring. It calls `io_uring_setup` directly and checks the locked-memory
//! limit, without touching glommio, which panics when seccomp blocks io_uring (the default in
//! Docker and containerd).

/// The locked-memory floor below which glommio refuses to start.
pub const MIN_MEMLOCK: u64 = 512 * 1024;

/// Ok when an io_uring backend can start here; Err with the reason otherwise.
pub fn io_uring_usable() -> Result<(), String> {
    // struct io_uring_params is 120 bytes; zeroed means "no flags".
    let mut params = [0u8; 120];
    // SAFETY: a raw syscall with a correctly sized params buffer; the fd is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(format!("io_uring_setup failed: {err} (blocked by seccomp, kernel.io_uring_disabled, or an old kernel)"));
    }
    // SAFETY: fd is a descriptor we own.
    unsafe { libc::close(fd as i32) };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY
        && lim.rlim_cur < MIN_MEMLOCK
    {
        return Err(format!(
            "RLIMIT_MEMLOCK is {} bytes, below the {} glommio needs",
            lim.rlim_cur, MIN_MEMLOCK
        ));
    }
    Ok(())
}
