//! One write path, owned by the database (issue 22, SPEC §2): the service's
//! role writes no table, every write is a SQL function that runs as a
//! NOLOGIN role under row-level security, and the triggers hold for
//! owner-level writes whatever the session's settings. Each attack of the
//! issue, as it was run (raw SQL as the app role, and as the owner where it
//! applies), must be refused and leave the ledger as it was.

use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, hash_sql, spawn_app};

/// The rows an attack on `unit` could touch: the unit, its attempts, its
/// questions and its events, as the owner reads them.
async fn snapshot(app: &TestApp, unit: &str) -> Value {
    json!({
        "unit": app.sql_json(&format!("SELECT * FROM work_units WHERE id = '{unit}'")).await,
        "attempts": app.sql_json(&format!("SELECT * FROM work_unit_attempts WHERE unit_id = '{unit}' ORDER BY attempt_no")).await,
        "questions": app.sql_json(&format!("SELECT * FROM blocking_questions WHERE unit_id = '{unit}' ORDER BY created_at")).await,
        "events": app.sql_json(&format!("SELECT id FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq")).await,
    })
}

/// `sql` as the application role with the fleet set, in one (implicit) transaction;
/// PostgreSQL must refuse it. Returns the error text.
async fn as_app_refused(app: &TestApp, fleet: &str, sql: &str) -> String {
    app.sql_refused(&format!(
        "SET LOCAL ROLE work_ledger_app; SELECT set_config('work_ledger.fleet', '{fleet}', true); {sql};"
    ))
    .await
}

/// A unit of fleet `f` claimed and started by `agent-1`: (unit id, attempt id).
async fn unit_in_progress(app: &TestApp) -> (String, String) {
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["target"]).await[0]["id"].as_str().expect("id").to_owned();
    let agent = Agent::new(app, "f", "agent-1", Role::Agent).await;
    let claimed = agent.claim_next(json!({})).await;
    let attempt = claimed.str("currentAttemptId");
    let started = agent
        .run(&format!("mutation {{ transition(unitId: \"{unit}\", to: IN_PROGRESS) {{ state }} }}"), json!({}))
        .await;
    assert_eq!(started.data()["transition"]["state"], "IN_PROGRESS", "{:#}", started.body);
    (unit, attempt)
}

#[tokio::test]
async fn the_app_role_holds_no_table_writes_and_every_function_pins_its_search_path() {
    let app = spawn_app().await;
    let writable = app
        .sql_json(
            "SELECT c.relname, p.privilege FROM pg_class c
               CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p(privilege)
              WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v')
                AND has_table_privilege('work_ledger_app', c.oid, p.privilege)
              ORDER BY 1, 2",
        )
        .await;
    assert_eq!(writable, Vec::<Value>::new(), "the app role may write these");

    let unpinned = app
        .sql_json(
            "SELECT p.oid::regprocedure::text AS function, p.proconfig FROM pg_proc p
              WHERE p.pronamespace = 'public'::regnamespace
                AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                                           AND d.deptype = 'e')
                AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c
                                 WHERE c LIKE 'search_path=%' AND c LIKE '%pg_temp')
              ORDER BY 1",
        )
        .await;
    assert_eq!(unpinned, Vec::<Value>::new(), "functions whose search_path is not pinned with pg_temp last");

    // The writes run as the NOLOGIN writer role, which does not own the
    // tables (row-level security applies to it) and cannot log in.
    let writes = app
        .sql_json(
            "SELECT p.proname, pg_get_userbyid(p.proowner) AS owner, p.prosecdef AS definer,
                    has_function_privilege('work_ledger_app', p.oid, 'EXECUTE') AS app_may_call
               FROM pg_proc p
              WHERE p.pronamespace = 'public'::regnamespace
                AND p.proname IN ('ledger_claim', 'ledger_heartbeat', 'ledger_transition', 'ledger_block',
                                  'ledger_unblock', 'ledger_release', 'ledger_record_cost', 'ledger_dispose',
                                  'ledger_register')
              ORDER BY 1",
        )
        .await;
    assert_eq!(writes.len(), 9, "{writes:#?}");
    for write in &writes {
        assert_eq!(write["owner"], "work_ledger_writer", "{write}");
        assert_eq!(write["definer"], true, "{write}");
        assert_eq!(write["app_may_call"], true, "{write}");
    }
    let writer = app
        .sql_json(
            "SELECT rolcanlogin, rolbypassrls, rolsuper,
                    EXISTS (SELECT 1 FROM pg_tables t WHERE t.tableowner = 'work_ledger_writer') AS owns_tables
               FROM pg_roles WHERE rolname = 'work_ledger_writer'",
        )
        .await;
    assert_eq!(
        writer,
        vec![json!({ "rolcanlogin": false, "rolbypassrls": false, "rolsuper": false, "owns_tables": false })]
    );
    // The helpers inside the writes are nobody else's to call.
    let helper = app.sql_i64("SELECT count(*) FROM pg_proc WHERE proname = 'ledger_log' AND has_function_privilege('work_ledger_app', oid, 'EXECUTE')").await;
    assert_eq!(helper, 0);
}

/// Attack 1: a temporary table shadows the ledger's attempts so the cost
/// guard sums a fake; and the same trick for a READY unit put to ABANDONED.
#[tokio::test]
async fn temporary_tables_cannot_stand_in_for_ledger_tables() {
    let app = spawn_app().await;
    let (unit, _) = unit_in_progress(&app).await;
    let before = snapshot(&app, &unit).await;

    // The app role may not even create one (TEMP is the owner's alone).
    let err = as_app_refused(&app, "f", "CREATE TEMP TABLE work_unit_attempts (unit_id uuid, cost_cents bigint)").await;
    assert!(err.contains("permission denied"), "{err}");

    // As the owner, with pg_temp searched first: the guard reads the real table.
    let err = app
        .sql_refused(&format!(
            "CREATE TEMP TABLE work_unit_attempts AS SELECT '{unit}'::uuid AS unit_id, 424242::bigint AS cost_cents;
             SET LOCAL search_path = pg_temp, public;
             UPDATE public.work_units SET cost_cents = 424242 WHERE id = '{unit}';"
        ))
        .await;
    assert!(err.contains("must equal the sum of its attempts"), "{err}");

    let op = app.token("f", "op2", Role::Operator).await;
    let ready = app.register(&op, &["ready-one"]).await[0]["id"].as_str().expect("id").to_owned();
    let ready_before = snapshot(&app, &ready).await;
    let err = app
        .sql_refused(&format!(
            "CREATE TEMP TABLE work_unit_events AS
                 SELECT '{ready}'::uuid AS unit_id, pg_current_xact_id()::text::bigint AS tx_id,
                        'ready'::work_state AS from_state, 'abandoned'::work_state AS to_state;
             SET LOCAL search_path = pg_temp, public;
             UPDATE public.work_units SET state = 'abandoned', disposition = 'DEAD', disposed_at = now(),
                    evidence_urls = ARRAY['https://ci.example/x'] WHERE id = '{ready}';"
        ))
        .await;
    assert!(err.contains("without its event"), "{err}");
    app.sql("DISCARD TEMP").await;
    assert_eq!(snapshot(&app, &unit).await, before);
    assert_eq!(snapshot(&app, &ready).await, ready_before);
}

/// Attack 2: the roll-up ran under row-level security with the caller's
/// fleet setting, so emptying it made the unit's cost skip an attempt's.
#[tokio::test]
async fn the_cost_roll_up_cannot_be_switched_off_by_a_setting() {
    let app = spawn_app().await;
    let (unit, attempt) = unit_in_progress(&app).await;
    let before = snapshot(&app, &unit).await;
    // The app role cannot write attempts at all.
    let err =
        as_app_refused(&app, "f", &format!("UPDATE work_unit_attempts SET cost_cents = 5 WHERE id = '{attempt}'"))
            .await;
    assert!(err.contains("permission denied"), "{err}");
    assert_eq!(snapshot(&app, &unit).await, before);

    // The owner (or anyone who could write) with the fleet emptied mid-statement: the unit follows.
    app.sql(&format!(
        "SET LOCAL ROLE work_ledger_writer;
         SELECT set_config('work_ledger.fleet', 'f', true);
         WITH a AS (UPDATE work_unit_attempts SET cost_cents = cost_cents + 12345 WHERE id = '{attempt}' RETURNING 1)
         SELECT set_config('work_ledger.fleet', '', true) FROM a;"
    ))
    .await;
    let costs = app
        .sql_json(&format!(
            "SELECT u.cost_cents AS unit, (SELECT sum(cost_cents) FROM work_unit_attempts WHERE unit_id = u.id) AS attempts
               FROM work_units u WHERE u.id = '{unit}'"
        ))
        .await;
    assert_eq!(costs, vec![json!({ "unit": 12345, "attempts": 12345 })]);
}

/// Attack 3: a new attempt for someone else and the unit pointed at it,
/// with no claim event and the running attempt left open.
#[tokio::test]
async fn the_holder_changes_only_with_a_claim() {
    let app = spawn_app().await;
    let (unit, _) = unit_in_progress(&app).await;
    let before = snapshot(&app, &unit).await;
    let err = as_app_refused(
        &app,
        "f",
        &format!(
            "INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id) VALUES ('f', '{unit}', 2, 'mallory')"
        ),
    )
    .await;
    assert!(err.contains("permission denied"), "{err}");
    let err = app
        .sql_refused(&format!(
            "WITH a AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
                        VALUES ('f', '{unit}', 2, 'mallory') RETURNING id)
             UPDATE work_units SET claimed_by = 'mallory', current_attempt_id = (SELECT id FROM a), attempt_count = 2
              WHERE id = '{unit}';"
        ))
        .await;
    assert!(err.contains("without a claim"), "{err}");
    assert_eq!(snapshot(&app, &unit).await, before);
}

/// Attack 4: VERIFIED with an empty evidence link and a NULL in the unit's
/// links (one such row made every list of the fleet INTERNAL).
#[tokio::test]
async fn evidence_links_are_links_whoever_writes_them() {
    let app = spawn_app().await;
    let (unit, attempt) = unit_in_progress(&app).await;
    let before = snapshot(&app, &unit).await;
    for (sql, expected) in [
        (
            format!(
                "UPDATE work_unit_attempts SET outcome = 'verified', evidence_url = '', ended_at = now() WHERE id = '{attempt}';"
            ),
            "work_unit_attempts_evidence_link",
        ),
        (
            format!(
                "UPDATE work_unit_attempts SET outcome = 'verified', evidence_url = 'https://ci.example/1', ended_at = now()
                  WHERE id = '{attempt}';
                 INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id)
                 VALUES ('f', '{unit}', '{attempt}', 'transitioned', 'in_progress', 'verified', 'agent-1');
                 UPDATE work_units SET state = 'verified', lease_expires_at = NULL, evidence_urls = '{{NULL}}' WHERE id = '{unit}';"
            ),
            "work_units_evidence_links",
        ),
        (
            format!("UPDATE work_unit_attempts SET evidence_url = 'javascript:alert(1)' WHERE id = '{attempt}'"),
            "work_unit_attempts_evidence_link",
        ),
    ] {
        let err = app.sql_refused(&sql).await;
        assert!(err.contains(expected), "{sql}: {err}");
    }
    assert_eq!(snapshot(&app, &unit).await, before);
}

/// Attack 5: the links of a VERIFIED unit swapped before its disposition
/// certifies them.
#[tokio::test]
async fn a_verified_units_evidence_is_frozen_until_its_disposition() {
    let app = spawn_app().await;
    let (unit, _) = unit_in_progress(&app).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let verified = agent
        .run(
            &format!("mutation {{ transition(unitId: \"{unit}\", to: VERIFIED, evidenceUrl: \"https://ci.example/run/7\") {{ state }} }}"),
            json!({}),
        )
        .await;
    assert_eq!(verified.data()["transition"]["state"], "VERIFIED", "{:#}", verified.body);
    let before = snapshot(&app, &unit).await;
    for urls in
        ["ARRAY['https://forged.example/report.pdf']", "array_append(evidence_urls, 'https://forged.example/extra')"]
    {
        let err = app.sql_refused(&format!("UPDATE work_units SET evidence_urls = {urls} WHERE id = '{unit}'")).await;
        assert!(err.contains("evidence of unit"), "{urls}: {err}");
    }
    assert_eq!(snapshot(&app, &unit).await, before);
    let disposed = agent
        .run(
            &format!("mutation {{ dispose(unitId: \"{unit}\", disposition: MIGRATED) {{ evidenceUrls }} }}"),
            json!({}),
        )
        .await;
    assert_eq!(disposed.data()["dispose"]["evidenceUrls"], json!(["https://ci.example/run/7"]), "{:#}", disposed.body);
}

/// Fleet isolation inside the write functions: called by the app role for
/// fleet `g` with fleet `f`'s unit, attempt and question ids, every write
/// is NOT_FOUND (or, for claimUnit, finds nothing to claim) and writes nothing.
#[tokio::test]
async fn every_write_function_keeps_to_its_fleet() {
    let app = spawn_app().await;
    let (unit, attempt) = unit_in_progress(&app).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let blocked = agent
        .run(&format!("mutation {{ block(unitId: \"{unit}\", question: \"Which one?\") {{ state }} }}"), json!({}))
        .await;
    assert_eq!(blocked.data()["block"]["state"], "BLOCKED", "{:#}", blocked.body);
    let before = snapshot(&app, &unit).await;
    let all_events = app.sql_i64("SELECT count(*) FROM work_unit_events").await;

    // A token of fleet `g` with every permission and the same agent name.
    let g = format!("{}, NULL", hash_sql(&app.token("g", "agent-1", Role::Admin).await));
    let k = "NULL, NULL";
    let calls = [
        format!("ledger_claim({g}, {k}, 900, NULL, '{unit}')"),
        format!("ledger_heartbeat({g}, '{attempt}', 900)"),
        format!("ledger_transition({g}, {k}, '{unit}', '{attempt}', 'verified', 'https://ci.example/1')"),
        format!("ledger_block({g}, {k}, '{unit}', NULL, 'q', 'agent-questions')"),
        format!("ledger_unblock({g}, {k}, '{unit}', NULL, 'answer', true)"),
        format!("ledger_release({g}, {k}, '{unit}', NULL, 'abandoned', NULL)"),
        format!("ledger_record_cost({g}, 'k1', 'h1', '{attempt}', NULL, 5)"),
        format!("ledger_record_cost({g}, 'k2', 'h2', NULL, '{unit}', 5)"),
        format!("ledger_dispose({g}, {k}, '{unit}', NULL, 'DEAD', 'https://ci.example/1', NULL)"),
    ];
    for call in calls {
        // As the app role, in its own transaction (EXECUTE is checked as it).
        let tx = app.owner.begin().await.expect("begin");
        tx.execute_unprepared("SET LOCAL ROLE work_ledger_app").await.expect("role");
        let rows = tx
            .query_all_raw(Statement::from_string(
                DbBackend::Postgres,
                format!("SELECT result, unit IS NULL AS hidden FROM {call}"),
            ))
            .await
            .unwrap_or_else(|e| panic!("{call}: {e}"));
        tx.commit().await.expect("commit");
        assert_eq!(rows.len(), 1, "{call}");
        assert_eq!(rows[0].try_get::<String>("", "result").expect("result"), "NOT_FOUND", "{call}");
        assert!(rows[0].try_get::<bool>("", "hidden").expect("hidden"), "{call}");
    }
    assert_eq!(snapshot(&app, &unit).await, before);
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, all_events, "nothing written anywhere");
}

/// The guards no longer run for the write functions' own statements (issue
/// 28; they stay for the owner), and `work_units_guard` was what stamped
/// `updated_at`: each write function now stamps it in every update of a
/// unit. All nine of them, through the API: the stamp moves forward every
/// time, whichever function wrote.
#[tokio::test]
async fn every_write_of_a_unit_moves_its_updated_at() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let first = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let second = Agent::new(&app, "f", "agent-2", Role::Agent).await;
    let third = Agent::new(&app, "f", "agent-3", Role::Agent).await;
    let unit = app.register(&op.token, &["stamped"]).await[0]["id"].as_str().expect("id").to_owned();
    let stamp_sql =
        format!("SELECT (extract(epoch FROM updated_at) * 1000000)::bigint FROM work_units WHERE id = '{unit}'");
    let last = std::cell::Cell::new(app.sql_i64(&stamp_sql).await);
    let moved = async |write: &str, answer: crate::helpers::Gql| {
        assert_eq!(answer.unit()["id"], unit.as_str(), "{write}: {:#}", answer.body);
        let now = app.sql_i64(&stamp_sql).await;
        assert!(now > last.get(), "{write} left updated_at at {} (now {now})", last.get());
        last.set(now);
    };

    let claimed = first.claim_next(json!({})).await;
    let attempt = claimed.str("currentAttemptId");
    moved("claim", claimed).await;
    moved("claimNext renewing the held unit", first.claim_next(json!({})).await).await;
    moved("heartbeat", first.heartbeat(&attempt, json!({})).await).await;
    moved("transition to IN_PROGRESS", first.transition(&unit, "IN_PROGRESS", json!({})).await).await;
    moved("block", first.block(&unit, "which copybook?", json!({})).await).await;
    moved("unblock", op.unblock(&unit, "PAYCPY01", json!({})).await).await;
    moved("release", first.release(&unit, json!({ "reason": "handing over" })).await).await;
    moved("claim after a release", second.claim_next(json!({})).await).await;
    app.expire_lease(&unit).await;
    last.set(app.sql_i64(&stamp_sql).await);
    moved("stale reclaim", third.claim_next(json!({})).await).await;
    moved("transition to IN_PROGRESS again", third.transition(&unit, "IN_PROGRESS", json!({})).await).await;
    let verified = third.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci.example/1" })).await;
    moved("transition to VERIFIED", verified).await;
    moved("dispose", third.dispose(&unit, "MIGRATED", json!({})).await).await;
}

/// Units, attempts, events and questions get ids in creation order (UUID
/// version 7): with random ids every claim put its entries
/// on random leaf pages of seven id-keyed indexes, and after a checkpoint
/// each first change of a page wrote the whole page to the WAL (18-19 KB of
/// WAL a claim against 6 KB). Every id written through the service here
/// carries the millisecond of its row's creation.
#[tokio::test]
async fn ids_are_written_in_creation_order() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["first", "second"]).await;
    let agent = Agent::new(&app, "f", "agent", Role::Agent).await;
    let unit = agent.claim_next(json!({})).await.unit()["id"].as_str().expect("id").to_owned();
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.block(&unit, "which copybook?", json!({})).await.data();

    let rows = app
        .sql_json(
            "WITH ids AS (
                 SELECT 'unit' AS kind, id, created_at AS at FROM work_units
                 UNION ALL SELECT 'attempt', id, started_at FROM work_unit_attempts
                 UNION ALL SELECT 'event', id, created_at FROM work_unit_events
                 UNION ALL SELECT 'question', id, created_at FROM blocking_questions)
             SELECT kind, count(*) AS n,
                    count(*) FILTER (WHERE substr(id::text, 15, 1) = '7') AS version_7,
                    count(*) FILTER (WHERE abs(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                                               - (extract(epoch FROM at) * 1000)::bigint) <= 1000) AS at_creation
               FROM ids GROUP BY kind ORDER BY kind",
        )
        .await;
    let kinds: Vec<&str> = rows.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(kinds, ["attempt", "event", "question", "unit"], "{rows:#?}");
    for row in &rows {
        assert_eq!(row["version_7"], row["n"], "ids of another version: {row}");
        assert_eq!(row["at_creation"], row["n"], "ids that do not carry their row's creation time: {row}");
    }
}
