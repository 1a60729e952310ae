//! Cost over a range from the cost days (issue 27):
//! `costSummary` and `costTotal` with `from`/`to` read totals per UTC day for
//! the days the range holds whole and the records only where it cuts a day.
//! They must answer exactly what the cost records say, counted from the rows
//! the way the reads did before the totals (below, as the oracle): units
//! counted once however many days and ends of the range they have cost in,
//! each under the group it is in now (it moves when it changes state), per
//! agent of the attempt the cost was recorded on.

use chrono::{Duration, NaiveDate};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::operator::{text, work_ledger};

const SUMMARY: &str = "query($g: CostGroupBy!, $from: DateTime, $to: DateTime, $d: String) {
    costSummary(groupBy: $g, from: $from, to: $to, domain: $d) { key units costCents }
    costTotal(from: $from, to: $to, domain: $d) { units costCents } }";

/// `costSummary`'s groups counted from the cost records themselves.
async fn oracle(app: &TestApp, group: &str, from: Option<&str>, to: Option<&str>, domain: Option<&str>) -> Vec<Value> {
    let lit = |v: Option<&str>, or: &str| v.map_or(format!("'{or}'::timestamptz"), |v| format!("'{v}'::timestamptz"));
    let (from, to) = (lit(from, "-infinity"), lit(to, "infinity"));
    let domain = domain.map_or("true".to_owned(), |d| format!("u.domain = '{d}'"));
    let (key, attempts) = match group {
        "AGENT" => ("t.agent_id", "JOIN work_unit_attempts t ON t.id = e.attempt_id"),
        "DOMAIN" => ("u.domain", ""),
        "STATE" => ("upper(u.state::text)", ""),
        _ => ("coalesce(u.disposition::text, 'OPEN')", ""),
    };
    let sql = format!(
        "SELECT {key} AS key, count(DISTINCT e.unit_id) AS units, sum(e.cost_delta_cents)::bigint AS \"costCents\"
           FROM work_unit_events e JOIN work_units u ON u.id = e.unit_id {attempts}
          WHERE e.fleet = 'f' AND e.event_type = 'cost_recorded' AND e.created_at >= {from} AND e.created_at < {to}
            AND {domain}
          GROUP BY 1 ORDER BY 1"
    );
    app.sql_json(&sql).await
}

/// Every group, every range, with and without a domain: the service's answer
/// equals the records', and the audit finds the cost days exact.
async fn assert_exact(app: &TestApp, op: &Agent<'_>, ranges: &[(Option<String>, Option<String>)], when: &str) {
    for (from, to) in ranges {
        for domain in [None, Some("cobol")] {
            for group in ["DOMAIN", "STATE", "DISPOSITION", "AGENT"] {
                let vars = json!({ "g": group, "from": from, "to": to, "d": domain });
                let got = op.run(SUMMARY, vars).await;
                let expected = oracle(app, group, from.as_deref(), to.as_deref(), domain).await;
                assert_eq!(
                    got.data()["costSummary"],
                    Value::Array(expected.clone()),
                    "{when}: {group} over [{from:?}, {to:?}) in {domain:?}"
                );
                if group == "DOMAIN" {
                    let sum = |f: &str| expected.iter().map(|g| g[f].as_i64().unwrap_or(0)).sum::<i64>();
                    assert_eq!(
                        got.data()["costTotal"],
                        json!({ "units": sum("units"), "costCents": sum("costCents") }),
                        "{when}: costTotal over [{from:?}, {to:?}) in {domain:?}"
                    );
                }
            }
        }
    }
    let audit = work_ledger(app, &["audit", "--fleet", "f"], None);
    assert!(audit.status.success(), "{when}: {}{}", text(&audit.stdout), text(&audit.stderr));
}

/// A cost record written into the past by hand, on an attempt (or none).
async fn past_cost(app: &TestApp, unit: &str, attempt: Option<&str>, cents: i64, at: &str) {
    let attempt = attempt.map_or("NULL".to_owned(), |a| format!("'{a}'"));
    app.sql(&format!(
        "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, agent_id, cost_delta_cents, created_at)
         VALUES ('f', '{unit}', {attempt}, 'cost_recorded', 'op', {cents}, '{at}')"
    ))
    .await;
}

/// Claims and starts a unit; returns the attempt.
async fn start(agent: &Agent<'_>, unit: &str) -> String {
    let attempt =
        agent.claim_unit(unit, json!({})).await.unit()["currentAttemptId"].as_str().expect("claimed").to_owned();
    agent.transition(unit, "IN_PROGRESS", json!({})).await.data();
    attempt
}

#[tokio::test]
async fn cost_over_a_range_counts_each_unit_once_under_its_group_now() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    // One live claim per agent: an agent per unit held at once.
    let [a, b, c, d, e] = ["agent-a", "agent-b", "agent-c", "agent-d", "agent-e"].map(|name| name.to_owned());
    let (a, b, c, d, e) = (
        Agent::new(&app, "f", &a, Role::Agent).await,
        Agent::new(&app, "f", &b, Role::Agent).await,
        Agent::new(&app, "f", &c, Role::Agent).await,
        Agent::new(&app, "f", &d, Role::Agent).await,
        Agent::new(&app, "f", &e, Role::Agent).await,
    );
    let units: Vec<Value> = ["r0", "r1", "r2", "r3", "r4", "r5"]
        .iter()
        .enumerate()
        .map(|(i, r)| json!({ "externalRef": r, "domain": if i < 3 { "cobol" } else { "jcl" } }))
        .collect();
    let registered =
        op.run("mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }", json!({ "u": units })).await;
    let ids: Vec<String> = registered.data()["registerUnits"]
        .as_array()
        .expect("units")
        .iter()
        .map(|u| u["id"].as_str().expect("id").to_owned())
        .collect();
    let today: String = app.sql_json("SELECT (now() AT TIME ZONE 'UTC')::date::text AS d").await[0]["d"]
        .as_str()
        .expect("today")
        .to_owned();
    let today = NaiveDate::parse_from_str(&today, "%Y-%m-%d").expect("a date");
    let at = |days: i64, time: &str| format!("{}T{time}Z", today - Duration::days(days));
    // r0: three records on two past days (one of 0 cents), one today.
    let a0 = start(&a, &ids[0]).await;
    a.record_cost(&a0, 100, "r0-today").await.data();
    past_cost(&app, &ids[0], Some(&a0), 50, &at(10, "10:00:00")).await;
    past_cost(&app, &ids[0], Some(&a0), 30, &at(10, "20:00:00")).await;
    past_cost(&app, &ids[0], Some(&a0), 0, &at(7, "12:00:00")).await;
    // r1: cost under agent-c, released (a group change), then agent-b's
    // attempt, with a record written into the past after today's.
    let c1 = start(&c, &ids[1]).await;
    c.record_cost(&c1, 70, "r1-c").await.data();
    c.release(&ids[1], json!({ "reason": "handing over" })).await.data();
    let b1 = start(&b, &ids[1]).await;
    b.record_cost(&b1, 20, "r1-b").await.data();
    past_cost(&app, &ids[1], Some(&b1), 40, &at(3, "06:00:00")).await;
    // r2: groups change, no cost.
    start(&c, &ids[2]).await;
    c.release(&ids[2], json!({ "reason": "not for me" })).await.data();
    // r3: a record without an attempt (no agent), one at midnight, one today; disposed.
    let d3 = start(&d, &ids[3]).await;
    past_cost(&app, &ids[3], None, 25, &at(7, "23:30:00")).await;
    past_cost(&app, &ids[3], Some(&d3), 15, &at(3, "00:00:00")).await;
    d.record_cost(&d3, 5, "r3-today").await.data();
    d.dispose(&ids[3], "DROPPED", json!({ "evidence": "https://wiki.example/r3" })).await.data();
    // r4: cost today only, still in progress; r5 never claimed.
    let e4 = start(&e, &ids[4]).await;
    e.record_cost(&e4, 60, "r4-today").await.data();

    let ranges: Vec<(Option<String>, Option<String>)> = vec![
        // Cuts the first day between its two records and today; whole days between.
        (Some(at(10, "15:00:00")), Some(at(-1, "01:00:00"))),
        // Whole days only: the midnight record is the range's end.
        (Some(at(10, "00:00:00")), Some(at(3, "00:00:00"))),
        // One whole day.
        (Some(at(3, "00:00:00")), Some(at(2, "00:00:00"))),
        // Inside one day.
        (Some(at(7, "06:00:00")), Some(at(7, "23:45:00"))),
        // Open at one end.
        (None, Some(at(5, "12:00:00"))),
        (Some(at(8, "12:00:00")), None),
    ];
    // The first range by hand: r0 (30 + 0 + 100 cents on three days, its 50
    // before the cut) and r1 (70 + 20 today, 40 three days ago) once each.
    let first = json!({ "g": "DOMAIN", "from": ranges[0].0, "to": ranges[0].1 });
    assert_eq!(
        op.run(SUMMARY, first).await.data()["costSummary"],
        json!([{ "key": "cobol", "units": 2, "costCents": 260 }, { "key": "jcl", "units": 2, "costCents": 105 }])
    );
    assert_exact(&app, &op, &ranges, "as written").await;
    app.project().await;
    assert_exact(&app, &op, &ranges, "folded").await;

    // More group changes after the cost: r0 disposed, r1 deferred by the operator.
    a.dispose(&ids[0], "DROPPED", json!({ "evidence": "https://wiki.example/r0" })).await.data();
    op.dispose(&ids[1], "DEFERRED", json!({ "evidence": "https://wiki.example/r1", "reason": "later" })).await.data();
    e.record_cost(&e4, 9, "r4-more").await.data();
    assert_exact(&app, &op, &ranges, "after the disposals").await;
    app.project().await;
    assert_exact(&app, &op, &ranges, "after the disposals, folded").await;
    let groups = app.sql_i64("SELECT count(*) FROM cost_days WHERE fleet = 'f'").await;
    assert!(groups > 0, "the cost days hold rows");
}
