//! `schema.graphql` is the SDL the server prints; this fails when they drift.

#[test]
fn schema_graphql_matches_the_server() {
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql"))
        .expect("schema.graphql at the repo root");
    let printed = work_ledger::graphql::schema_file();
    assert!(
        committed == printed,
        "schema.graphql is stale: run `cargo run -- print-schema > schema.graphql` and commit it"
    );
}

#[test]
fn print_schema_command_prints_the_same_sdl() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("print-schema")
        .env_remove("DATABASE_URL")
        .output()
        .expect("run work-ledger print-schema");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), work_ledger::graphql::schema_file());
}
