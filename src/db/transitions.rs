//! The writes after the claim: start, verify, block, unblock, release,
//! recordCost and dispose. Each is one statement whose `WHERE` is the
//! invariant (holder, state, current attempt): zero rows means "refused", and
//! the ledger then reads the unit to explain why. Each changes state and
//! appends its event(s). Start, verify and dispose are SQL functions
//! (migration 0011) so that the common call is one autocommit round trip.
//!
//! Lock order, for every write here and in [`super::claims`]: the unit's row
//! first (FOR NO KEY UPDATE, or the UPDATE of it), then its attempt, then its
//! question, then the events. Two writes on one unit therefore queue on the
//! unit's row and can never deadlock each other.

use sea_orm::{ConnectionTrait, DbErr};
use uuid::Uuid;

use super::entities::{Disposition, WorkState, work_unit};
use super::events::{Actor, INSERT_EVENT};
use super::units::{UNIT_COLUMNS, one_unit};
use super::{Notify, stmt};

/// CLAIMED -> IN_PROGRESS by the holder (`ledger_start`, migration 0011).
///
/// `conn` is a request transaction, or the pool for one autocommit round
/// trip: the function sets role and fleet itself, and the notification mode
/// when `notify` is given (`None` keeps the transaction's).
pub async fn start(
    conn: &impl ConnectionTrait,
    actor: &Actor<'_>,
    unit_id: Uuid,
    notify: Option<Notify>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!("SELECT {UNIT_COLUMNS} FROM ledger_start($1, $2, $3, $4, $5, $6) u");
    one_unit(conn, &sql, actor.values([unit_id.into(), notify.map(Notify::setting).into()])).await
}

/// IN_PROGRESS -> VERIFIED by the holder (`ledger_verify`): ends the attempt
/// as `verified` with its evidence and clears the lease (done work cannot be
/// reclaimed); the holder stays recorded until dispose. `conn` and `notify`
/// as for [`start`].
pub async fn verify(
    conn: &impl ConnectionTrait,
    actor: &Actor<'_>,
    unit_id: Uuid,
    evidence_url: &str,
    notify: Option<Notify>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!("SELECT {UNIT_COLUMNS} FROM ledger_verify($1, $2, $3, $4, $5, $6, $7) u");
    let values = actor.values([unit_id.into(), evidence_url.into(), notify.map(Notify::setting).into()]);
    one_unit(conn, &sql, values).await
}

/// IN_PROGRESS -> BLOCKED by the holder, opening a question; the lease is
/// suspended so a blocked unit never stalls.
pub async fn block(
    tx: &impl ConnectionTrait,
    actor: &Actor<'_>,
    unit_id: Uuid,
    question: &str,
    assignee_group: &str,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH u AS (
             UPDATE work_units SET state = 'blocked', lease_expires_at = NULL
              WHERE fleet = $1 AND id = $5 AND claimed_by = $2 AND state = 'in_progress'
             RETURNING *
         ), q AS (
             INSERT INTO blocking_questions (fleet, unit_id, attempt_id, question, assignee_group, asked_by)
             SELECT $1, id, current_attempt_id, $6, $7, $2 FROM u
             RETURNING id, unit_id, attempt_id
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, unit_id, attempt_id, 'blocked', 'in_progress', 'blocked', $2,
                    jsonb_build_object('question_id', id, 'assignee_group', $7::text), $3, $4
               FROM q
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(tx, &sql, actor.values([unit_id.into(), question.into(), assignee_group.into()])).await
}

/// Answers the open question of a BLOCKED unit: back to IN_PROGRESS with a
/// fresh lease (`$7` seconds) when it still has its holder, to READY when the
/// holder released it meanwhile.
pub async fn unblock(
    tx: &impl ConnectionTrait,
    actor: &Actor<'_>,
    unit_id: Uuid,
    answer: &str,
    lease_seconds: i32,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH u AS (
             UPDATE work_units
                SET state = CASE WHEN claimed_by IS NULL THEN 'ready' ELSE 'in_progress' END::work_state,
                    lease_expires_at = CASE WHEN claimed_by IS NULL THEN NULL
                                            ELSE now() + $7::int * interval '1 second' END
              WHERE fleet = $1 AND id = $5 AND state = 'blocked'
             RETURNING *
         ), q AS (
             UPDATE blocking_questions q
                SET status = 'answered', answer = $6, answered_by = $2, answered_at = now()
               FROM u WHERE q.unit_id = u.id AND q.status = 'open'
             RETURNING q.id
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, u.id, u.current_attempt_id, 'unblocked', 'blocked', u.state, $2,
                    jsonb_build_object('question_id', (SELECT id FROM q)), $3, $4
               FROM u
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(tx, &sql, actor.values([unit_id.into(), answer.into(), lease_seconds.into()])).await
}

/// The holder gives the unit up: CLAIMED|IN_PROGRESS -> READY ending the
/// attempt with `$6` (abandoned or failed); on a BLOCKED unit the attempt
/// ends as `blocked`, the holder is cleared and the unit waits for its answer.
pub async fn release(
    tx: &impl ConnectionTrait,
    actor: &Actor<'_>,
    unit_id: Uuid,
    outcome: &str,
    reason: Option<&str>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH prev AS (
             SELECT id, state, current_attempt_id FROM work_units
              WHERE fleet = $1 AND id = $5 AND claimed_by = $2 AND state IN ('claimed', 'in_progress', 'blocked')
              FOR NO KEY UPDATE
         ), u AS (
             UPDATE work_units w
                SET state = CASE WHEN prev.state = 'blocked' THEN 'blocked' ELSE 'ready' END::work_state,
                    claimed_by = NULL, lease_expires_at = NULL
               FROM prev WHERE w.id = prev.id
             RETURNING w.*
         ), a AS (
             UPDATE work_unit_attempts a
                SET outcome = CASE WHEN prev.state = 'blocked' THEN 'blocked' ELSE $6 END::attempt_outcome,
                    ended_at = now()
               FROM prev WHERE a.id = prev.current_attempt_id
             RETURNING a.outcome
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, prev.id, prev.current_attempt_id, 'released', prev.state, u.state, $2,
                    jsonb_build_object('outcome', (SELECT outcome FROM a), 'reason', $7::text), $3, $4
               FROM prev JOIN u ON u.id = prev.id
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(tx, &sql, actor.values([unit_id.into(), outcome.into(), reason.map(str::to_owned).into()])).await
}

/// Adds cost to an attempt (the attempts trigger rolls it up to the unit in
/// the same statement). `$7` true lets an operator bill any attempt. Returns
/// the unit id, or None when the attempt is not the caller's (or missing).
/// The unit's row is locked before the attempt's, as every write does: the
/// roll-up would otherwise lock attempt then unit, against a reclaim's unit
/// then attempt (a deadlock).
pub async fn record_cost(
    tx: &impl ConnectionTrait,
    actor: &Actor<'_>,
    attempt_id: Uuid,
    cents: i64,
    operator: bool,
) -> Result<Option<Uuid>, DbErr> {
    let row = tx
        .query_one_raw(stmt(
            "WITH unit AS (
                 SELECT u.id FROM work_units u
                  WHERE u.id = (SELECT unit_id FROM work_unit_attempts WHERE fleet = $1 AND id = $5)
                  FOR NO KEY UPDATE
             ), a AS (
                 UPDATE work_unit_attempts SET cost_cents = cost_cents + $6
                  WHERE fleet = $1 AND id = $5 AND (agent_id = $2 OR $7) AND EXISTS (SELECT 1 FROM unit)
                 RETURNING id, unit_id
             ), ev AS (
                 INSERT INTO work_unit_events
                        (fleet, unit_id, attempt_id, event_type, agent_id, cost_delta_cents, source_event_id, request_hash)
                 SELECT $1, unit_id, id, 'cost_recorded', $2, $6, $3, $4 FROM a
             )
             SELECT unit_id FROM a",
            actor.values([attempt_id.into(), cents.into(), operator.into()]),
        ))
        .await?;
    row.map(|r| r.try_get("", "unit_id")).transpose()
}

/// A permanent disposition to set, with the states it may be set from
/// (the state machine's dispose rule for the caller).
pub struct Disposal<'a> {
    pub unit_id: Uuid,
    pub disposition: Disposition,
    pub terminal_state: WorkState,
    /// None: keep the verification evidence (MIGRATED).
    pub evidence_url: Option<&'a str>,
    pub reason: Option<&'a str>,
    /// States in which the holder may dispose.
    pub holder_states: &'a [WorkState],
    /// States in which the caller may dispose as an operator (empty for an agent).
    pub operator_states: &'a [WorkState],
}

/// Sets the permanent disposition (`ledger_dispose`, migration 0011): the
/// disposal's states say where the holder, and an operator, may do it. Ends
/// an open attempt as `abandoned` and cancels an open question. `conn` and
/// `notify` as for [`start`].
pub async fn dispose(
    conn: &impl ConnectionTrait,
    actor: &Actor<'_>,
    d: &Disposal<'_>,
    notify: Option<Notify>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let names = |states: &[WorkState]| states.iter().map(|s| s.as_sql().to_owned()).collect::<Vec<String>>();
    let sql = format!("SELECT {UNIT_COLUMNS} FROM ledger_dispose($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) u");
    one_unit(
        conn,
        &sql,
        actor.values([
            d.unit_id.into(),
            d.disposition.as_sql().into(),
            d.terminal_state.as_sql().into(),
            d.evidence_url.map(str::to_owned).into(),
            d.reason.map(str::to_owned).into(),
            names(d.holder_states).into(),
            names(d.operator_states).into(),
            notify.map(Notify::setting).into(),
        ]),
    )
    .await
}
