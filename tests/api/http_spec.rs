//! GraphQL over HTTP by the specification (SPEC §4; the full audit is
//! `node_client::the_graphql_http_audit_passes_with_no_error_or_warning`):
//! content negotiation, request errors as 400 without `data` under
//! `application/graphql-response+json`, and GET for queries only.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{TestApp, spawn_app};

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";

async fn post(app: &TestApp, token: &str, accept: Option<&str>, body: Value) -> (u16, String, Value) {
    let mut request = app.http.post(app.url("/graphql")).bearer_auth(token).json(&body);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    answer(request.send().await.expect("POST")).await
}

async fn answer(resp: reqwest::Response) -> (u16, String, Value) {
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, content_type, body)
}

#[tokio::test]
async fn the_response_type_follows_accept() {
    let app = spawn_app().await;
    let token = app.token("f", "reader", Role::Reader).await;
    let me = json!({ "query": "{ me { name } }" });
    for (accept, expected) in [
        (None, "application/json"),
        (Some("application/json"), "application/json"),
        (Some("*/*"), "application/json"),
        (Some(GRAPHQL_RESPONSE), GRAPHQL_RESPONSE),
        (Some("application/graphql-response+json, application/json;q=0.9"), GRAPHQL_RESPONSE),
        (Some("application/json, application/graphql-response+json;q=0.5"), "application/json"),
    ] {
        let (status, content_type, body) = post(&app, &token, accept, me.clone()).await;
        assert_eq!(status, 200, "{accept:?}: {body}");
        assert!(content_type.starts_with(expected), "{accept:?}: {content_type}");
        assert_eq!(body["data"]["me"]["name"], "reader");
    }
    let (status, _, body) = post(&app, &token, Some("text/html"), me.clone()).await;
    assert_eq!(status, 406, "{body}");
    assert_eq!(body["errors"][0]["extensions"]["code"], "INVALID_INPUT");

    // A POST that is not JSON.
    let resp = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(me.to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 415);
    // No token: still 401 with a GraphQL error body, whatever was accepted.
    let resp =
        app.http.post(app.url("/graphql")).header("accept", GRAPHQL_RESPONSE).json(&me).send().await.expect("POST");
    let (status, _, body) = answer(resp).await;
    assert_eq!((status, body["errors"][0]["extensions"]["code"].as_str()), (401, Some("UNAUTHENTICATED")));
}

#[tokio::test]
async fn request_errors_are_400_without_data_under_graphql_response_json() {
    let app = spawn_app().await;
    let token = app.token("f", "reader", Role::Reader).await;
    let cases = [
        (json!({ "query": "{" }), "GRAPHQL_PARSE_FAILED"),
        (json!({ "query": "{ noSuchField }" }), "GRAPHQL_VALIDATION_FAILED"),
        (
            json!({ "query": "query($id: UUID!) { unit(id: $id) { id } }", "variables": {} }),
            "GRAPHQL_VALIDATION_FAILED",
        ),
        (
            json!({ "query": "query($id: UUID!) { unit(id: $id) { id } }", "variables": { "id": 3 } }),
            "GRAPHQL_VALIDATION_FAILED",
        ),
    ];
    for (body, code) in cases {
        let (status, _, answer) = post(&app, &token, Some(GRAPHQL_RESPONSE), body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.get("data").is_none(), "{body}: {answer}");
        assert_eq!(answer["errors"][0]["extensions"]["code"], code, "{body}: {answer}");
        // application/json: 200, the same errors.
        let (status, _, answer) = post(&app, &token, Some("application/json"), body.clone()).await;
        assert_eq!(status, 200, "{body}: {answer}");
        assert_eq!(answer["errors"][0]["extensions"]["code"], code, "{body}: {answer}");
    }
    // Parameters of the wrong shape.
    for body in [json!({}), json!({ "query": 1 }), json!({ "query": "{ me { name } }", "variables": "x" })] {
        let (status, _, answer) = post(&app, &token, None, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["errors"][0]["extensions"]["code"], "INVALID_INPUT");
    }
    // An execution error is not a request error: 200 with `data`.
    let (status, _, answer) =
        post(&app, &token, Some(GRAPHQL_RESPONSE), json!({ "query": "mutation { registerUnits(units: []) { id } }" }))
            .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("data").is_some(), "{answer}");
    // Every root field skipped: executed, with null data and no error.
    let skipped =
        json!({ "query": "query($w: Boolean!) { serverTime @include(if: $w) }", "variables": { "w": false } });
    let (status, _, answer) = post(&app, &token, Some(GRAPHQL_RESPONSE), skipped).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({ "data": null }));
}

#[tokio::test]
async fn get_runs_queries_only() {
    let app = spawn_app().await;
    let token = app.token("f", "op", Role::Operator).await;
    let get = |query: &[(&str, &str)]| {
        let request = app.http.get(app.url("/graphql")).bearer_auth(&token).query(query);
        async move { answer(request.send().await.expect("GET")).await }
    };
    let (status, _, body) = get(&[
        ("query", "query($r: String!) { unitByRef(externalRef: $r) { id } me { name } }"),
        ("variables", r#"{"r":"x"}"#),
    ])
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["me"]["name"], "op");

    let (status, _, body) =
        get(&[("query", "mutation { registerUnits(units: [{externalRef: \"by-get\"}]) { id } }")]).await;
    assert_eq!(status, 405, "{body}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);
    let (status, _, _) = get(&[("variables", "{}")]).await;
    assert_eq!(status, 400);
    // The same authentication and limits as POST.
    let resp = app.http.get(app.url("/graphql")).query(&[("query", "{ me { name } }")]).send().await.expect("GET");
    assert_eq!(resp.status(), 401);
    let mut deep = "name".to_owned();
    for _ in 0..12 {
        deep = format!("ofType {{ {deep} }}");
    }
    let (_, _, body) =
        get(&[("query", &format!("{{ __type(name: \"WorkUnit\") {{ fields {{ type {{ {deep} }} }} }} }}"))]).await;
    assert!(body["errors"][0]["message"].as_str().unwrap_or_default().contains("nested too deep"), "{body}");
}

/// The GraphQL spec's serialized map ordering: a response's entries come in
/// the order the query selected them, not sorted (the response was once built
/// again as a `serde_json` map, which sorts its keys), in a single request and
/// in a batch alike.
#[tokio::test]
async fn response_maps_follow_the_selection_order() {
    let app = spawn_app().await;
    let token = app.token("f", "reader", Role::Reader).await;
    let query = "{ zulu: serverTime me { name fleet } alpha: serverTime }";
    let in_order = |text: &str, keys: &[&str]| {
        let at: Vec<usize> =
            keys.iter().map(|k| text.find(&format!("\"{k}\"")).unwrap_or_else(|| panic!("{k} in {text}"))).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{keys:?} out of selection order in {text}");
    };
    for body in [json!({ "query": query }), json!([{ "query": query }, { "query": query }])] {
        let resp = app.http.post(app.url("/graphql")).bearer_auth(&token).json(&body).send().await.expect("POST");
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.expect("body");
        let answers: Value = serde_json::from_str(&text).expect("JSON");
        let first = if answers.is_array() { &answers[0] } else { &answers };
        assert_eq!(first["data"]["me"]["name"], "reader", "{text}");
        in_order(&text, &["zulu", "me", "name", "fleet", "alpha"]);
    }
}
