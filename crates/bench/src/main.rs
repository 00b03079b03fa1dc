//! Damselfly's benchmark tools.
//!
//! - `compare`: every scenario of docs/benchmarks.md against redis-server and Damselfly in
//!   one run (redis-benchmark always, memtier_benchmark when on PATH, memory per key), servers
//!   alternating over several rounds; rewrites the generated section of docs/benchmarks.md and
//!   its SVG plots.
//! - `load`: a closed-loop load generator for command groups redis-benchmark cannot express
//!   (MULTI/EXEC, keys placed on chosen shards), used by benches/tx.sh.

mod compare;
mod load;
mod report;
mod servers;
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
    /// Runs a command group from many clients for a fixed time.
    Load(load::LoadArgs),
}

fn main() {
    match Cli::parse().command {
        Cmd::Load(args) => load::load(args),
        Cmd::Compare(args) => {
            let (report, plots) = (args.report.clone(), args.plots.clone());
            let run = match compare::run(args) {
                Ok(run) => run,
                Err(e) => {
                    eprintln!("compare: {e}");
                    std::process::exit(1);
                }
            };
            if let Err(e) = report::plots(&run, &plots) {
                eprintln!("plots: {e}");
                std::process::exit(1);
            }
            if let Err(e) = report::write_report(&report, &report::markdown(&run)) {
                eprintln!("report {}: {e}", report.display());
                std::process::exit(1);
            }
            eprintln!(
                "wrote {} and plots in {}",
                report.display(),
                plots.display()
            );
        }
    }
}
