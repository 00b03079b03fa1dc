//! The latency monitor and per-command latency histograms (Redis 7.0's latency.c and the
//! `latency-tracking` part of server.c). Each thread keeps its own event time series and its
//! own histogram per command, recorded where the command ran; LATENCY and INFO latencystats
//! gather every thread's copy (the coordination layer asks each thread) and merge them here.

use std::collections::BTreeMap;

use damselfly_protocol::ReplyBuf;
use hdrhistogram::Histogram;

use crate::table::COMMANDS;

/// Samples kept per event (Redis's LATENCY_TS_LEN).
pub const TS_LEN: usize = 160;

/// The histograms' range and precision, as Redis's: 1 ns to 1 s, 2 significant digits.
pub const HISTOGRAM_MIN: u64 = 1;
pub const HISTOGRAM_MAX: u64 = 1_000_000_000;
pub const HISTOGRAM_SIGFIG: u8 = 2;

/// LATENCY's subcommands and their arities, as Redis 7.0's command table has them.
pub const SUBCOMMANDS: &[(&str, i32)] = &[
    ("doctor", 2),
    ("graph", 3),
    ("help", 2),
    ("histogram", -2),
    ("history", 3),
    ("latest", 2),
    ("reset", -2),
];

/// LATENCY HELP's lines (Redis adds the title and the HELP lines).
pub const HELP: &[&str] = &[
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
];

/// The latency event of a command that ran for at least `latency-monitor-threshold`.
pub fn command_event(fast: bool) -> &'static str {
    if fast {
        "fast-command"
    } else {
        "command"
    }
}

/// One event's history: at most one sample per second (the worst of that second), the last
/// [`TS_LEN`] seconds that had one, and the worst ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSeries {
    /// (unix seconds, milliseconds), oldest first.
    pub samples: std::collections::VecDeque<(u64, u64)>,
    pub max: u64,
}

impl TimeSeries {
    fn new() -> Self {
        TimeSeries {
            samples: std::collections::VecDeque::with_capacity(TS_LEN),
            max: 0,
        }
    }

    /// Redis's latencyAddSample.
    fn add(&mut self, now: u64, latency: u64) {
        self.max = self.max.max(latency);
        if let Some(last) = self.samples.back_mut() {
            if last.0 == now {
                last.1 = last.1.max(latency);
                return;
            }
        }
        if self.samples.len() == TS_LEN {
            self.samples.pop_front();
        }
        self.samples.push_back((now, latency));
    }

    /// Several threads' histories of one event as one: per second the worst sample, the
    /// latest [`TS_LEN`] seconds.
    fn merge(parts: &[&TimeSeries]) -> TimeSeries {
        let mut by_second: BTreeMap<u64, u64> = BTreeMap::new();
        let mut max = 0;
        for p in parts {
            max = max.max(p.max);
            for &(t, l) in &p.samples {
                let worst = by_second.entry(t).or_insert(0);
                *worst = (*worst).max(l);
            }
        }
        let skip = by_second.len().saturating_sub(TS_LEN);
        TimeSeries {
            samples: by_second.into_iter().skip(skip).collect(),
            max,
        }
    }
}

/// The latency monitor's events (one thread's, or every thread's merged), by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Events {
    pub series: BTreeMap<&'static str, TimeSeries>,
}

impl Events {
    /// Records `latency` ms for `event` at unix second `now`.
    pub fn add(&mut self, event: &'static str, latency: u64, now: u64) {
        self.series
            .entry(event)
            .or_insert_with(TimeSeries::new)
            .add(now, latency);
    }

    /// LATENCY RESET: drops the named events (case-insensitively) or all of them; returns the
    /// names dropped.
    pub fn reset(&mut self, names: &[Vec<u8>]) -> Vec<&'static str> {
        let dropped: Vec<&'static str> = self
            .series
            .keys()
            .copied()
            .filter(|e| {
                names.is_empty() || names.iter().any(|n| n.eq_ignore_ascii_case(e.as_bytes()))
            })
            .collect();
        for e in &dropped {
            self.series.remove(e);
        }
        dropped
    }

    /// Every thread's events as one monitor's.
    pub fn merge(parts: &[Events]) -> Events {
        let mut names: Vec<&'static str> = parts
            .iter()
            .flat_map(|p| p.series.keys().copied())
            .collect();
        names.sort_unstable();
        names.dedup();
        let series = names
            .into_iter()
            .map(|name| {
                let of: Vec<&TimeSeries> =
                    parts.iter().filter_map(|p| p.series.get(name)).collect();
                (name, TimeSeries::merge(&of))
            })
            .collect();
        Events { series }
    }

    /// The series of an event named exactly `name` (HISTORY and GRAPH match case).
    pub fn get(&self, name: &[u8]) -> Option<(&'static str, &TimeSeries)> {
        self.series
            .iter()
            .find(|(k, _)| k.as_bytes() == name)
            .map(|(k, v)| (*k, v))
    }

    /// LATENCY LATEST: `[event, time, latest ms, max ms]` per event.
    pub fn reply_latest(&self, r: &mut ReplyBuf) {
        r.array(self.series.len());
        for (name, ts) in &self.series {
            let (time, latency) = ts.samples.back().copied().unwrap_or((0, 0));
            r.array(4);
            r.bulk(name.as_bytes());
            r.int(time as i64);
            r.int(latency as i64);
            r.int(ts.max as i64);
        }
    }

    /// LATENCY HISTORY: `[time, ms]` per sample, oldest first.
    pub fn reply_history(&self, r: &mut ReplyBuf, name: &[u8]) {
        match self.get(name) {
            None => r.array(0),
            Some((_, ts)) => {
                r.array(ts.samples.len());
                for &(t, l) in &ts.samples {
                    r.array(2);
                    r.int(t as i64);
                    r.int(l as i64);
                }
            }
        }
    }
}

/// LATENCY GRAPH's text for an event (Redis's latencyCommandGenSparkeline over its
/// sparkline renderer: 80 columns, 4 rows, filled).
pub fn graph(event: &str, ts: &TimeSeries, now: u64) -> String {
    let values: Vec<u64> = ts.samples.iter().map(|s| s.1).collect();
    let (min, max) = (
        values.iter().copied().min().unwrap_or(0),
        values.iter().copied().max().unwrap_or(0),
    );
    let labels: Vec<String> = ts
        .samples
        .iter()
        .map(|&(t, _)| {
            let elapsed = now.saturating_sub(t);
            if elapsed < 60 {
                format!("{elapsed}s")
            } else if elapsed < 3600 {
                format!("{}m", elapsed / 60)
            } else if elapsed < 3600 * 24 {
                format!("{}h", elapsed / 3600)
            } else {
                format!("{}d", elapsed / (3600 * 24))
            }
        })
        .collect();
    let mut out = format!(
        "{event} - high {max} ms, low {min} ms (all time high {} ms)\n",
        ts.max
    );
    out.push_str(&"-".repeat(80));
    out.push('\n');
    let mut start = 0;
    while start < values.len() {
        let len = (values.len() - start).min(80);
        if start != 0 {
            out.push('\n');
        }
        sparkline_range(
            &mut out, &values, &labels, min as f64, max as f64, start, len,
        );
        start += 80;
    }
    out
}

/// Redis's sparklineRenderRange with SPARKLINE_FILL and 4 rows.
fn sparkline_range(
    out: &mut String,
    values: &[u64],
    labels: &[String],
    min: f64,
    max: f64,
    offset: usize,
    len: usize,
) {
    const FILL: &[u8] = b"_o#";
    const ROWS: usize = 4;
    let steps = (FILL.len() * ROWS) as i64;
    let relmax = if max - min == 0.0 { 1.0 } else { max - min };
    let mut row = 0;
    loop {
        let mut chars = vec![b' '; len];
        let mut more = false;
        for j in 0..len {
            let relval = values[j + offset] as f64 - min;
            // Redis truncates the product before dividing, then the quotient.
            let mut step = (((relval * steps as f64) as i64) as f64 / relmax) as i64;
            step = step.clamp(0, steps - 1);
            if row < ROWS {
                let charidx = step - ((ROWS - row - 1) * FILL.len()) as i64;
                more = true;
                if (0..FILL.len() as i64).contains(&charidx) {
                    chars[j] = FILL[charidx as usize];
                } else if charidx >= FILL.len() as i64 {
                    chars[j] = b'|';
                }
            } else {
                // One blank line between the graph and its labels.
                if row - ROWS < 1 {
                    more = true;
                    break;
                }
                let label = labels[j + offset].as_bytes();
                let at = row - ROWS - 1;
                if label.len() > at {
                    more = true;
                    chars[j] = label[at];
                }
            }
        }
        if !more {
            break;
        }
        row += 1;
        out.push_str(&String::from_utf8_lossy(&chars));
        out.push('\n');
    }
}

/// What LATENCY DOCTOR needs besides the events.
pub struct DoctorContext {
    pub monitor_threshold_ms: u64,
    pub slowlog_slower_than: i64,
    /// Whether the process has transparent huge pages (AnonHugePages in smaps).
    pub thp: bool,
}

/// Redis's analyzeLatencyForEvent: (samples, avg, mad, period in seconds).
fn analyze(ts: &TimeSeries, now: u64) -> (u64, u64, u64, u64) {
    let n = ts.samples.len() as u64;
    if n == 0 {
        return (0, 0, 0, 0);
    }
    let sum: u64 = ts.samples.iter().map(|s| s.1).sum();
    let avg = sum / n;
    let oldest = ts.samples.iter().map(|s| s.0).min().unwrap_or(now);
    let period = now.saturating_sub(oldest).max(1);
    let dev: u64 = ts.samples.iter().map(|s| avg.abs_diff(s.1)).sum();
    (n, avg, dev / n, period)
}

/// LATENCY DOCTOR's report (Redis's createLatencyReport, for the events Damselfly records).
pub fn doctor(events: &Events, ctx: &DoctorContext, now: u64) -> String {
    if events.series.is_empty() && ctx.monitor_threshold_ms == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
    }
    let mut report = String::new();
    let (mut slowlog_enabled, mut slowlog_tuning, mut slowlog_inspect) = (false, false, false);
    let (mut scheduler, mut large_objects, mut hz, mut mass_eviction) =
        (false, false, false, false);
    let mut advices = 0;
    for (i, (event, ts)) in events.series.iter().enumerate() {
        if i == 0 {
            report.push_str("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        }
        let (samples, avg, mad, period) = analyze(ts, now);
        report.push_str(&format!(
            "{}. {event}: {samples} latency spikes (average {avg}ms, mean deviation {mad}ms, period {:.2} sec). Worst all time event {}ms.",
            i + 1,
            period as f64 / samples.max(1) as f64,
            ts.max
        ));
        match *event {
            "command" => {
                if ctx.slowlog_slower_than < 0 {
                    slowlog_enabled = true;
                    advices += 1;
                } else if (ctx.slowlog_slower_than / 1000) as u64 > ctx.monitor_threshold_ms {
                    slowlog_tuning = true;
                    advices += 1;
                }
                slowlog_inspect = true;
                large_objects = true;
                advices += 2;
            }
            "fast-command" => {
                scheduler = true;
                advices += 1;
            }
            "expire-cycle" => {
                hz = true;
                large_objects = true;
                advices += 2;
            }
            "eviction-del" => {
                large_objects = true;
                advices += 1;
            }
            "eviction-cycle" => {
                mass_eviction = true;
                advices += 1;
            }
            _ => {}
        }
        report.push('\n');
    }
    if ctx.thp {
        advices += 1;
    }
    let eventnum = events.series.len();
    if eventnum == 0 && advices == 0 {
        report.push_str("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n");
    } else if eventnum > 0 && advices == 0 {
        report.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your help request.\n");
    } else {
        report.push_str("\nI have a few advices for you:\n\n");
        let threshold_us = ctx.monitor_threshold_ms.saturating_mul(1000);
        if slowlog_enabled {
            report.push_str(&format!("- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {threshold_us}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.\n"));
        }
        if slowlog_tuning {
            report.push_str(&format!("- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {threshold_us}'.\n"));
        }
        if slowlog_inspect {
            report.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        }
        if scheduler {
            report.push_str("- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n\
  1) Lower the system load.\n\
  2) Use a computer / VM just for Redis if you are running other software in the same system.\n\
  3) Check if you have a \"noisy neighbour\" problem.\n\
  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n\
  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n");
        }
        // Damselfly's hz is fixed at 10 (below Redis's advised 100).
        if hz {
            report.push_str("- In order to make the Redis keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n");
        }
        if large_objects {
            report.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
        }
        if mass_eviction {
            report.push_str("- Sudden changes to the 'maxmemory' setting via 'CONFIG SET', or allocation of large objects via sets or sorted sets intersections, STORE option of SORT, Redis Cluster large keys migrations (RESTORE command), may create sudden memory pressure forcing the server to block trying to evict keys. \n");
        }
        if ctx.thp {
            report.push_str("- I detected a non zero amount of anonymous huge pages used by your process. This creates very serious latency events in different conditions, especially when Redis is persisting on disk. To disable THP support use the command 'echo never > /sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local so that the command will be executed again after a reboot. Note that even if you have already disabled THP, you still need to restart the Redis process to get rid of the huge pages already created.\n");
        }
    }
    report
}

/// One thread's latency histograms, one per command that ran since the last reset (created
/// on first use: each is some 25 KB).
#[derive(Debug, Default, Clone)]
pub struct Histograms {
    per_command: Vec<Option<Box<Histogram<u64>>>>,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(HISTOGRAM_MIN, HISTOGRAM_MAX, HISTOGRAM_SIGFIG)
        .expect("valid histogram bounds")
}

impl Histograms {
    /// Records one call of command `cmd` that took `nanos` (clamped to the range, as Redis's
    /// updateCommandLatencyHistogram does).
    pub fn record(&mut self, cmd: usize, nanos: u64) {
        if self.per_command.len() <= cmd {
            self.per_command
                .resize_with(COMMANDS.len().max(cmd + 1), || None);
        }
        let h = self.per_command[cmd].get_or_insert_with(|| Box::new(new_histogram()));
        h.saturating_record(nanos.clamp(HISTOGRAM_MIN, HISTOGRAM_MAX));
    }

    pub fn reset(&mut self) {
        self.per_command.clear();
    }

    /// The histograms of the commands that have one.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Histogram<u64>)> {
        self.per_command
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_deref().map(|h| (i, h)))
    }

    /// Every thread's histograms added up.
    pub fn merge(parts: &[Histograms]) -> Histograms {
        let mut out = Histograms::default();
        for p in parts {
            for (cmd, h) in p.iter() {
                if out.per_command.len() <= cmd {
                    out.per_command
                        .resize_with(COMMANDS.len().max(cmd + 1), || None);
                }
                match &mut out.per_command[cmd] {
                    Some(mine) => {
                        // Same bounds on every thread, so adding cannot fail.
                        let _ = mine.add(h);
                    }
                    slot => *slot = Some(Box::new(h.clone())),
                }
            }
        }
        out
    }

    pub fn get(&self, cmd: usize) -> Option<&Histogram<u64>> {
        self.per_command.get(cmd).and_then(|h| h.as_deref())
    }
}

/// Redis's hdr_value_at_percentile: the value below which `percentile` percent of the
/// recorded values fall, rounding the count as the C library does.
pub fn value_at_percentile(h: &Histogram<u64>, percentile: f64) -> u64 {
    let requested = percentile.min(100.0);
    let target = ((requested / 100.0) * h.len() as f64 + 0.5) as u64;
    let target = target.max(1);
    let mut seen = 0;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= target {
            let value = v.value_iterated_to();
            return if percentile == 0.0 {
                h.lowest_equivalent(value)
            } else {
                h.highest_equivalent(value)
            };
        }
    }
    0
}

/// Redis's fillCommandCDF: `{calls, histogram_usec: {bucket: cumulative count}}`, buckets
/// doubling from 1024 ns, each labelled with its highest value in microseconds, only those
/// where the cumulative count grew.
pub fn reply_cdf(r: &mut ReplyBuf, h: &Histogram<u64>) {
    let points = cdf_points(h);
    r.map(2);
    r.bulk(b"calls");
    r.int(h.len() as i64);
    r.bulk(b"histogram_usec");
    r.map(points.len());
    for (micros, count) in points {
        r.int(micros as i64);
        r.int(count as i64);
    }
}

/// The (microseconds, cumulative count) points of [`reply_cdf`]: Redis's logarithmic
/// iterator (first bucket 1024 ns, base 2) reports at each level the count of values up to
/// the highest equivalent of the level, and once past the last level, the total at the top
/// of the histogram's range.
pub fn cdf_points(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    let total = h.len();
    let recorded: Vec<(u64, u64)> = h
        .iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect();
    let top = (HISTOGRAM_MAX + 1).next_power_of_two() - 1;
    let mut out = Vec::new();
    let (mut previous, mut cumulative, mut next) = (0, 0, 0);
    let mut level: u64 = 1024;
    while previous < total {
        let (label, upto) = if level <= top {
            (h.highest_equivalent(level), h.highest_equivalent(level))
        } else {
            (top, u64::MAX)
        };
        while next < recorded.len() && recorded[next].0 <= upto {
            cumulative += recorded[next].1;
            next += 1;
        }
        if cumulative > previous {
            out.push((label / 1000, cumulative));
            previous = cumulative;
        }
        if level > top {
            break;
        }
        level *= 2;
    }
    out
}

/// Redis's `%f` and trimDoubleString: six decimals, trailing zeros and point dropped.
pub fn trim_double(v: f64) -> String {
    let s = format!("{v:.6}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// One `latency_percentiles_usec_<cmd>:p50=...,p99=...` line of INFO latencystats.
pub fn percentiles_line(name: &str, h: &Histogram<u64>, percentiles: &[f64]) -> String {
    let mut line = format!("latency_percentiles_usec_{name}:");
    for (i, p) in percentiles.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        let v = value_at_percentile(h, *p) as f64 / 1000.0;
        line.push_str(&format!("p{}={v:.3}", trim_double(*p)));
    }
    line.push_str("\r\n");
    line
}

/// `latency-tracking-info-percentiles`: numbers between 0 and 100 separated by spaces, or
/// `""` for none. Returns the canonical text CONFIG GET shows.
pub fn parse_percentiles(value: &str) -> Result<Vec<f64>, &'static str> {
    let mut out = Vec::new();
    for word in value.split_whitespace() {
        let p: f64 = word
            .parse()
            .ok()
            .filter(|p: &f64| !p.is_nan())
            .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
        if !(0.0..=100.0).contains(&p) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
            );
        }
        out.push(p);
    }
    Ok(out)
}

/// The canonical text of a percentile list (Redis's getter).
pub fn percentiles_text(ps: &[f64]) -> String {
    ps.iter()
        .map(|p| trim_double(*p))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_keeping_the_worst() {
        let mut e = Events::default();
        e.add("command", 5, 100);
        e.add("command", 9, 100);
        e.add("command", 3, 100);
        e.add("command", 2, 101);
        let ts = &e.series["command"];
        assert_eq!(
            ts.samples.iter().copied().collect::<Vec<_>>(),
            [(100, 9), (101, 2)]
        );
        assert_eq!(ts.max, 9);
        for t in 0..200 {
            e.add("fast-command", 1, 1000 + t);
        }
        assert_eq!(e.series["fast-command"].samples.len(), TS_LEN);
        assert_eq!(e.series["fast-command"].samples[0].0, 1040);
    }

    #[test]
    fn merges_threads_per_second() {
        let mut a = Events::default();
        let mut b = Events::default();
        a.add("command", 5, 10);
        a.add("command", 1, 12);
        b.add("command", 7, 10);
        b.add("command", 4, 11);
        b.add("fast-command", 1, 11);
        let m = Events::merge(&[a, b]);
        let ts = &m.series["command"];
        assert_eq!(
            ts.samples.iter().copied().collect::<Vec<_>>(),
            [(10, 7), (11, 4), (12, 1)]
        );
        assert_eq!(ts.max, 7);
        assert!(m.series.contains_key("fast-command"));
        let mut m = m;
        assert_eq!(
            m.reset(&[b"COMMAND".to_vec(), b"nope".to_vec()]),
            ["command"]
        );
        assert_eq!(m.reset(&[]), ["fast-command"]);
    }

    #[test]
    fn cdf_and_percentiles_follow_redis() {
        let mut h = new_histogram();
        // 1 us, 1.5 us, 3 us, 2 s (clamped to 1 s by Histograms::record).
        for v in [1000, 1500, 3000] {
            h.record(v).unwrap();
        }
        assert_eq!(cdf_points(&h), vec![(1, 1), (2, 2), (4, 3)]);
        let mut hs = Histograms::default();
        hs.record(0, 5_000_000_000);
        hs.record(0, 0);
        let h0 = hs.get(0).unwrap();
        assert_eq!(h0.len(), 2);
        assert_eq!(cdf_points(h0), vec![(1, 1), (1073741, 2)]);
        let mut h = new_histogram();
        for v in 1..=100u64 {
            h.record(v * 1000).unwrap();
        }
        assert_eq!(value_at_percentile(&h, 50.0), h.highest_equivalent(50_000));
        assert_eq!(
            value_at_percentile(&h, 100.0),
            h.highest_equivalent(100_000)
        );
        let line = percentiles_line("get", &h, &[50.0, 99.0, 99.9]);
        assert_eq!(
            line,
            "latency_percentiles_usec_get:p50=50.175,p99=99.327,p99.9=100.351\r\n"
        );
    }

    #[test]
    fn percentile_text() {
        assert_eq!(
            percentiles_text(&parse_percentiles("50 99 99.9").unwrap()),
            "50 99 99.9"
        );
        assert_eq!(percentiles_text(&parse_percentiles("").unwrap()), "");
        assert!(parse_percentiles("101").is_err());
        assert!(parse_percentiles("x").is_err());
        assert_eq!(trim_double(0.0), "0");
        assert_eq!(trim_double(12.5), "12.5");
    }

    #[test]
    fn graph_draws_like_redis() {
        let mut ts = TimeSeries::new();
        ts.add(100, 10);
        ts.add(101, 20);
        let g = graph("command", &ts, 105);
        let lines: Vec<&str> = g.lines().collect();
        assert_eq!(
            lines[0],
            "command - high 20 ms, low 10 ms (all time high 20 ms)"
        );
        assert_eq!(lines[1].len(), 80);
        assert_eq!(&lines[2..], [" #", " |", " |", "_|", "  ", "54", "ss"]);
    }
}
