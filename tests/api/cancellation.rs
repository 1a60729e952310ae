//! A request whose future is dropped (its client gone, its subscription's
//! WebSocket closed) must leave nothing open behind it on the pooled
//! connection it held: the next user of that connection runs its statements outside any
//! transaction, so a write answered as done is committed.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbErr};
use work_ledger::auth::Role;
use work_ledger::db;

use crate::helpers::spawn_app;

/// Dropped between sending `BEGIN` and reading its answer, a transaction was
/// left open on the server while the pool took the connection back as idle
/// (sqlx counts a transaction only once `BEGIN` is answered): the next
/// one-statement write on it ran inside that transaction, answered `true`,
/// and was never committed; its row locks held until the connection died
/// (the failover drill's "acknowledged writes lost", and a revocation that
/// waited 30 s behind a token's last-use touch).
#[tokio::test]
async fn a_transaction_dropped_while_beginning_leaves_nothing_open_on_its_connection() {
    let app = spawn_app().await;
    // One connection, as the service's pools open theirs, so that the write
    // below gets the connection the dropped transaction had.
    let pool = db::connect_service(&app.db_url, 1).await.expect("a one-connection service pool");
    let pid = pool.query_one_raw(db::stmt("SELECT pg_backend_pid() AS pid", [])).await.expect("pid");
    let pid: i32 = pid.expect("a row").try_get("", "pid").expect("pid");
    app.token("f", "victim", Role::Agent).await;
    let victim = app.sql_id("SELECT id::text AS id FROM api_tokens WHERE name = 'victim'").await;

    // Poll a read until its `BEGIN` has run on the server, then drop it
    // before it reads the answer.
    let mut read = Box::pin(db::in_fleet::<_, DbErr, _>(&pool, "f", |tx| {
        Box::pin(async move { tx.execute_unprepared("SELECT 1").await.map(|_| ()) })
    }));
    let mut begun = false;
    for _ in 0..200 {
        assert!(futures::poll!(read.as_mut()).is_pending(), "the read finished before it could be dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let seen = app.sql_json(&format!("SELECT state, query FROM pg_stat_activity WHERE pid = {pid}")).await;
        if seen.first().is_some_and(|s| s["state"] == "idle in transaction" && s["query"] == "BEGIN") {
            begun = true;
            break;
        }
    }
    assert!(begun, "the read's BEGIN ran on the pool's connection");
    drop(read);

    // The next user of the connection: a write, answered as done.
    let revoked = db::tokens::revoke(&pool, victim.parse().expect("uuid")).await.expect("revoke");
    assert!(revoked, "the revocation reports the token revoked");
    let committed =
        app.sql_json(&format!("SELECT revoked_at IS NOT NULL AS revoked FROM api_tokens WHERE id = '{victim}'")).await;
    assert_eq!(committed[0]["revoked"], true, "the acknowledged revocation is committed, seen from another session");
    let session = app.sql_json(&format!("SELECT state FROM pg_stat_activity WHERE pid = {pid}")).await;
    assert_ne!(session[0]["state"], "idle in transaction", "no transaction left open on the connection");
}
