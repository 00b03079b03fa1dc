//! Keyspace notifications against Debian's redis-server: the events each command publishes,
//! compared command by command (crates/server/tests/common/notify.rs), and the configuration.

mod common;

use common::notify::differences;
use common::{cmds, Backend, Server};

/// Events the keyspace itself raises, whatever the command: `expired` (lazy and active
/// expiry), `keymiss` on a read of a missing key, `new` when a key is created.
fn keyspace_events(backend: Backend) {
    let redis = Server::redis();
    let ours = Server::start(backend, &[]);
    let script = cmds(&[
        &["GET", "nosuch"],
        &["SET", "k", "v", "PX", "30"],
        &["SET", "k2", "v"],
        &["DEBUG", "SLEEP", "0.1"],
        &["GET", "k"],
        &["EXISTS", "k"],
        &["SET", "k3", "v", "PX", "30"],
        &["DEBUG", "SLEEP", "0.5"],
        &["GET", "k3"],
        &["HGET", "nosuch", "f"],
        &["SET", "k2", "again"],
    ]);
    let found = differences(&redis, &ours, 2, "KExmn", &script);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// CONFIG SET notify-keyspace-events accepts Redis's letters, shows them in Redis's order,
/// and refuses others with Redis's error.
fn configuration(backend: Backend) {
    let redis = Server::redis();
    let ours = Server::start(backend, &[]);
    let mut lines: Vec<Vec<String>> = Vec::new();
    for flags in ["KEA", "Kgx", "KEAmn", "Ktzdx$", "hs$lg", "", "KQ", "E"] {
        lines.push(vec![
            "CONFIG".into(),
            "SET".into(),
            "notify-keyspace-events".into(),
            flags.into(),
        ]);
        lines.push(vec![
            "CONFIG".into(),
            "GET".into(),
            "notify-keyspace-events".into(),
        ]);
    }
    common::assert_same(&mut redis.raw(), &mut ours.raw(), &lines);
}

backend_tests!(keyspace_events, configuration);
