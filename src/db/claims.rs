//! The claim and the lease: `claimNext` and `claimUnit` as one CTE chain
//! each, the heartbeat that extends a lease, and what an agent holds.
//! Like every write, each is one statement whose `WHERE` is the invariant:
//! zero rows means "refused", and the ledger then reads to explain why.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, FromQueryResult, Value};
use uuid::Uuid;

use super::entities::work_unit;
use super::events::{Actor, INSERT_EVENT};
use super::units::{UNIT_COLUMNS, one_unit};
use super::{Notify, stmt};

/// The claim: lock one unit, supersede a stale attempt, open attempt N+1,
/// take the unit, and append `stale_reclaimed` (when stale) and `claimed`;
/// all in one statement. `{pick}` is one or more CTEs, the last named `pick`,
/// that lock the candidate row FOR NO KEY UPDATE and yield (id, state,
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
         SELECT {UNIT_COLUMNS}, p.state <> 'ready' AS reclaimed FROM claimed u JOIN pick p ON p.id = u.id"
    )
}

/// A unit a claim took.
#[derive(Debug)]
pub struct Claimed {
    pub unit: work_unit::Model,
    /// The unit's lease had expired (a `stale_reclaimed` event), it was not READY.
    pub reclaimed: bool,
}

/// The row a claim statement returned, if any.
async fn one_claim(tx: &impl ConnectionTrait, sql: &str, values: Vec<Value>) -> Result<Option<Claimed>, DbErr> {
    let Some(row) = tx.query_one_raw(stmt(sql, values)).await? else { return Ok(None) };
    Ok(Some(Claimed { unit: work_unit::Model::from_query_result(&row, "")?, reclaimed: row.try_get("", "reclaimed")? }))
}

/// `claimNext`: stale units (expired lease) first, longest expired first,
/// then the oldest READY unit, optionally of one domain. SKIP LOCKED lets 64
/// agents claim at once without queueing behind each other's row locks.
/// The lock is FOR NO KEY UPDATE (what the claim's own UPDATE takes): FOR
/// UPDATE would also conflict with the KEY SHARE lock that any insert
/// referencing the unit holds (an event, a stall report), and SKIP LOCKED
/// would then pass over a READY unit that nobody is claiming. The
/// READY branch runs only when no stale unit was found (its NOT EXISTS is a
/// one-time filter), so it never locks a row it will not take; neither runs
/// when the agent already holds a unit.
pub async fn claim_next(
    tx: &impl ConnectionTrait,
    actor: &Actor<'_>,
    lease_seconds: i32,
    domain: Option<&str>,
) -> Result<Option<Claimed>, DbErr> {
    let mut values = actor.values([lease_seconds.into()]);
    if let Some(domain) = domain {
        values.push(domain.into());
    }
    one_claim(tx, &claim_next_sql(domain.is_some()), values).await
}

/// The `claimNext` statement; with a domain it is `$6`. Two statements, not
/// one with `($6 IS NULL OR domain = $6)`: a prepared statement's cached
/// generic plan cannot know whether `$6` is NULL, so it would filter the whole
/// fleet's READY units by domain instead of reading the domain's index.
pub fn claim_next_sql(with_domain: bool) -> String {
    let domain = if with_domain { "AND domain = $6::text" } else { "" };
    let pick = format!(
        "stale AS (
            SELECT id, state, current_attempt_id, attempt_count, claimed_by FROM work_units
             WHERE fleet = $1 AND state IN ('claimed', 'in_progress') AND lease_expires_at < now()
               {domain} AND NOT EXISTS (SELECT 1 FROM held)
             ORDER BY lease_expires_at, id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
        ), ready AS (
            SELECT id, state, current_attempt_id, attempt_count, claimed_by FROM work_units
             WHERE fleet = $1 AND state = 'ready' {domain}
               AND NOT EXISTS (SELECT 1 FROM held) AND NOT EXISTS (SELECT 1 FROM stale)
             ORDER BY created_at, id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
        ), pick AS (
            SELECT * FROM stale UNION ALL SELECT * FROM ready
        )"
    );
    claim_sql(&pick)
}

/// `claimUnit`: the named unit when READY or stale. No SKIP LOCKED: a
/// concurrent claimant waits for the lock, re-checks the condition, and
/// finds the unit taken.
pub async fn claim_unit(
    tx: &impl ConnectionTrait,
    actor: &Actor<'_>,
    lease_seconds: i32,
    unit_id: Uuid,
) -> Result<Option<Claimed>, DbErr> {
    const PICK: &str = "pick AS (
            SELECT id, state, current_attempt_id, attempt_count, claimed_by FROM work_units
             WHERE fleet = $1 AND id = $6 AND NOT EXISTS (SELECT 1 FROM held)
               AND (state = 'ready' OR (state IN ('claimed', 'in_progress') AND lease_expires_at < now()))
             FOR NO KEY UPDATE
        )";
    one_claim(tx, &claim_sql(PICK), actor.values([lease_seconds.into(), unit_id.into()])).await
}

/// Extends the lease of the caller's live unit (a `heartbeat` event), found by
/// attempt (`$6`) or, when `$6` is NULL, by holder alone (`claimNext` by an
/// agent that already holds a unit). Only the current attempt qualifies, so a
/// superseded holder changes nothing. A lease that ran out may still be
/// extended as long as nobody reclaimed the unit. The SQL is
/// `ledger_heartbeat` (migration 0011); `conn` is a request transaction or
/// the pool, and `notify` as for [`super::transitions::start`].
pub async fn heartbeat(
    conn: &impl ConnectionTrait,
    actor: &Actor<'_>,
    lease_seconds: i32,
    attempt_id: Option<Uuid>,
    via: &str,
    notify: Option<Notify>,
) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!("SELECT {UNIT_COLUMNS} FROM ledger_heartbeat($1, $2, $3, $4, $5, $6, $7, $8) u");
    let values = [lease_seconds.into(), attempt_id.into(), via.into(), notify.map(Notify::setting).into()];
    one_unit(conn, &sql, actor.values(values)).await
}

/// The live unit the agent holds, if any (CLAIMED, IN_PROGRESS or BLOCKED).
pub async fn held_by(tx: &impl ConnectionTrait, fleet: &str, agent: &str) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "SELECT {UNIT_COLUMNS} FROM work_units u
          WHERE u.fleet = $1 AND u.claimed_by = $2 AND u.state IN ('claimed', 'in_progress', 'blocked')"
    );
    work_unit::Entity::find().from_raw_sql(stmt(&sql, [fleet.into(), agent.into()])).one(tx).await
}

/// What [`claim_next_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimNext {
    /// Claimed a unit (a new attempt); `reclaimed`: its lease had expired
    /// (a `stale_reclaimed` event), it was not READY.
    Claimed { reclaimed: bool },
    /// The agent held a CLAIMED or IN_PROGRESS unit: its lease was renewed.
    Renewed,
    /// The agent holds a BLOCKED unit: returned as it is, nothing written.
    Held,
}

/// `claimNext` without a domain or idempotency key in one autocommit round
/// trip: `ledger_claim_next` (migration 0010) sets the role, the fleet and
/// the notification mode transaction-locally and runs the claim statement
/// (the same as [`claim_next_sql`]`(false)`), then the renewal or the read of
/// what the agent holds, as [`crate::ledger::Ledger::claim_next`] does in a
/// transaction. Run it on a pool, never inside a transaction: its role
/// switch would outlive the call there.
pub async fn claim_next_now(
    db: &DatabaseConnection,
    fleet: &str,
    agent: &str,
    lease_seconds: i32,
    notify: Notify,
) -> Result<Option<(ClaimNext, work_unit::Model)>, DbErr> {
    let sql = format!(
        "SELECT c.outcome, {UNIT_COLUMNS}
           FROM ledger_claim_next($1, $2, $3, $4) c CROSS JOIN LATERAL (SELECT (c.unit).*) u"
    );
    let row = db
        .query_one_raw(stmt(&sql, [fleet.into(), agent.into(), lease_seconds.into(), notify.setting().into()]))
        .await?;
    let Some(row) = row else { return Ok(None) };
    let outcome = match row.try_get::<String>("", "outcome")?.as_str() {
        "claimed" => ClaimNext::Claimed { reclaimed: false },
        "reclaimed" => ClaimNext::Claimed { reclaimed: true },
        "renewed" => ClaimNext::Renewed,
        _ => ClaimNext::Held,
    };
    Ok(Some((outcome, work_unit::Model::from_query_result(&row, "")?)))
}
