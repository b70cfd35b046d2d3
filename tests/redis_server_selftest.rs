//! Checks the test harness of `tests/common/redis_server.rs`: a real,
//! throwaway `redis-server` that keeps its data across a SIGKILL restart.

mod common;

use common::redis_server::RedisServer;

#[test]
fn server_starts_answers_survives_restart_and_cleans_up() {
    let mut server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.is_running());

    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cli(&["GET", "k"]), "v");
    assert_eq!(server.cli(&["GET", "missing"]), "(nil)");
    assert_eq!(server.cli(&["RPUSH", "list", "a", "b"]), "2");
    assert_eq!(server.cli(&["LRANGE", "list", "0", "-1"]), "a\nb");
    assert!(server.cli(&["INCR", "k"]).starts_with("ERR "));
    assert!(server.cli(&["LPUSH", "k", "x"]).starts_with("WRONGTYPE "));
    assert_eq!(server.cli(&["DEBUG", "SLEEP", "0"]), "OK");

    server.kill();
    assert!(!server.is_running());
    server.kill(); // idempotent
    server.restart();
    assert!(server.is_running());
    assert_eq!(server.cli(&["GET", "k"]), "v", "AOF reloaded after SIGKILL");
    assert_eq!(server.cli(&["LRANGE", "list", "0", "-1"]), "a\nb");

    // Restart while running kills first.
    server.restart();
    assert_eq!(server.cli(&["GET", "k"]), "v");

    let dir = server.dir().to_path_buf();
    assert!(dir.exists());
    drop(server);
    assert!(!dir.exists(), "temp dir removed on drop");
}

#[test]
fn servers_are_independent() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.cli(&["SET", "k", "a"]);
    assert_eq!(b.cli(&["GET", "k"]), "(nil)");
}
