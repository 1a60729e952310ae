//! The fleet roster and the totals (issue 26): `agents` with every status
//! reached through the API, another fleet out of sight, keyset pages by
//! name; `claimingAgents` telling live agents from silent ones; `costTotal`
//! and `throughput`'s bucket totals equal to the sums of their parts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::operator_calendar::calendar;

const ROSTER: &str = "query($first: Int, $after: String, $status: AgentStatus) {
    agents(first: $first, after: $after, status: $status) {
        totalCount
        pageInfo { hasNextPage endCursor }
        edges { cursor node {
            name status heldUnit { externalRef state } lastClaimAt lastHeartbeatAt claimsToday costCentsToday
            tokenLastUsedAt
        } }
    }
}";

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("not a time: {v}"))
}

fn names(conn: &Value) -> Vec<String> {
    conn["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"]["name"].as_str().expect("name").to_owned())
        .collect()
}

/// The current UTC day as the database sees it: a verdict about "today" is
/// only checked when the test ran within one day.
async fn utc_day(app: &TestApp) -> DateTime<Utc> {
    db_time(app, "SELECT date_trunc('day', now(), 'UTC') AS d").await
}

/// A column of the owner's view of the ledger, as a time.
async fn db_time(app: &TestApp, sql: &str) -> DateTime<Utc> {
    let rows = app.sql_json(sql).await;
    time(rows[0].as_object().and_then(|o| o.values().next()).unwrap_or_else(|| panic!("no row from {sql}")))
}

/// Fleet `f`: one agent per status, each reached through the API, a triage
/// and a reader token (no `units:claim`: not agents), and fleet `other`
/// with an agent of the same name as one of `f` that holds a unit there.
/// Returns the reader.
async fn roster_fleet(app: &TestApp) -> Agent<'_> {
    let op = Agent::new(app, "f", "op", Role::Operator).await;
    let units = app.register(&op.token, &["u-live", "u-blocked", "u-silent", "u-done", "u-released"]).await;
    let id = |i: usize| units[i]["id"].as_str().expect("id").to_owned();

    let live = Agent::new(app, "f", "live", Role::Agent).await;
    let attempt = live.claim_unit(&id(0), json!({})).await.str("currentAttemptId");
    live.heartbeat(&attempt, json!({})).await.data();

    let blocker = Agent::new(app, "f", "blocker", Role::Agent).await;
    blocker.claim_unit(&id(1), json!({})).await.data();
    blocker.transition(&id(1), "IN_PROGRESS", json!({})).await.data();
    blocker.block(&id(1), "which copybook?", json!({})).await.data();

    let ghost = Agent::new(app, "f", "ghost", Role::Agent).await;
    ghost.claim_unit(&id(2), json!({})).await.data();
    app.expire_lease(&id(2)).await;

    let finisher = Agent::new(app, "f", "finisher", Role::Agent).await;
    let attempt = finisher.claim_unit(&id(3), json!({})).await.str("currentAttemptId");
    finisher.heartbeat(&attempt, json!({})).await.data();
    finisher.transition(&id(3), "IN_PROGRESS", json!({})).await.data();
    finisher.record_cost(&attempt, 125, "finisher-1").await.data();
    finisher.transition(&id(3), "VERIFIED", json!({ "evidence": "https://ci/done" })).await.data();

    let gone = Agent::new(app, "f", "gone", Role::Agent).await;
    gone.claim_unit(&id(4), json!({})).await.data();
    gone.release(&id(4), json!({ "reason": "leaving" })).await.data();
    let token = app.sql_id("SELECT id::text AS id FROM api_tokens WHERE fleet = 'f' AND name = 'gone'").await;
    assert!(work_ledger::db::tokens::revoke(&app.owner, token.parse().expect("uuid")).await.expect("revoke"));

    Agent::new(app, "f", "idle", Role::Agent).await;
    Agent::new(app, "f", "triage", Role::Triage).await;

    // Fleet `other`: an `idle` that holds a unit, and a name of its own.
    let other_op = Agent::new(app, "other", "other-op", Role::Operator).await;
    app.register(&other_op.token, &["o1", "o2"]).await;
    Agent::new(app, "other", "idle", Role::Agent).await.claim_next(json!({})).await.data();
    Agent::new(app, "other", "intruder", Role::Agent).await.claim_next(json!({})).await.data();

    Agent::new(app, "f", "watcher", Role::Reader).await
}

#[tokio::test]
async fn every_status_is_reached_through_the_api_and_another_fleet_stays_out_of_sight() {
    let app = spawn_app().await;
    let day = utc_day(&app).await;
    let reader = roster_fleet(&app).await;
    // A token used, as the tokens work records it.
    app.sql("UPDATE api_tokens SET last_used_at = '2026-11-30T12:00:00Z' WHERE fleet = 'f' AND name = 'idle'").await;
    // `op` was used through the API: the service records its use beside its requests.
    let op_used = "SELECT last_used_at FROM api_tokens WHERE fleet = 'f' AND name = 'op'";
    let deadline = std::time::Instant::now() + crate::ws_client::GUARD;
    while app.sql_json(op_used).await[0]["last_used_at"].is_null() {
        assert!(std::time::Instant::now() < deadline, "op's use recorded within the guard");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let d = reader.run(ROSTER, json!({})).await;
    let conn = &d.data()["agents"];
    assert_eq!(names(conn), ["blocker", "finisher", "ghost", "gone", "idle", "live", "op"], "by name, agents only");
    assert_eq!(conn["totalCount"], 7);
    let agent: BTreeMap<String, Value> = conn["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| (e["node"]["name"].as_str().expect("name").to_owned(), e["node"].clone()))
        .collect();
    let status = |n: &str| agent[n]["status"].as_str().expect("status").to_owned();
    let held = |n: &str| agent[n]["heldUnit"].clone();
    assert_eq!(status("live"), "ACTIVE");
    assert_eq!(held("live"), json!({ "externalRef": "u-live", "state": "CLAIMED" }));
    assert_eq!(status("blocker"), "BLOCKED");
    assert_eq!(held("blocker"), json!({ "externalRef": "u-blocked", "state": "BLOCKED" }));
    assert_eq!(status("ghost"), "SILENT");
    assert_eq!(held("ghost"), json!({ "externalRef": "u-silent", "state": "CLAIMED" }));
    assert_eq!(status("finisher"), "IDLE", "a VERIFIED unit awaiting disposition is not held");
    assert_eq!(held("finisher"), Value::Null);
    assert_eq!(status("gone"), "REVOKED");
    assert_eq!(held("gone"), Value::Null);
    assert_eq!(status("idle"), "IDLE", "fleet `other`'s `idle` holds a unit; this one holds nothing");
    assert_eq!(held("idle"), Value::Null);
    assert_eq!(status("op"), "IDLE");

    // Times, as recorded.
    let unit_heartbeat = |r: &str| format!("SELECT last_heartbeat_at FROM work_units WHERE external_ref = '{r}'");
    assert_eq!(time(&agent["live"]["lastHeartbeatAt"]), db_time(&app, &unit_heartbeat("u-live")).await);
    assert_eq!(time(&agent["ghost"]["lastHeartbeatAt"]), db_time(&app, &unit_heartbeat("u-silent")).await);
    let started =
        |n: &str| format!("SELECT max(started_at) FROM work_unit_attempts WHERE fleet = 'f' AND agent_id = '{n}'");
    for name in ["live", "blocker", "ghost", "finisher", "gone"] {
        assert_eq!(time(&agent[name]["lastClaimAt"]), db_time(&app, &started(name)).await, "{name}");
    }
    let beat = "SELECT created_at FROM work_unit_events WHERE agent_id = 'finisher' AND event_type = 'heartbeat'";
    assert_eq!(time(&agent["finisher"]["lastHeartbeatAt"]), db_time(&app, beat).await, "its last heartbeat");
    assert_eq!(agent["gone"]["lastHeartbeatAt"], agent["gone"]["lastClaimAt"], "never heartbeated: its claim");
    assert_eq!(agent["idle"]["lastClaimAt"], Value::Null);
    assert_eq!(agent["idle"]["lastHeartbeatAt"], Value::Null);
    assert_eq!(time(&agent["idle"]["tokenLastUsedAt"]), time(&json!("2026-11-30T12:00:00Z")));
    assert_eq!(time(&agent["op"]["tokenLastUsedAt"]), db_time(&app, op_used).await, "recorded by its requests");

    // Row-level security alone keeps the roster in its fleet, token names
    // included: a query that forgets the fleet sees only its own, and a
    // session without a fleet sees nothing.
    assert_eq!(
        app.app_role_query(Some("f"), "SELECT count(*) AS n FROM v_agents WHERE fleet <> 'f'").await,
        [json!({ "n": 0 })]
    );
    assert_eq!(
        app.app_role_query(Some("f"), "SELECT count(*) AS n FROM agent_tokens() WHERE fleet <> 'f'").await,
        [json!({ "n": 0 })]
    );
    assert_eq!(app.app_role_query(None, "SELECT count(*) AS n FROM v_agents").await, [json!({ "n": 0 })]);

    // One status only.
    let silent = reader.run(ROSTER, json!({ "status": "SILENT" })).await;
    assert_eq!(names(&silent.data()["agents"]), ["ghost"]);
    assert_eq!(silent.data()["agents"]["totalCount"], 1);
    let idle = reader.run(ROSTER, json!({ "status": "IDLE" })).await;
    assert_eq!(names(&idle.data()["agents"]), ["finisher", "idle", "op"]);

    // The other fleet sees its own two, nothing of `f`.
    let other = Agent::new(&app, "other", "other-reader", Role::Reader).await;
    let theirs = other.run(ROSTER, json!({})).await;
    assert_eq!(names(&theirs.data()["agents"]), ["idle", "intruder", "other-op"]);
    assert_eq!(theirs.data()["agents"]["edges"][0]["node"]["status"], "ACTIVE");

    // Today's claims and their cost; claimingAgents tells live from silent.
    let today = reader
        .run("{ claimingAgents { day agents claims live blocked silent } }", json!({}))
        .await
        .data()["claimingAgents"]
        .clone();
    if utc_day(&app).await == day {
        for (name, claims, cost) in
            [("live", 1, 0), ("blocker", 1, 0), ("ghost", 1, 0), ("finisher", 1, 125), ("gone", 1, 0), ("idle", 0, 0)]
        {
            assert_eq!(agent[name]["claimsToday"], claims, "{name}");
            assert_eq!(agent[name]["costCentsToday"], cost, "{name}");
        }
        assert_eq!(today.as_array().map(Vec::len), Some(1), "{today:#}");
        let row = &today[0];
        assert_eq!(time(&row["day"]), day);
        assert_eq!(
            (&row["agents"], &row["claims"], &row["live"], &row["blocked"], &row["silent"]),
            (&json!(5), &json!(5), &json!(1), &json!(1), &json!(1)),
            "five claimed today: live holds a live lease, blocker waits, ghost went silent, two hold nothing"
        );
    }
}

#[tokio::test]
async fn the_roster_pages_by_name_with_opaque_cursors() {
    let app = spawn_app().await;
    let reader = roster_fleet(&app).await;
    let mut seen = Vec::new();
    let mut after = Value::Null;
    let mut pages = 0;
    loop {
        let page = reader.run(ROSTER, json!({ "first": 3, "after": after })).await;
        let conn = page.data()["agents"].clone();
        assert_eq!(conn["totalCount"], 7, "the whole list on every page");
        let got = names(&conn);
        assert!(got.len() <= 3);
        let last = conn["edges"].as_array().and_then(|e| e.last()).map(|e| e["cursor"].clone());
        assert_eq!(last.as_ref(), Some(&conn["pageInfo"]["endCursor"]));
        seen.extend(got);
        pages += 1;
        assert!(pages <= 3, "seven names in pages of three: {seen:?}");
        if conn["pageInfo"]["hasNextPage"] == false {
            break;
        }
        after = conn["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["blocker", "finisher", "ghost", "gone", "idle", "live", "op"]);

    // A filtered list pages the same way.
    let first = reader.run(ROSTER, json!({ "first": 1, "status": "IDLE" })).await;
    let cursor = first.data()["agents"]["pageInfo"]["endCursor"].clone();
    let rest = reader.run(ROSTER, json!({ "status": "IDLE", "after": cursor })).await;
    assert_eq!(names(&rest.data()["agents"]), ["idle", "op"]);

    // Another list's cursor, or anything else, is refused.
    let units = reader.run("{ units(first: 1) { pageInfo { endCursor } } }", json!({})).await;
    let foreign = units.data()["units"]["pageInfo"]["endCursor"].clone();
    for bad in [foreign, json!("bm90IGEgY3Vyc29y"), json!("")] {
        let refused = reader.run(ROSTER, json!({ "after": bad })).await;
        refused.assert_code("INVALID_INPUT");
        assert_eq!(refused.body["errors"][0]["extensions"]["argument"], "after", "{bad}");
    }
    reader.run(ROSTER, json!({ "first": 0 })).await.assert_code("INVALID_INPUT");

    // The roster and costTotal count as fleet-wide reads: five pass, six do not.
    for field in ["agents { edges { cursor } }", "costTotal { units }"] {
        let aliased = |n: usize| format!("{{ {} }}", (0..n).map(|i| format!("a{i}: {field} ")).collect::<String>());
        reader.run(&aliased(5), json!({})).await.data();
        let refused = reader.run(&aliased(6), json!({})).await;
        refused.assert_code("GRAPHQL_VALIDATION_FAILED");
        assert!(refused.message().contains("6 fleet-wide reads"), "{}", refused.message());
    }
}

const TOTAL: &str = "query($from: DateTime, $to: DateTime, $d: String) {
    costTotal(from: $from, to: $to, domain: $d) { key units costCents avgCostCents }
}";

const GROUPS: &str = "query($g: CostGroupBy!, $from: DateTime, $to: DateTime, $d: String) {
    costSummary(groupBy: $g, from: $from, to: $to, domain: $d) { key units costCents }
}";

#[tokio::test]
async fn cost_total_and_throughput_totals_equal_the_sums_of_their_parts() {
    let app = spawn_app().await;
    app.allow_history_rewrites().await;
    calendar(&app).await;
    // Another fleet's costs never count.
    let other = Agent::new(&app, "other", "other-op", Role::Operator).await;
    let unit = app.register(&other.token, &["o1"]).await[0]["id"].as_str().expect("id").to_owned();
    let attempt = other.claim_unit(&unit, json!({})).await.str("currentAttemptId");
    other.record_cost(&attempt, 999, "o1").await.data();
    let op = Agent::new(&app, "g", "op", Role::Operator).await;

    let tuesday = json!({ "from": "2026-01-06T00:00:00Z", "to": "2026-01-07T00:00:00Z" });
    for vars in
        [json!({}), tuesday.clone(), json!({ "d": "asm" }), json!({ "d": "default", "from": "2026-01-06T00:00:00Z" })]
    {
        let total = op.run(TOTAL, vars.clone()).await.data()["costTotal"].clone();
        assert_eq!(total["key"], "TOTAL");
        for group in ["DOMAIN", "STATE", "DISPOSITION"] {
            let mut args = vars.clone();
            args["g"] = json!(group);
            let rows = op.run(GROUPS, args).await.data()["costSummary"].clone();
            let sum =
                |f: &str| rows.as_array().expect("groups").iter().map(|r| r[f].as_i64().expect("int")).sum::<i64>();
            assert_eq!(
                (total["units"].as_i64(), total["costCents"].as_i64()),
                (Some(sum("units")), Some(sum("costCents"))),
                "{group} {vars}"
            );
        }
    }
    let whole = op.run(TOTAL, json!({})).await.data()["costTotal"].clone();
    let units = app.sql_i64("SELECT count(*) FROM work_units WHERE fleet = 'g'").await;
    let cost = app.sql_i64("SELECT sum(cost_cents)::bigint FROM work_units WHERE fleet = 'g'").await;
    assert_eq!(
        whole,
        json!({ "key": "TOTAL", "units": units, "costCents": cost, "avgCostCents": cost as f64 / units as f64 })
    );
    assert_eq!((units, cost), (6, 180), "the calendar's units and their cost");
    let on_tuesday = op.run(TOTAL, tuesday).await.data()["costTotal"].clone();
    assert_eq!(
        (&on_tuesday["units"], &on_tuesday["costCents"]),
        (&json!(2), &json!(80)),
        "the cost recorded on Tuesday"
    );
    let empty = Agent::new(&app, "empty", "op", Role::Reader).await;
    assert_eq!(
        empty.run(TOTAL, json!({})).await.data()["costTotal"],
        json!({ "key": "TOTAL", "units": 0, "costCents": 0, "avgCostCents": 0.0 })
    );

    // Each throughput row carries its whole bucket: the sum of the bucket's rows.
    let throughput = "query($b: ThroughputBucket!) { throughput(bucket: $b) { start disposition count costCents total { count costCents } } }";
    for bucket in ["DAY", "WEEK"] {
        let rows = op.run(throughput, json!({ "b": bucket })).await.data()["throughput"].clone();
        let rows = rows.as_array().expect("rows");
        let mut sums: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for r in rows {
            let s = sums.entry(r["start"].as_str().expect("start").to_owned()).or_default();
            s.0 += r["count"].as_i64().expect("count");
            s.1 += r["costCents"].as_i64().expect("cost");
        }
        for r in rows {
            let (count, cost) = sums[r["start"].as_str().expect("start")];
            assert_eq!(r["total"], json!({ "count": count, "costCents": cost }), "{bucket} {r}");
            let trunc = if bucket == "DAY" { "day" } else { "week" };
            let disposed = app
                .sql_i64(&format!(
                    "SELECT count(*) FROM work_units WHERE fleet = 'g' AND date_trunc('{trunc}', disposed_at, 'UTC') = '{}'",
                    r["start"].as_str().expect("start")
                ))
                .await;
            assert_eq!(r["total"]["count"], disposed, "{bucket} {r}");
        }
        assert!(sums.len() < rows.len(), "{bucket}: a bucket with two dispositions is among them");
    }
    let tuesday_rows = op.run(throughput, json!({ "b": "DAY" })).await.data()["throughput"].clone();
    let tuesday_rows: Vec<&Value> =
        tuesday_rows.as_array().expect("rows").iter().filter(|r| r["start"] == "2026-01-06T00:00:00+00:00").collect();
    assert_eq!(tuesday_rows.len(), 2);
    assert!(tuesday_rows.iter().all(|r| r["total"] == json!({ "count": 2, "costCents": 80 })));

    // Live and silent are facts of now: on today's row only, never on the
    // calendar's past days, even for an agent that also claims today.
    let day = utc_day(&app).await;
    op.claim_next(json!({})).await.data();
    let days = op.run("{ claimingAgents { day agents live blocked silent } }", json!({})).await;
    let days = days.data()["claimingAgents"].as_array().expect("days").clone();
    let (today, past): (Vec<&Value>, Vec<&Value>) = days.iter().partition(|d| time(&d["day"]) == day);
    assert_eq!(past.len(), 2, "{days:?}");
    for d in past {
        assert_eq!((&d["live"], &d["blocked"], &d["silent"]), (&Value::Null, &Value::Null, &Value::Null), "{d}");
    }
    if utc_day(&app).await == day {
        assert_eq!(today.len(), 1, "{days:?}");
        assert_eq!((&today[0]["agents"], &today[0]["live"], &today[0]["silent"]), (&json!(1), &json!(1), &json!(0)));
    }
}

/// A name whose every token expired is as dead as a revoked one: REVOKED,
/// while a name with a live token and nothing held is IDLE.
#[tokio::test]
async fn a_name_whose_tokens_all_expired_is_revoked() {
    let app = spawn_app().await;
    Agent::new(&app, "f", "expired", Role::Agent).await;
    Agent::new(&app, "f", "current", Role::Agent).await;
    app.sql(
        "UPDATE api_tokens SET created_at = now() - interval '2 days', expires_at = now() - interval '1 day'
          WHERE name = 'expired'",
    )
    .await;
    let reader = Agent::new(&app, "f", "reader", Role::Reader).await;
    let roster = reader.run("{ agents { edges { node { name status } } } }", json!({})).await;
    let statuses: Vec<(String, String)> = roster.data()["agents"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (e["node"]["name"].as_str().unwrap_or("").to_owned(), e["node"]["status"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    assert_eq!(
        statuses,
        [("current".to_owned(), "IDLE".to_owned()), ("expired".to_owned(), "REVOKED".to_owned())],
        "{:#}",
        roster.body
    );
}

/// A page of the roster looks at its own names, not at every name the fleet
/// ever had (issue 27): names accumulate over the life of a ledger, and a
/// page of 100 read every one of them with its probes. And neither finds
/// its names and their latest claims in the attempts: each name's latest
/// attempt is kept in `agent_latest`, where the roster
/// walked the attempts' index name by name and probed each name's latest.
/// Counted by the database: a page scans the attempts once per name of its
/// own (claims today), and the whole roster once per name.
#[tokio::test]
async fn a_roster_page_probes_only_its_own_names() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..30).map(|i| format!("u{i}")).collect();
    app.register(&op.token, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    for i in 0..30 {
        Agent::new(&app, "f", &format!("agent-{i:02}"), Role::Agent).await.claim_next(json!({})).await.data();
    }
    let reader = Agent::new(&app, "f", "watcher", Role::Reader).await;
    let page = reader.run(ROSTER, json!({ "first": 3 })).await;
    assert_eq!(names(&page.data()["agents"]), ["agent-00", "agent-01", "agent-02"]);
    assert_eq!(page.data()["agents"]["totalCount"], 31, "thirty agents and the operator");
    let cursor = page.data()["agents"]["pageInfo"]["endCursor"].clone();
    let next = reader.run(ROSTER, json!({ "first": 3, "after": cursor })).await;
    assert_eq!(names(&next.data()["agents"]), ["agent-03", "agent-04", "agent-05"]);

    // The statement of the second page (one more row tells hasNextPage),
    // with the latest attempts folded (the tail a read adds is the
    // projector's lag: what a second brings).
    app.project().await;
    let paged = "SELECT v.name FROM roster('f', 'agent-02', 4) v WHERE v.fleet = 'f' ORDER BY v.name LIMIT 4";
    let page_scans = app.app_role_scans("f", "work_unit_attempts", paged).await;
    let whole_scans = app.app_role_scans("f", "work_unit_attempts", "SELECT count(*) FROM v_agents").await;
    assert_eq!(page_scans, 4, "four names, one look at today's claims each");
    assert_eq!(whole_scans, 31, "thirty agents and the operator, one look each");
    let kept = app.app_role_scans("f", "agent_latest", paged).await;
    assert_eq!(kept, 1, "the page's names and their latest claims in one scan");
}

/// A name's last heartbeat is read from the events only when the name holds
/// nothing (issue 27): a holder's is its unit's, and the roster showed it
/// from the unit while it also probed the events of every name. Counted by
/// the database: the scans of the events the whole roster makes are those
/// of the names that hold nothing (the operator, who never claimed, needs
/// none) and the one read of the projection's tail (the latest attempts
/// not folded yet), and the times are still the right ones.
#[tokio::test]
async fn only_the_names_that_hold_nothing_have_their_heartbeats_looked_up() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let refs: Vec<String> = (0..12).map(|i| format!("u{i}")).collect();
    app.register(&op.token, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let mut released = Vec::new();
    for i in 0..12 {
        let name = format!("agent-{i:02}");
        let agent = Agent::new(&app, "f", &name, Role::Agent).await;
        let claimed = agent.claim_next(json!({})).await;
        let (unit, attempt) = (claimed.str("id"), claimed.str("currentAttemptId"));
        agent.heartbeat(&attempt, json!({})).await.data();
        if i < 2 {
            agent.release(&unit, json!({ "reason": "done for now" })).await.data();
            released.push(name);
        }
    }
    app.project().await;
    let scans = app.app_role_scans("f", "work_unit_events", "SELECT count(*) FROM v_agents").await;
    assert_eq!(scans, 3, "one look at the events for each of the two names that hold nothing, one for the tail");

    // The two still show their last heartbeat, the ten their unit's.
    let rows = app
        .app_role_query(
            Some("f"),
            "SELECT name, last_heartbeat_at FROM v_agents WHERE name LIKE 'agent-%' ORDER BY name",
        )
        .await;
    assert_eq!(rows.len(), 12);
    for row in &rows {
        let name = row["name"].as_str().expect("name");
        let expected = if released.iter().any(|n| n == name) {
            format!(
                "SELECT max(created_at) FROM work_unit_events WHERE agent_id = '{name}' AND event_type = 'heartbeat'"
            )
        } else {
            format!("SELECT last_heartbeat_at FROM work_units WHERE claimed_by = '{name}'")
        };
        assert_eq!(time(&row["last_heartbeat_at"]), db_time(&app, &expected).await, "{name}");
    }
}
