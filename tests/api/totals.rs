//! The totals (issue 27, 55): the counters behind queueDepth, costSummary,
//! costTotal, dispositionSummary and the dashboard's stats, projections of
//! the event log folded after commit by the projector (projections.sql) as
//! delta rows, compacted by it too. Read with their tails, they must equal
//! the units at every moment, under concurrent writers, folds and
//! compactions, and the audit must notice when they do not.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::operator::{text, work_ledger, worked_ledger};

/// The totals per group as the readers see them, and the same groups counted
/// from the units themselves; both sorted.
async fn totals_and_units(app: &TestApp) -> (Vec<Value>, Vec<Value>) {
    let totals = app
        .sql_json(
            "SELECT fleet, domain, state, disposition, reworked, units, cost_cents FROM v_unit_totals
              ORDER BY 1, 2, 3, 4, 5",
        )
        .await;
    let units = app
        .sql_json(
            "SELECT fleet, domain, state, disposition, attempt_count > 1 AS reworked, count(*) AS units,
                    sum(cost_cents)::bigint AS cost_cents
               FROM work_units GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5",
        )
        .await;
    (totals, units)
}

/// Events per fleet and type as the totals have them, and counted from the rows.
async fn event_totals_and_events(app: &TestApp) -> (Vec<Value>, Vec<Value>) {
    let totals = app
        .sql_json(
            "SELECT fleet, event_type, sum(events)::bigint AS n
               FROM (SELECT fleet, event_type, events FROM event_totals
                     UNION ALL SELECT fleet, event_type, events FROM event_totals_tail(NULL)) t
              GROUP BY 1, 2 HAVING sum(events) <> 0 ORDER BY 1, 2",
        )
        .await;
    let events =
        app.sql_json("SELECT fleet, event_type, count(*) AS n FROM work_unit_events GROUP BY 1, 2 ORDER BY 1, 2").await;
    (totals, events)
}

#[tokio::test]
async fn the_totals_equal_the_units_through_concurrent_writes_and_folds() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..24).map(|i| format!("t{i:02}")).collect();
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    app.register(&op.token, &refs).await;
    let agents: Vec<Agent> = {
        let mut v = Vec::new();
        for i in 0..6 {
            v.push(Agent::new(&app, "f", &format!("agent-{i}"), Role::Agent).await);
        }
        v
    };
    // Six agents work the queue while the projector folds and compacts, again and again.
    let stop = tokio_util::sync::CancellationToken::new();
    let folding = {
        let (live, stop) = (app.live.clone(), stop.clone());
        tokio::spawn(async move {
            let mut folds = 0u32;
            while !stop.is_cancelled() {
                live.project_now().await.expect("a projector pass");
                folds += 1;
            }
            folds
        })
    };
    let work = agents.iter().enumerate().map(|(i, agent)| async move {
        for round in 0..4 {
            let claimed = agent.claim_next(json!({})).await;
            let Some(unit) = claimed.unit()["id"].as_str().map(str::to_owned) else { break };
            if (i + round) % 5 == 4 {
                // Claimed and handed back unstarted: the anti-metric.
                agent.release(&unit, json!({ "reason": "not for me" })).await.data();
                continue;
            }
            agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
            let cost =
                "mutation($u: UUID!, $k: String!) { recordCost(unitId: $u, cents: 125, idempotencyKey: $k) { id } }";
            agent.run(cost, json!({ "u": unit, "k": format!("c-{i}-{round}") })).await.data();
            match (i + round) % 3 {
                // Released: back to READY, reworked at its next claim.
                0 => {
                    agent.release(&unit, json!({ "reason": "handing over" })).await.data();
                }
                1 => {
                    agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci.example/v" })).await.data();
                    agent.dispose(&unit, "MIGRATED", json!({ "evidence": "https://ci.example/v" })).await.data();
                }
                _ => {
                    agent.dispose(&unit, "DROPPED", json!({ "evidence": "https://wiki.example/d" })).await.data();
                }
            }
        }
    });
    futures::future::join_all(work).await;
    stop.cancel();
    let folds = folding.await.expect("the folding task");
    assert!(folds >= 2, "the projector folded while the agents wrote ({folds} passes)");

    // Reworked units exist (a released unit claimed again), so every key of the totals was exercised.
    let states = app.sql_json("SELECT external_ref, state, attempt_count FROM work_units ORDER BY 1").await;
    assert!(
        app.sql_i64("SELECT count(*) FROM work_units WHERE attempt_count > 1").await > 0,
        "some rework: {states:?}"
    );
    let (totals, units) = totals_and_units(&app).await;
    assert_eq!(totals, units, "the totals equal the units before the last fold");
    let (event_totals, events) = event_totals_and_events(&app).await;
    assert_eq!(event_totals, events, "the event totals equal the events before the last fold");
    app.project().await;
    let (folded, units) = totals_and_units(&app).await;
    assert_eq!(folded, units, "and after it");
    let rows = app.sql_i64("SELECT count(*) FROM unit_totals").await;
    assert_eq!(rows, units.len() as i64, "a fold leaves one row per group: {folded:?}");
    let (folded, events) = event_totals_and_events(&app).await;
    assert_eq!(folded, events, "the event totals after it");
    let groups =
        app.sql_i64("SELECT count(*) FROM (SELECT DISTINCT fleet, event_type, agent_id FROM work_unit_events) g").await;
    assert_eq!(app.sql_i64("SELECT count(*) FROM event_totals").await, groups, "one row per type and agent");

    // totalCount of the events, all and by type, is those totals.
    let counts = op
        .run(
            "{ all: events(first: 1) { totalCount } claims: events(first: 1, filter: { types: [CLAIMED, RELEASED] }) { totalCount } }",
            json!({}),
        )
        .await;
    let all = app.sql_i64("SELECT count(*) FROM work_unit_events WHERE fleet = 'f'").await;
    let claims = app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type IN ('claimed', 'released')").await;
    assert_eq!(counts.data()["all"]["totalCount"], json!(all));
    assert_eq!(counts.data()["claims"]["totalCount"], json!(claims));

    // What the operator reads is those totals.
    let read = op
        .run(
            "{ costTotal { units costCents } dispositionSummary { disposition count costCents }
               queueDepth { domain ready claimed inProgress blocked verified stalled } }",
            json!({}),
        )
        .await;
    let data = read.data();
    assert_eq!(data["costTotal"]["units"], json!(24));
    let cost = app.sql_i64("SELECT sum(cost_cents)::bigint FROM work_units").await;
    assert_eq!(data["costTotal"]["costCents"], json!(cost));
    let migrated = app.sql_i64("SELECT count(*) FROM work_units WHERE disposition = 'MIGRATED'").await;
    let row = data["dispositionSummary"].as_array().and_then(|r| r.iter().find(|d| d["disposition"] == "MIGRATED"));
    assert_eq!(row.map(|r| r["count"].clone()), Some(json!(migrated)), "{data}");
    let ready = app.sql_i64("SELECT count(*) FROM work_units WHERE state = 'ready'").await;
    let depth: i64 =
        data["queueDepth"].as_array().into_iter().flatten().map(|d| d["ready"].as_i64().unwrap_or(0)).sum();
    assert_eq!(depth, ready, "{data}");

    // The reads over time are the day totals: the same as
    // the rows say, for whole days (totals) and for a day the range cuts (rows).
    let never = app.sql_i64("SELECT count(*) FROM v_claimed_never_transitioned").await;
    assert!(never > 0, "some claims were never started");
    // By week, the whole weeks are the week totals.
    for bucket in ["DAY", "WEEK"] {
        for from in [None, Some((chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339())] {
            let query = format!(
                "query($from: DateTime) {{ throughput(bucket: {bucket}, from: $from) {{ start disposition count costCents distinctAgents }} }}"
            );
            let read = op.run(&query, json!({ "from": from })).await;
            let rows = throughput_by_rows(&app, bucket, from.as_deref()).await;
            assert!(!rows.is_empty());
            assert_eq!(read.data()["throughput"], json!(rows), "throughput by {bucket} from {from:?}");
        }
    }
    let days = op.run("{ claimingAgents { agents claims } }", json!({})).await;
    let claims =
        app.sql_json("SELECT count(DISTINCT agent_id) AS agents, count(*) AS claims FROM work_unit_attempts").await;
    assert_eq!(days.data()["claimingAgents"], json!(claims));
    let weeks = op.run("{ weeklyMetrics { claims neverStarted disposed reworked verifiedUnits } }", json!({})).await;
    let expected = app
        .sql_json(
            "SELECT (SELECT count(*) FROM work_unit_attempts) AS claims,
                    (SELECT count(*) FROM v_claimed_never_transitioned) AS \"neverStarted\",
                    count(*) AS disposed, count(*) FILTER (WHERE attempt_count > 1) AS reworked,
                    count(*) FILTER (WHERE cost_cents > 0 AND cardinality(evidence_urls) > 0) AS \"verifiedUnits\"
               FROM work_units WHERE disposition IS NOT NULL",
        )
        .await;
    assert_eq!(weeks.data()["weeklyMetrics"], json!(expected));
    let by_agent = op.run("{ costSummary(groupBy: AGENT) { key units costCents } }", json!({})).await;
    let expected = app
        .sql_json(
            "SELECT agent_id AS key, count(DISTINCT unit_id) AS units, sum(cost_cents)::bigint AS \"costCents\"
               FROM work_unit_attempts GROUP BY 1 ORDER BY 1",
        )
        .await;
    assert_eq!(by_agent.data()["costSummary"], json!(expected), "costSummary by agent is the agent totals");
    let agent = "agent-0";
    let of_agent = op
        .run("query($a: String!) { events(first: 1, filter: { agentId: $a }) { totalCount } }", json!({ "a": agent }))
        .await;
    let n = app.sql_i64(&format!("SELECT count(*) FROM work_unit_events WHERE agent_id = '{agent}'")).await;
    assert!(n > 0);
    assert_eq!(of_agent.data()["events"]["totalCount"], json!(n));

    let audit = work_ledger(&app, &["audit"], None);
    assert!(audit.status.success(), "{}\n{}", text(&audit.stdout), text(&audit.stderr));
}

/// `throughput(bucket, from)` as it was first computed, from the rows
/// alone: the oracle of the day and week totals.
async fn throughput_by_rows(app: &TestApp, bucket: &str, from: Option<&str>) -> Vec<Value> {
    let from = from.map_or("NULL".to_owned(), |f| format!("'{f}'::timestamptz"));
    let bucket = bucket.to_lowercase();
    app.sql_json(&format!(
        "SELECT to_char(t.start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"') AS start,
                t.disposition::text AS disposition,
                t.units AS count, t.cost_cents AS \"costCents\", coalesce(g.agents, 0) AS \"distinctAgents\"
           FROM (SELECT date_trunc('{bucket}', u.disposed_at, 'UTC') AS start, u.disposition,
                        count(*) AS units, sum(u.cost_cents)::bigint AS cost_cents
                   FROM work_units u
                  WHERE u.disposition IS NOT NULL AND u.disposed_at >= coalesce({from}, '-infinity'::timestamptz)
                  GROUP BY 1, 2) t
           LEFT JOIN (SELECT date_trunc('{bucket}', u.disposed_at, 'UTC') AS start, u.disposition,
                             count(DISTINCT a.agent_id) AS agents
                        FROM work_units u JOIN work_unit_attempts a ON a.unit_id = u.id
                       WHERE u.disposition IS NOT NULL AND u.disposed_at >= coalesce({from}, '-infinity'::timestamptz)
                       GROUP BY 1, 2) g ON g.start = t.start AND g.disposition = t.disposition
          ORDER BY t.start, t.disposition"
    ))
    .await
}

#[tokio::test]
async fn a_corrupted_total_is_found_by_the_audit_and_a_rebuild_repairs_it() {
    let app = spawn_app().await;
    worked_ledger(&app).await;
    let clean = work_ledger(&app, &["audit"], None);
    assert!(clean.status.success(), "{}\n{}", text(&clean.stdout), text(&clean.stderr));

    // A hand on the summary itself (the owner's; no role of the service can).
    app.sql(
        "INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
         VALUES ('f', 'default', 'done', 'MIGRATED', false, 0, 999)",
    )
    .await;
    let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
    assert_eq!(audit.status.code(), Some(1), "{}", text(&audit.stderr));
    let out = text(&audit.stdout);
    let line = out.lines().find(|l| l.contains("\tunit_totals\t")).unwrap_or_else(|| panic!("no finding: {out}"));
    assert!(line.starts_with("f\t-\tunit_totals\t"), "{line}");
    assert!(line.contains("cents in (default, done, MIGRATED, f)"), "{line}");
    assert_eq!(out.lines().count(), 1, "only the total is wrong: {out}");

    // Folding keeps the error (it sums what is there); a rebuild refolds the log.
    app.project().await;
    assert_eq!(work_ledger(&app, &["audit"], None).status.code(), Some(1), "a fold does not hide it");
    app.rebuild_projections().await;
    let repaired = work_ledger(&app, &["audit"], None);
    assert!(repaired.status.success(), "{}", text(&repaired.stdout));

    // The same for the event totals.
    app.sql("INSERT INTO event_totals (fleet, event_type, events) VALUES ('f', 'heartbeat', 3)").await;
    let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
    assert_eq!(audit.status.code(), Some(1), "{}", text(&audit.stderr));
    let out = text(&audit.stdout);
    assert!(out.lines().all(|l| l.starts_with("f\t-\tevents\t")) && out.contains("heartbeat"), "{out}");
    app.rebuild_projections().await;
    assert!(work_ledger(&app, &["audit"], None).status.success(), "a rebuild refolds the events too");

    // The day totals, one hand each: each is found by its projection's
    // rule, survives a fold, and a rebuild refolds it.
    let hands = [
        (
            "disposals",
            "INSERT INTO disposal_days VALUES ('f', current_date, 'default', 'MIGRATED', 1, 0, 0, 0, 0)",
            "units",
        ),
        // The weeks under the same rule: a week's reworked units.
        (
            "disposals",
            "INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                         verified_cost_cents)
             VALUES ('f', date_trunc('week', now())::date, 'default', 'MIGRATED', 0, 0, 1, 0, 0)",
            "in disposal_weeks",
        ),
        // The days of every domain together, under the same rule: a day's cost.
        (
            "disposals",
            "INSERT INTO disposal_fleet_days (fleet, day, disposition, units, cost_cents, reworked, verified_units,
                                              verified_cost_cents)
             VALUES ('f', current_date, 'MIGRATED', 0, 5, 0, 0, 0)",
            "in disposal_fleet_days",
        ),
        (
            "disposals",
            "INSERT INTO disposal_agent_counts VALUES ('f', true, date_trunc('week', now())::date, '', 'DROPPED', 2)",
            "agents",
        ),
        ("claims", "UPDATE claim_days SET stale = stale + 1 WHERE fleet = 'f'", "stale"),
        ("agent_totals", "INSERT INTO agent_totals VALUES ('f', 'agent-a', 'default', 0, 7)", "agent-a"),
        // Each name's latest attempt: another attempt kept, and a name without attempts.
        (
            "agent_latest",
            "UPDATE agent_latest SET attempt_id = gen_random_uuid() WHERE fleet = 'f' AND agent_id = 'agent-a'",
            "agent-a attempt",
        ),
        (
            "agent_latest",
            "INSERT INTO agent_latest VALUES ('f', 'agent-nobody', now(), gen_random_uuid(), gen_random_uuid())",
            "no attempt",
        ),
        // The cost days: a day's cost under a group, and an agent's units.
        (
            "cost_days",
            "INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
             VALUES ('f', current_date - 3, 'default', 'abandoned', 'DROPPED', NULL, 0, 40)",
            "40 cents",
        ),
        (
            "cost_days",
            "INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
             VALUES ('f', current_date, 'agent-q', 'default', current_date - 1, 1, 0)",
            "for agent-q",
        ),
        ("claims", "DELETE FROM never_started WHERE fleet = 'f'", "not in never_started"),
        (
            "cycle_weeks",
            "UPDATE cycle_weeks_until SET until = '2020-01-13';
             INSERT INTO cycle_weeks VALUES ('f', '2020-01-06', 1, 60, 60)",
            "no disposal",
        ),
    ];
    for (rule, hand, says) in hands {
        app.project().await;
        app.sql(hand).await;
        app.project().await;
        let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
        assert_eq!(audit.status.code(), Some(1), "{hand}: {}", text(&audit.stderr));
        let out = text(&audit.stdout);
        assert!(
            out.lines().all(|l| l.contains(&format!("\t{rule}\t"))) && out.contains(says),
            "{hand} is found by {rule} alone: {out}"
        );
        app.rebuild_projections().await;
        let repaired = work_ledger(&app, &["audit"], None);
        assert!(repaired.status.success(), "{hand}: {}", text(&repaired.stdout));
    }
}

/// Each name's latest attempt is the latest by start, then id, whatever one
/// transaction writes: several claims of one name, two of them started at
/// the same instant; a later claim of an older attempt moves nothing. The
/// roster reads it exact before the projector folds it, and the audit's
/// rule agrees with what was kept after.
#[tokio::test]
async fn each_names_latest_attempt_is_kept_whatever_a_transaction_claims() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["u1", "u2", "u3", "u4", "u5"]).await;
    let agent = Agent::new(&app, "f", "agent-a", Role::Agent).await;
    let first = agent.claim_next(json!({})).await.str("currentAttemptId");
    let kept = "SELECT attempt_id::text AS id FROM (SELECT * FROM agent_latest UNION ALL SELECT * FROM agent_latest_tail(NULL)) k
                 WHERE fleet = 'f' AND agent_id = 'agent-a' ORDER BY started_at DESC, attempt_id DESC LIMIT 1";
    assert_eq!(app.sql_id(kept).await, first, "the claim's attempt");

    // A hand (the owner's) writes three claims of agent-a in one
    // transaction, each with its event: two an hour from now at one
    // instant, one a day ago.
    let claims = |which: &str, at: &str| {
        format!(
            "WITH a AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id, started_at)
                        SELECT u.fleet, u.id, 1, 'agent-a', t.at
                          FROM (SELECT fleet, id, row_number() OVER (ORDER BY external_ref) AS i
                                  FROM work_units WHERE fleet = 'f' AND attempt_count = 0 AND external_ref {which}) u
                          JOIN ({at}) t (i, at) ON t.i = u.i
                        RETURNING id, fleet, unit_id, started_at)
             INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, created_at)
             SELECT fleet, unit_id, id, 'claimed', 'ready', 'claimed', 'agent-a', started_at FROM a"
        )
    };
    app.sql(&claims(
        "<> 'u5'",
        "VALUES (1, now() + interval '1 hour'), (2, now() + interval '1 hour'), (3, now() - interval '1 day')",
    ))
    .await;
    let latest = "SELECT id::text AS id FROM work_unit_attempts WHERE fleet = 'f' AND agent_id = 'agent-a'
                  ORDER BY started_at DESC, id DESC LIMIT 1";
    let expected = app.sql_id(latest).await;
    let tied = "SELECT count(*) FROM work_unit_attempts WHERE fleet = 'f' AND agent_id = 'agent-a'
                AND started_at = (SELECT max(started_at) FROM work_unit_attempts WHERE agent_id = 'agent-a')";
    assert_eq!(app.sql_i64(tied).await, 2, "two attempts started at the latest instant");
    assert_ne!(expected, first);
    assert_eq!(app.sql_id(kept).await, expected, "read with the tail: the greater id of the two latest");
    app.project().await;
    let folded = "SELECT attempt_id::text AS id FROM agent_latest WHERE fleet = 'f' AND agent_id = 'agent-a'";
    assert_eq!(app.sql_id(folded).await, expected, "folded: the same");

    app.sql(&claims("= 'u5'", "VALUES (1, now() - interval '2 days')")).await;
    assert_eq!(app.sql_id(kept).await, expected, "an older attempt moves nothing");
    app.project().await;
    assert_eq!(app.sql_id(folded).await, expected, "nor when folded");

    let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
    let out = text(&audit.stdout);
    assert!(!out.contains("\tagent_latest\t"), "the audit agrees with what was kept: {out}");
    assert!(out.contains("\tattempts_dense\t"), "the hand's attempts break other rules, which the audit ran: {out}");
}

/// The day totals' rows as stored, each with the transaction that wrote it.
async fn stored_disposal_days(app: &TestApp) -> Vec<Value> {
    app.sql_json(
        "SELECT fleet, day::text AS day, domain, disposition::text AS disposition, units, xmin::text AS written_by
           FROM disposal_days ORDER BY 1, 2, 3, 4, 6",
    )
    .await
}

/// `n` units of fleet `f` (`d00`, `d01`, ...), registered by its operator
/// (returned) in the domains `domains` gives them by number, and then
/// disposed by the owner's hand, as an import writes history: abandoned
/// with evidence and a `disposed` event, with `set` (SQL assignments over
/// the unit's `external_ref`) choosing their disposition, day and anything
/// else. Needs `allow_history_rewrites`.
async fn disposed_by_hand<'a>(app: &'a TestApp, n: usize, domains: fn(usize) -> String, set: &str) -> Agent<'a> {
    let op = Agent::new(app, "f", "op", Role::Operator).await;
    let units: Vec<Value> =
        (0..n).map(|i| json!({ "externalRef": format!("d{i:02}"), "domain": domains(i) })).collect();
    op.run("mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }", json!({ "u": units }))
        .await
        .data();
    app.sql(&format!(
        "UPDATE work_units SET state = 'abandoned', {set},
                evidence_urls = ARRAY['https://wiki.example/' || external_ref]
          WHERE fleet = 'f';
         INSERT INTO work_unit_events (fleet, unit_id, event_type, from_state, to_state, agent_id, created_at)
         SELECT fleet, id, 'disposed', 'ready', 'abandoned', 'op', disposed_at FROM work_units WHERE fleet = 'f'"
    ))
    .await;
    op
}

#[tokio::test]
async fn a_fold_rewrites_only_the_totals_that_moved() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    // Forty disposals on forty days: forty groups of the day totals.
    let op = disposed_by_hand(
        &app,
        40,
        |_| "default".to_owned(),
        "disposition = 'DROPPED',
         disposed_at = '2026-01-01T12:00:00Z'::timestamptz + (substr(external_ref, 2)::int * interval '1 day')",
    )
    .await;
    app.project().await;
    let before = stored_disposal_days(&app).await;
    assert_eq!(before.len(), 40, "one folded row per day: {before:#?}");

    // One new unit moves one group of the unit totals and one of the event
    // totals; the day totals did not move, so no fold may touch them.
    app.register(&op.token, &["late"]).await;
    app.live.fold_now().await.expect("a fold");
    let folded = app.sql_i64("SELECT ledger_compact_totals()").await;
    assert!(folded <= 6, "a fold after one registration took {folded} rows: it rewrote totals that did not move");
    assert_eq!(stored_disposal_days(&app).await, before, "no day total was rewritten");
    let (totals, units) = totals_and_units(&app).await;
    assert_eq!(totals, units, "the totals still equal the units");
    let (totals, events) = event_totals_and_events(&app).await;
    assert_eq!(totals, events, "the event totals still equal the events");
    let audit = work_ledger(&app, &["audit"], None);
    assert!(audit.status.success(), "{}\n{}", text(&audit.stdout), text(&audit.stderr));

    // A rebuild, compacted, leaves every total folded: the next compaction has nothing to take.
    app.rebuild_projections().await;
    app.sql("SELECT ledger_compact()").await;
    assert_eq!(app.sql_i64("SELECT count(*) FROM disposal_days WHERE NOT folded").await, 0);
    assert_eq!(app.sql_i64("SELECT count(*) FROM disposal_weeks WHERE NOT folded").await, 0);
    assert_eq!(app.sql_i64("SELECT count(*) FROM disposal_fleet_days WHERE NOT folded").await, 0);
    assert_eq!(app.sql_i64("SELECT ledger_compact_totals()").await, 0, "a compaction after a rebuild rewrote totals");
    assert_eq!(app.sql_i64("SELECT ledger_compact_disposal_weeks()").await, 0, "nor the weeks");
    assert_eq!(app.sql_i64("SELECT ledger_compact_disposal_fleet_days()").await, 0, "nor the fleet's days");
    let (totals, units) = totals_and_units(&app).await;
    assert_eq!(totals, units, "the recount's totals equal the units");
}

/// A fleet-wide `throughput` by day reads its whole days from the fleet's
/// days of every domain together, not from the days of each
/// domain, and answers as the rows say; by one domain it reads that
/// domain's days. The disposals are made across domains and days by hand,
/// as an import would write them.
#[tokio::test]
async fn a_fleet_wide_throughput_by_day_reads_the_days_of_every_domain_together() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    // Three days of four domains (two of them dropped, two dead): 24 units
    // in 12 groups of the day totals, 6 of the fleet's days.
    let op = disposed_by_hand(
        &app,
        24,
        |i| format!("d{}", i % 4),
        "disposition = CASE WHEN substr(external_ref, 2)::int % 2 = 0 THEN 'DROPPED' ELSE 'DEAD' END::disposition,
         disposed_at = '2026-01-01T12:00:00Z'::timestamptz + (substr(external_ref, 2)::int / 8 * interval '1 day')",
    )
    .await;
    app.live.fold_now().await.expect("a fold");
    let replaced = app.sql_i64("SELECT count(*) FROM disposal_fleet_days WHERE fleet = 'f'").await;
    app.sql("SELECT ledger_compact()").await;
    assert_eq!(app.sql_i64("SELECT count(*) FROM disposal_days WHERE fleet = 'f'").await, 12);
    assert_eq!(app.sql_i64("SELECT count(*) FROM disposal_fleet_days WHERE fleet = 'f'").await, 6);

    let fleet_wide = "SELECT * FROM throughput('day', NULL, NULL, NULL)";
    assert_eq!(app.app_role_rows_read("f", "disposal_days", fleet_wide).await, 0, "no day of one domain is read");
    // Its six days; index entries of the rows the fold replaced count too
    // while another session's snapshot keeps them (a parallel test's).
    let fleet_days = app.app_role_rows_read("f", "disposal_fleet_days", fleet_wide).await;
    assert!(
        (6..=6 + replaced).contains(&fleet_days),
        "the fleet's six days are read (and at most the {replaced} rows the fold replaced): {fleet_days}"
    );
    let one_domain = "SELECT * FROM throughput('day', NULL, NULL, 'd1')";
    assert_eq!(app.app_role_rows_read("f", "disposal_fleet_days", one_domain).await, 0);
    assert!(app.app_role_rows_read("f", "disposal_days", one_domain).await > 0, "one domain reads its days");

    let read =
        op.run("{ throughput(bucket: DAY) { start disposition count costCents distinctAgents } }", json!({})).await;
    assert_eq!(read.data()["throughput"], json!(throughput_by_rows(&app, "DAY", None).await));
    let audit = work_ledger(&app, &["audit"], None);
    assert!(audit.status.success(), "{}\n{}", text(&audit.stdout), text(&audit.stderr));
}

#[tokio::test]
async fn the_totals_are_read_only_and_per_fleet_for_the_service_and_readers() {
    let app = spawn_app().await;
    let op_f = Agent::new(&app, "f", "op", Role::Operator).await;
    let op_g = Agent::new(&app, "g", "op", Role::Operator).await;
    app.register(&op_f.token, &["a", "b"]).await;
    app.register(&op_g.token, &["c"]).await;
    let insert = "INSERT INTO unit_totals VALUES ('f', 'default', 'ready', NULL, false, 100, 0)";
    let refused = app.app_role_exec(Some("f"), insert).await.expect_err("the application role cannot write totals");
    assert!(refused.contains("permission denied"), "{refused}");
    let fold = app.app_role_query(Some("f"), "SELECT ledger_project('unit_totals', 100) AS folded").await;
    assert_eq!(fold.len(), 1, "the application role may fold (the projector does)");
    let folds = app.app_role_query(Some("f"), "SELECT ledger_compact() AS folded").await;
    assert_eq!(folds.len(), 1, "and compact, as the projector does");
    let seen =
        app.app_role_query(Some("f"), "SELECT fleet, sum(units)::int AS units FROM v_unit_totals GROUP BY 1").await;
    assert_eq!(seen, vec![json!({ "fleet": "f", "units": 2 })], "fleet f sees its own totals only");
    let events = "INSERT INTO event_totals VALUES ('f', 'claimed', 100)";
    let refused = app.app_role_exec(Some("f"), events).await.expect_err("nor event totals");
    assert!(refused.contains("permission denied"), "{refused}");
    // The day totals and their sets: written by the projector alone, and
    // each fleet sees its own.
    for table in [
        "disposal_days",
        "disposal_weeks",
        "disposal_fleet_days",
        "disposal_agents",
        "disposal_agent_counts",
        "claim_days",
        "claim_agents",
        "never_started",
        "agent_totals",
        "agent_latest",
        "cycle_weeks",
        "cycle_weeks_until",
        "cost_days",
        "agent_cost_days",
        "event_days",
    ] {
        let refused = app
            .app_role_exec(Some("f"), &format!("DELETE FROM {table}"))
            .await
            .expect_err("the application role cannot write the day totals");
        assert!(refused.contains("permission denied"), "{table}: {refused}");
    }
    op_f.claim_next(json!({})).await.data();
    op_g.claim_next(json!({})).await.data();
    app.project().await;
    assert_eq!(app.sql_i64("SELECT count(DISTINCT fleet) FROM claim_days").await, 2);
    let claims = app.app_role_query(Some("f"), "SELECT DISTINCT fleet FROM claim_days").await;
    assert_eq!(claims, vec![json!({ "fleet": "f" })], "fleet f sees its own claims only");
    let latest = app.app_role_query(Some("f"), "SELECT DISTINCT fleet FROM agent_latest").await;
    assert_eq!(latest, vec![json!({ "fleet": "f" })], "and the latest attempts of its own names only");
    let rebuild = app.app_role_exec(Some("f"), "SELECT ledger_project_rebuild('agent_latest')").await;
    assert!(rebuild.is_err_and(|e| e.contains("permission denied")), "a rebuild is the owner's");
    let fold = app.app_role_exec(Some("f"), "SELECT agent_latest_fold(0, 1000)").await;
    assert!(fold.is_err_and(|e| e.contains("permission denied")), "a fold's own step runs through ledger_project");
}

#[tokio::test]
async fn events_over_a_range_count_as_the_rows_say_through_folds() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["e0", "e1", "e2"]).await;
    // Events written into the past by hand on three days (the projector
    // counts them per day as it folds them), besides today's registrations.
    app.sql(
        "INSERT INTO work_unit_events (fleet, unit_id, event_type, agent_id, created_at)
         SELECT 'f', u.id, 'heartbeat', 'op', v.at FROM work_units u,
                (VALUES ('2026-03-01T10:00:00Z'::timestamptz), ('2026-03-01T23:59:59Z'), ('2026-03-02T00:00:00Z'),
                        ('2026-03-03T12:00:00Z')) v(at)
          WHERE u.fleet = 'f'",
    )
    .await;
    let query = "query($from: DateTime, $until: DateTime, $t: [EventType!]) {
        events(first: 1, filter: { from: $from, until: $until, types: $t }) { totalCount } }";
    let ranges = [
        // Cuts the first day, the second whole, the third from midnight.
        (Some("2026-03-01T12:00:00Z"), Some("2026-03-03T00:00:00Z")),
        (Some("2026-03-01T00:00:00Z"), Some("2026-03-02T00:00:00Z")),
        (Some("2026-03-01T11:00:00Z"), Some("2026-03-01T23:59:59Z")),
        (Some("2026-03-01T23:59:59Z"), Some("2026-03-03T12:00:00.000001Z")),
        (None, Some("2026-03-02T00:00:00Z")),
        (Some("2026-03-02T00:00:00Z"), None),
    ];
    for when in ["as written", "folded"] {
        if when == "folded" {
            app.project().await;
        }
        for (from, until) in ranges {
            for types in [json!(null), json!(["HEARTBEAT"]), json!(["REGISTERED", "HEARTBEAT"])] {
                let got = op.run(query, json!({ "from": from, "until": until, "t": types })).await;
                let of_types = match types.as_array() {
                    None => "true".to_owned(),
                    Some(t) => format!(
                        "upper(event_type::text) = ANY(ARRAY[{}])",
                        t.iter()
                            .map(|t| format!("'{}'", t.as_str().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let rows = app
                    .sql_i64(&format!(
                        "SELECT count(*) FROM work_unit_events WHERE fleet = 'f' AND created_at >= {} AND created_at < {}
                            AND {of_types}",
                        from.map_or("'-infinity'".to_owned(), |f| format!("'{f}'")),
                        until.map_or("'infinity'".to_owned(), |u| format!("'{u}'")),
                    ))
                    .await;
                assert_eq!(got.data()["events"]["totalCount"], json!(rows), "{when}: [{from:?}, {until:?}) of {types}");
            }
        }
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM event_days WHERE fleet = 'f' AND NOT folded").await, 0);
    let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
    assert!(audit.status.success(), "{}", text(&audit.stdout));
    // A day's count changed by hand is the event rule's finding.
    app.sql("UPDATE event_days SET events = events + 1 WHERE fleet = 'f' AND day = '2026-03-02'").await;
    let audit = work_ledger(&app, &["audit", "--fleet", "f"], None);
    assert_eq!(audit.status.code(), Some(1), "{}", text(&audit.stderr));
    let out = text(&audit.stdout);
    assert!(out.lines().all(|l| l.contains("\tevents\t")) && out.contains("2026-03-02"), "{out}");
}
