//! Every invariant of SPEC §2 is enforced by PostgreSQL itself: each test
//! attempts the violation in raw SQL, as the owner (no RLS, no Rust code in
//! the way), and asserts the database refuses it.

use crate::helpers::spawn_app;

#[tokio::test]
async fn illegal_state_pairs_are_refused() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "u1").await;
    for target in ["in_progress", "verified", "blocked"] {
        let err = app.sql_refused(&format!("UPDATE work_units SET state = '{target}' WHERE id = '{unit}'")).await;
        assert!(err.contains("illegal state transition") || err.contains("violates check constraint"), "{err}");
    }
    // ready -> verified passes every CHECK constraint: only the transition trigger stops it.
    let err = app.sql_refused(&format!("UPDATE work_units SET state = 'verified' WHERE id = '{unit}'")).await;
    assert!(err.contains("illegal state transition ready -> verified"), "{err}");
    app.raw_claim(&unit, "agent-1").await;
    let err = app
        .sql_refused(&format!("UPDATE work_units SET state = 'verified', lease_expires_at = NULL WHERE id = '{unit}'"))
        .await;
    assert!(err.contains("illegal state transition claimed -> verified"), "{err}");
    let state = app.sql_json(&format!("SELECT state::text FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(state[0]["state"], "claimed");
}

async fn done_unit(app: &crate::helpers::TestApp, external_ref: &str) -> String {
    let unit = app.raw_unit("f", external_ref).await;
    app.raw_claim(&unit, &format!("agent-{external_ref}")).await;
    app.sql(&format!("UPDATE work_units SET state = 'in_progress' WHERE id = '{unit}'")).await;
    app.sql(&format!("UPDATE work_units SET state = 'verified', lease_expires_at = NULL WHERE id = '{unit}'")).await;
    app.sql(&format!(
        "UPDATE work_units SET state = 'done', disposition = 'MIGRATED', disposed_at = now() WHERE id = '{unit}'"
    ))
    .await;
    unit
}

#[tokio::test]
async fn a_disposition_is_set_once_and_only_with_a_terminal_state() {
    let app = spawn_app().await;
    let ready = app.raw_unit("f", "ready").await;
    let err = app
        .sql_refused(&format!(
            "UPDATE work_units SET disposition = 'DROPPED', disposed_at = now() WHERE id = '{ready}'"
        ))
        .await;
    assert!(err.contains("work_units_disposition_matches_state"), "{err}");
    // done requires MIGRATED, abandoned refuses MIGRATED.
    let verified = done_unit(&app, "d1").await;
    let err = app.sql_refused(&format!("UPDATE work_units SET disposition = 'DEAD' WHERE id = '{verified}'")).await;
    assert!(err.contains("permanent") || err.contains("work_units_disposition_matches_state"), "{err}");
    let err = app.sql_refused(&format!("UPDATE work_units SET disposed_at = now() WHERE id = '{verified}'")).await;
    assert!(err.contains("disposition of unit") && err.contains("is permanent"), "{err}");
    let err = app
        .sql_refused(&format!(
            "UPDATE work_units SET state = 'abandoned', disposition = 'DEAD' WHERE id = '{verified}'"
        ))
        .await;
    assert!(err.contains("permanent"), "{err}");
    let err = app
        .sql_refused(&format!(
            "UPDATE work_units SET state = 'abandoned', disposition = 'MIGRATED', disposed_at = now() WHERE id = '{ready}'"
        ))
        .await;
    assert!(err.contains("work_units_disposition_matches_state"), "{err}");
    let err = app.sql_refused(&format!("UPDATE work_units SET state = 'ready' WHERE id = '{verified}'")).await;
    assert!(err.contains("terminal"), "{err}");
}

#[tokio::test]
async fn events_refuse_update_delete_and_truncate() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "u1").await;
    app.sql(&format!("INSERT INTO work_unit_events (fleet, unit_id, event_type) VALUES ('f', '{unit}', 'registered')"))
        .await;
    let err = app.sql_refused("UPDATE work_unit_events SET agent_id = 'forger'").await;
    assert!(err.contains("append-only"), "{err}");
    let err = app.sql_refused("DELETE FROM work_unit_events").await;
    assert!(err.contains("append-only"), "{err}");
    let err = app.sql_refused("TRUNCATE work_unit_events CASCADE").await;
    assert!(err.contains("append-only"), "{err}");
    let err = app.sql_refused(&format!("DELETE FROM work_units WHERE id = '{unit}'")).await;
    assert!(err.contains("append-only"), "{err}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, 1);
}

#[tokio::test]
async fn one_live_claim_per_agent_per_fleet() {
    let app = spawn_app().await;
    let a = app.raw_unit("f", "a").await;
    let b = app.raw_unit("f", "b").await;
    app.raw_claim(&a, "agent-1").await;
    let err = app
        .sql_refused(&format!(
            "WITH x AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id) VALUES ('f', '{b}', 1, 'agent-1') RETURNING id)
             UPDATE work_units SET state = 'claimed', claimed_by = 'agent-1', current_attempt_id = (SELECT id FROM x),
                    attempt_count = 1, lease_expires_at = now() + interval '1 hour' WHERE id = '{b}'"
        ))
        .await;
    assert!(err.contains("work_units_one_live_claim_per_agent"), "{err}");
    // The same agent name in another fleet is another agent.
    let other = app.raw_unit("g", "a").await;
    app.raw_claim(&other, "agent-1").await;
}

#[tokio::test]
async fn one_open_question_per_unit() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "q").await;
    let attempt = app.raw_claim(&unit, "agent-1").await;
    let ask = format!(
        "INSERT INTO blocking_questions (fleet, unit_id, attempt_id, question, asked_by) \
         VALUES ('f', '{unit}', '{attempt}', 'which schema?', 'agent-1')"
    );
    app.sql(&ask).await;
    let err = app.sql_refused(&ask).await;
    assert!(err.contains("blocking_questions_one_open_per_unit"), "{err}");
    app.sql(
        "UPDATE blocking_questions SET status = 'answered', answer = 'v2', answered_by = 'triage', answered_at = now()",
    )
    .await;
    app.sql(&ask).await;
}

#[tokio::test]
async fn unit_cost_is_the_sum_of_its_attempts() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "c").await;
    let attempt = app.raw_claim(&unit, "agent-1").await;
    app.sql(&format!("UPDATE work_unit_attempts SET cost_cents = cost_cents + 250 WHERE id = '{attempt}'")).await;
    app.sql(&format!("UPDATE work_unit_attempts SET cost_cents = cost_cents + 50 WHERE id = '{attempt}'")).await;
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{unit}'")).await, 300);

    let err = app.sql_refused(&format!("UPDATE work_units SET cost_cents = 999 WHERE id = '{unit}'")).await;
    assert!(err.contains("must equal the sum of its attempts"), "{err}");
    let err = app.sql_refused(&format!("UPDATE work_unit_attempts SET cost_cents = 10 WHERE id = '{attempt}'")).await;
    assert!(err.contains("only grows"), "{err}");
    let err = app.sql_refused("INSERT INTO work_units (fleet, external_ref, cost_cents) VALUES ('f', 'rich', 5)").await;
    assert!(err.contains("starts READY with no attempts and no cost"), "{err}");
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{unit}'")).await, 300);
}

#[tokio::test]
async fn the_application_role_cannot_rewrite_history() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "u").await;
    app.sql(&format!("INSERT INTO work_unit_events (fleet, unit_id, event_type) VALUES ('f', '{unit}', 'registered')"))
        .await;
    for sql in ["DELETE FROM work_unit_events", "UPDATE work_unit_events SET agent_id = 'x'", "DELETE FROM work_units"]
    {
        let err = app.app_role_exec(Some("f"), sql).await.expect_err(sql);
        assert!(err.contains("permission denied"), "{err}");
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, 1);
}
