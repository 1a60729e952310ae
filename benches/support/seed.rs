//! A ledger of any size, built in bulk (issue 27): `units` units and about
//! `events` events over ten fleets, the fleet `bench` holding half of them,
//! spread over two years. Set-based SQL, one statement per table, in the
//! final state of each unit, with the histories that lead to it:
//!
//! | share | units |
//! | --- | --- |
//! | 50% | MIGRATED after one attempt (verified, then disposed) |
//! | 5% | MIGRATED after a blocking question, answered |
//! | 5% | MIGRATED at the second attempt (the first failed: rework) |
//! | 15% | DROPPED, DEFERRED or DEAD after a failed attempt |
//! | 5% | VERIFIED, waiting for their disposition |
//! | 20% | READY after a failed attempt, except the newest 70 of each fleet: 40 IN_PROGRESS with a live lease, 10 whose lease ran out (stalls), 20 BLOCKED on an open question |
//!
//! Each unit has `events / units` events (at least 10): its state changes,
//! one cost record per attempt, and heartbeats in between. 200 agents per
//! fleet; the 70 live units each have a holder of their own.
//!
//! The bulk load runs with `session_replication_role = replica` (no trigger,
//! no foreign-key check per row) and without the secondary indexes, which are
//! built again afterwards from their own definitions, and the read models
//! are folded once at the end (`ledger_project_rebuild`); every row is written
//! in a state the constraints accept, and the caller proves the rest with the
//! audit (`work_ledger::operator::audit::run`), which reconciles costs,
//! attempts, the event log and every reference.

use std::time::Instant;

use sea_orm::{ConnectionTrait, DatabaseConnection};
use work_ledger::db::stmt;

use super::AnyError;

/// The big fleet; the nine others are `f01` .. `f09`.
pub const FLEET: &str = "bench";

/// The kinds of unit and their histories: (kind, position, event, from, to,
/// attempt). The first three steps open the history, the rest close it, and
/// heartbeats of attempt 1 fill the middle. A `cost_recorded` step records
/// the whole cost of its attempt.
const SCRIPT: &str = "
    ('done', 1, 'registered', NULL, 'ready', NULL), ('done', 2, 'claimed', 'ready', 'claimed', 1),
    ('done', 3, 'transitioned', 'claimed', 'in_progress', 1), ('done', 4, 'cost_recorded', NULL, NULL, 1),
    ('done', 5, 'transitioned', 'in_progress', 'verified', 1), ('done', 6, 'disposed', 'verified', 'done', 1),
    ('done_q', 1, 'registered', NULL, 'ready', NULL), ('done_q', 2, 'claimed', 'ready', 'claimed', 1),
    ('done_q', 3, 'transitioned', 'claimed', 'in_progress', 1), ('done_q', 4, 'blocked', 'in_progress', 'blocked', 1),
    ('done_q', 5, 'unblocked', 'blocked', 'in_progress', 1), ('done_q', 6, 'cost_recorded', NULL, NULL, 1),
    ('done_q', 7, 'transitioned', 'in_progress', 'verified', 1), ('done_q', 8, 'disposed', 'verified', 'done', 1),
    ('done_rework', 1, 'registered', NULL, 'ready', NULL), ('done_rework', 2, 'claimed', 'ready', 'claimed', 1),
    ('done_rework', 3, 'transitioned', 'claimed', 'in_progress', 1), ('done_rework', 4, 'cost_recorded', NULL, NULL, 1),
    ('done_rework', 5, 'released', 'in_progress', 'ready', 1), ('done_rework', 6, 'claimed', 'ready', 'claimed', 2),
    ('done_rework', 7, 'transitioned', 'claimed', 'in_progress', 2), ('done_rework', 8, 'cost_recorded', NULL, NULL, 2),
    ('done_rework', 9, 'transitioned', 'in_progress', 'verified', 2), ('done_rework', 10, 'disposed', 'verified', 'done', 2),
    ('abandoned', 1, 'registered', NULL, 'ready', NULL), ('abandoned', 2, 'claimed', 'ready', 'claimed', 1),
    ('abandoned', 3, 'transitioned', 'claimed', 'in_progress', 1), ('abandoned', 4, 'cost_recorded', NULL, NULL, 1),
    ('abandoned', 5, 'released', 'in_progress', 'ready', 1), ('abandoned', 6, 'disposed', 'ready', 'abandoned', 1),
    ('verified', 1, 'registered', NULL, 'ready', NULL), ('verified', 2, 'claimed', 'ready', 'claimed', 1),
    ('verified', 3, 'transitioned', 'claimed', 'in_progress', 1), ('verified', 4, 'cost_recorded', NULL, NULL, 1),
    ('verified', 5, 'transitioned', 'in_progress', 'verified', 1),
    ('ready', 1, 'registered', NULL, 'ready', NULL), ('ready', 2, 'claimed', 'ready', 'claimed', 1),
    ('ready', 3, 'transitioned', 'claimed', 'in_progress', 1), ('ready', 4, 'cost_recorded', NULL, NULL, 1),
    ('ready', 5, 'released', 'in_progress', 'ready', 1),
    ('held', 1, 'registered', NULL, 'ready', NULL), ('held', 2, 'claimed', 'ready', 'claimed', 1),
    ('held', 3, 'transitioned', 'claimed', 'in_progress', 1), ('held', 4, 'cost_recorded', NULL, NULL, 1),
    ('stalled', 1, 'registered', NULL, 'ready', NULL), ('stalled', 2, 'claimed', 'ready', 'claimed', 1),
    ('stalled', 3, 'transitioned', 'claimed', 'in_progress', 1), ('stalled', 4, 'cost_recorded', NULL, NULL, 1),
    ('blocked', 1, 'registered', NULL, 'ready', NULL), ('blocked', 2, 'claimed', 'ready', 'claimed', 1),
    ('blocked', 3, 'transitioned', 'claimed', 'in_progress', 1), ('blocked', 4, 'cost_recorded', NULL, NULL, 1),
    ('blocked', 5, 'blocked', 'in_progress', 'blocked', 1)";

/// The longest history in [`SCRIPT`]: the fewest events per unit.
pub const MIN_EVENTS_PER_UNIT: i64 = 10;

/// When attempt `k` of a seeded unit started (an SQL expression over the
/// unit's `created_at`): the attempts' `started_at`, and attempt 1's is the
/// unit's `first_claimed_at`.
fn attempt_start(k: &str) -> String {
    format!("created_at + ({k} * 4 - 2) * interval '1 minute'")
}

/// What the seed built, and how long each step took.
pub struct Seeded {
    pub units: i64,
    pub events: i64,
    pub steps: Vec<(String, f64)>,
}

/// Builds the ledger on an empty, migrated database (as its owner, a superuser).
pub async fn seed(db: &DatabaseConnection, units: i64, events: i64) -> Result<Seeded, AnyError> {
    let per_unit = events / units.max(1);
    if per_unit < MIN_EVENTS_PER_UNIT {
        return Err(format!("--events must be at least {MIN_EVENTS_PER_UNIT} per unit").into());
    }
    let n = units;
    let e = per_unit;
    let steps: Vec<(&str, String)> = vec![
        ("session", "SET session_replication_role = replica; SET maintenance_work_mem = '1GB'; SET work_mem = '256MB'; SET synchronous_commit = off".to_owned()),
        (
            "secondary indexes set aside",
            "CREATE TEMP TABLE seed_indexes AS
                 SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
                  WHERE t.relname IN ('work_units', 'work_unit_attempts', 'work_unit_events', 'blocking_questions')
                    AND t.relnamespace = 'public'::regnamespace
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid);
             DO $$ DECLARE r record; BEGIN
                 FOR r IN SELECT name FROM seed_indexes LOOP EXECUTE format('DROP INDEX %I', r.name); END LOOP;
             END $$"
                .to_owned(),
        ),
        (
            "plan",
            format!(
                "CREATE TEMP TABLE seed_script (kind text, pos int, event_type event_type, from_state work_state,
                                                to_state work_state, attempt_no int);
                 INSERT INTO seed_script VALUES {SCRIPT};
                 CREATE TEMP TABLE seed_units AS
                 WITH base AS (
                     SELECT g, CASE WHEN g % 2 = 0 THEN '{FLEET}' ELSE 'f' || lpad((1 + (g / 2) % 9)::text, 2, '0') END AS fleet,
                            g / 2 AS n, (g / 2) % 20 AS c
                       FROM generate_series(1, {n}) g
                 ), ranked AS (
                     SELECT b.*, row_number() OVER (PARTITION BY b.fleet, b.c >= 16 ORDER BY b.g DESC) AS r FROM base b
                 )
                 SELECT gen_random_uuid() AS id, gen_random_uuid() AS a1, gen_random_uuid() AS a2, g, n, fleet,
                        (ARRAY['cobol', 'jcl', 'pl1', 'asm'])[1 + (n / 20) % 4] AS domain,
                        CASE WHEN c <= 9 THEN 'done' WHEN c = 10 THEN 'done_q' WHEN c = 11 THEN 'done_rework'
                             WHEN c <= 14 THEN 'abandoned' WHEN c = 15 THEN 'verified'
                             WHEN r <= 40 THEN 'held' WHEN r <= 50 THEN 'stalled' WHEN r <= 70 THEN 'blocked'
                             ELSE 'ready' END AS kind,
                        c, r,
                        now() - interval '730 days' + (g::float8 / {n}) * interval '729 days' AS created_at
                   FROM ranked;
                 ALTER TABLE seed_units ADD COLUMN attempts int, ADD COLUMN agent1 text, ADD COLUMN agent2 text,
                       ADD COLUMN cost1 bigint, ADD COLUMN cost2 bigint, ADD COLUMN len int;
                 UPDATE seed_units SET
                        attempts = CASE WHEN kind = 'done_rework' THEN 2 ELSE 1 END,
                        agent1 = CASE WHEN kind IN ('held', 'stalled', 'blocked') THEN 'agent-' || lpad(r::text, 3, '0')
                                      ELSE 'agent-' || lpad((n % 200)::text, 3, '0') END,
                        agent2 = 'agent-' || lpad(((n + 1) % 200)::text, 3, '0'),
                        cost1 = 100 + (n * 7) % 500,
                        cost2 = CASE WHEN kind = 'done_rework' THEN 100 + (n * 11) % 500 ELSE 0 END,
                        len = (SELECT max(pos) FROM seed_script s WHERE s.kind = seed_units.kind);
                 ANALYZE seed_units"
            ),
        ),
        (
            "units",
            format!(
                "INSERT INTO work_units (id, fleet, external_ref, domain, state, disposition, disposed_at, claimed_by,
                                         current_attempt_id, lease_expires_at, last_heartbeat_at, attempt_count,
                                         cost_cents, evidence_urls, created_at, updated_at, first_claimed_at)
                 SELECT id, fleet, 'u' || lpad(g::text, 8, '0'), domain,
                        (CASE kind WHEN 'done' THEN 'done' WHEN 'done_q' THEN 'done' WHEN 'done_rework' THEN 'done'
                                   WHEN 'abandoned' THEN 'abandoned' WHEN 'verified' THEN 'verified'
                                   WHEN 'ready' THEN 'ready' WHEN 'blocked' THEN 'blocked' ELSE 'in_progress' END)::work_state,
                        (CASE WHEN kind LIKE 'done%' THEN 'MIGRATED'
                              WHEN kind = 'abandoned' THEN (ARRAY['DROPPED', 'DEFERRED', 'DEAD'])[c - 11] END)::disposition,
                        CASE WHEN kind LIKE 'done%' OR kind = 'abandoned' THEN created_at + {e} * interval '1 minute' END,
                        CASE WHEN kind IN ('held', 'stalled', 'blocked', 'verified') THEN agent1
                             WHEN kind = 'done_rework' THEN agent2 WHEN kind IN ('done', 'done_q') THEN agent1 END,
                        CASE WHEN attempts = 2 THEN a2 ELSE a1 END,
                        CASE WHEN kind = 'held' THEN now() + interval '1 hour'
                             WHEN kind = 'stalled' THEN now() - interval '10 minutes' END,
                        CASE WHEN kind IN ('held', 'stalled') THEN created_at + {e} * interval '1 minute' END,
                        attempts, cost1 + cost2,
                        CASE WHEN kind LIKE 'done%' OR kind = 'verified' THEN ARRAY['https://ci.example/u' || g]
                             WHEN kind = 'abandoned' THEN ARRAY['https://wiki.example/u' || g]
                             ELSE '{{}}'::text[] END,
                        created_at, created_at + {e} * interval '1 minute',
                        -- Every seeded unit was claimed: attempt 1's start.
                        {first_claim}
                   FROM seed_units",
                first_claim = attempt_start("1")
            ),
        ),
        (
            "attempts",
            format!(
            "INSERT INTO work_unit_attempts (id, fleet, unit_id, attempt_no, agent_id, outcome, cost_cents, evidence_url,
                                             started_at, ended_at)
             SELECT CASE WHEN k = 1 THEN a1 ELSE a2 END, fleet, id, k, CASE WHEN k = 1 THEN agent1 ELSE agent2 END,
                    o.outcome::attempt_outcome, CASE WHEN k = 1 THEN cost1 ELSE cost2 END,
                    CASE WHEN o.outcome = 'verified' THEN 'https://ci.example/u' || g END,
                    {started},
                    CASE WHEN o.outcome IS NOT NULL THEN created_at + (k * 4 + 2) * interval '1 minute' END
               FROM seed_units, generate_series(1, attempts) k,
                    LATERAL (SELECT CASE WHEN kind IN ('held', 'stalled', 'blocked') THEN NULL
                                         WHEN kind IN ('done', 'done_q', 'verified') OR k = 2 THEN 'verified'
                                         ELSE 'failed' END AS outcome) o",
                started = attempt_start("k")
            ),
        ),
        (
            "questions",
            "INSERT INTO blocking_questions (fleet, unit_id, attempt_id, question, status, answer, asked_by, answered_by,
                                             created_at, answered_at)
             SELECT fleet, id, a1, 'Which record layout does ' || domain || ' copybook ' || (n % 50) || ' use?',
                    CASE WHEN kind = 'blocked' THEN 'open' ELSE 'answered' END::question_status,
                    CASE WHEN kind = 'done_q' THEN 'The one in the 1998 appendix.' END, agent1,
                    CASE WHEN kind = 'done_q' THEN 'triage' END,
                    created_at + interval '4 minutes',
                    CASE WHEN kind = 'done_q' THEN created_at + interval '5 minutes' END
               FROM seed_units WHERE kind IN ('done_q', 'blocked')"
                .to_owned(),
        ),
        (
            "events",
            format!(
                "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id,
                                               cost_delta_cents, created_at, tx_id, batch)
                 SELECT u.fleet, u.id, CASE WHEN s.pos = 1 THEN NULL WHEN coalesce(s.attempt_no, 1) = 1 THEN u.a1 ELSE u.a2 END,
                        coalesce(s.event_type, 'heartbeat'), s.from_state, s.to_state,
                        CASE WHEN s.pos = 1 THEN 'importer' WHEN coalesce(s.attempt_no, 1) = 1 THEN u.agent1 ELSE u.agent2 END,
                        CASE WHEN s.event_type <> 'cost_recorded' THEN 0 WHEN s.attempt_no = 1 THEN u.cost1 ELSE u.cost2 END,
                        u.created_at + k * interval '1 minute', b.tx, b.batch
                   FROM seed_units u CROSS JOIN generate_series(1, {e}) k
                   CROSS JOIN (SELECT pg_current_xact_id()::text::bigint AS tx,
                                      nextval('work_unit_events_batch_seq') AS batch) b
                   LEFT JOIN seed_script s
                          ON s.kind = u.kind
                         AND s.pos = CASE WHEN k <= 3 THEN k WHEN k > {e} - u.len + 3 THEN k - ({e} - u.len) END
                  ORDER BY u.g, k"
            ),
        ),
        (
            "secondary indexes built",
            "DO $$ DECLARE r record; BEGIN
                 FOR r IN SELECT def FROM seed_indexes LOOP EXECUTE r.def; END LOOP;
             END $$"
                .to_owned(),
        ),
        ("session reset", "RESET session_replication_role; RESET maintenance_work_mem; RESET work_mem; RESET synchronous_commit;
                DROP TABLE seed_units, seed_script, seed_indexes".to_owned()),
        // The read models: every projection folded from the log at once, as
        // `work-ledger projections rebuild` does (docs/read-models.md).
        ("projections", "SELECT ledger_project_rebuild(p.name) FROM ledger_projections() p".to_owned()),
        // As the projector does every few seconds: the delta rows compacted
        // and the cycle times of the weeks that ended kept.
        ("compaction", "SELECT ledger_compact()".to_owned()),
        (
            "vacuum analyze",
            // Every table, so that none a migration adds is left out: a roll-up
            // never vacuumed is read from its heap, not by its covering index
            // (agent_cost_days, 30 days: 11,518 heap pages, 49 ms against 10).
            "VACUUM (ANALYZE, FREEZE)".to_owned(),
        ),
    ];
    let mut timings = Vec::new();
    for (name, sql) in steps {
        let t = Instant::now();
        db.execute_unprepared(&sql).await.map_err(|e| format!("seed step {name}: {e}"))?;
        let s = t.elapsed().as_secs_f64();
        eprintln!("  seed: {name} {s:.1} s");
        timings.push((name.to_owned(), s));
    }
    let counted = counted(db).await?;
    Ok(Seeded { steps: timings, ..counted })
}

/// The units and events of a ledger (one built by an earlier run).
pub async fn counted(db: &DatabaseConnection) -> Result<Seeded, AnyError> {
    let counts = db
        .query_one_raw(stmt(
            "SELECT (SELECT count(*) FROM work_units) AS units, (SELECT count(*) FROM work_unit_events) AS events",
            [],
        ))
        .await?
        .ok_or("no counts")?;
    Ok(Seeded { units: counts.try_get("", "units")?, events: counts.try_get("", "events")?, steps: Vec::new() })
}
