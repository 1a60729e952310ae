//! HTTP-level limits of SPEC §9: body size, batch size, depth and complexity.
//! Each is refused with a clear error and changes nothing.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::spawn_app;

#[tokio::test]
async fn oversized_bodies_and_batches_are_refused() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let auth = format!("Bearer {op}");

    let padding = "x".repeat(256 * 1024);
    let big = json!({ "query": "{ me { name } }", "variables": { "pad": padding } }).to_string();
    let resp = app.post_raw(Some(&auth), big).await;
    assert_eq!(resp.status, 413);
    resp.assert_code("INVALID_INPUT");

    let op_json = json!({ "query": "mutation { registerUnits(units: [{externalRef: \"b\"}]) { id } }" });
    let eleven = serde_json::Value::Array(vec![op_json.clone(); 11]).to_string();
    let resp = app.post_raw(Some(&auth), eleven).await;
    assert_eq!(resp.status, 400);
    resp.assert_code("INVALID_INPUT");
    assert!(resp.message().contains("1 to 10"), "{}", resp.message());
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);

    let ten = serde_json::Value::Array(vec![op_json; 10]).to_string();
    let resp = app.post_raw(Some(&auth), ten).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.as_array().map(Vec::len), Some(10));

    let resp = app.post_raw(Some(&auth), "not json".to_owned()).await;
    assert_eq!(resp.status, 400);
    resp.assert_code("INVALID_INPUT");
}

#[tokio::test]
async fn queries_deeper_than_twelve_are_refused() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    // Introspection nests arbitrarily deep: 13 levels of ofType.
    let mut inner = "name".to_owned();
    for _ in 0..12 {
        inner = format!("ofType {{ {inner} }}");
    }
    let query = format!("{{ __type(name: \"WorkUnit\") {{ fields {{ type {{ {inner} }} }} }} }}");
    let resp = app.gql(&op, &query, json!({})).await;
    assert_eq!(resp.status, 200);
    let message = resp.body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("nested too deep"), "{:#}", resp.body);
}

#[tokio::test]
async fn queries_over_the_complexity_budget_are_refused_before_running() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    // A small document that fans out tenfold per level through fragments:
    // about 120,000 fields, far over the budget, well under depth 12.
    let mut doc = String::from("fragment L0 on WorkUnit {");
    for i in 0..10 {
        doc.push_str(&format!(" a{i}: id"));
    }
    doc.push_str(" }\n");
    for level in 1..=4 {
        doc.push_str(&format!("fragment L{level} on WorkUnit {{"));
        for i in 0..10 {
            doc.push_str(&format!(" b{i}: currentAttempt {{ unit {{ ...L{} }} }}", level - 1));
        }
        doc.push_str(" }\n");
    }
    doc.push_str("query($id: UUID!) { unit(id: $id) { ...L4 } }");
    let before = app.statements.load(std::sync::atomic::Ordering::SeqCst);
    let resp = app.gql(&op, &doc, json!({ "id": uuid::Uuid::new_v4() })).await;
    assert_eq!(resp.status, 200);
    let message = resp.body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("too complex"), "{:#}", resp.body);
    assert!(resp.body["data"].is_null(), "nothing executed: {:#}", resp.body);
    // Only the token lookup reached the database.
    assert_eq!(app.statements.load(std::sync::atomic::Ordering::SeqCst) - before, 1);
}
