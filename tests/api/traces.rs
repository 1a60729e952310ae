//! Traces over OTLP/HTTP: `work-ledger serve` (the real binary, whose
//! `main` installs the exporter) with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing
//! at a receiver this test runs, which decodes the protobuf export requests.
//! The spans arrive: one per HTTP request, one per ledger operation with its
//! name, fleet, agent, unit and result code, never the token; an INTERNAL
//! error's correlation id is its trace id.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{serving_addr, spawn_app};
use crate::ws_client::Ws;

#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let store = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let store = store.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export request");
                let mut got = store.lock().expect("lock");
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            let attributes = span
                                .attributes
                                .iter()
                                .map(|kv| {
                                    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                                        Some(Any::StringValue(s)) => s.clone(),
                                        Some(Any::IntValue(i)) => i.to_string(),
                                        Some(Any::BoolValue(b)) => b.to_string(),
                                        Some(Any::DoubleValue(d)) => d.to_string(),
                                        other => format!("{other:?}"),
                                    };
                                    (kv.key.clone(), value)
                                })
                                .collect();
                            got.push(Span {
                                name: span.name,
                                trace_id: hex(&span.trace_id),
                                span_id: hex(&span.span_id),
                                parent: hex(&span.parent_span_id),
                                attributes,
                            });
                        }
                    }
                }
                ([("content-type", "application/x-protobuf")], ExportTraceServiceResponse::default().encode_to_vec())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), spans)
}

async fn gql(http: &reqwest::Client, addr: &str, token: &str, query: &str, variables: Value) -> Value {
    http.post(format!("http://{addr}/graphql"))
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("json")
}

#[tokio::test]
async fn spans_of_requests_and_ledger_operations_reach_an_otlp_receiver() {
    let app = spawn_app().await;
    let (endpoint, spans) = receiver().await;
    let op = app.token("f", "op", Role::Operator).await;
    let agent = app.token("f", "agent-1", Role::Agent).await;
    app.register(&op, &["t1"]).await;
    app.register(&op, &["boom"]).await;
    let boom = app.sql_id("SELECT id::text FROM work_units WHERE external_ref = 'boom'").await;
    // Something unexpected, for one unit only: an INTERNAL error.
    app.sql(
        "CREATE FUNCTION wl_boom() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = 'XX000'; END $$;
         CREATE TRIGGER wl_boom BEFORE UPDATE ON work_units FOR EACH ROW
           WHEN (NEW.external_ref = 'boom') EXECUTE FUNCTION wl_boom();",
    )
    .await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("serve")
        .env("DATABASE_URL", &app.db_url)
        .env("WORK_LEDGER_LISTEN", "127.0.0.1:0")
        .env("WORK_LEDGER_METRICS_LISTEN", "")
        .env("WORK_LEDGER_LOG", "info")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn work-ledger serve");
    let addr = serving_addr(&mut child, Duration::from_secs(60)).await;

    let http = reqwest::Client::new();
    // No `id` selected: the span learns the unit from the claim itself.
    let claimed = gql(&http, &addr, &agent, "mutation { claimNext { state } }", json!({})).await;
    assert_eq!(claimed["data"]["claimNext"]["state"], "CLAIMED", "{claimed:#}");
    let other = app.token("f", "agent-2", Role::Agent).await;
    let failed =
        gql(&http, &addr, &other, "mutation($id: UUID!) { claimUnit(id: $id) { id } }", json!({ "id": boom })).await;
    let error = &failed["errors"][0];
    assert_eq!(error["extensions"]["code"], "INTERNAL", "{failed:#}");
    let correlation = error["extensions"]["correlationId"].as_str().expect("a correlation id").to_owned();
    // Under an alias, as MCP and the agent CLI send every operation: the
    // span still learns the unit the field returned.
    let read = gql(&http, &addr, &op, r#"{ result: unitByRef(externalRef: "t1") { id } }"#, json!({})).await;
    let t1 = app.sql_id("SELECT id::text FROM work_units WHERE external_ref = 't1'").await;
    assert_eq!(read["data"]["result"]["id"], t1.as_str(), "{read:#}");
    // A query over WebSocket runs in its span too.
    let mut ws = Ws::authenticated_at(&addr, &op).await;
    ws.subscribe("q", "query($id: UUID!) { unit(id: $id) { id } }", json!({ "id": t1 })).await;
    assert_eq!(ws.next_data().await["unit"]["id"], t1.as_str());

    let find = |name: &str| spans.lock().expect("lock").iter().find(|s| s.name == name).cloned();
    let mut waited = 0;
    let arrived = |names: &[&str]| names.iter().all(|name| find(name).is_some());
    while !arrived(&["claimNext", "claimUnit", "unitByRef", "unit"]) && waited < 300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    let claim = find("claimNext").expect("the claimNext span arrived");
    let expect = |span: &Span, key: &str, value: &str| {
        assert_eq!(span.attributes.get(key).map(String::as_str), Some(value), "{key} of {span:#?}");
    };
    expect(&claim, "operation", "claimNext");
    expect(&claim, "fleet", "f");
    expect(&claim, "agent", "agent-1");
    expect(&claim, "unit_id", &t1);
    expect(&claim, "code", "OK");

    let failing = find("claimUnit").expect("the claimUnit span arrived");
    expect(&failing, "agent", "agent-2");
    expect(&failing, "unit_id", &boom);
    expect(&failing, "code", "INTERNAL");
    assert_eq!(correlation, failing.trace_id, "the correlation id is the trace id");

    let aliased = find("unitByRef").expect("the unitByRef span arrived");
    expect(&aliased, "unit_id", &t1);
    expect(&aliased, "code", "OK");
    let over_ws = find("unit").expect("the span of the query over WebSocket arrived");
    expect(&over_ws, "agent", "op");
    expect(&over_ws, "unit_id", &t1);
    expect(&over_ws, "code", "OK");

    let all = spans.lock().expect("lock").clone();
    for operation in [&claim, &failing] {
        let request = all.iter().find(|s| s.span_id == operation.parent).expect("the request span, its parent");
        assert_eq!(request.name, "POST /graphql");
        assert_eq!(request.trace_id, operation.trace_id);
        assert_eq!(request.attributes.get("http.response.status_code").map(String::as_str), Some("200"));
    }
    for span in &all {
        for value in span.attributes.values() {
            for token in [&op, &agent, &other] {
                assert!(!value.contains(token.as_str()), "a token in {span:#?}");
            }
        }
    }
    let _ = child.kill().await;
}
