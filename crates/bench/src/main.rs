//! Damselfly's benchmark tools.
//!
//! - `compare`: every scenario of docs/benchmarks.md against redis-server and Damselfly in
//!   one run (redis-benchmark always, memtier_benchmark when on PATH, memory per key), servers
//!   alternating over several rounds; rewrites the generated section of docs/benchmarks.md and
//!   its SVG plots.
//! - `load`: a closed-loop load generator for command groups redis-benchmark cannot express
//!   (MULTI/EXEC, keys placed on chosen shards), used by benches/tx.sh.
//! - `pubsub`: Pub/Sub load (publishers, channel or pattern subscribers) with delivery
//!   throughput and latency, used by benches/pubsub.sh.
//! - `hitrate`: the hit rate of a Zipfian key trace replayed cache-aside against each server
//!   under maxmemory, per eviction policy.
//! - `memcurve`: memory per key from 100k to 10M keys for both servers, with plots.
//! - `streamgeo`: streams and geo (XADD, consumer groups, GEOADD, GEOSEARCH, memory of a
//!   large stream and geo set) against redis-server.
//! - `ioprobe`: a bare one-thread GET/SET server over epoll or io_uring, to measure what an
//!   event loop can save in the kernel on this machine (benches/ioprobe.sh).

mod compare;
mod hitrate;
mod ioprobe;
mod load;
mod memcurve;
mod pubsub;
mod report;
mod servers;
mod streamgeo;
mod tools;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Damselfly benchmark tools")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs every comparison scenario against redis-server and Damselfly and writes the report.
    Compare(compare::CompareArgs),
    /// Rebuilds the report and plots from the samples a comparison saved.
    Report(ReportArgs),
    /// Runs a command group from many clients for a fixed time.
    Load(load::LoadArgs),
    /// Publishes to channels with many subscribers and measures delivery rate and latency.
    Pubsub(pubsub::PubsubArgs),
    /// Replays a Zipfian key trace cache-aside under maxmemory and reports each policy's hit rate.
    Hitrate(hitrate::HitrateArgs),
    /// Measures memory per key of both servers from 100k to 10M keys and plots it.
    Memcurve(memcurve::MemcurveArgs),
    /// Streams and geo throughput and memory against redis-server.
    Streamgeo(streamgeo::StreamGeoArgs),
    /// A bare GET/SET server over epoll or io_uring, for benches/ioprobe.sh.
    Ioprobe(ioprobe::IoprobeArgs),
}

#[derive(Parser)]
struct ReportArgs {
    /// The samples a comparison saved.
    #[arg(long, default_value = "docs/bench/samples.json")]
    data: std::path::PathBuf,
    #[arg(long, default_value = "docs/benchmarks.md")]
    report: std::path::PathBuf,
    #[arg(long, default_value = "docs/bench")]
    plots: std::path::PathBuf,
}

/// Writes the plots and the report section of `run`; exits on failure.
fn publish(run: &compare::Run, report: &std::path::Path, plots: &std::path::Path) {
    let written = report::plots(run, plots).and_then(|()| {
        report::write_report(report, &report::markdown(run)).map_err(|e| e.to_string())
    });
    if let Err(e) = written {
        eprintln!("report: {e}");
        std::process::exit(1);
    }
    eprintln!(
        "wrote {} and plots in {}",
        report.display(),
        plots.display()
    );
}

/// Prints a driver's markdown report; exits on failure.
fn print_report(name: &str, report: Result<String, String>) {
    match report {
        Ok(markdown) => print!("{markdown}"),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    match Cli::parse().command {
        Cmd::Load(args) => load::load(args),
        Cmd::Pubsub(args) => pubsub::pubsub(args),
        Cmd::Hitrate(args) => print_report("hitrate", hitrate::run(args)),
        Cmd::Memcurve(args) => print_report("memcurve", memcurve::run(args)),
        Cmd::Streamgeo(args) => print_report("streamgeo", streamgeo::run(&args)),
        Cmd::Ioprobe(args) => {
            if let Err(e) = ioprobe::run(args) {
                eprintln!("ioprobe: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Compare(args) => {
            let (report, plots) = (args.report.clone(), args.plots.clone());
            let run = match compare::run(args) {
                Ok(run) => run,
                Err(e) => {
                    eprintln!("compare: {e}");
                    std::process::exit(1);
                }
            };
            let saved = serde_json::to_string_pretty(&run)
                .map_err(|e| e.to_string())
                .and_then(|json| {
                    std::fs::create_dir_all(&plots)
                        .and_then(|()| std::fs::write(plots.join("samples.json"), json))
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = saved {
                eprintln!("saving samples: {e}");
                std::process::exit(1);
            }
            publish(&run, &report, &plots);
        }
        Cmd::Report(args) => {
            let run: compare::Run = match std::fs::read_to_string(&args.data)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            {
                Ok(run) => run,
                Err(e) => {
                    eprintln!("{}: {e}", args.data.display());
                    std::process::exit(1);
                }
            };
            publish(&run, &args.report, &args.plots);
        }
    }
}
