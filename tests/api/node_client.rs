//! Real third-party clients (tests/node): the npm `graphql-ws` library
//! subscribes to `blockingQuestionOpened` and receives a question raised by a
//! mutation; `graphql-http`'s `auditServer` checks GraphQL over HTTP against
//! the specification. Needs Node.js and, the first time, the npm registry (`npm ci`).
//! With `CI` set a missing Node.js fails the test; otherwise it is skipped
//! with a note.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app};
use crate::skip::skip;
use crate::ws_client::GUARD;

/// Skips (outside CI) or fails (in CI) for a missing prerequisite.
fn missing(what: &str) -> Option<PathBuf> {
    skip(what);
    None
}

/// tests/node with its node_modules installed, when Node.js is there.
pub async fn client_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    match Command::new("node").arg("--version").output().await {
        Ok(out) if out.status.success() => {}
        _ => return missing("Node.js (`node`) is not installed; see .ci/run"),
    }
    // One install at a time: the tests of this binary run in parallel, and a
    // second `npm ci` deletes node_modules under the first one's feet.
    static INSTALL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _installing = INSTALL.lock().await;
    let installed = ["graphql-ws", "graphql-http", "@modelcontextprotocol/sdk"]
        .iter()
        .all(|p| dir.join("node_modules").join(p).exists());
    if !installed {
        let installed = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .await
            .is_ok_and(|s| s.success());
        if !installed {
            return missing("`npm ci` in tests/node failed (npm missing or the registry unreachable)");
        }
    }
    Some(dir)
}

#[tokio::test]
async fn the_graphql_ws_npm_client_receives_a_question_raised_by_a_mutation() {
    let Some(dir) = client_dir().await else { return };
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["unit"]).await;
    let triage = app.token("f", "triage", Role::Triage).await;

    let mut node = Command::new("node")
        .arg(dir.join("subscribe.mjs"))
        .arg(format!("ws://{}/graphql/ws", app.addr))
        .arg(&triage)
        .arg("1")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start node");
    let mut lines = BufReader::new(node.stdout.take().expect("stdout")).lines();
    let mut next_line = async || -> Value {
        let line = tokio::time::timeout(GUARD, lines.next_line()).await.expect("guard").expect("read");
        serde_json::from_str(&line.expect("the client ended early")).expect("a JSON line")
    };
    assert_eq!(next_line().await, json!({ "event": "connected" }));

    let agent = Agent::new(&app, "f", "agent", Role::Agent).await;
    let unit = agent.claim_next(json!({})).await.str("id");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.block(&unit, "Which encoding do the legacy files use?", json!({})).await.data();

    let received = next_line().await;
    assert_eq!(received["event"], "next", "{received:#}");
    let question = &received["result"]["data"]["blockingQuestionOpened"];
    let recorded = app.sql_json("SELECT id::text AS id, unit_id::text AS unit FROM blocking_questions").await;
    assert_eq!(question["id"], recorded[0]["id"]);
    assert_eq!(question["unitId"], recorded[0]["unit"]);
    assert_eq!(question["question"], "Which encoding do the legacy files use?");
    assert_eq!(question["status"], "OPEN");
    let status = tokio::time::timeout(GUARD, node.wait()).await.expect("guard").expect("node exit");
    assert!(status.success(), "the client exits cleanly after its payload");
}

/// The GraphQL-over-HTTP audit (SPEC §4): no error and no warning, with a
/// token on every request; notices (MAY) are printed.
#[tokio::test]
async fn the_graphql_http_audit_passes_with_no_error_or_warning() {
    let Some(dir) = client_dir().await else { return };
    let app = spawn_app().await;
    let token = app.token("f", "auditor", Role::Reader).await;
    let run = Command::new("node")
        .arg(dir.join("audit.mjs"))
        .arg(app.url("/graphql"))
        .arg(&token)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(GUARD * 4, run).await.expect("guard").expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let summary = lines.iter().find(|l| l.get("summary").is_some()).expect("the audit's summary line");
    let failures: Vec<&Value> =
        lines.iter().filter(|l| matches!(l["audit"].as_str(), Some("warn" | "error"))).collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(summary["summary"]["error"], 0, "{summary}");
    assert_eq!(summary["summary"]["warn"], 0, "{summary}");
    assert!(summary["total"].as_u64().is_some_and(|n| n > 50), "{summary}");
    assert!(out.status.success(), "the audit exited with {:?}", out.status);
    // Nothing of the audit wrote (its mutation went over GET and was refused).
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, 0);
}
