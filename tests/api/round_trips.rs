//! Round trips per request are part of the design (issues 13, 22 and 55),
//! kept by counting what the server sends, not by timing it: every write is
//! one autocommit call of its SQL function, with or without an idempotency
//! key, an attemptId fence or a domain, authentication included (the
//! function authenticates the token's hash it is given), and a refusal
//! comes back from that same call. A read request's transaction opens with
//! the statement that authenticates the token and sets the fleet
//! (`ledger_session`), so it adds no statement for authentication either.
//! The token's facts that never change are looked up once per process
//! (`authenticate_token`), on its first request.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Gql, TestApp, spawn_app};

const CLAIM: &str = "mutation { claimNext { id state } }";

/// The statements the server sent while `run` ran.
async fn sent<F: std::future::Future<Output = ()>>(app: &TestApp, run: F) -> Vec<String> {
    let before = app.statement_log.lock().expect("log").len();
    run.await;
    app.statement_log.lock().expect("log")[before..].to_vec()
}

fn assert_one_claim_statement(statements: &[String]) {
    assert!(statements.last().is_some_and(|s| s.contains("ledger_claim(")), "{statements:#?}");
    assert!(!statements.iter().any(|s| s.contains("set_config('role'")), "no request transaction: {statements:#?}");
}

#[tokio::test]
async fn a_write_request_is_one_statement_authentication_included() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt', 'u' || g FROM generate_series(1, 3) g").await;
    let token = app.token("rt", "agent-1", Role::Agent).await;

    // The token's first request on this process: its facts are looked up
    // once, then the claim.
    let first = sent(&app, async {
        assert_eq!(app.gql(&token, CLAIM, json!({})).await.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    assert_eq!(first.len(), 2, "{first:#?}");
    assert!(first[0].contains("authenticate_token("), "{first:#?}");
    assert_one_claim_statement(&first);

    // The same agent again: the claim alone, which authenticates the token
    // itself, and its lease is renewed by that one statement.
    let again = sent(&app, async {
        assert_eq!(app.gql(&token, CLAIM, json!({})).await.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    assert_eq!(again.len(), 1, "{again:#?}");
    assert_one_claim_statement(&again);

    // Both wrote their events in that statement: the claim and the renewal.
    let events = app
        .sql_json("SELECT event_type::text AS t FROM work_unit_events WHERE fleet = 'rt' AND agent_id = 'agent-1' ORDER BY seq")
        .await;
    assert_eq!(events, vec![json!({ "t": "claimed" }), json!({ "t": "heartbeat" })]);

    // With a domain and an idempotency key, as the project's own clients
    // send it, claimNext is still the one statement.
    let other = app.token("rt", "agent-2", Role::Agent).await;
    let (resp, by_domain) = sent_with_known_token(
        &app,
        &other,
        "mutation { claimNext(domain: \"default\", idempotencyKey: \"k-claim\") { state } }",
    )
    .await;
    assert_eq!(resp.data()["claimNext"]["state"], "CLAIMED");
    assert_eq!(by_domain.len(), 1, "{by_domain:#?}");
    assert_one_claim_statement(&by_domain);

    // Expired (moved into the past by hand, which no notice tells the
    // server): the very next write is refused by that same one statement,
    // with 401, and writes nothing.
    app.sql(
        "UPDATE api_tokens SET created_at = now() - interval '2 minutes', expires_at = now() - interval '1 minute'
          WHERE name = 'agent-1'",
    )
    .await;
    let mut refused = None;
    let statements = sent(&app, async { refused = Some(app.gql(&token, CLAIM, json!({})).await) }).await;
    let refused = refused.expect("sent");
    assert_eq!(refused.status, 401, "{:#}", refused.body);
    refused.assert_code("UNAUTHENTICATED");
    assert!(refused.message().contains("expired"), "{}", refused.message());
    assert_eq!(statements.len(), 1, "{statements:#?}");
    assert_one_claim_statement(&statements);
    assert_eq!(
        app.sql_i64("SELECT count(*) FROM work_unit_events WHERE fleet = 'rt' AND agent_id = 'agent-1'").await,
        2
    );
}

#[tokio::test]
async fn a_read_request_adds_no_authentication_statement() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) VALUES ('rr', 'u1'), ('other', 'u1')").await;
    let unit = app.sql_id("SELECT id::text AS id FROM work_units WHERE fleet = 'rr'").await;
    let reader = app.token("rr", "reader", Role::Reader).await;
    let read = format!("{{ unit(id: \"{unit}\") {{ externalRef state }} }}");
    // Its first request looks the token's facts up, once.
    assert_eq!(app.gql(&reader, &read, json!({})).await.data()["unit"]["externalRef"], "u1");

    let mut answer = None;
    let statements = sent(&app, async { answer = Some(app.gql(&reader, &read, json!({})).await) }).await;
    assert_eq!(answer.expect("sent").data()["unit"]["state"], "READY");
    // The transaction's first statement authenticates and takes the fleet;
    // the read follows; nothing else was sent.
    assert_eq!(statements.len(), 2, "{statements:#?}");
    assert!(statements[0].contains("ledger_session($1)"), "{statements:#?}");
    assert!(statements[0].contains("set_config('role'"), "{statements:#?}");
    assert!(!statements.iter().any(|s| s.contains("authenticate_token(")), "{statements:#?}");

    // `me` reads no table: one statement says the token is still live.
    let statements = sent(&app, async {
        assert_eq!(app.gql(&reader, "{ me { name } }", json!({})).await.data()["me"]["name"], "reader");
    })
    .await;
    assert_eq!(statements.len(), 1, "{statements:#?}");
    assert!(statements[0].contains("ledger_session($1)"), "{statements:#?}");

    // Expired by hand (no notice): the next read is refused by its first
    // statement, 401, and nothing is read.
    app.sql(
        "UPDATE api_tokens SET created_at = now() - interval '2 minutes', expires_at = now() - interval '1 minute'
          WHERE name = 'reader'",
    )
    .await;
    let mut refused = None;
    let statements = sent(&app, async { refused = Some(app.gql(&reader, &read, json!({})).await) }).await;
    let refused = refused.expect("sent");
    assert_eq!(refused.status, 401, "{:#}", refused.body);
    refused.assert_code("UNAUTHENTICATED");
    assert!(refused.body["data"]["unit"].is_null(), "{:#}", refused.body);
    assert_eq!(statements.len(), 1, "the read never ran: {statements:#?}");
    assert!(statements[0].contains("ledger_session($1)"), "{statements:#?}");
}

/// One request and the statements it sent for the write, the token known
/// to the server already (a `{ __typename }` first, which looks it up when
/// it is not).
async fn sent_with_known_token(app: &TestApp, token: &str, query: &str) -> (Gql, Vec<String>) {
    assert_eq!(app.gql(token, "{ __typename }", json!({})).await.status, 200);
    let mut response = None;
    let statements = sent(app, async { response = Some(app.gql(token, query, json!({})).await) }).await;
    (response.expect("sent"), statements)
}

fn assert_one_statement(statements: &[String], function: &str) {
    assert_eq!(statements.len(), 1, "{statements:#?}");
    assert!(statements[0].contains(&format!("{function}(")), "{statements:#?}");
}

#[tokio::test]
async fn every_write_is_one_statement_with_or_without_keys_fences_and_refusals() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt2', 'u' || g FROM generate_series(1, 3) g").await;
    let token = app.token("rt2", "agent-1", Role::Agent).await;
    let triage = app.token("rt2", "triage", Role::Triage).await;
    let (claimed, _) = sent_with_known_token(&app, &token, "mutation { claimNext { id currentAttemptId } }").await;
    let unit = claimed.data()["claimNext"]["id"].as_str().expect("claimed").to_owned();
    let attempt = claimed.data()["claimNext"]["currentAttemptId"].as_str().expect("attempt").to_owned();

    // (token, mutation, field, what it leaves, the one function it calls):
    // plain, keyed and fenced shapes alike.
    let writes = [
        (
            &token,
            format!("transition(unitId: \"{unit}\", to: IN_PROGRESS)"),
            "transition",
            "IN_PROGRESS",
            "ledger_transition",
        ),
        (&token, format!("heartbeat(attemptId: \"{attempt}\")"), "heartbeat", "IN_PROGRESS", "ledger_heartbeat"),
        (
            &token,
            format!(
                "block(unitId: \"{unit}\", question: \"Which?\", idempotencyKey: \"k1\", attemptId: \"{attempt}\")"
            ),
            "block",
            "BLOCKED",
            "ledger_block",
        ),
        (
            &triage,
            format!("unblock(unitId: \"{unit}\", answer: \"That one\", idempotencyKey: \"k2\")"),
            "unblock",
            "IN_PROGRESS",
            "ledger_unblock",
        ),
        (
            &token,
            format!("recordCost(unitId: \"{unit}\", cents: 12, idempotencyKey: \"k3\")"),
            "recordCost",
            "IN_PROGRESS",
            "ledger_record_cost",
        ),
        (
            &token,
            format!(
                "transition(unitId: \"{unit}\", to: VERIFIED, evidenceUrl: \"https://ci.example/1\", idempotencyKey: \"k4\", attemptId: \"{attempt}\")"
            ),
            "transition",
            "VERIFIED",
            "ledger_transition",
        ),
        (
            &token,
            format!(
                "dispose(unitId: \"{unit}\", disposition: MIGRATED, idempotencyKey: \"k5\", attemptId: \"{attempt}\")"
            ),
            "dispose",
            "DONE",
            "ledger_dispose",
        ),
        // A replay of the same key and request: the same one statement, nothing written.
        (
            &token,
            format!(
                "dispose(unitId: \"{unit}\", disposition: MIGRATED, idempotencyKey: \"k5\", attemptId: \"{attempt}\")"
            ),
            "dispose",
            "DONE",
            "ledger_dispose",
        ),
    ];
    for (who, call, field, state, function) in writes {
        let (answer, statements) =
            sent_with_known_token(&app, who, &format!("mutation {{ {call} {{ state }} }}")).await;
        assert_eq!(answer.data()[field]["state"], state, "{call}: {:#}", answer.body);
        assert_one_statement(&statements, function);
    }
    let disposition = app.sql_json(&format!("SELECT disposition::text AS d FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(disposition, vec![json!({ "d": "MIGRATED" })]);

    // Each wrote its event in that one statement, and the replay none.
    let events = app
        .sql_json(&format!("SELECT event_type::text AS t FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"))
        .await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["t"].as_str()).collect();
    assert_eq!(
        types,
        ["claimed", "transitioned", "heartbeat", "blocked", "unblocked", "cost_recorded", "transitioned", "disposed"]
    );

    // A refused write is one statement too: the call says why.
    for call in [
        format!("transition(unitId: \"{unit}\", to: IN_PROGRESS)"),
        format!("release(unitId: \"{unit}\", idempotencyKey: \"k6\", attemptId: \"{attempt}\")"),
    ] {
        let (refused, statements) =
            sent_with_known_token(&app, &token, &format!("mutation {{ {call} {{ state }} }}")).await;
        assert_eq!(refused.body["errors"][0]["extensions"]["code"], "ILLEGAL_TRANSITION", "{:#}", refused.body);
        assert_eq!(refused.body["errors"][0]["extensions"]["state"], "DONE", "{:#}", refused.body);
        assert_eq!(statements.len(), 1, "{statements:#?}");
        assert!(!statements.iter().any(|s| s.contains("set_config('role'")), "{statements:#?}");
    }
}

/// The relation reads (`... = ANY($1)`, one per relation and level) among
/// `statements`, asserting none was sent twice.
fn relation_reads(statements: &[String]) -> Vec<String> {
    let reads: Vec<String> = statements.iter().filter(|s| s.contains("= ANY(")).cloned().collect();
    let distinct: std::collections::HashSet<&String> = reads.iter().collect();
    assert_eq!(distinct.len(), reads.len(), "a relation read twice: {reads:#?}");
    reads
}

/// A unit a field returns (`unit(id:)`, a write's unit) has its selected
/// relations read up front, the next level as soon as the first is in,
/// rather than each level after the DataLoader's batch delay (issue 27: the
/// contract's selection, which MCP and the CLI send after every write, has
/// two levels). What this keeps: every relation the selection needs is in
/// the request's cache before it is resolved, so each is read once and none
/// is read again by the field that shows it (a key the prefetch left out of
/// the cache would be read a second time).
#[tokio::test]
async fn a_unit_with_the_contracts_selection_reads_each_relation_once() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt3', 'u' || g FROM generate_series(1, 2) g").await;
    let agent = app.token("rt3", "agent-1", Role::Agent).await;
    let triage = app.token("rt3", "triage", Role::Triage).await;
    let ids = app.sql_json("SELECT id::text AS id FROM work_units WHERE fleet = 'rt3' ORDER BY external_ref").await;
    let (a, b) = (ids[0]["id"].as_str().expect("a").to_owned(), ids[1]["id"].as_str().expect("b").to_owned());
    let run = |token: &str, query: String| {
        let (token, query) = (token.to_owned(), query);
        let app = &app;
        async move {
            let response = app.gql(&token, &query, json!({})).await;
            assert!(response.body.get("errors").is_none(), "{query}: {:?}", response.body);
            response
        }
    };
    // A: an attempt released with a reason (an end to read).
    run(&agent, format!("mutation {{ claimUnit(id: \"{a}\") {{ id }} }}")).await;
    run(&agent, format!("mutation {{ release(unitId: \"{a}\", reason: \"later\") {{ id }} }}")).await;
    // B: the same question asked and answered (an answer similar to A's).
    run(&agent, format!("mutation {{ claimUnit(id: \"{b}\") {{ id }} }}")).await;
    run(&agent, format!("mutation {{ transition(unitId: \"{b}\", to: IN_PROGRESS) {{ id }} }}")).await;
    run(&agent, format!("mutation {{ block(unitId: \"{b}\", question: \"Which way?\") {{ id }} }}")).await;
    run(&triage, format!("mutation {{ unblock(unitId: \"{b}\", answer: \"North\") {{ id }} }}")).await;
    run(&agent, format!("mutation {{ release(unitId: \"{b}\") {{ id }} }}")).await;
    // A again, blocked on that question.
    run(&agent, format!("mutation {{ claimUnit(id: \"{a}\") {{ id }} }}")).await;
    run(&agent, format!("mutation {{ transition(unitId: \"{a}\", to: IN_PROGRESS) {{ id }} }}")).await;
    let blocked = format!("block(unitId: \"{a}\", question: \"Which way?\")");

    let unit = work_ledger::contract::UNIT.replace("SURFACE", "MCP");
    for (token, query) in [
        // A write's unit, as MCP and the CLI ask for it.
        (&agent, format!("mutation {{ {blocked} {unit} }}")),
        // The same unit read.
        (&agent, format!("{{ unit(id: \"{a}\") {unit} }}")),
    ] {
        let mark = app.statement_mark();
        let response = run(token, query.clone()).await;
        let reads = relation_reads(&app.request_statements_since(mark));
        let data = response.body["data"].as_object().and_then(|d| d.values().next()).expect("the unit").clone();
        assert_eq!(data["state"], "BLOCKED", "{query}");
        assert_eq!(data["attempts"][0]["endReason"], "later", "{data}");
        assert_eq!(data["openQuestion"]["similarAnswered"][0]["answer"], "North", "{data}");
        // Attempts, questions, the attempts' ends and the similar answers
        // (which pair, then read, the answered questions: two statements).
        assert_eq!(reads.len(), 5, "{reads:#?}");
    }
}

/// A list a field returns may hold one unit twice (`registerUnits` with a
/// ref given twice answers it twice, in input order); reading its relations
/// up front reads each unit's once, and both entries show them. (The first
/// version of the prefetch passed the repeated key on to the loader, whose
/// second answer for it was empty and overwrote the first: both entries
/// showed no attempts, no questions and no events, with `totalCount: 1`.)
#[tokio::test]
async fn a_unit_returned_twice_in_one_list_shows_its_relations_in_both() {
    let app = spawn_app().await;
    let op = app.token("rt4", "op", Role::Operator).await;
    let agent = app.token("rt4", "agent-1", Role::Agent).await;
    let unit = app.register(&op, &["twice"]).await[0]["id"].as_str().expect("id").to_owned();
    let claimed = app.gql(&agent, &format!("mutation {{ claimUnit(id: \"{unit}\") {{ id }} }}"), json!({})).await;
    assert!(claimed.body.get("errors").is_none(), "{:?}", claimed.body);

    let again = app
        .gql(
            &op,
            "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) {
                id attempts { attemptNo agentId } events { totalCount edges { node { eventType } } } } }",
            json!({ "u": [{ "externalRef": "twice" }, { "externalRef": "twice" }] }),
        )
        .await;
    let units = again.data()["registerUnits"].as_array().expect("list").clone();
    assert_eq!(units.len(), 2, "{units:?}");
    for shown in &units {
        assert_eq!(shown["id"], unit.as_str());
        assert_eq!(shown["attempts"], json!([{ "attemptNo": 1, "agentId": "agent-1" }]), "{shown}");
        let events = &shown["events"];
        let listed = events["edges"].as_array().expect("edges").len();
        assert_eq!(listed as i64, events["totalCount"].as_i64().expect("count"), "{shown}");
        assert_eq!(listed, 2, "registered and claimed: {shown}");
    }
}
