//! Read-path benchmark on a large ledger (100,000 units, 500,000 events):
//! p50/p99 over HTTP of a nested `units(first: 500)` page, of `events(first: 500)`
//! a hundred pages deep, of `dispositionSummary`, and of the operator's
//! grouped and ranged reads (`costSummary`, `throughput`, `totalCount`, date
//! ranges), with the EXPLAIN plans of their statements.
//!
//!   cargo bench --bench reads -- [--runs 40]

mod support;

use std::time::Instant;

use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait, Value as SeaValue};
use serde_json::{Value, json};
use support::{AnyError, Samples, scratch_database, timed};
use work_ledger::auth::{self, Role};
use work_ledger::db::aggregates::{self, CostGroup};
use work_ledger::db::reads::{Query, Range};
use work_ledger::db::{self, stmt};
use work_ledger::http::Application;
use work_ledger::ledger::Ledger;

const UNITS: i64 = 100_000;
const EVENTS_PER_UNIT: i64 = 5;

/// The ledger, built in bulk SQL through legal state steps (the triggers check each).
/// The seed writes its history in bulk afterwards, so the commit-time check that
/// each state change comes with its event is off while it runs.
///
/// Half the units are claimed once (50,000 attempts). A fleet has tens to
/// hundreds of agents (SPEC: 10 to 64 today, hundreds tomorrow), and an agent
/// holds one unit at a time: the claims are made under names of their own
/// (one live claim per agent), then the 60 newest units stay held, the other
/// claimed-but-unsettled ones are released back to READY, and every attempt
/// is renamed to one of 200 agents (`agent-000` .. `agent-199`, by unit number
/// modulo 200, which keeps the 60 held units' holders distinct).
const SEED: &[&str] = &[
    "ALTER TABLE work_units DISABLE TRIGGER work_units_change_recorded",
    "INSERT INTO work_units (fleet, external_ref, domain, created_at)
     SELECT 'bench', 'u' || lpad(g::text, 6, '0'), (ARRAY['cobol', 'jcl', 'pl1', 'asm'])[1 + g % 4],
            now() - interval '30 days' + g * interval '10 ms'
       FROM generate_series(1, 100000) g",
    "WITH a AS (
         INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
         SELECT fleet, id, 1, 'agent-' || external_ref FROM work_units
          WHERE fleet = 'bench' AND substr(external_ref, 2)::int % 10 < 5
         RETURNING id, unit_id, agent_id)
     UPDATE work_units u SET state = 'claimed', claimed_by = a.agent_id, current_attempt_id = a.id, attempt_count = 1,
            lease_expires_at = now() + interval '1 hour'
       FROM a WHERE u.id = a.unit_id",
    "UPDATE work_units SET state = 'in_progress' WHERE fleet = 'bench' AND state = 'claimed' AND substr(external_ref, 2)::int % 10 BETWEEN 1 AND 4",
    "UPDATE work_units SET state = 'blocked', lease_expires_at = NULL WHERE fleet = 'bench' AND state = 'in_progress' AND substr(external_ref, 2)::int % 10 = 2",
    "INSERT INTO blocking_questions (fleet, unit_id, attempt_id, question, asked_by)
     SELECT fleet, id, current_attempt_id, 'which layout?', claimed_by FROM work_units WHERE fleet = 'bench' AND state = 'blocked'",
    "UPDATE work_unit_attempts a SET cost_cents = 100 + substr(u.external_ref, 2)::int % 500
       FROM work_units u WHERE u.id = a.unit_id AND u.fleet = 'bench'",
    "UPDATE work_units SET state = 'verified', lease_expires_at = NULL, evidence_urls = ARRAY['https://ci.example/' || external_ref]
      WHERE fleet = 'bench' AND state = 'in_progress' AND substr(external_ref, 2)::int % 10 IN (3, 4)",
    "UPDATE work_unit_attempts a SET outcome = 'verified', ended_at = now(), evidence_url = u.evidence_urls[1]
       FROM work_units u WHERE u.id = a.unit_id AND u.state = 'verified'",
    // Releases: all but the 60 newest held units go back to READY (their questions cancelled).
    "UPDATE blocking_questions q SET status = 'cancelled', cancelled_at = now()
       FROM work_units u WHERE u.id = q.unit_id AND u.fleet = 'bench' AND substr(u.external_ref, 2)::int <= 99800",
    "UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = now()
       FROM work_units u WHERE u.id = a.unit_id AND u.fleet = 'bench' AND a.outcome IS NULL
        AND substr(u.external_ref, 2)::int <= 99800",
    "UPDATE work_units SET state = 'ready', claimed_by = NULL, lease_expires_at = NULL
      WHERE fleet = 'bench' AND state IN ('claimed', 'in_progress', 'blocked') AND substr(external_ref, 2)::int <= 99800",
    // 200 agents: attempts (and holders) renamed, which the identity guards refuse outside a seed.
    "ALTER TABLE work_unit_attempts DISABLE TRIGGER work_unit_attempts_guard",
    "ALTER TABLE work_units DISABLE TRIGGER work_units_holder_guard",
    "UPDATE work_unit_attempts a SET agent_id = 'agent-' || lpad((substr(u.external_ref, 2)::int % 200)::text, 3, '0')
       FROM work_units u WHERE u.id = a.unit_id AND u.fleet = 'bench'",
    "UPDATE work_units SET claimed_by = 'agent-' || lpad((substr(external_ref, 2)::int % 200)::text, 3, '0')
      WHERE fleet = 'bench' AND claimed_by IS NOT NULL",
    "ALTER TABLE work_units ENABLE TRIGGER work_units_holder_guard",
    "ALTER TABLE work_unit_attempts ENABLE TRIGGER work_unit_attempts_guard",
    "UPDATE work_units SET state = 'done', disposition = 'MIGRATED',
            disposed_at = now() - substr(external_ref, 2)::int % 28 * interval '1 day'
      WHERE fleet = 'bench' AND state = 'verified' AND substr(external_ref, 2)::int % 10 = 4",
    "UPDATE work_units SET state = 'abandoned', disposition = (ARRAY['DROPPED', 'DEFERRED', 'DEAD'])[1 + substr(external_ref, 2)::int % 3]::disposition,
            disposed_at = now() - substr(external_ref, 2)::int % 28 * interval '1 day',
            evidence_urls = ARRAY['https://wiki.example/' || external_ref]
      WHERE fleet = 'bench' AND state = 'ready' AND substr(external_ref, 2)::int % 10 IN (5, 6)",
    // Bulk history: no listener needs these notifications. The fifth event of
    // each unit records its whole cost on its attempt.
    "ALTER TABLE work_unit_events DISABLE TRIGGER work_unit_events_notify",
    "INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, agent_id, cost_delta_cents, created_at)
     SELECT u.fleet, u.id, CASE WHEN k = 5 THEN u.current_attempt_id END,
            (ARRAY['registered', 'claimed', 'heartbeat', 'transitioned', 'cost_recorded'])[k]::event_type,
            'seed', CASE WHEN k = 5 THEN u.cost_cents ELSE 0 END, u.created_at + k * interval '1 ms'
       FROM work_units u, generate_series(1, 5) k WHERE u.fleet = 'bench'",
    "ALTER TABLE work_unit_events ENABLE TRIGGER work_unit_events_notify",
    "ALTER TABLE work_units ENABLE TRIGGER work_units_change_recorded",
    "VACUUM ANALYZE",
];

const NESTED: &str = "query($after: String) { units(first: 500, after: $after) {
    edges { node { id externalRef state attempts { attemptNo agentId outcome costCents } openQuestion { id question } } }
    pageInfo { hasNextPage endCursor } } }";
const EVENTS: &str = "query($after: String) { events(first: 500, after: $after) {
    edges { node { id eventType createdAt } } pageInfo { hasNextPage endCursor } } }";
const SUMMARY: &str = "{ dispositionSummary { disposition count costCents } }";

/// The operator's grouped reads (issue 14), each plain, over a range and for
/// one domain: `$from`/`$until` are the last seven days (dispositions are
/// spread over four weeks), `$costFrom`/`$costTo` the first 100 s of the cost
/// records (a tenth of them).
const GROUPS: &[&str] = &["DOMAIN", "DISPOSITION", "STATE", "AGENT"];
const COST: &str = "query($g: CostGroupBy!, $costFrom: DateTime, $costTo: DateTime, $domain: String) {
    costSummary(groupBy: $g, from: $costFrom, to: $costTo, domain: $domain) { key units costCents avgCostCents } }";
const THROUGHPUT: &str = "query($b: ThroughputBucket!, $from: DateTime, $until: DateTime, $domain: String) {
    throughput(bucket: $b, from: $from, until: $until, domain: $domain) { start disposition count costCents distinctAgents } }";

/// The operator's lists with totals, orders and ranges.
const OPERATOR: &[(&str, &str)] = &[
    (
        "units(first: 100, filter: {domain}) with totalCount",
        "{ units(first: 100, filter: { domain: \"cobol\" }) { totalCount edges { node { id } } } }",
    ),
    (
        "units(first: 100, filter: {stalled: false}, order: DESC)",
        "{ units(first: 100, filter: { stalled: false }, order: DESC) { edges { node { id } } } }",
    ),
    (
        "events(first: 100, filter: {from, until}, order: ASC) with totalCount: 100 s",
        "query($costFrom: DateTime, $costTo: DateTime) { events(first: 100, filter: { from: $costFrom, until: $costTo }, order: ASC) { totalCount edges { node { id } } } }",
    ),
    (
        "dispositions(first: 100, disposed: 7 days) with totalCount",
        "query($from: DateTime) { dispositions(first: 100, disposed: { from: $from }) { totalCount edges { node { id } } } }",
    ),
    (
        "questions(first: 100, asked: {from}) with totalCount",
        "query($costFrom: DateTime) { questions(first: 100, asked: { from: $costFrom }) { totalCount edges { node { id } } } }",
    ),
];

async fn gql(client: &reqwest::Client, url: &str, token: &str, query: &str, vars: Value) -> Value {
    let resp = client.post(url).bearer_auth(token).json(&json!({ "query": query, "variables": vars })).send().await;
    let body: Value = match resp {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    if body.get("errors").is_some() || body.is_null() {
        eprintln!("request failed: {body}");
    }
    body
}

async fn explain(db: &DatabaseConnection, title: &str, sql: &str, values: &[SeaValue]) -> Result<(), AnyError> {
    let tx = db.begin().await?;
    tx.execute_unprepared(
        "SELECT set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', 'bench', true)",
    )
    .await?;
    let rows = tx.query_all_raw(stmt(&format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}"), values.to_vec())).await?;
    tx.rollback().await?;
    println!("\n`{title}`:\n\n```");
    for row in rows {
        let line: String = row.try_get_by_index(0)?;
        println!("{line}");
    }
    println!("```");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let argv: Vec<String> = std::env::args().collect();
    let runs: usize = argv.windows(2).find(|w| w[0] == "--runs").and_then(|w| w[1].parse().ok()).unwrap_or(40);
    let scratch = scratch_database("wl_reads").await?;
    let owner = db::connect(&scratch.url, 4).await?;
    eprintln!("seeding {UNITS} units and {} events...", UNITS * EVENTS_PER_UNIT);
    let seeding = Instant::now();
    for sql in SEED {
        owner.execute_unprepared(sql).await?;
    }
    let counts = owner
        .query_one_raw(stmt(
            "SELECT (SELECT count(*) FROM work_units) AS units, (SELECT count(*) FROM work_unit_events) AS events",
            [],
        ))
        .await?
        .ok_or("no counts")?;
    let (units, events): (i64, i64) = (counts.try_get("", "units")?, counts.try_get("", "events")?);
    eprintln!("seeded {units} units, {events} events in {:.1} s", seeding.elapsed().as_secs_f64());

    let (secret, hash) = auth::new_token();
    db::tokens::insert(&owner, "bench", "reader", &Role::Reader.permissions(), &hash).await?;
    let app = Application::build(Ledger::new(db::connect(&scratch.url, 16).await?), "127.0.0.1:0").await?;
    let url = format!("http://{}/graphql", app.local_addr()?);
    tokio::spawn(app.run_until(std::future::pending()));
    let client = reqwest::Client::new();

    // Nested units pages, walking forward from the start.
    let mut nested = Samples::default();
    let mut after = Value::Null;
    for _ in 0..runs {
        let page = timed(&mut nested, gql(&client, &url, &secret, NESTED, json!({ "after": after }))).await;
        after = page["data"]["units"]["pageInfo"]["endCursor"].clone();
    }

    // Walk to page 100 of the events, then time that page.
    let mut cursor = Value::Null;
    for _ in 0..99 {
        let page = gql(&client, &url, &secret, EVENTS, json!({ "after": cursor })).await;
        cursor = page["data"]["events"]["pageInfo"]["endCursor"].clone();
    }
    let mut deep = Samples::default();
    for _ in 0..runs {
        let page = timed(&mut deep, gql(&client, &url, &secret, EVENTS, json!({ "after": cursor }))).await;
        assert_eq!(page["data"]["events"]["edges"].as_array().map(Vec::len), Some(500));
    }

    let mut summary = Samples::default();
    for _ in 0..runs {
        timed(&mut summary, gql(&client, &url, &secret, SUMMARY, json!({}))).await;
    }

    let first_cost = owner
        .query_one_raw(stmt("SELECT min(created_at) AS t FROM work_unit_events WHERE event_type = 'cost_recorded'", []))
        .await?
        .ok_or("no cost records")?;
    let first_cost: chrono::DateTime<chrono::Utc> = first_cost.try_get("", "t")?;
    let now = chrono::Utc::now();
    let week = Range { from: Some(now - chrono::Duration::days(7)), until: Some(now) };
    let costs = Range { from: Some(first_cost), until: Some(first_cost + chrono::Duration::seconds(100)) };
    let vars = json!({
        "from": week.from.map(|t| t.to_rfc3339()),
        "until": week.until.map(|t| t.to_rfc3339()),
        "costFrom": costs.from.map(|t| t.to_rfc3339()),
        "costTo": costs.until.map(|t| t.to_rfc3339()),
    });

    // The grouped reads: every grouping plain, over a range, for one domain,
    // and both; each through the server, then its statement alone over the
    // pool as the application role (the ceiling).
    let mut grouped: Vec<Grouped> = Vec::new();
    for &(label, ranged, one_domain) in VARIANTS {
        let domain = one_domain.then_some("cobol");
        for g in GROUPS {
            let mut v = json!({ "g": g, "domain": domain });
            if ranged {
                v["costFrom"] = vars["costFrom"].clone();
                v["costTo"] = vars["costTo"].clone();
            }
            let r = if ranged { costs } else { Range::default() };
            let q = aggregates::cost_summary_query("bench", cost_group(g), &r, domain);
            let name = format!("costSummary(groupBy: {g}{label})");
            grouped.push(measure(&client, &url, &secret, &owner, name, COST, v, q, runs).await?);
        }
        for b in ["DAY", "WEEK"] {
            let mut v = json!({ "b": b, "domain": domain });
            if ranged {
                v["from"] = vars["from"].clone();
                v["until"] = vars["until"].clone();
            }
            let r = if ranged { week } else { Range::default() };
            let q = aggregates::throughput_query("bench", &b.to_lowercase(), &r, domain);
            let name = format!("throughput(bucket: {b}{})", label.replace("to: costs", "until: 7 days"));
            grouped.push(measure(&client, &url, &secret, &owner, name, THROUGHPUT, v, q, runs).await?);
        }
    }

    let mut operator = Vec::new();
    for (name, query) in OPERATOR {
        let mut samples = Samples::default();
        for _ in 0..runs {
            timed(&mut samples, gql(&client, &url, &secret, query, vars.clone())).await;
        }
        operator.push((*name, samples));
    }

    println!("Machine: {}", support::machine(&owner).await?);
    println!("Load average while it ran: {} (1, 5, 15 min, at the end)", load_average());
    println!("Ledger: {units} units, {events} events; {runs} requests per query, sequential, over HTTP\n");
    println!("| query | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: |");
    for (name, s) in [
        ("units(first: 500) with attempts and openQuestion", &nested),
        ("events(first: 500), page 100", &deep),
        ("dispositionSummary", &summary),
    ] {
        println!("| {name} | {:.1} | {:.1} |", s.pct(0.5), s.pct(0.99));
    }
    for (name, s) in &operator {
        println!("| {name} | {:.1} | {:.1} |", s.pct(0.5), s.pct(0.99));
    }
    println!("\nThe grouped reads (groups returned; over HTTP, and the same statement alone over the pool):\n");
    println!("| query | groups | p50 ms | p99 ms | SQL alone p50 ms | SQL alone p99 ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for g in &grouped {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            g.name,
            g.rows,
            g.http.pct(0.5),
            g.http.pct(0.99),
            g.sql.pct(0.5),
            g.sql.pct(0.99)
        );
    }
    let worst = grouped.iter().map(|g| g.http.pct(0.99)).fold(0.0, f64::max);
    println!("\nWorst grouped p99 over HTTP: {worst:.1} ms");

    let deep_cursor = cursor.as_str().and_then(|c| {
        <work_ledger::ledger::cursor::Cursor as work_ledger::ledger::cursor::CursorText>::decode(
            work_ledger::ledger::cursor::List::Events,
            c,
        )
        .ok()
    });
    let (t, i) = deep_cursor.map(|c| (c.created_at.to_rfc3339(), c.id.to_string())).unwrap_or_default();
    explain(
        &owner,
        "units page",
        "SELECT u.* FROM work_units u WHERE u.fleet = 'bench' ORDER BY u.created_at, u.id LIMIT 501",
        &[],
    )
    .await?;
    explain(&owner, "attempts of the page's units (DataLoader)", "SELECT a.* FROM work_unit_attempts a WHERE a.unit_id = ANY(ARRAY(SELECT id FROM work_units WHERE fleet = 'bench' ORDER BY created_at, id LIMIT 500))", &[]).await?;
    explain(
        &owner,
        "events page 100",
        &format!("SELECT e.* FROM work_unit_events e WHERE e.fleet = 'bench' AND (e.created_at, e.id) < ('{t}', '{i}') ORDER BY e.created_at DESC, e.id DESC LIMIT 501"),
        &[],
    )
    .await?;
    explain(
        &owner,
        "dispositionSummary",
        "SELECT d.disposition, coalesce(sum(s.units), 0), coalesce(sum(s.cost_cents), 0) FROM unnest(enum_range(NULL::disposition)) AS d(disposition) LEFT JOIN v_disposition_summary s ON s.disposition = d.disposition AND s.fleet = 'bench' GROUP BY d.disposition",
        &[],
    )
    .await?;
    for g in &grouped {
        let (sql, values) = g.statement.parts();
        explain(&owner, &g.name, sql, values).await?;
    }
    let week_ago = week.from.map(|t| t.to_rfc3339()).unwrap_or_default();
    let (cost_from, cost_to) = (
        costs.from.map(|t| t.to_rfc3339()).unwrap_or_default(),
        costs.until.map(|t| t.to_rfc3339()).unwrap_or_default(),
    );
    for (title, sql) in [
        (
            "totalCount of units(filter: {domain})".to_owned(),
            "SELECT count(*) FROM (SELECT u.id FROM work_units u WHERE u.fleet = 'bench' AND u.domain = 'cobol') listed".to_owned(),
        ),
        (
            "units(filter: {stalled: false}, order: DESC)".to_owned(),
            "SELECT u.* FROM work_units u WHERE u.fleet = 'bench' AND NOT (u.state IN ('claimed', 'in_progress') AND u.lease_expires_at < now()) ORDER BY u.created_at DESC, u.id DESC LIMIT 101".to_owned(),
        ),
        (
            "units(filter: {from, until})".to_owned(),
            format!("SELECT u.* FROM work_units u WHERE u.fleet = 'bench' AND u.created_at >= '{cost_from}' AND u.created_at < '{cost_to}' ORDER BY u.created_at, u.id LIMIT 101"),
        ),
        (
            "events(filter: {from, until}, order: ASC)".to_owned(),
            format!("SELECT e.* FROM work_unit_events e WHERE e.fleet = 'bench' AND e.created_at >= '{cost_from}' AND e.created_at < '{cost_to}' ORDER BY e.created_at, e.id LIMIT 101"),
        ),
        (
            "dispositions(disposed: 7 days)".to_owned(),
            format!("SELECT u.* FROM v_disposition_detail v JOIN work_units u ON u.id = v.unit_id WHERE v.fleet = 'bench' AND v.disposed_at >= '{week_ago}' ORDER BY u.created_at, u.id LIMIT 101"),
        ),
        (
            "questions(asked: {from, until})".to_owned(),
            format!("SELECT q.* FROM blocking_questions q WHERE q.fleet = 'bench' AND q.created_at >= '{cost_from}' AND q.created_at < '{cost_to}' ORDER BY q.created_at, q.id LIMIT 101"),
        ),
    ] {
        explain(&owner, &title, &sql, &[]).await?;
    }

    owner.close().await?;
    if let Some(pg) = scratch.embedded {
        pg.stop().await;
    }
    if worst >= 100.0 {
        eprintln!("a grouped read's p99 is {worst:.1} ms, over the 100 ms target");
    }
    Ok(())
}

/// (label, over a range, for one domain). The cost range is `$costFrom`/`$costTo`.
const VARIANTS: &[(&str, bool, bool)] = &[
    ("", false, false),
    (", from, to: costs", true, false),
    (", domain", false, true),
    (", from, to: costs, domain", true, true),
];

fn cost_group(g: &str) -> CostGroup {
    match g {
        "DOMAIN" => CostGroup::Domain,
        "DISPOSITION" => CostGroup::Disposition,
        "STATE" => CostGroup::State,
        _ => CostGroup::Agent,
    }
}

/// One grouped read: its timings over HTTP and alone, and its statement.
struct Grouped {
    name: String,
    rows: usize,
    http: Samples,
    sql: Samples,
    statement: Query,
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    owner: &DatabaseConnection,
    name: String,
    query: &str,
    vars: Value,
    statement: Query,
    runs: usize,
) -> Result<Grouped, AnyError> {
    let mut http = Samples::default();
    let mut rows = 0;
    for _ in 0..runs {
        let body = timed(&mut http, gql(client, url, token, query, vars.clone())).await;
        let list = body["data"].as_object().and_then(|d| d.values().next()).and_then(Value::as_array);
        rows = list.map(Vec::len).ok_or_else(|| format!("{name} failed: {body}"))?;
    }
    let mut sql = Samples::default();
    let (text, values) = statement.parts();
    for _ in 0..runs {
        let tx = owner.begin().await?;
        tx.execute_unprepared(
            "SELECT set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', 'bench', true)",
        )
        .await?;
        timed(&mut sql, tx.query_all_raw(stmt(text, values.to_vec()))).await?;
        tx.rollback().await?;
    }
    Ok(Grouped { name, rows, http, sql, statement })
}

/// The machine's load average (1, 5 and 15 minutes), as /proc/loadavg has it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
