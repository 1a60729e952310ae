//! Issue 60, item 3: no login the ledger hands out can fill what every write
//! needs (SPEC §8). Each test is an attack a review ran with a `reader
//! create` login against the main this issue started from, where it
//! stopped every write: the lock table (advisory locks, in the ledger's
//! database and in the cluster's `postgres`), the connection slots, and
//! the other pools such a login shares with the service. Each asserts the
//! attack is refused or undone, with writes going through while the
//! attacker holds on.

use std::time::Duration;

use sea_orm::sqlx::{self, Connection, Executor, PgConnection};
use serde_json::json;
use work_ledger::auth::Role;
use work_ledger::live::WardenConfig;

use crate::helpers::{Agent, TestApp, spawn_app, spawn_app_with, test_config};
use crate::operator::{text, work_ledger};

/// `url` in database `database`.
fn in_database(url: &url::Url, database: &str) -> String {
    let mut url = url.clone();
    url.set_path(&format!("/{database}"));
    url.to_string()
}

/// Runs `sql` (made by the test) on `conn`.
async fn run(conn: &mut PgConnection, sql: String) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(conn).await.map(|_| ())
}

/// Waits for `n` more passes of the server's reader warden.
async fn warden_passes(app: &TestApp, n: u64) {
    let mut passes = app.live.warden_passes();
    let target = *passes.borrow_and_update() + n;
    tokio::time::timeout(Duration::from_secs(30), passes.wait_for(|p| *p >= target))
        .await
        .expect("the warden passes")
        .expect("warden running");
}

/// A unit registered and claimed at once by a fresh agent of fleet `f`
/// (writes that need a connection, the lock table and the notification
/// queue).
async fn a_write_goes_through(app: &TestApp, agent: &str) {
    let op = app.token("f", &format!("op-{agent}"), Role::Operator).await;
    app.register(&op, &[&format!("for-{agent}")]).await;
    let agent = Agent::new(app, "f", agent, Role::Agent).await;
    let claimed = tokio::time::timeout(Duration::from_secs(4), agent.claim_next(json!({}))).await.expect("not held up");
    assert_eq!(claimed.unit()["state"], "CLAIMED", "{:#}", claimed.body);
}

/// The attack: a reader login took session advisory locks in a loop until
/// PostgreSQL answered "out of shared memory"; from then on every write of
/// every fleet failed. It did the same from the cluster's `postgres`
/// database, which any login may connect to by default. Now the advisory
/// lock functions are the ledger's own roles' in its database, and the
/// embedded cluster admits the ledger's logins to no other database (an
/// external cluster that still does is reported by `audit`).
#[tokio::test]
async fn no_login_the_ledger_hands_out_takes_an_advisory_lock_in_any_database() {
    let app = spawn_app().await;
    let url = app.reader_login("f").await;
    let mut reader = PgConnection::connect(url.as_str()).await.expect("the reader connects to the ledger");
    for lock in [
        "pg_advisory_lock(1)",
        "pg_advisory_lock_shared(1)",
        "pg_try_advisory_lock(1)",
        "pg_advisory_lock(1, 2)",
        "pg_advisory_xact_lock(1)",
        "pg_try_advisory_xact_lock_shared(1)",
    ] {
        let err = run(&mut reader, format!("SELECT {lock}")).await.expect_err(lock).to_string();
        assert!(err.contains("permission denied for function"), "{lock}: {err}");
    }
    let held = app
        .sql_i64(&format!(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.locktype = 'advisory' AND a.usename = '{}'",
            url.username()
        ))
        .await;
    assert_eq!(held, 0, "no advisory lock of the reader's");

    let external = std::env::var("DATABASE_URL").is_ok_and(|url| !url.is_empty());
    for other in ["postgres", "template1"] {
        match PgConnection::connect(&in_database(&url, other)).await {
            Err(err) => assert!(err.to_string().contains("permission denied for database"), "{other}: {err}"),
            // Only an external cluster (DATABASE_URL) may still admit it, and then the audit says so.
            Ok(_) if external => {
                let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
                assert!(text(&audit.stdout).contains(&format!("may connect to database {other}")), "{other}");
            }
            Ok(_) => panic!("the embedded cluster admits a reader login to `{other}`"),
        }
    }
    a_write_goes_through(&app, "agent-1").await;
}

/// The attack: the reader login (no connection limit) opened 91 idle
/// connections and kept them; the service's pool could not grow, and 27 of
/// 40 concurrent writes answered UNAVAILABLE. Now a reader login has 4
/// connections at most, the warden ends its idle ones beyond 2, and the
/// service keeps its pool's connections: 40 concurrent writes all go
/// through while the attacker holds every connection it can get.
#[tokio::test]
async fn a_reader_login_cannot_hold_the_connection_slots() {
    let mut config = test_config();
    config.live.warden = WardenConfig { interval: Duration::from_millis(200), ..WardenConfig::default() };
    let app = spawn_app_with(config).await;
    let op = app.token("f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..40).map(|i| format!("u{i}")).collect();
    app.register(&op, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let url = app.reader_login("f").await;
    let role = url.username().to_owned();

    // Counted by the server: the warden (every 200 ms) may end idle ones
    // meanwhile, whose handles stay in `held`.
    let live = format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}'");
    let mut held = Vec::new();
    let refused = loop {
        match PgConnection::connect(url.as_str()).await {
            Ok(conn) => held.push(conn),
            Err(err) => break err.to_string(),
        }
        let open = app.sql_i64(&live).await;
        assert!(open <= 4, "a reader login has {open} connections open");
    };
    assert!(held.len() >= 4, "refused after {} connections: {refused}", held.len());
    assert!(refused.contains("too many connections for role"), "{refused}");

    warden_passes(&app, 2).await;
    let sessions = app.sql_i64(&format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}'")).await;
    assert_eq!(sessions, 2, "the warden keeps a reader login's two most recent idle sessions");

    let agents: Vec<Agent> = {
        let mut agents = Vec::new();
        for i in 0..40 {
            agents.push(Agent::new(&app, "f", &format!("agent-{i}"), Role::Agent).await);
        }
        agents
    };
    let claims = futures::future::join_all(agents.iter().map(|a| a.claim_next(json!({})))).await;
    for claim in &claims {
        assert_eq!(claim.unit()["state"], "CLAIMED", "{:#}", claim.body);
    }
    let claimed = app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'claimed'").await;
    assert_eq!(claimed, 40, "every write recorded");
    drop(held);
}

/// The attack's other door to the lock table: relation locks. A reader that
/// reads a hundred relations in one transaction holds a lock on each (and
/// on their indexes) until it ends; the warden ends a session holding more
/// than a dashboard ever takes, in whatever database it sits.
#[tokio::test]
async fn the_warden_ends_a_reader_session_that_holds_more_locks_than_a_dashboard_takes() {
    let mut config = test_config();
    config.live.warden = WardenConfig { interval: Duration::from_millis(200), ..WardenConfig::default() };
    let max_locks = config.live.warden.max_locks;
    let app = spawn_app_with(config).await;
    let url = app.reader_login("f").await;

    // Each panel of a dashboard is a query of its own: the widest one takes
    // far fewer locks than the limit.
    let mut dashboard = PgConnection::connect(url.as_str()).await.expect("connect");
    let mut widest = 0;
    for view in ["v_queue_depth", "v_disposition_summary", "v_agents", "v_cost_per_unit", "v_cycle_time_weekly"] {
        run(&mut dashboard, "BEGIN".to_owned()).await.expect("begin");
        run(&mut dashboard, format!("SELECT * FROM {view} LIMIT 1")).await.expect(view);
        let (taken,): (i64,) = sqlx::query_as("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()")
            .fetch_one(&mut dashboard)
            .await
            .expect("locks");
        widest = widest.max(taken);
        run(&mut dashboard, "COMMIT".to_owned()).await.expect("commit");
    }
    assert!(widest < i64::from(max_locks) / 2, "a dashboard's query took {widest} locks");

    let mut hoarder = PgConnection::connect(url.as_str()).await.expect("connect");
    hoarder.execute("BEGIN").await.expect("begin");
    let catalogs: Vec<(String,)> = sqlx::query_as(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r'
            AND has_table_privilege(c.oid, 'SELECT')",
    )
    .fetch_all(&mut hoarder)
    .await
    .expect("catalogs");
    // The warden may end it before the attack is through.
    let mut hoarded = 0;
    for (table,) in &catalogs {
        if run(&mut hoarder, format!("SELECT 1 FROM {table} LIMIT 0")).await.is_err() {
            break;
        }
        hoarded += 1;
    }
    assert!(hoarded > 10, "only {hoarded} catalogs read");
    warden_passes(&app, 2).await;
    let still = hoarder.execute("SELECT 1").await;
    assert!(still.is_err(), "the session that read {hoarded} catalogs in one transaction was not ended");
    a_write_goes_through(&app, "agent-1").await;
}

/// The other pools a login shares with every write: prepared transactions
/// (which hold their locks with no session at all) are off, and a reader's
/// temporary files are bounded by a limit only a superuser may lift.
#[tokio::test]
async fn a_reader_login_can_neither_prepare_a_transaction_nor_lift_its_temporary_file_limit() {
    let app = spawn_app().await;
    let url = app.reader_login("f").await;
    let mut reader = PgConnection::connect(url.as_str()).await.expect("connect");
    reader.execute("BEGIN").await.expect("begin");
    let prepared = reader.execute("PREPARE TRANSACTION 'held-forever'").await.expect_err("prepared").to_string();
    assert!(prepared.contains("prepared transactions are disabled"), "{prepared}");
    let _ = reader.execute("ROLLBACK").await;

    let (limit,): (String,) = sqlx::query_as("SHOW temp_file_limit").fetch_one(&mut reader).await.expect("show");
    assert_eq!(limit, "256MB");
    let lifted = reader.execute("SET temp_file_limit = -1").await.expect_err("lifted").to_string();
    assert!(lifted.contains("permission denied to set parameter"), "{lifted}");
}
