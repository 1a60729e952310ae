//! The schema said once: one baseline migration and repeatable files in
//! which every function is defined once; grants derived by one rule; the
//! committed `migration/schema.sql` is what `migrate` makes; the state
//! machine's states as the database declares them; a database of an
//! earlier development build or of a newer build refused; a backup made
//! before the baseline restores into a fresh database.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use sea_orm::{ConnectionTrait, Iterable, Statement};
use serde_json::{Value, json};
use work_ledger::db;
use work_ledger::db::entities::WorkState;

use crate::helpers::{TestApp, spawn_app, spawn_app_on};
use crate::operator::{text, work_ledger_on};
use crate::ws_client::Ws;

fn migration_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("migration")
}

fn sql_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read migration/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sql_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "sql") {
            out.push(path);
        }
    }
}

/// Every SQL file the migrator applies (`migration/src/`; `schema.sql` is
/// the record of what they make, not a source).
#[test]
fn no_function_is_defined_twice_under_migration() {
    let mut files = Vec::new();
    sql_files(&migration_dir().join("src"), &mut files);
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let sql = std::fs::read_to_string(file).expect("read");
        let name = file.strip_prefix(migration_dir()).expect("under migration/").display().to_string();
        for f in migration::functions_defined(&sql) {
            seen.entry(f).or_default().push(name.clone());
        }
    }
    assert!(seen.len() > 100, "the scan found only {} functions", seen.len());
    let twice: Vec<_> = seen.iter().filter(|(_, files)| files.len() > 1).collect();
    assert!(twice.is_empty(), "defined more than once: {twice:?}");
    // The scan itself sees a second definition.
    assert_eq!(
        migration::functions_defined(
            "CREATE FUNCTION a() ...; -- not CREATE FUNCTION b()\ncreate or replace function public.a(x int) ..."
        ),
        ["a", "a"]
    );
}

/// Every function of the ledger's schema with who may execute it, besides its owner.
async fn function_grants(app: &TestApp) -> Vec<Value> {
    app.sql_json(
        "SELECT p.oid::regprocedure::text AS f, p.prosecdef AS door, p.prorettype = 'trigger'::regtype AS trigger,
                pg_get_userbyid(p.proowner) AS owner, obj_description(p.oid, 'pg_proc') AS comment,
                p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
                                             WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS public,
                coalesce((SELECT array_agg(r.rolname ORDER BY r.rolname) FROM aclexplode(p.proacl) a
                            JOIN pg_roles r ON r.oid = a.grantee
                           WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '{}') AS callers
           FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1",
    )
    .await
}

/// Every function of `app`'s database is executable by exactly whom the
/// rule of `grants.sql` says, and owned by the role the rule gives it.
async fn assert_the_rule(app: &TestApp) {
    let migrator = app.sql_json("SELECT current_user AS u").await[0]["u"].as_str().expect("user").to_owned();
    let all = ["work_ledger_app", "work_ledger_reader", "work_ledger_warden", "work_ledger_writer"];
    let functions = function_grants(app).await;
    assert!(functions.len() > 100);
    let writers = migration::writer_functions();
    let mut doors = 0;
    for f in &functions {
        let name = f["f"].as_str().expect("f");
        let owner = f["owner"].as_str().expect("owner");
        let callers: BTreeSet<&str> =
            f["callers"].as_array().expect("callers").iter().filter_map(Value::as_str).collect();
        assert_eq!(f["public"], false, "PUBLIC may execute {name}");
        // No function is owned by a role outside the rule: the writer role
        // owns exactly the functions of its files (the writes and their
        // helpers), the warden its pass.
        let proname = name.split('(').next().unwrap_or_default();
        assert_eq!(owner == "work_ledger_writer", writers.iter().any(|w| w == proname), "{name} is owned by {owner}");
        match owner {
            "work_ledger_writer" => {}
            "work_ledger_warden" => assert!(name.starts_with("ledger_warden_pass("), "the warden owns {name}"),
            o => assert_eq!(o, migrator, "{name} is owned by {o}"),
        }
        let declared = f["comment"].as_str().and_then(|c| c.strip_prefix("callers: "));
        let expected: BTreeSet<&str> = if let Some(d) = declared {
            d.split(", ")
                .filter(|r| *r != "owner")
                .map(|r| all.iter().find(|a| a.ends_with(r)).expect("a role"))
                .copied()
                .collect()
        } else if f["trigger"] == true {
            BTreeSet::new()
        } else if f["door"] == true {
            assert_eq!(owner, "work_ledger_writer", "{name} runs as its owner and names no callers");
            BTreeSet::from(["work_ledger_app"])
        } else if owner == "work_ledger_writer" {
            BTreeSet::new()
        } else {
            all.iter().copied().filter(|r| *r != owner).collect()
        };
        if f["door"] == true && f["trigger"] == false {
            doors += 1;
        }
        assert_eq!(callers, expected, "who may execute {name}");
    }
    assert!(doors >= 20, "only {doors} doors");
}

#[tokio::test]
async fn every_grant_follows_the_one_rule() {
    let app = spawn_app().await;
    assert_the_rule(&app).await;

    // A door that names no callers stops the migration; PUBLIC gets nothing
    // on a function made later either (default privileges).
    app.sql("CREATE FUNCTION ledger_forgotten() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'").await;
    let refused = db::migrate(&app.db_url).await.expect_err("a door without callers");
    assert!(refused.to_string().contains("ledger_forgotten() runs as its owner and names no callers"), "{refused}");
    let public = app.sql_json("SELECT has_function_privilege('public', 'ledger_forgotten()', 'EXECUTE') AS p").await;
    assert_eq!(public[0]["p"], false);
    app.sql("COMMENT ON FUNCTION ledger_forgotten() IS 'callers: reader'").await;
    db::migrate(&app.db_url).await.expect("migrate with the callers named");
    let after = function_grants(&app).await;
    let forgotten = after.iter().find(|f| f["f"] == "ledger_forgotten()").expect("the function");
    assert_eq!(forgotten["callers"], json!(["work_ledger_reader"]));
}

/// The owner of each function of the ledger's schema named in `names`.
async fn owners(app: &TestApp, names: &[String]) -> BTreeMap<String, String> {
    let rows = app
        .sql_json(&format!(
            "SELECT p.oid::regprocedure::text AS f, pg_get_userbyid(p.proowner) AS owner FROM pg_proc p
              WHERE p.pronamespace = 'public'::regnamespace AND p.proname IN ('{}')",
            names.join("', '")
        ))
        .await;
    rows.iter()
        .map(|r| (r["f"].as_str().expect("f").to_owned(), r["owner"].as_str().expect("owner").to_owned()))
        .collect()
}

/// Every function `writes.sql` defines belongs to the writer role, read
/// from the file itself: no list names them (a write added to the file is
/// the writer's by the next `migrate`). Handed to the migrating login, as a
/// restore without owners hands them, they are the writer's again after
/// `migrate`, and its doors the service's.
#[tokio::test]
async fn every_function_of_writes_sql_is_the_writer_roles_by_the_file_alone() {
    let app = spawn_app().await;
    let file = std::fs::read_to_string(migration_dir().join("src/sql/repeatable/writes.sql")).expect("writes.sql");
    let defined = migration::functions_defined(&file);
    assert!(defined.len() > 10, "the scan found only {defined:?}");
    // Each function of the file, with its owner unless that is the writer role.
    let others = async || {
        let owned = owners(&app, &defined).await;
        assert!(owned.len() >= defined.len(), "not every function of writes.sql exists: {owned:?}");
        owned.into_iter().filter(|(_, o)| o != "work_ledger_writer").collect::<Vec<_>>()
    };
    assert_eq!(others().await, [], "not the writer role's");

    app.sql(
        "DO $$
         DECLARE f regprocedure;
         BEGIN
             FOR f IN SELECT oid::regprocedure FROM pg_proc WHERE proowner = 'work_ledger_writer'::regrole LOOP
                 EXECUTE format('ALTER FUNCTION %s OWNER TO %I', f, current_user);
             END LOOP;
         END $$",
    )
    .await;
    assert!(others().await.len() >= defined.len(), "handed to the migrating login");
    db::migrate(&app.db_url).await.expect("migrate");
    assert_eq!(others().await, [], "the writer role's again");
    let doors = app
        .sql_i64(
            "SELECT count(*) FROM pg_proc WHERE proowner = 'work_ledger_writer'::regrole AND prosecdef
                AND has_function_privilege('work_ledger_app', oid, 'EXECUTE')",
        )
        .await;
    assert!(doors >= 9, "the service may call only {doors} writes");
    assert_the_rule(&app).await;
}

/// What the repeatable files make (migration/src/sql/repeatable/), left out
/// of the record: they are said once in those files, which `migrate`
/// applies as they are, and the record holds what the migrations make.
const REPEATABLE: &[&str] = &["FUNCTION", "PROCEDURE", "VIEW", "TRIGGER", "POLICY", "COMMENT"];

/// `pg_dump --schema-only` of `url` as the migrations leave it (types,
/// tables, columns, constraints, indexes, row-level security switched on),
/// without what the repeatable files make ([`REPEATABLE`]) and what differs
/// by login or by `pg_dump`'s version: owners, privileges (the rule test
/// above reads them), comments, settings and the `\restrict` guard lines.
fn schema_of(url: &str) -> String {
    let pg_dump = work_ledger::embedded_pg::client_tool("pg_dump").expect("pg_dump");
    let out = std::process::Command::new(pg_dump)
        .args(["--schema-only", "--no-owner", "--no-privileges", "--dbname", url])
        .output()
        .expect("pg_dump");
    assert!(out.status.success(), "pg_dump: {}", text(&out.stderr));
    let mut schema = String::new();
    let mut repeatable = false;
    for line in text(&out.stdout).lines() {
        // Each object comes after a header `-- Name: ...; Type: FUNCTION; ...`.
        if let Some(kind) = line.strip_prefix("-- Name: ").and_then(|l| l.split("; Type: ").nth(1)) {
            let kind = kind.split(';').next().unwrap_or_default();
            repeatable = REPEATABLE.contains(&kind);
        }
        let noise = repeatable
            || line.starts_with("--")
            || line.starts_with("SET ")
            || line.starts_with("SELECT pg_catalog.set_config")
            || line.starts_with("\\restrict")
            || line.starts_with("\\unrestrict");
        if noise || (line.is_empty() && schema.ends_with("\n\n")) {
            continue;
        }
        schema.push_str(line);
        schema.push('\n');
    }
    schema.trim().to_owned() + "\n"
}

/// `migration/schema.sql` is what the migrations make of an empty database
/// (`WL_WRITE_SCHEMA=1` writes it again after a deliberate change).
#[tokio::test]
async fn the_committed_schema_is_what_migrate_makes() {
    let app = spawn_app().await;
    let made = schema_of(&app.db_url);
    let path = migration_dir().join("schema.sql");
    if std::env::var("WL_WRITE_SCHEMA").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &made).expect("write migration/schema.sql");
    }
    let committed = std::fs::read_to_string(&path).expect("migration/schema.sql");
    assert!(committed.contains("CREATE TABLE public.work_unit_events"));
    if committed != made {
        let first = committed.lines().zip(made.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "migrate no longer makes migration/schema.sql (first difference at line {}: committed {:?}, made {:?}); \
             if the change is meant, run WL_WRITE_SCHEMA=1 cargo test --test api -- schema_once::the_committed",
            first + 1,
            committed.lines().nth(first),
            made.lines().nth(first)
        );
    }
}

#[tokio::test]
async fn the_rust_states_are_the_databases() {
    let app = spawn_app().await;
    let row = &app
        .sql_json(
            "SELECT enum_range(NULL::work_state)::text[] AS states, ledger_held_states()::text[] AS held,
                    ledger_terminal_states()::text[] AS terminal",
        )
        .await[0];
    let list = |key: &str| -> BTreeSet<String> {
        row[key].as_array().expect("array").iter().filter_map(Value::as_str).map(str::to_owned).collect()
    };
    let rust = |keep: fn(WorkState) -> bool| -> BTreeSet<String> {
        WorkState::iter().filter(|s| keep(*s)).map(|s| s.as_sql().to_owned()).collect()
    };
    assert_eq!(list("states"), rust(|_| true));
    assert_eq!(list("held"), rust(WorkState::is_live_claim));
    assert_eq!(list("terminal"), rust(WorkState::is_terminal));
}

/// What `legalActions` offers that moves a unit is what `ledger_moves()`
/// lets that actor do: for the holder, an answerer and an operator, the
/// Rust actions' states and the moves they name (with a dispose's
/// dispositions) are the declaration's rows for the actor, no more, no
/// fewer. (A claimant's claim is `claim` or `reclaim` by the state: the
/// claim tests cover it.)
#[tokio::test]
async fn the_actions_are_the_declared_moves() {
    use work_ledger::ledger::state_machine::{Action, actions};
    let app = spawn_app().await;
    for actor in ["holder", "answerer", "operator"] {
        let states_of = |action: &Action| -> &'static [WorkState] {
            match actor {
                "holder" => action.holder,
                "answerer" => action.answerer,
                _ => action.operator,
            }
        };
        let rows = app
            .sql_json(&format!(
                "SELECT action, from_state::text AS from_state, coalesce(disposition::text, '') AS disposition
               FROM ledger_moves() WHERE actor = '{actor}'"
            ))
            .await;
        let declared: BTreeSet<(String, String, String)> = rows
            .iter()
            .map(|r| {
                let text = |key: &str| r[key].as_str().unwrap_or_default().to_owned();
                (text("action"), text("from_state"), text("disposition"))
            })
            .collect();
        let mut offered = BTreeSet::new();
        for action in actions() {
            let Some(moves) = action.moves else { continue };
            let dispositions: Vec<String> = match action.fixed.iter().find(|(arg, _)| *arg == "disposition") {
                Some((_, value)) => value.split('|').map(str::to_owned).collect(),
                None => vec![String::new()],
            };
            for state in states_of(action) {
                for disposition in &dispositions {
                    offered.insert((moves.to_owned(), state.as_sql().to_owned(), disposition.clone()));
                }
            }
        }
        assert!(!declared.is_empty(), "{actor}: {declared:?}");
        assert_eq!(offered, declared, "the actions (left) against ledger_moves() (right) for the {actor}");
    }
}

/// The writes look moves up in constants folded from `ledger_moves()`
/// (ledger_from, ledger_to): for every action, state, actor set and
/// disposition, the lookup answers what a query of the declaration does.
#[tokio::test]
async fn the_write_lookups_answer_what_the_declaration_says() {
    let app = spawn_app().await;
    let cases = app
        .sql_json(
            "WITH actions AS (SELECT DISTINCT action FROM ledger_moves()),
                  actor_sets AS (SELECT NULL::text[] AS actors
                                 UNION ALL SELECT ARRAY[a] FROM (SELECT DISTINCT actor AS a FROM ledger_moves()) x
                                 UNION ALL SELECT ARRAY['claimant', 'holder']
                                 UNION ALL SELECT ARRAY['holder', 'operator', 'answerer']
                                 UNION ALL SELECT '{}'::text[]),
                  dispositions AS (SELECT NULL::disposition AS d UNION ALL SELECT unnest(enum_range(NULL::disposition))),
                  states AS (SELECT unnest(enum_range(NULL::work_state)) AS s),
                  helds AS (SELECT NULL::boolean AS h UNION ALL SELECT true UNION ALL SELECT false)
             SELECT 'from' AS lookup, a.action, x.actors::text AS actors, d.d::text AS disposition, NULL AS state,
                    ledger_from(a.action, x.actors, d.d)::text AS said,
                    (SELECT coalesce(array_agg(DISTINCT m.from_state ORDER BY m.from_state), '{}') FROM ledger_moves() m
                      WHERE m.action = a.action AND (x.actors IS NULL OR m.actor = ANY (x.actors))
                        AND (d.d IS NULL OR m.disposition = d.d))::text AS declared
               FROM actions a, actor_sets x, dispositions d
             UNION ALL
             SELECT 'to', a.action, h.h::text, d.d::text, s.s::text, ledger_to(a.action, s.s, d.d, h.h)::text,
                    (SELECT m.to_state FROM ledger_moves() m
                      WHERE m.action = a.action AND m.from_state = s.s AND m.disposition IS NOT DISTINCT FROM d.d
                        AND (h.h IS NULL OR (m.to_state = ANY (ledger_held_states())) = h.h)
                      ORDER BY m.to_state LIMIT 1)::text
               FROM actions a, states s, dispositions d, helds h",
        )
        .await;
    let checked = cases.len();
    assert!(checked > 500, "the comparison covered {checked} cases");
    let wrong: Vec<&Value> = cases.iter().filter(|r| r["said"] != r["declared"]).collect();
    assert!(wrong.is_empty(), "{} of {checked} lookups disagree: {wrong:#?}", wrong.len());
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused_naming_both() {
    let app = spawn_app().await;
    app.sql(
        "INSERT INTO seaql_migrations (version, applied_at) VALUES ('m20991231_000001_future', 0);
         INSERT INTO schema_breaking_changes (migration) VALUES ('m20991231_000001_future');",
    )
    .await;
    let refused = db::migrate(&app.db_url).await.expect_err("a newer schema");
    let said = refused.to_string();
    // This build's last migration, whichever it is.
    let ours = {
        use migration::MigratorTrait;
        migration::Migrator::migrations().last().map(|m| m.name().to_owned()).expect("a migration")
    };
    for part in ["m20991231_000001_future", ours.as_str(), "breaks older builds"] {
        assert!(said.contains(part), "{said}");
    }
    app.sql("DELETE FROM seaql_migrations WHERE version = 'm20991231_000001_future'").await;
    db::migrate(&app.db_url).await.expect("back at this build's schema");

    // A repeatable file a newer build applied after this build's.
    app.sql("UPDATE schema_repeatable SET checksum = md5('a newer writes.sql') WHERE name = 'writes'").await;
    let refused = db::migrate(&app.db_url).await.expect_err("an older build's writes.sql");
    assert!(refused.to_string().contains("newer writes.sql"), "{refused}");
    let kept = app.sql_json("SELECT checksum FROM schema_repeatable WHERE name = 'writes'").await;
    assert_eq!(kept[0]["checksum"], app.sql_json("SELECT md5('a newer writes.sql') AS m").await[0]["m"]);
}

/// A fresh database in the test cluster, empty, named for this process.
async fn empty_database(app: &TestApp, tag: &str) -> String {
    let name = format!("wlt_{}_{tag}", std::process::id());
    app.create_closed_database(&name).await;
    let mut url = url::Url::parse(&app.db_url).expect("url");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Every row of the ledger's five tables, as JSON in UTC, by table.
async fn rows(url: &str) -> BTreeMap<String, Value> {
    let conn = db::connect(url, 1).await.expect("connect");
    conn.execute_unprepared("SET TIME ZONE 'UTC'").await.expect("utc");
    let mut all = BTreeMap::new();
    for t in ["work_units", "work_unit_attempts", "work_unit_events", "blocking_questions", "api_tokens"] {
        let sql = format!("SELECT coalesce(json_agg(to_jsonb(x) ORDER BY x.id), '[]')::text AS j FROM {t} x");
        let row = conn
            .query_one_raw(Statement::from_string(sea_orm::DbBackend::Postgres, sql))
            .await
            .expect("rows")
            .expect("a row");
        let j: String = row.try_get("", "j").expect("j");
        all.insert(t.to_owned(), serde_json::from_str(&j).expect("json"));
    }
    conn.close().await.expect("close");
    all
}

const EVENTS: &str = "subscription($after: String) { ledgerEvents(after: $after) { id cursor } }";

/// `tests/fixtures/pre-baseline.dump` is `work-ledger backup` of a worked
/// ledger made by the last development build before the baseline (b0a4117);
/// `pre-baseline.json` holds its tokens, rows, and the cursor a subscriber
/// of `ledgerEvents` held when the backup was taken.
#[tokio::test]
async fn a_backup_made_before_the_baseline_restores_into_a_fresh_database() {
    let app = spawn_app().await;
    let made: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("pre-baseline.json")).expect("fixture")).expect("json");
    let dump = fixture("pre-baseline.dump");
    let dump = dump.to_str().expect("path");

    // That database itself, as its build left it, is refused by `migrate`,
    // which says how to move its data.
    let old = empty_database(&app, "pre_baseline").await;
    let pg_restore = work_ledger::embedded_pg::client_tool("pg_restore").expect("pg_restore");
    let out = std::process::Command::new(pg_restore)
        .args(["--no-owner", "--exit-on-error", "--dbname", &old, dump])
        .output()
        .expect("pg_restore");
    assert!(out.status.success(), "pg_restore: {}", text(&out.stderr));
    let refused = work_ledger_on(&old, &["migrate"], None);
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    for part in
        ["before the schema baseline", "m20261216_000043_projections", "work-ledger backup", "work-ledger restore"]
    {
        assert!(said.contains(part), "{said}");
    }
    // Moving it as the message says: a backup of it, restored into an empty database.
    let dir = tempfile::Builder::new().prefix("wl-baseline-").tempdir().expect("tempdir");
    let again = dir.path().join("again.dump");
    let again = again.to_str().expect("path");
    let backup = work_ledger_on(&old, &["backup", "--out", again], None);
    assert!(backup.status.success(), "{}", text(&backup.stderr));
    let fresh = empty_database(&app, "restored").await;
    let restore = work_ledger_on(&fresh, &["restore", again], None);
    assert!(restore.status.success(), "{}", text(&restore.stderr));

    // Every unit, attempt, event, question and token came back as it was.
    let restored = rows(&fresh).await;
    for (table, expected) in made["rows"].as_object().expect("rows") {
        assert_eq!(&restored[table], expected, "{table}");
    }
    // ... in a schema that is the baseline's.
    assert_eq!(schema_of(&fresh), schema_of(&app.db_url), "the restored schema is the baseline's");

    let server = spawn_app_on(&fresh).await;
    // ... with its owners and grants by the rule (a restore without owners
    // hands every function to the restoring login; migrate gives them back).
    assert_the_rule(&server).await;
    let tokens = &made["tokens"];
    let token = |name: &str| tokens[name].as_str().expect("token").to_owned();
    // The stream resumes from the cursor a subscriber held before the backup.
    let mut ws = Ws::subscription(&server, &token("reader-1"), EVENTS, json!({ "after": made["stream_cursor"] })).await;
    for expected in made["events_after_cursor"].as_array().expect("ids") {
        let event = tokio::time::timeout(Duration::from_secs(5), ws.next_data()).await.expect("prompt");
        assert_eq!(&event["ledgerEvents"]["id"], expected);
    }
    // The tokens work as they did: the revoked one is refused, the agent
    // goes on with the unit it holds, and its event follows on the stream.
    let refused = server.gql(&token("agent-gone"), "{ me { name } }", json!({})).await;
    refused.assert_code("UNAUTHENTICATED");
    let agent = token("agent-1");
    let me = server.gql(&agent, "{ me { name heldUnit { id state } } }", json!({})).await;
    let held = me.data()["me"]["heldUnit"].clone();
    assert_eq!(held["state"], "IN_PROGRESS");
    let verified = server
        .gql(
            &agent,
            "mutation($u: UUID!) { transition(unitId: $u, to: VERIFIED, evidenceUrl: \"https://ci.example/after\") { state } }",
            json!({ "u": held["id"] }),
        )
        .await;
    assert_eq!(verified.data()["transition"]["state"], "VERIFIED");
    let event = tokio::time::timeout(Duration::from_secs(5), ws.next_data()).await.expect("the new event, live");
    assert!(event["ledgerEvents"]["id"].is_string());
    let audit = work_ledger_on(&fresh, &["audit"], None);
    assert!(audit.status.success(), "{}{}", text(&audit.stdout), text(&audit.stderr));
}
