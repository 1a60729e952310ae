//! Identical queries sent together run once (`graphql::shared_reads`),
//! and each still sees every write committed before it was sent. A lock on
//! the questions table (which registering units does not touch) holds the
//! first read inside PostgreSQL, so that the others arrive while it runs;
//! the database's lock waiters show how many executions reached it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, Gql, TestApp, spawn_app_with, test_config};

/// The server's clock, a page of units (with what the caller may do to
/// them: the same for every caller that cannot claim) and one of
/// questions, which waits on the questions' lock.
const READ: &str = "{ serverTime units(first: 50) { nodes { externalRef legalActions } } \
                    questions(first: 10) { nodes { id } } }";
const LOCK: &str = "LOCK TABLE blocking_questions IN ACCESS EXCLUSIVE MODE";

async fn shared_reads_joined(app: &TestApp) -> u64 {
    let target = app.metrics_addr.expect("a metrics listener");
    let text = app.http.get(format!("http://{target}/metrics")).send().await.expect("scrape");
    let text = text.text().await.expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix("work_ledger_graphql_shared_reads_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

async fn wait_for_joins(app: &TestApp, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while shared_reads_joined(app).await < n {
        assert!(std::time::Instant::now() < deadline, "{n} queries joined an identical one within 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn lock_waiters(app: &TestApp) -> i64 {
    app.sql_i64(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .await
}

fn server_time(answer: &Gql) -> chrono::DateTime<chrono::Utc> {
    let time = answer.data()["serverTime"].as_str().expect("serverTime");
    chrono::DateTime::parse_from_rfc3339(time).expect("an RFC 3339 time").to_utc()
}

fn refs(answer: &Gql) -> Vec<String> {
    let nodes = answer.data()["units"]["nodes"].as_array().cloned().unwrap_or_default();
    nodes.iter().filter_map(|n| n["externalRef"].as_str().map(str::to_owned)).collect()
}

/// The statements sent since `mark` that read the questions.
fn question_reads(app: &TestApp, mark: usize) -> usize {
    app.request_statements_since(mark).iter().filter(|sql| sql.contains("blocking_questions")).count()
}

#[tokio::test]
async fn identical_reads_sent_together_run_once_and_each_sees_what_was_committed_before_it() {
    let mut config = test_config();
    config.metrics_listen = Some("127.0.0.1:0".into());
    // The reads wait on the test's lock for as long as it takes.
    config.db.lock_timeout = Duration::from_secs(60);
    let app = Arc::new(spawn_app_with(config).await);
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["early"]).await;
    let mut readers = Vec::new();
    for i in 0..5 {
        readers.push(app.token("f", &format!("reader-{i}"), Role::Reader).await);
    }

    let lock = app.owner.begin().await.expect("begin");
    lock.execute_unprepared(LOCK).await.expect("lock");
    let mark = app.statement_mark();
    // The first read runs, its roster held by the lock.
    let first = tokio::spawn({
        let (app, token) = (app.clone(), readers[0].clone());
        async move { app.gql(&token, READ, json!({})).await }
    });
    app.wait_for_lock_waiters(1).await;
    // Committed while the first read runs: the reads sent from now on see it.
    app.register(&op, &["late"]).await;
    let sent = chrono::Utc::now();
    let later: Vec<_> = readers[1..]
        .iter()
        .map(|token| {
            let (app, token) = (app.clone(), token.clone());
            tokio::spawn(async move { app.gql(&token, READ, json!({})).await })
        })
        .collect();
    // One of them leads the next execution; the other three join it.
    wait_for_joins(&app, 3).await;
    assert_eq!(lock_waiters(&app).await, 1, "the later reads wait in the service, not each in the database");
    lock.rollback().await.expect("release the lock");

    let first = first.await.expect("first read");
    let later: Vec<Gql> = join_all(later).await.into_iter().map(|r| r.expect("a later read")).collect();
    // Each answer is taken after its request was sent: its clock, and the
    // unit committed before it.
    assert!(server_time(&first) < sent, "the first read started before the others were sent");
    for answer in &later {
        assert!(server_time(answer) >= sent, "a later read answered from an execution that began before it was sent");
        assert_eq!(refs(answer), ["early", "late"], "a read sent after a commit sees it");
        assert_eq!(answer.body, later[0].body, "the reads sent together got one answer");
    }
    assert_eq!(question_reads(&app, mark), 2, "five identical reads, two executions");
}

#[tokio::test]
async fn reads_of_another_fleet_other_permissions_or_another_name_are_never_shared() {
    let mut config = test_config();
    config.db.lock_timeout = Duration::from_secs(60);
    let app = Arc::new(spawn_app_with(config).await);
    let (op_f, op_g) = (app.token("f", "op", Role::Operator).await, app.token("g", "op-g", Role::Operator).await);
    app.register(&op_f, &["f-unit"]).await;
    app.register(&op_g, &["g-unit"]).await;
    let reader = app.token("f", "reader-0", Role::Reader).await;
    let reader_g = app.token("g", "reader-g", Role::Reader).await;
    let (ann, bob) = (app.token("f", "ann", Role::Reader).await, app.token("f", "bob", Role::Reader).await);
    // Agents may claim: what each may do to a unit depends on which holds it.
    let holder = Agent::new(&app, "f", "holder", Role::Agent).await;
    let unit = holder.claim_next(json!({})).await.str("id");
    let peer = app.token("f", "peer", Role::Agent).await;
    let unit_read = format!(
        "{{ unit(id: \"{unit}\") {{ legalActions }} units(first: 50) {{ nodes {{ externalRef }} }} \
         questions(first: 10) {{ nodes {{ id }} }} }}"
    );
    const ME: &str = "{ me { name } units(first: 50) { nodes { externalRef } } questions(first: 10) { nodes { id } } }";

    let lock = app.owner.begin().await.expect("begin");
    lock.execute_unprepared(LOCK).await.expect("lock");
    let send = |token: &String, query: &str| {
        let (app, token, query) = (app.clone(), token.clone(), query.to_owned());
        tokio::spawn(async move { app.gql(&token, &query, json!({})).await })
    };
    let first = send(&reader, READ);
    app.wait_for_lock_waiters(1).await;
    // Were any of these taken for the first (or for each other), fewer
    // executions would wait on the lock.
    let others = [
        send(&reader_g, READ),
        send(&op_f, READ),
        send(&ann, ME),
        send(&bob, ME),
        send(&holder.token, &unit_read),
        send(&peer, &unit_read),
    ];
    app.wait_for_lock_waiters(7).await;
    lock.rollback().await.expect("release the lock");

    assert_eq!(refs(&first.await.expect("first")), ["f-unit"]);
    let answers: Vec<Gql> = join_all(others).await.into_iter().map(|r| r.expect("a read")).collect();
    assert_eq!(refs(&answers[0]), ["g-unit"], "another fleet reads its own units");
    assert_eq!(refs(&answers[1]), ["f-unit"]);
    assert_eq!(answers[2].data()["me"]["name"], Value::from("ann"));
    assert_eq!(answers[3].data()["me"]["name"], Value::from("bob"));
    let actions = |answer: &Gql| answer.data()["unit"]["legalActions"].to_string();
    assert!(actions(&answers[4]).contains("heartbeat"), "the holder may heartbeat: {}", actions(&answers[4]));
    assert!(!actions(&answers[5]).contains("heartbeat"), "another agent may not: {}", actions(&answers[5]));
}

#[tokio::test]
async fn a_shared_read_runs_as_a_caller_whose_turn_is_free_not_behind_a_busy_token() {
    let mut config = test_config();
    config.metrics_listen = Some("127.0.0.1:0".into());
    let app = Arc::new(spawn_app_with(config).await);
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["u1"]).await;
    let (busy, other, third) = (
        app.token("f", "busy", Role::Reader).await,
        app.token("f", "other", Role::Reader).await,
        app.token("f", "third", Role::Reader).await,
    );
    // A fleet-wide read of the questions (`totalCount`), and one of the roster.
    const SHARED: &str = "{ questions(first: 10) { totalCount } }";
    const ROSTER: &str = "{ agents(first: 5) { nodes { name } } }";
    let send = |token: &String, query: &'static str| {
        let (app, token) = (app.clone(), token.clone());
        tokio::spawn(async move { app.gql(&token, query, json!({})).await })
    };

    let questions = app.owner.begin().await.expect("begin");
    questions.execute_unprepared(LOCK).await.expect("lock the questions");
    let attempts = app.owner.begin().await.expect("begin");
    attempts.execute_unprepared("LOCK TABLE work_unit_attempts IN ACCESS EXCLUSIVE MODE").await.expect("lock");
    // The shared read runs (as `third`), and `busy` holds its one turn for
    // a fleet-wide read with the roster, which waits for the attempts.
    let running = send(&third, SHARED);
    app.wait_for_lock_waiters(1).await;
    let roster = send(&busy, ROSTER);
    app.wait_for_lock_waiters(2).await;
    // `busy` leads the next execution of the shared read (twice: whichever
    // arrives first leads, the other joins), then `other` joins it.
    let (led, led_twice) = (send(&busy, SHARED), send(&busy, SHARED));
    wait_for_joins(&app, 1).await;
    let joined = send(&other, SHARED);
    wait_for_joins(&app, 2).await;
    questions.rollback().await.expect("release the questions");

    // Run as `busy`, the execution would wait for its turn until the roster
    // ends: not before its lock timeout (5 s) while the attempts stay locked.
    let within = Duration::from_secs(2);
    let joined = tokio::time::timeout(within, joined).await.expect("answered without the busy token's turn");
    let led = tokio::time::timeout(within, led).await.expect("the busy token's own copy too");
    let led_twice = tokio::time::timeout(within, led_twice).await.expect("and its twin");
    let answers =
        [joined.expect("joined"), led.expect("led"), led_twice.expect("led"), running.await.expect("running")];
    for answer in answers {
        assert_eq!(answer.data()["questions"]["totalCount"], json!(0));
    }
    attempts.rollback().await.expect("release the attempts");
    roster.await.expect("roster").data();
}
