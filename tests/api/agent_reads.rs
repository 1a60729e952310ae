//! What an agent reads between claims (issue 25): `claimSituation` after a
//! `claimNext` that found nothing, `queueDepth` of a finished domain,
//! `waitForAnswer` while blocked, and where a refused second `dispose`
//! points instead.

use std::time::Duration;

use serde_json::{Value, json};
use work_ledger::auth::{self, Role};
use work_ledger::db;
use work_ledger::http::{HttpConfig, ServerConfig};

use crate::helpers::{Agent, Gql, TestApp, spawn_app, spawn_app_with, test_config};
use crate::ws_client::GUARD;

const SITUATION: &str = "query($d: String) { s: claimSituation(domain: $d) { ready stale blocked leased \
    earliestLeaseEnd drained } }";

const WAIT: &str = "query($u: UUID!, $t: Int) { r: waitForAnswer(unitId: $u, timeoutSeconds: $t) { id state \
    claimedBy openQuestion { id } questions { status answer } } }";

/// Registers `refs` in `domain`; their ids, in order.
async fn register_in(op: &Agent<'_>, domain: &str, refs: &[&str]) -> Vec<String> {
    let units: Vec<Value> = refs.iter().map(|r| json!({ "externalRef": r, "domain": domain })).collect();
    let registered =
        op.run("mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }", json!({ "u": units })).await;
    registered.data()["registerUnits"]
        .as_array()
        .expect("units")
        .iter()
        .map(|u| u["id"].as_str().expect("id").to_owned())
        .collect()
}

async fn situation(agent: &Agent<'_>, domain: Option<&str>) -> Value {
    agent.run(SITUATION, json!({ "d": domain })).await.data()["s"].clone()
}

/// A token with exactly `permissions`, as `token create` would mint it.
async fn token_with(app: &TestApp, fleet: &str, name: &str, permissions: &[&str]) -> String {
    let (secret, hash) = auth::new_token();
    db::tokens::insert(&app.owner, fleet, name, permissions, &hash).await.expect("mint token");
    secret
}

#[tokio::test]
async fn claim_situation_tells_drained_from_busy_with_counts_and_the_first_lease_end() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let (a1, a2, a3, a4) = (
        Agent::new(&app, "f", "a1", Role::Agent).await,
        Agent::new(&app, "f", "a2", Role::Agent).await,
        Agent::new(&app, "f", "a3", Role::Agent).await,
        Agent::new(&app, "f", "a4", Role::Agent).await,
    );
    let cobol = register_in(&op, "cobol", &["c1", "c2", "c3", "c4"]).await;
    let jcl = register_in(&op, "jcl", &["j1"]).await;

    // cobol: c1 leased to a1, c2 blocked (a2), c3 leased to a3 for less time, c4 READY.
    let c1 = a1.claim_next(json!({ "domain": "cobol", "lease": 600 })).await;
    let c2 = a2.claim_next(json!({ "domain": "cobol", "lease": 600 })).await;
    a2.transition(&c2.str("id"), "IN_PROGRESS", json!({})).await.data();
    a2.block(&c2.str("id"), "Which copybook?", json!({})).await.data();
    let c3 = a3.claim_next(json!({ "domain": "cobol", "lease": 120 })).await;
    assert_eq!([c1.str("id"), c2.str("id"), c3.str("id")], cobol[..3]);
    let first_end = c3.unit()["leaseExpiresAt"].clone();
    assert_eq!(
        situation(&a4, Some("cobol")).await,
        json!({ "ready": 1, "stale": 0, "blocked": 1, "leased": 2, "earliestLeaseEnd": first_end, "drained": false })
    );

    // a1's lease runs out: c1 is stale (claimable), no longer leased.
    app.expire_lease(&cobol[0]).await;
    assert_eq!(
        situation(&a4, Some("cobol")).await,
        json!({ "ready": 1, "stale": 1, "blocked": 1, "leased": 1, "earliestLeaseEnd": first_end, "drained": false })
    );

    // jcl: its one unit VERIFIED, awaiting its disposition: drained.
    assert_eq!(a4.claim_next(json!({ "domain": "jcl" })).await.str("id"), jcl[0]);
    a4.transition(&jcl[0], "IN_PROGRESS", json!({})).await.data();
    a4.transition(&jcl[0], "VERIFIED", json!({ "evidence": "https://ci.example/j1" })).await.data();
    let drained =
        json!({ "ready": 0, "stale": 0, "blocked": 0, "leased": 0, "earliestLeaseEnd": null, "drained": true });
    assert_eq!(situation(&a4, Some("jcl")).await, drained);
    a4.dispose(&jcl[0], "MIGRATED", json!({})).await.data();
    assert_eq!(situation(&a4, Some("jcl")).await, drained);

    // The whole fleet is cobol's work; an unknown domain and another fleet have none.
    assert_eq!(
        situation(&a4, None).await,
        json!({ "ready": 1, "stale": 1, "blocked": 1, "leased": 1, "earliestLeaseEnd": first_end, "drained": false })
    );
    assert_eq!(situation(&a4, Some("fortran")).await, drained);
    let outsider = Agent::new(&app, "g", "a1", Role::Agent).await;
    assert_eq!(situation(&outsider, None).await, drained);
    assert_eq!(situation(&outsider, Some("cobol")).await, drained);

    // A blocked unit its holder released still counts as blocked (it goes
    // back to READY once answered); a released claim counts as READY.
    a2.release(&cobol[1], json!({})).await.data();
    a3.release(&cobol[2], json!({})).await.data();
    assert_eq!(
        situation(&a4, Some("cobol")).await,
        json!({ "ready": 2, "stale": 1, "blocked": 1, "leased": 0, "earliestLeaseEnd": null, "drained": false })
    );
}

#[tokio::test]
async fn claim_situation_needs_ledger_read_and_a_valid_domain() {
    let app = spawn_app().await;
    let agent = Agent::new(&app, "f", "a1", Role::Agent).await;
    let blind = token_with(&app, "f", "blind", &["units:claim"]).await;
    let refused = app.gql(&blind, SITUATION, json!({})).await;
    refused.assert_code("FORBIDDEN");
    assert_eq!(refused.body["errors"][0]["extensions"]["permission"], "ledger:read", "{:#}", refused.body);
    for bad in ["", "a\u{202e}b", &"d".repeat(257)] {
        let r = agent.run(SITUATION, json!({ "d": bad })).await;
        r.assert_code("INVALID_INPUT");
        assert_eq!(r.body["errors"][0]["extensions"]["argument"], "domain", "{:#}", r.body);
    }
}

/// A late agent tells a finished domain from one never seeded (issue 56):
/// `queueDepth` lists every domain with units, finished ones too, with their
/// `done` and `disposed` counts, with or without a domain named; a drained
/// claim carries the same counts (a busy one none); an unknown domain has
/// no row and zeros.
#[tokio::test]
async fn a_finished_domain_is_listed_with_its_done_and_disposed_counts() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let done = register_in(&op, "done-dom", &["d1", "d2", "d3"]).await;
    register_in(&op, "open-dom", &["o1"]).await;
    for unit in &done[1..] {
        op.dispose(unit, "DROPPED", json!({ "evidence": "https://wiki.example/dropped" })).await.data();
    }
    let agent = Agent::new(&app, "f", "late", Role::Agent).await;
    agent.claim_unit(&done[0], json!({})).await.data();
    agent.transition(&done[0], "IN_PROGRESS", json!({})).await.data();
    agent.transition(&done[0], "VERIFIED", json!({ "evidence": "https://ci.example/d1" })).await.data();
    agent.dispose(&done[0], "MIGRATED", json!({})).await.data();

    const DEPTH: &str = "query($d: String) { queueDepth(domain: $d) { domain ready claimed inProgress blocked verified \
        stalled done disposed } }";
    let finished = json!({ "domain": "done-dom", "ready": 0, "claimed": 0, "inProgress": 0, "blocked": 0,
                           "verified": 0, "stalled": 0, "done": 1, "disposed": 3 });
    let open = json!({ "domain": "open-dom", "ready": 1, "claimed": 0, "inProgress": 0, "blocked": 0,
                       "verified": 0, "stalled": 0, "done": 0, "disposed": 0 });
    assert_eq!(op.run(DEPTH, json!({ "d": "done-dom" })).await.data()["queueDepth"], json!([finished]));
    assert_eq!(op.run(DEPTH, json!({})).await.data()["queueDepth"], json!([finished, open]));
    assert_eq!(op.run(DEPTH, json!({ "d": "no-such-dom" })).await.data()["queueDepth"], json!([]));
    // The same through MCP, and for Grafana.
    let depth = crate::mcp::tool(&app, &agent.token, "queue_depth", json!({})).await;
    // MCP selects every column (a new state's too): compared on the ones above.
    let rows = depth["structuredContent"]["queueDepth"].as_array().cloned().unwrap_or_default();
    let fields: Vec<String> = finished.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    let seen: Vec<Value> =
        rows.iter().map(|row| Value::Object(fields.iter().map(|f| (f.clone(), row[f].clone())).collect())).collect();
    assert_eq!(json!(seen), json!([finished, open]), "{depth:#}");
    let view = app.app_role_query(Some("f"), "SELECT domain, done, disposed FROM v_queue_depth ORDER BY domain").await;
    assert_eq!(view[0], json!({ "domain": "done-dom", "done": 1, "disposed": 3 }));

    // A drained claim says the same of its domain; a domain never seeded reads zeros.
    let drained = crate::mcp::tool(&app, &agent.token, "claim_next", json!({ "domain": "done-dom" })).await;
    let said = &drained["structuredContent"];
    assert_eq!(
        (&said["outcome"], &said["done"], &said["disposed"]),
        (&json!("drained"), &json!(1), &json!(3)),
        "{said}"
    );
    let never = crate::mcp::tool(&app, &agent.token, "claim_next", json!({ "domain": "no-such-dom" })).await;
    let said = &never["structuredContent"];
    assert_eq!(
        (&said["outcome"], &said["done"], &said["disposed"]),
        (&json!("drained"), &json!(0), &json!(0)),
        "{said}"
    );
    let situation = agent.run("{ s: claimSituation(domain: \"done-dom\") { drained done disposed } }", json!({})).await;
    assert_eq!(situation.data()["s"], json!({ "drained": true, "done": 1, "disposed": 3 }));
    // A domain with work left is not drained, and its finished units are
    // not counted on the claimer's path.
    let busy = agent.run("{ s: claimSituation(domain: \"open-dom\") { drained done disposed } }", json!({})).await;
    assert_eq!(busy.data()["s"], json!({ "drained": false, "done": null, "disposed": null }));

    // Another fleet does not learn that the domain exists.
    let outsider = Agent::new(&app, "g", "reader", Role::Reader).await;
    assert_eq!(outsider.run(DEPTH, json!({ "d": "done-dom" })).await.data()["queueDepth"], json!([]));
    assert_eq!(outsider.run(DEPTH, json!({})).await.data()["queueDepth"], json!([]));
}

/// An operator, an agent and a triage service of fleet `f`.
async fn cast(app: &TestApp) -> (Agent<'_>, Agent<'_>, Agent<'_>) {
    (
        Agent::new(app, "f", "op", Role::Operator).await,
        Agent::new(app, "f", "a1", Role::Agent).await,
        Agent::new(app, "f", "triage", Role::Triage).await,
    )
}

/// A unit `agent` claimed, started and blocked on a question.
async fn blocked_unit(op: &Agent<'_>, agent: &Agent<'_>, name: &str) -> String {
    let unit = register_in(op, "cobol", &[name]).await.remove(0);
    agent.claim_unit(&unit, json!({})).await.data();
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.block(&unit, "Which copybook does PAY001 use?", json!({})).await.data();
    unit
}

/// Reads of one unit by id (the wait's own reads) the server sent since `mark`.
fn unit_reads_since(app: &TestApp, mark: usize) -> usize {
    app.request_statements_since(mark)
        .iter()
        .filter(|sql| sql.contains(r#"FROM "work_units" WHERE "work_units"."id" = $1"#))
        .count()
}

/// Returns once `n` reads of a unit by id happened since `mark`: the waits
/// started then have joined their feed (they join before their first read).
async fn wait_for_unit_reads(app: &TestApp, mark: usize, n: usize) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while unit_reads_since(app, mark) < n {
        assert!(tokio::time::Instant::now() < deadline, "{n} waits reading within {GUARD:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `waiter`'s `waitForAnswer` with `vars`, answered by `triage` once the
/// wait has begun: what the wait returned.
async fn answered_while_waiting(app: &TestApp, waiter: &Agent<'_>, triage: &Agent<'_>, unit: &str, vars: Value) -> Gql {
    let mark = app.statement_mark();
    let answer = async {
        wait_for_unit_reads(app, mark, 1).await;
        triage.unblock(unit, "PAYCPY01", json!({})).await.data();
    };
    let (waited, ()) = tokio::join!(waiter.run(WAIT, vars), answer);
    waited
}

#[tokio::test]
async fn wait_for_answer_returns_when_triage_answers_with_the_answer_on_the_unit() {
    let app = spawn_app().await;
    let (op, agent, triage) = cast(&app).await;
    let unit = blocked_unit(&op, &agent, "w1").await;

    let waited = answered_while_waiting(&app, &agent, &triage, &unit, json!({ "u": unit, "t": 60 })).await;
    let r = &waited.data()["r"];
    assert_eq!(r["state"], "IN_PROGRESS", "{:#}", waited.body);
    assert_eq!(r["claimedBy"], "a1");
    assert_eq!(r["openQuestion"], json!(null));
    assert_eq!(r["questions"], json!([{ "status": "ANSWERED", "answer": "PAYCPY01" }]));
    assert_eq!(
        app.sql_i64(&format!("SELECT count(*) FROM work_units WHERE id = '{unit}' AND state = 'in_progress'")).await,
        1
    );
}

#[tokio::test]
async fn wait_for_answer_times_out_blocked_and_returns_released_units_as_ready_once_answered() {
    let app = spawn_app().await;
    let (op, agent, triage) = cast(&app).await;
    let unit = blocked_unit(&op, &agent, "w2").await;

    // Nobody answers: after the timeout the unit comes back as it is.
    let before = app.snapshot(&unit).await;
    let timed_out = agent.run(WAIT, json!({ "u": unit, "t": 1 })).await;
    assert_eq!(timed_out.data()["r"]["state"], "BLOCKED");
    assert_eq!(timed_out.data()["r"]["questions"], json!([{ "status": "OPEN", "answer": null }]));
    app.assert_unchanged(&unit, &before, "a wait that timed out").await;

    // The holder released it meanwhile: answered, it is READY for anyone.
    agent.release(&unit, json!({})).await.data();
    let waited = answered_while_waiting(&app, &agent, &triage, &unit, json!({ "u": unit })).await;
    assert_eq!(waited.data()["r"]["state"], "READY", "{:#}", waited.body);
    assert_eq!(waited.data()["r"]["claimedBy"], json!(null));

    // A unit that is not blocked comes back at once.
    assert_eq!(agent.run(WAIT, json!({ "u": unit, "t": 60 })).await.data()["r"]["state"], "READY");
}

#[tokio::test]
async fn waiting_requests_hold_no_database_connection() {
    // More waits than the server's request pool has connections (20, see
    // helpers::start_server): if a wait held one, the answer itself would
    // find none (UNAVAILABLE after the pool's 10 s) and some waits would
    // never start.
    let app = spawn_app().await;
    let (op, agent, triage) = cast(&app).await;
    let unit = blocked_unit(&op, &agent, "w3").await;
    const WAITS: usize = 25;
    let mark = app.statement_mark();
    let waits = futures::future::join_all((0..WAITS).map(|_| agent.run(WAIT, json!({ "u": unit, "t": 60 }))));
    let answer = async {
        wait_for_unit_reads(&app, mark, WAITS).await;
        triage.unblock(&unit, "PAYCPY01", json!({})).await
    };
    let (waited, answered) = tokio::join!(waits, answer);
    assert_eq!(answered.str("state"), "IN_PROGRESS");
    for w in &waited {
        assert_eq!(w.data()["r"]["state"], "IN_PROGRESS", "{:#}", w.body);
    }
}

#[tokio::test]
async fn a_wait_outlasts_the_http_read_timeouts() {
    // Header and body read timeouts of 1 s: a 3 s wait still gets its answer
    // (they bound reading the request, not running it).
    let http = HttpConfig {
        header_read_timeout: Duration::from_secs(1),
        body_read_timeout: Duration::from_secs(1),
        ..HttpConfig::default()
    };
    let app = spawn_app_with(ServerConfig { http, ..test_config() }).await;
    let (op, agent, _) = cast(&app).await;
    let unit = blocked_unit(&op, &agent, "w4").await;
    let waited = agent.run(WAIT, json!({ "u": unit, "t": 3 })).await;
    assert_eq!(waited.data()["r"]["state"], "BLOCKED", "{:#}", waited.body);
}

#[tokio::test]
async fn wait_for_answer_refuses_bad_timeouts_other_fleets_and_tokens_without_ledger_read() {
    let app = spawn_app().await;
    let (op, agent, _) = cast(&app).await;
    let unit = blocked_unit(&op, &agent, "w5").await;
    let before = app.snapshot(&unit).await;
    for bad in [0, -5, 61, i32::MAX] {
        let r = agent.run(WAIT, json!({ "u": unit, "t": bad })).await;
        r.assert_code("INVALID_INPUT");
        assert_eq!(r.body["errors"][0]["extensions"]["argument"], "timeoutSeconds", "{:#}", r.body);
        assert!(r.message().contains("1 to 60"), "{}", r.message());
    }
    let outsider = Agent::new(&app, "g", "a1", Role::Agent).await;
    outsider.run(WAIT, json!({ "u": unit, "t": 1 })).await.assert_code("NOT_FOUND");
    agent.run(WAIT, json!({ "u": uuid::Uuid::new_v4(), "t": 1 })).await.assert_code("NOT_FOUND");
    let blind = token_with(&app, "f", "blind", &["units:claim"]).await;
    let refused = app.gql(&blind, WAIT, json!({ "u": unit, "t": 1 })).await;
    refused.assert_code("FORBIDDEN");
    assert_eq!(refused.body["errors"][0]["extensions"]["permission"], "ledger:read");
    app.assert_unchanged(&unit, &before, "refused waits").await;
}

/// Disposes `unit` a second time as `who`: the refusal.
async fn dispose_again(who: &Agent<'_>, unit: &str) -> Gql {
    let again = who.dispose(unit, "DEAD", json!({ "evidence": "https://wiki.example/dead" })).await;
    again.assert_code("DISPOSITION_IMMUTABLE");
    again
}

#[tokio::test]
async fn disposition_immutable_names_register_units_and_whether_the_token_may() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "a1", Role::Agent).await;
    let unit = register_in(&op, "cobol", &["d1"]).await.remove(0);
    agent.claim_unit(&unit, json!({})).await.data();
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci.example/d1" })).await.data();
    agent.dispose(&unit, "MIGRATED", json!({})).await.data();
    let before = app.snapshot(&unit).await;

    let refused = dispose_again(&agent, &unit).await;
    let message = refused.message();
    for needed in ["permanent", "`registerUnits`", "`units:register`", "your token lacks it: ask an operator"] {
        assert!(message.contains(needed), "{needed:?} not in {message}");
    }
    assert_eq!(
        refused.body["errors"][0]["extensions"]["nextStep"],
        json!({ "operation": "registerUnits", "permission": "units:register", "permitted": false })
    );

    let refused = dispose_again(&op, &unit).await;
    assert!(refused.message().contains("your token has it"), "{}", refused.message());
    assert!(!refused.message().contains("lacks"), "{}", refused.message());
    assert_eq!(
        refused.body["errors"][0]["extensions"]["nextStep"],
        json!({ "operation": "registerUnits", "permission": "units:register", "permitted": true })
    );
    app.assert_unchanged(&unit, &before, "a second dispose").await;
}
