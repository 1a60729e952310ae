//! Live events (SPEC §6) through real server processes over WebSocket:
//! replicas behaving as one service, the sweeper reporting each stall once,
//! a killed LISTEN connection, resumed streams, transactions committing out
//! of order, and fleet isolation. Assertions are on delivered messages and
//! on what the database recorded; the only timeouts are failure guards.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join_all;
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;
use work_ledger::db::SessionLimits;
use work_ledger::db::events::{self, Position};
use work_ledger::ledger::Ledger;
use work_ledger::live::tail::Tail;

use crate::helpers::{Agent, TestApp, spawn_app, spawn_app_with, test_config};
use crate::metrics::{sample, scrape};
use crate::skip::skip;
use crate::ws_client::{GUARD, Ws};

const QUESTIONS: &str = "subscription($group: String) { blockingQuestionOpened(assigneeGroup: $group) { id unitId question status assigneeGroup } }";
const STALLS: &str = "subscription($domain: String) { unitStalled(domain: $domain) { unit { id externalRef } attempt { id attemptNo } agentId leaseExpiredAt } }";
const EVENTS: &str = "subscription($after: String, $unit: UUID, $types: [EventType!]) {
    ledgerEvents(after: $after, unitId: $unit, types: $types) { id cursor unitId eventType agentId detail unit { externalRef state } } }";

/// The cursor of the fleet's newest event, from the read path's `events`.
async fn newest_cursor(app: &TestApp, token: &str) -> String {
    let resp = app.gql(token, "{ events(first: 1) { edges { cursor } } }", json!({})).await;
    resp.data()["events"]["edges"][0]["cursor"].as_str().expect("an event").to_owned()
}

async fn next_event(ws: &mut Ws) -> Value {
    ws.next_data().await["ledgerEvents"].clone()
}

async fn registered_unit(ws: &mut Ws) -> String {
    let event = next_event(ws).await;
    assert_eq!(event["eventType"], "REGISTERED", "{event:#}");
    event["unit"]["externalRef"].as_str().expect("externalRef").to_owned()
}

/// Claims, starts and blocks one unit as `agent`; returns the question id.
async fn raise_question(agent: &Agent<'_>, question: &str, group: Option<&str>) -> String {
    let unit = agent.claim_next(json!({})).await.str("id");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let blocked = agent.block(&unit, question, json!({ "group": group })).await;
    blocked.unit()["openQuestion"]["id"].as_str().expect("open question").to_owned()
}

#[tokio::test]
async fn a_triage_on_one_replica_receives_every_question_raised_through_two_others() {
    let a = spawn_app().await;
    let b = a.spawn_replica().await;
    let c = a.spawn_replica().await;
    let op = a.token("f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..9).map(|i| format!("unit-{i}")).collect();
    a.register(&op, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    // A question open before the subscription: the snapshot of open
    // questions delivers it first, which proves the subscription runs; the
    // eight raised after it can only come by the live path across replicas.
    let sentinel = raise_question(&Agent::new(&a, "f", "sentinel", Role::Agent).await, "sentinel", None).await;
    let triage = a.token("f", "triage", Role::Triage).await;
    let mut ws = Ws::subscription(&a, &triage, QUESTIONS, json!({})).await;
    assert_eq!(ws.next_data().await["blockingQuestionOpened"]["id"], sentinel.as_str(), "the open question first");

    let raised: HashSet<String> = join_all((0..8).map(|i| {
        let (b, c) = (&b, &c);
        async move {
            let server = if i % 2 == 0 { b } else { c };
            let agent = Agent::new(server, "f", &format!("agent-{i}"), Role::Agent).await;
            raise_question(&agent, &format!("question {i}"), None).await
        }
    }))
    .await
    .into_iter()
    .collect();

    let mut received = Vec::new();
    while received.len() < raised.len() {
        let q = ws.next_data().await["blockingQuestionOpened"].clone();
        assert_eq!(q["status"], "OPEN");
        received.push(q["id"].as_str().expect("id").to_owned());
    }
    let distinct: HashSet<String> = received.iter().cloned().collect();
    assert_eq!(distinct.len(), received.len(), "no question twice: {received:?}");
    assert_eq!(distinct, raised);
    let recorded: HashSet<String> = a
        .sql_json("SELECT id::text AS id FROM blocking_questions WHERE status = 'open'")
        .await
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(recorded, raised.iter().cloned().chain([sentinel]).collect());
}

/// Waits until the app's background sweeper has completed two more passes.
async fn two_passes(app: &TestApp) {
    let mut rx = app.live.sweeper_passes();
    let from = *rx.borrow();
    tokio::time::timeout(GUARD, rx.wait_for(|n| *n >= from + 2)).await.expect("two passes").expect("sweeper");
}

/// `n` units `{prefix}-00`.. registered, each claimed by an agent of its own
/// in raw SQL (no agent needed to hold a lease that will expire); their
/// attempts.
async fn claimed_by_hand(app: &TestApp, op: &str, prefix: &str, n: usize) -> HashSet<String> {
    let refs: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:02}")).collect();
    let registered = app.register(op, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let mut attempts = HashSet::new();
    for (i, unit) in registered.iter().enumerate() {
        attempts.insert(app.raw_claim(unit["id"].as_str().expect("id"), &format!("agent-{i:02}")).await);
    }
    attempts
}

/// The attempts of the next `n` stalls `ws` delivers, each once.
async fn stalls_delivered(ws: &mut Ws, n: usize) -> HashSet<String> {
    let mut delivered = HashSet::new();
    for _ in 0..n {
        let stall = ws.next_data().await["unitStalled"].clone();
        assert!(delivered.insert(stall["attempt"]["id"].as_str().expect("attempt").to_owned()), "twice: {stall:#}");
    }
    delivered
}

/// The `stalled` events recorded per attempt: `{attempt, n}` rows.
async fn stalls_per_attempt(app: &TestApp) -> Vec<Value> {
    app.sql_json(
        "SELECT attempt_id::text AS attempt, count(*) AS n FROM work_unit_events
          WHERE event_type = 'stalled' GROUP BY attempt_id",
    )
    .await
}

#[tokio::test]
async fn a_stall_is_reported_once_although_three_sweepers_run() {
    let mut config = test_config();
    config.live.sweeper.interval = Duration::from_millis(50);
    let a = spawn_app_with(config.clone()).await;
    let b = a.spawn_replica_with(config.clone()).await;
    let c = a.spawn_replica_with(config).await;
    let op = a.token("f", "op", Role::Operator).await;
    let registered = a.register(&op, &["s1", "s2", "s3", "s4"]).await;
    let s4 = registered[3]["id"].as_str().expect("id").to_owned();
    let mut attempts = HashSet::new();
    let mut units = Vec::new();
    for i in 0..3 {
        let agent = Agent::new(&a, "f", &format!("agent-{i}"), Role::Agent).await;
        let claimed = agent.claim_next(json!({})).await;
        attempts.insert(claimed.str("currentAttemptId"));
        units.push(claimed.str("id"));
    }
    let reader = a.token("f", "monitor", Role::Reader).await;
    let mut ws = Ws::subscription(&b, &reader, STALLS, json!({})).await;

    for unit in &units {
        a.expire_lease(unit).await;
    }
    // Every background sweeper completes two passes after the expiry, and
    // each replica sweeps once more by hand, all at the same time.
    tokio::join!(two_passes(&a), two_passes(&b), two_passes(&c));
    let (ra, rb, rc) = tokio::join!(a.live.sweep_now(), b.live.sweep_now(), c.live.sweep_now());
    assert_eq!((ra.expect("sweep"), rb.expect("sweep"), rc.expect("sweep")), (0, 0, 0), "already reported");

    let recorded = stalls_per_attempt(&a).await;
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert!(recorded.iter().all(|r| r["n"] == 1), "{recorded:?}");

    let mut delivered = HashSet::new();
    for _ in 0..3 {
        let stall = ws.next_data().await["unitStalled"].clone();
        assert!(stall["agentId"].as_str().is_some_and(|a| a.starts_with("agent-")), "{stall:#}");
        assert!(delivered.insert(stall["attempt"]["id"].as_str().expect("attempt").to_owned()), "twice: {stall:#}");
    }
    assert_eq!(delivered, attempts);

    // The next stall is the next message: nothing was delivered twice.
    let late = Agent::new(&a, "f", "late", Role::Agent).await;
    let unit = late.claim_unit(&s4, json!({})).await.str("id");
    a.expire_lease(&unit).await;
    let stall = ws.next_data().await["unitStalled"].clone();
    assert_eq!(stall["unit"]["externalRef"], "s4");
    assert_eq!(stall["agentId"], "late");
    let lease = a.sql_json(&format!("SELECT lease_expires_at FROM work_units WHERE id = '{unit}'")).await;
    let (sent, stored) = (stall["leaseExpiredAt"].as_str(), lease[0]["lease_expires_at"].as_str());
    let parse = |t: Option<&str>| t.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    assert_eq!(parse(sent), parse(stored));
}

/// A pass that finds many expired leases reports them in small statements
/// spread over `WORK_LEDGER_SWEEP_SPREAD`, not in one burst of events that
/// every subscriber of their fleets gets at once; each is still reported
/// once, and the most overdue first.
#[tokio::test]
async fn a_sweep_spreads_what_it_found_over_its_spread_in_small_statements() {
    let mut config = test_config();
    config.live.sweeper.interval = Duration::from_secs(2);
    config.live.sweeper.spread = Duration::from_secs(1);
    let app = spawn_app_with(config).await;
    let op = app.token("f", "op", Role::Operator).await;
    let attempts = claimed_by_hand(&app, &op, "spread", 24).await;
    let reader = app.token("f", "monitor", Role::Reader).await;
    let mut ws = Ws::subscription(&app, &reader, STALLS, json!({ "includeCurrent": false })).await;

    // Expired at once, in one statement, the first unit longest ago: one
    // pass finds all 24 (a pass running during the update finds none).
    app.sql(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 minute' + substr(external_ref, 8)::int * interval '1 second'
          WHERE external_ref LIKE 'spread-%'",
    )
    .await;
    two_passes(&app).await;

    // 24 due over 1 s: at least 8 a statement (SPREAD_MIN_BATCH), so three
    // transactions of 8, a third of the spread apart.
    let statements = app
        .sql_json(
            "SELECT count(*) AS n, min(e.created_at) AS at, min(u.external_ref) AS first
               FROM work_unit_events e JOIN work_units u ON u.id = e.unit_id
              WHERE e.event_type = 'stalled' GROUP BY e.tx_id ORDER BY min(e.created_at)",
        )
        .await;
    let sizes: Vec<&Value> = statements.iter().map(|s| &s["n"]).collect();
    assert_eq!(sizes, [8, 8, 8], "{statements:#?}");
    let firsts: Vec<&str> = statements.iter().map(|s| s["first"].as_str().expect("ref")).collect();
    assert_eq!(firsts, ["spread-00", "spread-08", "spread-16"], "the most overdue first");
    let at =
        |i: usize| chrono::DateTime::parse_from_rfc3339(statements[i]["at"].as_str().expect("at")).expect("timestamp");
    for i in 1..3 {
        let gap = at(i) - at(i - 1);
        assert!(gap >= chrono::Duration::milliseconds(300), "statements {gap} apart: {statements:#?}");
    }
    let recorded = stalls_per_attempt(&app).await;
    assert!(recorded.iter().all(|r| r["n"] == 1), "{recorded:?}");
    let reported: HashSet<String> = recorded.iter().map(|r| r["attempt"].as_str().expect("id").to_owned()).collect();
    assert_eq!(reported, attempts);

    assert_eq!(stalls_delivered(&mut ws, 24).await, attempts);
}

/// Three replicas spread their passes over the same due units at once (the
/// leases expired at the same instant, so only the unit id orders them):
/// every attempt is still reported once, in several statements.
#[tokio::test]
async fn three_sweepers_spreading_over_the_same_stalls_report_each_once() {
    let mut config = test_config();
    config.live.sweeper.interval = Duration::from_secs(1);
    config.live.sweeper.spread = Duration::from_millis(800);
    let a = spawn_app_with(config.clone()).await;
    let b = a.spawn_replica_with(config.clone()).await;
    let c = a.spawn_replica_with(config).await;
    let op = a.token("f", "op", Role::Operator).await;
    let attempts = claimed_by_hand(&a, &op, "tied", 40).await;
    let reader = a.token("f", "monitor", Role::Reader).await;
    let mut ws = Ws::subscription(&b, &reader, STALLS, json!({ "includeCurrent": false })).await;

    a.sql("UPDATE work_units SET lease_expires_at = date_trunc('second', now()) - interval '1 minute' WHERE external_ref LIKE 'tied-%'")
        .await;
    tokio::join!(two_passes(&a), two_passes(&b), two_passes(&c));

    let recorded = stalls_per_attempt(&a).await;
    assert_eq!(recorded.len(), 40, "{recorded:?}");
    assert!(recorded.iter().all(|r| r["n"] == 1), "{recorded:?}");
    let reported: HashSet<String> = recorded.iter().map(|r| r["attempt"].as_str().expect("id").to_owned()).collect();
    assert_eq!(reported, attempts);
    let statements = a.sql_i64("SELECT count(DISTINCT tx_id) FROM work_unit_events WHERE event_type = 'stalled'").await;
    assert!(statements >= 5, "40 stalls at most 8 a statement came in {statements} transactions");

    assert_eq!(stalls_delivered(&mut ws, 40).await, attempts);
}

#[tokio::test]
async fn every_subscriber_gets_every_event_once_although_the_listen_connection_is_killed() {
    let a = spawn_app().await;
    let b = a.spawn_replica().await;
    let op = a.token("f", "op", Role::Operator).await;
    a.register(&op, &["origin"]).await;
    let origin = newest_cursor(&a, &op).await;
    a.register(&op, &["sentinel"]).await;
    let vars = json!({ "after": origin, "types": ["REGISTERED"] });
    let reader = a.token("f", "reader", Role::Reader).await;
    let mut subscribers = [
        Ws::subscription(&a, &reader, EVENTS, vars.clone()).await,
        Ws::subscription(&a, &reader, EVENTS, vars.clone()).await,
        Ws::subscription(&b, &reader, EVENTS, vars).await,
    ];
    // Every subscription runs before anything it waits for is produced.
    for ws in &mut subscribers {
        assert_eq!(registered_unit(ws).await, "sentinel");
    }

    const N: usize = 40;
    let produce = |from: usize, to: usize| {
        let (a, b, op) = (&a, &b, &op);
        async move {
            for i in from..to {
                let server = if i % 2 == 0 { a } else { b };
                server.register(op, &[&format!("e{i:02}")]).await;
            }
        }
    };
    produce(0, N / 4).await;
    // The fault window: every LISTEN backend of the database is killed while
    // a write waits (on a table lock this test holds); once both listeners
    // have noticed, the write commits, before they come back (after a
    // backoff of 100 ms). Proved by their connect counters, which move only
    // once a listener LISTENs again; tried again if the machine was slower.
    let (mut connects_a, mut connects_b) = (a.live.listener_connects(), b.live.listener_connects());
    let (mut kills, mut while_down) = (0, 0);
    for i in N / 4..N {
        if while_down > 0 {
            produce(i, i + 1).await;
            continue;
        }
        let mut status = [a.live.listener_status(), b.live.listener_status()];
        for up in &mut status {
            tokio::time::timeout(GUARD, up.wait_for(|up| *up)).await.expect("listening").expect("status");
            up.borrow_and_update();
        }
        let opened = (*connects_a.borrow_and_update(), *connects_b.borrow_and_update());
        let gate = a.owner.begin().await.expect("begin");
        gate.execute_unprepared("LOCK TABLE work_units IN SHARE MODE").await.expect("lock");
        let kill = async {
            a.wait_for_lock_waiters(1).await;
            let killed = a
                .sql_json(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
                      WHERE datname = current_database() AND application_name = 'work-ledger-listener'",
                )
                .await;
            assert_eq!(killed[0]["n"], 2, "both replicas' listeners");
            for down in &mut status {
                tokio::time::timeout(GUARD, down.changed()).await.expect("the loss noticed").expect("status");
            }
            gate.rollback().await.expect("release the write");
        };
        tokio::join!(produce(i, i + 1), kill);
        kills += 1;
        if (*connects_a.borrow(), *connects_b.borrow()) == opened {
            while_down += 1;
        }
    }
    eprintln!("{kills} kill(s) of the listeners until a write fell in the window");
    assert!(while_down > 0, "no event committed while the listeners were down: the fault never happened");
    a.register(&op, &["marker"]).await;

    let expected: Vec<String> = a
        .sql_json(
            "SELECT u.external_ref AS r FROM work_unit_events e JOIN work_units u ON u.id = e.unit_id
              WHERE e.event_type = 'registered' AND u.external_ref NOT IN ('origin', 'sentinel')
              ORDER BY e.tx_id, e.seq",
        )
        .await
        .iter()
        .map(|r| r["r"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(expected.len(), N + 1);
    assert_eq!(expected.last().map(String::as_str), Some("marker"));
    for (i, ws) in subscribers.iter_mut().enumerate() {
        let mut got = Vec::new();
        while got.len() < expected.len() {
            got.push(registered_unit(ws).await);
        }
        assert_eq!(got, expected, "subscriber {i}: every event exactly once, in delivery order");
    }
    for app in [&a, &b] {
        tokio::time::timeout(GUARD, app.live.listener_status().wait_for(|up| *up))
            .await
            .expect("listening again")
            .expect("status");
    }
}

/// Thaws a frozen backend, also when the test fails.
struct Thaw(i64);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-CONT", &self.0.to_string()]).status();
    }
}

#[tokio::test]
async fn a_silent_listen_connection_is_replaced_and_nothing_is_lost() {
    let mut config = test_config();
    config.live.listener.health_interval = Duration::from_millis(200);
    config.live.listener.health_timeout = Duration::from_millis(200);
    let app = spawn_app_with(config).await;
    let pid = app
        .sql_i64(
            "SELECT pid FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'work-ledger-listener'",
        )
        .await;
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        skip("PostgreSQL runs on another host (DATABASE_URL); its backend cannot be frozen from here");
        return;
    }
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["origin"]).await;
    let origin = newest_cursor(&app, &op).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin, "types": ["REGISTERED"] })).await;
    app.register(&op, &["before"]).await;
    assert_eq!(registered_unit(&mut ws).await, "before");

    // A stopped backend keeps its socket open and says nothing, like the far
    // end of a half-open TCP connection: no error ever reaches the listener.
    let mut connects = app.live.listener_connects();
    let opened = *connects.borrow();
    // Frozen only while it waits for its client (wait_event ClientRead). A
    // backend stopped while it reads the notification queue (here every
    // 200 ms, for the health pings) holds the queue's lock, and every NOTIFY
    // of the cluster, this test's next write included, waits for it until
    // the test ends: the stall this test showed once.
    let waiting = format!("SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}");
    let mut tries = 0;
    let _thaw = loop {
        let frozen = std::process::Command::new("kill").args(["-STOP", &pid.to_string()]).status().expect("kill");
        assert!(frozen.success());
        let thaw = Thaw(pid);
        if app.sql_json(&waiting).await[0]["wait_event"] == "ClientRead" {
            break thaw;
        }
        drop(thaw);
        tries += 1;
        assert!(tries < 1000, "the listener's backend never waited for its client");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::timeout(GUARD, app.register(&op, &["while-deaf"])).await.expect("a write while the backend is frozen");
    tokio::time::timeout(GUARD, connects.wait_for(|n| *n > opened))
        .await
        .expect("the silent connection replaced within the guard")
        .expect("connects");
    assert_eq!(registered_unit(&mut ws).await, "while-deaf", "caught up from the table");
    app.register(&op, &["after"]).await;
    assert_eq!(registered_unit(&mut ws).await, "after");
}

#[tokio::test]
async fn a_stream_resumed_from_a_cursor_delivers_exactly_the_missing_events() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["origin"]).await;
    let origin = newest_cursor(&app, &op).await;
    let reader = app.token("f", "reader", Role::Reader).await;

    let mut first = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin, "types": ["REGISTERED"] })).await;
    for i in 1..=5 {
        app.register(&op, &[&format!("u{i}")]).await;
    }
    let mut seen = Vec::new();
    for _ in 1..=5 {
        seen.push(next_event(&mut first).await);
    }
    let refs: Vec<&str> = seen.iter().map(|e| e["unit"]["externalRef"].as_str().unwrap_or_default()).collect();
    assert_eq!(refs, ["u1", "u2", "u3", "u4", "u5"]);
    // The client goes away after handling u3; more happens meanwhile.
    drop(first);
    for i in 6..=8 {
        app.register(&op, &[&format!("u{i}")]).await;
    }

    let resume_at = seen[2]["cursor"].as_str().expect("cursor");
    let mut resumed =
        Ws::subscription(&app, &reader, EVENTS, json!({ "after": resume_at, "types": ["REGISTERED"] })).await;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(registered_unit(&mut resumed).await);
    }
    assert_eq!(got, ["u4", "u5", "u6", "u7", "u8"]);
    // Then live, without a duplicate at the seam.
    app.register(&op, &["u9"]).await;
    assert_eq!(registered_unit(&mut resumed).await, "u9");
}

#[tokio::test]
async fn transactions_committing_in_reverse_order_leave_no_gap() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["target"]).await[0]["id"].as_str().expect("id").to_owned();
    let origin = newest_cursor(&app, &op).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let vars = json!({ "after": origin, "unit": unit });
    let mut early = Ws::subscription(&app, &reader, EVENTS, vars.clone()).await;

    let insert = |tag: &str| {
        format!(
            "INSERT INTO work_unit_events (fleet, unit_id, event_type, agent_id, detail)
             VALUES ('f', '{unit}', 'heartbeat', 'writer', '{{\"tx\": \"{tag}\"}}')"
        )
    };
    // A sentinel event committed before A and B begin: a subscriber that has
    // delivered it is running, so what it delivers next it read afterwards.
    app.sql(&insert("S")).await;
    assert_eq!(next_event(&mut early).await["detail"]["tx"], "S");
    // A writes first (the lower seq) but commits last.
    let tx_a = app.owner.begin().await.expect("begin A");
    tx_a.execute_unprepared(&insert("A")).await.expect("insert A");
    let tx_b = app.owner.begin().await.expect("begin B");
    tx_b.execute_unprepared(&insert("B")).await.expect("insert B");
    tx_b.commit().await.expect("commit B");
    // What any reader of the log can take now: not B, which would put a
    // cursor past A; B waits for A.
    let tags = |batch: &events::Batch| -> Vec<String> {
        batch.events.iter().filter_map(|e| e.event.detail["tx"].as_str().map(str::to_owned)).collect()
    };
    let now = events::events_after(&app.owner, "f", Position::before_batch(0), None, 100).await.expect("read");
    assert_eq!(tags(&now), ["S"], "B is not deliverable before A ends");
    assert!(now.held, "B is committed and held back");
    // A subscriber that starts while B is committed and A is not: its
    // sentinel proves it started before A commits.
    let mut late = Ws::subscription(&app, &reader, EVENTS, vars).await;
    assert_eq!(next_event(&mut late).await["detail"]["tx"], "S");
    // Once A commits, both become deliverable, A first (as soon as every
    // older transaction of the cluster has ended: other tests share it).
    tx_a.commit().await.expect("commit A");
    let seqs = app
        .sql_json(&format!("SELECT detail->>'tx' AS tx FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"))
        .await;
    assert_eq!(
        seqs,
        vec![json!({ "tx": null }), json!({ "tx": "S" }), json!({ "tx": "A" }), json!({ "tx": "B" })],
        "A holds the lower seq"
    );

    let mut cursors = Vec::new();
    for ws in [&mut early, &mut late] {
        let (first, second) = (next_event(ws).await, next_event(ws).await);
        assert_eq!((first["detail"]["tx"].as_str(), second["detail"]["tx"].as_str()), (Some("A"), Some("B")));
        cursors = vec![first["cursor"].clone(), second["cursor"].clone()];
    }
    app.sql(&insert("C")).await;
    for ws in [&mut early, &mut late] {
        assert_eq!(next_event(ws).await["detail"]["tx"], "C", "nothing twice");
    }
    // Resuming after either delivers exactly what followed it.
    let mut after_a = Ws::subscription(&app, &reader, EVENTS, json!({ "after": cursors[0], "unit": unit })).await;
    assert_eq!(next_event(&mut after_a).await["detail"]["tx"], "B");
    assert_eq!(next_event(&mut after_a).await["detail"]["tx"], "C");
    let mut after_b = Ws::subscription(&app, &reader, EVENTS, json!({ "after": cursors[1], "unit": unit })).await;
    assert_eq!(next_event(&mut after_b).await["detail"]["tx"], "C");
}

#[tokio::test]
async fn a_stream_without_a_cursor_starts_with_what_commits_after_it_began() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "target").await;
    let insert = |tag: &str| {
        format!(
            "INSERT INTO work_unit_events (fleet, unit_id, event_type, agent_id, detail)
             VALUES ('f', '{unit}', 'heartbeat', 'writer', '{{\"tx\": \"{tag}\"}}')"
        )
    };
    // X is running when the subscription begins; Y started after X but
    // committed before the subscription: although Y's transaction id is not
    // below the oldest running one, Y is "before".
    let tx_x = app.owner.begin().await.expect("begin X");
    tx_x.execute_unprepared(&insert("X")).await.expect("insert X");
    app.sql(&insert("Y")).await;
    let principal = work_ledger::auth::Principal {
        token_id: uuid::Uuid::new_v4(),
        token_hash: [0; 32],
        fleet: "f".into(),
        name: "reader".into(),
        permissions: Role::Reader.permissions(),
    };
    let ledger = Ledger::new(app.owner.clone());
    let mut tail = Tail::from_now(&app.live, &ledger, &principal, None).await.expect("tail");
    tx_x.commit().await.expect("commit X");
    app.sql(&insert("Z")).await;

    assert_eq!(next_tag(&mut tail).await, "X", "committed after the start");
    assert_eq!(next_tag(&mut tail).await, "Z");
}

async fn next_tag(tail: &mut Tail) -> String {
    let event = tokio::time::timeout(GUARD, tail.next()).await.expect("guard").expect("read").expect("event");
    event.event.detail["tx"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_subscriber_sees_only_its_own_fleet() {
    let app = spawn_app().await;
    let op_a = app.token("a", "op", Role::Operator).await;
    let op_b = app.token("b", "op", Role::Operator).await;
    app.register(&op_a, &["a-origin"]).await;
    app.register(&op_b, &["b-origin"]).await;
    let origin_a = newest_cursor(&app, &op_a).await;
    let origin_b = newest_cursor(&app, &op_b).await;
    let triage_a = app.token("a", "triage", Role::Triage).await;

    let mut events = Ws::subscription(&app, &triage_a, EVENTS, json!({ "after": origin_a })).await;
    let mut questions = Ws::subscription(&app, &triage_a, QUESTIONS, json!({})).await;
    let mut stalls = Ws::subscription(&app, &triage_a, STALLS, json!({})).await;

    // Fleet b: units, claims, a question and a stall.
    app.register(&op_b, &["b1", "b2"]).await;
    let agent_b = Agent::new(&app, "b", "agent", Role::Agent).await;
    raise_question(&agent_b, "b's question", None).await;
    let stalled_b = Agent::new(&app, "b", "stalled", Role::Agent).await.claim_next(json!({})).await.str("id");
    app.expire_lease(&stalled_b).await;
    app.live.sweep_now().await.expect("sweep");
    // Then fleet a.
    app.register(&op_a, &["a1", "a2"]).await;
    let agent_a = Agent::new(&app, "a", "agent", Role::Agent).await;
    raise_question(&agent_a, "a's question", None).await;
    let stalled_a = Agent::new(&app, "a", "stalled", Role::Agent).await.claim_next(json!({})).await.str("id");
    app.expire_lease(&stalled_a).await;
    app.live.sweep_now().await.expect("sweep");

    assert_eq!(registered_unit(&mut events).await, "a1", "b's events never arrive");
    assert_eq!(questions.next_data().await["blockingQuestionOpened"]["question"], "a's question");
    assert_eq!(stalls.next_data().await["unitStalled"]["unit"]["id"], stalled_a.as_str());

    // Another fleet's cursor names nothing here.
    let mut foreign = Ws::subscription(&app, &triage_a, EVENTS, json!({ "after": origin_b })).await;
    let refused = foreign.expect_type("next").await;
    assert_eq!(refused["payload"]["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{refused:#}");
    foreign.expect_type("complete").await;
    let mut garbage = Ws::subscription(&app, &triage_a, EVENTS, json!({ "after": "not-a-cursor" })).await;
    let refused = garbage.expect_type("next").await;
    assert_eq!(refused["payload"]["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{refused:#}");
}

#[tokio::test]
async fn open_questions_and_current_stalls_come_first_then_new_ones_filtered() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["q1", "q2", "q3"]).await;
    let first = raise_question(&Agent::new(&app, "f", "a1", Role::Agent).await, "first", Some("schemas")).await;
    let triage = app.token("f", "triage", Role::Triage).await;
    let mut ws = Ws::subscription(&app, &triage, QUESTIONS, json!({ "group": "schemas" })).await;
    assert_eq!(ws.next_data().await["blockingQuestionOpened"]["id"], first.as_str(), "the open one first");
    raise_question(&Agent::new(&app, "f", "a2", Role::Agent).await, "elsewhere", Some("other")).await;
    raise_question(&Agent::new(&app, "f", "a3", Role::Agent).await, "second", Some("schemas")).await;
    let q = ws.next_data().await["blockingQuestionOpened"].clone();
    assert_eq!((q["question"].as_str(), q["assigneeGroup"].as_str()), (Some("second"), Some("schemas")));

    // Stalls: one current in each domain; the subscription for `d1` gets
    // its current one, then a new `d1` stall, never `d2`'s.
    app.sql(
        "INSERT INTO work_units (fleet, external_ref, domain) VALUES ('f', 'd1-a', 'd1'), ('f', 'd2-a', 'd2'), ('f', 'd1-b', 'd1')",
    )
    .await;
    let claim = |agent: &'static str, domain: &'static str| {
        let app = &app;
        async move { Agent::new(app, "f", agent, Role::Agent).await.claim_next(json!({ "domain": domain })).await.str("id") }
    };
    let (d1a, d2a, d1b) = (claim("s1", "d1").await, claim("s2", "d2").await, claim("s3", "d1").await);
    app.expire_lease(&d1a).await;
    app.expire_lease(&d2a).await;
    let mut stalls = Ws::subscription(&app, &triage, STALLS, json!({ "domain": "d1" })).await;
    assert_eq!(stalls.next_data().await["unitStalled"]["unit"]["externalRef"], "d1-a");
    app.live.sweep_now().await.expect("sweep");
    app.expire_lease(&d1b).await;
    app.live.sweep_now().await.expect("sweep");
    assert_eq!(stalls.next_data().await["unitStalled"]["unit"]["externalRef"], "d1-b", "d1-a once, d2-a never");
}

#[tokio::test]
async fn each_payload_reads_the_unit_as_it_is_then() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["u"]).await[0]["id"].as_str().expect("id").to_owned();
    let origin = newest_cursor(&app, &op).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin, "unit": unit })).await;
    let vars = json!({ "after": origin, "types": ["TRANSITIONED"] });
    let mut transitions = Ws::subscription(&app, &reader, EVENTS, vars).await;
    let agent = Agent::new(&app, "f", "agent", Role::Agent).await;
    agent.claim_next(json!({})).await.data();
    let claimed = next_event(&mut ws).await;
    assert_eq!((claimed["eventType"].as_str(), claimed["unit"]["state"].as_str()), (Some("CLAIMED"), Some("CLAIMED")));
    assert_eq!(claimed["agentId"], "agent");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let started = next_event(&mut ws).await;
    assert_eq!(started["unit"]["state"], "IN_PROGRESS", "no stale cache across payloads");
    let only = next_event(&mut transitions).await;
    assert_eq!((only["eventType"].as_str(), only["id"].as_str()), (Some("TRANSITIONED"), started["id"].as_str()));
}

/// A server whose statements wait at most 200 ms for a lock, with its
/// metrics served: a session outside it holding a table fails its reads
/// for a moment.
async fn impatient_app() -> TestApp {
    spawn_app_with(impatient_config()).await
}

fn impatient_config() -> work_ledger::http::ServerConfig {
    let mut config = test_config();
    config.db = SessionLimits { lock_timeout: Duration::from_millis(200), statement_timeout: Duration::from_secs(10) };
    config.metrics_listen = Some("127.0.0.1:0".into());
    config
}

/// A subscription's reads of the log that fail for a moment (here: each
/// waits past the lock timeout behind a session outside the service that
/// holds the event table) are tried again with the position kept, not
/// ended with UNAVAILABLE: once the table is free, a stream that was
/// catching up and one resuming from a cursor both deliver every event once.
#[tokio::test]
async fn a_read_that_fails_for_a_moment_is_tried_again_and_the_stream_loses_nothing() {
    let app = impatient_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["a"]).await;
    let origin = newest_cursor(&app, &op).await;
    app.register(&op, &["b"]).await;
    let reader = app.token("f", "reader", Role::Reader).await;

    let gate = app.owner.begin().await.expect("begin");
    gate.execute_unprepared("LOCK TABLE work_unit_events IN ACCESS EXCLUSIVE MODE").await.expect("lock");
    let mark = app.statement_mark();
    let mut from_now = Ws::subscription(&app, &reader, EVENTS, json!({})).await;
    let mut resumed = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin })).await;
    // Each stream's read has failed and been sent again (the first catch-up
    // page of the one, the resume of the other), counted in the metrics.
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        let sent = app.request_statements_since(mark);
        let tries = |function: &str| sent.iter().filter(|sql| sql.contains(function)).count();
        let retries = sample(&scrape(&app).await, "work_ledger_live_read_retries_total").unwrap_or(0.0);
        if tries("live_events_below") >= 2 && tries("live_events_resumed") >= 2 && retries >= 2.0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "reads tried again within the guard ({retries} retries)");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.rollback().await.expect("free the table");

    app.register(&op, &["c"]).await;
    assert_eq!(registered_unit(&mut from_now).await, "c");
    assert_eq!(registered_unit(&mut resumed).await, "b");
    assert_eq!(registered_unit(&mut resumed).await, "c");
    // Live after that, with nothing repeated.
    app.register(&op, &["d"]).await;
    assert_eq!(registered_unit(&mut from_now).await, "d");
    assert_eq!(registered_unit(&mut resumed).await, "d");
}

/// Fleet `f` with unit `a`, a reader, the cursor of `a`'s registration, then
/// `later` registered one by one, and a first subscriber resumed from that
/// cursor that has received them: the fleet's feed runs and the server has
/// a delivery watermark. Returns the operator's and the reader's tokens, the
/// cursor and that subscriber.
async fn first_subscriber_resumed(app: &TestApp, later: &[&str]) -> (String, String, String, Ws) {
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["a"]).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let origin = newest_cursor(app, &reader).await;
    for unit in later {
        app.register(&op, &[unit]).await;
    }
    let mut first = Ws::subscription(app, &reader, EVENTS, json!({ "after": origin })).await;
    for unit in later {
        assert_eq!(registered_unit(&mut first).await, *unit);
    }
    (op, reader, origin, first)
}

/// A reconnect storm does not have the database scan its locks for a new
/// delivery watermark once per subscriber: resumed
/// subscriptions read their first event and their catch-up pages below the
/// newest watermark the server already had, and still deliver every event
/// once. The test's database counts the watermarks its request sessions
/// take (the feeds' live pool, woken by commits, takes its own).
#[tokio::test]
async fn resumed_subscriptions_read_below_the_watermark_their_server_already_has() {
    let app = spawn_app().await;
    let (op, reader, origin, mut first) = first_subscriber_resumed(&app, &["b", "c", "d"]).await;
    app.count_watermarks(false).await;

    let mut resumed =
        join_all((0..8).map(|_| Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin })))).await;
    for ws in &mut resumed {
        for unit in ["b", "c", "d"] {
            assert_eq!(registered_unit(ws).await, unit);
        }
    }
    app.register(&op, &["e"]).await;
    for ws in resumed.iter_mut().chain([&mut first]) {
        assert_eq!(registered_unit(ws).await, "e", "live after the catch-up, nothing repeated");
    }
    let taken = app.watermarks_taken().await;
    assert_eq!(taken, 0, "8 resumed subscriptions had the database take {taken} watermarks for them");
}

/// The reads a subscription makes before it sends anything, beside its
/// tail's (the open questions, the current stalls), are tried again when
/// they fail for a moment, like the tail's: held up past the lock timeout
/// by a session outside the service, each is read again, and its first
/// message is what was open or stalled, not an error.
#[tokio::test]
async fn a_subscriptions_snapshot_that_fails_for_a_moment_is_read_again() {
    let app = impatient_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["q", "s"]).await;
    let question = raise_question(&Agent::new(&app, "f", "a1", Role::Agent).await, "open", Some("schemas")).await;
    let stalled = Agent::new(&app, "f", "a2", Role::Agent).await.claim_next(json!({})).await.str("id");
    app.expire_lease(&stalled).await;
    let triage = app.token("f", "triage", Role::Triage).await;
    let retries = async || sample(&scrape(&app).await, "work_ledger_live_read_retries_total").unwrap_or(0.0);
    let before = retries().await;

    let gate = app.owner.begin().await.expect("begin");
    gate.execute_unprepared("LOCK TABLE blocking_questions, work_units IN ACCESS EXCLUSIVE MODE").await.expect("lock");
    let mut questions = Ws::subscription(&app, &triage, QUESTIONS, json!({ "group": "schemas" })).await;
    let mut stalls = Ws::subscription(&app, &triage, STALLS, json!({})).await;
    let deadline = std::time::Instant::now() + GUARD;
    while retries().await < before + 4.0 {
        assert!(std::time::Instant::now() < deadline, "both snapshots tried again within the guard");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.rollback().await.expect("free the tables");

    assert_eq!(questions.next_data().await["blockingQuestionOpened"]["id"], question.as_str());
    assert_eq!(stalls.next_data().await["unitStalled"]["unit"]["id"], stalled.as_str());
}

/// A subscription whose reads keep failing for longer than its patience
/// ends with UNAVAILABLE, and the message says how to come back: subscribe
/// again, from the last cursor (a subscription has no idempotency key to
/// retry with, which the message of a request's UNAVAILABLE speaks of).
#[tokio::test]
async fn a_subscription_that_cannot_read_for_its_patience_ends_saying_how_to_come_back() {
    let mut config = impatient_config();
    config.live.read_patience = Duration::from_millis(700);
    let app = spawn_app_with(config).await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["a"]).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let origin = newest_cursor(&app, &reader).await;

    let gate = app.owner.begin().await.expect("begin");
    gate.execute_unprepared("LOCK TABLE work_unit_events IN ACCESS EXCLUSIVE MODE").await.expect("lock");
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin })).await;
    let message = ws.message().await;
    gate.rollback().await.expect("free the table");
    let error = match message["type"].as_str() {
        Some("next") => &message["payload"]["errors"][0],
        Some("error") => &message["payload"][0],
        _ => panic!("an error, not {message:#}"),
    };
    assert_eq!(error["extensions"]["code"], "UNAVAILABLE", "{message:#}");
    let text = error["message"].as_str().expect("message");
    assert!(text.contains("subscribe again") && text.contains("after:"), "{text}");
    assert!(!text.contains("idempotency key"), "{text}");
}

/// A subscriber catching up from a cursor needs no new delivery watermark:
/// while new ones are held at the log's start (a session of the service's
/// role holds the lowest writer marker, as an event writer does from its
/// first event on), a resumed subscription still delivers at once what was
/// final before, from the watermark its server had. Before, it read below
/// new watermarks only, found nothing, and read again without pause until
/// the marker went.
#[tokio::test]
async fn a_resumed_subscription_catches_up_while_new_watermarks_are_held_back() {
    let app = spawn_app().await;
    let (op, reader, origin, mut first) = first_subscriber_resumed(&app, &["b", "c"]).await;

    let holder = app.owner.begin().await.expect("begin");
    let lowest_marker = 0x776c_i64 << 48;
    holder.execute_unprepared(&format!("SELECT pg_advisory_xact_lock_shared({lowest_marker})")).await.expect("lock");
    let held = events::watermark(&app.owner).await.expect("watermark");
    assert_eq!(held, 1, "new watermarks are held at the log's start");
    let mut resumed = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin })).await;
    for unit in ["b", "c"] {
        let got = tokio::time::timeout(Duration::from_secs(5), registered_unit(&mut resumed)).await;
        assert_eq!(got.expect("caught up while the marker is held"), unit);
    }
    holder.rollback().await.expect("release");
    app.register(&op, &["d"]).await;
    assert_eq!(registered_unit(&mut first).await, "d");
    assert_eq!(registered_unit(&mut resumed).await, "d", "live after the catch-up, nothing repeated");
}
