//! A followed workflow costs Temporal a read when its history grows, not a
//! read per pass: each open run's history is read on from where the last
//! read ended, as Temporal writes it (SPEC §12).

use super::{Temporal, event_types, link, until};
use crate::helpers::spawn_app_with;

const FLEET: &str = "tw";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_workflow_is_read_when_its_history_grows_not_at_every_pass() {
    let Some(temporal) = Temporal::start(false).await else { return };
    let app = spawn_app_with(temporal.config()).await;
    link(&app, FLEET).await;
    temporal.start_workflow("wf-idle", "wait", &[]).await;
    temporal.start_workflow("wf-done", "complete", &[]).await;
    until(
        &app,
        "wf-idle in progress and wf-done done",
        &format!(
            "SELECT count(*) FILTER (WHERE workflow_id = 'wf-idle' AND state = 'in_progress') = 1
                AND count(*) FILTER (WHERE workflow_id = 'wf-done' AND state = 'done') = 1 AS ok
               FROM work_units WHERE fleet = '{FLEET}'"
        ),
    )
    .await;
    // Once wf-idle sleeps (its timer started: the last event it writes for
    // an hour) and wf-done is closed, fifteen passes (200 ms apart) read
    // neither history again. A read that waits for new events may end
    // after Temporal's long-poll interval (20 s) and be asked again.
    let deadline = tokio::time::Instant::now() + super::DEADLINE;
    while !temporal
        .history("wf-idle")
        .await
        .iter()
        .any(|e| e["eventType"].as_str().unwrap_or_default().to_uppercase().replace('_', "").contains("TIMERSTARTED"))
    {
        assert!(tokio::time::Instant::now() < deadline, "wf-idle's timer did not start");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // The follower's read of the timer's event, if it was still on its way.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let before = temporal.history_reads().await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let idle = temporal.history_reads().await - before;
    assert!(idle <= 1, "{idle} history reads in 15 passes with nothing new");

    // The read that waits is answered when the history grows.
    temporal
        .cli(&["workflow", "terminate", "--workflow-id", "wf-idle", "--reason", "enough"])
        .await
        .expect("terminate");
    until(
        &app,
        "wf-idle released",
        &format!("SELECT EXISTS (SELECT 1 FROM work_units WHERE fleet = '{FLEET}' AND workflow_id = 'wf-idle' AND state = 'ready') AS ok"),
    )
    .await;
    assert_eq!(
        event_types(&app, FLEET, "wf-idle").await,
        ["registered", "claimed", "transitioned", "cost_recorded", "released"]
    );
}
