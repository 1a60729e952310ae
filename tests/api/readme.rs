//! The README's quick start and tour, run as written. The quick start's
//! `cargo run -- serve` starts in a folder of the test's own, on its embedded
//! PostgreSQL; then every `sh` block of "A tour" runs, in order, in one bash
//! session beside it, as a newcomer pastes them into a second shell. The
//! `cargo` on their `PATH` is the binary under test (`cargo run [-q] --
//! ARGS` runs `work-ledger ARGS`); the one change to the text is the port,
//! `127.0.0.1:8080` becoming the one `serve` took. docs/agents.md's GraphQL
//! lifecycle runs last in the same session. The quick start's other command,
//! `cargo test`, is this suite.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::skip::skip;

const README: &str = include_str!("../../README.md");
const AGENTS: &str = include_str!("../../docs/agents.md");

/// The fenced `sh` blocks of the `## ` section `title` of a Markdown page
/// (its `###` subsections included), in order.
fn sh_blocks(page: &str, title: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let (mut in_section, mut block): (bool, Option<String>) = (false, None);
    for line in page.lines() {
        if let Some(text) = block.as_mut() {
            if line == "```" {
                blocks.extend(block.take());
            } else {
                text.push_str(line);
                text.push('\n');
            }
        } else if let Some(heading) = line.strip_prefix("## ") {
            in_section = heading == title;
        } else if in_section && line == "```sh" {
            block = Some(String::new());
        }
    }
    assert!(block.is_none(), "an unclosed block in {title}");
    blocks
}

/// `cargo run [-q] -- ARGS` as the README writes it: the binary under test.
const CARGO: &str = r#"#!/bin/sh
[ "$1" = run ] || { echo "this cargo only runs work-ledger: $*" >&2; exit 2; }
shift
[ "$1" = -q ] && shift
[ "$1" = -- ] && shift
exec "$WORK_LEDGER_BIN" "$@"
"#;

fn on_path(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The environment of the README's shells: the `cargo` above first on `PATH`,
/// no database URL (the embedded PostgreSQL in `./.work-ledger/`), nothing of
/// the test run's own agent settings.
fn readme_shell(command: &mut Command, bin_dir: &Path, folder: &Path, state: &Path) {
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    command
        .current_dir(folder)
        .env("PATH", path)
        .env("WORK_LEDGER_BIN", env!("CARGO_BIN_EXE_work-ledger"))
        .env("XDG_STATE_HOME", state)
        .env_remove("DATABASE_URL")
        .env_remove("WORK_LEDGER_DATA_DIR")
        .env_remove("WORK_LEDGER_URL")
        .env_remove("WORK_LEDGER_TOKEN")
        .env_remove("WORK_LEDGER_STATE");
}

#[test]
fn the_quick_start_is_two_commands() {
    assert_eq!(sh_blocks(README, "Quick start"), ["cargo run -- serve\ncargo test\n"]);
}

#[tokio::test]
async fn the_quick_start_and_the_tour_run_as_written() {
    if let Some(missing) = ["bash", "curl", "jq"].into_iter().find(|tool| !on_path(tool)) {
        skip(&format!("the README's tour needs {missing}"));
        return;
    }
    let quick_start = sh_blocks(README, "Quick start");
    let serve_line = quick_start[0].lines().next().expect("the quick start's first command");
    let mut tour = sh_blocks(README, "A tour");
    assert!(tour.len() >= 4, "a block for the operator, the agent, triage and the operator again: {tour:?}");
    // docs/agents.md's GraphQL lifecycle goes on from there, with the tour's helper and tokens.
    let graphql_lifecycle = sh_blocks(AGENTS, "The lifecycle over GraphQL");
    assert_eq!(graphql_lifecycle.len(), 1);
    tour.extend(graphql_lifecycle);

    let dir = tempfile::Builder::new().prefix("wl-readme-").tempdir().expect("tempdir");
    let (bin_dir, folder, state) = (dir.path().join("bin"), dir.path().join("work"), dir.path().join("state"));
    for made in [&bin_dir, &folder, &state] {
        std::fs::create_dir(made).expect("mkdir");
    }
    let cargo = bin_dir.join("cargo");
    std::fs::write(&cargo, CARGO).expect("write cargo");
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).expect("chmod cargo");

    // The first shell: `cargo run -- serve`, on a port of its own.
    let words: Vec<&str> = serve_line.split_whitespace().collect();
    let mut serve = Command::new(words[0]);
    serve.args(&words[1..]);
    readme_shell(&mut serve, &bin_dir, &folder, &state);
    let mut serve = serve
        .env("WORK_LEDGER_LISTEN", "127.0.0.1:0")
        .env("WORK_LEDGER_METRICS_LISTEN", "")
        .env("WORK_LEDGER_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the quick start's serve");
    let addr = crate::helpers::serving_addr(&mut serve, Duration::from_secs(90)).await;
    let mut stdout = BufReader::new(serve.stdout.take().expect("stdout")).lines();
    let first_token = tokio::time::timeout(Duration::from_secs(5), stdout.next_line())
        .await
        .expect("the first start prints a token")
        .expect("read stdout")
        .expect("a line");
    assert!(first_token.starts_with("wl_"), "{first_token}");

    // The second shell: the tour, block after block.
    let script = format!("set -e\n{}", tour.join("\n")).replace("127.0.0.1:8080", &addr);
    let mut bash = Command::new("bash");
    bash.arg("-c").arg(&script);
    readme_shell(&mut bash, &bin_dir, &folder, &state);
    let run = tokio::time::timeout(Duration::from_secs(240), bash.stdin(Stdio::null()).output())
        .await
        .expect("the tour within 4 minutes")
        .expect("run bash");
    let (out, err) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "the tour failed ({}):\n{out}\n{err}", run.status);
    // Its GraphQL requests were answered, none refused; the agent's verbs printed units.
    assert!(!out.contains("\"errors\""), "{out}");
    assert!(out.contains("\"queueDepth\"") && out.contains("\"openQuestionGroups\""), "{out}");
    assert!(out.contains("\"legalActions\""), "{out}");

    // What the ledger kept: the backlog's two units and the one registered over
    // GraphQL migrated, with their cost and evidence; the question answered once.
    let kept = graphql(
        &addr,
        &first_token,
        "{ units { nodes { externalRef state disposition costCents evidenceUrls \
           questions { status answer answeredBy } } } }",
    )
    .await;
    let mut units = kept["data"]["units"]["nodes"].as_array().cloned().unwrap_or_else(|| panic!("{kept:#}"));
    units.sort_by_key(|unit| unit["externalRef"].as_str().map(str::to_owned));
    assert_eq!(units.len(), 3, "{kept:#}");
    for unit in &units {
        assert_eq!((&unit["state"], &unit["disposition"]), (&json!("DONE"), &json!("MIGRATED")), "{unit:#}");
    }
    assert_eq!(units[0]["externalRef"], "legacy/billing/INVOICE.cbl");
    assert_eq!(units[0]["costCents"], 1250);
    let evidence = |unit: &Value| unit["evidenceUrls"].as_array().cloned().unwrap_or_default();
    assert!(evidence(&units[0]).contains(&json!("https://git.example.com/estate/pull/42")), "{kept:#}");
    assert_eq!(units[0]["questions"], json!([]));
    assert!(evidence(&units[1]).contains(&json!("https://git.example.com/estate/pull/43")), "{kept:#}");
    assert_eq!(
        units[1]["questions"],
        json!([{ "status": "ANSWERED", "answer": "ISO 8601: 2027-01-31", "answeredBy": "triage-1" }])
    );
    assert_eq!(units[2]["externalRef"], "legacy/billing/PAYROLL.cbl");
    assert_eq!(units[2]["costCents"], 1250);

    // Ctrl-C in the first shell: serve stops, and its PostgreSQL with it.
    let pid = serve.id().expect("pid").to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().await.expect("kill").success());
    let exit = tokio::time::timeout(Duration::from_secs(30), serve.wait()).await.expect("stops in time").expect("wait");
    assert!(exit.success(), "serve exited with {exit}");
    assert!(!folder.join(".work-ledger/pgdata/postmaster.pid").exists(), "PostgreSQL outlived serve");
}

async fn graphql(addr: &str, token: &str, query: &str) -> Value {
    reqwest::Client::new()
        .post(format!("http://{addr}/graphql"))
        .bearer_auth(token)
        .json(&json!({ "query": query }))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}
