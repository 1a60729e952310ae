//! Read-path benchmark on a ledger of any size (issue 27; SPEC §7, §11).
//!
//!   cargo bench --bench reads -- [--units 100000] [--events 1000000] [--readers 16] [--runs 5]
//!   cargo bench --bench reads -- --units 1000000 --events 10000000 --backup
//!   cargo bench --bench reads -- ... --skip-audit    # no audit after the seed
//!   cargo bench --bench reads -- ... --only events   # the reads whose name contains `events`
//!   cargo bench --bench reads -- ... --keep          # keeps the ledger, prints its URL
//!   cargo bench --bench reads -- --ledger NAME       # reads a kept ledger again (migrated first)
//!
//! Builds the ledger in bulk (`support::seed`: ten fleets, `bench` holding
//! half; audited clean before anything is measured), then times every
//! operator read of SPEC §7 for the big fleet over HTTP, and every SQL panel
//! of the Grafana dashboards as a reader login of that fleet: each read by
//! `--readers` concurrent clients, `--runs` times each. Prints a Markdown
//! report with the plans of the slowest statements, and last one line a
//! script can compare:
//!
//!   reads: units=N events=M worst_p99_ms=X worst=<read name>
//!
//! With `--backup` it times `backup`, `restore` into a new database and the
//! restored ledger's audit instead, and ends with
//! `backup: units=N events=M backup_s=X restore_s=Y audit_clean=true`.
//!
//! Uses DATABASE_URL when set (a scratch database is created next to it),
//! otherwise an embedded PostgreSQL in a temporary folder.

mod support;

/// The service's allocator (src/main.rs): the server runs in this process.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use support::seed::{self, FLEET};
use support::{AnyError, Samples, scratch_database};
use work_ledger::auth::{self, Role};
use work_ledger::db::{self, reader_logins, stmt};
use work_ledger::http::{Application, ServerConfig};
use work_ledger::ledger::Ledger;
use work_ledger::operator::{audit, backup};

struct Args {
    units: i64,
    events: i64,
    readers: usize,
    runs: usize,
    keep: bool,
    /// Time `backup` and `restore` of the seeded ledger (and the audit of the
    /// restored copy) instead of the reads.
    backup: bool,
    /// Only the reads whose name contains this (`--only events`).
    only: Option<String>,
    /// A ledger a `--keep` run left on the server of DATABASE_URL, read
    /// again after the current migrations (no seed, no audit).
    ledger: Option<String>,
    /// Seed without the audit (`--skip-audit`): at 10,000,000 events the
    /// audit's projection checks refold the whole log.
    skip_audit: bool,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    let get = |flag: &str| argv.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone());
    let units = get("--units").and_then(|v| v.parse().ok()).unwrap_or(100_000);
    Args {
        units,
        events: get("--events").and_then(|v| v.parse().ok()).unwrap_or(units * seed::MIN_EVENTS_PER_UNIT),
        readers: get("--readers").and_then(|v| v.parse().ok()).unwrap_or(16).max(1),
        runs: get("--runs").and_then(|v| v.parse().ok()).unwrap_or(5).max(1),
        keep: argv.iter().any(|a| a == "--keep"),
        backup: argv.iter().any(|a| a == "--backup"),
        only: get("--only"),
        ledger: get("--ledger"),
        skip_audit: argv.iter().any(|a| a == "--skip-audit"),
    }
}

/// One read: a GraphQL request of the big fleet's reader token, or a
/// dashboard panel's SQL as the fleet's reader login.
#[derive(Clone)]
enum Read {
    Graphql(String, Value),
    Panel(String),
}

struct Measured {
    name: String,
    read: Read,
    samples: Samples,
    /// Requests that took longer than [`GIVE_UP`] (counted at that time).
    timed_out: usize,
}

/// A reader gives up on a request after this long: it counts as this slow,
/// and the read is reported with its time-outs.
const GIVE_UP: Duration = Duration::from_secs(10);

/// The connections one reader login may hold (`ledger_admit_reader`).
const READER_CONNECTIONS: usize = 4;

/// The reads of SPEC §7 for the big fleet: `$from`/`$until` are the 30 days
/// up to the fleet's newest event, `$unit` a reworked unit with a question.
fn graphql_reads() -> Vec<(&'static str, &'static str)> {
    let mut reads = vec![
        ("queueDepth", "{ queueDepth { domain ready claimed inProgress blocked verified stalled } }"),
        ("queueDepth(domain)", "{ queueDepth(domain: \"cobol\") { domain ready stalled } }"),
        ("stalls(first: 100) with totalCount", "{ stalls(first: 100) { totalCount edges { node { id } } } }"),
        ("costTotal", "{ costTotal { units costCents } }"),
        (
            "costTotal(from, to: 30 days)",
            "query($from: DateTime, $until: DateTime) { costTotal(from: $from, to: $until) { units costCents } }",
        ),
        ("dispositionSummary", "{ dispositionSummary { disposition count costCents } }"),
        ("dispositionSummary(domain)", "{ dispositionSummary(domain: \"cobol\") { disposition count costCents } }"),
        (
            "weeklyMetrics",
            "{ weeklyMetrics { week claims verifiedClaims disposed reworked verifiedUnits medianCycleSeconds } }",
        ),
        (
            "weeklyMetrics(from, until: 12 weeks)",
            "query($weeks: DateTime, $until: DateTime) { weeklyMetrics(from: $weeks, until: $until) { week claims disposed } }",
        ),
        ("claimingAgents", "{ claimingAgents { day agents claims live blocked silent } }"),
        (
            "claimingAgents(from, until: 30 days)",
            "query($from: DateTime, $until: DateTime) { claimingAgents(from: $from, until: $until) { day agents claims } }",
        ),
        (
            "rework(first: 100) with totalCount",
            "{ rework(first: 100) { totalCount edges { node { id attemptCount } } } }",
        ),
        (
            "dispositions(first: 100, disposed: 30 days) with totalCount",
            "query($from: DateTime) { dispositions(first: 100, disposed: { from: $from }) { totalCount edges { node { id } } } }",
        ),
        (
            "dispositions(first: 100, disposition: DEAD) with totalCount",
            "{ dispositions(first: 100, disposition: DEAD) { totalCount edges { node { id } } } }",
        ),
        (
            "a unit's history: unit(id) with attempts, questions, events(first: 100)",
            "query($unit: UUID!) { unit(id: $unit) { state attempts { attemptNo agentId outcome costCents } questions { question answer } events(first: 100) { totalCount edges { node { eventType createdAt } } } } }",
        ),
        ("units(first: 100) with totalCount", "{ units(first: 100) { totalCount edges { node { id } } } }"),
        (
            "units(first: 100, filter: {domain}) with totalCount",
            "{ units(first: 100, filter: { domain: \"cobol\" }) { totalCount edges { node { id } } } }",
        ),
        (
            "units(first: 100, filter: {state: READY}) with totalCount",
            "{ units(first: 100, filter: { state: READY }) { totalCount edges { node { id } } } }",
        ),
        (
            "units(first: 100, filter: {from, until: 30 days}, order: DESC) with totalCount",
            "query($from: DateTime, $until: DateTime) { units(first: 100, filter: { from: $from, until: $until }, order: DESC) { totalCount edges { node { id } } } }",
        ),
        (
            "units(first: 500) with attempts and openQuestion",
            "{ units(first: 500, order: DESC) { edges { node { id externalRef state attempts { attemptNo agentId outcome costCents } openQuestion { id question } } } } }",
        ),
        ("events(first: 100) with totalCount", "{ events(first: 100) { totalCount edges { node { id eventType } } } }"),
        (
            "events(first: 100, filter: {from, until: 30 days}) with totalCount",
            "query($from: DateTime, $until: DateTime) { events(first: 100, filter: { from: $from, until: $until }) { totalCount edges { node { id } } } }",
        ),
        (
            "events(first: 100, filter: {types: [DISPOSED]}) with totalCount",
            "{ events(first: 100, filter: { types: [DISPOSED] }) { totalCount edges { node { id } } } }",
        ),
        (
            "events(first: 100, filter: {agentId}) with totalCount",
            "{ events(first: 100, filter: { agentId: \"agent-007\" }) { totalCount edges { node { id } } } }",
        ),
        (
            "events(first: 100, filter: {agentId}) of an agent without events, with totalCount",
            "{ events(first: 100, filter: { agentId: \"agent-none\" }) { totalCount edges { node { id } } } }",
        ),
        (
            "questions(first: 100, asked: 30 days) with totalCount",
            "query($from: DateTime) { questions(first: 100, asked: { from: $from }) { totalCount edges { node { id } } } }",
        ),
        ("openQuestionGroups", "{ openQuestionGroups { question waiting oldestAskedAt } }"),
        ("agents(first: 100)", "{ agents(first: 100) { edges { node { name status } } } }"),
        ("costPerUnit(first: 100)", "{ costPerUnit(first: 100) { edges { node { costCents attemptCount } } } }"),
    ];
    // What MCP and the CLI read after every write: the contract's unit selection.
    reads.push((
        "a unit as MCP and the CLI answer with it: unit(id) with the contract's unit selection",
        leak(format!(
            "query($unit: UUID!) {{ unit(id: $unit) {} }}",
            work_ledger::contract::UNIT.replace("SURFACE", "MCP")
        )),
    ));
    for g in ["DOMAIN", "DISPOSITION", "STATE", "AGENT"] {
        reads.extend(
            COST_VARIANTS
                .iter()
                .map(|(label, q)| (leak(format!("costSummary(groupBy: {g}{label})")), leak(q.replace("GROUP", g)))),
        );
    }
    for b in ["DAY", "WEEK"] {
        reads.extend(
            THROUGHPUT_VARIANTS
                .iter()
                .map(|(label, q)| (leak(format!("throughput(bucket: {b}{label})")), leak(q.replace("BUCKET", b)))),
        );
    }
    reads
}

const COST_VARIANTS: &[(&str, &str)] = &[
    ("", "{ costSummary(groupBy: GROUP) { key units costCents } }"),
    (
        ", from, to: 30 days",
        "query($from: DateTime, $until: DateTime) { costSummary(groupBy: GROUP, from: $from, to: $until) { key units costCents } }",
    ),
    (", domain", "{ costSummary(groupBy: GROUP, domain: \"cobol\") { key units costCents } }"),
    (
        ", from, to: 30 days, domain",
        "query($from: DateTime, $until: DateTime) { costSummary(groupBy: GROUP, from: $from, to: $until, domain: \"cobol\") { key units costCents } }",
    ),
];

const THROUGHPUT_VARIANTS: &[(&str, &str)] = &[
    ("", "{ throughput(bucket: BUCKET) { start disposition count costCents distinctAgents } }"),
    (
        ", from, until: 30 days",
        "query($from: DateTime, $until: DateTime) { throughput(bucket: BUCKET, from: $from, until: $until) { start disposition count distinctAgents } }",
    ),
    (", domain", "{ throughput(bucket: BUCKET, domain: \"cobol\") { start disposition count distinctAgents } }"),
    (
        ", from, until: 30 days, domain",
        "query($from: DateTime, $until: DateTime) { throughput(bucket: BUCKET, from: $from, until: $until, domain: \"cobol\") { start count } }",
    ),
];

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Every SQL panel of the Grafana dashboards, by title.
fn panels() -> Result<Vec<(String, String)>, AnyError> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/dashboards");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    files.sort_by_key(|f| f.path());
    for file in files {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(file.path())?)?;
        for panel in dashboard["panels"].as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(sql) = target["rawSql"].as_str() {
                    let title = panel["title"].as_str().unwrap_or("?");
                    out.push((format!("panel: {} ({})", title, panel["type"].as_str().unwrap_or("?")), sql.to_owned()));
                }
            }
        }
    }
    Ok(out)
}

/// The server, and one token per reader.
struct Http {
    client: reqwest::Client,
    url: String,
    tokens: Vec<String>,
}

/// POSTs `query` with `vars` as `token`.
async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    vars: &Value,
) -> Result<reqwest::Response, AnyError> {
    Ok(client.post(url).bearer_auth(token).json(&json!({ "query": query, "variables": vars })).send().await?)
}

async fn gql(client: &reqwest::Client, url: &str, token: &str, query: &str, vars: &Value) -> Result<Value, AnyError> {
    let body: Value = post(client, url, token, query, vars).await?.json().await?;
    if body.get("errors").is_some() || body.get("data").is_none_or(Value::is_null) {
        return Err(format!("{query} failed: {body}").into());
    }
    Ok(body)
}

/// What a timed read checks of its answer: valid JSON with `data` and
/// without `errors`. The bench's clients share the two cores with the
/// server, so they do not build the answer's tree ([`IgnoredAny`] reads past
/// each value): that work is a dashboard's, on its own machine.
#[derive(serde::Deserialize)]
struct Checked {
    data: Option<IgnoredAny>,
    errors: Option<IgnoredAny>,
}

/// [`gql`] for a timed read: the answer checked, not kept.
async fn gql_timed(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    vars: &Value,
) -> Result<(), AnyError> {
    let body = post(client, url, token, query, vars).await?.bytes().await?;
    match serde_json::from_slice::<Checked>(&body) {
        Ok(Checked { data: Some(_), errors: None }) => Ok(()),
        _ => Err(format!("{query} failed: {}", String::from_utf8_lossy(&body)).into()),
    }
}

/// `readers` clients, each running the read `runs` times back to back.
async fn measure(
    read: &Read,
    readers: usize,
    runs: usize,
    http: &Http,
    panel_dbs: &[DatabaseConnection],
) -> Result<(Samples, usize), AnyError> {
    let mut tasks = tokio::task::JoinSet::new();
    let start = Arc::new(tokio::sync::Barrier::new(readers));
    for reader in 0..readers {
        let (read, start) = (read.clone(), start.clone());
        let (client, url) = (http.client.clone(), http.url.clone());
        let token = http.tokens[reader % http.tokens.len()].clone();
        let db = panel_dbs[reader / READER_CONNECTIONS % panel_dbs.len()].clone();
        tasks.spawn(async move {
            start.wait().await;
            let mut times: Vec<Duration> = Vec::with_capacity(runs);
            let mut timed_out = 0;
            for _ in 0..runs {
                let t = Instant::now();
                let once = async {
                    match &read {
                        Read::Graphql(query, vars) => gql_timed(&client, &url, &token, query, vars).await,
                        Read::Panel(sql) => {
                            db.query_all_raw(stmt(sql, [])).await.map(|_| ()).map_err(|e| format!("{sql}: {e}").into())
                        }
                    }
                };
                // A statement cancelled at GIVE_UP comes back as an error just after it.
                match tokio::time::timeout(GIVE_UP + Duration::from_secs(2), once).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) | Err(_) if t.elapsed() >= GIVE_UP => timed_out += 1,
                    Ok(Err(e)) => return Err(e),
                    Err(_) => timed_out += 1,
                }
                times.push(t.elapsed());
            }
            Ok::<_, AnyError>((times, timed_out))
        });
    }
    let (mut samples, mut timed_out) = (Samples::default(), 0);
    while let Some(done) = tasks.join_next().await {
        let (times, late) = done??;
        samples.0.extend(times);
        timed_out += late;
    }
    Ok((samples, timed_out))
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = args();
    let (scratch, seeded, seed_s, audit_s) = match &args.ledger {
        Some(name) => {
            let scratch = support::kept_database(name).await?;
            let owner = db::connect(&scratch.url, 1).await?;
            let seeded = seed::counted(&owner).await?;
            eprintln!("reading the kept ledger {name}: {} units, {} events", seeded.units, seeded.events);
            owner.close().await?;
            (scratch, seeded, 0.0, 0.0)
        }
        None => {
            let scratch = scratch_database("wl_reads").await?;
            // One session: the seed's settings and temporary tables are its own.
            let owner = db::connect(&scratch.url, 1).await?;
            eprintln!("seeding {} units and {} events...", args.units, args.events);
            let seeding = Instant::now();
            let seeded = seed::seed(&owner, args.units, args.events).await?;
            let seed_s = seeding.elapsed().as_secs_f64();
            eprintln!("seeded {} units, {} events in {seed_s:.1} s; auditing...", seeded.units, seeded.events);
            let auditing = Instant::now();
            let findings = if args.skip_audit { Vec::new() } else { audit::run(&owner, None).await? };
            let audit_s = auditing.elapsed().as_secs_f64();
            if let Some(first) = findings.first() {
                return Err(format!(
                    "the seeded ledger breaks the audit ({} findings), first: {first:?}",
                    findings.len()
                )
                .into());
            }
            if args.skip_audit {
                eprintln!("not audited (--skip-audit)");
            } else {
                eprintln!("audit clean in {audit_s:.1} s");
            }
            owner.close().await?;
            (scratch, seeded, seed_s, audit_s)
        }
    };
    let owner = db::connect(&scratch.url, 1).await?;
    if args.backup {
        return backup_and_restore(&scratch, &owner, &seeded, seed_s, audit_s).await;
    }

    // One token per reader, as sixteen dashboards would have: the service
    // runs one fleet-wide read per token at a time (SPEC §9).
    let mut secrets = Vec::new();
    for i in 0..args.readers {
        let (secret, hash) = auth::new_token();
        db::tokens::insert(&owner, FLEET, &format!("reader-{i}"), &Role::Reader.permissions(), &hash).await?;
        secrets.push(secret);
    }
    // Every statement is cancelled when its reader gives up, as the service's
    // own statement timeout would: an abandoned read must not load the next.
    let limits = db::SessionLimits { statement_timeout: GIVE_UP, ..db::SessionLimits::default() };
    // A reader login holds at most READER_CONNECTIONS connections (SPEC §8):
    // one login per that many readers, as that many Grafana instances would.
    let mut roles = Vec::new();
    let mut panel_dbs = Vec::new();
    for i in 0..args.readers.div_ceil(READER_CONNECTIONS) {
        let role = format!("wl_reads_{}_{i}", std::process::id());
        let password = auth::new_token().0;
        reader_logins::create(&owner, &role, FLEET, &password).await?;
        let mut reader_url = url::Url::parse(&scratch.url)?;
        reader_url.set_username(&role).map_err(|()| "reader url")?;
        reader_url.set_password(Some(&password)).map_err(|()| "reader url")?;
        panel_dbs.push(db::connect_limited(reader_url.as_str(), READER_CONNECTIONS as u32, limits).await?);
        roles.push(role);
    }

    // The reader warden ends a login's idle sessions beyond 2: the bench's
    // pools keep theirs between reads, so it does not run here.
    let mut config = ServerConfig::default();
    config.live.warden.interval = Duration::from_secs(24 * 3600);
    let app = Application::build_with(
        Ledger::new(db::connect_limited(&scratch.url, 16, limits).await?),
        "127.0.0.1:0",
        config,
    )
    .await?;
    let url = format!("http://{}/graphql", app.local_addr()?);
    tokio::spawn(app.run_until(std::future::pending()));
    let http = Http { client: reqwest::Client::new(), url, tokens: secrets };

    let unit = owner
        .query_one_raw(stmt(
            "SELECT u.id::text AS id FROM work_units u WHERE u.fleet = $1 AND u.attempt_count = 2
              ORDER BY u.created_at DESC LIMIT 1",
            [FLEET.into()],
        ))
        .await?
        .ok_or("no reworked unit")?;
    let unit: String = unit.try_get("", "id")?;
    // The ranges end at the fleet's newest event, not at the clock. A range
    // reads its whole UTC days from the day totals and the parts of a day it
    // cuts at each end from the rows: on a live ledger those two parts hold
    // a day of records together, at any hour. The seed writes nothing after
    // its last day, so ranges ending at the clock cut fewer rows the later in
    // the day the bench runs (half a day at noon, nothing at midnight), and
    // a ranged read measured up to twice as fast at 23:00 as at 00:45. (The
    // stall reports the bench's own server writes as it starts are not the
    // ledger's activity.)
    let newest = owner
        .query_one_raw(stmt(
            "SELECT max(created_at) AS at FROM work_unit_events WHERE fleet = $1 AND event_type <> 'stalled'",
            [FLEET.into()],
        ))
        .await?
        .ok_or("no events")?;
    let until: chrono::DateTime<chrono::Utc> =
        newest.try_get::<Option<chrono::DateTime<chrono::Utc>>>("", "at")?.ok_or("the fleet has no events")?;
    let range_end = until.to_rfc3339();
    let vars = json!({
        "from": (until - chrono::Duration::days(30)).to_rfc3339(),
        "weeks": (until - chrono::Duration::weeks(12)).to_rfc3339(),
        "until": until.to_rfc3339(),
        "unit": unit,
    });

    let mut reads: Vec<(String, Read)> = graphql_reads()
        .into_iter()
        .map(|(name, query)| (name.to_owned(), Read::Graphql(query.to_owned(), vars.clone())))
        .collect();
    // The events list a hundred pages deep (keyset: as fast as the first).
    const EVENTS: &str = "query($after: String) { events(first: 500, after: $after) {
        edges { node { id eventType createdAt } } pageInfo { endCursor } } }";
    let mut cursor = Value::Null;
    for _ in 0..99 {
        let page = gql(&http.client, &http.url, &http.tokens[0], EVENTS, &json!({ "after": cursor })).await?;
        cursor = page["data"]["events"]["pageInfo"]["endCursor"].clone();
    }
    reads.push((
        "events(first: 500), page 100".to_owned(),
        Read::Graphql(EVENTS.to_owned(), json!({ "after": cursor })),
    ));
    reads.extend(panels()?.into_iter().map(|(name, sql)| (name, Read::Panel(sql))));

    if let Some(only) = &args.only {
        reads.retain(|(name, _)| name.contains(only.as_str()));
    }
    // One untimed pass first, every reader at once: plans, pages and both
    // pools' connections are warm, as for dashboards that refresh every 30
    // seconds (before, the first read timed also paid for opening 15 of them).
    for (_, read) in &reads {
        measure(read, args.readers, 1, &http, &panel_dbs).await?;
    }
    let mut measured = Vec::new();
    for (name, read) in reads {
        let (samples, timed_out) = measure(&read, args.readers, args.runs, &http, &panel_dbs).await?;
        eprintln!("  {name}: p50 {:.1} ms, p99 {:.1} ms, {timed_out} timed out", samples.pct(0.5), samples.pct(0.99));
        measured.push(Measured { name, read, samples, timed_out });
    }

    println!("Machine: {}", support::machine(&owner).await?);
    println!("Load average while it ran: {} (1, 5, 15 min, at the end)", load_average());
    match &args.ledger {
        Some(name) => println!(
            "Ledger: {} units, {} events, 10 fleets; fleet `{FLEET}` holds half. The ledger {name} of an earlier run, migrated to this commit.",
            seeded.units, seeded.events
        ),
        None => println!(
            "Ledger: {} units, {} events, 10 fleets; fleet `{FLEET}` holds half. Seeded in {seed_s:.0} s, {}.",
            seeded.units,
            seeded.events,
            if args.skip_audit { "not audited".to_owned() } else { format!("audited clean in {audit_s:.0} s") }
        ),
    }
    println!(
        "Seed steps: {}",
        seeded.steps.iter().map(|(n, s)| format!("{n} {s:.0} s")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "{} concurrent readers, each read {} times per read (over HTTP as the fleet's reader token; panels as its reader login); \
         ranges of 30 days and 12 weeks up to the fleet's newest event, {}\n",
        args.readers, args.runs, range_end
    );
    println!("| read | p50 ms | p99 ms | gave up after {} s |", GIVE_UP.as_secs());
    println!("| --- | ---: | ---: | ---: |");
    for m in &measured {
        println!("| {} | {:.1} | {:.1} | {} |", m.name, m.samples.pct(0.5), m.samples.pct(0.99), m.timed_out);
    }
    let within = measured.iter().filter(|m| m.samples.pct(0.99) < 50.0).count();
    println!("\n{within} of {} reads under 50 ms p99.", measured.len());
    let mut by_p99: Vec<&Measured> = measured.iter().collect();
    by_p99.sort_by(|a, b| b.samples.pct(0.99).total_cmp(&a.samples.pct(0.99)));
    println!("\nPlans of the slowest panels (as the reader login):\n");
    for m in by_p99.iter().filter(|m| matches!(m.read, Read::Panel(_))).take(3) {
        if let Read::Panel(sql) = &m.read {
            // Analyzed when that takes seconds at most; planned only otherwise.
            let options = if m.samples.pct(0.5) < 5000.0 { "ANALYZE, BUFFERS, COSTS OFF" } else { "COSTS OFF" };
            let plan = panel_dbs[0].query_all_raw(stmt(&format!("EXPLAIN ({options}) {sql}"), [])).await?;
            println!("{}:\n```", m.name);
            for row in plan {
                println!("{}", row.try_get_by_index::<String>(0)?);
            }
            println!("```");
        }
    }
    for pool in panel_dbs {
        pool.close().await?;
    }
    let worst = by_p99.first().ok_or("no reads")?;
    let worst_p99 = worst.samples.pct(0.99);

    // A run's reader logins go with it (a rerun with `--ledger` makes its
    // own); what they were granted on a kept ledger goes first.
    let kept = args.keep || args.ledger.is_some();
    if kept {
        for role in &roles {
            owner.execute_unprepared(&format!("DROP OWNED BY {role}")).await?;
        }
        eprintln!("kept {} (--ledger {})", scratch.url, support::database_name(&scratch.url)?);
    } else if scratch.embedded.is_none() {
        owner.close().await?;
        support::drop_scratch(&scratch.url).await?;
    }
    for role in &roles {
        support::admin(&scratch.url, &format!("DROP ROLE IF EXISTS {role}")).await?;
    }
    if let Some(pg) = scratch.embedded {
        pg.stop().await;
    }
    println!(
        "\nreads: units={} events={} worst_p99_ms={worst_p99:.1} worst={}",
        seeded.units, seeded.events, worst.name
    );
    Ok(())
}

/// `work-ledger backup` of the seeded ledger, `restore` into a new database
/// beside it, and the audit of the restored copy, each timed.
async fn backup_and_restore(
    scratch: &support::Scratch,
    owner: &DatabaseConnection,
    seeded: &seed::Seeded,
    seed_s: f64,
    audit_s: f64,
) -> Result<(), AnyError> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("ledger.dump");
    let t = Instant::now();
    backup::backup(&scratch.url, &file).await?;
    let backup_s = t.elapsed().as_secs_f64();
    let size_mib = std::fs::metadata(&file)?.len() as f64 / (1024.0 * 1024.0);
    let name = format!("{}_restored", support::database_name(&scratch.url)?);
    let restored = support::empty_database(&scratch.url, &name).await?;
    let t = Instant::now();
    backup::restore(&restored, &file).await?;
    let restore_s = t.elapsed().as_secs_f64();
    let copy = db::connect(&restored, 1).await?;
    let t = Instant::now();
    let findings = audit::run(&copy, None).await?;
    let restored_audit_s = t.elapsed().as_secs_f64();
    copy.close().await?;
    println!("Machine: {}", support::machine(owner).await?);
    println!("Load average at the end: {} (1, 5, 15 min)", load_average());
    println!(
        "Ledger: {} units, {} events; seeded in {seed_s:.0} s, audited clean in {audit_s:.0} s.\n",
        seeded.units, seeded.events
    );
    println!("| step | seconds |");
    println!("| --- | ---: |");
    println!("| `backup` (pg_dump, custom format: {size_mib:.0} MiB) | {backup_s:.0} |");
    println!("| `restore` into a new database (pg_restore, one transaction, then migrate) | {restore_s:.0} |");
    println!("| `audit` of the restored ledger: {} findings | {restored_audit_s:.0} |", findings.len());
    if !findings.is_empty() {
        return Err(format!("the restored ledger has {} audit findings", findings.len()).into());
    }
    support::drop_scratch(&restored).await?;
    support::drop_scratch(&scratch.url).await?;
    println!(
        "\nbackup: units={} events={} backup_s={backup_s:.0} restore_s={restore_s:.0} audit_clean={}",
        seeded.units,
        seeded.events,
        findings.is_empty()
    );
    Ok(())
}

/// The machine's load average (1, 5 and 15 minutes), as /proc/loadavg has it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
