use super::*;
use damselfly_commands::args::Args;
use damselfly_commands::redis_meta;

fn run(acl: &Acl, user: &str, words: &[&str]) -> Result<(), Denied> {
    let (buf, spans) = damselfly_commands::args::lay_out(words);
    let args = Args::new(&buf, &spans);
    let cmd = redis_meta::for_request(&args).expect("known command");
    acl.get(user.as_bytes()).expect("user").check(cmd, &args)
}

fn set(acl: &Acl, user: &str, rules: &str) -> Result<(), String> {
    let rules: Vec<&[u8]> = rules.split(' ').map(str::as_bytes).collect();
    acl.set_user(user.as_bytes(), &rules)
}

fn listed(acl: &Acl, user: &str) -> String {
    String::from_utf8(acl.get(user.as_bytes()).unwrap().describe()).unwrap()
}

#[test]
fn default_and_new_users_describe_as_redis() {
    let acl = Acl::new();
    assert_eq!(listed(&acl, "default"), "on nopass ~* &* +@all");
    set(&acl, "alice", "").unwrap();
    assert_eq!(listed(&acl, "alice"), "off resetchannels -@all");
    set(&acl, "alice", "on >p1 ~k* %R~r* &ch +@read -get +@hash").unwrap();
    let line = listed(&acl, "alice");
    assert!(
        line.starts_with(&format!(
            // As redis-server 7.0 describes it (single commands in its own hash order).
            "on #{} ~k* %R~r* resetchannels &ch -@all +@hash +@bitmap +@geo +@set +@sortedset ",
            user::hash_password(b"p1")
        )),
        "{line}"
    );
    let words: Vec<&str> = line.split(' ').collect();
    assert!(
        words.contains(&"+mget") && words.contains(&"-zadd") && words.contains(&"+xinfo|stream")
    );
    assert!(!words.iter().any(|w| w.ends_with("get") && w[1..] == *"get"));
    set(&acl, "alice", "reset").unwrap();
    assert_eq!(
        listed(&acl, "alice"),
        "off sanitize-payload resetchannels -@all"
    );
}

#[test]
fn command_rules_and_subcommands() {
    let acl = Acl::new();
    set(
        &acl,
        "u",
        "on nopass allkeys +@all -@dangerous +client|kill",
    )
    .unwrap();
    assert_eq!(run(&acl, "u", &["get", "k"]), Ok(()));
    assert_eq!(run(&acl, "u", &["flushall"]), Err(Denied::Command));
    assert_eq!(run(&acl, "u", &["client", "kill", "id", "1"]), Ok(()));
    assert_eq!(
        run(&acl, "u", &["client", "list"]),
        Err(Denied::Command),
        "CLIENT LIST is @dangerous"
    );
    assert_eq!(run(&acl, "u", &["client", "id"]), Ok(()));
    set(&acl, "v", "on -@all +select|0 +config|get").unwrap();
    assert_eq!(run(&acl, "v", &["select", "0"]), Ok(()));
    assert_eq!(run(&acl, "v", &["select", "1"]), Err(Denied::Command));
    assert_eq!(run(&acl, "v", &["config", "get", "x"]), Ok(()));
    assert_eq!(
        run(&acl, "v", &["config", "set", "x", "y"]),
        Err(Denied::Command)
    );
    assert!(
        listed(&acl, "v").ends_with("-@all +config|get +select|0"),
        "{}",
        listed(&acl, "v")
    );
}

#[test]
fn key_and_channel_patterns() {
    let acl = Acl::new();
    set(&acl, "u", "on +@all %R~r:* %W~w:* ~both:* &news.*").unwrap();
    assert_eq!(run(&acl, "u", &["get", "r:1"]), Ok(()));
    assert_eq!(run(&acl, "u", &["set", "r:1", "v"]), Err(Denied::Key(1)));
    assert_eq!(run(&acl, "u", &["set", "w:1", "v"]), Ok(()));
    assert_eq!(
        run(&acl, "u", &["set", "w:1", "v", "get"]),
        Err(Denied::Key(1))
    );
    assert_eq!(
        run(&acl, "u", &["lmove", "r:1", "w:1", "left", "left"]),
        Err(Denied::Key(1))
    );
    assert_eq!(run(&acl, "u", &["rename", "both:1", "both:2"]), Ok(()));
    assert_eq!(
        run(&acl, "u", &["mget", "r:1", "x", "r:2"]),
        Err(Denied::Key(2))
    );
    assert_eq!(run(&acl, "u", &["publish", "news.a", "m"]), Ok(()));
    assert_eq!(
        run(&acl, "u", &["publish", "sport", "m"]),
        Err(Denied::Channel(1))
    );
    assert_eq!(run(&acl, "u", &["psubscribe", "news.*"]), Ok(()));
    assert_eq!(
        run(&acl, "u", &["psubscribe", "news.a*"]),
        Err(Denied::Channel(1))
    );
}

#[test]
fn selectors_widen_the_root() {
    let acl = Acl::new();
    set(&acl, "u", "on -@all +get ~a* (+set ~b*)").unwrap();
    assert_eq!(run(&acl, "u", &["get", "a1"]), Ok(()));
    assert_eq!(run(&acl, "u", &["set", "b1", "v"]), Ok(()));
    assert_eq!(run(&acl, "u", &["set", "a1", "v"]), Err(Denied::Key(1)));
    assert_eq!(run(&acl, "u", &["del", "a1"]), Err(Denied::Command));
    assert!(
        listed(&acl, "u").ends_with("~a* resetchannels -@all +get (~b* resetchannels -@all +set)")
    );
    set(&acl, "u", "clearselectors").unwrap();
    assert_eq!(run(&acl, "u", &["set", "b1", "v"]), Err(Denied::Command));
}

#[test]
fn setuser_errors_change_nothing() {
    let acl = Acl::new();
    set(&acl, "u", "on +get").unwrap();
    let before = listed(&acl, "u");
    let cases = [
        ("+set +nosuch", "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"),
        ("+@nosuch", "Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL"),
        ("allkeys ~x", "Error in ACL SETUSER modifier '~x': Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"),
        ("<nopw", "Error in ACL SETUSER modifier '<nopw': The password you are trying to remove from the user does not exist"),
        ("#abc", "Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"),
        ("+config|get|x", "Error in ACL SETUSER modifier '+config|get|x': Allowing first-arg of a subcommand is not supported"),
        ("-select|0", "Error in ACL SETUSER modifier '-select|0': Unknown command or category name in ACL"),
        ("bogus", "Error in ACL SETUSER modifier 'bogus': Syntax error"),
        ("(+get ~a", "Unmatched parenthesis in acl selector starting at '(+get'."),
    ];
    for (rules, error) in cases {
        assert_eq!(set(&acl, "u", rules), Err(error.to_string()), "{rules}");
        assert_eq!(listed(&acl, "u"), before);
    }
}

#[test]
fn passwords() {
    let acl = Acl::new();
    set(&acl, "u", "on >one >two").unwrap();
    assert!(acl.authenticate(b"u", b"one").is_some());
    assert!(acl.authenticate(b"u", b"two").is_some());
    assert!(acl.authenticate(b"u", b"three").is_none());
    set(&acl, "u", "<one off").unwrap();
    assert!(acl.authenticate(b"u", b"two").is_none(), "a disabled user");
    set(&acl, "u", "on").unwrap();
    assert!(acl.authenticate(b"u", b"one").is_none());
    assert!(acl.authenticate(b"u", b"two").is_some());
    acl.set_default_password(Some(b"secret"));
    assert!(acl.authenticate(b"default", b"x").is_none());
    assert!(acl.authenticate(b"default", b"secret").is_some());
    acl.set_default_password(None);
    assert!(acl.authenticate(b"default", b"x").is_some());
}

#[test]
fn load_is_all_or_nothing() {
    let acl = Acl::new();
    set(&acl, "old", "on").unwrap();
    let err = acl
        .load(
            "users.acl",
            b"user a on +get\nuser b on +nosuch\nbad line\n",
        )
        .unwrap_err();
    assert_eq!(err, "users.acl:2: Error in applying operation '+nosuch': Unknown command or category name in ACL. users.acl:3 should start with user keyword followed by the username. WARNING: ACL errors detected, no change to the previously active ACL rules was performed");
    assert!(acl.get(b"old").is_some() && acl.get(b"a").is_none());
    let gone = acl
        .load(
            "users.acl",
            b"user a on +get ~*\n\nuser default on >pw +@all ~*\n",
        )
        .unwrap();
    assert_eq!(gone, vec![b"old".to_vec()]);
    assert_eq!(acl.names(), vec![b"a".to_vec(), b"default".to_vec()]);
    assert!(acl.authenticate(b"default", b"pw").is_some());
    assert_eq!(
        String::from_utf8(acl.file_text()).unwrap(),
        format!(
            "user a on ~* resetchannels -@all +get\nuser default on #{} ~* resetchannels +@all\n",
            user::hash_password(b"pw")
        )
    );
}

#[test]
fn log_groups_similar_entries() {
    let mut log = AclLog::default();
    let entry = |object: &str, t: u64| LogEntry {
        count: 1,
        reason: LogReason::Command,
        context: "toplevel",
        object: object.as_bytes().to_vec(),
        username: b"u".to_vec(),
        time_ms: t,
        client_info: String::new(),
    };
    log.add(entry("get", 0), 128);
    log.add(entry("set", 10), 128);
    log.add(entry("get", 20), 128);
    let all: Vec<_> = log
        .newest(10)
        .map(|e| (e.object.clone(), e.count))
        .collect();
    assert_eq!(all, vec![(b"get".to_vec(), 2), (b"set".to_vec(), 1)]);
    log.add(entry("get", 100_000), 128);
    assert_eq!(log.len(), 3, "a minute later is a new entry");
    log.add(entry("del", 100_000), 2);
    assert_eq!(log.len(), 2);
}
