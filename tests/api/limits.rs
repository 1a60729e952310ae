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
