//! `registerUnits`: idempotent by external ref; every SPEC §9 limit that
//! applies is INVALID_INPUT and writes nothing.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{TestApp, spawn_app};

const REGISTER: &str = "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id externalRef domain workflowId state attemptCount costCents } }";

async fn counts(app: &TestApp) -> (i64, i64) {
    (app.sql_i64("SELECT count(*) FROM work_units").await, app.sql_i64("SELECT count(*) FROM work_unit_events").await)
}

#[tokio::test]
async fn registering_again_returns_the_same_unit_and_writes_no_event() {
    let app = spawn_app().await;
    let op = app.token("f", "importer", Role::Operator).await;
    let first = app
        .gql(
            &op,
            REGISTER,
            json!({ "u": [{ "externalRef": "cobol/PAY001", "domain": "payroll", "workflowId": "wf-1" }] }),
        )
        .await;
    let unit = first.data()["registerUnits"][0].clone();
    assert_eq!(unit["state"], "READY");
    assert_eq!(unit["domain"], "payroll");
    assert_eq!(unit["workflowId"], "wf-1");
    assert_eq!(counts(&app).await, (1, 1));
    let event = &app.sql_json("SELECT event_type::text, to_state::text, agent_id FROM work_unit_events").await[0];
    assert_eq!(event, &json!({ "event_type": "registered", "to_state": "ready", "agent_id": "importer" }));

    // Re-register (with other attributes) plus a new one, and a duplicate inside the call.
    let again = app
        .gql(
            &op,
            REGISTER,
            json!({ "u": [
                { "externalRef": "cobol/PAY002" },
                { "externalRef": "cobol/PAY001", "domain": "elsewhere" },
                { "externalRef": "cobol/PAY002" },
            ] }),
        )
        .await;
    let units = again.data()["registerUnits"].as_array().expect("list").clone();
    assert_eq!(units.len(), 3, "one result per input, in order");
    assert_eq!(units[1], unit, "existing unit returned untouched");
    assert_eq!(units[0]["id"], units[2]["id"]);
    assert_eq!(units[0]["domain"], "default");
    assert_eq!(counts(&app).await, (2, 2), "only the new unit wrote an event");
}

#[tokio::test]
async fn concurrent_registrations_of_one_ref_create_one_unit() {
    let app = spawn_app().await;
    let op = app.token("f", "importer", Role::Operator).await;
    let calls = (0..16).map(|_| app.gql(&op, REGISTER, json!({ "u": [{ "externalRef": "race" }] })));
    let results = futures::future::join_all(calls).await;
    let ids: std::collections::HashSet<String> =
        results.iter().map(|r| r.data()["registerUnits"][0]["id"].as_str().expect("id").to_owned()).collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(counts(&app).await, (1, 1));
}

#[tokio::test]
async fn every_register_limit_is_invalid_input_and_writes_nothing() {
    let app = spawn_app().await;
    let op = app.token("f", "importer", Role::Operator).await;
    let ok = |r: &str| json!({ "externalRef": r });
    let too_many: Vec<Value> = (0..1001).map(|i| ok(&format!("u{i}"))).collect();
    let cases = vec![
        ("empty list", json!([]), "units"),
        ("1001 units", json!(too_many), "units"),
        ("empty ref", json!([ok("fine"), ok("")]), "units[1].externalRef"),
        ("257-char ref", json!([ok(&"r".repeat(257))]), "units[0].externalRef"),
        ("control char", json!([ok("a\u{1}b")]), "units[0].externalRef"),
        ("newline", json!([ok("a\nb")]), "units[0].externalRef"),
        ("empty domain", json!([{ "externalRef": "x", "domain": "" }]), "units[0].domain"),
        ("long workflow", json!([{ "externalRef": "x", "workflowId": "w".repeat(257) }]), "units[0].workflowId"),
    ];
    for (case, units, argument) in cases {
        let resp = app.gql(&op, REGISTER, json!({ "u": units })).await;
        resp.assert_code("INVALID_INPUT");
        assert_eq!(resp.body["errors"][0]["extensions"]["argument"], argument, "{case}");
        assert!(resp.message().contains(argument), "{case}: {}", resp.message());
    }
    assert_eq!(counts(&app).await, (0, 0));

    // The boundaries themselves are accepted.
    let max: Vec<Value> = (0..1000).map(|i| ok(&format!("u{i}"))).collect();
    let resp = app.gql(&op, REGISTER, json!({ "u": max })).await;
    assert_eq!(resp.data()["registerUnits"].as_array().map(Vec::len), Some(1000));
    let resp = app.gql(&op, REGISTER, json!({ "u": [ok(&"é".repeat(256))] })).await;
    assert_eq!(resp.data()["registerUnits"][0]["externalRef"].as_str().map(|s| s.chars().count()), Some(256));
}
