//! Schema migrations of work-ledger. Each migration is plain SQL kept next to
//! it in `sql/`, so the schema reads as the database sees it.

pub use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{DatabaseConnection, Statement, TransactionTrait};

/// A migration that is a pair of SQL files: `sql/<file>.up.sql` and `.down.sql`.
struct SqlMigration {
    name: &'static str,
    up: &'static str,
    down: &'static str,
}

macro_rules! sql_migration {
    ($name:literal, $file:literal) => {
        Box::new(SqlMigration {
            name: $name,
            up: include_str!(concat!("sql/", $file, ".up.sql")),
            down: include_str!(concat!("sql/", $file, ".down.sql")),
        })
    };
}

impl MigrationName for SqlMigration {
    fn name(&self) -> &str {
        self.name
    }
}

#[async_trait::async_trait]
impl MigrationTrait for SqlMigration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(self.up).await.map(|_| ())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(self.down).await.map(|_| ())
    }
}

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            // The five tables of SPEC §2, their invariants, and row-level security.
            sql_migration!("m20261130_000001_ledger", "0001_ledger"),
            // The read views of SPEC §7 and the per-fleet Grafana reader roles.
            sql_migration!("m20261130_000002_views", "0002_views"),
            // Live events: each event's transaction id (exact resume cursors), revocation notices.
            sql_migration!("m20261130_000003_live", "0003_live"),
            // Exact and isolated live events: batch positions and in-flight writer markers, opaque notifications.
            sql_migration!("m20261130_000004_live_exact", "0004_live_exact"),
            // The write path under attack: holder = attempt agent, logged state changes, settled
            // units carry evidence, ended attempts and closed questions are history.
            sql_migration!("m20261130_000005_write_path", "0005_write_path"),
            // The operator's reads: reasons derived from the events, date-range indexes, North Star views.
            sql_migration!("m20261130_000007_operator_reads", "0007_operator_reads"),
            // The operator's grouped reads at scale: covering indexes, v_cost_groups, throughput per unit first.
            sql_migration!("m20261130_000008_grouped_reads", "0008_grouped_reads"),
            // The results of `work-ledger audit`, which the service exports as metrics.
            sql_migration!("m20261130_000009_audit_runs", "0009_audit_runs"),
            // Claims at the speed of the database: notifications after the commit, claimNext in one round trip.
            sql_migration!("m20261130_000010_write_speed", "0010_write_speed"),
            // The agent's hot writes in one round trip: start, verify and dispose as SQL functions.
            sql_migration!("m20261130_000011_one_statement_writes", "0011_one_statement_writes"),
            // One write path: the app role writes no table, every write is a SQL function (sql/repeatable/).
            sql_migration!("m20261130_000012_one_write_path", "0012_one_write_path"),
            // Reader logins cannot hold a transaction past 60 s: the function the reader warden calls.
            sql_migration!("m20261130_000013_reader_warden", "0013_reader_warden"),
            // Foreign sessions: writer markers out of other logins' reach, notifications that name no fleet.
            sql_migration!("m20261130_000014_foreign_sessions", "0014_foreign_sessions"),
            // Tokens that expire and say when they were used: expires_at, last_used_at, authentication that says "expired".
            sql_migration!("m20261130_000015_token_expiry", "0015_token_expiry"),
            // The triage desk: questions compare by their normalised text (similarAnswered, alsoAnswerSimilar).
            sql_migration!("m20261201_000016_similar_questions", "0016_similar_questions"),
            // The fleet roster: v_agents (one row per agent name), live and silent claiming agents.
            sql_migration!("m20261130_000017_roster", "0017_roster"),
            // Totals of units per (domain, state, disposition), folded by the sweeper, for reads at any size.
            sql_migration!("m20261201_000018_unit_totals", "0018_unit_totals"),
            // Events per fleet and type, for events { totalCount } at any size.
            sql_migration!("m20261201_000019_event_totals", "0019_event_totals"),
            // Totals per UTC day (disposals, claims, their distinct agents, events per agent) for the reads over time.
            sql_migration!("m20261202_000020_day_totals", "0020_day_totals"),
            // The claim path's own statements, cheaper: row-level security and the evidence check without a re-parsed function call.
            sql_migration!("m20261202_000021_claim_path", "0021_claim_path"),
            // Reads of the ledger after years: a date range of dispositions and the costliest units from their indexes.
            sql_migration!("m20261203_000022_ranged_pages", "0022_ranged_pages"),
            // The sweeper folds only the totals that moved, not every row of every totals table each pass.
            sql_migration!("m20261203_000023_fold_what_moved", "0023_fold_what_moved"),
            // throughput bounds its whole buckets as dates, so that the day totals' indexes take the range.
            sql_migration!("m20261203_000024_throughput_by_date", "0024_throughput_by_date"),
            // claimNext orders READY units by (created_at, external_ref), an order only the READY indexes give.
            sql_migration!("m20261204_000025_claim_order", "0025_claim_order"),
            // Ids in time order (UUID version 7): a claim's index entries on a few pages, a third of the WAL.
            sql_migration!("m20261204_000026_time_ordered_ids", "0026_time_ordered_ids"),
            // Row-level security looks up the fleet once per statement (a sub-select), not once per row.
            sql_migration!("m20261205_000027_fleet_lookup_once", "0027_fleet_lookup_once"),
            // A feed's read of its fleet's new events in one statement (live_events_after).
            sql_migration!("m20261206_000028_feed_read_in_one_statement", "0028_feed_read_in_one_statement"),
            // Cost per UTC day (per unit's group and per agent), for costSummary and costTotal over a range at any size.
            sql_migration!("m20261207_000029_cost_days", "0029_cost_days"),
            // throughput's cut buckets from their whole days and the day sets of agents; one index range per cut end.
            sql_migration!("m20261207_000030_throughput_cut_by_day", "0030_throughput_cut_by_day"),
            // Events per UTC day and type, for events { totalCount } over a range at any size.
            sql_migration!("m20261207_000031_event_days", "0031_event_days"),
            // Disposals per UTC week (disposal_days summed by week, kept by a trigger), for the weekly reads.
            sql_migration!("m20261208_000032_disposal_weeks", "0032_disposal_weeks"),
            // The live reads of many fleets in one statement (one watermark); a resumed subscription's start in one.
            sql_migration!("m20261209_000033_live_reads_together", "0033_live_reads_together"),
            // Live reads below a watermark the server already knows; the reads of many fleets at once gone.
            sql_migration!(
                "m20261210_000034_live_reads_below_a_known_watermark",
                "0034_live_reads_below_a_known_watermark"
            ),
            // The first claim kept on the unit: the current week's cycle times read from the disposal index alone.
            sql_migration!("m20261211_000035_first_claims", "0035_first_claims"),
            // A state change of a unit with cost moves its cost days without reading its attempts.
            sql_migration!("m20261211_000036_cost_days_moved_lean", "0036_cost_days_moved_lean"),
            // A cost record written as its unit's latest adds its day without recounting the unit's days.
            sql_migration!("m20261211_000037_cost_days_recorded_lean", "0037_cost_days_recorded_lean"),
            // An agent's events found by the agent, not among the fleet's.
            sql_migration!("m20261211_000038_events_by_agent", "0038_events_by_agent"),
            // A page of the roster computes its own names only: roster(fleet, after, limit) under v_agents.
            sql_migration!("m20261212_000039_roster_pages", "0039_roster_pages"),
            // Each agent name's latest attempt kept as attempts are written; the roster reads its names from
            // it, planned once per session, without a heartbeat probe for the names that hold a unit.
            sql_migration!("m20261213_000040_agent_latest", "0040_agent_latest"),
            // Disposals per day of every domain together, for a fleet-wide throughput by day; the day totals
            // read by index only.
            sql_migration!("m20261214_000041_disposal_fleet_days", "0041_disposal_fleet_days"),
            // No login forges a write: the writes authenticate the caller's token themselves; a cost
            // record's bound; the reader warden's function replaced by a repeatable one.
            sql_migration!("m20261215_000042_token_writes", "0042_token_writes"),
            // A write pays only for the write: the read models' triggers gone, projected after commit.
            sql_migration!("m20261216_000043_projections", "0043_projections"),
        ]
    }
}

/// Key of the session-level advisory lock that serialises migrations, so that
/// replicas starting together never race (the sea-orm migrator takes no lock of
/// its own). Arbitrary but fixed: "wl-migr" in ASCII.
const MIGRATION_LOCK_KEY: i64 = 0x0077_6c2d_6d69_6772;

/// Applies all pending migrations while holding the advisory lock.
///
/// `db` must be a single-connection pool: a session-level advisory lock
/// belongs to one connection, and the migrator must run on that connection.
pub async fn migrate_locked(db: &DatabaseConnection) -> Result<(), DbErr> {
    let lock = |sql: &str| Statement::from_sql_and_values(db.get_database_backend(), sql, [MIGRATION_LOCK_KEY.into()]);
    db.execute_raw(lock("SELECT pg_advisory_lock($1)")).await?;
    let result = match Migrator::up(db, None).await {
        Ok(()) => match apply_repeatable(db).await {
            Ok(()) => rebuild_outdated_projections(db).await,
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    let unlock = db.execute_raw(lock("SELECT pg_advisory_unlock($1)")).await;
    result.and(unlock.map(|_| ()))
}

/// Rebuilds from the event log every projection whose definition changed
/// since it was built, or that was never built (`ledger_project_outdated`,
/// `sql/repeatable/projections.sql`).
async fn rebuild_outdated_projections(db: &DatabaseConnection) -> Result<(), DbErr> {
    db.execute_unprepared("SELECT * FROM ledger_project_outdated()").await.map(|_| ())
}

/// The repeatable SQL files, in the order they are applied: each holds
/// `CREATE OR REPLACE` definitions (the write functions) and is applied again
/// whenever its text changed. The schema itself stays in the versioned
/// migrations above.
const REPEATABLE: &[(&str, &str)] = &[
    ("rules", include_str!("sql/repeatable/rules.sql")),
    ("state_machine", include_str!("sql/repeatable/state_machine.sql")),
    ("writes", include_str!("sql/repeatable/writes.sql")),
    ("warden", include_str!("sql/repeatable/warden.sql")),
    ("projections", include_str!("sql/repeatable/projections.sql")),
    ("reads", include_str!("sql/repeatable/reads.sql")),
];

/// Applies every repeatable file whose checksum differs from the one
/// recorded when it was last applied (each in a transaction of its own),
/// then the database-wide privileges, which `CREATE DATABASE ... TEMPLATE`
/// does not copy and so are set on every run.
async fn apply_repeatable(db: &DatabaseConnection) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    db.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS schema_repeatable (
             name       text        PRIMARY KEY,
             checksum   text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
         )",
    )
    .await?;
    for (name, sql) in REPEATABLE {
        let current = db
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                "SELECT EXISTS (SELECT 1 FROM schema_repeatable WHERE name = $1 AND checksum = md5($2)) AS current",
                [(*name).into(), (*sql).into()],
            ))
            .await?
            .map(|row| row.try_get::<bool>("", "current"))
            .transpose()?
            .unwrap_or(false);
        if current {
            continue;
        }
        let tx = db.begin().await?;
        tx.execute_unprepared(sql).await?;
        tx.execute_raw(Statement::from_sql_and_values(
            backend,
            "INSERT INTO schema_repeatable (name, checksum) VALUES ($1, md5($2))
             ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = clock_timestamp()",
            [(*name).into(), (*sql).into()],
        ))
        .await?;
        tx.commit().await?;
    }
    db.execute_unprepared(DATABASE_PRIVILEGES).await.map(|_| ())
}

/// No role but the owner may create temporary tables in the ledger's
/// database: with every function's search_path pinned a temporary table
/// cannot stand in for a ledger table anyway, and nobody needs one. Only the
/// roles that work with the ledger may connect to it (SPEC §8): the
/// migrating login, the app role and every reader login. And the reader
/// warden's function belongs to its role (migration 0013), which a restore
/// without owners does not keep.
const DATABASE_PRIVILEGES: &str = concat!(
    "DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot revoke TEMPORARY on database % from PUBLIC (not its owner)', current_database();
END
$$;
",
    include_str!("sql/database_privileges.sql")
);
