//! Date ranges, `throughput` and the North Star views (SPEC §7) on a ledger
//! laid out on a calendar: fleet `g`, written in raw SQL through legal state
//! steps (the triggers check each) with fixed timestamps.
//!
//! Week of Monday 2026-01-05 (UTC):
//! - g1 (default): claimed by A Mon 10:00, started, 100 cents recorded Mon 11:00,
//!   verified, MIGRATED Mon 12:00.
//! - g2 (default): claimed by C Mon 15:00 and never started; reclaimed by B
//!   Tue 08:00 (C's attempt superseded), started, 50 cents Tue 11:00,
//!   verified, MIGRATED Tue 12:00.
//! - g3 (asm): claimed by A Tue 10:00, never started, 30 cents Tue 12:30,
//!   DEAD Tue 13:00.
//!
//! Week of Monday 2026-01-12: g4 DROPPED Tue 2026-01-13 09:00 (never claimed);
//! g5 and g6 READY. Units were registered 09:00, 09:10, 09:20 and 09:30 on
//! 2026-01-05, then 2026-01-12 09:00 and 2026-01-13 09:00.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

/// Appends an event of the unit's current attempt, as the write path would:
/// the read models are projections of the log, so history written by hand
/// carries its events (`from`, `to`: the states it moves the unit between).
async fn event(app: &TestApp, unit: &str, kind: &str, moves: Option<(&str, &str)>, detail: &str, cents: i64, at: &str) {
    let (from, to) =
        moves.map_or(("NULL".to_owned(), "NULL".to_owned()), |(f, t)| (format!("'{f}'"), format!("'{t}'")));
    app.sql(&format!(
        "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail,
                                      cost_delta_cents, created_at)
         SELECT fleet, id, current_attempt_id, '{kind}', {from}, {to}, coalesce(claimed_by, 'op'), '{detail}', {cents}, '{at}'
           FROM work_units WHERE fleet = 'g' AND external_ref = '{unit}'"
    ))
    .await;
}

async fn claim(app: &TestApp, unit: &str, agent: &str, at: &str) {
    let was = app
        .sql_json(&format!("SELECT state::text AS s FROM work_units WHERE fleet = 'g' AND external_ref = '{unit}'"))
        .await;
    let was = was[0]["s"].as_str().expect("state").to_owned();
    if was != "ready" {
        event(app, unit, "stale_reclaimed", Some((&was, "claimed")), "{}", 0, at).await;
    }
    app.sql(&format!(
        "WITH p AS (UPDATE work_unit_attempts a SET outcome = 'superseded', ended_at = '{at}'
                      FROM work_units u WHERE u.fleet = 'g' AND u.external_ref = '{unit}' AND a.id = u.current_attempt_id
                     RETURNING a.id),
              a AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id, started_at)
                    SELECT fleet, id, attempt_count + 1, '{agent}', '{at}' FROM work_units
                     WHERE fleet = 'g' AND external_ref = '{unit}'
                    RETURNING id, unit_id, attempt_no, started_at)
         UPDATE work_units u SET state = 'claimed', claimed_by = '{agent}', current_attempt_id = a.id,
                attempt_count = a.attempt_no, lease_expires_at = '{at}'::timestamptz + interval '15 minutes',
                first_claimed_at = coalesce(u.first_claimed_at, a.started_at)
           FROM a WHERE u.id = a.unit_id"
    ))
    .await;
    event(app, unit, "claimed", Some((&was, "claimed")), "{}", 0, at).await;
}

async fn start(app: &TestApp, unit: &str, at: &str) {
    event(app, unit, "transitioned", Some(("claimed", "in_progress")), "{}", 0, at).await;
    app.sql(&format!("UPDATE work_units SET state = 'in_progress' WHERE fleet = 'g' AND external_ref = '{unit}'"))
        .await;
}

async fn cost(app: &TestApp, unit: &str, cents: i64, at: &str) {
    event(app, unit, "cost_recorded", None, "{}", cents, at).await;
    app.sql(&format!(
        "UPDATE work_unit_attempts a SET cost_cents = a.cost_cents + {cents}
           FROM work_units u WHERE u.fleet = 'g' AND u.external_ref = '{unit}' AND a.id = u.current_attempt_id"
    ))
    .await;
}

async fn verify(app: &TestApp, unit: &str, at: &str) {
    event(app, unit, "transitioned", Some(("in_progress", "verified")), "{}", 0, at).await;
    app.sql(&format!(
        "UPDATE work_unit_attempts a SET outcome = 'verified', ended_at = '{at}', evidence_url = 'https://ci/{unit}'
           FROM work_units u WHERE u.fleet = 'g' AND u.external_ref = '{unit}' AND a.id = u.current_attempt_id"
    ))
    .await;
    app.sql(&format!(
        "UPDATE work_units SET state = 'verified', lease_expires_at = NULL, evidence_urls = ARRAY['https://ci/{unit}']
          WHERE fleet = 'g' AND external_ref = '{unit}'"
    ))
    .await;
}

async fn dispose(app: &TestApp, unit: &str, disposition: &str, at: &str) {
    let state = if disposition == "MIGRATED" { "done" } else { "abandoned" };
    let was = app
        .sql_json(&format!("SELECT state::text AS s FROM work_units WHERE fleet = 'g' AND external_ref = '{unit}'"))
        .await;
    let was = was[0]["s"].as_str().expect("state").to_owned();
    // The unit and its event in one transaction, as a write makes them (the
    // projector folds the event with the unit's disposal time).
    app.sql(&format!(
        "UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = '{at}'
           FROM work_units u WHERE u.fleet = 'g' AND u.external_ref = '{unit}' AND a.id = u.current_attempt_id
            AND a.outcome IS NULL;
         UPDATE work_units SET state = '{state}', disposition = '{disposition}', disposed_at = '{at}', lease_expires_at = NULL,
                evidence_urls = evidence_urls || ARRAY['https://wiki/{unit}']
          WHERE fleet = 'g' AND external_ref = '{unit}';
         INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, created_at)
         SELECT fleet, id, current_attempt_id, 'disposed', '{was}', '{state}', 'op', '{{\"disposition\": \"{disposition}\"}}', '{at}'
           FROM work_units WHERE fleet = 'g' AND external_ref = '{unit}'"
    ))
    .await;
}

pub(crate) async fn calendar(app: &TestApp) {
    app.sql(
        "INSERT INTO work_units (fleet, external_ref, domain, created_at) VALUES
           ('g', 'g1', 'default', '2026-01-05T09:00:00Z'), ('g', 'g2', 'default', '2026-01-05T09:10:00Z'),
           ('g', 'g3', 'asm', '2026-01-05T09:20:00Z'), ('g', 'g4', 'default', '2026-01-05T09:30:00Z'),
           ('g', 'g5', 'default', '2026-01-12T09:00:00Z'), ('g', 'g6', 'default', '2026-01-13T09:00:00Z');
         INSERT INTO work_unit_events (fleet, unit_id, event_type, to_state, agent_id, created_at)
         SELECT fleet, id, 'registered', 'ready', 'op', created_at FROM work_units WHERE fleet = 'g'",
    )
    .await;
    claim(app, "g1", "A", "2026-01-05T10:00:00Z").await;
    start(app, "g1", "2026-01-05T10:05:00Z").await;
    cost(app, "g1", 100, "2026-01-05T11:00:00Z").await;
    verify(app, "g1", "2026-01-05T11:30:00Z").await;
    dispose(app, "g1", "MIGRATED", "2026-01-05T12:00:00Z").await;

    claim(app, "g2", "C", "2026-01-05T15:00:00Z").await;
    claim(app, "g2", "B", "2026-01-06T08:00:00Z").await;
    start(app, "g2", "2026-01-06T08:30:00Z").await;
    cost(app, "g2", 50, "2026-01-06T11:00:00Z").await;
    verify(app, "g2", "2026-01-06T11:30:00Z").await;
    dispose(app, "g2", "MIGRATED", "2026-01-06T12:00:00Z").await;

    claim(app, "g3", "A", "2026-01-06T10:00:00Z").await;
    cost(app, "g3", 30, "2026-01-06T12:30:00Z").await;
    dispose(app, "g3", "DEAD", "2026-01-06T13:00:00Z").await;

    dispose(app, "g4", "DROPPED", "2026-01-13T09:00:00Z").await;

    // A question asked on each of two days.
    app.sql(
        "INSERT INTO blocking_questions (fleet, unit_id, attempt_id, question, status, asked_by, created_at, cancelled_at)
         SELECT fleet, unit_id, id, 'which copybook?', 'cancelled', agent_id, started_at + interval '1 minute', ended_at
           FROM work_unit_attempts WHERE fleet = 'g' AND agent_id IN ('A', 'C')",
    )
    .await;
}

fn refs(conn: &Value) -> Vec<&str> {
    conn["edges"].as_array().expect("edges").iter().map(|e| e["node"]["externalRef"].as_str().expect("ref")).collect()
}

#[tokio::test]
async fn lists_take_date_ranges_on_the_time_that_matters_to_each() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    calendar(&app).await;
    let op = Agent::new(&app, "g", "op", Role::Operator).await;
    // Two requests: at most five fleet-wide reads (each totalCount) in one.
    let mut d = serde_json::Map::new();
    for query in [
        r#"{
              firstWeek: units(filter: { until: "2026-01-12T00:00:00Z" }) { totalCount edges { node { externalRef } } }
              secondWeek: units(filter: { from: "2026-01-12T00:00:00Z" }) { totalCount edges { node { externalRef } } }
              middle: units(filter: { from: "2026-01-05T09:10:00Z", until: "2026-01-05T09:30:00Z" }, order: DESC) { edges { node { externalRef } } }
              tuesday: dispositions(disposed: { from: "2026-01-06T00:00:00Z", until: "2026-01-07T00:00:00Z" }) { totalCount edges { node { externalRef } } }
              since: dispositions(disposed: { from: "2026-01-06T00:00:00Z" }, disposition: MIGRATED) { totalCount edges { node { externalRef } } }
              afternoon: dispositions(disposed: { from: "2026-01-06T12:30:00Z" }) { totalCount edges { node { externalRef } } }
            }"#,
        r#"{
              mondayEvents: events(filter: { types: [TRANSITIONED, COST_RECORDED], from: "2026-01-05T00:00:00Z", until: "2026-01-06T00:00:00Z" }, order: ASC) { totalCount edges { node { eventType createdAt } } }
              tuesdayCosts: events(filter: { types: [COST_RECORDED], from: "2026-01-06T00:00:00Z" }) { totalCount }
              asked: questions(asked: { from: "2026-01-05T12:00:00Z" }) { totalCount edges { node { askedBy createdAt } } }
            }"#,
    ] {
        d.extend(op.run(query, json!({})).await.data().as_object().expect("data").clone());
    }
    let d = serde_json::Value::Object(d);
    assert_eq!(d["firstWeek"]["totalCount"], 4);
    assert_eq!(refs(&d["firstWeek"]), ["g1", "g2", "g3", "g4"]);
    assert_eq!(d["secondWeek"]["totalCount"], 2);
    assert_eq!(refs(&d["secondWeek"]), ["g5", "g6"]);
    assert_eq!(refs(&d["middle"]), ["g3", "g2"], "from inclusive, until exclusive");
    assert_eq!(d["tuesday"]["totalCount"], 2);
    assert_eq!(refs(&d["tuesday"]), ["g2", "g3"]);
    assert_eq!(refs(&d["since"]), ["g2"]);
    assert_eq!(d["since"]["totalCount"], 1, "the count keeps the disposition filter");
    // A range that cuts a day: that day's part counted from the rows, the rest from the day totals.
    assert_eq!(refs(&d["afternoon"]), ["g3", "g4"]);
    assert_eq!(d["afternoon"]["totalCount"], 2);
    assert_eq!(d["mondayEvents"]["totalCount"], 3);
    assert_eq!(
        d["mondayEvents"]["edges"],
        json!([
            { "node": { "eventType": "TRANSITIONED", "createdAt": "2026-01-05T10:05:00+00:00" } },
            { "node": { "eventType": "COST_RECORDED", "createdAt": "2026-01-05T11:00:00+00:00" } },
            { "node": { "eventType": "TRANSITIONED", "createdAt": "2026-01-05T11:30:00+00:00" } },
        ])
    );
    assert_eq!(d["tuesdayCosts"]["totalCount"], 2);
    assert_eq!(d["asked"]["totalCount"], 2);
    assert_eq!(
        d["asked"]["edges"],
        json!([
            { "node": { "askedBy": "C", "createdAt": "2026-01-05T15:01:00+00:00" } },
            { "node": { "askedBy": "A", "createdAt": "2026-01-06T10:01:00+00:00" } },
        ])
    );

    for (query, argument) in [
        (
            r#"{ units(filter: { from: "2026-01-02T00:00:00Z", until: "2026-01-01T00:00:00Z" }) { totalCount } }"#,
            "filter.until",
        ),
        (
            r#"{ events(filter: { from: "2026-01-02T00:00:00Z", until: "2026-01-01T00:00:00Z" }) { totalCount } }"#,
            "filter.until",
        ),
        (
            r#"{ dispositions(disposed: { from: "2026-01-02T00:00:00Z", until: "2026-01-01T00:00:00Z" }) { totalCount } }"#,
            "disposed.until",
        ),
        (
            r#"{ questions(asked: { from: "2026-01-02T00:00:00Z", until: "2026-01-01T00:00:00Z" }) { totalCount } }"#,
            "asked.until",
        ),
    ] {
        let r = op.run(query, json!({})).await;
        r.assert_code("INVALID_INPUT");
        assert_eq!(r.body["errors"][0]["extensions"]["argument"], argument);
    }
}

#[tokio::test]
async fn a_range_of_dispositions_pages_in_creation_order_with_its_filters() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    calendar(&app).await;
    // A unit registered before the range and disposed inside it, and one
    // disposed after it: the range is on the disposal, the order on creation.
    app.sql(
        "INSERT INTO work_units (fleet, external_ref, domain, created_at) VALUES
           ('g', 'g0', 'asm', '2025-12-01T09:00:00Z'), ('g', 'g7', 'default', '2026-01-05T08:00:00Z')",
    )
    .await;
    dispose(&app, "g0", "DEFERRED", "2026-01-06T09:00:00Z").await;
    dispose(&app, "g7", "DROPPED", "2026-01-20T09:00:00Z").await;
    let op = Agent::new(&app, "g", "op", Role::Operator).await;
    const PAGE: &str = "query($after: String, $d: Disposition, $domain: String) {
        dispositions(first: 2, after: $after, disposition: $d, domain: $domain,
                     disposed: { from: \"2026-01-05T00:00:00Z\", until: \"2026-01-14T00:00:00Z\" }) {
            totalCount edges { node { externalRef } } pageInfo { hasNextPage endCursor } } }";
    let pages = |vars: Value| {
        let op = &op;
        async move {
            let (mut seen, mut after, mut totals) = (Vec::new(), Value::Null, Vec::new());
            loop {
                let mut v = vars.clone();
                v["after"] = after;
                let d = op.run(PAGE, v).await.data()["dispositions"].clone();
                seen.extend(refs(&d).into_iter().map(str::to_owned));
                totals.push(d["totalCount"].as_i64().expect("totalCount"));
                if d["pageInfo"]["hasNextPage"] != json!(true) {
                    return (seen, totals);
                }
                after = d["pageInfo"]["endCursor"].clone();
            }
        }
    };
    let (all, totals) = pages(json!({})).await;
    assert_eq!(all, ["g0", "g1", "g2", "g3", "g4"], "creation order across pages, g7 outside the range");
    assert!(totals.iter().all(|&t| t == 5), "every page counts the whole range: {totals:?}");
    let (default, totals) = pages(json!({ "domain": "default" })).await;
    assert_eq!(default, ["g1", "g2", "g4"]);
    assert!(totals.iter().all(|&t| t == 3), "{totals:?}");
    let (migrated, totals) = pages(json!({ "d": "MIGRATED" })).await;
    assert_eq!(migrated, ["g1", "g2"]);
    assert_eq!(totals, [2]);
    let (none, totals) = pages(json!({ "d": "DEAD", "domain": "default" })).await;
    assert!(none.is_empty());
    assert_eq!(totals, [0]);
}

const THROUGHPUT: &str = "query($b: ThroughputBucket!, $from: DateTime, $until: DateTime, $d: String) {
    throughput(bucket: $b, from: $from, until: $until, domain: $d) { start disposition count costCents distinctAgents } }";

fn bucket(start: &str, disposition: &str, count: i64, cost: i64, agents: i64) -> Value {
    json!({ "start": start, "disposition": disposition, "count": count, "costCents": cost, "distinctAgents": agents })
}

#[tokio::test]
async fn throughput_per_day_and_week_and_cost_over_a_range() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    calendar(&app).await;
    let op = Agent::new(&app, "g", "op", Role::Operator).await;
    let run = |vars: Value| {
        let op = &op;
        async move { op.run(THROUGHPUT, vars).await.data()["throughput"].clone() }
    };
    assert_eq!(
        run(json!({ "b": "DAY" })).await,
        json!([
            bucket("2026-01-05T00:00:00+00:00", "MIGRATED", 1, 100, 1),
            bucket("2026-01-06T00:00:00+00:00", "MIGRATED", 1, 50, 2),
            bucket("2026-01-06T00:00:00+00:00", "DEAD", 1, 30, 1),
            bucket("2026-01-13T00:00:00+00:00", "DROPPED", 1, 0, 0),
        ])
    );
    assert_eq!(
        run(json!({ "b": "WEEK" })).await,
        json!([
            bucket("2026-01-05T00:00:00+00:00", "MIGRATED", 2, 150, 3),
            bucket("2026-01-05T00:00:00+00:00", "DEAD", 1, 30, 1),
            bucket("2026-01-12T00:00:00+00:00", "DROPPED", 1, 0, 0),
        ])
    );
    assert_eq!(
        run(json!({ "b": "DAY", "from": "2026-01-06T00:00:00Z", "until": "2026-01-07T00:00:00Z" })).await,
        json!([
            bucket("2026-01-06T00:00:00+00:00", "MIGRATED", 1, 50, 2),
            bucket("2026-01-06T00:00:00+00:00", "DEAD", 1, 30, 1)
        ])
    );
    // A week the range cuts: its whole days from the day totals and the day
    // sets of agents, the part of a day cut at an end from the units
    //; agents counted once across both.
    let whole_tuesday = json!([
        bucket("2026-01-05T00:00:00+00:00", "MIGRATED", 2, 150, 3),
        bucket("2026-01-05T00:00:00+00:00", "DEAD", 1, 30, 1),
    ]);
    assert_eq!(
        run(json!({ "b": "WEEK", "from": "2026-01-05T06:00:00Z", "until": "2026-01-07T00:00:00Z" })).await,
        whole_tuesday
    );
    assert_eq!(
        run(json!({ "b": "WEEK", "from": "2026-01-05T00:00:00Z", "until": "2026-01-06T12:30:00Z" })).await,
        json!([bucket("2026-01-05T00:00:00+00:00", "MIGRATED", 2, 150, 3)])
    );
    assert_eq!(
        run(json!({ "b": "WEEK", "d": "asm" })).await,
        json!([bucket("2026-01-05T00:00:00+00:00", "DEAD", 1, 30, 1)])
    );
    op.run(THROUGHPUT, json!({ "b": "DAY", "from": "2026-01-07T00:00:00Z", "until": "2026-01-06T00:00:00Z" }))
        .await
        .assert_code("INVALID_INPUT");

    // Cost recorded on Tuesday, per domain and per agent.
    let cost = "query($g: CostGroupBy!) { costSummary(groupBy: $g, from: \"2026-01-06T00:00:00Z\", to: \"2026-01-07T00:00:00Z\") { key units costCents avgCostCents } }";
    assert_eq!(
        op.run(cost, json!({ "g": "DOMAIN" })).await.data()["costSummary"],
        json!([
            { "key": "asm", "units": 1, "costCents": 30, "avgCostCents": 30.0 },
            { "key": "default", "units": 1, "costCents": 50, "avgCostCents": 50.0 },
        ])
    );
    assert_eq!(
        op.run(cost, json!({ "g": "AGENT" })).await.data()["costSummary"],
        json!([
            { "key": "A", "units": 1, "costCents": 30, "avgCostCents": 30.0 },
            { "key": "B", "units": 1, "costCents": 50, "avgCostCents": 50.0 },
        ])
    );

    // Another fleet's throughput is empty.
    let other = Agent::new(&app, "other", "op", Role::Reader).await;
    assert_eq!(other.run(THROUGHPUT, json!({ "b": "WEEK" })).await.data()["throughput"], json!([]));
}

#[tokio::test]
async fn north_star_views_report_exact_numbers_under_row_level_security() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    calendar(&app).await;
    let q = |sql: &'static str| app.app_role_query(Some("g"), sql);
    assert_eq!(
        q("SELECT start, disposition, units, cost_cents, distinct_agents FROM v_throughput_weekly ORDER BY start, disposition").await,
        vec![
            json!({ "start": "2026-01-05T00:00:00+00:00", "disposition": "MIGRATED", "units": 2, "cost_cents": 150, "distinct_agents": 3 }),
            json!({ "start": "2026-01-05T00:00:00+00:00", "disposition": "DEAD", "units": 1, "cost_cents": 30, "distinct_agents": 1 }),
            json!({ "start": "2026-01-12T00:00:00+00:00", "disposition": "DROPPED", "units": 1, "cost_cents": 0, "distinct_agents": 0 }),
        ]
    );
    assert_eq!(
        q("SELECT start, disposition, units FROM v_throughput_daily ORDER BY start, disposition").await.len(),
        4
    );
    assert_eq!(
        q("SELECT week, units, cost_cents FROM v_verified_throughput_weekly").await,
        vec![json!({ "week": "2026-01-05T00:00:00+00:00", "units": 3, "cost_cents": 180 })],
        "g4 was dropped without cost"
    );
    // Cycle times 7200 s (g1), 75600 s (g2, from C's first claim), 10800 s (g3).
    assert_eq!(
        q("SELECT week, units, median_seconds, p90_seconds FROM v_cycle_time_weekly").await,
        vec![json!({ "week": "2026-01-05T00:00:00+00:00", "units": 3, "median_seconds": 10800, "p90_seconds": 62640 })]
    );
    assert_eq!(
        q("SELECT day, agents, claims FROM v_claiming_agents_daily ORDER BY day").await,
        vec![
            json!({ "day": "2026-01-05T00:00:00+00:00", "agents": 2, "claims": 2 }),
            json!({ "day": "2026-01-06T00:00:00+00:00", "agents": 2, "claims": 2 }),
        ]
    );
    assert_eq!(
        q("SELECT week, claims, verified, conversion, stale, stale_rate, never_transitioned FROM v_claims_weekly")
            .await,
        vec![json!({ "week": "2026-01-05T00:00:00+00:00", "claims": 4, "verified": 2, "conversion": 0.5,
                     "stale": 1, "stale_rate": 0.25, "never_transitioned": 2 })]
    );
    assert_eq!(
        q("SELECT week, disposed, reworked, rework_rate FROM v_rework_rate_weekly ORDER BY week").await,
        vec![
            json!({ "week": "2026-01-05T00:00:00+00:00", "disposed": 3, "reworked": 1, "rework_rate": 0.3333 }),
            json!({ "week": "2026-01-12T00:00:00+00:00", "disposed": 1, "reworked": 0, "rework_rate": 0.0 }),
        ]
    );
    assert_eq!(
        q("SELECT external_ref, attempt_no, agent_id, outcome FROM v_claimed_never_transitioned ORDER BY external_ref")
            .await,
        vec![
            json!({ "external_ref": "g2", "attempt_no": 1, "agent_id": "C", "outcome": "superseded" }),
            json!({ "external_ref": "g3", "attempt_no": 1, "agent_id": "A", "outcome": "abandoned" }),
        ]
    );

    // The same numbers in GraphQL.
    let op = Agent::new(&app, "g", "op", Role::Reader).await;
    let resp = op
        .run(
            "{ weeklyMetrics { week claims verifiedClaims conversion staleClaims staleClaimRate neverStarted
                               disposed reworked reworkRate verifiedUnits verifiedCostCents medianCycleSeconds p90CycleSeconds }
               claimingAgents { day agents claims }
               later: weeklyMetrics(from: \"2026-01-06T00:00:00Z\") { week }
               tuesday: claimingAgents(from: \"2026-01-06T00:00:00Z\", until: \"2026-01-07T00:00:00Z\") { day } }",
            json!({}),
        )
        .await;
    let d = resp.data();
    assert_eq!(
        d["weeklyMetrics"],
        json!([
            { "week": "2026-01-05T00:00:00+00:00", "claims": 4, "verifiedClaims": 2, "conversion": 0.5, "staleClaims": 1,
              "staleClaimRate": 0.25, "neverStarted": 2, "disposed": 3, "reworked": 1, "reworkRate": 0.3333,
              "verifiedUnits": 3, "verifiedCostCents": 180, "medianCycleSeconds": 10800.0, "p90CycleSeconds": 62640.0 },
            { "week": "2026-01-12T00:00:00+00:00", "claims": 0, "verifiedClaims": 0, "conversion": null, "staleClaims": 0,
              "staleClaimRate": null, "neverStarted": 0, "disposed": 1, "reworked": 0, "reworkRate": 0.0,
              "verifiedUnits": 0, "verifiedCostCents": 0, "medianCycleSeconds": null, "p90CycleSeconds": null },
        ])
    );
    assert_eq!(
        d["claimingAgents"],
        json!([
            { "day": "2026-01-05T00:00:00+00:00", "agents": 2, "claims": 2 },
            { "day": "2026-01-06T00:00:00+00:00", "agents": 2, "claims": 2 },
        ])
    );
    assert_eq!(d["later"], json!([{ "week": "2026-01-12T00:00:00+00:00" }]));
    assert_eq!(d["tuesday"], json!([{ "day": "2026-01-06T00:00:00+00:00" }]));
    // Those weeks have ended: a fold keeps their cycle times (migration
    // 0020), and reads take them from there, with the same numbers.
    app.project().await;
    let kept = app.sql_json("SELECT week, units, median_seconds FROM cycle_weeks WHERE fleet = 'g'").await;
    assert_eq!(kept, vec![json!({ "week": "2026-01-05", "units": 3, "median_seconds": 10800 })]);
    let cycles = "{ weeklyMetrics { week medianCycleSeconds p90CycleSeconds } }";
    let by_rows = json!([
        { "week": "2026-01-05T00:00:00+00:00", "medianCycleSeconds": 10800.0, "p90CycleSeconds": 62640.0 },
        { "week": "2026-01-12T00:00:00+00:00", "medianCycleSeconds": null, "p90CycleSeconds": null },
    ]);
    assert_eq!(op.run(cycles, json!({})).await.data()["weeklyMetrics"], by_rows);
    app.sql("UPDATE cycle_weeks SET median_seconds = 1 WHERE fleet = 'g'").await;
    let read = op.run(cycles, json!({})).await;
    assert_eq!(read.data()["weeklyMetrics"][0]["medianCycleSeconds"], json!(1.0), "read from the kept week");
    // Reopened (as a disposal written into it does), the week is read from the rows again.
    app.sql("SELECT cycle_week_reopened('g', '2026-01-05')").await;
    assert_eq!(op.run(cycles, json!({})).await.data()["weeklyMetrics"], by_rows);
    // A disposal written into an ended week moves the fleet's mark back to
    // it when the projector folds it.
    app.project().await;
    let mark = "SELECT until::text AS until FROM cycle_weeks_until WHERE fleet = 'g'";
    assert_ne!(app.sql_json(mark).await, vec![json!({ "until": "2026-01-12" })]);
    dispose(&app, "g5", "DEAD", "2026-01-14T09:00:00Z").await;
    app.live.fold_now().await.expect("a projector pass");
    assert_eq!(app.sql_json(mark).await, vec![json!({ "until": "2026-01-12" })]);

    let other = Agent::new(&app, "other", "op", Role::Reader).await;
    assert_eq!(
        other.run("{ weeklyMetrics { week } claimingAgents { day } }", json!({})).await.data(),
        &json!({ "weeklyMetrics": [], "claimingAgents": [] })
    );

    // Every view is security_invoker: another fleet's session sees none of it.
    for view in [
        "v_throughput_daily",
        "v_throughput_weekly",
        "v_verified_throughput_weekly",
        "v_cycle_time_weekly",
        "v_claiming_agents_daily",
        "v_claims_weekly",
        "v_rework_rate_weekly",
        "v_claimed_never_transitioned",
        "v_disposals",
        "v_attempt_end",
    ] {
        let rows = app.app_role_query(Some("other"), &format!("SELECT count(*) AS n FROM {view}")).await;
        assert_eq!(rows, vec![json!({ "n": 0 })], "{view}");
    }
}
