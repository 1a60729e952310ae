//! Every invariant of SPEC §2 is enforced by PostgreSQL itself: each test
//! attempts the violation in raw SQL, as the owner (no RLS, no Rust code in
//! the way) or as the application role with its fleet setting (as a request
//! transaction runs), and asserts the database refuses it.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app};

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

/// One raw state change with its event, in one statement (every state change
/// is logged in the transaction that makes it).
async fn raw_step(app: &crate::helpers::TestApp, unit: &str, from: &str, to: &str, set: &str) {
    app.sql(&format!(
        "WITH u AS (UPDATE work_units SET state = '{to}', {set} WHERE id = '{unit}' RETURNING fleet, id, current_attempt_id)
         INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state)
         SELECT fleet, id, current_attempt_id, 'transitioned', '{from}', '{to}' FROM u"
    ))
    .await;
}

async fn done_unit(app: &crate::helpers::TestApp, external_ref: &str) -> String {
    let unit = app.raw_unit("f", external_ref).await;
    let attempt = app.raw_claim(&unit, &format!("agent-{external_ref}")).await;
    raw_step(app, &unit, "claimed", "in_progress", "lease_expires_at = lease_expires_at").await;
    app.sql(&format!(
        "UPDATE work_unit_attempts SET outcome = 'verified', ended_at = now(), evidence_url = 'https://ci/1' WHERE id = '{attempt}'"
    ))
    .await;
    raw_step(app, &unit, "in_progress", "verified", "lease_expires_at = NULL, evidence_urls = '{https://ci/1}'").await;
    raw_step(app, &unit, "verified", "done", "disposition = 'MIGRATED', disposed_at = now()").await;
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
    // Both rules refuse it: the terminal unit is frozen, its disposition permanent.
    assert!(err.contains("permanent") || err.contains("is terminal (done)"), "{err}");
    let err = app
        .sql_refused(&format!(
            "UPDATE work_units SET state = 'abandoned', disposition = 'MIGRATED', disposed_at = now() WHERE id = '{ready}'"
        ))
        .await;
    // No move abandons a unit as MIGRATED (the state machine), nor may the two go together (the CHECK).
    assert!(err.contains("illegal state transition") || err.contains("work_units_disposition_matches_state"), "{err}");
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
            "WITH x AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id) VALUES ('f', '{b}', 1, 'agent-1') RETURNING id, started_at)
             UPDATE work_units SET state = 'claimed', claimed_by = 'agent-1', current_attempt_id = (SELECT id FROM x),
                    attempt_count = 1, lease_expires_at = now() + interval '1 hour',
                    first_claimed_at = (SELECT started_at FROM x) WHERE id = '{b}'"
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

/// The refusal of hand-written SQL (as the owner: the only login with table
/// writes; the write functions' own statements skip these guards, SPEC §2)
/// in a transaction that commits: deferred checks run too.
async fn owner_refused(app: &crate::helpers::TestApp, sqls: &[&str]) -> String {
    match app.commit_as(None, "f", sqls).await {
        Ok(()) => panic!("PostgreSQL accepted as the owner: {sqls:?}"),
        Err(e) => e,
    }
}

/// A unit IN_PROGRESS for `agent-1` through the API; (unit, attempt).
async fn working_unit(app: &crate::helpers::TestApp, external_ref: &str) -> (String, String) {
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &[external_ref]).await;
    let agent = Agent::new(app, "f", &format!("agent-{external_ref}"), Role::Agent).await;
    let claim = agent.claim_next(json!({})).await;
    let (unit, attempt) = (claim.str("id"), claim.str("currentAttemptId"));
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    (unit, attempt)
}

#[tokio::test]
async fn the_holder_is_always_the_agent_of_the_current_attempt() {
    let app = spawn_app().await;
    let (unit, _) = working_unit(&app, "h").await;
    let err =
        owner_refused(&app, &[&format!("UPDATE work_units SET claimed_by = 'intruder' WHERE id = '{unit}'")]).await;
    assert!(err.contains("work_units_holder_is_attempt_agent"), "{err}");
    // Another unit's (or an ended) attempt cannot be swapped in either.
    let other = app.raw_unit("f", "other").await;
    let foreign = app.raw_claim(&other, "agent-x").await;
    let err = app
        .commit_as(
            None,
            "f",
            &[&format!(
                "UPDATE work_units SET claimed_by = 'agent-x', current_attempt_id = '{foreign}' WHERE id = '{unit}'"
            )],
        )
        .await
        .expect_err("a foreign attempt");
    assert!(
        err.contains("work_units_holder_is_attempt_agent") || err.contains("work_units_one_live_claim_per_agent"),
        "{err}"
    );
    let holder = app.sql_json(&format!("SELECT claimed_by FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(holder[0]["claimed_by"], "agent-h");
}

#[tokio::test]
async fn verified_needs_evidence_and_an_ended_attempt() {
    let app = spawn_app().await;
    let (unit, attempt) = working_unit(&app, "v").await;
    let event = format!(
        "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state)
         VALUES ('f', '{unit}', '{attempt}', 'transitioned', 'in_progress', 'verified')"
    );
    // No evidence: refused at once.
    let err = app
        .commit_as(
            None,
            "f",
            &[
                &format!("UPDATE work_units SET state = 'verified', lease_expires_at = NULL WHERE id = '{unit}'"),
                &event,
            ],
        )
        .await
        .expect_err("verified without evidence");
    assert!(err.contains("work_units_settled_has_evidence"), "{err}");
    // Evidence, an event, but the attempt still running: refused at commit.
    let err = owner_refused(
        &app,
        &[
            &format!(
                "UPDATE work_units SET state = 'verified', lease_expires_at = NULL, evidence_urls = '{{https://ci/1}}' WHERE id = '{unit}'"
            ),
            &event,
        ],
    )
    .await;
    assert!(err.contains("work_units_verified_attempt_ended"), "{err}");
    // An attempt verified without its evidence link.
    let err = owner_refused(
        &app,
        &[&format!("UPDATE work_unit_attempts SET outcome = 'verified', ended_at = now() WHERE id = '{attempt}'")],
    )
    .await;
    assert!(err.contains("work_unit_attempts_verified_has_evidence"), "{err}");
    // All of it together is the legal way.
    app.commit_as(
        None,
        "f",
        &[
            &format!(
                "UPDATE work_unit_attempts SET outcome = 'verified', ended_at = now(), evidence_url = 'https://ci/1' WHERE id = '{attempt}'"
            ),
            &format!(
                "UPDATE work_units SET state = 'verified', lease_expires_at = NULL, evidence_urls = '{{https://ci/1}}' WHERE id = '{unit}'"
            ),
            &event,
        ],
    )
    .await
    .expect("a verified unit with evidence, an ended attempt and its event");
}

#[tokio::test]
async fn every_state_change_is_logged_and_a_settled_unit_has_evidence() {
    let app = spawn_app().await;
    let unit = app.raw_unit("f", "r").await;
    let drop = format!(
        "UPDATE work_units SET state = 'abandoned', disposition = 'DROPPED', disposed_at = now() WHERE id = '{unit}'"
    );
    let err = owner_refused(&app, &[&drop]).await;
    assert!(err.contains("work_units_settled_has_evidence"), "{err}");
    let drop_with_evidence = format!(
        "UPDATE work_units SET state = 'abandoned', disposition = 'DROPPED', disposed_at = now(),
                evidence_urls = '{{https://wiki/drop}}' WHERE id = '{unit}'"
    );
    let err = owner_refused(&app, &[&drop_with_evidence]).await;
    assert!(err.contains("work_units_change_has_event"), "{err}");
    // An event of another transition does not count.
    let wrong_event = format!(
        "INSERT INTO work_unit_events (fleet, unit_id, event_type, from_state, to_state)
         VALUES ('f', '{unit}', 'disposed', 'ready', 'done')"
    );
    let err = owner_refused(&app, &[&drop_with_evidence, &wrong_event]).await;
    assert!(err.contains("work_units_change_has_event"), "{err}");
    let state = app.sql_json(&format!("SELECT state::text FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(state[0]["state"], "ready");
    let event = format!(
        "INSERT INTO work_unit_events (fleet, unit_id, event_type, from_state, to_state)
         VALUES ('f', '{unit}', 'disposed', 'ready', 'abandoned')"
    );
    app.commit_as(None, "f", &[&drop_with_evidence, &event]).await.expect("a logged, evidenced drop");
}

#[tokio::test]
async fn an_ended_attempt_is_history() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let (unit, attempt) = working_unit(&app, "e").await;
    op.dispose(&unit, "DEAD", json!({ "evidence": "https://wiki/dead" })).await.data();
    for set in ["evidence_url = 'https://forged'", "started_at = now() - interval '1 day'"] {
        let err = owner_refused(&app, &[&format!("UPDATE work_unit_attempts SET {set} WHERE id = '{attempt}'")]).await;
        assert!(
            err.contains("work_unit_attempts_ended_frozen") || err.contains("work_unit_attempts_identity_immutable"),
            "{set}: {err}"
        );
    }
    // started_at never changes, even while the attempt runs.
    let (_, running) = working_unit(&app, "e3").await;
    let err =
        owner_refused(&app, &[&format!("UPDATE work_unit_attempts SET started_at = now() WHERE id = '{running}'")])
            .await;
    assert!(err.contains("work_unit_attempts_identity_immutable"), "{err}");
    // Late cost still rolls up onto an ended attempt.
    app.commit_as(
        None,
        "f",
        &[&format!("UPDATE work_unit_attempts SET cost_cents = cost_cents + 5 WHERE id = '{attempt}'")],
    )
    .await
    .expect("late cost");
}

#[tokio::test]
async fn an_answered_question_is_history() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-q", Role::Agent).await;
    app.register(&op.token, &["q"]).await;
    let unit = agent.claim_next(json!({})).await.str("id");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.block(&unit, "which schema?", json!({})).await.data();
    // The question text is fixed from the start.
    let err = owner_refused(&app, &["UPDATE blocking_questions SET question = 'rewritten'"]).await;
    assert!(err.contains("blocking_questions_identity_immutable"), "{err}");
    op.unblock(&unit, "v2", json!({})).await.data();
    for set in [
        "question = 'rewritten'",
        "answer = 'v3'",
        "answered_by = 'someone-else'",
        "answered_at = now() - interval '1 day'",
        "status = 'cancelled', cancelled_at = now()",
        "status = 'open', answer = NULL, answered_by = NULL, answered_at = NULL",
    ] {
        let err = owner_refused(&app, &[&format!("UPDATE blocking_questions SET {set}")]).await;
        assert!(
            err.contains("blocking_questions_closed_immutable")
                || err.contains("blocking_questions_identity_immutable"),
            "{set}: {err}"
        );
    }
    let q = app.sql_json("SELECT question, answer, answered_by FROM blocking_questions").await;
    assert_eq!(q, vec![json!({ "question": "which schema?", "answer": "v2", "answered_by": "op" })]);
}

/// The first claim a unit carries for the cycle times: the
/// claim that makes attempt 1 writes its start, a reclaim leaves it, and no
/// hand moves it, claims without it or sets it to another time.
#[tokio::test]
async fn a_units_first_claim_is_the_start_of_its_first_attempt_for_good() {
    let app = spawn_app().await;
    let (unit, first) = working_unit(&app, "c").await;
    let first_claim = format!(
        "SELECT count(*) FROM work_units u JOIN work_unit_attempts a ON a.id = '{first}'
          WHERE u.id = '{unit}' AND u.first_claimed_at = a.started_at"
    );
    assert_eq!(app.sql_i64(&first_claim).await, 1, "the claim wrote attempt 1's start");

    // Reclaimed by another agent: attempt 2, the first claim stays.
    app.expire_lease(&unit).await;
    let other = Agent::new(&app, "f", "agent-other", Role::Agent).await;
    let second = other.claim_unit(&unit, json!({})).await.str("currentAttemptId");
    assert_ne!(second, first);
    assert_eq!(app.sql_i64(&first_claim).await, 1, "a reclaim leaves the first claim");

    let err =
        owner_refused(&app, &[&format!("UPDATE work_units SET first_claimed_at = now() WHERE id = '{unit}'")]).await;
    assert!(err.contains("work_units_first_claim_immutable"), "{err}");
    let err =
        owner_refused(&app, &[&format!("UPDATE work_units SET first_claimed_at = NULL WHERE id = '{unit}'")]).await;
    assert!(err.contains("work_units_first_claim_immutable"), "{err}");
    assert_eq!(app.sql_i64(&first_claim).await, 1);

    // A hand's claim without it, and a first claim on a unit never claimed.
    let fresh = app.raw_unit("f", "fresh").await;
    let err = owner_refused(
        &app,
        &[&format!(
            "WITH x AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
                        VALUES ('f', '{fresh}', 1, 'agent-z') RETURNING id)
             UPDATE work_units SET state = 'claimed', claimed_by = 'agent-z', current_attempt_id = (SELECT id FROM x),
                    attempt_count = 1, lease_expires_at = now() + interval '1 hour' WHERE id = '{fresh}'"
        )],
    )
    .await;
    assert!(err.contains("work_units_first_claim_when_claimed"), "{err}");
    // With it, but not attempt 1's start: refused at commit.
    let err = owner_refused(
        &app,
        &[
            &format!(
                "WITH x AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
                        VALUES ('f', '{fresh}', 1, 'agent-z') RETURNING id, started_at)
             UPDATE work_units SET state = 'claimed', claimed_by = 'agent-z', current_attempt_id = (SELECT id FROM x),
                    attempt_count = 1, lease_expires_at = now() + interval '1 hour',
                    first_claimed_at = (SELECT started_at - interval '1 hour' FROM x) WHERE id = '{fresh}'"
            ),
            &format!(
                "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id)
             SELECT fleet, id, current_attempt_id, 'claimed', 'ready', 'claimed', 'agent-z' FROM work_units
              WHERE id = '{fresh}'"
            ),
        ],
    )
    .await;
    assert!(err.contains("work_units_first_claim_is_attempt_1"), "{err}");
    let err =
        owner_refused(&app, &[&format!("UPDATE work_units SET first_claimed_at = now() WHERE id = '{fresh}'")]).await;
    assert!(err.contains("work_units_first_claim_when_claimed"), "{err}");
    let unclaimed = format!("SELECT count(*) FROM work_units WHERE id = '{fresh}' AND first_claimed_at IS NULL");
    assert_eq!(app.sql_i64(&unclaimed).await, 1);
}
