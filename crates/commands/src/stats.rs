//! Per-thread command statistics (INFO stats, commandstats, errorstats). Each thread counts
//! what it executes; INFO sums the threads' copies.

use std::collections::BTreeMap;

use damselfly_protocol::ReplyBuf;

use crate::table::COMMANDS;

#[derive(Debug, Default, Clone, Copy)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
    pub rejected: u64,
    pub failed: u64,
}

#[derive(Debug, Clone)]
pub struct ThreadStats {
    /// Indexed like [`COMMANDS`].
    pub cmds: Vec<CmdStat>,
    /// Error replies by code (the first word: ERR, WRONGTYPE, ...).
    pub errors: BTreeMap<String, u64>,
    pub total_commands: u64,
    pub total_error_replies: u64,
    pub total_connections: u64,
    pub rejected_connections: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    /// Transactions scheduled on several shards, and scheduling rounds a shard refused.
    pub multi_shard_txs: u64,
    pub tx_retries: u64,
    /// Script runs restarted with every shard locked (docs/scripting.md).
    pub script_restarts: u64,
    /// Connections that moved from this thread to the thread of the shard they use.
    pub connections_moved: u64,
    /// Replies a shard on this thread wrote whole to a client's socket (direct_reply.rs).
    pub direct_replies: u64,
}

impl Default for ThreadStats {
    fn default() -> Self {
        ThreadStats {
            cmds: vec![CmdStat::default(); COMMANDS.len()],
            errors: BTreeMap::new(),
            total_commands: 0,
            total_error_replies: 0,
            total_connections: 0,
            rejected_connections: 0,
            multi_shard_txs: 0,
            tx_retries: 0,
            script_restarts: 0,
            connections_moved: 0,
            direct_replies: 0,
            net_input_bytes: 0,
            net_output_bytes: 0,
        }
    }
}

impl ThreadStats {
    /// Counts the error replies written to `reply` since its `error_offsets[from_error..]`.
    /// Returns how many there were.
    pub fn count_errors(&mut self, reply: &ReplyBuf, from_error: usize) -> usize {
        let new = &reply.error_offsets[from_error.min(reply.error_offsets.len())..];
        for &off in new {
            let line = &reply.buf[off + 1..];
            let end = line
                .iter()
                .position(|&b| b == b' ' || b == b'\r')
                .unwrap_or(line.len())
                .min(64);
            let code = String::from_utf8_lossy(&line[..end]).into_owned();
            *self.errors.entry(code).or_insert(0) += 1;
        }
        self.total_error_replies += new.len() as u64;
        new.len()
    }

    /// Records one executed command: `failed` when it replied with an error.
    pub fn record_call(&mut self, cmd: usize, usec: u64, failed: bool) {
        let s = &mut self.cmds[cmd];
        s.calls += 1;
        s.usec += usec;
        if failed {
            s.failed += 1;
        }
        self.total_commands += 1;
    }

    /// Records a command refused before running (arity, auth).
    pub fn record_rejected(&mut self, cmd: usize) {
        self.cmds[cmd].rejected += 1;
    }

    pub fn merge(&mut self, other: &ThreadStats) {
        for (a, b) in self.cmds.iter_mut().zip(&other.cmds) {
            a.calls += b.calls;
            a.usec += b.usec;
            a.rejected += b.rejected;
            a.failed += b.failed;
        }
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_insert(0) += v;
        }
        self.total_commands += other.total_commands;
        self.total_error_replies += other.total_error_replies;
        self.total_connections += other.total_connections;
        self.rejected_connections += other.rejected_connections;
        self.multi_shard_txs += other.multi_shard_txs;
        self.tx_retries += other.tx_retries;
        self.script_restarts += other.script_restarts;
        self.connections_moved += other.connections_moved;
        self.direct_replies += other.direct_replies;
        self.net_input_bytes += other.net_input_bytes;
        self.net_output_bytes += other.net_output_bytes;
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&mut self) {
        *self = ThreadStats::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_errors_by_code() {
        let mut r = ReplyBuf::new(false);
        r.ok();
        r.error("ERR syntax error");
        r.error("WRONGTYPE Operation against a key holding the wrong kind of value");
        let mut s = ThreadStats::default();
        assert_eq!(s.count_errors(&r, 0), 2);
        assert_eq!(s.errors["ERR"], 1);
        assert_eq!(s.errors["WRONGTYPE"], 1);
        assert_eq!(s.count_errors(&r, 2), 0);
    }
}
