//! The ACL LOG: refused commands, keys, channels and failed authentications, newest first.
//! A refusal like one of the last ten (same reason, context, object and user, within a minute)
//! bumps that entry's count instead of adding one, as Redis does.

use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogReason {
    Command,
    Key,
    Channel,
    Auth,
}

impl LogReason {
    pub fn name(self) -> &'static str {
        match self {
            LogReason::Command => "command",
            LogReason::Key => "key",
            LogReason::Channel => "channel",
            LogReason::Auth => "auth",
        }
    }
}

#[derive(Debug, Clone)]
pub struct LogEntry {
    pub count: u64,
    pub reason: LogReason,
    /// `toplevel`, `multi` or `lua`.
    pub context: &'static str,
    /// The command, key or channel refused, or the AUTH/HELLO command name.
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    /// Milliseconds since the epoch of the latest occurrence.
    pub time_ms: u64,
    /// CLIENT INFO of the latest client.
    pub client_info: String,
}

const GROUPING_MS: u64 = 60_000;
const SCANNED: usize = 10;

#[derive(Debug, Default)]
pub struct AclLog {
    entries: VecDeque<LogEntry>,
}

impl AclLog {
    pub fn add(&mut self, entry: LogEntry, max_len: usize) {
        let similar = self.entries.iter().take(SCANNED).position(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.object == entry.object
                && e.username == entry.username
                && e.time_ms.abs_diff(entry.time_ms) <= GROUPING_MS
        });
        match similar.and_then(|i| self.entries.remove(i)) {
            Some(mut e) => {
                e.count += 1;
                e.time_ms = entry.time_ms;
                e.client_info = entry.client_info;
                self.entries.push_front(e);
            }
            None => {
                self.entries.push_front(entry);
                self.entries.truncate(max_len);
            }
        }
    }

    pub fn newest(&self, count: usize) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter().take(count)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }
}
