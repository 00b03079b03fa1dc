//! Fits the open-files limit to `maxclients` at start-up, as Redis does (its
//! adjustOpenFilesLimit): every client is a descriptor, so the soft `RLIMIT_NOFILE` is raised
//! to `maxclients` plus a reserve; when the OS refuses, the highest limit it accepts is kept and
//! `maxclients` is lowered to fit, with Redis's warnings. Without this a default soft limit of
//! 1024 makes `accept` fail with EMFILE long before `maxclients` (10000) is reached. Unlike
//! Redis's, the reserve grows with the number of threads, which each hold descriptors.

use std::io;

use damselfly_commands::config::Config;

/// Descriptors kept beyond one per client, as Redis's CONFIG_MIN_RESERVED_FDS: listeners,
/// log file, standard streams.
const RESERVED_FDS: u64 = 32;
/// And per thread: its event loop, wake-up descriptors and copies of the listeners. Measured:
/// a server opens 16-18 descriptors with 2 threads and 46-48 with 8, so Redis's 32 alone
/// would let `accept` fail before `maxclients` from 5 threads on.
const FDS_PER_THREAD: u64 = 5;
/// How much lower each further attempt asks for after an unexplained refusal.
const STEP: u64 = 16;
/// Linux's default ceiling for any process (fs.nr_open), when /proc cannot be read.
const DEFAULT_NR_OPEN: u64 = 1 << 20;

/// What adjusting decided; `adjust` logs it.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The current limit already suffices.
    Enough,
    /// The soft limit was raised to what `maxclients` needs.
    Raised { from: u64, to: u64 },
    /// The OS refused: the limit is `limit` and `maxclients` drops to `maxclients`.
    Reduced {
        wanted: u64,
        error: i32,
        limit: u64,
        maxclients: u64,
    },
    /// Not even the reserve fits: the server cannot start.
    TooLow { current: u64, wanted: u64 },
    /// getrlimit failed: assume 1024, as Redis does.
    Unknown { error: i32, maxclients: u64 },
}

/// Adjusts the limit for the configured `maxclients`, lowering it if needed. Exits with status
/// 1, as Redis does, when not even the reserve fits.
pub fn adjust(config: &Config) {
    let requested = config.get_u64("maxclients");
    // As main.rs counts them.
    let threads = match config.get_u64("threads") {
        0 => damselfly_net::available_cpus() as u64,
        n => n,
    };
    let reserved = RESERVED_FDS + FDS_PER_THREAD * threads;
    let outcome = plan(requested, reserved, get_nofile(), nr_open(), set_nofile);
    let lower_to = |n: u64| {
        if let Err(e) = config.set_initial("maxclients", &n.to_string()) {
            tracing::warn!("cannot lower maxclients to {n}: {e}");
        }
    };
    match outcome {
        Outcome::Enough => {}
        Outcome::Raised { from, to } => tracing::info!(
            "Increased maximum number of open files to {to} (it was originally set to {from})."
        ),
        Outcome::Reduced {
            wanted,
            error,
            limit,
            maxclients,
        } => {
            tracing::warn!(
                "You requested maxclients of {requested} requiring at least {wanted} max file descriptors."
            );
            tracing::warn!(
                "Server can't set maximum open files to {wanted} because of OS error: {}.",
                os_error(error)
            );
            tracing::warn!(
                "Current maximum open files is {limit}. maxclients has been reduced to {maxclients} to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'."
            );
            lower_to(maxclients);
        }
        Outcome::TooLow { current, wanted } => {
            tracing::warn!(
                "Your current 'ulimit -n' of {current} is not enough for the server to start. Please increase your open file limit to at least {wanted}. Exiting."
            );
            std::process::exit(1);
        }
        Outcome::Unknown { error, maxclients } => {
            tracing::warn!(
                "Unable to obtain the current NOFILE limit ({}), assuming 1024 and setting the max clients configuration accordingly.",
                os_error(error)
            );
            lower_to(maxclients);
        }
    }
}

/// Decides the limit for `maxclients` plus `reserved`: `current` is (soft, hard) or
/// getrlimit's errno, `nr_open` the kernel's ceiling, and `set` tries one limit (soft and
/// hard alike, as Redis sets them).
fn plan(
    maxclients: u64,
    reserved: u64,
    current: Result<(u64, u64), i32>,
    nr_open: u64,
    mut set: impl FnMut(u64) -> Result<(), i32>,
) -> Outcome {
    let wanted = maxclients.saturating_add(reserved);
    let (old, hard) = match current {
        Ok(limits) => limits,
        Err(error) => {
            return Outcome::Unknown {
                error,
                maxclients: 1024u64.saturating_sub(reserved).max(1),
            }
        }
    };
    if old >= wanted {
        return Outcome::Enough;
    }
    let mut best = wanted;
    let mut error = 0;
    while best > old {
        match set(best) {
            Ok(()) => break,
            Err(e) => error = e,
        }
        // Nothing goes above nr_open, and an unprivileged process (the usual reason for a
        // refusal) not above its hard limit: try those ceilings first instead of walking down
        // from a huge `maxclients` in small steps.
        best = if best > nr_open {
            nr_open
        } else if best > hard {
            hard
        } else if best < STEP {
            old
        } else {
            best - STEP
        };
    }
    let best = best.max(old);
    if best >= wanted {
        Outcome::Raised {
            from: old,
            to: wanted,
        }
    } else if best <= reserved {
        Outcome::TooLow {
            current: old,
            wanted,
        }
    } else {
        Outcome::Reduced {
            wanted,
            error,
            limit: best,
            maxclients: best - reserved,
        }
    }
}

fn get_nofile() -> Result<(u64, u64), i32> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == -1 {
        return Err(last_errno());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

fn set_nofile(n: u64) -> Result<(), i32> {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == -1 {
        return Err(last_errno());
    }
    Ok(())
}

fn nr_open() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_NR_OPEN)
}

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// strerror's text, without Rust's " (os error N)" suffix, as Redis prints it.
fn os_error(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process whose hard limit is `hard`: any limit up to it is accepted.
    fn unprivileged(hard: u64, tried: &mut Vec<u64>) -> impl FnMut(u64) -> Result<(), i32> + '_ {
        move |n| {
            tried.push(n);
            if n <= hard {
                Ok(())
            } else {
                Err(libc::EPERM)
            }
        }
    }

    #[test]
    fn enough_already() {
        let mut tried = Vec::new();
        let out = plan(
            10000,
            32,
            Ok((20000, 20000)),
            1 << 20,
            unprivileged(0, &mut tried),
        );
        assert_eq!(out, Outcome::Enough);
        assert!(tried.is_empty());
    }

    #[test]
    fn raised_within_the_hard_limit() {
        let mut tried = Vec::new();
        let out = plan(
            10000,
            32,
            Ok((1024, 20000)),
            1 << 20,
            unprivileged(20000, &mut tried),
        );
        assert_eq!(
            out,
            Outcome::Raised {
                from: 1024,
                to: 10032
            }
        );
        assert_eq!(tried, [10032]);
    }

    #[test]
    fn reduced_to_the_hard_limit() {
        let mut tried = Vec::new();
        let out = plan(
            10000,
            32,
            Ok((1024, 4096)),
            1 << 20,
            unprivileged(4096, &mut tried),
        );
        assert_eq!(
            out,
            Outcome::Reduced {
                wanted: 10032,
                error: libc::EPERM,
                limit: 4096,
                maxclients: 4064
            }
        );
        assert_eq!(tried, [10032, 4096]);
        // A hard limit equal to the soft one: nothing better than what we have.
        let mut tried = Vec::new();
        let out = plan(
            10000,
            32,
            Ok((1024, 1024)),
            1 << 20,
            unprivileged(1024, &mut tried),
        );
        assert_eq!(
            out,
            Outcome::Reduced {
                wanted: 10032,
                error: libc::EPERM,
                limit: 1024,
                maxclients: 992
            }
        );
        assert_eq!(tried, [10032]);
    }

    #[test]
    fn huge_maxclients_tries_the_ceilings_not_every_step() {
        let mut tried = Vec::new();
        let out = plan(
            i64::MAX as u64,
            32,
            Ok((1024, 1 << 30)),
            1 << 20,
            unprivileged(1 << 30, &mut tried),
        );
        assert!(matches!(out, Outcome::Reduced { limit, maxclients, .. }
            if limit == 1 << 20 && maxclients == (1 << 20) - 32));
        assert_eq!(tried.len(), 2);
    }

    #[test]
    fn refusals_below_the_hard_limit_walk_down() {
        // Something else refuses (a container's own cap at 2000): walk down in steps of 16.
        let mut tried = Vec::new();
        let out = plan(
            10000,
            32,
            Ok((1024, 20000)),
            1 << 20,
            unprivileged(2000, &mut tried),
        );
        assert!(matches!(out, Outcome::Reduced { limit, .. } if limit <= 2000 && limit > 1984));
        assert!(tried.len() < 600);
    }

    #[test]
    fn too_low_to_start_and_unknown() {
        let mut tried = Vec::new();
        let out = plan(
            10000,
            32,
            Ok((20, 20)),
            1 << 20,
            unprivileged(20, &mut tried),
        );
        assert_eq!(
            out,
            Outcome::TooLow {
                current: 20,
                wanted: 10032
            }
        );
        let out = plan(10000, 32, Err(libc::EINVAL), 1 << 20, |_| Ok(()));
        assert_eq!(
            out,
            Outcome::Unknown {
                error: libc::EINVAL,
                maxclients: 992
            }
        );
    }

    #[test]
    fn the_reserve_counts_threads() {
        let mut tried = Vec::new();
        let out = plan(
            100,
            42,
            Ok((1024, 1024)),
            1 << 20,
            unprivileged(1024, &mut tried),
        );
        assert_eq!(out, Outcome::Enough);
        let out = plan(
            10000,
            42,
            Ok((1024, 1024)),
            1 << 20,
            unprivileged(1024, &mut tried),
        );
        assert!(matches!(
            out,
            Outcome::Reduced {
                wanted: 10042,
                maxclients: 982,
                ..
            }
        ));
    }

    #[test]
    fn error_texts_are_strerror() {
        assert_eq!(os_error(libc::EPERM), "Operation not permitted");
    }
}
