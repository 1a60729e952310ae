//! Said once on the surfaces too (issue 56): what MCP's instructions, the
//! tools' descriptions, the CLI's help and the results say agrees with what
//! the tools do, on every door: one description per tool and verb, the
//! holder's loop and `legalActions` from one declaration, permissions that
//! say what they allow, `outcome` where the result carries it, a release
//! that takes only what it honours, `unitId` everywhere, and writes that
//! answer with the unit as it is now.

use std::process::Output;

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::mcp::{rpc, tool};

/// `tools/list` as `token` sees it: name -> the tool (description, input schema).
async fn tools(app: &TestApp, token: &str) -> serde_json::Map<String, Value> {
    let listed = rpc(app, token, "tools/list", json!({})).await;
    let tools = listed["tools"].as_array().expect("tools").iter();
    tools.map(|t| (t["name"].as_str().expect("name").to_owned(), t.clone())).collect()
}

/// The server's instructions, as `initialize` gives them.
async fn instructions(app: &TestApp, token: &str) -> String {
    let params = json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": { "name": "test", "version": "1" } });
    let init = rpc(app, token, "initialize", params).await;
    init["instructions"].as_str().expect("instructions").to_owned()
}

async fn binary(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"));
    command.args(args).env_remove("WORK_LEDGER_LOG").env_remove("WORK_LEDGER_STATE");
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().await.expect("run work-ledger")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `start_work` and `verify` (and `agent start`/`agent verify --help`) each
/// say what they alone do; `agent claim`'s summary is a whole sentence; a
/// claim's description names `outcome` as the result's field, never the
/// GraphQL response's `extensions`.
#[tokio::test]
async fn each_tool_and_verb_says_what_it_alone_does() {
    let app = spawn_app().await;
    let agent = app.token("f", "agent", Role::Agent).await;
    let listed = tools(&app, &agent).await;
    let said = |name: &str| listed[name]["description"].as_str().expect("description").to_owned();
    let (start, verify) = (said("start_work"), said("verify"));
    assert_ne!(start, verify);
    assert!(start.contains("CLAIMED -> IN_PROGRESS") && !start.contains("VERIFIED"), "{start}");
    assert!(verify.contains("IN_PROGRESS -> VERIFIED") && !verify.contains("CLAIMED ->"), "{verify}");
    for claim in ["claim_next", "claim_unit"] {
        let described = said(claim);
        assert!(!described.contains("extensions"), "{claim}: {described}");
        assert!(
            described.contains("The result's `outcome`") || described.contains("the result's `outcome`"),
            "{described}"
        );
    }
    assert!(said("claim_unit").contains("`claim_next`"), "tool names, not GraphQL fields: {}", said("claim_unit"));

    let help = |verb: &'static str| async move { text(&binary(&["agent", verb, "--help"], &[]).await.stdout) };
    let (start, verify) = (help("start").await, help("verify").await);
    assert_ne!(start.lines().next(), verify.lines().next(), "{start}\n{verify}");
    assert!(!start.contains("VERIFIED"), "{start}");
    let all = text(&binary(&["agent", "--help"], &[]).await.stdout);
    let claim = all.lines().find(|l| l.trim_start().starts_with("claim ")).expect("claim verb");
    assert!(claim.trim_end().ends_with('.'), "a whole sentence: {claim}");
    assert!(!claim.contains("extensions"), "{claim}");
}

/// The holder's loop the instructions teach, state by state, is exactly what
/// `legalActions` offers the holder in that state (walked through MCP): so
/// `wait_for_answer` while BLOCKED and `claim_next` after VERIFIED.
#[tokio::test]
async fn the_instructions_and_legal_actions_come_from_one_declaration() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["loop/1"]).await;
    let agent = app.token("f", "looper", Role::Agent).await;
    let said = instructions(&app, &agent).await;
    assert!(!said.contains("extensions."), "the result carries `outcome`: {said}");
    let line = |state: &str| {
        let prefix = format!("- {state}: ");
        said.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {state} in: {said}")).to_owned()
    };
    let states: Vec<&str> = said.lines().filter_map(|l| l.strip_prefix("- ")?.split(':').next()).collect();
    let holding: Vec<&str> =
        work_ledger::ledger::state_machine::holder_states().iter().map(|state| state.api_name()).collect();
    assert_eq!(states, holding, "{said}");
    assert!(holding.starts_with(&["CLAIMED", "IN_PROGRESS", "BLOCKED"]), "{holding:?}");

    let claimed = tool(&app, &agent, "claim_next", json!({})).await;
    let id = claimed["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    let steps = [
        ("IN_PROGRESS", &agent, "start_work", json!({ "unitId": id })),
        ("BLOCKED", &agent, "block", json!({ "unitId": id, "question": "Which?" })),
        ("IN_PROGRESS", &op, "answer_question", json!({ "unitId": id, "answer": "That one." })),
        ("VERIFIED", &agent, "verify", json!({ "unitId": id, "evidenceUrl": "https://ci.example/1" })),
    ];
    let mut walk = vec![("CLAIMED", None)];
    walk.extend(steps.iter().map(|(state, who, name, args)| (*state, Some((*who, *name, args.clone())))));
    for (state, step) in walk {
        if let Some((who, name, args)) = step {
            let result = tool(&app, who, name, args).await;
            assert_eq!(result["structuredContent"]["unit"]["state"], state, "{result:#}");
        }
        // The holder's own view of the unit (the answer above was the operator's).
        let read = tool(&app, &agent, "get_unit", json!({ "unitId": id })).await;
        let legal: Vec<&str> = read["structuredContent"]["unit"]["legalActions"]
            .as_array()
            .expect("legalActions")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let taught = line(state);
        assert!(taught.starts_with(&format!("- {state}: {}: ", legal.join(", "))), "{taught} vs {legal:?}");
        match state {
            "BLOCKED" => assert!(legal.contains(&"wait_for_answer"), "{legal:?}"),
            "VERIFIED" => assert!(legal.contains(&"claim_next"), "{legal:?}"),
            _ => {}
        }
    }
}

/// `my_work` says what each permission allows: `units:claim` covers the
/// writes of the whole loop, not just the claim.
#[tokio::test]
async fn permissions_say_what_they_allow() {
    let app = spawn_app().await;
    let agent = app.token("f", "agent", Role::Agent).await;
    let mine = tool(&app, &agent, "my_work", json!({})).await;
    let grants = mine["structuredContent"]["me"]["grants"].as_array().expect("grants").clone();
    let permissions: Vec<&str> = grants.iter().filter_map(|g| g["permission"].as_str()).collect();
    assert_eq!(permissions, ["ledger:read", "units:claim"], "{mine:#}");
    let claim = grants[1]["allows"].as_str().expect("allows");
    for step in ["start", "heartbeat", "verify", "block", "release", "cost", "dispose"] {
        assert!(claim.contains(step), "units:claim allows {step}: {claim}");
    }
    let read = app.gql(&agent, "{ me { grants { permission allows } } }", json!({})).await;
    assert_eq!(read.data()["me"]["grants"], json!(grants));
}

/// A release takes only what it honours: ABANDONED or FAILED, in the
/// schema (GraphQL), the tool's input schema (MCP) and the verb's values (CLI).
#[tokio::test]
async fn release_offers_only_the_outcomes_of_giving_up() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["rel/1"]).await;
    let agent = Agent::new(&app, "f", "releaser", Role::Agent).await;
    let listed = tools(&app, &agent.token).await;
    let outcome = &listed["release"]["inputSchema"]["properties"]["outcome"];
    assert_eq!(outcome["enum"], json!(["ABANDONED", "FAILED"]), "{outcome:#}");

    let unit = agent.claim_next(json!({})).await.str("id");
    let before = app.snapshot(&unit).await;
    agent.release(&unit, json!({ "outcome": "VERIFIED" })).await.assert_code("GRAPHQL_VALIDATION_FAILED");
    let refused = tool(&app, &agent.token, "release", json!({ "unitId": unit, "outcome": "SUPERSEDED" })).await;
    assert_eq!(refused["isError"], true, "{refused:#}");
    let env = [("WORK_LEDGER_URL", app.url("")), ("WORK_LEDGER_TOKEN", agent.token.clone())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cli = binary(&["agent", "release", "--outcome", "verified"], &env).await;
    assert_eq!(cli.status.code(), Some(2), "{}", text(&cli.stderr));
    assert!(text(&cli.stderr).contains("abandoned, failed"), "{}", text(&cli.stderr));
    app.assert_unchanged(&unit, &before, "the refused releases").await;
    agent.release(&unit, json!({ "outcome": "FAILED" })).await.data();
    let outcome =
        app.sql_json(&format!("SELECT outcome::text AS o FROM work_unit_attempts WHERE unit_id = '{unit}'")).await;
    assert_eq!(outcome, [json!({ "o": "failed" })]);
}

/// Every tool calls the unit `unitId`: `get_unit` and `claim_unit` too.
#[tokio::test]
async fn every_tool_names_the_unit_unit_id() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let id = app.register(&op, &["named/1"]).await[0]["id"].as_str().expect("id").to_owned();
    let listed = tools(&app, &op).await;
    for (name, listed) in &listed {
        let properties = listed["inputSchema"]["properties"].as_object().expect("properties");
        assert!(!properties.contains_key("id"), "{name} takes `id`: {properties:?}");
    }
    for name in ["get_unit", "claim_unit"] {
        assert_eq!(listed[name]["inputSchema"]["required"], json!(["unitId"]), "{name}");
    }
    let read = tool(&app, &op, "get_unit", json!({ "unitId": id })).await;
    assert_eq!(read["structuredContent"]["unit"]["externalRef"], "named/1", "{read:#}");
    let old = tool(&app, &op, "get_unit", json!({ "id": id })).await;
    assert_eq!(old["structuredContent"]["code"], "INVALID_INPUT", "{old:#}");
    assert_eq!(old["structuredContent"]["argument"], "id", "{old:#}");
    let claimed = tool(&app, &op, "claim_unit", json!({ "unitId": id })).await;
    assert_eq!(claimed["structuredContent"]["outcome"], "claimed", "{claimed:#}");
}

/// A write answers with the unit as it is now (state, current attempt,
/// lease, open question, `legalActions`), not its history: that stays one
/// `get_unit` away, on MCP and in the CLI alike.
#[tokio::test]
async fn writes_answer_with_the_unit_as_it_is_now() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["now/1"]).await;
    let agent = app.token("f", "now-agent", Role::Agent).await;
    let claimed = tool(&app, &agent, "claim_next", json!({})).await;
    let id = claimed["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    tool(&app, &agent, "start_work", json!({ "unitId": id })).await;
    let blocked = tool(&app, &agent, "block", json!({ "unitId": id, "question": "Which codepage?" })).await;
    let unit = blocked["structuredContent"]["unit"].as_object().expect("unit").clone();
    for now in ["state", "currentAttemptId", "currentAttempt", "leaseExpiresAt", "openQuestion", "legalActions"] {
        assert!(unit.contains_key(now), "{now}: {unit:?}");
    }
    for history in ["attempts", "questions"] {
        assert!(!unit.contains_key(history), "{history}: {unit:?}");
    }
    assert_eq!(unit["openQuestion"]["question"], "Which codepage?");
    assert_eq!(unit["currentAttempt"]["attemptNo"], 1);
    let read = tool(&app, &agent, "get_unit", json!({ "unitId": id })).await;
    assert_eq!(read["structuredContent"]["unit"]["questions"][0]["question"], "Which codepage?", "{read:#}");

    let env = [("WORK_LEDGER_URL", app.url("")), ("WORK_LEDGER_TOKEN", agent.clone())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let state = std::env::temp_dir().join(format!("work-ledger-now-{}.json", uuid::Uuid::new_v4()));
    let state = state.to_string_lossy().into_owned();
    let out = binary(&["agent", "--state", &state, "cost", "12"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(printed["unit"]["costCents"], 12, "{printed:#}");
    assert!(printed["unit"].get("attempts").is_none(), "{printed:#}");
    let _ = std::fs::remove_file(state);
}

/// A superseded attempt says that its lease expired and who reclaimed the
/// unit; nobody's write ended it (MCP shows what GraphQL does).
#[tokio::test]
async fn a_superseded_attempt_says_its_lease_expired_and_who_reclaimed_it() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["stale/1"]).await;
    let (first, second) = (app.token("f", "first", Role::Agent).await, app.token("f", "second", Role::Agent).await);
    let claimed = tool(&app, &first, "claim_next", json!({})).await;
    let id = claimed["structuredContent"]["unit"]["id"].as_str().expect("unit").to_owned();
    app.sql(&format!("UPDATE work_units SET lease_expires_at = now() - interval '1 second' WHERE id = '{id}'")).await;
    tool(&app, &second, "claim_next", json!({})).await;
    let read = tool(&app, &first, "get_unit", json!({ "unitId": id })).await;
    let attempt = &read["structuredContent"]["unit"]["attempts"][0];
    assert_eq!(attempt["outcome"], "SUPERSEDED", "{read:#}");
    assert_eq!(attempt["endReason"], "the lease expired and second reclaimed the unit", "{read:#}");
    assert_eq!(attempt["endedBy"], Value::Null, "{read:#}");
    assert_eq!(attempt["reclaimedBy"], "second", "{read:#}");
}
