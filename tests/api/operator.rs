//! The operator's commands run as a person would: the real binary against
//! the test's database. `import` registers a backlog (50,000 lines, a re-run,
//! bad lines, a dry run); `audit` is clean on a worked ledger and names every
//! rule that a superuser's hand (triggers disabled) breaks.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::Output;

use serde_json::json;
use work_ledger::auth::Role;

use work_ledger::embedded_pg::EmbeddedPostgres;

use crate::helpers::{Agent, TestApp, spawn_app, spawn_app_on};

pub(crate) fn work_ledger(app: &TestApp, args: &[&str], stdin: Option<&str>) -> Output {
    work_ledger_on(&app.db_url, args, stdin)
}

pub(crate) fn work_ledger_on(db_url: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run work-ledger");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.unwrap_or_default().as_bytes()).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("work-ledger output")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn import_registers_a_large_backlog_once_and_reports_bad_lines_without_losing_the_others() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("backlog.csv");
    let mut file = String::from("externalRef,domain,workflowId\n");
    for i in 0..50_000 {
        file.push_str(&format!("legacy/{i:05}.cbl,{},\n", ["billing", "payroll", "ledger"][i % 3]));
    }
    std::fs::write(&csv, file).expect("write csv");
    let path = csv.to_str().expect("path");

    let dry = work_ledger(&app, &["import", path, "--fleet", "f", "--dry-run"], None);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    assert_eq!(text(&dry.stdout).trim(), "would insert 50000, already present 0, refused 0");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0, "a dry run writes nothing");

    let first = work_ledger(&app, &["import", path, "--fleet", "f"], None);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout).trim(), "inserted 50000, already present 0, refused 0");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE fleet = 'f'").await, 50_000);
    assert_eq!(
        app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'registered' AND agent_id = 'import'")
            .await,
        50_000
    );
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE domain = 'payroll'").await, 16_667);

    let again = work_ledger(&app, &["import", path, "--fleet", "f"], None);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout).trim(), "inserted 0, already present 50000, refused 0 (nothing new to import)");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events").await, 50_000, "a re-run writes nothing");

    // JSON Lines from stdin with bad lines among good ones.
    let jsonl = [
        r#"{"externalRef": "new/1", "domain": "billing"}"#,
        r#"{"externalRef": ""}"#,
        r#"not json"#,
        r#"{"externalRef": "legacy/00001.cbl"}"#,
        &format!(r#"{{"externalRef": "{}"}}"#, "x".repeat(300)),
        r#"{"externalRef": "new/2", "colour": "blue"}"#,
        r#"{"externalRef": "new/3", "workflowId": "wf-9"}"#,
    ]
    .join("\n");
    let mixed = work_ledger(&app, &["import", "-", "--fleet", "f"], Some(&jsonl));
    assert_eq!(mixed.status.code(), Some(1), "a refused line makes the exit status 1");
    let out = text(&mixed.stdout);
    assert!(out.starts_with("inserted 2, already present 1, refused 4"), "{out}");
    for line in [2, 3, 5, 6] {
        assert!(out.contains(&format!("line {line}: ")), "line {line} is named: {out}");
    }
    assert!(out.contains("externalRef"), "the reason names the field: {out}");
    let imported = app
        .sql_json(
            "SELECT external_ref AS r, workflow_id AS w FROM work_units WHERE external_ref LIKE 'new/%' ORDER BY 1",
        )
        .await;
    assert_eq!(imported, vec![json!({ "r": "new/1", "w": null }), json!({ "r": "new/3", "w": "wf-9" })]);
}

/// A worked ledger: lifecycles, a reclaim, a question, a release, costs, dispositions.
pub(crate) async fn worked_ledger(app: &TestApp) -> Vec<String> {
    let op = Agent::new(app, "f", "op", Role::Operator).await;
    let a = Agent::new(app, "f", "agent-a", Role::Agent).await;
    let b = Agent::new(app, "f", "agent-b", Role::Agent).await;
    let triage = Agent::new(app, "f", "triage", Role::Triage).await;
    let refs = ["done", "dropped", "reclaimed", "blocked", "released", "ready", "verified"];
    let units: Vec<String> =
        app.register(&op.token, &refs).await.iter().map(|u| u["id"].as_str().expect("id").to_owned()).collect();
    async fn bill(agent: &Agent<'_>, unit: &str, key: &str) {
        let q = "mutation($u: UUID!, $k: String!) { recordCost(unitId: $u, cents: 100, idempotencyKey: $k) { id } }";
        agent.run(q, json!({ "u": unit, "k": key })).await.data();
    }
    // done: claim, start, bill, verify, dispose.
    a.claim_unit(&units[0], json!({})).await.data();
    a.transition(&units[0], "IN_PROGRESS", json!({})).await.data();
    bill(&a, &units[0], "a-0").await;
    a.transition(&units[0], "VERIFIED", json!({ "evidence": "https://ci.example/0" })).await.data();
    a.dispose(&units[0], "MIGRATED", json!({})).await.data();
    // dropped by the holder.
    a.claim_unit(&units[1], json!({})).await.data();
    a.transition(&units[1], "IN_PROGRESS", json!({})).await.data();
    a.dispose(&units[1], "DROPPED", json!({ "evidence": "https://ci.example/1" })).await.data();
    // reclaimed after the lease ran out, and billed late by the first agent.
    a.claim_unit(&units[2], json!({})).await.data();
    app.expire_lease(&units[2]).await;
    b.claim_unit(&units[2], json!({})).await.data();
    bill(&a, &units[2], "a-2").await;
    // blocked with a question, answered, blocked again.
    b.transition(&units[2], "IN_PROGRESS", json!({})).await.data();
    b.block(&units[2], "which format?", json!({})).await.data();
    triage.unblock(&units[2], "ISO", json!({})).await.data();
    b.block(&units[2], "and the encoding?", json!({})).await.data();
    // released: back to READY.
    a.claim_unit(&units[4], json!({})).await.data();
    a.release(&units[4], json!({ "reason": "not mine" })).await.data();
    // verified, waiting for its disposition.
    a.claim_unit(&units[6], json!({})).await.data();
    a.transition(&units[6], "IN_PROGRESS", json!({})).await.data();
    a.transition(&units[6], "VERIFIED", json!({ "evidence": "https://ci.example/6" })).await.data();
    units
}

#[tokio::test]
async fn audit_is_clean_on_a_worked_ledger_and_catches_each_rule_broken_by_hand() {
    let app = spawn_app().await;
    let units = worked_ledger(&app).await;
    let clean = work_ledger(&app, &["audit"], None);
    assert!(clean.status.success(), "{}\n{}", text(&clean.stdout), text(&clean.stderr));
    assert_eq!(text(&clean.stdout), "", "no findings");
    assert!(text(&clean.stderr).contains("audit clean: 18 rules checked"), "{}", text(&clean.stderr));

    // A superuser breaks one rule per unit, triggers and foreign keys off
    // (`session_replication_role = replica`); indexes still hold, so the one
    // that enforces a rule is dropped first.
    let (done, dropped, reclaimed, blocked, released, ready, verified) =
        (&units[0], &units[1], &units[2], &units[3], &units[4], &units[5], &units[6]);
    let other = Agent::new(&app, "f", "agent-c", Role::Agent).await;
    other.claim_unit(released, json!({})).await.data();
    // The read models folded as they stand, so that a hand on the log shows.
    app.project().await;
    let corruptions = format!(
        "SET session_replication_role = replica;
         UPDATE work_units SET cost_cents = cost_cents + 1 WHERE id = '{done}';
         UPDATE work_units SET first_claimed_at = first_claimed_at - interval '1 hour' WHERE id = '{done}';
         DELETE FROM work_unit_events WHERE unit_id = '{dropped}' AND event_type = 'disposed';
         INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id, outcome, ended_at)
         SELECT fleet, id, 2, 'agent-z', 'abandoned', now() FROM work_units WHERE id = '{dropped}';
         INSERT INTO cycle_weeks_until VALUES ('f', '2020-01-13') ON CONFLICT (fleet) DO UPDATE SET until = '2020-01-13';
         INSERT INTO cycle_weeks VALUES ('f', '2020-01-06', 1, 60, 60);
         INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
         VALUES ('f', '2020-01-06', 'default', 'done', 'MIGRATED', NULL, 1, 10);
         INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
         VALUES ('f', '2020-01-06', 'agent-z', 'default', NULL, 1, 10);
         UPDATE work_unit_attempts SET outcome = NULL, ended_at = NULL
          WHERE unit_id = '{reclaimed}' AND outcome = 'superseded';
         UPDATE work_unit_attempts SET attempt_no = 5 WHERE unit_id = '{verified}';
         UPDATE work_units SET state = 'blocked' WHERE id = '{blocked}';
         DELETE FROM work_units WHERE id = '{ready}';
         DROP INDEX work_units_one_live_claim_per_agent;
         UPDATE work_units SET claimed_by = 'agent-b' WHERE id = '{released}';
         UPDATE claim_days SET stale = stale + 1 WHERE fleet = 'f';
         INSERT INTO agent_totals VALUES ('f', 'agent-a', 'default', 0, 7);
         INSERT INTO agent_latest VALUES ('f', 'agent-nobody', now(), gen_random_uuid(), gen_random_uuid());"
    );
    app.sql(&corruptions).await;
    // A reader login of the fleet let into another database of the cluster.
    let reader = app.reader_login("f").await;
    let other = format!("wlt_other_{}", uuid::Uuid::new_v4().simple());
    app.create_closed_database(&other).await;
    app.sql(&format!("GRANT CONNECT ON DATABASE {other} TO {}", reader.username())).await;

    let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
    assert_eq!(audit.status.code(), Some(1), "{}", text(&audit.stderr));
    let out = text(&audit.stdout);
    let found: BTreeSet<(String, String)> = out
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            (cols[1].to_owned(), cols[2].to_owned())
        })
        .collect();
    let expect = |unit: &str, rule: &str| {
        assert!(found.contains(&(unit.to_owned(), rule.to_owned())), "{rule} on {unit} not found in:\n{out}");
    };
    expect(done, "cost_rollup");
    expect(done, "first_claims");
    expect(dropped, "terminal_is_disposed");
    expect(reclaimed, "one_open_attempt_per_unit");
    expect(verified, "attempts_dense");
    expect(blocked, "state_matches_event_log");
    expect(ready, "no_orphans");
    expect(released, "one_live_claim_per_agent");
    expect(released, "live_claim_matches_attempt");
    // The read models no longer match the log the hands changed (an event
    // removed) or were written behind the log's back.
    for projection in ["unit_totals", "events", "disposals", "claims", "agent_totals", "agent_latest", "cost_days"] {
        expect("-", projection);
    }
    // And kept the cycle time of a week in which nothing was disposed.
    expect("-", "cycle_weeks");
    // And let a reader login into another database.
    expect("-", "ledger_logins_confined");
    let rules: BTreeSet<&str> = found.iter().map(|(_, rule)| rule.as_str()).collect();
    assert_eq!(rules.len(), 18, "every rule caught its breach: {out}");
    app.sql(&format!("DROP DATABASE {other} WITH (FORCE)")).await;

    // Another fleet's audit sees none of it.
    let elsewhere = work_ledger(&app, &["audit", "--fleet", "g"], None);
    assert!(elsewhere.status.success(), "{}", text(&elsewhere.stdout));
}

/// Per table, a digest of every row (as text, in a fixed order).
async fn checksums(app: &TestApp) -> Vec<serde_json::Value> {
    let tables = ["work_units", "work_unit_attempts", "work_unit_events", "blocking_questions", "api_tokens"];
    let mut sums = Vec::new();
    for table in tables {
        let sql = format!(
            "SELECT '{table}' AS t, count(*) AS n, md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) AS sum FROM {table} r"
        );
        sums.extend(app.sql_json(&sql).await);
    }
    sums
}

#[tokio::test]
async fn the_restore_drill_brings_back_an_identical_ledger_that_keeps_working() {
    let app = spawn_app().await;
    worked_ledger(&app).await;
    let agent = app.token("f", "agent-d", Role::Agent).await;
    let dir = tempfile::Builder::new().prefix("wl-drill-").tempdir().expect("tempdir");
    let file = dir.path().join("ledger.dump");
    let file = file.to_str().expect("path");

    let backup = work_ledger(&app, &["backup", "--out", file], None);
    assert!(backup.status.success(), "{}", text(&backup.stderr));

    // A second cluster, as after losing the first machine.
    let cluster = EmbeddedPostgres::start(&dir.path().join("cluster")).await.expect("second cluster");
    let restored_url = cluster.url().to_owned();
    let restore = work_ledger_on(&restored_url, &["restore", file], None);
    assert!(restore.status.success(), "{}", text(&restore.stderr));
    let again = work_ledger_on(&restored_url, &["restore", file], None);
    assert!(!again.status.success(), "a restore never goes into a database that holds data");
    assert!(text(&again.stderr).contains("not empty"), "{}", text(&again.stderr));

    let restored = spawn_app_on(&restored_url).await;
    assert_eq!(checksums(&restored).await, checksums(&app).await, "every row came back as it was");
    for url in [&app.db_url, &restored_url] {
        let audit = work_ledger_on(url, &["audit"], None);
        assert!(audit.status.success(), "{}{}", text(&audit.stdout), text(&audit.stderr));
    }

    // The restored ledger keeps working, with the tokens it had.
    let agent = Agent { app: &restored, token: agent };
    let unit = agent.claim_next(json!({})).await.str("id");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci.example/after-restore" })).await.data();
    assert_eq!(agent.dispose(&unit, "MIGRATED", json!({})).await.str("state"), "DONE");
    let audit = work_ledger_on(&restored_url, &["audit"], None);
    assert!(audit.status.success(), "{}{}", text(&audit.stdout), text(&audit.stderr));
    drop(restored);
    cluster.stop().await;
}
