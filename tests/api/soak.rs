//! The soak: 64 agents run whole lifecycles over a few thousand units while
//! some block and get answered, some release, some vanish and let their
//! leases expire. Afterwards the database's own record is checked globally.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use work_ledger::auth::Role;

use work_ledger::projector::ProjectorConfig;

use crate::helpers::{Agent, TestApp, spawn_app_with, test_config};

const AGENTS: usize = 64;

fn units() -> usize {
    std::env::var("WL_SOAK_UNITS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

/// What the clients did, by the event type each success must have written.
#[derive(Default)]
struct Tally {
    counts: std::sync::Mutex<HashMap<&'static str, i64>>,
    cents: AtomicI64,
    disposed: AtomicUsize,
}

impl Tally {
    fn add(&self, event: &'static str) {
        *self.counts.lock().expect("tally").entry(event).or_default() += 1;
    }
}

/// A deterministic spread of behaviours over units and attempts.
fn roll(external_ref: &str, attempt: i64) -> u64 {
    let mut h: u64 = 1469598103934665603;
    for b in external_ref.bytes().chain(attempt.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
    }
    h % 100
}

async fn run_agent(app: &TestApp, index: usize, triage: &Agent<'_>, tally: &Tally, total: usize) {
    let mut generation = 0;
    let mut agent = Agent::new(app, "soak", &format!("agent-{index:02}"), Role::Agent).await;
    while tally.disposed.load(Ordering::SeqCst) < total {
        let claim = agent.claim_next(json!({ "lease": 600 })).await;
        let unit = claim.unit().clone();
        if unit.is_null() {
            // Everything left is in someone's hands right now.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        tally.add("claimed");
        let id = unit["id"].as_str().expect("id").to_owned();
        let attempt = unit["currentAttemptId"].as_str().expect("attempt").to_owned();
        let r = roll(unit["externalRef"].as_str().expect("ref"), unit["attemptCount"].as_i64().expect("n"));

        if r < 4 {
            // The agent dies mid-work: its lease runs out and this identity never returns.
            app.expire_lease(&id).await;
            tally.add("stale_reclaimed");
            generation += 1;
            agent = Agent::new(app, "soak", &format!("agent-{index:02}-r{generation}"), Role::Agent).await;
            continue;
        }
        if r < 8 {
            agent.release(&id, json!({ "reason": "not my area" })).await.data();
            tally.add("released");
            continue;
        }
        agent.transition(&id, "IN_PROGRESS", json!({})).await.data();
        tally.add("transitioned");
        if r.is_multiple_of(7) {
            agent.heartbeat(&attempt, json!({ "lease": 600 })).await.data();
            tally.add("heartbeat");
        }
        let cents = 100 + (r as i64) * 3;
        agent.record_cost(&attempt, cents, &format!("bill-{attempt}")).await.data();
        tally.add("cost_recorded");
        tally.cents.fetch_add(cents, Ordering::SeqCst);

        if r < 20 {
            agent.block(&id, "which copybook layout applies?", json!({})).await.data();
            tally.add("blocked");
            if r < 14 {
                // Walks away while waiting; the answer makes the unit READY for anyone.
                agent.release(&id, json!({})).await.data();
                tally.add("released");
                triage.unblock(&id, "layout v2", json!({})).await.data();
                tally.add("unblocked");
                continue;
            }
            let back = triage.unblock(&id, "layout v2", json!({})).await;
            assert_eq!(back.str("state"), "IN_PROGRESS");
            tally.add("unblocked");
        }
        if r >= 96 {
            agent.dispose(&id, "DEAD", json!({ "evidence": format!("https://wiki/dead/{id}") })).await.data();
        } else {
            agent.transition(&id, "VERIFIED", json!({ "evidence": format!("https://ci/run/{attempt}") })).await.data();
            tally.add("transitioned");
            agent.dispose(&id, "MIGRATED", json!({})).await.data();
        }
        tally.add("disposed");
        tally.disposed.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_agents_soak_leaves_a_consistent_ledger() {
    // The projector runs as `serve` runs it (every 250 ms), not paused as in
    // the other tests: the agents that find nothing left poll claimNext every
    // 5 ms until the last unit is disposed, and each drained answer counts the
    // domain's finished units from the totals plus their unfolded tail.
    let mut config = test_config();
    config.live.projector = ProjectorConfig::default();
    let app = spawn_app_with(config).await;
    let total = units();
    let op = app.token("soak", "importer", Role::Operator).await;
    for chunk in (0..total).collect::<Vec<_>>().chunks(1000) {
        let refs: Vec<String> = chunk.iter().map(|i| format!("estate/module-{i:05}")).collect();
        app.register(&op, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    }
    let triage = Agent::new(&app, "soak", "triage", Role::Triage).await;
    let tally = Arc::new(Tally::default());

    let agents = (0..AGENTS).map(|i| run_agent(&app, i, &triage, &tally, total));
    tokio::time::timeout(Duration::from_secs(600), futures::future::join_all(agents))
        .await
        .expect("soak finished in time");

    check_event_log(&app).await;
    let app = &app;
    let zero = |sql: &'static str| async move { assert_eq!(app.sql_i64(sql).await, 0, "{sql}") };
    // Every unit ended with a disposition and evidence.
    zero("SELECT count(*) FROM work_units WHERE disposition IS NULL OR cardinality(evidence_urls) = 0").await;
    // Unit cost is the sum of its attempts; no attempt is left running.
    zero("SELECT count(*) FROM work_units u WHERE cost_cents <> (SELECT coalesce(sum(cost_cents), 0) FROM work_unit_attempts a WHERE a.unit_id = u.id)").await;
    zero("SELECT count(*) FROM work_unit_attempts WHERE outcome IS NULL").await;
    // Attempt numbers are dense: 1..attempt_count, each once.
    zero("SELECT count(*) FROM work_units u WHERE (SELECT count(*) FROM work_unit_attempts a WHERE a.unit_id = u.id) <> u.attempt_count
          OR (SELECT coalesce(max(attempt_no), 0) FROM work_unit_attempts a WHERE a.unit_id = u.id) <> u.attempt_count").await;
    // Every superseded attempt was reclaimed exactly once.
    assert_eq!(
        app.sql_i64("SELECT count(*) FROM work_unit_attempts WHERE outcome = 'superseded'").await,
        app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'stale_reclaimed'").await
    );
    // Money: what clients billed = the units' cost = the events' deltas.
    let billed = tally.cents.load(Ordering::SeqCst);
    assert_eq!(app.sql_i64("SELECT sum(cost_cents)::bigint FROM work_units").await, billed);
    assert_eq!(app.sql_i64("SELECT sum(cost_delta_cents)::bigint FROM work_unit_events").await, billed);

    // The event count per type matches the operations performed.
    let mut expected = tally.counts.lock().expect("tally").clone();
    expected.insert("registered", total as i64);
    let rows = app.sql_json("SELECT event_type::text AS t, count(*) AS n FROM work_unit_events GROUP BY 1").await;
    let recorded: HashMap<String, i64> =
        rows.iter().map(|r| (r["t"].as_str().expect("t").to_owned(), r["n"].as_i64().expect("n"))).collect();
    let expected: HashMap<String, i64> = expected.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    assert_eq!(recorded, expected);
    assert!(expected["stale_reclaimed"] > 0 && expected["blocked"] > 0 && expected["released"] > 0, "{expected:?}");
}

/// Replays each unit's event log in commit order and checks that a unit
/// never had two live claimants and that only the holder acted on it.
async fn check_event_log(app: &TestApp) {
    let events = app
        .sql_json(
            "SELECT unit_id, event_type::text AS t, agent_id, from_state::text AS from_state, to_state::text AS to_state
               FROM work_unit_events ORDER BY unit_id, seq",
        )
        .await;
    let mut holder: HashMap<String, Option<String>> = HashMap::new();
    let mut previous: HashMap<String, String> = HashMap::new();
    for e in &events {
        let unit = e["unit_id"].as_str().expect("unit").to_owned();
        let agent = e["agent_id"].as_str().map(str::to_owned);
        let kind = e["t"].as_str().expect("type");
        let current = holder.entry(unit.clone()).or_insert(None);
        match kind {
            "claimed" => {
                assert!(current.is_none(), "unit {unit} claimed by {agent:?} while held by {current:?}");
                *current = agent;
            }
            "stale_reclaimed" => {
                assert!(current.is_some(), "unit {unit} reclaimed while unheld");
                *current = None;
            }
            "released" => {
                assert_eq!(current, &agent, "unit {unit} released by a non-holder");
                *current = None;
            }
            "transitioned" | "blocked" | "heartbeat" => {
                assert_eq!(current, &agent, "unit {unit}: {kind} by a non-holder");
            }
            "disposed" => *current = None,
            _ => {}
        }
        if previous.get(&unit).map(String::as_str) == Some("stale_reclaimed") {
            assert_eq!(kind, "claimed", "a reclaim is one statement: stale_reclaimed then claimed");
        }
        previous.insert(unit, kind.to_owned());
    }
    assert!(holder.values().all(Option::is_none), "units left held");
}
