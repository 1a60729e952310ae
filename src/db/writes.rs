//! The SQL of the write path. Every write is one statement whose `WHERE` is
//! the invariant: zero rows means "refused", and the ledger then reads the
//! unit to explain why. Each statement changes state and appends its
//! event(s); the events trigger issues `pg_notify` in the same transaction.

use sea_orm::{ConnectionTrait, DbErr, EntityTrait, Value};
use uuid::Uuid;

use super::entities::work_unit;
use super::stmt;
use super::units::UNIT_COLUMNS;

/// Who writes, and the idempotency key the primary event carries.
pub struct Writer<'a> {
    pub fleet: &'a str,
    pub agent: &'a str,
    pub key: Option<Key<'a>>,
}

/// An idempotency key and the fingerprint of the request that used it.
#[derive(Clone, Copy)]
pub struct Key<'a> {
    pub id: &'a str,
    pub hash: &'a str,
}

/// The column list every write appends its events with; `$3`/`$4` fill the
/// last two (NULL unless the write carries an idempotency key).
const INSERT_EVENT: &str = "INSERT INTO work_unit_events
                    (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)";

impl Writer<'_> {
    /// `$1` fleet, `$2` agent, `$3` key, `$4` request hash; operation values follow.
    fn values(&self, rest: impl IntoIterator<Item = Value>) -> Vec<Value> {
        let (key, hash) = match self.key {
            Some(k) => (Some(k.id.to_owned()), Some(k.hash.to_owned())),
            None => (None, None),
        };
        let mut values: Vec<Value> = vec![self.fleet.into(), self.agent.into(), key.into(), hash.into()];
        values.extend(rest);
        values
    }
}

async fn one_unit(tx: &impl ConnectionTrait, sql: &str, values: Vec<Value>) -> Result<Option<work_unit::Model>, DbErr> {
    work_unit::Entity::find().from_raw_sql(stmt(sql, values)).one(tx).await
}

/// The claim: lock one unit, supersede a stale attempt, open attempt N+1,
/// take the unit, and append `stale_reclaimed` (when stale) and `claimed`;
/// all in one statement. `{pick}` is one or more CTEs, the last named `pick`,
/// that lock the candidate row FOR UPDATE and yield (id, state,
/// current_attempt_id, attempt_count, claimed_by); they may refer to `held`,
/// the agent's live unit. `$5` is the lease in seconds.
fn claim_sql(pick: &str) -> String {
    format!(
        "WITH held AS (
             SELECT id FROM work_units
              WHERE fleet = $1 AND claimed_by = $2 AND state IN ('claimed', 'in_progress', 'blocked')
         ), {pick}, superseded AS (
             UPDATE work_unit_attempts a SET outcome = 'superseded', ended_at = now()
               FROM pick WHERE a.id = pick.current_attempt_id AND pick.state <> 'ready'
             RETURNING a.id
         ), attempt AS (
             INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
             SELECT $1, id, attempt_count + 1, $2 FROM pick
             RETURNING id, unit_id, attempt_no
         ), claimed AS (
             UPDATE work_units u
                SET state = 'claimed', claimed_by = $2, current_attempt_id = attempt.id,
                    attempt_count = attempt.attempt_no, lease_expires_at = now() + $5::int * interval '1 second',
                    last_heartbeat_at = now()
               FROM attempt WHERE u.id = attempt.unit_id
             RETURNING u.*
         ), events AS (
             {INSERT_EVENT}
             SELECT $1, p.id, p.current_attempt_id, 'stale_reclaimed'::event_type, p.state, 'claimed'::work_state, $2,
                    jsonb_build_object('previous_agent', p.claimed_by, 'previous_attempt_id', p.current_attempt_id),
                    NULL::text, NULL::text
               FROM pick p WHERE p.state <> 'ready'
             UNION ALL
             SELECT $1, u.id, u.current_attempt_id, 'claimed'::event_type, p.state, 'claimed'::work_state, $2,
                    jsonb_build_object('attempt_no', u.attempt_count, 'lease_seconds', $5::int), $3, $4
               FROM claimed u JOIN pick p ON p.id = u.id
         )
         SELECT {UNIT_COLUMNS} FROM claimed u"
    )
}

/// `claimNext`: stale units (expired lease) first, longest expired first,
/// then the oldest READY unit; `$6` an optional domain. SKIP LOCKED lets 64
/// agents claim at once without queueing behind each other's row locks. The
/// READY branch runs only when no stale unit was found (its NOT EXISTS is a
/// one-time filter), so it never locks a row it will not take; neither runs
/// when the agent already holds a unit.
pub async fn claim_next(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    lease_seconds: i32,
    domain: Option<&str>,
) -> Result<Option<work_unit::Model>, DbErr> {
    const PICK: &str = "stale AS (
            SELECT id, state, current_attempt_id, attempt_count, claimed_by FROM work_units
             WHERE fleet = $1 AND state IN ('claimed', 'in_progress') AND lease_expires_at < now()
               AND ($6::text IS NULL OR domain = $6) AND NOT EXISTS (SELECT 1 FROM held)
             ORDER BY lease_expires_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
        ), ready AS (
            SELECT id, state, current_attempt_id, attempt_count, claimed_by FROM work_units
             WHERE fleet = $1 AND state = 'ready' AND ($6::text IS NULL OR domain = $6)
               AND NOT EXISTS (SELECT 1 FROM held) AND NOT EXISTS (SELECT 1 FROM stale)
             ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
        ), pick AS (
            SELECT * FROM stale UNION ALL SELECT * FROM ready
        )";
    one_unit(tx, &claim_sql(PICK), w.values([lease_seconds.into(), domain.map(str::to_owned).into()])).await
}

/// `claimUnit`: the named unit when READY or stale. No SKIP LOCKED: a
/// concurrent claimant waits for the lock, re-checks the condition, and
/// finds the unit taken.
pub async fn claim_unit(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    lease_seconds: i32,
    unit_id: Uuid,
) -> Result<Option<work_unit::Model>, DbErr> {
    const PICK: &str = "pick AS (
            SELECT id, state, current_attempt_id, attempt_count, claimed_by FROM work_units
             WHERE fleet = $1 AND id = $6 AND NOT EXISTS (SELECT 1 FROM held)
               AND (state = 'ready' OR (state IN ('claimed', 'in_progress') AND lease_expires_at < now()))
             FOR UPDATE
        )";
    one_unit(tx, &claim_sql(PICK), w.values([lease_seconds.into(), unit_id.into()])).await
}

/// Extends the lease of the caller's live unit (a `heartbeat` event), found by
/// attempt (`$6`) or, when `$6` is NULL, by holder alone (`claimNext` by an
/// agent that already holds a unit). Only the current attempt qualifies, so a
/// superseded holder changes nothing. A lease that ran out may still be
/// extended as long as nobody reclaimed the unit.
pub async fn heartbeat(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    lease_seconds: i32,
    attempt_id: Option<Uuid>,
    via: &str,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH u AS (
             UPDATE work_units SET lease_expires_at = now() + $5::int * interval '1 second', last_heartbeat_at = now()
              WHERE fleet = $1 AND claimed_by = $2 AND state IN ('claimed', 'in_progress')
                AND ($6::uuid IS NULL OR current_attempt_id = $6)
             RETURNING *
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, id, current_attempt_id, 'heartbeat', state, state, $2,
                    jsonb_build_object('lease_seconds', $5::int, 'via', $7::text), $3, $4
               FROM u
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(tx, &sql, w.values([lease_seconds.into(), attempt_id.into(), via.into()])).await
}

/// The live unit the agent holds, if any (CLAIMED, IN_PROGRESS or BLOCKED).
pub async fn held_by(tx: &impl ConnectionTrait, fleet: &str, agent: &str) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "SELECT {UNIT_COLUMNS} FROM work_units u
          WHERE u.fleet = $1 AND u.claimed_by = $2 AND u.state IN ('claimed', 'in_progress', 'blocked')"
    );
    work_unit::Entity::find().from_raw_sql(stmt(&sql, [fleet.into(), agent.into()])).one(tx).await
}

/// CLAIMED -> IN_PROGRESS by the holder.
pub async fn start(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    unit_id: Uuid,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH u AS (
             UPDATE work_units SET state = 'in_progress'
              WHERE fleet = $1 AND id = $5 AND claimed_by = $2 AND state = 'claimed'
             RETURNING *
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, id, current_attempt_id, 'transitioned', 'claimed', 'in_progress', $2, '{{}}', $3, $4 FROM u
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(tx, &sql, w.values([unit_id.into()])).await
}

/// IN_PROGRESS -> VERIFIED by the holder: ends the attempt as `verified`
/// with its evidence and clears the lease (done work cannot be reclaimed);
/// the holder stays recorded until dispose.
pub async fn verify(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    unit_id: Uuid,
    evidence_url: &str,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH u AS (
             UPDATE work_units
                SET state = 'verified', lease_expires_at = NULL, evidence_urls = array_append(evidence_urls, $6)
              WHERE fleet = $1 AND id = $5 AND claimed_by = $2 AND state = 'in_progress'
             RETURNING *
         ), a AS (
             UPDATE work_unit_attempts a SET outcome = 'verified', evidence_url = $6, ended_at = now()
               FROM u WHERE a.id = u.current_attempt_id
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, id, current_attempt_id, 'transitioned', 'in_progress', 'verified', $2,
                    jsonb_build_object('evidence_url', $6::text), $3, $4
               FROM u
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(tx, &sql, w.values([unit_id.into(), evidence_url.into()])).await
}

/// IN_PROGRESS -> BLOCKED by the holder, opening a question; the lease is
/// suspended so a blocked unit never stalls.
pub async fn block(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
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
    one_unit(tx, &sql, w.values([unit_id.into(), question.into(), assignee_group.into()])).await
}

/// Answers the open question of a BLOCKED unit: back to IN_PROGRESS with a
/// fresh lease (`$7` seconds) when it still has its holder, to READY when the
/// holder released it meanwhile.
pub async fn unblock(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
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
    one_unit(tx, &sql, w.values([unit_id.into(), answer.into(), lease_seconds.into()])).await
}

/// The holder gives the unit up: CLAIMED|IN_PROGRESS -> READY ending the
/// attempt with `$6` (abandoned or failed); on a BLOCKED unit the attempt
/// ends as `blocked`, the holder is cleared and the unit waits for its answer.
pub async fn release(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    unit_id: Uuid,
    outcome: &str,
    reason: Option<&str>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH prev AS (
             SELECT id, state, current_attempt_id FROM work_units
              WHERE fleet = $1 AND id = $5 AND claimed_by = $2 AND state IN ('claimed', 'in_progress', 'blocked')
              FOR UPDATE
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
    one_unit(tx, &sql, w.values([unit_id.into(), outcome.into(), reason.map(str::to_owned).into()])).await
}

/// Adds cost to an attempt (the attempts trigger rolls it up to the unit in
/// the same statement). `$7` true lets an operator bill any attempt. Returns
/// the unit id, or None when the attempt is not the caller's (or missing).
pub async fn record_cost(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    attempt_id: Uuid,
    cents: i64,
    operator: bool,
) -> Result<Option<Uuid>, DbErr> {
    let row = tx
        .query_one_raw(stmt(
            "WITH a AS (
                 UPDATE work_unit_attempts SET cost_cents = cost_cents + $6
                  WHERE fleet = $1 AND id = $5 AND (agent_id = $2 OR $7)
                 RETURNING id, unit_id
             ), ev AS (
                 INSERT INTO work_unit_events
                        (fleet, unit_id, attempt_id, event_type, agent_id, cost_delta_cents, source_event_id, request_hash)
                 SELECT $1, unit_id, id, 'cost_recorded', $2, $6, $3, $4 FROM a
             )
             SELECT unit_id FROM a",
            w.values([attempt_id.into(), cents.into(), operator.into()]),
        ))
        .await?;
    row.map(|r| r.try_get("", "unit_id")).transpose()
}

/// Sets the permanent disposition. `$6` disposition, `$7` terminal state,
/// `$8` evidence URL (NULL: keep the verification evidence), `$9` reason,
/// `$10` states in which the holder may do it, `$11` states in which the
/// caller may do it as an operator. Ends an open attempt as `abandoned` and
/// cancels an open question.
#[allow(clippy::too_many_arguments)]
pub async fn dispose(
    tx: &impl ConnectionTrait,
    w: &Writer<'_>,
    unit_id: Uuid,
    disposition: &str,
    terminal_state: &str,
    evidence_url: Option<&str>,
    reason: Option<&str>,
    holder_states: Vec<String>,
    operator_states: Vec<String>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "WITH prev AS (
             SELECT id, state, current_attempt_id FROM work_units
              WHERE fleet = $1 AND id = $5
                AND ((claimed_by = $2 AND state::text = ANY($10::text[])) OR state::text = ANY($11::text[]))
                AND ($8::text IS NOT NULL OR cardinality(evidence_urls) > 0)
              FOR UPDATE
         ), u AS (
             UPDATE work_units w
                SET state = $7::work_state, disposition = $6::disposition, disposed_at = now(), lease_expires_at = NULL,
                    evidence_urls = CASE WHEN $8::text IS NULL OR $8 = ANY(w.evidence_urls) THEN w.evidence_urls
                                         ELSE array_append(w.evidence_urls, $8) END
               FROM prev WHERE w.id = prev.id
             RETURNING w.*
         ), a AS (
             UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = now()
               FROM prev WHERE a.id = prev.current_attempt_id AND a.outcome IS NULL
         ), q AS (
             UPDATE blocking_questions q SET status = 'cancelled', cancelled_at = now()
               FROM prev WHERE q.unit_id = prev.id AND q.status = 'open'
         ), ev AS (
             {INSERT_EVENT}
             SELECT $1, prev.id, prev.current_attempt_id, 'disposed', prev.state, $7::work_state, $2,
                    jsonb_build_object('disposition', $6::text, 'evidence_url', coalesce($8, u.evidence_urls[cardinality(u.evidence_urls)]),
                                       'reason', $9::text),
                    $3, $4
               FROM prev JOIN u ON u.id = prev.id
         )
         SELECT {UNIT_COLUMNS} FROM u"
    );
    one_unit(
        tx,
        &sql,
        w.values([
            unit_id.into(),
            disposition.into(),
            terminal_state.into(),
            evidence_url.map(str::to_owned).into(),
            reason.map(str::to_owned).into(),
            holder_states.into(),
            operator_states.into(),
        ]),
    )
    .await
}

/// The unit an idempotency key was used on, and the request fingerprint
/// recorded with it.
pub async fn find_key(tx: &impl ConnectionTrait, fleet: &str, key: &str) -> Result<Option<(Uuid, String)>, DbErr> {
    let row = tx
        .query_one_raw(stmt(
            "SELECT unit_id, request_hash FROM work_unit_events WHERE fleet = $1 AND source_event_id = $2",
            [fleet.into(), key.into()],
        ))
        .await?;
    row.map(|r| Ok((r.try_get("", "unit_id")?, r.try_get("", "request_hash")?))).transpose()
}
