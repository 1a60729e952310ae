//! Workflows of every ending, projected once each, seen live, never written
//! back to, kept after Temporal forgets them, and reconciled (SPEC §12).

use std::collections::HashSet;

use serde_json::{Value, json};
use work_ledger::auth::Role;

use super::{Temporal, attempts, event_types, link, unit, until};
use crate::helpers::{Agent, spawn_app_with};
use crate::ws_client::Ws;

const FLEET: &str = "tf";

const EVENTS: &str = "subscription { ledgerEvents { id eventType unitId agentId } }";

/// Waits until workflow `id`'s unit is in `state` with the attempts named.
async fn settled(app: &crate::helpers::TestApp, id: &str, state: &str, attempts: i64) {
    until(
        app,
        &format!("{id} {state} after {attempts} attempt(s)"),
        &format!(
            "SELECT EXISTS (SELECT 1 FROM work_units u WHERE u.fleet = '{FLEET}' AND u.workflow_id = '{id}'
                              AND u.state = '{state}' AND u.attempt_count = {attempts}
                              AND NOT EXISTS (SELECT 1 FROM work_unit_attempts a
                                               WHERE a.unit_id = u.id AND a.outcome IS NULL
                                                 AND u.state NOT IN ('claimed', 'in_progress'))) AS ok"
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn temporal_workflows_are_projected_once_each_and_never_written_back() {
    let Some(temporal) = Temporal::start(false).await else { return };
    let app = spawn_app_with(temporal.config()).await;
    link(&app, FLEET).await;
    let reader = app.token(FLEET, "watcher", Role::Reader).await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({})).await;
    let operator = app.token(FLEET, "op", Role::Operator).await;
    assert_eq!(ws.first_probe(&app, &operator, "sentinel").await["eventType"], "REGISTERED");

    // A unit registered by hand with its workflow's id, in a fleet without a link.
    let other = app.token("th", "op", Role::Operator).await;
    let registered = app
        .gql(
            &other,
            "mutation { registerUnits(units: [{externalRef: \"billing/ledger.c\", workflowId: \"wf-hand\"}]) { id workflowId } }",
            json!({}),
        )
        .await;
    assert_eq!(registered.data()["registerUnits"][0]["workflowId"], "wf-hand");
    temporal.start_workflow("wf-hand", "complete", &[]).await;
    temporal.start_workflow("wf-complete", "complete", &[]).await;
    temporal.start_workflow("wf-dropped", "dropped", &[]).await;
    temporal.start_workflow("wf-retry", "retry", &["--retries", "2"]).await;
    temporal.start_workflow("wf-terminate", "wait", &[]).await;
    temporal.start_workflow("wf-cancel", "wait", &[]).await;
    temporal.start_workflow("wf-timeout", "wait", &["--timeout", "4"]).await;
    temporal.start_workflow("wf-continue", "continue", &[]).await;
    temporal.start_workflow("wf-noevidence", "noevidence", &[]).await;

    // A workflow's unit is the workflow's: no agent claims it.
    settled(&app, "wf-terminate", "in_progress", 1).await;
    let agent = Agent::new(&app, FLEET, "agent-1", Role::Agent).await;
    let held = unit(&app, FLEET, "wf-terminate").await;
    assert_eq!(held["claimed_by"], "workflow:wf-terminate");
    assert!(held["lease_expires_at"].is_null(), "a workflow's claim has no lease: {held}");
    let refused = agent.claim_unit(held["id"].as_str().unwrap_or_default(), json!({})).await;
    refused.assert_code("WORKFLOW_OWNED");
    assert!(refused.message().contains("wf-terminate"), "{}", refused.message());
    let extensions = &refused.body["errors"][0]["extensions"];
    assert_eq!(extensions["workflowId"], "wf-terminate");
    assert!(!extensions["legalActions"].to_string().contains("claim"), "{extensions}");
    let claimed = agent.claim_next(json!({})).await;
    assert_eq!(claimed.data()["r"]["externalRef"], "sentinel-0", "only the agents' units");

    temporal
        .cli(&["workflow", "terminate", "--workflow-id", "wf-terminate", "--reason", "operator stop"])
        .await
        .expect("terminate");
    temporal.cli(&["workflow", "cancel", "--workflow-id", "wf-cancel"]).await.expect("cancel");

    settled(&app, "wf-complete", "done", 1).await;
    settled(&app, "wf-dropped", "abandoned", 1).await;
    settled(&app, "wf-retry", "done", 2).await;
    settled(&app, "wf-terminate", "ready", 1).await;
    settled(&app, "wf-cancel", "ready", 1).await;
    settled(&app, "wf-timeout", "ready", 1).await;
    settled(&app, "wf-continue", "done", 2).await;
    settled(&app, "wf-noevidence", "ready", 1).await;

    until(
        &app,
        "the unit registered by hand is done",
        "SELECT EXISTS (SELECT 1 FROM work_units WHERE fleet = 'th' AND external_ref = 'billing/ledger.c'
                          AND state = 'done' AND cost_cents = 120 AND claimed_by = 'workflow:wf-hand') AS ok",
    )
    .await;

    // Two activities, one with a cost, and a completion with evidence and MIGRATED.
    let done = unit(&app, FLEET, "wf-complete").await;
    assert_eq!((done["disposition"].as_str(), done["cost_cents"].as_i64()), (Some("MIGRATED"), Some(120)), "{done}");
    assert_eq!(done["evidence_urls"], json!(["https://ci.example.com/runs/1"]));
    let first = attempts(&app, FLEET, "wf-complete").await;
    assert_eq!((first[0]["outcome"].as_str(), first[0]["cost_cents"].as_i64()), (Some("verified"), Some(120)));
    assert_eq!(first[0]["agent_id"], "workflow:wf-complete");
    let types = event_types(&app, FLEET, "wf-complete").await;
    assert_eq!(types, ["registered", "claimed", "transitioned", "cost_recorded", "transitioned", "disposed"]);
    let dropped = unit(&app, FLEET, "wf-dropped").await;
    assert_eq!(dropped["disposition"], "DROPPED");

    // Retried by its retry policy: two attempts, the first FAILED with Temporal's message.
    let retried = attempts(&app, FLEET, "wf-retry").await;
    assert_eq!(retried.len(), 2);
    assert_eq!(retried[0]["outcome"], "failed");
    assert_eq!(retried[0]["reason"], "the first attempt breaks on purpose");
    assert_eq!(retried[1]["outcome"], "verified");

    let ended = |id: &'static str| {
        let app = &app;
        async move { attempts(app, FLEET, id).await.last().cloned().unwrap_or(Value::Null) }
    };
    let terminated = ended("wf-terminate").await;
    assert_eq!(
        (terminated["outcome"].as_str(), terminated["reason"].as_str()),
        (Some("abandoned"), Some("operator stop"))
    );
    assert_eq!(ended("wf-cancel").await["outcome"], "abandoned");
    let timed_out = ended("wf-timeout").await;
    assert_eq!(
        (timed_out["outcome"].as_str(), timed_out["reason"].as_str()),
        (Some("failed"), Some("workflow timed out"))
    );
    assert_eq!(
        event_types(&app, FLEET, "wf-continue").await,
        [
            "registered",
            "claimed",
            "transitioned",
            "released",
            "claimed",
            "transitioned",
            "cost_recorded",
            "transitioned",
            "disposed"
        ]
    );
    let continued = attempts(&app, FLEET, "wf-continue").await;
    assert_eq!(
        (continued[0]["outcome"].as_str(), continued[1]["outcome"].as_str()),
        (Some("superseded"), Some("verified"))
    );
    let without = ended("wf-noevidence").await;
    assert_eq!(
        (without["outcome"].as_str(), without["reason"].as_str()),
        (Some("failed"), Some("completed without evidence"))
    );
    assert_eq!(without["cost_cents"], 125, "the activity's cost and the result's");

    // The subscriber saw wf-complete's projected events live.
    let complete_id = done["id"].as_str().unwrap_or_default().to_owned();
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let event = ws.next_data().await["ledgerEvents"].clone();
        if event["unitId"] == complete_id.as_str() && event["eventType"] != "REGISTERED" {
            seen.push(event["eventType"].as_str().unwrap_or_default().to_owned());
        }
    }
    assert_eq!(seen, ["CLAIMED", "TRANSITIONED", "COST_RECORDED", "TRANSITIONED", "DISPOSED"]);

    // Every projected event once: a unique key per event, and (AC9.1) the
    // same histories projected again by a second replica and after the
    // marks are reset append nothing.
    let count = || app.sql_i64("SELECT count(*) FROM work_unit_events");
    let before = count().await;
    let keys = app
        .sql_json("SELECT fleet, source_event_id FROM work_unit_events WHERE source_event_id LIKE 'temporal:%'")
        .await;
    let unique: HashSet<String> = keys.iter().map(|k| format!("{}/{}", k["fleet"], k["source_event_id"])).collect();
    assert_eq!(unique.len(), keys.len());
    let replica = app.spawn_replica_with(temporal.config()).await;
    // (The unit registered by hand is disposed: its workflow is no longer followed.)
    app.sql("DELETE FROM temporal_runs").await;
    until(&app, "every run projected again", "SELECT count(*) >= 11 AND bool_and(closed) AS ok FROM temporal_runs")
        .await;
    // A few more passes of both.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(count().await, before, "the same histories projected again appended events");
    drop(replica);

    // AC9.2: no history holds an event caused by the ledger.
    for id in [
        "wf-complete",
        "wf-dropped",
        "wf-retry",
        "wf-terminate",
        "wf-cancel",
        "wf-timeout",
        "wf-continue",
        "wf-noevidence",
    ] {
        for event in temporal.history(id).await {
            let text = event.to_string();
            assert!(!text.contains(work_ledger::temporal::IDENTITY), "{id}: an event by the ledger: {text}");
            let kind = event["eventType"].as_str().unwrap_or_default().to_owned();
            assert!(
                !["SIGNALED", "CANCEL_REQUESTED", "UPDATE_", "EXECUTION_OPTIONS"]
                    .iter()
                    .any(|k| kind.to_uppercase().contains(k))
                    || (id == "wf-cancel" && kind.to_uppercase().contains("CANCEL_REQUESTED")),
                "{id}: {kind}"
            );
        }
    }

    // Retention: Temporal forgets a finished workflow; the ledger does not.
    let before = unit(&app, FLEET, "wf-complete").await;
    temporal.cli(&["workflow", "delete", "--workflow-id", "wf-complete", "--yes"]).await.expect("delete");
    let deadline = tokio::time::Instant::now() + super::DEADLINE;
    while !temporal.history("wf-complete").await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "Temporal kept wf-complete");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(unit(&app, FLEET, "wf-complete").await, before);

    // O4: the audit agrees with Temporal on every unit, then names the one
    // an operator disposed of while its workflow still runs.
    let (status, out) = audit(&app, &temporal).await;
    assert!(status, "audit --temporal found mismatches: {out}");
    temporal.start_workflow("wf-running", "wait", &[]).await;
    settled(&app, "wf-running", "in_progress", 1).await;
    let running = unit(&app, FLEET, "wf-running").await;
    let by_hand = Agent::new(&app, FLEET, "operator-2", Role::Operator).await;
    let evidence = json!({"evidence": "https://tickets.example.com/1", "reason": "by hand"});
    by_hand.dispose(running["id"].as_str().unwrap_or_default(), "DEAD", evidence).await.data();
    let (status, out) = audit(&app, &temporal).await;
    assert!(!status, "audit --temporal exits 1 on a mismatch: {out}");
    let line = out.lines().find(|l| l.contains(running["id"].as_str().unwrap_or("?"))).unwrap_or_default();
    assert!(
        line.contains("ABANDONED") && line.contains("Running") && line.contains("temporal:default:wf-running:"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    let _ = temporal.cli(&["workflow", "terminate", "--workflow-id", "wf-running"]).await;
}

/// `work-ledger audit --temporal`: whether it exited 0, and its stdout.
async fn audit(app: &crate::helpers::TestApp, temporal: &Temporal) -> (bool, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .args(["audit", "--temporal", "--temporal-address", &temporal.address()])
        .env("DATABASE_URL", &app.db_url)
        .output()
        .await
        .expect("run work-ledger audit");
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}: {}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}
