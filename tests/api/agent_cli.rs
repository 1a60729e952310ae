//! `work-ledger agent`: the real binary against the real server over HTTP.
//! Every test checks what it printed and what the ledger recorded. The
//! CLI's state files (the attempt of its last claim) go to a directory of
//! the test run's own, one file per server and token.

use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use work_ledger::auth::Role;

use crate::helpers::{TestApp, spawn_app};

/// Runs `work-ledger agent ARGS` against `url` with `token`; quick retries
/// so that the unavailable case finishes in well under a second.
async fn agent_at(url: &str, token: &str, args: &[&str]) -> Output {
    // The async Command: the test's runtime serves the server meanwhile.
    tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("agent")
        .args(args)
        .env_remove("DATABASE_URL")
        .env("WORK_LEDGER_URL", url)
        .env("WORK_LEDGER_TOKEN", token)
        .env("WORK_LEDGER_RETRIES", "2")
        .env("WORK_LEDGER_RETRY_BACKOFF", "20ms")
        .env("XDG_STATE_HOME", std::env::temp_dir().join("work-ledger-cli-tests"))
        .env_remove("WORK_LEDGER_STATE")
        .output()
        .await
        .expect("run work-ledger agent")
}

async fn agent(app: &TestApp, token: &str, args: &[&str]) -> Output {
    agent_at(&app.url(""), token, args).await
}

/// The exit code and, on success, the JSON on stdout.
fn ok(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"))
}

/// The unit a successful command printed (`{"unit": ...}`, as MCP returns it).
fn unit(out: &Output) -> Value {
    ok(out)["unit"].clone()
}

/// The error the CLI reported: the last line of stderr, as JSON.
fn refused(out: &Output, exit: i32) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(exit), "stdout: {} stderr: {stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stdout.is_empty(), "nothing on stdout when refused: {out:?}");
    let last = stderr.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last stderr line is not JSON ({e}): {stderr}"))
}

async fn register(app: &TestApp, refs: &[&str]) -> Vec<String> {
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, refs).await.iter().map(|u| u["id"].as_str().expect("id").to_owned()).collect()
}

#[tokio::test]
async fn an_agent_reaches_a_disposition_through_the_cli_alone() {
    let app = spawn_app().await;
    let id = register(&app, &["cli/one"]).await.remove(0);
    let token = app.token("f", "agent-cli", Role::Agent).await;

    let claimed = unit(&agent(&app, &token, &["claim", "--lease", "2m"]).await);
    assert_eq!((claimed["id"].as_str(), claimed["state"].as_str()), (Some(id.as_str()), Some("CLAIMED")));
    assert_eq!(claimed["claimedBy"], "agent-cli");
    assert!(claimed["legalActions"].as_array().is_some_and(|a| !a.is_empty()), "{claimed}");
    let attempt = claimed["currentAttemptId"].as_str().expect("attempt").to_owned();

    let status = ok(&agent(&app, &token, &["status"]).await)["me"].clone();
    assert_eq!(status["heldUnit"]["id"], id.as_str(), "{status}");
    assert_eq!(status["awaitingDisposition"], json!([]));

    assert_eq!(unit(&agent(&app, &token, &["start"]).await)["state"], "IN_PROGRESS");
    let beat = unit(&agent(&app, &token, &["heartbeat", "--lease", "10m"]).await);
    assert_eq!(beat["currentAttemptId"], attempt.as_str());
    assert_eq!(unit(&agent(&app, &token, &["cost", "125"]).await)["costCents"], 125);
    let verified = unit(&agent(&app, &token, &["verify", "https://ci.example/run/1"]).await);
    assert_eq!(verified["state"], "VERIFIED");
    assert_eq!(verified["evidenceUrls"], json!(["https://ci.example/run/1"]));

    // VERIFIED: held no more, awaiting this agent's disposition.
    let status = ok(&agent(&app, &token, &["status"]).await)["me"].clone();
    assert_eq!(status["heldUnit"], json!(null), "{status}");
    assert_eq!(status["awaitingDisposition"][0]["id"], id.as_str(), "{status}");
    // Late bills still reach the verified unit.
    assert_eq!(unit(&agent(&app, &token, &["cost", "5"]).await)["costCents"], 130);

    let done = unit(&agent(&app, &token, &["dispose", "migrated", "--reason", "ported"]).await);
    assert_eq!((done["state"].as_str(), done["disposition"].as_str()), (Some("DONE"), Some("MIGRATED")));
    assert_eq!(done["legalActions"], json!([]));
    let status = ok(&agent(&app, &token, &["status"]).await)["me"].clone();
    assert_eq!((&status["heldUnit"], &status["awaitingDisposition"]), (&json!(null), &json!([])), "{status}");

    let events = app
        .sql_json(&format!(
            "SELECT event_type::text AS ty, to_state::text AS to, agent_id, cost_delta_cents AS cents, source_event_id AS key
               FROM work_unit_events WHERE unit_id = '{id}' ORDER BY seq"
        ))
        .await;
    let steps: Vec<(&str, &str)> =
        events.iter().map(|e| (e["ty"].as_str().unwrap_or(""), e["to"].as_str().unwrap_or(""))).collect();
    assert_eq!(
        steps,
        [
            ("registered", "ready"),
            ("claimed", "claimed"),
            ("transitioned", "in_progress"),
            ("heartbeat", "in_progress"),
            ("cost_recorded", ""),
            ("transitioned", "verified"),
            ("cost_recorded", ""),
            ("disposed", "done"),
        ],
        "{events:#?}"
    );
    // Every write but the registration and the heartbeat went with a key of its own.
    let keys: Vec<&str> = events.iter().filter_map(|e| e["key"].as_str()).collect();
    assert_eq!(keys.len(), 6, "{events:#?}");
    assert_eq!(keys.iter().collect::<std::collections::HashSet<_>>().len(), 6, "one key per invocation: {keys:?}");
    assert!(events[1..].iter().all(|e| e["agent_id"] == "agent-cli"), "{events:#?}");
}

#[tokio::test]
async fn block_release_and_abandon_through_the_cli() {
    let app = spawn_app().await;
    let [first, second]: [String; 2] = register(&app, &["cli/a", "cli/b"]).await.try_into().expect("two units");
    let token = app.token("f", "agent-cli", Role::Agent).await;

    assert_eq!(unit(&agent(&app, &token, &["claim"]).await)["id"], first.as_str());
    ok(&agent(&app, &token, &["start"]).await);
    let released =
        unit(&agent(&app, &token, &["release", "--outcome", "failed", "--reason", "tests do not build"]).await);
    assert_eq!(released["state"], "READY");
    let outcome =
        app.sql_json(&format!("SELECT outcome::text FROM work_unit_attempts WHERE unit_id = '{first}'")).await;
    assert_eq!(outcome, [json!({ "outcome": "failed" })]);

    // Claim by name, block with a question, then give up on it for good.
    let claimed = unit(&agent(&app, &token, &["claim", "--unit", &second]).await);
    assert_eq!(claimed["id"], second.as_str());
    ok(&agent(&app, &token, &["start"]).await);
    let blocked = unit(&agent(&app, &token, &["block", "Which date format?", "--assignee-group", "payroll"]).await);
    assert_eq!(blocked["state"], "BLOCKED");
    assert_eq!(blocked["openQuestion"]["question"], "Which date format?");
    assert_eq!(ok(&agent(&app, &token, &["status"]).await)["me"]["heldUnit"]["id"], second.as_str());
    let dead = unit(
        &agent(
            &app,
            &token,
            &["dispose", "DEAD", "--evidence-url", "https://tracker.example/42", "--reason", "module retired"],
        )
        .await,
    );
    assert_eq!((dead["state"].as_str(), dead["disposition"].as_str()), (Some("ABANDONED"), Some("DEAD")));
}

/// Nothing to claim: exit 3 while units are leased or blocked elsewhere
/// (wait), exit 7 once the domain is drained (stop); the line says which.
#[tokio::test]
async fn nothing_to_claim_exits_3_when_busy_and_7_when_drained() {
    let app = spawn_app().await;
    let token = app.token("f", "agent-cli", Role::Agent).await;
    let err = refused(&agent(&app, &token, &["claim", "--domain", "empty"]).await, 7);
    assert_eq!((err["code"].as_str(), err["outcome"].as_str()), (Some("NOTHING_TO_CLAIM"), Some("drained")), "{err}");

    register(&app, &["cli/busy"]).await;
    let other = app.token("f", "other-agent", Role::Agent).await;
    unit(&agent(&app, &other, &["claim"]).await);
    let err = refused(&agent(&app, &token, &["claim"]).await, 3);
    assert_eq!((err["code"].as_str(), err["outcome"].as_str()), (Some("NOTHING_TO_CLAIM"), Some("busy")), "{err}");
    assert_eq!(err["leased"], 1, "{err}");
    assert!(err["earliestLeaseEnd"].is_string(), "when to look again: {err}");
}

#[tokio::test]
async fn a_refusal_exits_4_with_the_code_and_the_legal_actions_on_stderr() {
    let app = spawn_app().await;
    register(&app, &["cli/r"]).await;
    let token = app.token("f", "agent-cli", Role::Agent).await;

    let err = refused(&agent(&app, &token, &["start"]).await, 4);
    assert_eq!(err["code"], "NOTHING_HELD", "{err}");

    ok(&agent(&app, &token, &["claim"]).await);
    ok(&agent(&app, &token, &["start"]).await);
    let err = refused(&agent(&app, &token, &["start"]).await, 4);
    assert_eq!(err["code"], "ILLEGAL_TRANSITION", "{err}");
    assert!(err["message"].as_str().is_some_and(|m| m.contains("IN_PROGRESS")), "{err}");
    let legal = err["legalActions"].as_array().expect("legalActions");
    assert!(legal.contains(&json!("verify <evidence-url>")), "the CLI's own verbs: {err}");

    let err = refused(&agent(&app, &token, &["dispose", "dropped"]).await, 4);
    assert_eq!(err["code"], "EVIDENCE_REQUIRED", "{err}");
    assert_eq!(err["argument"], "evidenceUrl", "{err}");
    assert!(err["legalActions"].as_array().is_some_and(|a| !a.is_empty()), "{err}");
    let state = app.sql_json("SELECT state::text FROM work_units").await;
    assert_eq!(state, [json!({ "state": "in_progress" })], "refusals change nothing");
}

#[tokio::test]
async fn a_bad_token_or_a_missing_permission_exits_5() {
    let app = spawn_app().await;
    register(&app, &["cli/x"]).await;
    let err = refused(&agent(&app, "not-a-token", &["claim"]).await, 5);
    assert_eq!(err["code"], "UNAUTHENTICATED", "{err}");
    let reader = app.token("f", "dashboard", Role::Reader).await;
    let err = refused(&agent(&app, &reader, &["claim"]).await, 5);
    assert_eq!(err["code"], "FORBIDDEN", "{err}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_attempts").await, 0);
}

#[tokio::test]
async fn a_server_that_is_not_there_exits_6_after_the_retries() {
    // A port this test holds without listening: connections are refused,
    // and no other test's server can take the port meanwhile (a port bound
    // and released could be).
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let port = socket.local_addr().expect("addr").port();
    let out = agent_at(&format!("http://127.0.0.1:{port}"), "any", &["claim"]).await;
    drop(socket);
    let err = refused(&out, 6);
    assert_eq!(err["code"], "UNAVAILABLE", "{err}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().filter(|l| l.starts_with("retrying")).count(), 2, "two retries, then give up: {stderr}");
}

#[tokio::test]
async fn a_server_answering_503_exits_6_after_the_retries() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let body = r#"{"errors":[{"message":"restarting","extensions":{"code":"UNAVAILABLE"}}]}"#;
            let response = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    let err = refused(&agent_at(&url, "any", &["claim"]).await, 6);
    assert_eq!((err["code"].as_str(), err["message"].as_str()), (Some("UNAVAILABLE"), Some("restarting")), "{err}");
    assert_eq!(requests.load(Ordering::SeqCst), 3, "the first try and two retries");
}

/// A proxy in front of the server that forwards everything but loses the
/// response to the first `recordCost`: the server committed, the client
/// sees the connection drop, as with a network cut after the commit.
async fn lossy_proxy(upstream: std::net::SocketAddr) -> (String, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let lost = Arc::new(AtomicBool::new(false));
    let flag = lost.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = TcpStream::connect(upstream).await.expect("connect upstream");
            tokio::spawn(relay(client, upstream, flag.clone()));
        }
    });
    (url, lost)
}

async fn relay(mut client: TcpStream, mut upstream: TcpStream, lost: Arc<AtomicBool>) {
    let (mut from_client, mut from_upstream) = ([0u8; 16384], [0u8; 16384]);
    // The request bytes since the last response; HTTP/1.1 without pipelining
    // means the next upstream bytes answer this request.
    let mut request = Vec::new();
    loop {
        tokio::select! {
            n = client.read(&mut from_client) => {
                let Ok(n @ 1..) = n else { return };
                request.extend_from_slice(&from_client[..n]);
                if upstream.write_all(&from_client[..n]).await.is_err() { return }
            }
            n = upstream.read(&mut from_upstream) => {
                let Ok(n @ 1..) = n else { return };
                let answers_cost = String::from_utf8_lossy(&request).contains("recordCost");
                request.clear();
                if answers_cost && !lost.swap(true, Ordering::SeqCst) {
                    return; // drops both connections: the response is lost
                }
                if client.write_all(&from_upstream[..n]).await.is_err() { return }
            }
        }
    }
}

#[tokio::test]
async fn a_retried_cost_with_the_same_key_counts_once() {
    let app = spawn_app().await;
    register(&app, &["cli/cost"]).await;
    let token = app.token("f", "agent-cli", Role::Agent).await;
    let (proxy, lost) = lossy_proxy(app.addr).await;
    ok(&agent_at(&proxy, &token, &["claim"]).await);

    let out = agent_at(&proxy, &token, &["cost", "250"]).await;
    let unit = unit(&out);
    assert!(lost.load(Ordering::SeqCst), "the proxy lost the first response");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("retrying (1/2)"), "{out:?}");
    assert_eq!(unit["costCents"], 250, "{unit}");
    let costs = app
        .sql_json("SELECT cost_delta_cents AS cents, source_event_id AS key FROM work_unit_events WHERE event_type = 'cost_recorded'")
        .await;
    assert_eq!(costs.len(), 1, "one cost event for one invocation: {costs:?}");
    assert_eq!(costs[0]["cents"], 250);
    assert_eq!(app.sql_i64("SELECT cost_cents FROM work_units").await, 250);
}

#[tokio::test]
async fn help_documents_the_exit_codes() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .args(["agent", "--help"])
        .output()
        .await
        .expect("run work-ledger agent --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for line in ["0 ", "3 ", "4 ", "5 ", "6 ", "WORK_LEDGER_URL", "WORK_LEDGER_TOKEN"] {
        assert!(help.contains(line), "`{line}` in: {help}");
    }
}

/// Fleet isolation and revocation through the CLI, the fourth door: another
/// fleet's unit named with `--unit` is NOT_FOUND for every verb and nothing
/// of it changes; a revoked token's very next command is refused.
#[tokio::test]
async fn another_fleets_unit_is_not_found_and_a_revoked_token_is_refused_at_once() {
    let app = spawn_app().await;
    let theirs = app.token("a", "op", Role::Operator).await;
    let secret = app.register(&theirs, &["a/secret"]).await[0]["id"].as_str().expect("id").to_owned();
    let holder = app.token("a", "holder", Role::Agent).await;
    unit(&agent(&app, &holder, &["claim"]).await);
    let before = app.snapshot(&secret).await;

    let stranger = app.token("b", "stranger", Role::Agent).await;
    for args in [
        &["claim", "--unit", &secret][..],
        &["start", "--unit", &secret],
        &["heartbeat", "--unit", &secret],
        &["cost", "5", "--unit", &secret],
        &["verify", "https://ci.example/b", "--unit", &secret],
        &["block", "mine now?", "--unit", &secret],
        &["release", "--unit", &secret],
        &["dispose", "dead", "--evidence-url", "https://ci.example/b", "--unit", &secret],
        &["wait", "--unit", &secret],
    ] {
        let err = refused(&agent(&app, &stranger, args).await, 4);
        assert_eq!(err["code"], "NOT_FOUND", "{args:?}: {err}");
        assert!(!err.to_string().contains("holder") && !err.to_string().contains("a/secret"), "{args:?}: {err}");
    }
    app.assert_unchanged(&secret, &before, "another fleet's commands").await;

    // Revoked: the next command, not a later one, is refused.
    let id = app.sql_id("SELECT id::text AS id FROM api_tokens WHERE name = 'holder'").await;
    assert!(work_ledger::db::tokens::revoke(&app.owner, id.parse().expect("uuid")).await.expect("revoke"));
    let err = refused(&agent(&app, &holder, &["status"]).await, 5);
    assert_eq!(err["code"], "UNAUTHENTICATED", "{err}");
}
