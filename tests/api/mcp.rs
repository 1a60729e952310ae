//! `/mcp` through a third-party client: the official MCP TypeScript SDK
//! (tests/node/mcp.mjs) drives a lifecycle as an agent, meets a refusal, and
//! tries a reader token; the ledger's event log must show exactly what the
//! tools did. Skipped without Node.js unless CI is set.

use serde_json::{Value, json};
use tokio::process::Command;
use work_ledger::auth::Role;
use work_ledger::contract::Root;
use work_ledger::graphql::bindings::{self, OPERATIONS};

use crate::helpers::{TestApp, spawn_app};
use crate::node_client::client_dir;
use crate::ws_client::GUARD;

#[tokio::test]
async fn the_official_mcp_client_drives_a_lifecycle_and_meets_refusals() {
    let Some(dir) = client_dir().await else { return };
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["mcp-unit"]).await;
    let agent = app.token("f", "mcp-agent", Role::Agent).await;
    let reader = app.token("f", "mcp-reader", Role::Reader).await;

    let run = Command::new("node")
        .arg(dir.join("mcp.mjs"))
        .arg(format!("http://{}", app.addr))
        .arg(&agent)
        .arg(&reader)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(GUARD * 2, run).await.expect("guard").expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let steps: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let step = |name: &str| steps.iter().find(|s| s["step"] == name).unwrap_or_else(|| panic!("no {name}: {stdout}"));

    assert_eq!(step("anonymous")["connected"], false, "no token, no session");
    assert!(step("anonymous")["error"].as_str().unwrap_or_default().contains("UNAUTHENTICATED"), "{stdout}");
    // What each token is shown is what the contract binds to its permissions;
    // an agent's tools are the lifecycle's and the reads', none of triage's,
    // a reader's only reads.
    let agent_tools = step("agent tools")["tools"].clone();
    assert_eq!(agent_tools, tools_of(Role::Agent), "the contract's tools for an agent");
    for (tool, shown) in
        [("claim_next", true), ("get_unit", true), ("answer_question", false), ("open_questions", false)]
    {
        assert_eq!(agent_tools.as_array().is_some_and(|t| t.contains(&json!(tool))), shown, "{tool}: {agent_tools}");
    }
    let claimed = step("claim_next");
    assert_eq!(claimed["isError"], false, "{claimed:#}");
    let unit = claimed["body"]["unit"]["id"].as_str().expect("unit id").to_owned();
    assert_eq!(claimed["body"]["unit"]["state"], "CLAIMED");
    assert_eq!(claimed["body"]["unit"]["legalActions"][1], "start_work", "MCP's own tool names");
    assert_eq!(step("start_work")["body"]["unit"]["state"], "IN_PROGRESS");

    let refused = step("start_work again");
    assert_eq!(refused["isError"], true);
    assert_eq!(refused["body"]["code"], "ILLEGAL_TRANSITION");
    assert_eq!(refused["body"]["unitId"], unit);
    assert_eq!(refused["body"]["state"], "IN_PROGRESS");
    assert!(refused["body"]["legalActions"].as_array().is_some_and(|a| !a.is_empty()), "{refused:#}");

    assert_eq!(step("record_cost")["body"]["unit"]["costCents"], 420);
    assert_eq!(step("verify")["body"]["unit"]["state"], "VERIFIED");
    let mine = step("my_work");
    assert_eq!(mine["body"]["me"]["heldUnit"], json!(null));
    assert_eq!(mine["body"]["me"]["awaitingDisposition"][0]["id"], unit);
    let disposed = step("dispose");
    assert_eq!(disposed["body"]["unit"]["state"], "DONE");
    assert_eq!(disposed["body"]["unit"]["disposition"], "MIGRATED");

    let reader_tools = step("reader tools")["tools"].clone();
    assert_eq!(reader_tools, tools_of(Role::Reader), "the contract's tools for a reader");
    let reads: Vec<_> =
        reader_tools.as_array().expect("tools").iter().filter_map(Value::as_str).map(bindings::tool).collect();
    assert!(!reads.is_empty() && reads.iter().all(|op| op.is_some_and(|op| op.root == Root::Query)), "{reader_tools}");
    let forbidden = step("reader claim_next");
    assert_eq!(forbidden["isError"], true);
    assert_eq!(forbidden["body"]["code"], "FORBIDDEN");
    assert_eq!(step("reader get_unit")["body"]["unit"]["state"], "DONE");

    // The event log holds exactly what the tools did, by the agent's name.
    let events = app
        .sql_json(&format!(
            "SELECT event_type::text AS t, agent_id AS a FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"
        ))
        .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["t"].as_str()).collect();
    assert_eq!(kinds, ["registered", "claimed", "transitioned", "cost_recorded", "transitioned", "disposed"]);
    assert!(events[1..].iter().all(|e| e["a"] == "mcp-agent"), "{events:?}");
}

/// The tools the contract shows a token of `role`, by name (as the client
/// lists them).
fn tools_of(role: Role) -> Value {
    let permissions = role.permissions();
    let mut tools: Vec<&str> = OPERATIONS
        .iter()
        .filter(|op| op.needs.iter().any(|p| permissions.contains(p)))
        .filter_map(|op| op.tool)
        .collect();
    tools.sort_unstable();
    json!(tools)
}

#[tokio::test]
async fn mcp_without_a_valid_token_is_401_with_a_bearer_challenge() {
    let app = spawn_app().await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "curl", "version": "1" } }
    });
    for auth in [None, Some("Bearer wl_not-a-token")] {
        let mut request =
            app.http.post(app.url("/mcp")).header("accept", "application/json, text/event-stream").json(&initialize);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let resp = request.send().await.expect("POST /mcp");
        assert_eq!(resp.status(), 401, "{auth:?}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let body: Value = resp.json().await.expect("json body");
        assert_eq!(body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED", "the body /graphql sends: {body}");
    }
}

#[tokio::test]
async fn a_tool_call_by_hand_needs_no_session() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["by-hand"]).await;
    let agent = app.token("f", "curl-agent", Role::Agent).await;
    let result = tool(&app, &agent, "claim_next", json!({})).await;
    assert_eq!(result["structuredContent"]["unit"]["externalRef"], "by-hand", "{result:#}");
    assert_eq!(result["structuredContent"]["outcome"], "claimed", "{result:#}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'claimed'").await, 1);

    // Again: the unit it holds, renewed; blocked: held, nothing written.
    let again = tool(&app, &agent, "claim_next", json!({})).await;
    assert_eq!(again["structuredContent"]["outcome"], "renewed", "{again:#}");
    let unit = again["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    tool(&app, &agent, "start_work", json!({ "unitId": unit })).await;
    tool(&app, &agent, "block", json!({ "unitId": unit, "question": "Which one?" })).await;
    let events = app.sql_i64("SELECT count(*) FROM work_unit_events").await;
    let held = tool(&app, &agent, "claim_next", json!({})).await;
    assert_eq!(held["structuredContent"]["outcome"], "held", "{held:#}");
    assert_eq!(held["structuredContent"]["unit"]["state"], "BLOCKED", "{held:#}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, events, "held writes nothing");
}

/// One JSON-RPC call to `/mcp` by hand, without a session (a plain POST,
/// 200 with a JSON body); its `result`.
pub async fn rpc(app: &TestApp, token: &str, method: &str, params: Value) -> Value {
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let resp = app
        .http
        .post(app.url("/mcp"))
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .expect("POST /mcp");
    let status = resp.status();
    let text = resp.text().await.expect("body");
    assert_eq!(status, 200, "{text}");
    let body: Value = serde_json::from_str(&text).expect("a JSON response");
    body["result"].clone()
}

/// One `tools/call` by hand, without a session; the JSON-RPC result.
pub async fn tool(app: &TestApp, token: &str, name: &str, arguments: Value) -> Value {
    rpc(app, token, "tools/call", json!({ "name": name, "arguments": arguments })).await
}

/// The tools that write to a held unit take the caller's attempt as a fence,
/// as the GraphQL mutations do: after a stale reclaim the old holder's write
/// is LEASE_LOST and changes nothing.
#[tokio::test]
async fn tool_writes_are_fenced_by_the_callers_attempt() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["fenced"]).await;
    let (first, second) = (app.token("f", "first", Role::Agent).await, app.token("f", "second", Role::Agent).await);
    let claimed = tool(&app, &first, "claim_next", json!({ "leaseSeconds": 30 })).await;
    let unit = claimed["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    let old_attempt = claimed["structuredContent"]["unit"]["currentAttemptId"].as_str().expect("attempt").to_owned();
    // The lease runs out and the second agent reclaims the unit.
    app.sql(&format!("UPDATE work_units SET lease_expires_at = now() - interval '1 second' WHERE id = '{unit}'")).await;
    let reclaimed = tool(&app, &second, "claim_next", json!({})).await;
    assert_eq!(reclaimed["structuredContent"]["unit"]["id"], unit.as_str(), "{reclaimed:#}");
    let new_attempt = reclaimed["structuredContent"]["unit"]["currentAttemptId"].as_str().expect("attempt").to_owned();

    let before = app.snapshot(&unit).await;
    for (name, args) in [
        ("start_work", json!({ "unitId": unit, "attemptId": old_attempt })),
        ("release", json!({ "unitId": unit, "attemptId": old_attempt })),
        (
            "dispose",
            json!({ "unitId": unit, "attemptId": old_attempt, "disposition": "DROPPED", "evidenceUrl": "https://ci.example/1" }),
        ),
    ] {
        let refused = tool(&app, &first, name, args).await;
        assert_eq!(refused["isError"], true, "{name}: {refused:#}");
        assert_eq!(refused["structuredContent"]["code"], "LEASE_LOST", "{name}: {refused:#}");
    }
    app.assert_unchanged(&unit, &before, "the refused writes").await;

    // The new holder's own attempt passes the fence.
    let started = tool(&app, &second, "start_work", json!({ "unitId": unit, "attemptId": new_attempt })).await;
    assert_eq!(started["isError"], false, "{started:#}");
    assert_eq!(started["structuredContent"]["unit"]["state"], "IN_PROGRESS", "{started:#}");
}

/// Fleet isolation through `/mcp` (SPEC §8): every tool that takes an id,
/// handed another fleet's unit, attempt or question by a token of fleet
/// `b` with every permission a tool needs, answers NOT_FOUND (not
/// FORBIDDEN, not the unit's state: nothing says the id exists), and no row
/// of the other fleet changes; the lists show nothing of it.
#[tokio::test]
async fn another_fleets_ids_are_not_found_through_every_tool_and_change_nothing() {
    let app = spawn_app().await;
    let op_a = app.token("a", "op", Role::Operator).await;
    app.register(&op_a, &["a-working", "a-blocked"]).await;
    let worker = app.token("a", "agent-a", Role::Agent).await;
    let working = tool(&app, &worker, "claim_next", json!({})).await;
    let unit = working["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    let attempt = working["structuredContent"]["unit"]["currentAttemptId"].as_str().expect("attempt").to_owned();
    tool(&app, &worker, "start_work", json!({ "unitId": unit })).await;
    let asker = app.token("a", "agent-a2", Role::Agent).await;
    let blocked = tool(&app, &asker, "claim_next", json!({})).await;
    let blocked = blocked["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    tool(&app, &asker, "start_work", json!({ "unitId": blocked })).await;
    let asked = tool(&app, &asker, "block", json!({ "unitId": blocked, "question": "which codepage?" })).await;
    assert_eq!(asked["structuredContent"]["unit"]["state"], "BLOCKED", "{asked:#}");
    // The ids are right: fleet a's own operator reads the unit by them.
    let own = tool(&app, &op_a, "get_unit", json!({ "unitId": unit })).await;
    assert_eq!(own["structuredContent"]["unit"]["state"], "IN_PROGRESS", "{own:#}");

    let stranger = app.token("b", "op", Role::Operator).await;
    app.register(&stranger, &["b-own"]).await;
    let before = (app.snapshot(&unit).await, app.snapshot(&blocked).await);
    let url = "https://ci.example/b";
    // The reads answer as for an id that does not exist: no unit.
    for (name, args) in
        [("get_unit", json!({ "unitId": unit })), ("get_unit_by_ref", json!({ "externalRef": "a-working" }))]
    {
        let read = tool(&app, &stranger, name, args).await;
        assert_eq!(read["isError"], false, "{read:#}");
        assert_eq!(read["structuredContent"], json!({ "unit": null }), "{name}: {read:#}");
    }
    for (name, args) in [
        ("claim_unit", json!({ "unitId": unit })),
        ("heartbeat", json!({ "attemptId": attempt })),
        ("start_work", json!({ "unitId": unit, "attemptId": attempt })),
        ("record_cost", json!({ "unitId": unit, "cents": 5, "idempotencyKey": "b-cost" })),
        ("verify", json!({ "unitId": unit, "evidenceUrl": url })),
        ("block", json!({ "unitId": unit, "question": "mine now?" })),
        ("release", json!({ "unitId": unit, "attemptId": attempt })),
        ("dispose", json!({ "unitId": unit, "disposition": "DROPPED", "evidenceUrl": url })),
        ("dispose", json!({ "unitId": blocked, "disposition": "DEAD", "evidenceUrl": url })),
        ("answer_question", json!({ "unitId": blocked, "answer": "cp037" })),
    ] {
        let refused = tool(&app, &stranger, name, args.clone()).await;
        let body = &refused["structuredContent"];
        assert_eq!(refused["isError"], true, "{name} {args}: {refused:#}");
        assert_eq!(body["code"], "NOT_FOUND", "{name} {args}: {refused:#}");
        let text = body.to_string();
        for secret in ["agent-a", "IN_PROGRESS", "BLOCKED", "codepage"] {
            assert!(!text.contains(secret), "{name} tells of the other fleet ({secret}): {refused:#}");
        }
    }
    assert_eq!((app.snapshot(&unit).await, app.snapshot(&blocked).await), before, "a refusal changed fleet a");

    // The lists of fleet b hold nothing of fleet a.
    let questions = tool(&app, &stranger, "open_questions", json!({})).await;
    assert!(!questions.to_string().contains("codepage"), "{questions:#}");
    let mine = tool(&app, &stranger, "my_work", json!({})).await;
    assert!(!mine.to_string().contains(&unit) && !mine.to_string().contains(&blocked), "{mine:#}");
    let depth = tool(&app, &stranger, "queue_depth", json!({})).await;
    let text = depth["structuredContent"].to_string();
    assert!(!text.contains("\"inProgress\":1") && !text.contains("\"blocked\":1"), "{depth:#}");
    // claim_next finds fleet b's own unit, never fleet a's.
    let claimed = tool(&app, &stranger, "claim_next", json!({})).await;
    assert_eq!(claimed["structuredContent"]["unit"]["externalRef"], "b-own", "{claimed:#}");
}

/// Attacks `/mcp`'s error answers (issue item 6): a body holding an unpaired
/// surrogate got a plain-text 415, a JSON-RPC batch a plain-text error. Every
/// body the server cannot take is answered in JSON-RPC (`id` null, as JSON-RPC
/// gives when the request's id cannot be known) with 400, as the streamable
/// HTTP transport says: -32700 for what does not parse, -32600 for what is
/// not one JSON-RPC message (batches were removed in MCP 2025-06-18); none of
/// it runs. Plain-text refusals of the transport (a `Content-Type` that is not JSON, an
/// `Accept` without JSON) are JSON-RPC errors too.
#[tokio::test]
async fn every_refusal_of_mcp_is_a_json_rpc_error() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["untouched"]).await;
    let agent = app.token("f", "agent", Role::Agent).await;
    let claim = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"claim_next","arguments":{}}}"#;
    let surrogate = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"claim_next","arguments":{"domain":"\ud800"}}}"#;
    let cases: Vec<(String, i64, &str)> = vec![
        (surrogate.to_owned(), -32700, "parse"),
        ("not json".to_owned(), -32700, "parse"),
        (format!("{claim}{claim}"), -32700, "parse"),
        (format!("[{claim}]"), -32600, "batches are not supported"),
        ("[]".to_owned(), -32600, "batches are not supported"),
        ("42".to_owned(), -32600, "JSON-RPC"),
        (r#"{"jsonrpc":"2.0","id":7}"#.to_owned(), -32600, "JSON-RPC"),
        (r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#.to_owned(), -32600, "JSON-RPC"),
    ];
    let post = |body: Vec<u8>, content_type: &'static str, accept: &'static str| {
        app.http
            .post(app.url("/mcp"))
            .header("authorization", format!("Bearer {agent}"))
            .header("accept", accept)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let both = "application/json, text/event-stream";
    let mut refusals: Vec<(String, reqwest::Response, i64, &str)> = Vec::new();
    for (body, code, says) in cases {
        let resp = post(body.clone().into_bytes(), "application/json", both).await.expect("POST /mcp");
        refusals.push((body, resp, code, says));
    }
    // Not UTF-8 at all.
    let resp = post(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"\xff\"}".to_vec(), "application/json", both).await;
    refusals.push(("invalid UTF-8".to_owned(), resp.expect("POST /mcp"), -32700, "parse"));
    // What rmcp refuses before the body: the media types.
    let resp = post(claim.as_bytes().to_vec(), "text/plain", both).await.expect("POST /mcp");
    refusals.push(("text/plain".to_owned(), resp, -32600, "Content-Type"));
    let resp = post(claim.as_bytes().to_vec(), "application/json", "text/html").await.expect("POST /mcp");
    refusals.push(("Accept: text/html".to_owned(), resp, -32600, "accept"));

    for (body, resp, code, says) in refusals {
        let status = resp.status().as_u16();
        let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let text = resp.text().await.expect("body");
        assert!((400..500).contains(&status), "{body}: {status} {text}");
        assert!(content_type.starts_with("application/json"), "{body}: {content_type} {text}");
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{body}: not JSON: {text}"));
        assert_eq!(answer["jsonrpc"], "2.0", "{body}: {answer}");
        assert_eq!(answer.get("id"), Some(&Value::Null), "{body}: {answer}");
        assert!(answer.get("result").is_none(), "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.to_lowercase().contains(&says.to_lowercase()), "{body}: {answer}");
    }
    // The parse errors and invalid requests are 400 (the transport's "cannot accept the input").
    let resp = post(format!("[{claim}]").into_bytes(), "application/json", both).await.expect("POST /mcp");
    assert_eq!(resp.status(), 400);
    let resp = post(surrogate.as_bytes().to_vec(), "application/json", both).await.expect("POST /mcp");
    assert_eq!(resp.status(), 400);
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'claimed'").await, 0);

    // The same call, well formed, still runs.
    let result = tool(&app, &agent, "claim_next", json!({})).await;
    assert_eq!(result["structuredContent"]["outcome"], "claimed", "{result:#}");
}
