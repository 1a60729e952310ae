//! Issue 60, items 1, 2 and 4: no login forges a write (SPEC §2, §8, §9).
//! The attacks a review ran as raw SQL with the service's own database role
//! against the main this issue started from, where each of them succeeded:
//! a READY unit disposed MIGRATED with no attempt, a CLAIMED unit taken to
//! DONE without VERIFIED, a disposed unit disposed again, a lease of 68
//! years, 2^62 cents on one attempt, a ref holding U+202E, and a stream
//! position handed to a write by a setting. Now a write function takes the
//! caller's token and intent, and the state machine, the permissions and
//! the limits are the database's, for every caller.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, hash_sql, spawn_app};
use crate::operator::{text, work_ledger};
use crate::ws_client::Ws;

/// `call` (a function call yielding `result` and `info`) as the application
/// role, after the statements `before`, in one committed transaction: the
/// answer's result and info, or PostgreSQL's refusal.
async fn as_app(app: &TestApp, before: &[&str], call: &str) -> Result<(String, Value), String> {
    let tx = app.owner.begin().await.expect("begin");
    tx.execute_unprepared("SET LOCAL ROLE work_ledger_app").await.expect("role");
    for sql in before {
        tx.execute_unprepared(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let row =
        tx.query_one_raw(Statement::from_string(DbBackend::Postgres, format!("SELECT result, info FROM {call}"))).await;
    match row {
        Ok(Some(row)) => {
            tx.commit().await.map_err(|e| e.to_string())?;
            Ok((row.try_get("", "result").expect("result"), row.try_get("", "info").expect("info")))
        }
        Ok(None) => Err(format!("{call}: no row")),
        Err(e) => Err(e.to_string()),
    }
}

/// The result of `call` as the application role; panics on an SQL error.
async fn result_of(app: &TestApp, call: &str) -> String {
    as_app(app, &[], call).await.unwrap_or_else(|e| panic!("{call}: {e}")).0
}

/// The review's attacks, each as the app role with tokens of every kind:
/// refused with the code that explains it, nothing written; and the state
/// machine holds for the writer role and the owner too.
#[tokio::test]
async fn raw_sql_as_the_app_role_cannot_forge_a_disposition() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let units = app.register(&op, &["ready", "claimed", "dead", "theirs"]).await;
    let id = |i: usize| units[i]["id"].as_str().expect("id").to_owned();
    let (ready, claimed, dead) = (id(0), id(1), id(2));
    let holder = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    holder.claim_unit(&claimed, json!({})).await.unit();
    let operator = Agent { token: op.clone(), ..holder.clone() };
    operator.dispose(&dead, "DEAD", json!({ "evidence": "https://ci.example/dead" })).await.data();
    let other = app.token("f", "agent-2", Role::Agent).await;
    let triage = app.token("f", "triage", Role::Triage).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let foreign = app.token("g", "agent-1", Role::Admin).await;
    let revoked = app.token("f", "revoked", Role::Admin).await;
    app.sql("UPDATE api_tokens SET revoked_at = now() WHERE name = 'revoked'").await;
    let expired = app.token("f", "expired", Role::Admin).await;
    app.sql("UPDATE api_tokens SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour' WHERE name = 'expired'")
        .await;
    let before: Vec<Value> = futures::future::join_all([&ready, &claimed, &dead].map(|u| app.snapshot(u))).await;

    let dispose = |token: &str, unit: &str, disposition: &str| {
        format!(
            "ledger_dispose({}, NULL, NULL, NULL, '{unit}', NULL, '{disposition}', 'https://ci.example/forged', NULL)",
            hash_sql(token)
        )
    };
    let refusals = [
        // A READY unit disposed MIGRATED, by an agent and by an operator.
        (dispose(&holder.token, &ready, "MIGRATED"), "NOT_CLAIM_HOLDER"),
        (dispose(&op, &ready, "MIGRATED"), "ILLEGAL_TRANSITION"),
        // A CLAIMED unit taken to DONE without VERIFIED, by its holder and an operator.
        (dispose(&holder.token, &claimed, "MIGRATED"), "ILLEGAL_TRANSITION"),
        (dispose(&op, &claimed, "MIGRATED"), "ILLEGAL_TRANSITION"),
        // ABANDONED by the holder while only CLAIMED (the holder abandons what it works on).
        (dispose(&holder.token, &claimed, "DEAD"), "ILLEGAL_TRANSITION"),
        // A disposed unit disposed a second time.
        (dispose(&op, &dead, "DEAD"), "DISPOSITION_IMMUTABLE"),
        (dispose(&op, &dead, "MIGRATED"), "DISPOSITION_IMMUTABLE"),
        // Who acts is the token: none of these may.
        (dispose(&other, &claimed, "DROPPED"), "NOT_CLAIM_HOLDER"),
        (dispose(&reader, &claimed, "DROPPED"), "FORBIDDEN"),
        (dispose(&triage, &claimed, "DROPPED"), "FORBIDDEN"),
        (dispose(&revoked, &claimed, "DROPPED"), "UNAUTHENTICATED"),
        (dispose(&expired, &claimed, "DROPPED"), "UNAUTHENTICATED"),
        (dispose("wl_not-a-token", &claimed, "DROPPED"), "UNAUTHENTICATED"),
        (dispose(&foreign, &claimed, "DROPPED"), "NOT_FOUND"),
        (dispose(&op, &claimed, "ARCHIVED"), "INVALID_INPUT"),
        // An agent answering its own question, a reader claiming.
        (
            format!(
                "ledger_unblock({}, NULL, NULL, NULL, '{claimed}', NULL, 'answered', false)",
                hash_sql(&holder.token)
            ),
            "FORBIDDEN",
        ),
        (format!("ledger_claim({}, NULL, NULL, NULL, 900, NULL, '{ready}')", hash_sql(&reader)), "FORBIDDEN"),
        // A transition to a state no move of the holder leads to.
        (
            format!(
                "ledger_transition({}, NULL, NULL, NULL, '{claimed}', NULL, 'done', NULL)",
                hash_sql(&holder.token)
            ),
            "ILLEGAL_TRANSITION",
        ),
        (
            format!(
                "ledger_transition({}, NULL, NULL, NULL, '{claimed}', NULL, 'verified', 'https://ci.example/v')",
                hash_sql(&holder.token)
            ),
            "ILLEGAL_TRANSITION",
        ),
    ];
    for (call, code) in &refusals {
        assert_eq!(&result_of(&app, call).await, code, "{call}");
    }
    for (unit, before) in [&ready, &claimed, &dead].into_iter().zip(&before) {
        app.assert_unchanged(unit, before, "a refused forgery").await;
    }

    // The state machine holds for every role: the writer role (whose
    // functions once skipped the guards) and the owner.
    let forge = format!(
        "UPDATE work_units SET state = 'done', disposition = 'MIGRATED', disposed_at = now() WHERE id = '{ready}'"
    );
    for role in [Some("work_ledger_writer"), None] {
        let err = app.commit_as(role, "f", &[&forge]).await.expect_err("forged");
        assert!(err.contains("work_units_legal_transition"), "{role:?}: {err}");
    }
    let audit = work_ledger(&app, &["audit"], None);
    assert!(audit.status.success(), "{}{}", text(&audit.stdout), text(&audit.stderr));
}

/// SPEC §9's limits, for a caller who skips the service's own checks: each
/// is INVALID_INPUT naming the argument, and nothing is written.
#[tokio::test]
async fn the_limits_of_spec_9_hold_for_raw_sql_callers() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["target"]).await[0]["id"].as_str().expect("id").to_owned();
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let attempt = agent.claim_unit(&unit, json!({})).await.str("currentAttemptId");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let (a, o) = (hash_sql(&agent.token), hash_sql(&op));
    let events = app.event_count().await;
    let bidi = "evil\u{202E}fdp.exe";
    let cases = [
        (format!("ledger_claim({a}, NULL, NULL, NULL, 2147483647, NULL, NULL)"), "leaseSeconds"),
        (format!("ledger_claim({a}, NULL, NULL, NULL, -1000, NULL, NULL)"), "leaseSeconds"),
        (format!("ledger_claim({a}, NULL, NULL, NULL, 29, NULL, NULL)"), "leaseSeconds"),
        (format!("ledger_heartbeat({a}, NULL, '{attempt}', 86401)"), "leaseSeconds"),
        (format!("ledger_record_cost({a}, NULL, 'k1', 'h1', '{attempt}', NULL, 4611686018427387904)"), "cents"),
        (format!("ledger_record_cost({a}, NULL, 'k2', 'h2', '{attempt}', NULL, 1000000001)"), "cents"),
        (format!("ledger_record_cost({a}, NULL, 'k3', 'h3', '{attempt}', NULL, -1)"), "cents"),
        (format!("ledger_record_cost({a}, NULL, NULL, NULL, '{attempt}', NULL, 5)"), "idempotencyKey"),
        (format!("ledger_register({o}, NULL, ARRAY['{bidi}'], NULL, NULL)"), "units[0].externalRef"),
        (format!("ledger_register({o}, NULL, ARRAY['ok', 'a' || chr(7)], NULL, NULL)"), "units[1].externalRef"),
        (format!("ledger_register({o}, NULL, ARRAY[repeat('x', 257)], NULL, NULL)"), "units[0].externalRef"),
        (format!("ledger_register({o}, NULL, ARRAY['ok'], ARRAY['{bidi}'], NULL)"), "units[0].domain"),
        (
            format!(
                "ledger_register({o}, NULL, (SELECT array_agg('r' || g) FROM generate_series(1, 1001) g), NULL, NULL)"
            ),
            "units",
        ),
        (format!("ledger_register({o}, NULL, ARRAY[]::text[], NULL, NULL)"), "units"),
        (format!("ledger_claim({a}, NULL, '{bidi}', 'h', 900, NULL, NULL)"), "idempotencyKey"),
        (
            format!("ledger_block({a}, NULL, NULL, NULL, '{unit}', NULL, 'which {bidi}?', 'agent-questions')"),
            "question",
        ),
        (
            format!("ledger_block({a}, NULL, NULL, NULL, '{unit}', NULL, repeat('q', 8001), 'agent-questions')"),
            "question",
        ),
        (format!("ledger_block({a}, NULL, NULL, NULL, '{unit}', NULL, 'which?', '{bidi}')"), "assigneeGroup"),
        (
            format!(
                "ledger_transition({a}, NULL, NULL, NULL, '{unit}', NULL, 'verified', 'https://ci.example/{bidi}')"
            ),
            "evidenceUrl",
        ),
        (
            format!("ledger_transition({a}, NULL, NULL, NULL, '{unit}', NULL, 'verified', 'ftp://ci.example/1')"),
            "evidenceUrl",
        ),
        (format!("ledger_release({a}, NULL, NULL, NULL, '{unit}', NULL, 'verified', NULL)"), "outcome"),
        (format!("ledger_release({a}, NULL, NULL, NULL, '{unit}', NULL, 'failed', repeat('r', 8001))"), "reason"),
    ];
    for (call, argument) in &cases {
        let (result, info) = as_app(&app, &[], call).await.unwrap_or_else(|e| panic!("{call}: {e}"));
        assert_eq!((result.as_str(), info["argument"].as_str()), ("INVALID_INPUT", Some(*argument)), "{call}: {info}");
    }
    assert_eq!(app.event_count().await, events, "an argument past a limit wrote something");
    // And a cost record past the bound is refused by the table, whoever writes it.
    let err = app
        .sql_refused(&format!(
            "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, agent_id, cost_delta_cents)
             VALUES ('f', '{unit}', '{attempt}', 'cost_recorded', 'agent-1', 4611686018427387904)"
        ))
        .await;
    assert!(err.contains("work_unit_events_cost_delta_bounded"), "{err}");
}

/// The database's rules refuse exactly the characters the service's do
/// (SPEC §9: no invisible or bidi control characters in identifiers, refs
/// and links), for every code point, so neither door is wider.
#[tokio::test]
async fn the_databases_rules_refuse_every_invisible_character_the_services_rules_refuse() {
    let app = spawn_app().await;
    let (points, visible): (Vec<i32>, Vec<bool>) = (1u32..=0x10FFFF)
        .filter_map(char::from_u32)
        .map(|c| (c as i32, work_ledger::ledger::validate::label("x", &format!("a{c}b")).is_ok()))
        .unzip();
    let disagree = app
        .owner
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT p.cp FROM unnest($1::int[], $2::bool[]) AS p(cp, ok) WHERE ledger_is_label('a' || chr(p.cp) || 'b') <> p.ok",
            [points.into(), visible.into()],
        ))
        .await
        .expect("compare");
    let disagree: Vec<String> =
        disagree.iter().map(|r| format!("U+{:04X}", r.try_get::<i32>("", "cp").expect("cp"))).collect();
    assert!(disagree.is_empty(), "the database and the service disagree on {disagree:?}");
    // Questions may join and non-join between visible characters, nowhere else.
    for (question, ok) in [
        ("\u{645}\u{6cc}\u{200C}\u{62e}\u{648}\u{627}\u{647}\u{645}", true),
        ("👩\u{200D}💻 ready?", true),
        ("line one\nline two\t(tab)", true),
        ("\u{200D}lead", false),
        ("trail\u{200C}", false),
        ("a \u{200D}b", false),
        ("a\u{200D}\u{200D}b", false),
        ("a\u{202E}b", false),
        ("bell\u{7}", false),
    ] {
        let service = work_ledger::ledger::validate::long_text("q", question)
            .and_then(|()| work_ledger::ledger::validate::visible_text("q", question));
        assert_eq!(service.is_ok(), ok, "the service: {question:?}");
        let sql = format!("SELECT ledger_is_question('{}') AS ok", question.replace('\'', "''"));
        let rows = app.sql_json(&sql).await;
        assert_eq!(rows[0]["ok"], ok, "the database: {question:?}");
    }
}

/// Item 4: the settings a write or its triggers read are set by the write
/// itself. Before each write the app role sets them as the attack did: its
/// transaction's stream position to 1 (a write then landed behind events
/// already delivered and was never delivered), another fleet, silence for
/// the notification trigger, and a fake notification tag. The write acts
/// in its token's fleet, takes a fresh position a live subscriber receives,
/// and is announced.
#[tokio::test]
async fn no_setting_a_caller_makes_changes_what_a_write_does() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let units = app.register(&op, &["one", "two", "three"]).await;
    app.register(&app.token("g", "op", Role::Operator).await, &["elsewhere"]).await;
    let watcher = app.token("f", "watcher", Role::Reader).await;
    let latest = app.gql(&watcher, "{ events(first: 1) { edges { cursor } } }", json!({})).await;
    let after = latest.data()["events"]["edges"][0]["cursor"].as_str().expect("cursor").to_owned();
    let mut ws = Ws::subscription(
        &app,
        &watcher,
        "subscription($after: String) { ledgerEvents(after: $after) { eventType agentId unit { externalRef } } }",
        json!({ "after": after }),
    )
    .await;
    let mut listener = PgListener::connect(&app.db_url).await.expect("listener");
    listener.listen("work_ledger_events").await.expect("listen");
    let delivered = app.sql_i64("SELECT max(batch) FROM work_unit_events").await;

    app.sql_tokens("f", "'units:claim'", "SELECT 'forger'").await;
    let forged = [
        "SELECT set_config('work_ledger.live_batch', pg_current_xact_id()::text || ':1', true)",
        "SELECT set_config('work_ledger.fleet', 'g', true)",
        "SELECT set_config('work_ledger.notify', 'after-commit', true)",
        "SELECT set_config('work_ledger.live_tag', repeat('0', 64) || ':f', true)",
    ];
    let claim = format!("ledger_claim({}, NULL, NULL, NULL, 900, NULL, NULL)", crate::helpers::sql_token("'forger'"));
    let (result, _) = as_app(&app, &forged, &claim).await.expect("claim");
    assert_eq!(result, "claimed");
    let claimed = app.sql_json("SELECT fleet, batch FROM work_unit_events WHERE agent_id = 'forger'").await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0]["fleet"], "f", "the write acted in its token's fleet");
    assert!(claimed[0]["batch"].as_i64().expect("batch") > delivered, "a position behind one delivered: {claimed:?}");

    let event = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next_data()).await.expect("delivered");
    assert_eq!(event["ledgerEvents"]["agentId"], "forger", "{event}");
    let heard = tokio::time::timeout(std::time::Duration::from_secs(5), listener.recv()).await.expect("announced");
    assert_ne!(heard.expect("notification").payload(), "0".repeat(64), "the forged tag was sent");
    let _ = units;

    // The sweeper's write (the app role may call it) the same way.
    let held = app.sql_json("SELECT id::text FROM work_units WHERE claimed_by = 'forger'").await;
    let held = held[0]["id"].as_str().expect("id").to_owned();
    app.expire_lease(&held).await;
    let before_stall = app.sql_i64("SELECT max(batch) FROM work_unit_events").await;
    let report =
        format!("(SELECT 'ok' AS result, '{{}}'::jsonb AS info, ledger_report_stalls(ARRAY['{held}'::uuid]) AS n) r");
    as_app(&app, &forged[..1], &report).await.expect("report");
    let stalled = app.sql_i64("SELECT batch FROM work_unit_events WHERE event_type = 'stalled'").await;
    assert!(stalled > before_stall, "the stall took position {stalled}, behind {before_stall}");
}

/// Items 1 and 2 for whatever the app role may execute: every function it
/// may call, called thousands of times with arguments drawn from hostile
/// pools (every token, every unit in every state, every state and
/// disposition name, the limits' edges). Afterwards the database's record
/// must be one SPEC §2 allows: every change of state a declared move, made
/// by a token whose permissions allow it, every disposition set once, every
/// lease and cost within bounds, and the audit clean. Seeded
/// (`WL_FUZZ_SEED`); the seed is printed.
#[tokio::test]
async fn every_function_the_app_role_may_call_leaves_a_ledger_the_state_machine_allows() {
    let app = spawn_app().await;
    let seed = std::env::var("WL_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    println!("WL_FUZZ_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // A ledger with a unit in every state, in two fleets, and tokens of every kind.
    let mut tokens = Vec::new();
    for fleet in ["f", "g"] {
        let op = app.token(fleet, "op", Role::Operator).await;
        let refs: Vec<String> = (0..8).map(|i| format!("{fleet}-{i}")).collect();
        let ids: Vec<String> = app
            .register(&op, &refs.iter().map(String::as_str).collect::<Vec<_>>())
            .await
            .iter()
            .map(|u| u["id"].as_str().expect("id").to_owned())
            .collect();
        let a = Agent::new(&app, fleet, "agent-a", Role::Agent).await;
        let b = Agent::new(&app, fleet, "agent-b", Role::Agent).await;
        let c = Agent::new(&app, fleet, "agent-c", Role::Agent).await;
        a.claim_unit(&ids[1], json!({})).await.data();
        b.claim_unit(&ids[2], json!({})).await.data();
        b.transition(&ids[2], "IN_PROGRESS", json!({})).await.data();
        b.block(&ids[2], "which one?", json!({})).await.data();
        c.claim_unit(&ids[3], json!({})).await.data();
        c.transition(&ids[3], "IN_PROGRESS", json!({})).await.data();
        c.transition(&ids[3], "VERIFIED", json!({ "evidence": "https://ci.example/v" })).await.data();
        let operator = Agent { token: op.clone(), ..a.clone() };
        operator.dispose(&ids[4], "DEAD", json!({ "evidence": "https://ci.example/d" })).await.data();
        let named = |name: &str, token: &str| (fleet.to_owned(), name.to_owned(), token.to_owned());
        tokens.extend([
            named("op", &op),
            named("agent-a", &a.token),
            named("agent-b", &b.token),
            named("agent-c", &c.token),
        ]);
        tokens.push(named("triage", &app.token(fleet, "triage", Role::Triage).await));
        tokens.push(named("reader", &app.token(fleet, "reader", Role::Reader).await));
        tokens.push(named("revoked", &app.token(fleet, "revoked", Role::Admin).await));
    }
    app.sql("UPDATE api_tokens SET revoked_at = now() WHERE name = 'revoked'").await;
    tokens.push(("f".to_owned(), "unknown".to_owned(), "wl_unknown".to_owned()));

    let mut uuids: Vec<String> = app
        .sql_json(
            "SELECT id::text FROM work_units UNION ALL SELECT id::text FROM work_unit_attempts
             UNION ALL SELECT id::text FROM blocking_questions",
        )
        .await
        .iter()
        .map(|r| format!("'{}'", r["id"].as_str().expect("id")))
        .collect();
    uuids.extend(["NULL".to_owned(), "gen_random_uuid()".to_owned()]);
    let mut texts: Vec<String> = [
        "ready",
        "claimed",
        "in_progress",
        "blocked",
        "verified",
        "done",
        "abandoned",
        "MIGRATED",
        "DROPPED",
        "DEFERRED",
        "DEAD",
        "failed",
        "abandoned",
        "superseded",
        "after-commit",
        "",
        "f",
        "g",
        "default",
        "agent-questions",
        "https://ci.example/fuzz",
        "https://ci.example/\u{202E}",
        "answer?",
    ]
    .iter()
    .map(|t| format!("'{t}'"))
    .collect();
    texts.extend(["NULL".to_owned(), "repeat('x', 9000)".to_owned(), "'k' || (random() * 50)::int".to_owned()]);
    let pools: Vec<(&str, Vec<String>)> = vec![
        (
            "bytea",
            tokens
                .iter()
                .map(|(_, _, t)| hash_sql(t))
                .chain(["NULL".to_owned(), "sha256(random()::text::bytea)".to_owned()])
                .collect(),
        ),
        ("uuid", uuids.clone()),
        (
            "uuid[]",
            vec![format!("ARRAY[{}]::uuid[]", uuids[..uuids.len() - 2].join(",")), "'{}'".into(), "NULL".into()],
        ),
        ("text", texts),
        (
            "text[]",
            [
                "'{ready,claimed,in_progress,blocked,verified,done,abandoned}'",
                "'{}'",
                "NULL",
                "ARRAY['fuzz-' || (random() * 9)::int]",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        (
            "integer",
            ["-1000", "0", "29", "30", "900", "86400", "86401", "2147483647", "NULL"].map(str::to_owned).to_vec(),
        ),
        (
            "bigint",
            ["-1", "0", "5", "1000000000", "1000000001", "4611686018427387904", "NULL"].map(str::to_owned).to_vec(),
        ),
        ("boolean", ["true", "false", "NULL"].map(str::to_owned).to_vec()),
    ];

    // Every function the app role may execute, with its argument types.
    let functions = app
        .sql_json(
            "SELECT p.proname AS name, to_jsonb(p.proargnames) AS names, pg_get_userbyid(p.proowner) AS owner,
                    coalesce(array_agg(format_type(t.ty, NULL) ORDER BY t.ord) FILTER (WHERE t.ty IS NOT NULL), '{}') AS args
               FROM pg_proc p LEFT JOIN LATERAL unnest(p.proargtypes) WITH ORDINALITY AS t(ty, ord) ON true
              WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
                AND has_function_privilege('work_ledger_app', p.oid, 'EXECUTE')
                AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                                          AND d.deptype = 'e')
              GROUP BY p.oid, p.proname",
        )
        .await;
    // The writes of a fleet: the writer role's functions the app role may
    // call (its doors, grants.sql), each taking the caller's token first;
    // no other function the app role may call takes a token but the door
    // of the reads, which writes nothing.
    let writes: Vec<Value> = functions.iter().filter(|f| f["owner"] == "work_ledger_writer").cloned().collect();
    assert!(writes.len() >= 9, "the writes of a fleet: {functions:?}");
    let takes_token =
        |f: &Value| f["names"].as_array().and_then(|n| n.first()).and_then(Value::as_str) == Some("p_token");
    for f in &functions {
        let write = f["owner"] == "work_ledger_writer";
        assert!(takes_token(f) == write || f["name"] == "ledger_session", "a token taken or not: {f}");
    }
    // Each authenticates it: called with a token that is no one's, it
    // answers UNAUTHENTICATED (the mark: nothing) and writes nothing.
    let written = "SELECT (SELECT coalesce(max(seq), 0) FROM work_unit_events) AS e,
                          (SELECT count(*) FROM temporal_runs) AS r, (SELECT count(*) FROM work_units) AS u";
    let before_strangers = app.sql_json(written).await;
    for write in &writes {
        let args: Vec<String> = write["args"]
            .as_array()
            .expect("args")
            .iter()
            .enumerate()
            .map(|(k, ty)| if k == 0 { hash_sql("wl_no-one") } else { format!("NULL::{}", ty.as_str().expect("type")) })
            .collect();
        let call = format!("{}({})", write["name"].as_str().expect("name"), args.join(", "));
        let tx = app.owner.begin().await.expect("begin");
        tx.execute_unprepared("SET LOCAL ROLE work_ledger_app").await.expect("role");
        let answer = tx
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!("SELECT to_jsonb(w) AS j FROM {call} w"),
            ))
            .await
            .unwrap_or_else(|e| panic!("{call}: {e}"))
            .map(|row| row.try_get::<Option<Value>>("", "j").expect("j"));
        tx.commit().await.expect("commit");
        let refused = match &answer {
            Some(Some(row)) => row["result"] == "UNAUTHENTICATED",
            _ => true,
        };
        assert!(refused, "{call} answered a stranger {answer:?}");
    }
    assert_eq!(app.sql_json(written).await, before_strangers, "a stranger's call wrote");
    let hostile = |ty: &str, rng: &mut StdRng| match pools.iter().find(|(t, _)| *t == ty) {
        Some((_, pool)) => pool.choose(rng).expect("pool").clone(),
        None => format!("NULL::{ty}"),
    };
    let before_fuzz = app.sql_i64("SELECT max(seq) FROM work_unit_events").await;
    let written = format!(
        "SELECT event_type::text AS t, count(*) AS n FROM work_unit_events WHERE seq > {before_fuzz} GROUP BY 1 ORDER BY 1"
    );
    let kinds = ["claimed", "transitioned", "cost_recorded", "released", "disposed"];
    let reached_all = |written: &[Value]| kinds.iter().all(|kind| written.iter().any(|w| w["t"] == *kind));
    let mut called = 0;
    let mut plausible = Plausible::default();
    for i in 0..9000 {
        // At least 3000 calls, and on until every write's event was reached
        // (a seed's first 3000 may miss one).
        if i >= 3000 && i % 500 == 0 && reached_all(&app.sql_json(&written).await) {
            break;
        }
        // Plausible values (by the argument's name) from the ledger as it
        // is now, so that the calls reach the writes' logic, and in half of
        // the calls one argument hostile; the writes four times in five.
        if i % 100 == 0 {
            plausible = Plausible::read(&app, &tokens).await;
        }
        let function = if rng.random_bool(0.8) { writes.choose(&mut rng) } else { functions.choose(&mut rng) };
        let subject = plausible.subject(&mut rng);
        let function = function.expect("a function");
        let names = function["names"].as_array().cloned().unwrap_or_default();
        let types = function["args"].as_array().expect("args");
        let spoiled = if rng.random_bool(0.5) { rng.random_range(0..types.len().max(1)) } else { usize::MAX };
        let args: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(k, ty)| {
                let ty = ty.as_str().expect("type");
                let name = names.get(k).and_then(Value::as_str).unwrap_or_default();
                match plausible.value(name, &subject, i, &mut rng) {
                    Some(value) if k != spoiled => value,
                    _ => hostile(ty, &mut rng),
                }
            })
            .collect();
        let call = format!("{}({})", function["name"].as_str().expect("name"), args.join(", "));
        let tx = app.owner.begin().await.expect("begin");
        tx.execute_unprepared("SET LOCAL ROLE work_ledger_app; SET LOCAL statement_timeout = '2s'")
            .await
            .expect("role");
        if rng.random_bool(0.2) {
            tx.execute_unprepared("SELECT set_config('work_ledger.fleet', 'f', true)").await.expect("fleet");
        }
        match tx.execute_unprepared(&format!("SELECT {call}")).await {
            Ok(_) => {
                tx.commit().await.expect("commit");
                called += 1;
            }
            Err(_) => tx.rollback().await.expect("rollback"),
        }
    }
    assert!(called > 1000, "only {called} calls ran (seed {seed})");

    let written = app.sql_json(&written).await;
    println!("the fuzz wrote {written:?}");
    for kind in kinds {
        assert!(written.iter().any(|w| w["t"] == kind), "seed {seed}: the fuzz reached no {kind}: {written:?}");
    }

    // What the database recorded is what the state machine and the tokens allow.
    let found = breaches(&app).await;
    assert!(found.is_empty(), "seed {seed}: {found:#?}");
    let audit = work_ledger(&app, &["audit"], None);
    assert!(audit.status.success(), "seed {seed}: {}{}", text(&audit.stdout), text(&audit.stderr));

    // And the check itself sees a forgery: a READY unit made DONE by hand,
    // with its event, behind the triggers' back.
    app.sql(
        "SET session_replication_role = replica;
         WITH u AS (UPDATE work_units SET state = 'done', disposition = 'MIGRATED', disposed_at = now(),
                                          evidence_urls = '{https://ci.example/forged}'
                     WHERE id = (SELECT id FROM work_units WHERE state = 'ready' LIMIT 1) RETURNING id, fleet)
         INSERT INTO work_unit_events (fleet, unit_id, event_type, from_state, to_state, agent_id)
         SELECT fleet, id, 'disposed', 'ready', 'done', 'agent-a' FROM u;
         SET session_replication_role = DEFAULT",
    )
    .await;
    let found = breaches(&app).await;
    assert!(found.iter().any(|b| b["breach"] == "illegal move"), "the check missed a forged disposition: {found:#?}");
}

/// Values a well-meaning caller would pass, by argument name, read from the
/// ledger as it stands: for each call one subject unit, and mostly its
/// holder's or its fleet's operator's token.
#[derive(Default)]
struct Plausible {
    /// (fleet, name, bearer token) of every token.
    tokens: Vec<(String, String, String)>,
    units: Vec<Value>,
}

impl Plausible {
    async fn read(app: &TestApp, tokens: &[(String, String, String)]) -> Plausible {
        let units = app
            .sql_json(
                "SELECT u.id::text AS id, u.fleet, u.claimed_by AS holder, u.current_attempt_id::text AS attempt,
                        q.id::text AS question
                   FROM work_units u LEFT JOIN blocking_questions q ON q.unit_id = u.id AND q.status = 'open'",
            )
            .await;
        Plausible { tokens: tokens.to_vec(), units }
    }

    fn subject(&self, rng: &mut StdRng) -> Value {
        self.units.choose(rng).cloned().unwrap_or(Value::Null)
    }

    /// A plausible value of argument `name` for call `i` on `unit`; `None`
    /// for a name it does not know.
    fn value(&self, name: &str, unit: &Value, i: usize, rng: &mut StdRng) -> Option<String> {
        let one = |values: &[&str], rng: &mut StdRng| values.choose(rng).map(|v| (*v).to_owned());
        let quoted = |field: &str| unit[field].as_str().map_or_else(|| "NULL".to_owned(), |v| format!("'{v}'"));
        match name {
            "p_token" => {
                let fleet = unit["fleet"].as_str().unwrap_or("f");
                let wanted = match rng.random_range(0..4) {
                    0 | 1 => unit["holder"].as_str().unwrap_or("op"),
                    2 => "op",
                    _ => ["agent-a", "agent-b", "agent-c", "triage", "reader", "revoked"]
                        .choose(rng)
                        .copied()
                        .unwrap_or("op"),
                };
                let token =
                    self.tokens.iter().find(|(f, n, _)| f == fleet && n == wanted).or_else(|| self.tokens.choose(rng));
                token.map(|(_, _, t)| hash_sql(t))
            }
            "p_unit" => Some(quoted("id")),
            "p_attempt" => Some(if rng.random_bool(0.7) { quoted("attempt") } else { "NULL".to_owned() }),
            "p_question" => Some(if rng.random_bool(0.5) { quoted("question") } else { "NULL".to_owned() }),
            "p_key" => Some(format!("'key-{i}'")),
            "p_hash" => Some("'fingerprint'".to_owned()),
            "p_notify" => one(&["NULL", "'after-commit'"], rng),
            "p_lease" => one(&["900", "30", "86400"], rng),
            "p_domain" => one(&["NULL", "'default'"], rng),
            "p_to" => one(&["'in_progress'", "'verified'"], rng),
            "p_evidence" => one(&["'https://ci.example/run/1'", "'https://ci.example/run/1'", "NULL"], rng),
            "p_disposition" => one(&["'MIGRATED'", "'DROPPED'", "'DEFERRED'", "'DEAD'"], rng),
            "p_outcome" => one(&["'abandoned'", "'failed'", "NULL"], rng),
            "p_reason" | "p_answer" => one(&["'because'", "'because'", "NULL"], rng),
            "p_group" => one(&["'agent-questions'", "'dba'"], rng),
            "p_cents" => one(&["5", "1000000000"], rng),
            "p_refs" => Some(format!("ARRAY['fuzz-{i}']")),
            "p_domains" | "p_workflows" => one(&["NULL", "ARRAY['default']"], rng),
            "p_similar" => one(&["true", "false"], rng),
            "p_units" => Some(format!(
                "ARRAY[{}]::uuid[]",
                self.units
                    .iter()
                    .filter_map(|u| u["id"].as_str())
                    .map(|id| format!("'{id}'"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            _ => None,
        }
    }
}

/// What the database recorded that SPEC §2 forbids: a change of state that
/// is no declared move or does not follow the unit's previous one, a second
/// disposition, an event by a token without the permission its write needs,
/// a disposition by a non-holder without units:dispose-any, a lease or a
/// cost past SPEC §9's bounds, a ref or domain that is no label.
async fn breaches(app: &TestApp) -> Vec<Value> {
    app.sql_json(
        "WITH moves AS (SELECT * FROM ledger_moves()),
                  changes AS (
                    SELECT e.*, lag(e.to_state) OVER (PARTITION BY e.unit_id ORDER BY e.seq) AS before
                      FROM work_unit_events e WHERE e.to_state IS NOT NULL)
             SELECT 'illegal move' AS breach, c.unit_id::text, c.event_type::text, c.from_state::text, c.to_state::text
               FROM changes c
              WHERE c.from_state IS DISTINCT FROM c.to_state AND c.from_state IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM moves m WHERE m.from_state = c.from_state AND m.to_state = c.to_state)
             UNION ALL
             SELECT 'broken chain', c.unit_id::text, c.event_type::text, c.before::text, c.from_state::text
               FROM changes c WHERE c.before IS NOT NULL AND c.from_state IS DISTINCT FROM c.before
             UNION ALL
             SELECT 'disposed twice', unit_id::text, 'disposed', count(*)::text, NULL
               FROM work_unit_events WHERE event_type = 'disposed' GROUP BY unit_id HAVING count(*) > 1
             UNION ALL
             SELECT 'no permission', e.unit_id::text, e.event_type::text, e.agent_id, NULL
               FROM work_unit_events e
              WHERE e.event_type <> 'stalled' AND NOT EXISTS (
                    SELECT 1 FROM api_tokens t WHERE t.fleet = e.fleet AND t.name = e.agent_id
                       AND t.permissions && CASE e.event_type
                           WHEN 'registered' THEN ARRAY['units:register']
                           WHEN 'unblocked' THEN ARRAY['questions:answer']
                           WHEN 'disposed' THEN ARRAY['units:claim', 'units:dispose-any']
                           WHEN 'cost_recorded' THEN ARRAY['units:claim', 'units:dispose-any']
                           ELSE ARRAY['units:claim'] END)
             UNION ALL
             SELECT 'disposed by a non-holder', e.unit_id::text, e.agent_id, a.agent_id, NULL
               FROM work_unit_events e JOIN work_unit_attempts a ON a.id = e.attempt_id
              WHERE e.event_type = 'disposed' AND a.agent_id <> e.agent_id
                AND NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.fleet = e.fleet AND t.name = e.agent_id
                                   AND 'units:dispose-any' = ANY (t.permissions))
             UNION ALL
             SELECT 'lease out of bounds', u.id::text, u.state::text, (u.lease_expires_at - now())::text, NULL
               FROM work_units u WHERE u.lease_expires_at > now() + interval '86400 seconds'
             UNION ALL
             SELECT 'lease asked out of bounds', e.unit_id::text, e.event_type::text, e.detail->>'lease_seconds', NULL
               FROM work_unit_events e
              WHERE (e.detail->>'lease_seconds')::int NOT BETWEEN 30 AND 86400
             UNION ALL
             SELECT 'cost out of bounds', e.unit_id::text, NULL, e.cost_delta_cents::text, NULL
               FROM work_unit_events e WHERE e.cost_delta_cents NOT BETWEEN 0 AND 1000000000
             UNION ALL
             SELECT 'not a label', u.id::text, u.external_ref, u.domain, NULL
               FROM work_units u WHERE NOT ledger_is_label(u.external_ref) OR NOT ledger_is_label(u.domain)",
    )
    .await
}
