//! Tokens that expire and say when they were used (issue 26, SPEC §8):
//! `token create --expires-in/--expires-at`, an expired token refused as
//! UNAUTHENTICATED on every surface saying when, its WebSockets closed at
//! the expiry, `last_used_at` written at most once a minute and off the
//! request's path, `token list` showing both, and `token revoke --unused-for`.

use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Gql, TestApp, spawn_app};
use crate::ws_client::{GUARD, Ws};

const QUESTIONS: &str = "subscription { blockingQuestionOpened { id question } }";

/// What the binary said.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `work-ledger token ...` against the test's database.
async fn token_cli(app: &TestApp, args: &[&str]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("token")
        .args(args)
        .env("DATABASE_URL", &app.db_url)
        .output()
        .await
        .expect("run work-ledger");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("utf8");
    Run { ok: out.status.success(), stdout: text(out.stdout), stderr: text(out.stderr) }
}

/// `token create` of an agent token named `name` with `flags`: its secret.
async fn create(app: &TestApp, name: &str, flags: &[&str]) -> String {
    let mut args = vec!["create", "--fleet", "f", "--name", name, "--role", "agent"];
    args.extend_from_slice(flags);
    let run = token_cli(app, &args).await;
    assert!(run.ok, "{flags:?}: {}", run.stderr);
    run.stdout.trim().to_owned()
}

async fn me(app: &TestApp, token: &str) -> Gql {
    app.gql(token, "{ me { name } }", json!({})).await
}

/// A column of the token named `name`, as text (`null` when NULL).
async fn column(app: &TestApp, name: &str, expression: &str) -> Value {
    app.sql_json(&format!("SELECT ({expression})::text AS v FROM api_tokens WHERE name = '{name}'")).await[0]["v"]
        .clone()
}

/// `expires_at` or `last_used_at` as `token list` and the refusals print it.
fn rfc3339(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")
}

/// Waits until `condition` (SQL) holds for the token named `name`.
async fn wait_until(app: &TestApp, name: &str, condition: &str) {
    let deadline = std::time::Instant::now() + GUARD;
    while column(app, name, condition).await != json!("true") {
        assert!(std::time::Instant::now() < deadline, "{name}: {condition} within the guard");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Makes the token named `name` expired a minute ago (minted an hour ago);
/// returns its expiry as the refusal quotes it.
async fn expire(app: &TestApp, name: &str) -> String {
    app.sql(&format!(
        "UPDATE api_tokens SET created_at = now() - interval '1 hour',
                expires_at = date_trunc('second', now()) - interval '1 minute' WHERE name = '{name}'"
    ))
    .await;
    column(app, name, &rfc3339("expires_at")).await.as_str().expect("expires_at").to_owned()
}

async fn mcp_initialize(app: &TestApp, token: &str) -> (u16, Value) {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "curl", "version": "1" } }
    });
    let resp = app
        .http
        .post(app.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .json(&initialize)
        .send()
        .await
        .expect("POST /mcp");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json body"))
}

#[tokio::test]
async fn an_expired_token_is_unauthenticated_on_every_surface_saying_when() {
    let app = spawn_app().await;
    let token = app.token("f", "pilot", Role::Triage).await;
    assert_eq!(me(&app, &token).await.data()["me"]["name"], "pilot", "it works while it lives");
    assert_eq!(mcp_initialize(&app, &token).await.0, 200);

    let at = expire(&app, "pilot").await;
    let says = format!("this token expired at {at}; ask an operator for a new one");

    let graphql = me(&app, &token).await;
    assert_eq!(graphql.status, 401, "{:#}", graphql.body);
    graphql.assert_code("UNAUTHENTICATED");
    assert!(graphql.message().starts_with(&says), "{}", graphql.message());

    let (status, body) = mcp_initialize(&app, &token).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED", "{body}");
    assert!(body["errors"][0]["message"].as_str().unwrap_or_default().starts_with(&says), "{body}");

    let mut ws = Ws::connect(&app).await;
    ws.send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })).await;
    let (code, reason) = ws.closed().await;
    assert_eq!(code, 4403, "{reason}");
    assert!(reason.starts_with(&format!("Forbidden: {says}")), "{reason}");

    // Expired is not revoked: `token list` tells the two apart.
    assert_eq!(column(&app, "pilot", "revoked_at").await, Value::Null);
}

#[tokio::test]
async fn a_live_websocket_closes_with_4403_at_its_token_s_expiry_and_only_its_own() {
    let app = spawn_app().await;
    let doomed = app.token("f", "short-lived", Role::Triage).await;
    let kept = app.token("f", "kept", Role::Triage).await;
    app.sql("UPDATE api_tokens SET expires_at = now() + interval '3 seconds' WHERE name = 'short-lived'").await;

    let mut ws = Ws::subscription(&app, &doomed, QUESTIONS, json!({})).await;
    let mut alive = Ws::subscription(&app, &kept, QUESTIONS, json!({})).await;
    // Open, and running its subscription, before the expiry.
    ws.send(json!({ "type": "ping" })).await;
    ws.expect_type("pong").await;

    // Bounded as a whole: the server's pings would keep `closed` waiting.
    let (code, reason) = tokio::time::timeout(GUARD, ws.closed()).await.expect("closed within the guard");
    assert_eq!(code, 4403, "{reason}");
    let at = column(&app, "short-lived", &rfc3339("expires_at")).await;
    let at = at.as_str().expect("expires_at");
    assert!(reason.contains(&format!("this token expired at {at}")), "{reason}");
    // At the expiry, not before it: the connection's timer runs from the
    // start of its token's lookup, which took less than a second.
    assert_eq!(column(&app, "short-lived", "now() > expires_at - interval '1 second'").await, json!("true"));

    alive.send(json!({ "type": "ping" })).await;
    alive.expect_type("pong").await;
}

#[tokio::test]
async fn last_use_is_recorded_off_the_request_s_path_at_most_once_a_minute() {
    let app = spawn_app().await;
    let agent = app.token("f", "agent-1", Role::Agent).await;
    let id = app.sql_id("SELECT id::text AS id FROM api_tokens WHERE name = 'agent-1'").await;
    assert_eq!(column(&app, "agent-1", "last_used_at").await, Value::Null, "never used");

    // While another session holds the token's row, a request still returns,
    // and its record of the use neither waits for the lock nor writes; the
    // first request after the lock is gone records it.
    let holder = app.owner.begin().await.expect("begin");
    holder
        .execute_unprepared(&format!("SELECT 1 FROM api_tokens WHERE id = '{id}' FOR UPDATE"))
        .await
        .expect("lock the token's row");
    assert_eq!(me(&app, &agent).await.data()["me"]["name"], "agent-1");
    let busy = format!("SELECT ledger_token_touch('{id}') IS NULL AS skipped");
    assert_eq!(app.app_role_query(None, &busy).await, vec![json!({ "skipped": true })], "no wait on a busy row");
    let waiting =
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    assert_eq!(app.sql_json(waiting).await, vec![json!({ "n": 0 })], "nothing waits behind the held row");
    // The record goes out in the background, so it may be tried before or
    // after the row is free; either way no transaction that began while the
    // row was held wrote it (one that waited for the lock would carry an
    // earlier `now()`).
    let held_until = app.sql_json("SELECT clock_timestamp()::text AS t").await[0]["t"].clone();
    let held_until = held_until.as_str().expect("a time");
    holder.rollback().await.expect("rollback");
    let written_after = format!("last_used_at IS NULL OR last_used_at >= '{held_until}'::timestamptz");
    assert_eq!(column(&app, "agent-1", &written_after).await, json!("true"), "the busy row was skipped");
    me(&app, &agent).await.data();
    wait_until(&app, "agent-1", "last_used_at IS NOT NULL").await;
    let first = column(&app, "agent-1", "last_used_at").await;
    assert_eq!(column(&app, "agent-1", "last_used_at <= now()").await, json!("true"));

    // More requests within the minute, to this server and to a replica
    // that has sent no record yet: the column stays.
    let replica = app.spawn_replica().await;
    me(&app, &agent).await.data();
    me(&replica, &agent).await.data();
    // Any record those sent went out before this one, of another token.
    let other = app.token("f", "agent-2", Role::Agent).await;
    me(&replica, &other).await.data();
    wait_until(&app, "agent-2", "last_used_at IS NOT NULL").await;
    assert_eq!(column(&app, "agent-1", "last_used_at").await, first, "rewritten within the minute");

    // The database keeps it to one write a minute whoever asks: the
    // service's role, within the minute, writes nothing.
    let touch = format!("SELECT ledger_token_touch('{id}') AS wrote");
    assert_eq!(app.app_role_query(None, &touch).await, vec![json!({ "wrote": false })]);

    // Over a minute later (moved back by hand), the next request records it again.
    app.sql("UPDATE api_tokens SET last_used_at = last_used_at - interval '2 minutes' WHERE name = 'agent-1'").await;
    let moved = column(&app, "agent-1", "last_used_at").await;
    me(&replica, &agent).await.data();
    wait_until(&app, "agent-1", &format!("last_used_at > '{}'", moved.as_str().expect("moved"))).await;
}

#[tokio::test]
async fn tokens_used_at_once_have_their_last_use_recorded_together_in_few_transactions() {
    let app = spawn_app().await;
    const TOKENS: usize = 64;
    let mut tokens = Vec::new();
    for i in 0..TOKENS {
        tokens.push(app.token("f", &format!("burst-{i}"), Role::Agent).await);
    }
    // A reconnect storm in small: every token's first request at once.
    futures::future::join_all(tokens.iter().map(|t| me(&app, t))).await.iter().for_each(|r| _ = r.data());
    let recorded =
        "SELECT count(*) FILTER (WHERE last_used_at IS NOT NULL) AS n FROM api_tokens WHERE name LIKE 'burst-%'";
    let deadline = std::time::Instant::now() + GUARD;
    while app.sql_json(recorded).await != vec![json!({ "n": TOKENS })] {
        assert!(std::time::Instant::now() < deadline, "every use recorded within the guard");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // An UPDATE stamps the row with its transaction's id (xmin): one
    // transaction per token would leave 64 of them.
    let writers = "SELECT count(DISTINCT xmin::text) AS n FROM api_tokens WHERE name LIKE 'burst-%'";
    let n = app.sql_json(writers).await[0]["n"].as_i64().expect("a count");
    assert!(n <= (TOKENS / 4) as i64, "{n} transactions recorded the last use of {TOKENS} tokens");
}

/// `token list`'s row of the token named `name`, split into its columns.
fn row<'a>(list: &'a str, name: &str) -> Vec<&'a str> {
    let row = list.lines().find(|l| l.split_whitespace().nth(2) == Some(name));
    row.unwrap_or_else(|| panic!("no {name} in:\n{list}")).split_whitespace().collect()
}

#[tokio::test]
async fn token_create_stores_the_expiry_and_token_list_shows_it_with_the_last_use() {
    let app = spawn_app().await;
    let month = create(&app, "month", &["--expires-in", "30d"]).await;
    let at = chrono::Utc::now() + chrono::Duration::days(365);
    let at = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    create(&app, "pinned", &["--expires-at", &at]).await;
    create(&app, "forever", &[]).await;
    app.token("f", "lapsed", Role::Reader).await;
    let lapsed_at = expire(&app, "lapsed").await;

    // Stored as asked: the lifetime by the database's clock from the minting.
    assert_eq!(column(&app, "month", "expires_at - created_at = interval '30 days'").await, json!("true"));
    assert_eq!(column(&app, "pinned", &format!("expires_at = '{at}'")).await, json!("true"));
    assert_eq!(column(&app, "forever", "expires_at").await, Value::Null);

    // Used once: its last use shows.
    assert_eq!(me(&app, &month).await.data()["me"]["name"], "month");
    wait_until(&app, "month", "last_used_at IS NOT NULL").await;
    let used = column(&app, "month", &rfc3339("last_used_at")).await;
    let month_expiry = column(&app, "month", &rfc3339("expires_at")).await;

    let list = token_cli(&app, &["list"]).await;
    assert!(list.ok, "{}", list.stderr);
    let header: Vec<&str> = list.stdout.lines().next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["ID", "FLEET", "NAME", "STATUS", "EXPIRES_AT", "LAST_USED_AT", "PERMISSIONS"]);
    assert_eq!(
        row(&list.stdout, "month")[3..6],
        ["live", month_expiry.as_str().expect("expiry"), used.as_str().expect("used")]
    );
    assert_eq!(row(&list.stdout, "pinned")[3..6], ["live", at.as_str(), "never"]);
    assert_eq!(row(&list.stdout, "forever")[3..6], ["live", "never", "never"]);
    assert_eq!(row(&list.stdout, "lapsed")[3..6], ["expired", lapsed_at.as_str(), "never"]);
    assert!(!list.stdout.contains(&month), "never the secret");
}

#[tokio::test]
async fn revoke_unused_for_revokes_the_tokens_unused_that_long_and_no_other() {
    let app = spawn_app().await;
    let fresh = app.token("f", "fresh-unused", Role::Agent).await;
    let old_unused = app.token("f", "old-unused", Role::Agent).await;
    let old_used = app.token("f", "old-used-now", Role::Agent).await;
    app.token("f", "used-long-ago", Role::Agent).await;
    app.token("f", "revoked-before", Role::Agent).await;
    app.sql(
        "UPDATE api_tokens SET created_at = now() - interval '40 days' WHERE name IN ('old-unused', 'old-used-now');
         UPDATE api_tokens SET created_at = now() - interval '60 days', last_used_at = now() - interval '31 days'
          WHERE name = 'used-long-ago';
         UPDATE api_tokens SET created_at = now() - interval '90 days', revoked_at = now() - interval '50 days'
          WHERE name = 'revoked-before'",
    )
    .await;
    me(&app, &old_used).await.data();
    wait_until(&app, "old-used-now", "last_used_at IS NOT NULL").await;
    let revoked_before = column(&app, "revoked-before", "revoked_at").await;

    let run = token_cli(&app, &["revoke", "--unused-for", "30d"]).await;
    assert!(run.ok, "{}", run.stderr);
    let printed: Vec<&str> = run.stdout.lines().skip(1).filter_map(|l| l.split_whitespace().nth(2)).collect();
    assert_eq!(printed, ["used-long-ago", "old-unused"], "as `token list` orders them: {}", run.stdout);
    assert!(run.stderr.contains("revoked 2 token(s) unused for 30d"), "{}", run.stderr);
    let revoked =
        app.sql_json("SELECT name FROM api_tokens WHERE revoked_at > now() - interval '1 minute' ORDER BY name").await;
    assert_eq!(revoked, vec![json!({ "name": "old-unused" }), json!({ "name": "used-long-ago" })]);
    assert_eq!(column(&app, "revoked-before", "revoked_at").await, revoked_before, "revoked once");

    let refused = me(&app, &old_unused).await;
    assert_eq!(refused.status, 401);
    assert!(refused.message().contains("revoked"), "{}", refused.message());
    me(&app, &old_used).await.data();
    me(&app, &fresh).await.data();

    // Nothing left that old: nothing revoked, nothing printed.
    let again = token_cli(&app, &["revoke", "--unused-for", "30d"]).await;
    assert!(again.ok && again.stdout.is_empty(), "{}{}", again.stdout, again.stderr);

    // One way at a time, and a lifetime that means something.
    for (args, names) in [
        (vec!["revoke"], "--unused-for"),
        (vec!["revoke", "--unused-for", "0s"], "--unused-for"),
        (vec!["revoke", "--unused-for", "soon"], "--unused-for"),
        (vec!["revoke", "--unused-for", "1s", "00000000-0000-0000-0000-000000000000"], "--unused-for"),
    ] {
        let run = token_cli(&app, &args).await;
        assert!(!run.ok && run.stdout.is_empty(), "{args:?}: {}", run.stdout);
        assert!(run.stderr.contains(names), "{args:?}: {}", run.stderr);
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL").await, 2);
}

#[tokio::test]
async fn bad_expiry_flags_are_usage_errors_that_name_the_flag_and_create_nothing() {
    let app = spawn_app().await;
    let future = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let cases: [(&[&str], &str); 6] = [
        (&["--expires-in", "0s"], "--expires-in"),
        (&["--expires-in", "soon"], "--expires-in"),
        (&["--expires-in", "30d", "--expires-at", &future], "--expires-at"),
        (&["--expires-at", "2020-01-01T00:00:00Z"], "--expires-at"),
        (&["--expires-at", "tomorrow"], "--expires-at"),
        (&["--expires-at", "2031-02-30T00:00:00Z"], "--expires-at"),
    ];
    for (flags, named) in cases {
        let mut args = vec!["create", "--fleet", "f", "--name", "bad", "--role", "agent"];
        args.extend_from_slice(flags);
        let run = token_cli(&app, &args).await;
        assert!(!run.ok, "{flags:?} was accepted");
        assert!(run.stdout.is_empty(), "{flags:?}: {}", run.stdout);
        assert!(run.stderr.contains(named), "{flags:?} should name {named}: {}", run.stderr);
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM api_tokens").await, 0);

    // The database refuses the same for anyone who calls it by hand.
    let mint = |expiry: &str| {
        format!("SELECT ledger_token_create('f', 'by-hand', '{{}}', decode(repeat('ab', 32), 'hex'), {expiry})")
    };
    let past = app.sql_refused(&mint("now() - interval '1 second'")).await;
    assert!(past.contains("api_tokens_expires_after_creation"), "{past}");
    let both = app.sql_refused(&mint("now() + interval '1 day', interval '1 day'")).await;
    assert!(both.contains("not both"), "{both}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM api_tokens").await, 0);
}

/// One-shot commands are quiet on success (issue 56): `token create` prints
/// the token alone, no migration logs on stderr; `migrate` its one line.
#[tokio::test]
async fn one_shot_commands_are_quiet_on_success() {
    let app = spawn_app().await;
    let run = |args: &'static [&'static str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
            .args(args)
            .env("DATABASE_URL", &app.db_url)
            .env_remove("WORK_LEDGER_LOG")
            .output()
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let out = run(&["token", "create", "--fleet", "f", "--name", "quiet", "--role", "agent"]).await.expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "stderr of a successful token create");
    assert_eq!(text(&out.stdout).lines().count(), 1, "the token alone: {}", text(&out.stdout));
    let out = run(&["migrate"]).await.expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).trim(), "migrations applied");
}
