//! Issue 23: nothing outside the service stalls the ledger, and every
//! refusal is clean. Driven through the real server, the real CLI and real
//! PostgreSQL logins (a role with no grants, a `reader create` login).

use std::time::Duration;

use sea_orm::sqlx::{self, Connection};
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;
use work_ledger::live::WardenConfig;

use crate::helpers::{Agent, TestApp, spawn_app, spawn_app_with, test_config};
use crate::operator::{text, work_ledger};
use crate::ws_client::{Frame, Ws};

fn url_as(app: &TestApp, role: &str, password: &str, database: Option<&str>) -> String {
    let mut url = url::Url::parse(&app.db_url).expect("url");
    url.set_username(role).expect("user");
    url.set_password(Some(password)).expect("password");
    if let Some(database) = database {
        url.set_path(&format!("/{database}"));
    }
    url.to_string()
}

/// `work-ledger reader create` for fleet `f`; the login's name.
fn reader_login(app: &TestApp) -> String {
    let role = format!("grafana_o{}", uuid::Uuid::new_v4().simple());
    let out = work_ledger(app, &["reader", "create", "--fleet", "f", "--name", &role, "--password", "s3cret"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    role
}

async fn alive(conn: &mut sqlx::PgConnection) -> bool {
    sqlx::query("SELECT 1").execute(&mut *conn).await.is_ok()
}

/// Item 3: a reader login that lifts its own timeouts, LISTENs and sits in
/// a transaction is ended by the server's reader warden once the
/// transaction is older than the limit, in the ledger's database and in any
/// other of the cluster; a reader that holds no transaction, and the
/// service itself, are left alone.
#[tokio::test]
async fn the_reader_warden_ends_reader_transactions_past_the_limit_whatever_their_settings() {
    let mut config = test_config();
    config.live.warden = WardenConfig {
        interval: Duration::from_millis(200),
        max_transaction: Duration::from_secs(2),
        ..WardenConfig::default()
    };
    let app = spawn_app_with(config).await;
    let role = reader_login(&app);
    // Another database of the cluster the login reaches (an external
    // cluster's operator who has not closed it).
    let other = format!("wlt_other_{}", uuid::Uuid::new_v4().simple());
    app.create_closed_database(&other).await;
    app.sql(&format!("GRANT CONNECT ON DATABASE {other} TO {role}")).await;
    let mut pinning = Vec::new();
    for database in [None, Some(other.as_str())] {
        let mut conn = sqlx::PgConnection::connect(&url_as(&app, &role, "s3cret", database)).await.expect("connect");
        for sql in [
            "SET statement_timeout = 0",
            "SET idle_in_transaction_session_timeout = 0",
            "LISTEN work_ledger_events",
            "BEGIN",
            "SELECT count(*) FROM v_queue_depth",
        ] {
            if database.is_some() && sql.contains("v_queue_depth") {
                continue;
            }
            sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        pinning.push(conn);
    }
    let mut idle = sqlx::PgConnection::connect(&url_as(&app, &role, "s3cret", None)).await.expect("connect");
    sqlx::query("SET idle_in_transaction_session_timeout = 0").execute(&mut idle).await.expect("set");
    let op = app.token("f", "op", Role::Operator).await;

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for conn in &mut pinning {
        while alive(conn).await {
            assert!(std::time::Instant::now() < deadline, "a reader transaction outlived the limit by 28 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let open = app
        .sql_i64(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}' AND xact_start < now() - interval '3 s'"
        ))
        .await;
    assert_eq!(open, 0, "no reader transaction older than the limit is left");
    // Two more passes, the idle reader's session older than the limit by then.
    let mut passes = app.live.warden_passes();
    let seen = *passes.borrow_and_update();
    tokio::time::timeout(Duration::from_secs(10), passes.wait_for(|n| *n >= seen + 2))
        .await
        .expect("two warden passes within 10 s")
        .expect("passes");
    assert!(alive(&mut idle).await, "a reader without a transaction keeps its session");
    app.register(&op, &["after-the-warden"]).await;
    app.sql(&format!("DROP DATABASE {other} WITH (FORCE)")).await;
}

/// Item 3: CONNECT on the ledger's database is not PUBLIC's after
/// `migrate`: a login with no grants is refused, a reader login and the
/// service still connect.
#[tokio::test]
async fn a_login_with_no_grants_cannot_connect_to_the_ledger() {
    let app = spawn_app().await;
    let out = work_ledger(&app, &["migrate"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let nobody = format!("nobody_{}", uuid::Uuid::new_v4().simple());
    app.sql(&format!("CREATE ROLE {nobody} LOGIN PASSWORD 'pw'")).await;
    let refused = sqlx::PgConnection::connect(&url_as(&app, &nobody, "pw", None)).await;
    let err = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("permission denied for database"), "a role with no grants connected: {err:?}");
    let role = reader_login(&app);
    let mut reader = sqlx::PgConnection::connect(&url_as(&app, &role, "s3cret", None)).await.expect("reader connects");
    assert!(alive(&mut reader).await);
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["still-served"]).await;
    app.sql(&format!("DROP ROLE {nobody}")).await;
}

const ME: &str = "{ me { name } }";

/// Item 4: once a revocation has committed (what `token revoke` waits
/// for), the token's very next request is refused on every surface and
/// every replica, in every trial; a token used a moment before (so any
/// cache would hold it) included.
#[tokio::test]
async fn a_revoked_token_is_refused_at_once_on_every_surface_and_replica() {
    let app = spawn_app().await;
    let replica = app.spawn_replica().await;
    // An open question, which blockingQuestionOpened sends as soon as it runs.
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["q-1"]).await[0]["id"].as_str().expect("id").to_owned();
    let asker = Agent::new(&app, "f", "asker", Role::Agent).await;
    asker.claim_unit(&unit, json!({})).await.data();
    asker.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    asker.block(&unit, "which copybook?", json!({})).await.data();
    for trial in 0..15 {
        let name = format!("agent-{trial}");
        let token = app.token("f", &name, Role::Agent).await;
        let mut open = Ws::authenticated(&app, &token).await;
        for server in [&app, &replica] {
            server.gql(&token, ME, json!({})).await.data();
        }
        let id = app.sql_id(&format!("SELECT id::text AS id FROM api_tokens WHERE name = '{name}'")).await;
        if trial == 0 {
            let out = work_ledger(&app, &["token", "revoke", &id], None);
            assert!(out.status.success(), "{}", text(&out.stderr));
        } else {
            assert!(work_ledger::db::tokens::revoke(&app.owner, id.parse().expect("uuid")).await.expect("revoke"));
        }
        // First, a subscription on a connection opened before the revocation
        // (one that would send the open question at once): refused, or the
        // connection closed when the notice came first, never run.
        open.subscribe("1", "subscription { blockingQuestionOpened { id } }", json!({})).await;
        // Keepalive pings may come first (the server pings idle sockets; a
        // revocation that waited its turn at commit leaves time for one).
        let refusal = loop {
            match open.frame().await {
                Frame::Ping => continue,
                frame => break frame,
            }
        };
        match refusal {
            // 4403, or 1006 when the subscribe was written as the server
            // closed the socket (the close frame is lost with it); either
            // way nothing ran, and the token is refused everywhere below.
            Frame::Close(code, reason) => {
                assert!(code == 4403 || code == 1006, "trial {trial}: {code} {reason}")
            }
            Frame::Json(message) => {
                let errors = match message["type"].as_str() {
                    Some("error") => &message["payload"],
                    _ => &message["payload"]["errors"],
                };
                assert_eq!(errors[0]["extensions"]["code"], "UNAUTHENTICATED", "trial {trial}: {message:#}");
            }
            Frame::Ping => unreachable!("pings are skipped above"),
        }
        for server in [&app, &replica] {
            let post = server.gql(&token, ME, json!({})).await;
            assert_eq!(post.status, 401, "trial {trial}: POST {:#}", post.body);
            post.assert_code("UNAUTHENTICATED");
            let get = server
                .http
                .get(server.url("/graphql"))
                .query(&[("query", ME)])
                .header("authorization", format!("Bearer {token}"))
                .send()
                .await
                .expect("GET /graphql");
            assert_eq!(get.status(), 401, "trial {trial}: GET");
            let mcp = server
                .http
                .post(server.url("/mcp"))
                .header("authorization", format!("Bearer {token}"))
                .header("accept", "application/json, text/event-stream")
                .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
                .send()
                .await
                .expect("POST /mcp");
            assert_eq!(mcp.status(), 401, "trial {trial}: /mcp");
        }
        let mut ws = Ws::connect(&replica).await;
        ws.send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })).await;
        assert_eq!(ws.closed().await.0, 4403, "trial {trial}: connection_init");
    }
}

/// Item 5: fleet-wide reads are counted per operation, aliases of one
/// field per selection, both before anything runs.
#[tokio::test]
async fn one_request_runs_a_handful_of_fleet_wide_reads_and_few_aliases() {
    let app = spawn_app().await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let aliased =
        |field: &str, n: usize| format!("{{ {} }}", (0..n).map(|i| format!("a{i}: {field} ")).collect::<String>());
    app.gql(&reader, &aliased("queueDepth { ready }", 5), json!({})).await.data();
    for query in [
        aliased("queueDepth { ready }", 6),
        // The request: 10,000 aliases in about 240 KB.
        format!("{{{}}}", (0..10_000).map(|i| format!("q{i}:queueDepth{{ready}}")).collect::<String>()),
        "{ a: stalls { totalCount } b: units { totalCount } c: events { totalCount } d: questions { totalCount } \
         e: dispositionSummary { count } f: weeklyMetrics { week } }"
            .to_owned(),
        "fragment Q on Query { queueDepth { ready } costSummary(groupBy: DOMAIN) { units } } \
         { ...Q a: throughput(bucket: DAY) { count } b: claimingAgents { agents } c: rework { totalCount } \
           d: costPerUnit { totalCount } }"
            .to_owned(),
        aliased("serverTime", 11),
    ] {
        let refused = app.gql(&reader, &query, json!({})).await;
        refused.assert_code("GRAPHQL_VALIDATION_FAILED");
        assert!(refused.body.get("data").is_none_or(Value::is_null), "{:#}", refused.body);
    }
    app.gql(&reader, &aliased("serverTime", 10), json!({})).await.data();
}

/// Item 5: one token runs one fleet-wide read at a time; the others wait
/// for their turn without a database session, and other tokens are not
/// held back.
#[tokio::test]
async fn one_token_runs_a_bounded_number_of_fleet_wide_reads_at_once() {
    let app = spawn_app().await;
    let (greedy, other) = (app.token("f", "greedy", Role::Reader).await, app.token("g", "other", Role::Reader).await);
    // Every scan of work_units waits behind this lock, so reads pile up.
    let lock = app.owner.begin().await.expect("begin");
    lock.execute_unprepared("LOCK TABLE work_units IN ACCESS EXCLUSIVE MODE").await.expect("lock");
    // Four different reads: identical ones would share one execution
    // (`graphql::shared_reads`), and the limit would go untested.
    let reads: Vec<_> = (0..4)
        .map(|i| {
            let (app, token) = (&app, greedy.clone());
            let query = format!("{{ queueDepth(domain: \"d{i}\") {{ ready }} }}");
            async move { app.gql(&token, &query, json!({})).await }
        })
        .collect();
    let reads = futures::future::join_all(reads);
    let check = async {
        app.wait_for_lock_waiters(1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waiting =
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
        assert_eq!(app.sql_i64(waiting).await, 1, "one token's reads in the database at once");
        let theirs = app.gql(&other, "{ queueDepth { ready } }", json!({}));
        let unlock = async {
            app.wait_for_lock_waiters(2).await;
            lock.commit().await.expect("commit");
        };
        let (theirs, ()) = tokio::join!(theirs, unlock);
        theirs.data();
    };
    let (reads, ()) = tokio::join!(reads, check);
    for read in reads {
        read.data();
    }
}

const NUL_DOMAIN: &str = "a\u{0}b";

/// Item 8: a NUL in a domain filter and a date outside PostgreSQL's range
/// are INVALID_INPUT naming the argument, on every read that takes them.
#[tokio::test]
async fn nul_domains_and_dates_out_of_range_are_invalid_input_naming_the_argument() {
    let app = spawn_app().await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let cases = [
        ("query($d: String) { throughput(bucket: DAY, domain: $d) { count } }", json!({ "d": NUL_DOMAIN }), "domain"),
        (
            "query($d: String) { costSummary(groupBy: DOMAIN, domain: $d) { units } }",
            json!({ "d": NUL_DOMAIN }),
            "domain",
        ),
        ("query($t: DateTime) { throughput(bucket: WEEK, from: $t) { count } }", json!({}), "from"),
        ("query($t: DateTime) { weeklyMetrics(until: $t) { week } }", json!({}), "until"),
        ("query($t: DateTime) { claimingAgents(from: $t) { agents } }", json!({}), "from"),
        ("query($t: DateTime) { costSummary(groupBy: DOMAIN, to: $t) { units } }", json!({}), "to"),
        ("query($t: DateTime) { units(filter: { from: $t }) { totalCount } }", json!({}), "filter.from"),
        ("query($t: DateTime) { events(filter: { until: $t }) { totalCount } }", json!({}), "filter.until"),
        ("query($t: DateTime) { questions(asked: { from: $t }) { totalCount } }", json!({}), "asked.from"),
        ("query($t: DateTime) { dispositions(disposed: { until: $t }) { totalCount } }", json!({}), "disposed.until"),
    ];
    for (query, mut variables, argument) in cases {
        if variables.get("d").is_none() {
            variables = json!({ "t": "-5000-01-01T00:00:00Z" });
        }
        let resp = app.gql(&reader, query, variables).await;
        resp.assert_code("INVALID_INPUT");
        assert_eq!(resp.body["errors"][0]["extensions"]["argument"], argument, "{query}: {:#}", resp.body);
    }
    let mut ws = Ws::authenticated(&app, &reader).await;
    ws.subscribe(
        "1",
        "subscription($d: String) { unitStalled(domain: $d) { unit { id } } }",
        json!({ "d": NUL_DOMAIN }),
    )
    .await;
    let refusal = ws.message().await;
    let errors = match refusal["type"].as_str() {
        Some("error") => &refusal["payload"],
        _ => &refusal["payload"]["errors"],
    };
    assert_eq!(errors[0]["extensions"]["code"], "INVALID_INPUT", "{refusal:#}");
    assert_eq!(errors[0]["extensions"]["argument"], "domain", "{refusal:#}");
}

/// Item 9: Unicode format characters and line or paragraph separators are
/// refused in identifiers and links, with the argument named.
#[tokio::test]
async fn invisible_and_bidi_characters_are_refused_in_refs_and_links() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    for c in ['\u{061C}', '\u{FEFF}', '\u{2060}', '\u{00AD}', '\u{180E}', '\u{2028}', '\u{E0001}', '\u{202E}'] {
        let resp = app
            .gql(
                &op,
                "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }",
                json!({ "u": [{ "externalRef": format!("ref{c}1"), "domain": "d" }] }),
            )
            .await;
        resp.assert_code("INVALID_INPUT");
        assert_eq!(resp.body["errors"][0]["extensions"]["argument"], "units[0].externalRef");
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);
    let unit = app.register(&op, &["r-1"]).await[0]["id"].as_str().expect("id").to_owned();
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    agent.claim_unit(&unit, json!({})).await.data();
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let spoof = "https://ci.example/report\u{202E}fdp.1234";
    let resp = agent.transition(&unit, "VERIFIED", json!({ "evidence": spoof })).await;
    resp.assert_code("INVALID_INPUT");
    assert_eq!(resp.body["errors"][0]["extensions"]["argument"], "evidenceUrl");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE state = 'verified'").await, 0);
}

/// Item 10: every `--fleet` takes the fleet-name rule `token create` uses.
#[tokio::test]
async fn every_cli_fleet_follows_the_one_fleet_name_rule() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("b.csv");
    std::fs::write(&csv, "externalRef\nx-1\n").expect("write");
    let csv = csv.to_str().expect("path");
    let long = "f".repeat(5000);
    for fleet in ["quo\"te", long.as_str(), "a\u{202E}b", "new\nline", "-dash"] {
        // `--fleet=VALUE`, so that a value starting with `-` is still the value.
        let fleet = format!("--fleet={fleet}");
        for args in [
            vec!["import", csv, &fleet],
            vec!["audit", &fleet],
            vec!["token", "create", &fleet, "--name", "n", "--role", "agent"],
            vec!["reader", "create", &fleet, "--name", "r_never", "--password", "pw"],
        ] {
            let out = work_ledger(&app, &args, None);
            assert!(!out.status.success(), "{args:?} accepted");
            assert!(text(&out.stderr).contains("a fleet name is 1 to 63 ASCII letters"), "{}", text(&out.stderr));
        }
    }
    // Names are identifiers: no invisible formatting characters either.
    for args in [
        vec!["token", "create", "--fleet", "f", "--name", "agent\u{202E}1", "--role", "agent"],
        vec!["reader", "create", "--fleet", "f", "--name", "r\u{2060}x", "--password", "pw"],
    ] {
        let out = work_ledger(&app, &args, None);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(text(&out.stderr).contains("invisible formatting"), "{}", text(&out.stderr));
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);
    assert_eq!(app.sql_i64("SELECT count(*) FROM api_tokens").await, 0);
    assert_eq!(app.sql_i64("SELECT count(*) FROM fleet_readers").await, 0);
}

/// Item 10: `restore` hands its file to pg_restore after `--`, so a file
/// whose name starts with `-` is a file.
#[tokio::test]
async fn restore_reads_a_file_whose_name_starts_with_a_dash() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["kept"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |db_url: &str, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
            .args(args)
            .env("DATABASE_URL", db_url)
            .current_dir(dir.path())
            .output()
            .expect("run work-ledger")
    };
    let backup = run(&app.db_url, &["backup", "--out=-x.dump"]);
    assert!(backup.status.success(), "{}", text(&backup.stderr));
    let target = format!("wlt_dash_{}", uuid::Uuid::new_v4().simple());
    app.create_closed_database(&target).await;
    let mut url = url::Url::parse(&app.db_url).expect("url");
    url.set_path(&format!("/{target}"));
    let restore = run(url.as_str(), &["restore", "--", "-x.dump"]);
    assert!(restore.status.success(), "{}", text(&restore.stderr));
    let restored = work_ledger::db::connect(url.as_str(), 1).await.expect("connect");
    let row = restored
        .query_one_raw(work_ledger::db::stmt("SELECT count(*) AS n FROM work_units WHERE external_ref = 'kept'", []))
        .await
        .expect("count")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "n").expect("n"), 1);
    restored.close().await.expect("close");
    app.owner.execute_unprepared(&format!("DROP DATABASE {target} WITH (FORCE)")).await.expect("drop");
}

/// Item 10: a subscription sent by POST is refused with a code.
#[tokio::test]
async fn a_subscription_sent_by_post_is_refused_with_a_code() {
    let app = spawn_app().await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let resp = app.gql(&reader, "subscription { ledgerEvents { id } }", json!({})).await;
    resp.assert_code("INVALID_INPUT");
    assert_eq!(resp.body["errors"][0]["extensions"]["argument"], "query");
    assert!(resp.message().contains("/graphql/ws"), "{}", resp.message());
}
