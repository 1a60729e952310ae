//! HTTP-level limits of SPEC §9: body size, batch size, depth and complexity.
//! Each is refused with a clear error and changes nothing.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::spawn_app;

#[tokio::test]
async fn oversized_bodies_and_batches_are_refused() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let auth = format!("Bearer {op}");

    // A write that would register a unit, over the limit by its padding:
    // refused whole, nothing registered; the same write without the padding
    // goes through (so the refusal, not the document, kept the ledger empty).
    let register = "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }";
    let write = |pad: usize| {
        json!({ "query": register, "variables": { "u": [{ "externalRef": "big" }], "pad": "x".repeat(pad) } })
            .to_string()
    };
    let resp = app.post_raw(Some(&auth), write(256 * 1024)).await;
    assert_eq!(resp.status, 413);
    resp.assert_code("INVALID_INPUT");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0, "an oversized request wrote");
    let resp = app.post_raw(Some(&auth), write(1024)).await;
    assert_eq!(resp.status, 200, "{:#}", resp.body);
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE external_ref = 'big'").await, 1);

    // Each operation of a batch registers its own unit.
    let batch = |n: usize| {
        let ops = (0..n)
            .map(|i| json!({ "query": format!("mutation {{ registerUnits(units: [{{externalRef: \"batch-{i}\"}}]) {{ id }} }}") }))
            .collect();
        serde_json::Value::Array(ops).to_string()
    };
    let resp = app.post_raw(Some(&auth), batch(11)).await;
    assert_eq!(resp.status, 400);
    resp.assert_code("INVALID_INPUT");
    assert!(resp.message().contains("1 to 10"), "{}", resp.message());
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE external_ref LIKE 'batch-%'").await, 0);

    let resp = app.post_raw(Some(&auth), batch(10)).await;
    assert_eq!(resp.status, 200);
    let results = resp.body.as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 10, "{:#}", resp.body);
    for result in &results {
        assert!(result.get("errors").is_none(), "{result:#}");
        assert_eq!(result["data"]["registerUnits"].as_array().map(Vec::len), Some(1), "{result:#}");
    }
    // Ten operations ran: ten units, each registered once.
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE external_ref LIKE 'batch-%'").await, 10);

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

/// Every field of a unit with its attempts, open question and current attempt:
/// the largest page an agent or a dashboard legitimately asks for.
const FULL_PAGE: &str = "query($first: Int) { units(first: $first) { pageInfo { hasNextPage endCursor } edges { cursor node {
    id fleet externalRef domain state disposition disposedAt workflowId claimedBy currentAttemptId leaseExpiresAt
    lastHeartbeatAt attemptCount costCents evidenceUrls createdAt updatedAt stalled legalActions
    currentAttempt { id unitId attemptNo agentId outcome costCents evidenceUrl startedAt endedAt }
    attempts { id unitId attemptNo agentId outcome costCents evidenceUrl startedAt endedAt }
    openQuestion { id unitId attemptId question status answer assigneeGroup askedBy answeredBy createdAt answeredAt cancelledAt }
} } } }";

#[tokio::test]
async fn request_cost_scales_with_first() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..500).map(|i| format!("u{i:03}")).collect();
    app.register(&op, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;

    // The largest legitimate page passes, as a literal and as a variable.
    let page = app.gql(&op, FULL_PAGE, json!({ "first": 500 })).await;
    assert_eq!(page.data()["units"]["edges"].as_array().map(Vec::len), Some(500));

    // A fan-out of 500 units x 500 events each (250,000 rows) is refused
    // before anything runs, whether `first` is written out or a variable.
    let fan_out = "query($n: Int) { units(first: 500) { edges { node { events(first: $n) { edges { node { id eventType } } } } } } }";
    for vars in [json!({ "n": 500 }), json!({ "n": 100 })] {
        let before = app.statements.load(std::sync::atomic::Ordering::SeqCst);
        let resp = app.gql(&op, fan_out, vars.clone()).await;
        assert_eq!(resp.status, 200);
        let message = resp.body["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("too complex"), "{vars}: {:#}", resp.body);
        assert!(resp.body["data"].is_null(), "nothing executed: {:#}", resp.body);
        // The token lookup, and nothing else.
        let sent = app.statements.load(std::sync::atomic::Ordering::SeqCst) - before;
        assert!(sent <= 1, "only the token lookup: {sent} statements");
    }
    // The cost follows the variable's value: two units with 500 events each pass.
    let few = "query($n: Int) { units(first: $n) { edges { node { events(first: 500) { edges { node { id } } } } } } }";
    app.gql(&op, few, json!({ "n": 2 })).await.data();
    let resp = app.gql(&op, few, json!({ "n": 500 })).await;
    assert!(resp.message().contains("too complex"), "{:#}", resp.body);

    // Aliases add up: one list of 500 units with a few events each passes,
    // ten of them in one document are refused.
    let one = "units(first: 500) { edges { node { id events(first: 5) { edges { node { id } } } } } }";
    app.gql(&op, &format!("{{ a0: {one} }}"), json!({})).await.data();
    let ten: String = (0..10).map(|i| format!(" a{i}: {one}")).collect();
    let resp = app.gql(&op, &format!("{{{ten} }}"), json!({})).await;
    let message = resp.body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("too complex"), "{:#}", resp.body);
}

/// Attacks the fleet-wide read budget through a batch (issue item 5): ten
/// operations of five such reads each ran fifty fleet-wide scans in one
/// HTTP request. The budget prices the request (SPEC §9): over it, every
/// operation of the batch answers the budget's refusal and nothing of the
/// request runs, not even its write; within it, the batch runs.
#[tokio::test]
async fn the_fleet_wide_read_budget_prices_a_whole_batch() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let auth = format!("Bearer {op}");
    // Distinct reads (identical queries would share one execution).
    let reads = |op: usize, n: usize| {
        let fields: String = (0..n).map(|i| format!("a{i}: queueDepth(domain: \"d{op}-{i}\") {{ ready }} ")).collect();
        json!({ "query": format!("{{ {fields}}}") })
    };
    let register = json!({ "query": "mutation { registerUnits(units: [{externalRef: \"batched\"}]) { id } }" });
    let batched = "SELECT count(*) FROM work_units WHERE external_ref = 'batched'";

    let fifty: Vec<Value> = (0..10).map(|i| reads(i, 5)).collect();
    let six = vec![register.clone(), reads(0, 3), reads(1, 3)];
    for batch in [fifty, six] {
        let mark = app.statement_mark();
        let resp = app.post_raw(Some(&auth), Value::Array(batch.clone()).to_string()).await;
        let answers = resp.body.as_array().unwrap_or_else(|| panic!("a batch answer: {:#}", resp.body));
        assert_eq!(answers.len(), batch.len(), "{:#}", resp.body);
        for answer in answers {
            assert_eq!(answer["errors"][0]["extensions"]["code"], "GRAPHQL_VALIDATION_FAILED", "{answer:#}");
            let message = answer["errors"][0]["message"].as_str().unwrap_or_default();
            assert!(message.contains("fleet-wide reads"), "{answer:#}");
            assert!(answer.get("data").is_none_or(Value::is_null), "{answer:#}");
        }
        let sent = app.request_statements_since(mark);
        assert!(sent.is_empty(), "nothing of the refused request runs: {sent:#?}");
        assert_eq!(app.sql_i64(batched).await, 0, "the refused batch's write ran");
    }

    // Five reads spread over a batch, with its write: all of it runs.
    let five = vec![register, reads(0, 2), reads(1, 3)];
    let resp = app.post_raw(Some(&auth), Value::Array(five).to_string()).await;
    for answer in resp.body.as_array().cloned().unwrap_or_default() {
        assert!(answer.get("errors").is_none(), "{answer:#}");
    }
    assert_eq!(app.sql_i64(batched).await, 1);
}
