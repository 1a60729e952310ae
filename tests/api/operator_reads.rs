//! Robert's Monday morning (issue 14) on the seeded fleet of `views::fixture`:
//! totals, grouped cost, stall edges and ages, reasons as fields, and both
//! orders of the keyset lists.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app};
use crate::views::fixture;

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("not a time: {v}"))
}

fn refs(conn: &Value) -> Vec<String> {
    conn["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"]["externalRef"].as_str().expect("externalRef").to_owned())
        .collect()
}

/// Every list's count, in requests of at most five fleet-wide reads each
/// (`stalls` and every `totalCount` count: `graphql::read_budget`).
const TOTALS: [&str; 4] = [
    r#"{
    units { totalCount }
    cobol: units(first: 3, filter: { domain: "cobol" }) { totalCount edges { cursor } pageInfo { hasNextPage } }
    stalled: units(filter: { stalled: true }) { totalCount edges { node { externalRef } } }
    notStalled: units(filter: { stalled: false }) { totalCount }
    stalledJcl: units(filter: { stalled: true, domain: "jcl" }) { totalCount }
}"#,
    r#"{
    events(filter: { types: [DISPOSED] }) { totalCount }
    allEvents: events(first: 1) { totalCount }
    questions { totalCount }
    openQuestions: questions(status: ANSWERED) { totalCount }
}"#,
    r#"{
    stalls { totalCount }
    rework { totalCount }
    dispositions { totalCount }
}"#,
    r#"{
    dead: dispositions(disposition: DEAD) { totalCount }
    cobolDisposed: dispositions(domain: "cobol") { totalCount }
    costPerUnit(first: 2) { totalCount }
    unitByRef(externalRef: "d1") { events(first: 2) { totalCount edges { node { eventType } } } }
}"#,
];

#[tokio::test]
async fn total_counts_follow_each_lists_filter_and_are_counted_only_when_asked() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    let mut d = serde_json::Map::new();
    for query in TOTALS {
        d.extend(op.run(query, json!({})).await.data().as_object().expect("data").clone());
    }
    let d = Value::Object(d);
    let events = app.sql_i64("SELECT count(*) FROM work_unit_events WHERE fleet = 'f'").await;
    assert_eq!(d["units"]["totalCount"], 10);
    assert_eq!(d["cobol"]["totalCount"], 8, "the filter counts, not the page");
    assert_eq!(d["cobol"]["edges"].as_array().map(Vec::len), Some(3));
    assert_eq!(d["stalled"]["totalCount"], 1);
    assert_eq!(refs(&d["stalled"]), ["s1"]);
    assert_eq!(d["notStalled"]["totalCount"], 9);
    assert_eq!(d["stalledJcl"]["totalCount"], 0);
    assert_eq!(d["events"]["totalCount"], 3);
    assert_eq!(d["allEvents"]["totalCount"], events);
    assert_eq!(d["questions"]["totalCount"], 1);
    assert_eq!(d["openQuestions"]["totalCount"], 0);
    assert_eq!(d["stalls"]["totalCount"], 1);
    assert_eq!(d["rework"]["totalCount"], 1);
    // Counted from the unit totals (no range): the same number as the rows.
    let cobol_disposed = app
        .sql_i64("SELECT count(*) FROM work_units WHERE fleet = 'f' AND domain = 'cobol' AND disposition IS NOT NULL")
        .await;
    assert!(cobol_disposed > 0, "the fixture disposes cobol units");
    assert_eq!(d["cobolDisposed"]["totalCount"], cobol_disposed);
    assert_eq!(d["dispositions"]["totalCount"], 3);
    assert_eq!(d["dead"]["totalCount"], 1);
    assert_eq!(d["costPerUnit"]["totalCount"], 10);
    // d1: registered, claimed, cost_recorded, stale_reclaimed, claimed,
    // transitioned, cost_recorded, transitioned, disposed.
    assert_eq!(d["unitByRef"]["events"]["totalCount"], 9);
    assert_eq!(d["unitByRef"]["events"]["edges"].as_array().map(Vec::len), Some(2));

    // Another fleet counts nothing of this one.
    let other = Agent::new(&app, "other", "op", Role::Reader).await;
    let e = other.run("{ units { totalCount } events { totalCount } stalls { totalCount } }", json!({})).await;
    assert_eq!(
        e.data(),
        &json!({ "units": { "totalCount": 0 }, "events": { "totalCount": 0 }, "stalls": { "totalCount": 0 } })
    );

    // The count is a statement of its own, sent only when totalCount is
    // selected. Token lookups (one per request) are left out.
    let statements = |query: &'static str| {
        let (app, op) = (&app, &op);
        async move {
            let mark = app.statement_mark();
            op.run(query, json!({})).await.data();
            app.request_statements_since(mark).len()
        }
    };
    let without = statements("{ units(first: 5) { edges { node { id } } } }").await;
    let again = statements("{ units(first: 5) { edges { node { id } } } }").await;
    let with = statements("{ units(first: 5) { totalCount edges { node { id } } } }").await;
    assert_eq!(without, again);
    assert!(with > without, "totalCount adds its count: {without} -> {with}");
}

const COST: &str = "query($g: CostGroupBy!, $from: DateTime, $to: DateTime, $d: String) {
    costSummary(groupBy: $g, from: $from, to: $to, domain: $d) { key units costCents avgCostCents } }";

#[tokio::test]
async fn cost_summary_groups_every_unit_open_ones_included() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    let summary = |vars: Value| {
        let op = &op;
        async move { op.run(COST, vars).await.data()["costSummary"].clone() }
    };
    let row = |key: &str, units: i64, cost: i64, avg: f64| json!({ "key": key, "units": units, "costCents": cost, "avgCostCents": avg });
    assert_eq!(summary(json!({ "g": "DOMAIN" })).await, json!([row("cobol", 8, 420, 52.5), row("jcl", 2, 0, 0.0)]));
    // dispositionSummary leaves out v1 (VERIFIED, 70 cents): OPEN keeps it.
    assert_eq!(
        summary(json!({ "g": "DISPOSITION" })).await,
        json!([
            row("DEAD", 1, 50, 50.0),
            row("DROPPED", 1, 0, 0.0),
            row("MIGRATED", 1, 300, 300.0),
            row("OPEN", 7, 70, 10.0)
        ])
    );
    assert_eq!(
        summary(json!({ "g": "STATE" })).await,
        json!([
            row("ABANDONED", 2, 50, 25.0),
            row("BLOCKED", 1, 0, 0.0),
            row("CLAIMED", 1, 0, 0.0),
            row("DONE", 1, 300, 300.0),
            row("IN_PROGRESS", 1, 0, 0.0),
            row("READY", 3, 0, 0.0),
            row("VERIFIED", 1, 70, 70.0),
        ])
    );
    assert_eq!(
        summary(json!({ "g": "AGENT" })).await,
        json!([
            row("a-b1", 1, 0, 0.0),
            row("a-c1", 1, 0, 0.0),
            row("a-d1", 1, 200, 200.0),
            row("a-d1-first", 1, 100, 100.0),
            row("a-s1", 1, 0, 0.0),
            row("a-v1", 1, 70, 70.0),
            row("a-x1", 1, 50, 50.0),
        ])
    );
    assert_eq!(
        summary(json!({ "g": "STATE", "d": "jcl" })).await,
        json!([row("ABANDONED", 1, 0, 0.0), row("READY", 1, 0, 0.0)])
    );
    assert_eq!(summary(json!({ "g": "AGENT", "d": "jcl" })).await, json!([]), "no agent worked on jcl");
    assert_eq!(summary(json!({ "g": "AGENT", "d": "cobol" })).await.as_array().map(Vec::len), Some(7));

    // The rows behind DOMAIN, STATE and DISPOSITION, for Grafana too: one per
    // (domain, state, disposition), under row-level security (ordered by the state's name).
    let groups = "SELECT domain, state::text AS state, disposition::text AS disposition, units, cost_cents
                    FROM v_cost_groups ORDER BY domain, state, disposition";
    let group = |domain: &str, state: &str, disposition: Value, units: i64, cost: i64| json!({ "domain": domain, "state": state, "disposition": disposition, "units": units, "cost_cents": cost });
    assert_eq!(
        app.app_role_query(Some("f"), groups).await,
        vec![
            group("cobol", "abandoned", json!("DEAD"), 1, 50),
            group("cobol", "blocked", Value::Null, 1, 0),
            group("cobol", "claimed", Value::Null, 1, 0),
            group("cobol", "done", json!("MIGRATED"), 1, 300),
            group("cobol", "in_progress", Value::Null, 1, 0),
            group("cobol", "ready", Value::Null, 2, 0),
            group("cobol", "verified", Value::Null, 1, 70),
            group("jcl", "abandoned", json!("DROPPED"), 1, 0),
            group("jcl", "ready", Value::Null, 1, 0),
        ]
    );
    assert_eq!(app.app_role_query(Some("other"), groups).await, Vec::<Value>::new());

    // A range counts the cost recorded in it, and the units it was recorded for.
    let now: DateTime<Utc> = time(&op.run("{ serverTime }", json!({})).await.data()["serverTime"]);
    let hour = chrono::Duration::hours(1);
    let (from, to) = ((now - hour).to_rfc3339(), (now + hour).to_rfc3339());
    assert_eq!(summary(json!({ "g": "DOMAIN", "from": from, "to": to })).await, json!([row("cobol", 3, 420, 140.0)]));
    assert_eq!(
        summary(json!({ "g": "AGENT", "from": from, "to": to })).await,
        json!([
            row("a-d1", 1, 200, 200.0),
            row("a-d1-first", 1, 100, 100.0),
            row("a-v1", 1, 70, 70.0),
            row("a-x1", 1, 50, 50.0)
        ])
    );
    assert_eq!(
        summary(json!({ "g": "STATE", "from": from, "to": to })).await,
        json!([row("ABANDONED", 1, 50, 50.0), row("DONE", 1, 300, 300.0), row("VERIFIED", 1, 70, 70.0)])
    );
    assert_eq!(
        summary(json!({ "g": "DISPOSITION", "from": from })).await,
        json!([row("DEAD", 1, 50, 50.0), row("MIGRATED", 1, 300, 300.0), row("OPEN", 1, 70, 70.0)])
    );
    assert_eq!(summary(json!({ "g": "DOMAIN", "from": from, "to": to, "d": "jcl" })).await, json!([]));
    assert_eq!(
        summary(json!({ "g": "AGENT", "to": to, "d": "cobol" })).await.as_array().map(Vec::len),
        Some(4),
        "the four agents that recorded cost"
    );
    assert_eq!(summary(json!({ "g": "AGENT", "from": from, "d": "jcl" })).await, json!([]));
    assert_eq!(
        summary(json!({ "g": "DISPOSITION", "to": (now - hour).to_rfc3339() })).await,
        json!([]),
        "nothing was recorded before the fixture ran"
    );
    let backwards = op.run(COST, json!({ "g": "DOMAIN", "from": to, "to": from })).await;
    backwards.assert_code("INVALID_INPUT");
    assert_eq!(backwards.body["errors"][0]["extensions"]["argument"], "to");

    let empty = Agent::new(&app, "empty", "op", Role::Reader).await;
    assert_eq!(empty.run(COST, json!({ "g": "AGENT" })).await.data()["costSummary"], json!([]));
}

#[tokio::test]
async fn stall_edges_and_question_ages_are_measured_on_the_servers_clock() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    let op = fixture(&app).await;
    app.sql(
        "UPDATE work_units SET last_heartbeat_at = '2026-01-05T10:00:00Z', lease_expires_at = '2026-01-05T10:15:00Z'
          WHERE fleet = 'f' AND external_ref = 's1'",
    )
    .await;
    app.sql(
        "UPDATE blocking_questions q SET created_at = now() - interval '42 minutes'
           FROM work_units u WHERE u.id = q.unit_id AND u.external_ref = 'b1'",
    )
    .await;
    let resp = op
        .run(
            "{ serverTime
               stalls { totalCount edges { holder lastHeartbeatAt leaseExpiredAt stalledForSeconds
                        attempt { attemptNo agentId } node { externalRef state stalled } } }
               questions { edges { node { status createdAt openForSeconds } } } }",
            json!({}),
        )
        .await;
    let d = resp.data();
    let now = time(&d["serverTime"]);
    let edge = &d["stalls"]["edges"][0];
    assert_eq!(d["stalls"]["totalCount"], 1);
    assert_eq!(edge["holder"], "a-s1");
    assert_eq!(edge["attempt"], json!({ "attemptNo": 1, "agentId": "a-s1" }));
    assert_eq!(edge["node"], json!({ "externalRef": "s1", "state": "IN_PROGRESS", "stalled": true }));
    assert_eq!(time(&edge["lastHeartbeatAt"]), "2026-01-05T10:00:00Z".parse::<DateTime<Utc>>().expect("t"));
    let expired: DateTime<Utc> = "2026-01-05T10:15:00Z".parse().expect("t");
    assert_eq!(time(&edge["leaseExpiredAt"]), expired);
    assert_eq!(edge["stalledForSeconds"], (now - expired).num_seconds());

    let question = &d["questions"]["edges"][0]["node"];
    assert_eq!(question["status"], "OPEN");
    let open_for = (now - time(&question["createdAt"])).num_seconds();
    assert_eq!(question["openForSeconds"], open_for);
    assert!((42 * 60..43 * 60).contains(&open_for), "{open_for}");

    // An answered question's age stops at the answer.
    let b1 = app.sql_id("SELECT id::text AS id FROM work_units WHERE external_ref = 'b1'").await;
    op.unblock(&b1, "yes", json!({})).await.data();
    app.sql("UPDATE blocking_questions SET answered_at = created_at + interval '123.5 seconds'").await;
    let later = op.run("{ questions { edges { node { status openForSeconds } } } }", json!({})).await;
    assert_eq!(
        later.data()["questions"]["edges"],
        json!([{ "node": { "status": "ANSWERED", "openForSeconds": 123 } }])
    );
}

const REASONS: &str = "query($r: String!) { unitByRef(externalRef: $r) {
    disposition dispositionReason disposedBy
    attempts { attemptNo outcome endReason endedBy reclaimedBy } } }";

#[tokio::test]
async fn reasons_and_who_are_fields_derived_from_the_events() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    let c1 = app.sql_id("SELECT id::text AS id FROM work_units WHERE external_ref = 'c1'").await;
    let holder = Agent::new(&app, "f", "a-c1", Role::Agent).await;
    holder.release(&c1, json!({ "reason": "wrong domain", "outcome": "FAILED" })).await.data();
    // A bill arriving after the disposal: the newest event of x1 is no longer its disposal.
    let x1_attempt = app
        .sql_id("SELECT a.id::text AS id FROM work_unit_attempts a JOIN work_units u ON u.id = a.unit_id WHERE u.external_ref = 'x1'")
        .await;
    Agent::new(&app, "f", "a-x1", Role::Agent).await.record_cost(&x1_attempt, 5, "x1-late").await.data();

    let unit = |r: &'static str| {
        let op = &op;
        async move { op.run(REASONS, json!({ "r": r })).await.data()["unitByRef"].clone() }
    };
    let attempt = |no: i64, outcome: &str, reason: Value, by: &str| json!({ "attemptNo": no, "outcome": outcome, "endReason": reason, "endedBy": by, "reclaimedBy": null });
    assert_eq!(
        unit("x1").await,
        json!({ "disposition": "DEAD", "dispositionReason": "no source left", "disposedBy": "a-x1",
                "attempts": [attempt(1, "ABANDONED", json!("no source left"), "a-x1")] })
    );
    assert_eq!(
        unit("j2").await,
        json!({ "disposition": "DROPPED", "dispositionReason": "out of scope", "disposedBy": "op", "attempts": [] })
    );
    assert_eq!(
        unit("d1").await,
        json!({ "disposition": "MIGRATED", "dispositionReason": null, "disposedBy": "a-d1",
                "attempts": [
                    // Its lease ended it, not a write: who reclaimed the unit is not who ended the attempt.
                    json!({ "attemptNo": 1, "outcome": "SUPERSEDED", "endReason": "the lease expired and a-d1 reclaimed the unit",
                            "endedBy": null, "reclaimedBy": "a-d1" }),
                    attempt(2, "VERIFIED", Value::Null, "a-d1")] })
    );
    assert_eq!(
        unit("c1").await,
        json!({ "disposition": null, "dispositionReason": null, "disposedBy": null,
                "attempts": [attempt(1, "FAILED", json!("wrong domain"), "a-c1")] })
    );
    assert_eq!(
        unit("s1").await["attempts"],
        json!([{ "attemptNo": 1, "outcome": null, "endReason": null, "endedBy": null, "reclaimedBy": null }])
    );

    // The same, for Grafana: views derived from the events, under row-level security.
    assert_eq!(
        app.app_role_query(
            Some("f"),
            "SELECT external_ref, disposed_by, disposition_reason FROM v_disposals ORDER BY external_ref"
        )
        .await,
        vec![
            json!({ "external_ref": "d1", "disposed_by": "a-d1", "disposition_reason": null }),
            json!({ "external_ref": "j2", "disposed_by": "op", "disposition_reason": "out of scope" }),
            json!({ "external_ref": "x1", "disposed_by": "a-x1", "disposition_reason": "no source left" }),
        ]
    );
    assert_eq!(app.app_role_query(Some("other"), "SELECT * FROM v_attempt_end").await, Vec::<Value>::new());
}

#[tokio::test]
async fn events_carry_their_attempt_number_and_read_in_either_order() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    let expected: Vec<Value> = app
        .sql_json(
            "SELECT upper(e.event_type::text) AS \"eventType\", a.attempt_no AS \"attemptNo\"
               FROM work_unit_events e JOIN work_units u ON u.id = e.unit_id
               LEFT JOIN work_unit_attempts a ON a.id = e.attempt_id
              WHERE u.external_ref = 'd1' ORDER BY e.created_at, e.id",
        )
        .await;
    // Sorted: the reclaim's two events are written by one statement.
    let mut pairs: Vec<String> = expected.iter().map(|e| format!("{} {}", e["eventType"], e["attemptNo"])).collect();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            "\"CLAIMED\" 1",
            "\"CLAIMED\" 2",
            "\"COST_RECORDED\" 1",
            "\"COST_RECORDED\" 2",
            "\"DISPOSED\" 2",
            "\"REGISTERED\" null",
            "\"STALE_RECLAIMED\" 1",
            "\"TRANSITIONED\" 2",
            "\"TRANSITIONED\" 2",
        ]
    );

    // A unit's history, oldest first, page by page.
    const HISTORY: &str = "query($after: String, $order: SortOrder) { unitByRef(externalRef: \"d1\") {
        events(first: 4, after: $after, order: $order) { edges { cursor node { eventType attemptNo } } pageInfo { hasNextPage endCursor } } } }";
    let (mut walked, mut after) = (Vec::new(), Value::Null);
    loop {
        let page = op.run(HISTORY, json!({ "after": after, "order": "ASC" })).await;
        let conn = page.data()["unitByRef"]["events"].clone();
        walked.extend(conn["edges"].as_array().expect("edges").iter().map(|e| e["node"].clone()));
        if conn["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = conn["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(walked, expected, "oldest first, every event once, with its attempt number");
    let newest = op.run(HISTORY, json!({})).await;
    let newest: Vec<Value> = newest.data()["unitByRef"]["events"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"].clone())
        .collect();
    assert_eq!(newest, expected.iter().rev().take(4).cloned().collect::<Vec<_>>(), "newest first by default");

    // A cursor is valid only in the order that produced it.
    let asc =
        op.run(HISTORY, json!({ "order": "ASC" })).await.data()["unitByRef"]["events"]["pageInfo"]["endCursor"].clone();
    let desc = op.run(HISTORY, json!({ "order": "DESC" })).await.data()["unitByRef"]["events"]["pageInfo"]["endCursor"]
        .clone();
    op.run(HISTORY, json!({ "order": "DESC", "after": asc })).await.assert_code("INVALID_INPUT");
    op.run(HISTORY, json!({ "order": "ASC", "after": desc })).await.assert_code("INVALID_INPUT");
}

/// Walks a top-level connection in one order; returns (nodes, the first page's endCursor).
async fn walk(op: &Agent<'_>, query: &str, field: &str, order: Value) -> (Vec<Value>, Value) {
    let (mut nodes, mut after, mut first_cursor) = (Vec::new(), Value::Null, Value::Null);
    loop {
        let page = op.run(query, json!({ "after": after, "order": order.clone() })).await;
        let conn = page.data()[field].clone();
        nodes.extend(conn["edges"].as_array().expect("edges").iter().map(|e| e["node"].clone()));
        if first_cursor.is_null() {
            first_cursor = conn["pageInfo"]["endCursor"].clone();
        }
        if conn["pageInfo"]["hasNextPage"] != true {
            return (nodes, first_cursor);
        }
        after = conn["pageInfo"]["endCursor"].clone();
    }
}

#[tokio::test]
async fn units_and_events_page_in_either_order_with_cursors_of_their_own() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    const UNITS: &str = "query($after: String, $order: SortOrder) { units(first: 3, after: $after, order: $order) {
        edges { node { externalRef } } pageInfo { hasNextPage endCursor } } }";
    const EVENTS: &str = "query($after: String, $order: SortOrder) { events(first: 7, after: $after, order: $order) {
        edges { node { id } } pageInfo { hasNextPage endCursor } } }";

    let oldest: Vec<Value> = app
        .sql_json("SELECT external_ref AS \"externalRef\" FROM work_units WHERE fleet = 'f' ORDER BY created_at, id")
        .await;
    let (asc, asc_cursor) = walk(&op, UNITS, "units", json!("ASC")).await;
    let (desc, desc_cursor) = walk(&op, UNITS, "units", json!("DESC")).await;
    assert_eq!(asc, oldest);
    assert_eq!(desc, oldest.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(asc.len(), 10);
    for (order, cursor) in [("DESC", &asc_cursor), ("ASC", &desc_cursor)] {
        let r = op.run(UNITS, json!({ "after": cursor, "order": order })).await;
        r.assert_code("INVALID_INPUT");
        assert_eq!(r.body["errors"][0]["extensions"]["argument"], "after");
    }

    let events: Vec<Value> =
        app.sql_json("SELECT id::text AS id FROM work_unit_events WHERE fleet = 'f' ORDER BY created_at, id").await;
    let (asc, asc_cursor) = walk(&op, EVENTS, "events", json!("ASC")).await;
    let (desc, desc_cursor) = walk(&op, EVENTS, "events", json!("DESC")).await;
    assert_eq!(asc, events);
    assert_eq!(desc, events.iter().rev().cloned().collect::<Vec<_>>());
    op.run(EVENTS, json!({ "after": asc_cursor, "order": "DESC" })).await.assert_code("INVALID_INPUT");
    op.run(EVENTS, json!({ "after": desc_cursor, "order": "ASC" })).await.assert_code("INVALID_INPUT");
    // The default orders are unchanged: units oldest first, events newest first.
    let (default_units, _) = walk(&op, UNITS, "units", Value::Null).await;
    assert_eq!(default_units, oldest);
    let default_events = op.run(EVENTS, json!({})).await;
    assert_eq!(default_events.data()["events"]["edges"][0]["node"], events[events.len() - 1]);
}

/// GraphiQL's default document, as the page's own script holds it.
async fn graphiql_default_document(app: &crate::helpers::TestApp) -> String {
    let js =
        app.http.get(app.url("/assets/graphiql/work-ledger.js")).send().await.expect("GET").text().await.expect("js");
    let start = js.find("var DEFAULT_QUERY = [").expect("DEFAULT_QUERY");
    let end = start + js[start..].find("].join").expect("join");
    js[start..end]
        .lines()
        .skip(1)
        .filter_map(|line| line.trim().strip_prefix('\'')?.strip_suffix("',").map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn graphiqls_default_document_answers_what_it_cost_and_what_is_open() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    let document = graphiql_default_document(&app).await;
    assert!(document.contains("costSummary(groupBy: DISPOSITION)"), "{document}");
    let resp = op.run(&document, json!({})).await;
    let d = resp.data();
    assert_eq!(
        d["costSummary"],
        json!([
            { "key": "DEAD", "units": 1, "costCents": 50, "avgCostCents": 50.0 },
            { "key": "DROPPED", "units": 1, "costCents": 0, "avgCostCents": 0.0 },
            { "key": "MIGRATED", "units": 1, "costCents": 300, "avgCostCents": 300.0 },
            { "key": "OPEN", "units": 7, "costCents": 70, "avgCostCents": 10.0 },
        ])
    );
    assert_eq!(d["stalls"]["totalCount"], 1);
    assert_eq!(d["stalls"]["edges"][0]["holder"], "a-s1");
    let expired = app.sql_json("SELECT lease_expires_at AS t FROM work_units WHERE external_ref = 's1'").await;
    let expired = time(&expired[0]["t"]);
    assert_eq!(d["stalls"]["edges"][0]["stalledForSeconds"], (time(&d["serverTime"]) - expired).num_seconds());
}
