//! Fleet isolation all the way down (SPEC §8).

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::spawn_app;

#[tokio::test]
async fn a_token_sees_nothing_of_another_fleet() {
    let app = spawn_app().await;
    let a = app.token("fleet-a", "op-a", Role::Admin).await;
    let b = app.token("fleet-b", "op-b", Role::Admin).await;
    let b_unit = app.register(&b, &["shared/ref"]).await[0]["id"].as_str().expect("id").to_owned();

    // Same external ref in fleet A is a different unit, not a re-register of B's.
    let a_unit = app.register(&a, &["shared/ref"]).await[0]["id"].as_str().expect("id").to_owned();
    assert_ne!(a_unit, b_unit);

    let resp = app
        .gql(
            &a,
            "query($id: UUID!) { unit(id: $id) { id } unitByRef(externalRef: \"shared/ref\") { id fleet } }",
            json!({ "id": b_unit }),
        )
        .await;
    assert_eq!(resp.data()["unit"], json!(null));
    assert_eq!(resp.data()["unitByRef"]["id"], json!(a_unit));
    assert_eq!(resp.data()["unitByRef"]["fleet"], json!("fleet-a"));

    let me = app.gql(&b, "{ me { fleet name } }", json!({})).await;
    assert_eq!(me.data()["me"], json!({ "fleet": "fleet-b", "name": "op-b" }));
}

#[tokio::test]
async fn the_application_role_sees_no_rows_without_the_fleet_setting() {
    let app = spawn_app().await;
    let a = app.token("fleet-a", "op", Role::Admin).await;
    app.register(&a, &["one", "two"]).await;
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 2, "owner sees the rows");

    for table in ["work_units", "work_unit_events", "work_unit_attempts", "blocking_questions", "api_tokens"] {
        let rows = app.app_role_query(None, &format!("SELECT * FROM {table}")).await;
        assert!(rows.is_empty(), "{table} leaked without a fleet: {rows:?}");
        let rows = app.app_role_query(Some("fleet-b"), &format!("SELECT * FROM {table}")).await;
        assert!(rows.is_empty(), "{table} leaked to fleet-b: {rows:?}");
    }
    assert_eq!(app.app_role_query(Some("fleet-a"), "SELECT * FROM work_units").await.len(), 2);

    // The application role writes no table at all (every write is a SQL
    // function: tests/api/write_path.rs); the functions' own role writes
    // under the same row-level security.
    for sql in [
        "INSERT INTO work_units (fleet, external_ref) VALUES ('fleet-a', 'smuggled')",
        "UPDATE work_units SET domain = 'stolen'",
    ] {
        let err = app.app_role_exec(Some("fleet-b"), sql).await.expect_err(sql);
        assert!(err.contains("permission denied"), "{err}");
    }
    let err = app
        .commit_as(
            Some("work_ledger_writer"),
            "fleet-b",
            &["INSERT INTO work_units (fleet, external_ref) VALUES ('fleet-a', 'smuggled')"],
        )
        .await
        .expect_err("cross-fleet insert");
    assert!(err.contains("row-level security"), "{err}");
    app.commit_as(Some("work_ledger_writer"), "fleet-b", &["UPDATE work_units SET domain = 'stolen'"])
        .await
        .expect("matches nothing");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units WHERE domain = 'stolen'").await, 0);
}
