//! Tokens and permissions (SPEC §8): every way in without a valid token is
//! UNAUTHENTICATED with HTTP 401; a missing permission is FORBIDDEN naming it.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Gql, TestApp, spawn_app};

const ME: &str = r#"{"query":"{ me { name } }"}"#;

/// The answer to a request with a token just revoked: refused at once
/// (the request's own first statement asks the database).
async fn refused_after_revocation(app: &TestApp, token: &str) -> Gql {
    app.post_raw(Some(&format!("Bearer {token}")), ME.to_owned()).await
}

#[tokio::test]
async fn missing_malformed_unknown_and_revoked_tokens_are_unauthenticated() {
    let app = spawn_app().await;
    let token = app.token("f", "agent-1", Role::Agent).await;
    // Well-formed, but never stored.
    let (unknown, _) = work_ledger::auth::new_token();

    let cases: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        ("wrong scheme", Some(format!("Basic {token}"))),
        ("not a token", Some("Bearer hello".to_owned())),
        ("empty", Some("Bearer ".to_owned())),
        ("unknown", Some(format!("Bearer {unknown}"))),
    ];
    for (case, header) in cases {
        let resp = app.post_raw(header.as_deref(), ME.to_owned()).await;
        assert_eq!(resp.status, 401, "{case}: {:#}", resp.body);
        resp.assert_code("UNAUTHENTICATED");
    }

    let ok = app.post_raw(Some(&format!("bearer {token}")), ME.to_owned()).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.data()["me"]["name"], "agent-1");

    let id = app.sql_json("SELECT id::text FROM api_tokens WHERE name = 'agent-1'").await[0]["id"].clone();
    let id = id.as_str().expect("id");
    assert!(work_ledger::db::tokens::revoke(&app.owner, id.parse().expect("uuid")).await.expect("revoke"));
    let revoked = refused_after_revocation(&app, &token).await;
    assert_eq!(revoked.status, 401, "{:#}", revoked.body);
    revoked.assert_code("UNAUTHENTICATED");
    assert!(revoked.message().contains("revoked"), "{}", revoked.message());
}

#[tokio::test]
async fn a_missing_permission_is_forbidden_and_named() {
    let app = spawn_app().await;
    let agent = app.token("f", "agent-1", Role::Agent).await;
    let resp = app.gql(&agent, "mutation { registerUnits(units: [{externalRef: \"x\"}]) { id } }", json!({})).await;
    assert_eq!(resp.status, 200);
    resp.assert_code("FORBIDDEN");
    assert!(resp.message().contains("units:register"), "{}", resp.message());
    assert_eq!(resp.body["errors"][0]["extensions"]["permission"], "units:register");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);
}

#[tokio::test]
async fn roles_are_presets_of_explicit_permissions() {
    let app = spawn_app().await;
    let expected = [
        (Role::Agent, vec!["ledger:read", "units:claim"]),
        (Role::Triage, vec!["ledger:read", "questions:answer"]),
        (Role::Reader, vec!["ledger:read"]),
        (Role::Operator, vec!["ledger:read", "units:register", "units:claim", "questions:answer", "units:dispose-any"]),
        (
            Role::Admin,
            vec![
                "ledger:read",
                "units:register",
                "units:claim",
                "questions:answer",
                "units:dispose-any",
                "tokens:manage",
            ],
        ),
    ];
    for (role, permissions) in expected {
        let token = app.token("f", &format!("{role:?}"), role).await;
        let resp = app.gql(&token, "{ me { permissions } }", json!({})).await;
        assert_eq!(resp.data()["me"]["permissions"], json!(permissions), "{role:?}");
    }
}

/// Runs the CLI against the test's database.
fn cli(app: &crate::helpers::TestApp, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .args(args)
        .env("DATABASE_URL", &app.db_url)
        .output()
        .expect("run work-ledger")
}

#[tokio::test]
async fn the_token_cli_prints_the_secret_alone_lists_and_revokes() {
    let app = spawn_app().await;
    let out = cli(&app, &["token", "create", "--fleet", "cli-fleet", "--name", "agent-7", "--role", "agent"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).expect("utf8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "the token alone on stdout: {stdout:?}");
    let token = lines[0];
    let me = app.gql(token, "{ me { fleet name permissions } }", json!({})).await;
    assert_eq!(
        me.data()["me"],
        json!({ "fleet": "cli-fleet", "name": "agent-7", "permissions": ["ledger:read", "units:claim"] })
    );

    let list = String::from_utf8(cli(&app, &["token", "list"]).stdout).expect("utf8");
    let row = list.lines().find(|l| l.contains("agent-7")).expect("listed");
    assert!(row.contains("live") && !list.contains(token), "{list}");
    let id = row.split_whitespace().next().expect("id");

    assert!(cli(&app, &["token", "revoke", id]).status.success());
    refused_after_revocation(&app, token).await.assert_code("UNAUTHENTICATED");
    assert!(!cli(&app, &["token", "revoke", id]).status.success(), "a second revoke reports the token is not live");
    let bad = cli(&app, &["token", "create", "--fleet", "bad fleet!", "--name", "x", "--role", "agent"]);
    assert!(!bad.status.success() && bad.stdout.is_empty());
}

/// A request that reads no table (`{ __typename }`) is answered from what
/// the server knows of the token; a revocation's notice clears that, and so
/// does the database refusing the token in a read.
#[tokio::test]
async fn a_request_that_reads_nothing_is_refused_once_the_refusal_is_known() {
    let app = spawn_app().await;
    let typename = || r#"{"query":"{ __typename }"}"#.to_owned();

    // Revoked by hand in SQL: the notice tells every server.
    let token = app.token("f", "noticed", Role::Agent).await;
    let bearer = format!("Bearer {token}");
    assert_eq!(app.post_raw(Some(&bearer), typename()).await.status, 200);
    app.sql("UPDATE api_tokens SET revoked_at = now() WHERE name = 'noticed'").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let answer = app.post_raw(Some(&bearer), typename()).await;
        if answer.status == 401 {
            answer.assert_code("UNAUTHENTICATED");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still answered 10 s after the revocation");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Its expiry moved into the past by hand (no notice is sent for that):
    // the server still answers from memory until the database refuses the
    // token in a read, and from then on refuses it, saying it expired.
    let token = app.token("f", "expired", Role::Agent).await;
    let bearer = format!("Bearer {token}");
    assert_eq!(app.post_raw(Some(&bearer), typename()).await.status, 200);
    app.sql(
        "UPDATE api_tokens SET created_at = now() - interval '2 minutes', expires_at = now() - interval '1 minute'
          WHERE name = 'expired'",
    )
    .await;
    assert_eq!(app.post_raw(Some(&bearer), typename()).await.status, 200, "nothing told the server yet");
    let read = refused_after_revocation(&app, &token).await;
    assert_eq!(read.status, 401, "{:#}", read.body);
    assert!(read.message().contains("expired"), "{}", read.message());
    let answer = app.post_raw(Some(&bearer), typename()).await;
    assert_eq!(answer.status, 401, "{:#}", answer.body);
    assert!(answer.message().contains("expired"), "{}", answer.message());
}
