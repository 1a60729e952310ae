//! One operation contract on three doors (issue 25): GraphQL, MCP and the
//! agent CLI refuse with the same envelope, name only actions that exist on
//! their own surface and that the token may take, and the CLI fences its
//! writes to the attempt of its own last claim. The agents' flows of the
//! round's MCP trial run here as tests.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Map, Value, json};
use work_ledger::auth::Role;
use work_ledger::contract::Surface;
use work_ledger::db::entities::WorkState;
use work_ledger::graphql::bindings;
use work_ledger::ledger::state_machine;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::mcp::tool;

/// The tools `tools/list` shows to `token`.
async fn tools(app: &TestApp, token: &str) -> Vec<String> {
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
    let resp = app
        .http
        .post(app.url("/mcp"))
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .json(&list)
        .send()
        .await
        .expect("POST /mcp");
    let body: Value = resp.json().await.expect("json");
    let tools = body["result"]["tools"].as_array().expect("tools").iter();
    tools.map(|t| t["name"].as_str().expect("name").to_owned()).collect()
}

/// `work-ledger agent ARGS` with its own state file.
async fn cli(app: &TestApp, token: &str, state: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("agent")
        .args(args)
        .env_remove("DATABASE_URL")
        .env("WORK_LEDGER_URL", app.url(""))
        .env("WORK_LEDGER_TOKEN", token)
        .env("WORK_LEDGER_STATE", state)
        .env("WORK_LEDGER_RETRIES", "0")
        .output()
        .await
        .expect("run work-ledger agent")
}

fn state_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("work-ledger-contract-{}-{name}.json", uuid::Uuid::new_v4()))
}

/// The stderr envelope of a refused CLI command.
fn cli_refusal(out: &Output) -> Map<String, Value> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "refused: {stderr}");
    let line = stderr.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("stderr is not one JSON line ({e}): {stderr}"))
}

fn cli_ok(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// A GraphQL error as the flat envelope: `code`, `message`, then the other extensions.
fn graphql_envelope(error: &Value) -> Map<String, Value> {
    let mut envelope = Map::new();
    envelope.insert("message".into(), error["message"].clone());
    envelope.extend(error["extensions"].as_object().cloned().unwrap_or_default());
    envelope
}

/// The three envelopes agree on every field but `legalActions`, which each
/// gives in its own words (checked against `legal`: GraphQL, MCP, CLI).
fn assert_same_envelope(
    what: &str,
    graphql: &Map<String, Value>,
    mcp: &Map<String, Value>,
    cli: Option<&Map<String, Value>>,
    legal: Option<[Value; 3]>,
) {
    let without = |e: &Map<String, Value>| {
        let mut e = e.clone();
        e.remove("legalActions");
        e
    };
    assert_eq!(without(mcp), without(graphql), "{what}: MCP and GraphQL differ");
    if let Some(cli) = cli {
        assert_eq!(without(cli), without(graphql), "{what}: the CLI and GraphQL differ");
    }
    if let Some([g, m, c]) = legal {
        assert_eq!(graphql["legalActions"], g, "{what}: GraphQL's legalActions");
        assert_eq!(mcp["legalActions"], m, "{what}: MCP's legalActions");
        if let Some(cli) = cli {
            assert_eq!(cli["legalActions"], c, "{what}: the CLI's legalActions");
        }
    }
}

#[tokio::test]
async fn every_surface_refuses_with_the_same_envelope_and_changes_nothing() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["envelope/1"]).await;
    let agent = Agent::new(&app, "f", "agent-e", Role::Agent).await;
    let state = state_file("envelope");
    let claimed = cli_ok(&cli(&app, &agent.token, &state, &["claim"]).await);
    let unit = claimed["unit"]["id"].as_str().expect("unit").to_owned();
    cli_ok(&cli(&app, &agent.token, &state, &["start"]).await);
    let before = app.snapshot(&unit).await;

    // What the holder may do IN_PROGRESS, in each surface's words, from the
    // actions' declarations (the words themselves: graphql::bindings' tests).
    let in_progress = [Surface::Graphql, Surface::Mcp, Surface::Cli].map(|surface| {
        let actions = state_machine::holder_actions(WorkState::InProgress).into_iter();
        json!(actions.filter_map(|action| bindings::render_action(action, surface)).collect::<Vec<_>>())
    });
    assert!(in_progress[1].as_array().is_some_and(|a| a.contains(&json!("verify(evidenceUrl)"))));
    assert!(in_progress[2].as_array().is_some_and(|a| a.contains(&json!("verify <evidence-url>"))));

    // Starting twice: the state machine's refusal.
    let g = agent.transition(&unit, "IN_PROGRESS", json!({})).await;
    let m = tool(&app, &agent.token, "start_work", json!({ "unitId": unit })).await;
    assert_eq!(m["isError"], true, "{m:#}");
    let c = cli_refusal(&cli(&app, &agent.token, &state, &["start"]).await);
    let g = graphql_envelope(&g.body["errors"][0]);
    assert_eq!(g["code"], "ILLEGAL_TRANSITION", "{g:?}");
    let m = m["structuredContent"].as_object().cloned().expect("envelope");
    assert_same_envelope("start twice", &g, &m, Some(&c), Some(in_progress.clone()));

    // A link that is not one: the argument named alike on every surface.
    let g = agent.transition(&unit, "VERIFIED", json!({ "evidence": "ftp://ci.example/1" })).await;
    let m = tool(&app, &agent.token, "verify", json!({ "unitId": unit, "evidenceUrl": "ftp://ci.example/1" })).await;
    let c = cli_refusal(&cli(&app, &agent.token, &state, &["verify", "ftp://ci.example/1"]).await);
    let g = graphql_envelope(&g.body["errors"][0]);
    assert_eq!((g["code"].as_str(), g["argument"].as_str()), (Some("INVALID_INPUT"), Some("evidenceUrl")), "{g:?}");
    let m = m["structuredContent"].as_object().cloned().expect("envelope");
    assert_same_envelope("a bad link", &g, &m, Some(&c), None);

    // No link at all: EVIDENCE_REQUIRED names the argument too.
    let g = agent.transition(&unit, "VERIFIED", json!({})).await;
    let m = tool(&app, &agent.token, "verify", json!({ "unitId": unit })).await;
    let g = graphql_envelope(&g.body["errors"][0]);
    assert_eq!((g["code"].as_str(), g["argument"].as_str()), (Some("EVIDENCE_REQUIRED"), Some("evidenceUrl")), "{g:?}");
    let m = m["structuredContent"].as_object().cloned().expect("envelope");
    assert_same_envelope("no link", &g, &m, None, Some(in_progress));

    // A tool call missing a required argument, or with one the tool does not take: named, before anything runs.
    let missing = tool(&app, &agent.token, "block", json!({ "unitId": unit })).await;
    assert_eq!(missing["isError"], true, "{missing:#}");
    assert_eq!(missing["structuredContent"]["code"], "INVALID_INPUT", "{missing:#}");
    assert_eq!(missing["structuredContent"]["argument"], "question", "{missing:#}");
    let unknown = tool(&app, &agent.token, "start_work", json!({ "unitId": unit, "to": "DONE" })).await;
    assert_eq!(unknown["structuredContent"]["argument"], "to", "{unknown:#}");
    // A value of the wrong type: the GraphQL refusal, with its code.
    let typed =
        tool(&app, &agent.token, "record_cost", json!({ "unitId": unit, "cents": "lots", "idempotencyKey": "k" }))
            .await;
    assert_eq!(typed["isError"], true, "{typed:#}");
    assert!(typed["structuredContent"]["code"].as_str().is_some_and(|c| !c.is_empty()), "{typed:#}");

    app.assert_unchanged(&unit, &before, "every refusal").await;
    let _ = std::fs::remove_file(state);
}

/// `legalActions` on each surface, for each kind of token, in every state:
/// every MCP action is a tool that token's `tools/list` shows, every CLI
/// action is a verb of `work-ledger agent` whose tool that token may call.
#[tokio::test]
async fn legal_actions_name_only_what_exists_on_the_surface_and_the_token_may_do() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let refs =
        ["walk/ready", "walk/claimed", "walk/progress", "walk/blocked", "walk/verified", "walk/done", "walk/dead"];
    let units: Vec<String> =
        app.register(&op, &refs).await.iter().map(|u| u["id"].as_str().expect("id").to_owned()).collect();
    // Each state reached through the API by its own agent.
    let mut holders = Vec::new();
    for (i, unit) in units.iter().enumerate().skip(1) {
        let agent = Agent::new(&app, "f", &format!("walker-{i}"), Role::Agent).await;
        agent.claim_unit(unit, json!({})).await.unit();
        if i >= 2 {
            agent.transition(unit, "IN_PROGRESS", json!({})).await.unit();
        }
        match i {
            3 => drop(agent.block(unit, "which one?", json!({})).await),
            4 | 5 => drop(agent.transition(unit, "VERIFIED", json!({ "evidence": "https://ci.example/w" })).await),
            6 => drop(agent.dispose(unit, "DEAD", json!({ "evidence": "https://ci.example/d" })).await),
            _ => {}
        }
        if i == 5 {
            agent.dispose(unit, "MIGRATED", json!({})).await.unit();
        }
        holders.push(agent.token.clone());
    }
    let stranger = app.token("f", "stranger", Role::Agent).await;
    let triage = app.token("f", "triage", Role::Triage).await;
    let reader = app.token("f", "reader", Role::Reader).await;

    let help = std::process::Command::new(env!("CARGO_BIN_EXE_work-ledger")).args(["agent", "--help"]).output();
    let help = String::from_utf8_lossy(&help.expect("agent --help").stdout).into_owned();
    fn verb_tool(verb: &str) -> Vec<&'static str> {
        bindings::verb(verb).filter_map(|op| op.tool).collect()
    }

    let query = "query($id: UUID!) { unit(id: $id) { state g: legalActions m: legalActions(surface: MCP) c: legalActions(surface: CLI) } }";
    let mut seen_states = std::collections::BTreeSet::new();
    let mut named = 0;
    let tokens: Vec<&String> = holders.iter().chain([&stranger, &triage, &reader, &op]).collect();
    for token in tokens {
        let allowed = tools(&app, token).await;
        for unit in &units {
            let read = app.gql(token, query, json!({ "id": unit })).await;
            let u = &read.data()["unit"];
            seen_states.insert(u["state"].as_str().expect("state").to_owned());
            let (g, m, c) =
                (u["g"].as_array().expect("g"), u["m"].as_array().expect("m"), u["c"].as_array().expect("c"));
            assert_eq!(g.len(), m.len(), "one MCP action per GraphQL action: {u}");
            for action in m {
                let name = action.as_str().expect("str").split('(').next().unwrap_or_default();
                assert!(
                    allowed.iter().any(|t| t == name),
                    "MCP action {action} not in this token's tools {allowed:?}: {u}"
                );
                named += 1;
            }
            for action in c {
                let verb = action.as_str().expect("str").split(' ').next().unwrap_or_default();
                assert!(
                    help.lines().any(|l| l.trim_start().starts_with(&format!("{verb} "))),
                    "no verb {verb}: {help}"
                );
                assert!(verb_tool(verb).iter().any(|t| allowed.iter().any(|a| a == t)), "{verb} not permitted: {u}");
            }
            let answers = m.iter().filter(|a| a.as_str().is_some_and(|a| a.starts_with("answer_question"))).count();
            assert_eq!(c.len(), m.len() - answers, "the CLI has every agent action: {u}");
        }
    }
    assert_eq!(seen_states.len(), 7, "every state walked: {seen_states:?}");
    assert!(named > 20, "the walk named actions ({named})");
}

/// The CLI fences with the attempt of its own last claim: a session whose
/// unit was released and claimed again (here by the same agent from another
/// shell) is refused with LEASE_LOST and changes nothing.
#[tokio::test]
async fn a_superseded_cli_session_is_lease_lost() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["fence/1"]).await;
    let token = app.token("f", "shell-agent", Role::Agent).await;
    let (first, second) = (state_file("first"), state_file("second"));

    let claimed = cli_ok(&cli(&app, &token, &first, &["claim"]).await);
    let unit = claimed["unit"]["id"].as_str().expect("unit").to_owned();
    let old = claimed["unit"]["currentAttemptId"].as_str().expect("attempt").to_owned();
    // Another shell of the same agent gives the unit up and claims it again: a new attempt.
    cli_ok(&cli(&app, &token, &second, &["release", "--reason", "restarting"]).await);
    let again = cli_ok(&cli(&app, &token, &second, &["claim", "--unit", &unit]).await);
    let new = again["unit"]["currentAttemptId"].as_str().expect("attempt").to_owned();
    assert_ne!(old, new);
    assert_eq!(again["outcome"], "claimed", "{again}");

    let before = app.snapshot(&unit).await;
    for args in [&["start"][..], &["release"], &["dispose", "dead", "--evidence-url", "https://ci.example/x"]] {
        let refused = cli_refusal(&cli(&app, &token, &first, args).await);
        assert_eq!(refused["code"], "LEASE_LOST", "{args:?}: {refused:?}");
        assert_eq!(refused["attemptId"], old.as_str(), "{refused:?}");
    }
    app.assert_unchanged(&unit, &before, "the superseded session's writes").await;
    // The current session's own attempt passes.
    let started = cli_ok(&cli(&app, &token, &second, &["start"]).await);
    assert_eq!(started["unit"]["state"], "IN_PROGRESS");
    for file in [first, second] {
        let _ = std::fs::remove_file(file);
    }
}

/// The round's MCP trial as a test: four agents, units whose refs say what
/// the work turns out to be (migrate, dead, a question for a human, fail
/// once), a triage answering; every agent decides from what the tools show
/// (the answer, the earlier attempt), waits with `wait_for_answer` instead
/// of polling, and learns from `claim_next` when the domain is drained.
#[tokio::test]
async fn four_agents_work_a_domain_through_mcp_alone() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let register = "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }";
    let units = json!([
        { "externalRef": "trial/migrate", "domain": "trial" },
        { "externalRef": "trial/dead", "domain": "trial" },
        { "externalRef": "trial/ask", "domain": "trial" },
        { "externalRef": "trial/fail-once", "domain": "trial" },
    ]);
    app.gql(&op, register, json!({ "u": units })).await.data();
    let mut agents = Vec::new();
    for i in 1..=4 {
        agents.push(app.token("f", &format!("trial-{i}"), Role::Agent).await);
    }
    let triage = app.token("f", "triage", Role::Triage).await;

    // Each agent claims one unit.
    let mut held = std::collections::HashMap::new();
    for agent in &agents {
        let claimed = tool(&app, agent, "claim_next", json!({ "domain": "trial" })).await;
        let body = &claimed["structuredContent"];
        assert_eq!(body["outcome"], "claimed", "{claimed:#}");
        let r#ref = body["unit"]["externalRef"].as_str().expect("ref").to_owned();
        held.insert(r#ref, (agent.clone(), body["unit"].clone()));
    }
    let id = |r: &str| held[r].1["id"].as_str().expect("id").to_owned();
    let attempt = |r: &str| held[r].1["currentAttemptId"].as_str().expect("attempt").to_owned();
    for (agent, unit) in held.values() {
        let started =
            tool(&app, agent, "start_work", json!({ "unitId": unit["id"], "attemptId": unit["currentAttemptId"] }))
                .await;
        assert_eq!(started["structuredContent"]["unit"]["state"], "IN_PROGRESS", "{started:#}");
    }

    // migrate: cost, verify, dispose.
    let (a, u) = (&held["trial/migrate"].0, id("trial/migrate"));
    tool(&app, a, "record_cost", json!({ "unitId": u, "cents": 300, "idempotencyKey": "m-1" })).await;
    let v = tool(
        &app,
        a,
        "verify",
        json!({ "unitId": u, "attemptId": attempt("trial/migrate"), "evidenceUrl": "https://ci.example/m" }),
    )
    .await;
    // The unit's disposition first, the next claim last.
    let legal = v["structuredContent"]["unit"]["legalActions"].as_array().cloned().unwrap_or_default();
    assert_eq!(legal.first(), Some(&json!("dispose(disposition: MIGRATED)")), "{v:#}");
    assert_eq!(legal.last(), Some(&json!("claim_next")), "{v:#}");
    assert!(legal.contains(&json!("record_cost(unitId, cents, idempotencyKey)")), "{v:#}");
    let done = tool(&app, a, "dispose", json!({ "unitId": u, "disposition": "MIGRATED" })).await;
    assert_eq!(done["structuredContent"]["unit"]["state"], "DONE", "{done:#}");

    // dead: the permanent disposition with evidence.
    let (a, u) = (&held["trial/dead"].0, id("trial/dead"));
    let dead = tool(&app, a, "dispose", json!({ "unitId": u, "attemptId": attempt("trial/dead"), "disposition": "DEAD", "evidenceUrl": "https://tracker.example/dead" })).await;
    assert_eq!(dead["structuredContent"]["unit"]["disposition"], "DEAD", "{dead:#}");

    // ask: block, wait for the answer while triage answers, read it, decide.
    let (asker, u) = (held["trial/ask"].0.clone(), id("trial/ask"));
    let blocked =
        tool(&app, &asker, "block", json!({ "unitId": u, "question": "Is module X still read by the nightly batch?" }))
            .await;
    let question = blocked["structuredContent"]["unit"]["openQuestion"]["id"].as_str().expect("question").to_owned();
    let waiting = tool(&app, &asker, "wait_for_answer", json!({ "unitId": u, "timeoutSeconds": 30 }));
    let answering = async {
        // Triage sees the question and answers it.
        let open = tool(&app, &triage, "open_questions", json!({})).await;
        assert_eq!(open["structuredContent"]["questions"]["nodes"][0]["id"], question.as_str(), "{open:#}");
        tool(
            &app,
            &triage,
            "answer_question",
            json!({ "unitId": u, "questionId": question, "answer": "No: it is dead." }),
        )
        .await
    };
    let (waited, answered) = tokio::join!(waiting, answering);
    assert_eq!(answered["isError"], false, "{answered:#}");
    let unit = &waited["structuredContent"]["unit"];
    assert_eq!(unit["state"], "IN_PROGRESS", "the wait ends with the answer: {waited:#}");
    assert_eq!(unit["questions"][0]["answer"], "No: it is dead.", "the answer is on the unit: {waited:#}");
    assert_eq!(unit["questions"][0]["answeredBy"], "triage", "{waited:#}");
    tool(
        &app,
        &asker,
        "dispose",
        json!({ "unitId": u, "disposition": "DEAD", "evidenceUrl": "https://tracker.example/answer" }),
    )
    .await;

    // fail once: released as FAILED; the next agent sees who failed and why.
    let (failer, u) = (held["trial/fail-once"].0.clone(), id("trial/fail-once"));
    tool(&app, &failer, "release", json!({ "unitId": u, "outcome": "FAILED", "reason": "tests do not build" })).await;
    let other = agents.iter().find(|a| **a != failer).expect("another agent");
    let retry = tool(&app, other, "claim_next", json!({ "domain": "trial" })).await;
    let unit = &retry["structuredContent"]["unit"];
    assert_eq!(unit["id"], u.as_str(), "{retry:#}");
    assert_eq!(unit["attemptCount"], 2, "{retry:#}");
    // The history is one get_unit away.
    let read = tool(&app, other, "get_unit", json!({ "unitId": u })).await;
    let history = &read["structuredContent"]["unit"];
    assert_eq!(history["attempts"][0]["outcome"], "FAILED", "{read:#}");
    assert_eq!(history["attempts"][0]["endReason"], "tests do not build", "{read:#}");
    assert_ne!(history["attempts"][0]["agentId"], history["attempts"][1]["agentId"], "{read:#}");

    // The domain is busy while that unit is held, drained once it is done.
    let busy = tool(&app, &failer, "claim_next", json!({ "domain": "trial" })).await;
    assert_eq!(busy["structuredContent"]["unit"], Value::Null, "{busy:#}");
    assert_eq!(busy["structuredContent"]["outcome"], "busy", "{busy:#}");
    assert_eq!(busy["structuredContent"]["leased"], 1, "{busy:#}");
    let attempt = unit["currentAttemptId"].clone();
    tool(&app, other, "start_work", json!({ "unitId": u, "attemptId": attempt })).await;
    tool(&app, other, "verify", json!({ "unitId": u, "evidenceUrl": "https://ci.example/f" })).await;
    tool(&app, other, "dispose", json!({ "unitId": u, "disposition": "MIGRATED" })).await;
    let drained = tool(&app, &failer, "claim_next", json!({ "domain": "trial" })).await;
    assert_eq!(drained["structuredContent"]["outcome"], "drained", "{drained:#}");
    let depth = tool(&app, &op, "queue_depth", json!({ "domain": "trial" })).await;
    assert_eq!(depth["structuredContent"]["queueDepth"][0]["ready"], 0, "a finished domain is listed: {depth:#}");

    let states = app.sql_json("SELECT state::text AS s, count(*) AS n FROM work_units GROUP BY 1 ORDER BY 1").await;
    assert_eq!(states, [json!({ "s": "abandoned", "n": 2 }), json!({ "s": "done", "n": 2 })]);
}

/// One set of per-operation metrics: a claim through MCP and one through
/// the CLI are counted under the GraphQL field they ran, beside GraphQL's
/// own, with their refusals under their codes.
#[tokio::test]
async fn every_door_is_counted_under_its_operation() {
    let mut config = crate::helpers::test_config();
    config.metrics_listen = Some("127.0.0.1:0".into());
    let app = crate::helpers::spawn_app_with(config).await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["m/1", "m/2", "m/3"]).await;
    let (graphql, mcp, shell) = (
        Agent::new(&app, "f", "by-graphql", Role::Agent).await,
        app.token("f", "by-mcp", Role::Agent).await,
        app.token("f", "by-cli", Role::Agent).await,
    );
    graphql.claim_next(json!({})).await.unit();
    assert_eq!(tool(&app, &mcp, "claim_next", json!({})).await["isError"], false);
    let state = state_file("metrics");
    cli_ok(&cli(&app, &shell, &state, &["claim"]).await);
    // A refusal through MCP: counted with its code.
    let refused = tool(&app, &mcp, "start_work", json!({ "unitId": uuid::Uuid::new_v4() })).await;
    assert_eq!(refused["structuredContent"]["code"], "NOT_FOUND", "{refused:#}");

    let target = app.metrics_addr.expect("a metrics listener");
    let text =
        app.http.get(format!("http://{target}/metrics")).send().await.expect("scrape").text().await.expect("text");
    assert!(text.contains(r#"work_ledger_graphql_operations_total{operation="claimNext",code="OK"} 3"#), "{text}");
    assert!(
        text.contains(r#"work_ledger_graphql_operations_total{operation="transition",code="NOT_FOUND"} 1"#),
        "{text}"
    );
    assert!(text.contains("work_ledger_claims_total 3"), "{text}");
    let _ = std::fs::remove_file(state);
}
