//! The read path: keyset paging under concurrent writes, cursor validation,
//! and bounded SQL for nested lists (no N+1).

use std::collections::HashSet;

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

const UNITS_PAGE: &str = "query($first: Int, $after: String) { units(first: $first, after: $after) {
    edges { cursor node { id externalRef } } pageInfo { hasNextPage endCursor } } }";
const EVENTS_PAGE: &str = "query($first: Int, $after: String) { events(first: $first, after: $after) {
    edges { cursor node { id createdAt eventType } } pageInfo { hasNextPage endCursor } } }";

async fn register_many(app: &TestApp, token: &str, prefix: &str, n: usize) {
    let refs: Vec<String> = (0..n).map(|i| format!("{prefix}{i:05}")).collect();
    for chunk in refs.chunks(1000) {
        app.register(token, &chunk.iter().map(String::as_str).collect::<Vec<_>>()).await;
    }
}

/// Walks a connection to its end; returns the nodes in order.
async fn walk(app: &TestApp, token: &str, query: &str, field: &str, first: i32) -> Vec<Value> {
    let (mut nodes, mut after, mut pages) = (Vec::new(), Value::Null, 0);
    loop {
        let resp = app.gql(token, query, json!({ "first": first, "after": after })).await;
        let conn = resp.data()[field].clone();
        let edges = conn["edges"].as_array().expect("edges").clone();
        assert!(edges.len() <= first as usize);
        nodes.extend(edges.iter().map(|e| e["node"].clone()));
        pages += 1;
        if !conn["pageInfo"]["hasNextPage"].as_bool().expect("hasNextPage") {
            return nodes;
        }
        assert_eq!(conn["pageInfo"]["endCursor"], edges.last().expect("edge")["cursor"]);
        after = conn["pageInfo"]["endCursor"].clone();
        assert!(pages < 1000, "runaway paging");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walking_units_returns_each_once_in_order_while_others_are_inserted() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    register_many(&app, &op, "old-", 1234).await;

    let inserting = {
        let (op, http, url) = (op.clone(), app.http.clone(), app.url("/graphql"));
        tokio::spawn(async move {
            for batch in 0..40 {
                let units: Vec<Value> =
                    (0..10).map(|i| json!({ "externalRef": format!("new-{batch:03}-{i}") })).collect();
                let body = json!({ "query": "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }", "variables": { "u": units } });
                let resp = http.post(&url).bearer_auth(&op).json(&body).send().await.expect("insert");
                assert!(resp.status().is_success());
            }
        })
    };
    let walked = walk(&app, &op, UNITS_PAGE, "units", 100).await;
    inserting.await.expect("inserter");

    let ids: Vec<&str> = walked.iter().map(|n| n["id"].as_str().expect("id")).collect();
    assert_eq!(ids.len(), ids.iter().collect::<HashSet<_>>().len(), "no unit twice");
    let old: Vec<&str> =
        walked.iter().map(|n| n["externalRef"].as_str().expect("ref")).filter(|r| r.starts_with("old-")).collect();
    let expected: Vec<String> = (0..1234).map(|i| format!("old-{i:05}")).collect();
    assert_eq!(old, expected, "every original unit exactly once, oldest first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walking_events_newest_first_is_complete_while_events_are_written() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    register_many(&app, &op, "e-", 450).await;
    let before: HashSet<String> = app
        .sql_json("SELECT id::text AS id FROM work_unit_events")
        .await
        .into_iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();

    let writing = {
        let (op, http, url) = (op.clone(), app.http.clone(), app.url("/graphql"));
        tokio::spawn(async move {
            for i in 0..60 {
                let body = json!({ "query": format!("mutation {{ registerUnits(units: [{{externalRef: \"late-{i}\"}}]) {{ id }} }}") });
                http.post(&url).bearer_auth(&op).json(&body).send().await.expect("write");
            }
        })
    };
    let walked = walk(&app, &op, EVENTS_PAGE, "events", 100).await;
    writing.await.expect("writer");

    let ids: Vec<String> = walked.iter().map(|n| n["id"].as_str().expect("id").to_owned()).collect();
    assert_eq!(ids.len(), ids.iter().collect::<HashSet<_>>().len(), "no event twice");
    let seen: HashSet<String> = ids.iter().cloned().collect();
    assert!(before.is_subset(&seen), "every event that existed is listed");
    let times: Vec<chrono::DateTime<chrono::Utc>> =
        walked.iter().map(|n| n["createdAt"].as_str().expect("t").parse().expect("rfc3339")).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first");
}

#[tokio::test]
async fn foreign_and_garbage_cursors_and_bad_page_sizes_are_invalid_input() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    register_many(&app, &op, "c-", 3).await;
    let page = app.gql(&op, UNITS_PAGE, json!({ "first": 1 })).await;
    let unit_cursor = page.data()["units"]["pageInfo"]["endCursor"].clone();
    let event_cursor =
        app.gql(&op, EVENTS_PAGE, json!({ "first": 1 })).await.data()["events"]["pageInfo"]["endCursor"].clone();

    for (query, field, cursor) in [
        (EVENTS_PAGE, "events", unit_cursor.clone()),
        (UNITS_PAGE, "units", event_cursor),
        (UNITS_PAGE, "units", json!("not-a-cursor")),
        (UNITS_PAGE, "units", json!("d2wxOnU6MTIzOnh5eg")),
    ] {
        let r = app.gql(&op, query, json!({ "first": 1, "after": cursor })).await;
        r.assert_code("INVALID_INPUT");
        assert_eq!(r.body["errors"][0]["extensions"]["argument"], "after", "{field}");
    }
    for first in [0, -1, 501] {
        app.gql(&op, UNITS_PAGE, json!({ "first": first })).await.assert_code("INVALID_INPUT");
        app.gql(&op, EVENTS_PAGE, json!({ "first": first })).await.assert_code("INVALID_INPUT");
    }
    assert_eq!(
        app.gql(&op, UNITS_PAGE, json!({ "first": 500 })).await.data()["units"]["edges"].as_array().map(Vec::len),
        Some(3)
    );
    // The cursor is opaque but stable: the next page starts after it.
    let next = app.gql(&op, UNITS_PAGE, json!({ "first": 5, "after": unit_cursor })).await;
    assert_eq!(next.data()["units"]["edges"].as_array().map(Vec::len), Some(2));
}

const NESTED: &str = "query($first: Int) { units(first: $first) { edges { node {
    id externalRef currentAttempt { id agentId unit { id } } attempts { attemptNo outcome }
    openQuestion { id question unit { externalRef } } questions { id }
    events(first: 5) { edges { node { eventType unit { id } } } pageInfo { hasNextPage } }
} } } }";

/// Units with a claim, a cost, an open question, for the nested queries.
async fn busy_fleet(app: &TestApp, op: &str, n: usize) {
    register_many(app, op, "n-", n).await;
    for i in 0..3 {
        let agent = Agent::new(app, "f", &format!("a{i}"), Role::Agent).await;
        let claim = agent.claim_next(json!({})).await;
        let unit = claim.str("id");
        agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
        agent.block(&unit, "?", json!({})).await.data();
    }
}

#[tokio::test]
async fn nested_lists_issue_a_bounded_number_of_statements() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    busy_fleet(&app, &op, 200).await;

    let count = |first: i32| {
        let app = &app;
        let op = op.clone();
        async move {
            let mark = app.statement_mark();
            let resp = app.gql(&op, NESTED, json!({ "first": first })).await;
            let edges = resp.data()["units"]["edges"].as_array().expect("edges").len();
            assert_eq!(edges, first as usize);
            app.request_statements_since(mark).len()
        }
    };
    let small = count(20).await;
    let large = count(200).await;
    assert_eq!(small, large, "statements must not grow with the page: 20 units -> {small}, 200 units -> {large}");
    assert!(large <= 30, "{large} statements for one nested page");

    // And the nested data is right.
    let resp = app.gql(&op, NESTED, json!({ "first": 3 })).await;
    for edge in resp.data()["units"]["edges"].as_array().expect("edges") {
        let node = &edge["node"];
        assert_eq!(node["currentAttempt"]["unit"]["id"], node["id"]);
        assert_eq!(node["openQuestion"]["unit"]["externalRef"], node["externalRef"]);
        assert_eq!(node["events"]["edges"][0]["node"]["eventType"], "BLOCKED");
        assert_eq!(node["attempts"], json!([{ "attemptNo": 1, "outcome": null }]));
    }
}
