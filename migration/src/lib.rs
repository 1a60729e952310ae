//! Schema migrations of work-ledger. Each migration is plain SQL kept next to
//! it in `sql/`, so the schema reads as the database sees it.

pub use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{DatabaseConnection, Statement, TransactionTrait};

/// A forward-only migration: one SQL file, `sql/<file>.sql`. A first line
/// `--! breaking-change` says that builds older than it cannot run against
/// the schema it makes; applying it records so (`schema_breaking_changes`),
/// and an older build names it when it refuses the schema.
struct SqlMigration {
    name: &'static str,
    sql: &'static str,
}

macro_rules! sql_migration {
    ($name:literal, $sql:expr) => {
        Box::new(SqlMigration { name: $name, sql: $sql })
    };
}

/// The marker of a migration that breaks older builds.
const BREAKING: &str = "--! breaking-change";

impl MigrationName for SqlMigration {
    fn name(&self) -> &str {
        self.name
    }
}

#[async_trait::async_trait]
impl MigrationTrait for SqlMigration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared(self.sql).await?;
        if self.sql.starts_with(BREAKING) {
            db.execute_raw(Statement::from_sql_and_values(
                db.get_database_backend(),
                "INSERT INTO schema_breaking_changes (migration) VALUES ($1) ON CONFLICT DO NOTHING",
                [self.name.into()],
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, _: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(format!(
            "migration {} is forward-only: to go back, restore a backup taken before it",
            self.name
        )))
    }
}

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    /// Every `sql/NNNN_<what>.sql`, in order (listed by `build.rs`): 0001
    /// is the whole schema of the first release (the development
    /// migrations 0001-0043 folded into one), 0002 the projection from
    /// Temporal (links, per-run marks, workflow-held units).
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        include!(concat!(env!("OUT_DIR"), "/migrations.rs"))
    }
}

/// The first migration of every database made by a development build before
/// the baseline, and the last one: a backup of such a database at the last
/// restores into a fresh one ([`adopt_pre_baseline`]).
const PRE_BASELINE_FIRST: &str = "m20261130_000001_ledger";
const PRE_BASELINE_LAST: &str = "m20261216_000043_projections";

/// The code of a pre-baseline database dropped for this build's to replace
/// it: its views, and its functions but those a column default, a CHECK or
/// an index uses (`rules.sql` replaces them in place).
const ADOPT: &str = "DO $$
DECLARE
    drops text[];
    d text;
BEGIN
    -- The statements first, by name: a view or a function dropped by an
    -- earlier CASCADE is skipped (IF EXISTS) rather than named by its oid.
    SELECT array_agg(format('DROP VIEW IF EXISTS %I CASCADE', c.relname)) INTO drops FROM pg_class c
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v';
    SELECT drops || array_agg(format('DROP FUNCTION IF EXISTS %s CASCADE', p.oid::regprocedure)) INTO drops
      FROM pg_proc p
     WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = p.oid
                          AND (d.classid IN ('pg_attrdef'::regclass, 'pg_constraint'::regclass)
                               OR (d.classid = 'pg_class'::regclass
                                   AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = d.objid))));
    FOREACH d IN ARRAY coalesce(drops, '{}') LOOP
        EXECUTE d;
    END LOOP;
END
$$;
DELETE FROM schema_repeatable;
DELETE FROM seaql_migrations;";

/// How to move the data of a database made before the baseline.
const MOVE_DATA: &str = "move its data: `work-ledger backup --out ledger.dump`, create an empty database, then \
                         `work-ledger restore ledger.dump` with DATABASE_URL naming it";

/// Refuses a schema this build cannot run against: one made by a
/// development build before the baseline, or one newer than this build
/// (a versioned migration it does not know, or a repeatable file applied by a
/// newer build).
async fn check_schema(db: &DatabaseConnection) -> Result<(), DbErr> {
    if !table_exists(db, "seaql_migrations").await? {
        return Ok(());
    }
    let applied: Vec<String> = strings(db, "SELECT version FROM seaql_migrations ORDER BY version", []).await?;
    if applied.iter().any(|v| v == PRE_BASELINE_FIRST) {
        let at = applied.last().map(String::as_str).unwrap_or(PRE_BASELINE_FIRST);
        return Err(DbErr::Migration(format!(
            "this database was made by a development build before the schema baseline (its schema is at {at}); \
             this build does not migrate it: {MOVE_DATA}"
        )));
    }
    let known: Vec<String> = Migrator::migrations().iter().map(|m| m.name().to_owned()).collect();
    let ours = known.last().cloned().unwrap_or_default();
    let newer: Vec<&String> = applied.iter().filter(|v| !known.contains(v)).collect();
    if let Some(theirs) = newer.last() {
        let breaking = if table_exists(db, "schema_breaking_changes").await? {
            let names: Vec<String> = newer.iter().map(|v| (*v).clone()).collect();
            strings(
                db,
                "SELECT migration FROM schema_breaking_changes WHERE migration = ANY ($1) ORDER BY migration",
                [names.into()],
            )
            .await?
        } else {
            Vec::new()
        };
        let why = match breaking.as_slice() {
            [] => String::new(),
            b => format!(" ({} breaks older builds)", b.join(", ")),
        };
        return Err(DbErr::Migration(format!(
            "the database's schema is at {theirs}, newer than this build's {ours}{why}: run a build that knows it"
        )));
    }
    if table_exists(db, "schema_repeatable_history").await? {
        for (name, sql) in BEFORE.iter().chain(AFTER) {
            let superseded = strings(
                db,
                "SELECT h.name FROM schema_repeatable_history h JOIN schema_repeatable r USING (name)
                  WHERE h.name = $1 AND h.checksum = md5($2) AND r.checksum <> md5($2)",
                [(*name).into(), (*sql).into()],
            )
            .await?;
            if !superseded.is_empty() {
                return Err(DbErr::Migration(format!(
                    "the database holds a newer {name}.sql than this build (a newer build applied it after this \
                     build's): run a build at least as new"
                )));
            }
        }
    }
    Ok(())
}

async fn table_exists(db: &DatabaseConnection, table: &str) -> Result<bool, DbErr> {
    let rows = strings(db, "SELECT to_regclass($1)::text AS s", [table.into()]).await?;
    Ok(rows.first().is_some_and(|s| !s.is_empty()))
}

/// The first column of every row of `sql`, as text (NULL as "").
async fn strings<const N: usize>(
    db: &DatabaseConnection,
    sql: &str,
    values: [sea_orm_migration::sea_orm::Value; N],
) -> Result<Vec<String>, DbErr> {
    let rows = db.query_all_raw(Statement::from_sql_and_values(db.get_database_backend(), sql, values)).await?;
    rows.iter().map(|r| r.try_get_by_index::<Option<String>>(0).map(Option::unwrap_or_default)).collect()
}

/// Makes a database restored from a backup of the last development schema
/// before the baseline ([`PRE_BASELINE_LAST`]) a baseline database: its
/// tables, types and indexes are the baseline's already (the baseline was
/// folded from that schema), so it records the baseline as applied and
/// drops every view and every function the tables do not use (with the
/// triggers and policies that call them): `migrate` then applies every
/// repeatable file and the grants, so the code is exactly this build's.
/// Refuses a database at an earlier development schema. Returns false,
/// changing nothing, for a database that is not pre-baseline.
pub async fn adopt_pre_baseline(db: &DatabaseConnection) -> Result<bool, DbErr> {
    if !table_exists(db, "seaql_migrations").await? {
        return Ok(false);
    }
    let applied = strings(db, "SELECT version FROM seaql_migrations ORDER BY version", []).await?;
    if !applied.iter().any(|v| v == PRE_BASELINE_FIRST) {
        return Ok(false);
    }
    let at = applied.last().cloned().unwrap_or_default();
    if at != PRE_BASELINE_LAST {
        return Err(DbErr::Migration(format!(
            "this backup was made by a development build at {at}, before {PRE_BASELINE_LAST}: restore it with \
             that build, migrate it there, and take the backup again"
        )));
    }
    let baseline = Migrator::migrations().first().map(|m| m.name().to_owned()).unwrap_or_default();
    let tx = db.begin().await?;
    tx.execute_unprepared(ADOPT).await?;
    tx.execute_raw(Statement::from_sql_and_values(
        db.get_database_backend(),
        "INSERT INTO seaql_migrations (version, applied_at) VALUES ($1, extract(epoch FROM now())::bigint)",
        [baseline.into()],
    ))
    .await?;
    tx.commit().await?;
    Ok(true)
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
    let result = migrate_steps(db).await;
    let unlock = db.execute_raw(lock("SELECT pg_advisory_unlock($1)")).await;
    result.and(unlock.map(|_| ()))
}

/// The steps of [`migrate_locked`], in order: refuse a schema this build
/// cannot run against, the repeatable files the tables use, the versioned
/// migrations, the other repeatable files, then the rules applied on every
/// run (the writer role's functions, privileges and grants) and the rebuild
/// of changed projections.
async fn migrate_steps(db: &DatabaseConnection) -> Result<(), DbErr> {
    check_schema(db).await?;
    db.execute_unprepared(BOOKKEEPING).await?;
    apply_repeatable(db, BEFORE).await?;
    Migrator::up(db, None).await?;
    apply_repeatable(db, AFTER).await?;
    own_writer_functions(db).await?;
    for (_, sql) in ALWAYS {
        db.execute_unprepared(sql).await?;
    }
    rebuild_outdated_projections(db).await
}

/// Rebuilds from the event log every projection whose definition changed
/// since it was built, or that was never built (`ledger_project_outdated`,
/// `sql/repeatable/projections.sql`).
async fn rebuild_outdated_projections(db: &DatabaseConnection) -> Result<(), DbErr> {
    db.execute_unprepared("SELECT * FROM ledger_project_outdated()").await.map(|_| ())
}

/// The repeatable files applied before the versioned migrations: the roles
/// and the rules the tables themselves use (column defaults, CHECKs, an
/// index). Each holds `CREATE OR REPLACE` definitions and is applied again
/// whenever its text changed.
const BEFORE: &[(&str, &str)] = &[("roles", ROLES), ("rules", include_str!("sql/repeatable/rules.sql"))];

/// The cluster-wide roles, made if missing (also by `restore` before it
/// restores a backup, whose grants name them).
pub const ROLES: &str = include_str!("sql/repeatable/roles.sql");

/// The repeatable files applied after the versioned migrations, in order
/// (each may use what the ones before it define): every function, trigger,
/// view and policy of the ledger, each defined once.
const AFTER: &[(&str, &str)] = &[
    ("tokens", include_str!("sql/repeatable/tokens.sql")),
    ("live", include_str!("sql/repeatable/live.sql")),
    ("state_machine", include_str!("sql/repeatable/state_machine.sql")),
    ("guards", include_str!("sql/repeatable/guards.sql")),
    ("writes", include_str!("sql/repeatable/writes.sql")),
    ("service_writes", include_str!("sql/repeatable/service_writes.sql")),
    ("temporal", include_str!("sql/repeatable/temporal.sql")),
    ("warden", include_str!("sql/repeatable/warden.sql")),
    ("calendar", include_str!("sql/repeatable/calendar.sql")),
    ("compaction", include_str!("sql/repeatable/compaction.sql")),
    ("projections", include_str!("sql/repeatable/projections.sql")),
    ("reads", include_str!("sql/repeatable/reads.sql")),
    ("views", include_str!("sql/repeatable/views.sql")),
    ("policies", include_str!("sql/repeatable/policies.sql")),
];

/// The repeatable files whose every function belongs to the writer role:
/// the writes of a fleet and their helpers (`writes.sql`), and the Temporal
/// projection's mark (`temporal.sql`). The writer role runs them under
/// row-level security, and `grants.sql` opens its doors to the service's
/// role and its helpers to no one.
const WRITER_FILES: &[&str] = &["writes", "temporal"];

/// The name of every `CREATE [OR REPLACE] FUNCTION` in `sql` outside its
/// `--` comments, lower case, without a `public.` prefix, as often as it is
/// defined.
pub fn functions_defined(sql: &str) -> Vec<String> {
    let lower = sql.to_lowercase();
    let words: Vec<&str> =
        lower.lines().flat_map(|line| line.split("--").next().unwrap_or_default().split_whitespace()).collect();
    let mut names = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w != "function" || i == 0 {
            continue;
        }
        let create = words[i - 1] == "create" || (words[i - 1] == "replace" && i >= 3 && words[i - 3] == "create");
        if let (true, Some(next)) = (create, words.get(i + 1)) {
            names.push(next.split('(').next().unwrap_or_default().trim_start_matches("public.").to_owned());
        }
    }
    names
}

/// The functions the writer role owns: every one [`WRITER_FILES`] define.
pub fn writer_functions() -> Vec<String> {
    AFTER.iter().filter(|(name, _)| WRITER_FILES.contains(name)).flat_map(|(_, sql)| functions_defined(sql)).collect()
}

/// Hands the writer role each of [`writer_functions`] it does not own, by
/// name whatever the signature. On every `migrate`, not only when a file
/// changed: a restore without owners hands every function to the
/// restoring login. Before the grants, which follow from the owners.
async fn own_writer_functions(db: &DatabaseConnection) -> Result<(), DbErr> {
    let others = strings(
        db,
        "SELECT p.oid::regprocedure::text FROM pg_proc p
          WHERE p.pronamespace = 'public'::regnamespace AND p.proname = ANY ($1)
            AND p.proowner <> 'work_ledger_writer'::regrole",
        [writer_functions().into()],
    )
    .await?;
    for f in others {
        db.execute_unprepared(&format!("ALTER FUNCTION {f} OWNER TO work_ledger_writer")).await?;
    }
    Ok(())
}

/// Applied by every `migrate`, after the repeatable files: the database's
/// own privileges (a dump does not carry them) and the grants, derived by
/// one rule from what the files define.
const ALWAYS: &[(&str, &str)] =
    &[("privileges", DATABASE_PRIVILEGES), ("grants", include_str!("sql/repeatable/grants.sql"))];

/// The migrator's own bookkeeping: the checksum each repeatable file was
/// last applied with, every checksum ever applied (so that an older build
/// is refused instead of putting older definitions back), and the
/// migrations that break older builds.
const BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS schema_repeatable (
    name       text        PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS schema_repeatable_history (
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (name, checksum)
);
CREATE TABLE IF NOT EXISTS schema_breaking_changes (
    migration  text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);";

/// Applies every file of `files` whose checksum differs from the one
/// recorded when it was last applied, each in a transaction of its own.
async fn apply_repeatable(db: &DatabaseConnection, files: &[(&str, &str)]) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    for (name, sql) in files {
        let current = strings(
            db,
            "SELECT 'yes' FROM schema_repeatable WHERE name = $1 AND checksum = md5($2)",
            [(*name).into(), (*sql).into()],
        )
        .await?;
        if !current.is_empty() {
            continue;
        }
        let tx = db.begin().await?;
        tx.execute_unprepared(sql).await?;
        tx.execute_raw(Statement::from_sql_and_values(
            backend,
            "WITH h AS (INSERT INTO schema_repeatable_history (name, checksum) VALUES ($1, md5($2)) ON CONFLICT DO NOTHING)
             INSERT INTO schema_repeatable (name, checksum) VALUES ($1, md5($2))
             ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = clock_timestamp()",
            [(*name).into(), (*sql).into()],
        ))
        .await?;
        tx.commit().await?;
    }
    Ok(())
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
