//! The SQL views of SPEC §7 against a seeded fixture with exact numbers, the
//! GraphQL fields that read them, the empty fleet, and the Grafana reader role.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

/// Fleet `f`, domains `cobol` and `jcl`:
/// - cobol: r1, r2 READY; c1 CLAIMED; s1 IN_PROGRESS with an expired lease;
///   b1 BLOCKED; v1 VERIFIED (cost 70); d1 DONE/MIGRATED (cost 300, 2 attempts);
///   x1 ABANDONED/DEAD (cost 50)
/// - jcl: j1 READY; j2 ABANDONED/DROPPED by the operator (no attempt)
///
/// x1 was disposed with the reason "no source left", j2 with "out of scope".
pub async fn fixture(app: &TestApp) -> Agent<'_> {
    let op = Agent::new(app, "f", "op", Role::Operator).await;
    let units = json!([
        { "externalRef": "r1", "domain": "cobol" }, { "externalRef": "r2", "domain": "cobol" },
        { "externalRef": "c1", "domain": "cobol" }, { "externalRef": "s1", "domain": "cobol" },
        { "externalRef": "b1", "domain": "cobol" }, { "externalRef": "v1", "domain": "cobol" },
        { "externalRef": "d1", "domain": "cobol" }, { "externalRef": "x1", "domain": "cobol" },
        { "externalRef": "j1", "domain": "jcl" }, { "externalRef": "j2", "domain": "jcl" },
    ]);
    let resp = op
        .run(
            "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id externalRef } }",
            json!({ "u": units }),
        )
        .await;
    let id = |r: &str| {
        resp.data()["registerUnits"].as_array().expect("units").iter().find(|u| u["externalRef"] == r).expect("unit")["id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let agent = |n: &'static str| Agent::new(app, "f", n, Role::Agent);

    let a = agent("a-c1").await;
    a.claim_unit(&id("c1"), json!({})).await.data();

    let a = agent("a-s1").await;
    a.claim_unit(&id("s1"), json!({})).await.data();
    a.transition(&id("s1"), "IN_PROGRESS", json!({})).await.data();
    app.expire_lease(&id("s1")).await;

    let a = agent("a-b1").await;
    a.claim_unit(&id("b1"), json!({})).await.data();
    a.transition(&id("b1"), "IN_PROGRESS", json!({})).await.data();
    a.block(&id("b1"), "?", json!({})).await.data();

    let a = agent("a-v1").await;
    let attempt = a.claim_unit(&id("v1"), json!({})).await.str("currentAttemptId");
    a.transition(&id("v1"), "IN_PROGRESS", json!({})).await.data();
    a.record_cost(&attempt, 70, "v1").await.data();
    a.transition(&id("v1"), "VERIFIED", json!({ "evidence": "https://ci/v1" })).await.data();

    // d1 needs two attempts: the first agent vanishes, the second finishes.
    let a = agent("a-d1-first").await;
    let first = a.claim_unit(&id("d1"), json!({})).await.str("currentAttemptId");
    a.record_cost(&first, 100, "d1-1").await.data();
    app.expire_lease(&id("d1")).await;
    let a = agent("a-d1").await;
    let second = a.claim_unit(&id("d1"), json!({})).await.str("currentAttemptId");
    a.transition(&id("d1"), "IN_PROGRESS", json!({})).await.data();
    a.record_cost(&second, 200, "d1-2").await.data();
    a.transition(&id("d1"), "VERIFIED", json!({ "evidence": "https://ci/d1" })).await.data();
    a.dispose(&id("d1"), "MIGRATED", json!({})).await.data();

    let a = agent("a-x1").await;
    let attempt = a.claim_unit(&id("x1"), json!({})).await.str("currentAttemptId");
    a.transition(&id("x1"), "IN_PROGRESS", json!({})).await.data();
    a.record_cost(&attempt, 50, "x1").await.data();
    a.dispose(&id("x1"), "DEAD", json!({ "evidence": "https://wiki/x1", "reason": "no source left" })).await.data();

    op.dispose(&id("j2"), "DROPPED", json!({ "evidence": "https://wiki/j2", "reason": "out of scope" })).await.data();
    op
}

#[tokio::test]
async fn views_report_exact_numbers_for_a_seeded_fleet() {
    let app = spawn_app().await;
    fixture(&app).await;
    let q = |sql: &'static str| app.sql_json(sql);

    assert_eq!(
        q("SELECT domain, ready, claimed, in_progress, blocked, verified, stalled FROM v_queue_depth WHERE fleet = 'f' ORDER BY domain").await,
        vec![
            json!({ "domain": "cobol", "ready": 2, "claimed": 1, "in_progress": 1, "blocked": 1, "verified": 1, "stalled": 1 }),
            json!({ "domain": "jcl", "ready": 1, "claimed": 0, "in_progress": 0, "blocked": 0, "verified": 0, "stalled": 0 }),
        ]
    );
    assert_eq!(
        q("SELECT external_ref, claimed_by FROM v_stall_list WHERE fleet = 'f'").await,
        vec![json!({ "external_ref": "s1", "claimed_by": "a-s1" })]
    );
    assert_eq!(
        q("SELECT external_ref, attempt_count, cost_cents FROM v_rework WHERE fleet = 'f'").await,
        vec![json!({ "external_ref": "d1", "attempt_count": 2, "cost_cents": 300 })]
    );
    assert_eq!(
        q("SELECT external_ref, cost_cents, attempt_count FROM v_cost_per_unit WHERE fleet = 'f' AND cost_cents > 0 ORDER BY external_ref").await,
        vec![
            json!({ "external_ref": "d1", "cost_cents": 300, "attempt_count": 2 }),
            json!({ "external_ref": "v1", "cost_cents": 70, "attempt_count": 1 }),
            json!({ "external_ref": "x1", "cost_cents": 50, "attempt_count": 1 }),
        ]
    );
    assert_eq!(
        q("SELECT domain, disposition::text, units, cost_cents FROM v_disposition_summary WHERE fleet = 'f' ORDER BY domain, disposition").await,
        vec![
            json!({ "domain": "cobol", "disposition": "DEAD", "units": 1, "cost_cents": 50 }),
            json!({ "domain": "cobol", "disposition": "MIGRATED", "units": 1, "cost_cents": 300 }),
            json!({ "domain": "jcl", "disposition": "DROPPED", "units": 1, "cost_cents": 0 }),
        ]
    );
    assert_eq!(
        q("SELECT external_ref, disposition::text, evidence_url, cost_cents FROM v_disposition_detail WHERE fleet = 'f' ORDER BY external_ref").await,
        vec![
            json!({ "external_ref": "d1", "disposition": "MIGRATED", "evidence_url": "https://ci/d1", "cost_cents": 300 }),
            json!({ "external_ref": "j2", "disposition": "DROPPED", "evidence_url": "https://wiki/j2", "cost_cents": 0 }),
            json!({ "external_ref": "x1", "disposition": "DEAD", "evidence_url": "https://wiki/x1", "cost_cents": 50 }),
        ]
    );
}

const DASHBOARD: &str = "query($d: String) {
    queueDepth(domain: $d) { domain ready claimed inProgress blocked verified stalled }
    stalls { edges { node { externalRef claimedBy stalled } } }
    rework { edges { node { externalRef attemptCount } } }
    costPerUnit(domain: $d, first: 500) { edges { node { costCents attemptCount unit { externalRef } } } }
    dispositionSummary(domain: $d) { disposition count costCents }
    dispositions(disposition: MIGRATED) { edges { node { externalRef evidenceUrls costCents } } }
}";

#[tokio::test]
async fn graphql_view_fields_match_the_fixture_and_an_empty_fleet_reads_zeros() {
    let app = spawn_app().await;
    let op = fixture(&app).await;
    let all = op.run(DASHBOARD, json!({})).await;
    let d = all.data();
    assert_eq!(d["queueDepth"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        d["queueDepth"][0],
        json!({ "domain": "cobol", "ready": 2, "claimed": 1, "inProgress": 1, "blocked": 1, "verified": 1, "stalled": 1 })
    );
    assert_eq!(
        d["stalls"]["edges"],
        json!([{ "node": { "externalRef": "s1", "claimedBy": "a-s1", "stalled": true } }])
    );
    assert_eq!(d["rework"]["edges"], json!([{ "node": { "externalRef": "d1", "attemptCount": 2 } }]));
    assert_eq!(
        d["dispositionSummary"],
        json!([
            { "disposition": "MIGRATED", "count": 1, "costCents": 300 },
            { "disposition": "DROPPED", "count": 1, "costCents": 0 },
            { "disposition": "DEFERRED", "count": 0, "costCents": 0 },
            { "disposition": "DEAD", "count": 1, "costCents": 50 },
        ])
    );
    assert_eq!(
        d["dispositions"]["edges"],
        json!([{ "node": { "externalRef": "d1", "evidenceUrls": ["https://ci/d1"], "costCents": 300 } }])
    );
    let costs: i64 = d["costPerUnit"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"]["costCents"].as_i64().expect("c"))
        .sum();
    assert_eq!(costs, 420);
    assert_eq!(d["costPerUnit"]["edges"].as_array().map(Vec::len), Some(10));

    let jcl = op.run(DASHBOARD, json!({ "d": "jcl" })).await;
    assert_eq!(
        jcl.data()["queueDepth"],
        json!([{ "domain": "jcl", "ready": 1, "claimed": 0, "inProgress": 0, "blocked": 0, "verified": 0, "stalled": 0 }])
    );
    assert_eq!(jcl.data()["dispositionSummary"][1], json!({ "disposition": "DROPPED", "count": 1, "costCents": 0 }));
    assert_eq!(jcl.data()["dispositionSummary"][0], json!({ "disposition": "MIGRATED", "count": 0, "costCents": 0 }));

    // Another fleet sees none of it: empty lists and zeros, never an error.
    let empty = Agent::new(&app, "empty", "op", Role::Reader).await;
    let e = empty.run(DASHBOARD, json!({})).await;
    let e = e.data();
    assert_eq!(e["queueDepth"], json!([]));
    assert_eq!(e["stalls"]["edges"], json!([]));
    assert_eq!(e["rework"]["edges"], json!([]));
    assert_eq!(e["costPerUnit"]["edges"], json!([]));
    assert_eq!(e["dispositions"]["edges"], json!([]));
    assert!(
        e["dispositionSummary"].as_array().expect("summary").iter().all(|r| r["count"] == 0 && r["costCents"] == 0)
    );
    assert_eq!(e["dispositionSummary"].as_array().map(Vec::len), Some(4));
}

#[tokio::test]
async fn the_grafana_reader_role_sees_its_fleet_and_nothing_else() {
    let app = spawn_app().await;
    fixture(&app).await;
    let other = Agent::new(&app, "other", "op", Role::Operator).await;
    app.register(&other.token, &["secret-unit"]).await;

    let url = app.reader_login("f").await;
    let reader = work_ledger::db::connect(url.as_str(), 1).await.expect("reader connects");
    let q = |sql: String| {
        let reader = reader.clone();
        async move {
            use sea_orm::ConnectionTrait;
            reader
                .query_all_raw(sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Postgres,
                    format!("SELECT to_jsonb(q) AS j FROM ({sql}) q"),
                ))
                .await
                .map(|rows| rows.iter().map(|r| r.try_get::<Value>("", "j").expect("json")).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        }
    };
    let setting = q("SELECT current_setting('work_ledger.fleet') AS fleet".into()).await.expect("setting");
    assert_eq!(setting, vec![json!({ "fleet": "f" })], "the fleet is the role's default setting");
    let depth = q("SELECT sum(ready)::int AS ready FROM v_queue_depth".into()).await.expect("queue depth");
    assert_eq!(depth, vec![json!({ "ready": 3 })]);
    let fleets = q("SELECT DISTINCT fleet FROM work_units".into()).await.expect("units");
    assert_eq!(fleets, vec![json!({ "fleet": "f" })]);
    assert_eq!(
        q("SELECT count(*)::int AS n FROM v_disposition_detail".into()).await.expect("detail"),
        vec![json!({ "n": 3 })]
    );

    // Changing the setting does not open another fleet: the policy pins the role.
    use sea_orm::ConnectionTrait;
    reader.execute_unprepared("SET work_ledger.fleet = 'other'").await.expect("set");
    assert_eq!(
        q("SELECT count(*)::int AS n FROM work_units WHERE fleet = 'other'".into()).await.expect("units"),
        vec![json!({ "n": 0 })]
    );
    assert_eq!(
        q("SELECT count(*)::int AS n FROM v_cost_per_unit".into()).await.expect("cost"),
        vec![json!({ "n": 10 })]
    );
    assert_eq!(
        q("SELECT sum(units)::int AS n, sum(cost_cents)::int AS cost FROM v_cost_groups".into()).await.expect("groups"),
        vec![json!({ "n": 10, "cost": 420 })]
    );
    assert_eq!(
        q("SELECT sum(units)::int AS n FROM v_throughput_weekly".into()).await.expect("throughput"),
        vec![json!({ "n": 3 })]
    );

    // Read-only, and no access to credentials.
    for sql in [
        "UPDATE work_units SET domain = 'x'",
        "INSERT INTO work_units (fleet, external_ref) VALUES ('f', 'n')",
        "DELETE FROM blocking_questions",
    ] {
        let err = reader.execute_unprepared(sql).await.expect_err(sql).to_string();
        assert!(err.contains("permission denied"), "{err}");
    }
    let err = q("SELECT * FROM api_tokens".into()).await.expect_err("tokens");
    assert!(err.contains("permission denied"), "{err}");
    reader.close().await.expect("close");
}

/// Row-level security evaluates a fleet lookup in a policy for every row a
/// scan reads unless the lookup is a sub-select (run once per statement): a
/// reader login's panel over 7,300 day totals spent 15 of its 17 ms calling
/// `reader_fleet()` (issue 27). Counted here by PostgreSQL's own function
/// statistics, on scans forced to read every row.
#[tokio::test]
async fn a_reader_login_looks_up_its_fleet_once_per_statement_not_per_row() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let app = spawn_app().await;
    fixture(&app).await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'f', 'bulk-' || g FROM generate_series(1, 300) g")
        .await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'g', 'bulk-' || g FROM generate_series(1, 300) g")
        .await;
    // The totals' own rows are read below, not a read that adds the tail.
    app.project().await;
    let url = app.reader_login("f").await;
    app.sql(&format!("ALTER ROLE {} SET track_functions = 'all'", url.username())).await;
    let reader = work_ledger::db::connect(url.as_str(), 1).await.expect("reader connects");

    let tx = reader.begin().await.expect("begin");
    tx.execute_unprepared(
        "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off",
    )
    .await
    .expect("scans");
    let calls = "SELECT coalesce((SELECT calls FROM pg_stat_xact_user_functions WHERE funcname = 'reader_fleet'), 0)";
    for (table, rows) in [("work_units", 310), ("unit_totals", 1), ("work_unit_events", 1)] {
        let before = number(&tx, calls).await;
        let seen = number(&tx, &format!("SELECT count(*) FROM {table}")).await;
        let after = number(&tx, calls).await;
        assert!(seen >= rows, "{table}: the reader sees its fleet's {seen} rows");
        assert!(
            after - before <= 1,
            "{table}: reader_fleet() ran {} times for one statement over {seen} rows",
            after - before
        );
    }
    // Still only its own fleet.
    assert_eq!(number(&tx, "SELECT count(*) FROM work_units WHERE fleet <> 'f'").await, 0);
    tx.rollback().await.expect("rollback");
    reader.close().await.expect("close");
}

/// The first column of the one row `sql` returns, as a number.
async fn number(db: &impl sea_orm::ConnectionTrait, sql: &str) -> i64 {
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            format!("SELECT ({sql})::bigint AS n"),
        ))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    row.expect("a row").try_get::<i64>("", "n").expect("n")
}

/// Every policy's fleet lookup is a sub-select or an inline expression, never
/// a function called per row; a new table's policy written the old way fails here.
#[tokio::test]
async fn no_row_level_security_policy_calls_a_fleet_function_per_row() {
    let app = spawn_app().await;
    // A sub-select prints as `( SELECT reader_fleet() AS reader_fleet)`.
    let per_row = app
        .sql_json(
            r"SELECT polrelid::regclass::text || '.' || polname AS policy FROM pg_policy
               WHERE regexp_replace(concat_ws(' ', pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)),
                                    '\(\s*SELECT (current_fleet|reader_fleet)\(\) AS \w+\)', '', 'g')
                     ~ '(current_fleet|reader_fleet)\('
               ORDER BY 1",
        )
        .await;
    assert_eq!(per_row, Vec::<Value>::new(), "policies that call a fleet function on every row");
}
