//! Temporal stopped mid-run and started again (its state kept in a file):
//! the rest of the service stays ready, the projection warns and backs off,
//! then catches up with nothing twice and nothing lost (SPEC §12).

use super::{Temporal, attempts, event_types, link, unit, until};
use crate::helpers::spawn_app_with;

const FLEET: &str = "to";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn temporal_going_away_and_coming_back_loses_nothing_and_repeats_nothing() {
    let Some(mut temporal) = Temporal::start(true).await else { return };
    let mut config = temporal.config();
    config.metrics_listen = Some("127.0.0.1:0".to_owned());
    let app = spawn_app_with(config).await;
    link(&app, FLEET).await;
    temporal.start_workflow("wf-before", "complete", &[]).await;
    temporal.start_workflow("wf-across", "wait", &[]).await;
    let in_progress = |id: &str| {
        format!(
            "SELECT EXISTS (SELECT 1 FROM work_units WHERE fleet = '{FLEET}' AND workflow_id = '{id}' AND state = 'in_progress') AS ok"
        )
    };
    until(&app, "wf-before done", &format!("SELECT EXISTS (SELECT 1 FROM work_units WHERE fleet = '{FLEET}' AND workflow_id = 'wf-before' AND state = 'done') AS ok")).await;
    until(&app, "wf-across started", &in_progress("wf-across")).await;

    temporal.stop_worker().await;
    temporal.stop_server().await;
    // Away: the service stays ready, and the projection says so in /metrics.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let ready = app.http.get(app.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 200, "readiness does not depend on Temporal");
    let metrics_addr = app.metrics_addr.expect("metrics listener");
    let scrape = || async {
        let answer = app.http.get(format!("http://{metrics_addr}/metrics")).send().await.expect("scrape");
        answer.text().await.expect("text")
    };
    let metrics = scrape().await;
    for name in [
        "work_ledger_temporal_lag_seconds",
        "work_ledger_temporal_projected_events",
        "work_ledger_temporal_skipped_events",
    ] {
        assert!(metrics.contains(name), "{name} in /metrics");
    }

    temporal.start_server().await;
    temporal.start_worker().await;
    temporal
        .cli(&["workflow", "terminate", "--workflow-id", "wf-across", "--reason", "after the outage"])
        .await
        .expect("terminate");
    temporal.start_workflow("wf-after", "complete", &[]).await;
    until(&app, "wf-across ended", &format!("SELECT EXISTS (SELECT 1 FROM work_units WHERE fleet = '{FLEET}' AND workflow_id = 'wf-across' AND state = 'ready') AS ok")).await;
    until(&app, "wf-after done", &format!("SELECT EXISTS (SELECT 1 FROM work_units WHERE fleet = '{FLEET}' AND workflow_id = 'wf-after' AND state = 'done') AS ok")).await;

    for id in ["wf-before", "wf-after"] {
        assert_eq!(
            event_types(&app, FLEET, id).await,
            ["registered", "claimed", "transitioned", "cost_recorded", "transitioned", "disposed"],
            "{id}"
        );
        assert_eq!(unit(&app, FLEET, id).await["cost_cents"], 120, "{id}");
    }
    assert_eq!(
        event_types(&app, FLEET, "wf-across").await,
        ["registered", "claimed", "transitioned", "cost_recorded", "released"]
    );
    let across = attempts(&app, FLEET, "wf-across").await;
    assert_eq!((across.len(), across[0]["reason"].as_str()), (1, Some("after the outage")));
    let projected = scrape().await;
    assert!(
        projected.lines().any(|l| l.starts_with("work_ledger_temporal_projected_events_total ") && !l.ends_with(" 0")),
        "{projected}"
    );
}
