//! The `damselfly` server binary: reads flags and an optional redis.conf-style file, sets up
//! logging, binds the listeners, picks the I/O backend and runs until SHUTDOWN, SIGTERM or
//! SIGINT.

mod check;
mod export;
mod fd_limit;
mod loading;
mod options;
mod recovery;

use std::process::ExitCode;
use std::sync::Arc;

use damselfly_commands::config::Config;
use damselfly_coord::cluster::Cluster;
use damselfly_coord::ServerInfo;
use damselfly_net::{probe, Backend, Listeners, Server};

// jemalloc, chosen by measurement over mimalloc (docs/memory.md): fewer resident bytes per
// key, and the statistics INFO memory reports.
#[global_allocator]
static GLOBAL: damselfly_memory::Allocator = damselfly_memory::Allocator;

/// Where both backends work, the one the benchmarks show faster on this machine class
/// (docs/benchmarks.md).
const AUTO_PREFERS: Backend = Backend::Epoll;

fn choose_backend(requested: &str) -> Result<Backend, String> {
    match requested {
        "epoll" => Ok(Backend::Epoll),
        "uring" => probe::io_uring_usable()
            .map(|_| Backend::Uring)
            .map_err(|why| format!("--io-backend uring is not usable here: {why}")),
        _ => match probe::io_uring_usable() {
            Ok(()) => Ok(AUTO_PREFERS),
            Err(why) => {
                tracing::warn!("io_uring unavailable, falling back to epoll: {why}");
                Ok(Backend::Epoll)
            }
        },
    }
}

/// Blocks SIGTERM and SIGINT in every thread and turns them into a shutdown request, handled
/// by a dedicated thread waiting in sigwait (no async-signal-safety concerns).
fn install_signal_thread(cluster: Arc<damselfly_coord::Cluster>) {
    // SAFETY: plain libc signal-mask calls on a zeroed sigset.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let spawned = std::thread::Builder::new()
        .name("damselfly-signals".into())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: waits on the signals blocked above.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                tracing::warn!(signal = sig, "received signal, shutting down");
                cluster.shutdown.trigger();
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the signal thread: {e}");
    }
}

/// Turns transparent huge pages off for this process, as Redis does by default
/// (`disable-thp yes`): with them the allocator's partly used 2 MB regions count whole in the
/// resident set (about 6 bytes per small key in docs/memory.md's measurements).
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        tracing::warn!(
            "could not disable transparent huge pages: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The users of the ACL file (`aclfile`), or of the config file's `user` lines: one or the
/// other, as in Redis.
fn load_users(cluster: &Cluster, users: &str, config_file: Option<&str>) -> Result<(), String> {
    let aclfile = cluster.config.get("aclfile");
    let has_users = !users.trim().is_empty();
    if has_users && !aclfile.is_empty() {
        return Err("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.".into());
    }
    let loaded = if !aclfile.is_empty() {
        damselfly_coord::acl_family::load_file(&cluster.acl, &aclfile)
    } else if has_users {
        let defines_default = users.lines().any(|l| l.starts_with("user default "));
        let loaded = cluster
            .acl
            .load(config_file.unwrap_or("config"), users.as_bytes());
        if loaded.is_ok() && !defines_default {
            // `requirepass` still sets the default user's password.
            cluster.apply_acl_config(true);
        }
        loaded
    } else {
        Ok(Vec::new())
    };
    loaded
        .map(drop)
        .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))
}

fn main() -> ExitCode {
    damselfly_coord::crash::install_panic_hook();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = check::run(&args).or_else(|| export::run(&args)) {
        return code;
    }
    let opts = options::Options::parse_from_env();
    let config = Arc::new(Config::default());
    let options::Applied { warnings, users } = match opts.apply(&config) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("damselfly: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = options::init_logging(&config) {
        eprintln!("damselfly: {e}");
        return ExitCode::from(1);
    }
    fd_limit::adjust(&config);
    if config.get("disable-thp") == "yes" {
        disable_transparent_huge_pages();
    }
    if !damselfly_memory::start_background_purging() {
        tracing::warn!("the allocator cannot start its background purging thread");
    }
    for w in warnings {
        tracing::warn!("{w}");
    }
    let backend = match choose_backend(&config.get("io-backend")) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let threads = match config.get_u64("threads") {
        0 => damselfly_net::available_cpus(),
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    // Before anything listens: a TLS configuration that does not build stops start-up.
    let tls = match damselfly_net::Tls::from_config(&config) {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!("Failed to configure TLS: {e}");
            return ExitCode::from(1);
        }
    };
    let listeners = match Listeners::bind(&options::listener_spec(&config)) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    // The metrics endpoint answers from now on: /healthz says 503 until the data has loaded.
    let metrics = match config.get_u64("metrics-port") {
        0 => None,
        port => {
            let spec = options::listener_spec(&config);
            let port = u16::try_from(port).unwrap_or(0);
            match damselfly_net::metrics_http::MetricsEndpoint::start(&spec.bind, port) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::error!("{e}");
                    return ExitCode::from(1);
                }
            }
        }
    };
    let info = ServerInfo {
        multiplexing_api: backend.multiplexing_api(),
        tcp_port: listeners.tcp_port(),
        executable: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        config_file: opts.config_file.clone().unwrap_or_default(),
    };
    // Clients and probes connecting while the data loads get -LOADING, as from Redis.
    let progress = std::sync::Arc::new(loading::Progress::default());
    let responder = loading::Responder::start(&listeners, progress.clone());
    let recovered = recovery::recover(&config, threads, &progress);
    let loading_clients = responder.finish();
    let recovered = match recovered {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let described = listeners.describe();
    let pin = damselfly_net::should_pin(&config.get("pin-threads"));
    let mut server = Server::new(config.clone(), threads, backend, pin, listeners, info);
    server.set_tls(tls);
    server.adopt(loading_clients);
    // Before any other thread starts (journal writers): threads inherit the blocked signals.
    install_signal_thread(server.cluster());
    if let Err(e) = recovered.start(&server.cluster()) {
        tracing::error!("{e}");
        return ExitCode::from(1);
    }
    if let Err(e) = load_users(&server.cluster(), &users, opts.config_file.as_deref()) {
        tracing::error!("{e}");
        return ExitCode::from(1);
    }
    if let Some(metrics) = &metrics {
        metrics.serve(server.cluster());
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        threads,
        pinned = pin,
        backend = backend.multiplexing_api(),
        listeners = %described,
        "Damselfly ready to accept connections"
    );
    let cluster = server.cluster();
    match server.run() {
        Ok(()) if cluster.final_save.failed() => {
            tracing::error!("exiting without the save at shutdown: see the error above");
            ExitCode::from(1)
        }
        Ok(()) => {
            tracing::info!("Damselfly is now ready to exit, bye bye...");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("server failed: {e}");
            ExitCode::from(1)
        }
    }
}
