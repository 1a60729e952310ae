//! Issue 55: the read models are projections of the event log folded after
//! commit (projections.sql, src/projector/). Reads stay exact whatever the
//! projector is doing; the fold never skips an event a late transaction
//! commits, never folds one twice across replicas, and a rebuild restores
//! the same rows.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;
use work_ledger::projector::ProjectorConfig;

use crate::helpers::{Agent, TestApp, hash_sql, spawn_app, test_config};
use crate::operator::{text, work_ledger};

const PROJECTIONS: [&str; 7] =
    ["agent_latest", "agent_totals", "claims", "cost_days", "disposals", "events", "unit_totals"];

/// Every projection's drift (its tables plus its tail against the fold of
/// the whole log), and the unit totals as read against the units counted,
/// all in one REPEATABLE READ snapshot: empty when every read is exact.
async fn inexact(app: &TestApp) -> Vec<String> {
    let tx = app.owner.begin().await.expect("begin");
    tx.execute_unprepared("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").await.expect("snapshot");
    let mut found = Vec::new();
    for name in PROJECTIONS {
        let rows = tx
            .query_all_raw(Statement::from_string(
                DbBackend::Postgres,
                format!("SELECT fleet, expected, found FROM ledger_projection_drift('{name}', NULL)"),
            ))
            .await
            .expect("drift");
        for row in rows {
            let (fleet, expected, found_): (String, String, String) = (
                row.try_get("", "fleet").expect("fleet"),
                row.try_get("", "expected").expect("expected"),
                row.try_get("", "found").expect("found"),
            );
            found.push(format!("{name} of {fleet}: expected {expected}, found {found_}"));
        }
    }
    let counted = tx
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT r.fleet FROM (SELECT fleet, domain, state, disposition, reworked, units, cost_cents FROM v_unit_totals) r
             FULL JOIN (SELECT fleet, domain, state, disposition, attempt_count > 1 AS reworked, count(*) AS units,
                               sum(cost_cents)::bigint AS cost_cents FROM work_units GROUP BY 1, 2, 3, 4, 5) u
               ON (u.fleet, u.domain, u.state, u.reworked) = (r.fleet, r.domain, r.state, r.reworked)
              AND u.disposition IS NOT DISTINCT FROM r.disposition
             WHERE (r.units, r.cost_cents) IS DISTINCT FROM (u.units, u.cost_cents)",
        ))
        .await
        .expect("unit totals against the units");
    if !counted.is_empty() {
        found.push(format!("v_unit_totals differs from the units in {} group(s)", counted.len()));
    }
    tx.commit().await.expect("commit");
    found
}

/// One agent's random walk through every write, `steps` of them.
async fn walk(agent: &Agent<'_>, triage: &Agent<'_>, operator: &Agent<'_>, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        let held = agent.claim_next(json!({})).await;
        // The agent's expired unit was reclaimed by another session while
        // this claim waited for its row: its attempt is gone (LEASE_LOST,
        // as claimNext documents), and the next claim finds new work.
        if held.body["errors"][0]["extensions"]["code"] == "LEASE_LOST" {
            continue;
        }
        let Some(unit) = held.unit()["id"].as_str().map(str::to_owned) else { return };
        let attempt = held.str("currentAttemptId");
        let key = format!("{seed}-{step}");
        match held.unit()["state"].as_str().unwrap_or_default() {
            "CLAIMED" => match rng.random_range(0..4) {
                0 => {
                    agent.release(&unit, json!({ "reason": "not mine" })).await;
                }
                1 => {
                    agent.release(&unit, json!({ "outcome": "FAILED", "reason": "broke" })).await;
                }
                _ => {
                    agent.transition(&unit, "IN_PROGRESS", json!({})).await;
                }
            },
            "IN_PROGRESS" => match rng.random_range(0..6) {
                0 => {
                    agent.record_cost(&attempt, rng.random_range(0..500), &key).await;
                }
                1 => {
                    agent.block(&unit, ["which schema?", "v1 or v2?"].choose(&mut rng).expect("q"), json!({})).await;
                }
                2 => {
                    agent.dispose(&unit, "DROPPED", json!({ "evidence": "https://wiki.example/drop" })).await;
                }
                3 => {
                    // Time passes: the lease runs out and the sweeper reports it;
                    // another session may reclaim it at once, after which a cost
                    // on this attempt is LEASE_LOST: none is recorded on it.
                    agent.app.expire_lease(&unit).await;
                    agent.app.live.sweep_now().await.expect("a sweep");
                    continue;
                }
                _ => {
                    agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci.example/ok" })).await;
                    if rng.random_bool(0.7) {
                        agent.dispose(&unit, "MIGRATED", json!({})).await;
                    }
                }
            },
            "BLOCKED" => {
                if rng.random_bool(0.5) {
                    triage.unblock(&unit, "v2", json!({})).await;
                } else {
                    agent.release(&unit, json!({})).await;
                    triage.unblock(&unit, "v1", json!({})).await;
                }
            }
            _ => {}
        }
        if rng.random_bool(0.1) {
            operator.record_cost(&attempt, rng.random_range(0..100), &format!("op-{key}")).await;
        }
    }
}

/// Random sequences of every write (claims, starts, verifications, blocks,
/// answers, costs, releases, failures, dispositions, stalls, reclaims) from
/// six concurrent agents while the projector runs, pauses and restarts at
/// random points: at every pause and at the end, every total, bucket, set
/// and roster row read (tables plus tail) equals the fold of the whole log
/// in the same snapshot, and the unit totals the units. Seeded
/// (`WL_PROJECTION_SEED`); the seed is printed.
#[tokio::test]
async fn reads_equal_the_log_whatever_the_projector_does_meanwhile() {
    let app = spawn_app().await;
    let seed =
        std::env::var("WL_PROJECTION_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    println!("WL_PROJECTION_SEED={seed}");
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let triage = Agent::new(&app, "f", "triage", Role::Triage).await;
    let refs: Vec<String> = (0..40).map(|i| format!("p{i:02}")).collect();
    app.register(&op.token, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let other = Agent::new(&app, "g", "op", Role::Operator).await;
    app.register(&other.token, &["elsewhere"]).await;
    let mut agents = Vec::new();
    for i in 0..6 {
        agents.push(Agent::new(&app, "f", &format!("agent-{i}"), Role::Agent).await);
    }

    let stop = tokio_util::sync::CancellationToken::new();
    let projecting = {
        let (live, stop) = (app.live.clone(), stop.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        tokio::spawn(async move {
            let mut passes = 0;
            while !stop.is_cancelled() {
                // Running, compacting now and then, or paused for a while.
                if rng.random_bool(0.3) {
                    tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
                } else if rng.random_bool(0.5) {
                    live.project_now().await.expect("a projector pass");
                    passes += 1;
                } else {
                    live.fold_now().await.expect("a fold");
                    passes += 1;
                }
            }
            passes
        })
    };
    let walks = agents.iter().enumerate().map(|(i, a)| walk(a, &triage, &op, seed.wrapping_add(i as u64), 12));
    let checking = async {
        let mut checks = 0;
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let found = inexact(&app).await;
            assert!(found.is_empty(), "seed {seed}, while writing: {found:#?}");
            checks += 1;
        }
        checks
    };
    let (_, checks) = tokio::join!(futures::future::join_all(walks), checking);
    stop.cancel();
    let passes = projecting.await.expect("the projector task");
    assert!(checks == 4 && passes > 0, "seed {seed}: {checks} checks, {passes} passes");

    let kinds = app.sql_json("SELECT DISTINCT event_type::text AS t FROM work_unit_events ORDER BY 1").await;
    let kinds: Vec<&str> = kinds.iter().filter_map(|k| k["t"].as_str()).collect();
    for kind in ["claimed", "transitioned", "cost_recorded", "released", "disposed"] {
        assert!(kinds.contains(&kind), "seed {seed}: no {kind} in {kinds:?}");
    }
    let found = inexact(&app).await;
    assert!(found.is_empty(), "seed {seed}, written, before the last fold: {found:#?}");
    app.project().await;
    let found = inexact(&app).await;
    assert!(found.is_empty(), "seed {seed}, folded: {found:#?}");
    let behind = app.sql_i64("SELECT sum(behind)::bigint FROM ledger_projections_status()").await;
    assert_eq!(behind, 0, "seed {seed}: every event folded");
}

/// The watermark: a writer's transaction holds its events open while later
/// ones commit and the projector runs. The projector folds the later ones
/// and stops short of the open one's batch (a sequence number would have
/// passed it: Marten's lost events); reads are exact throughout; once it
/// commits, the next fold takes its events, none skipped.
#[tokio::test]
async fn a_transaction_that_commits_late_is_folded_never_skipped() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["early"]).await;
    app.project().await;

    // The late writer: a registration through its write function, left open.
    let late = app.owner.begin().await.expect("begin");
    late.execute_unprepared(&format!(
        "SELECT * FROM ledger_register({}, NULL, ARRAY['late'], NULL, NULL)",
        hash_sql(&op)
    ))
    .await
    .expect("register in the open transaction");
    let late_batch = late
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT batch FROM work_unit_events WHERE detail->>'external_ref' = 'late'",
        ))
        .await
        .expect("its batch")
        .expect("a row")
        .try_get::<i64>("", "batch")
        .expect("batch");

    // Later writes commit, and the projector runs.
    app.register(&op, &["after-1", "after-2"]).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    agent.claim_next(json!({})).await.data();
    app.project().await;
    let marks = app.sql_json("SELECT name, mark FROM projection_marks ORDER BY name").await;
    for mark in &marks {
        assert!(
            mark["mark"].as_i64().expect("mark") <= late_batch,
            "a mark passed the open batch {late_batch}: {marks:?}"
        );
    }
    let reader = Agent::new(&app, "f", "reader", Role::Reader).await;
    let ready = |data: &Value| data["queueDepth"][0]["ready"].as_i64();
    let read = reader.run("{ queueDepth { ready claimed } }", json!({})).await;
    assert_eq!(ready(read.data()), Some(2), "the committed units, exactly: {:#}", read.body);
    assert!(inexact(&app).await.is_empty());

    late.commit().await.expect("commit the late writer");
    let read = reader.run("{ queueDepth { ready claimed } }", json!({})).await;
    assert_eq!(ready(read.data()), Some(3), "exact the moment it commits, folded or not");
    app.project().await;
    assert!(inexact(&app).await.is_empty(), "its events folded, none skipped");
    let folded = app.sql_i64("SELECT sum(units)::bigint FROM unit_totals WHERE state = 'ready'").await;
    assert_eq!(folded, 3, "the late unit is in the folded rows");
    let behind = app.sql_i64("SELECT sum(behind)::bigint FROM ledger_projections_status()").await;
    assert_eq!(behind, 0);
}

/// Three replicas projecting at once, each every few milliseconds, while
/// writes go on: every event folded once (each projection's count of events
/// folded is the log's), and the reads exact.
#[tokio::test]
async fn three_replicas_fold_every_event_once() {
    let mut config = test_config();
    config.live.projector =
        ProjectorConfig { interval: Duration::from_millis(5), step_events: 7, ..ProjectorConfig::default() };
    let app = crate::helpers::spawn_app_with(config.clone()).await;
    let replicas = [app.spawn_replica_with(config.clone()).await, app.spawn_replica_with(config).await];
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..30).map(|i| format!("r{i:02}")).collect();
    app.register(&op.token, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let mut agents = Vec::new();
    for i in 0..6 {
        agents.push(Agent::new(&app, "f", &format!("agent-{i}"), Role::Agent).await);
    }
    let work = agents.iter().map(|agent| async move {
        while let Some(unit) = agent.claim_next(json!({})).await.unit()["id"].as_str().map(str::to_owned) {
            agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
            agent.dispose(&unit, "DROPPED", json!({ "evidence": "https://wiki.example/d" })).await.data();
        }
    });
    futures::future::join_all(work).await;
    // Until the three have folded everything (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while app.sql_i64("SELECT sum(behind)::bigint FROM ledger_projections_status()").await > 0 {
        assert!(std::time::Instant::now() < deadline, "the projectors did not catch up in 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = app.sql_i64("SELECT count(*) FROM work_unit_events").await;
    let folded = app.sql_json("SELECT name, folded_events FROM projection_marks ORDER BY name").await;
    for projection in &folded {
        assert_eq!(projection["folded_events"].as_i64(), Some(events), "folded once each: {folded:?}");
    }
    assert!(inexact(&app).await.is_empty());
    let mut passes = Vec::new();
    for live in [&app.live, &replicas[0].live, &replicas[1].live] {
        passes.push(*live.projector_passes().borrow());
    }
    assert!(passes.iter().all(|p| *p > 0), "every replica's projector ran: {passes:?}");
}

/// Every projection's rows, compacted, in a fixed order: what a rebuild must restore.
async fn projected_rows(app: &TestApp) -> Value {
    app.sql("SELECT ledger_compact()").await;
    let tables = app.sql_json("SELECT unnest(tables) AS t FROM ledger_projections() ORDER BY 1").await;
    let mut rows = serde_json::Map::new();
    for table in tables.iter().filter_map(|t| t["t"].as_str()) {
        let all = app
            .sql_json(&format!(
                "SELECT coalesce(jsonb_agg(to_jsonb(t) - 'folded' ORDER BY to_jsonb(t) - 'folded'), '[]') AS rows FROM {table} t"
            ))
            .await;
        rows.insert(table.to_owned(), all[0]["rows"].clone());
    }
    Value::Object(rows)
}

/// A ledger of 100,000 events (20,000 units, each registered, claimed,
/// started, billed and disposed, written in bulk as a history): `work-ledger
/// projections rebuild` restores the same rows, and reads stay exact; a
/// changed definition (its checksum no longer the one recorded) is rebuilt
/// by `migrate`, and `projections status` says where each stands.
#[tokio::test]
async fn a_rebuild_restores_the_same_rows_and_migrate_rebuilds_a_changed_definition() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    app.sql(
        "WITH u AS (INSERT INTO work_units (fleet, external_ref, domain, created_at)
                    SELECT 'f', 'h' || g, 'd' || g % 5, now() - (g % 90) * interval '1 day' FROM generate_series(1, 20000) g
                    RETURNING id, fleet, external_ref, created_at),
              a AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id, started_at)
                    SELECT fleet, id, 1, 'agent-' || (hashtext(external_ref) & 31), created_at + interval '1 hour' FROM u
                    RETURNING id, fleet, unit_id, agent_id, started_at)
         INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail,
                                       cost_delta_cents, created_at)
         SELECT u.fleet, u.id, NULL::uuid, 'registered'::event_type, NULL::work_state, 'ready'::work_state, 'op',
                '{}'::jsonb, 0, u.created_at FROM u
         UNION ALL SELECT a.fleet, a.unit_id, a.id, 'claimed', 'ready', 'claimed', a.agent_id, '{}', 0, a.started_at FROM a
         UNION ALL SELECT a.fleet, a.unit_id, a.id, 'transitioned', 'claimed', 'in_progress', a.agent_id, '{}', 0,
                          a.started_at + interval '1 minute' FROM a
         UNION ALL SELECT a.fleet, a.unit_id, a.id, 'cost_recorded', NULL, NULL, a.agent_id, '{}', 42,
                          a.started_at + interval '2 minutes' FROM a
         UNION ALL SELECT a.fleet, a.unit_id, a.id, 'disposed', 'in_progress', 'abandoned', a.agent_id,
                          '{\"disposition\": \"DROPPED\"}', 0, a.started_at + interval '3 hours' FROM a;
         UPDATE work_unit_attempts SET outcome = 'abandoned', ended_at = started_at + interval '3 hours', cost_cents = 42
          WHERE fleet = 'f';
         UPDATE work_units u SET state = 'abandoned', disposition = 'DROPPED', attempt_count = 1, cost_cents = 42,
                current_attempt_id = a.id, first_claimed_at = a.started_at,
                disposed_at = a.started_at + interval '3 hours', evidence_urls = ARRAY['https://wiki.example/h']
           FROM work_unit_attempts a WHERE a.unit_id = u.id AND u.fleet = 'f'",
    )
    .await;
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, 100_000);
    assert!(inexact(&app).await.is_empty(), "exact before any fold");
    app.project().await;
    let folded = projected_rows(&app).await;
    assert!(folded["cost_days"].as_array().is_some_and(|r| !r.is_empty()), "cost days were folded");

    let rebuilt = work_ledger(&app, &["projections", "rebuild"], None);
    assert!(rebuilt.status.success(), "{}", text(&rebuilt.stderr));
    assert!(text(&rebuilt.stderr).contains("rebuilt unit_totals: 100000 events folded"), "{}", text(&rebuilt.stderr));
    assert_eq!(projected_rows(&app).await, folded, "the rebuild restored the same rows");
    assert!(inexact(&app).await.is_empty());

    // A definition that changed: its recorded checksum is not the current one.
    app.sql("UPDATE projection_marks SET version = 'an older definition' WHERE name = 'cost_days'").await;
    app.sql("DELETE FROM cost_days").await;
    let current = app.sql_json("SELECT current FROM ledger_projections_status() WHERE name = 'cost_days'").await;
    assert_eq!(current, vec![json!({ "current": false })]);
    let migrated = work_ledger(&app, &["migrate"], None);
    assert!(migrated.status.success(), "{}", text(&migrated.stderr));
    assert_eq!(projected_rows(&app).await, folded, "migrate rebuilt the changed projection");
    let status = text(&work_ledger(&app, &["projections", "status"], None).stdout);
    assert!(status.lines().skip(1).all(|l| l.ends_with("\tcurrent")), "{status}");
}

/// A read's plan is made without its arguments' values, so its estimate can
/// pass jit_above_cost when it touches a handful of rows (an empty tail at
/// 3,000,000 events compiled for 27 ms of its 29): every session of the
/// ledger's database, the service's and a reader login's, runs without JIT.
#[tokio::test]
async fn no_session_of_the_ledger_compiles_its_reads() {
    let app = spawn_app().await;
    let reader = work_ledger::db::connect(app.reader_login("f").await.as_str(), 1).await.expect("reader connects");
    let owner = work_ledger::db::connect(&app.db_url, 1).await.expect("owner connects");
    for (who, db) in [("a reader login", &reader), ("the migrating login", &owner)] {
        let row = db
            .query_one_raw(Statement::from_string(DbBackend::Postgres, "SELECT current_setting('jit') AS jit"))
            .await
            .expect("setting")
            .expect("row");
        assert_eq!(row.try_get::<String>("", "jit").expect("text"), "off", "{who}");
    }
}
