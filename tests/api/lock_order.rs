//! One lock order for every write: the unit's row first, then its attempt.
//! A third session holding the unit's row lock lines two writers up
//! deterministically; `pg_stat_activity` says when each waits.

use sea_orm::{ConnectionTrait, DbErr, TransactionTrait};
use serde_json::json;
use work_ledger::auth::Role;
use work_ledger::ledger::LedgerError;

use crate::helpers::{Agent, TestApp, spawn_app};

/// A late `recordCost` on the attempt a reclaim is superseding: the reclaim
/// holds the unit and wants the attempt; the bill must not hold the attempt
/// and want the unit (a deadlock, and INTERNAL for one of them).
#[tokio::test]
async fn a_late_bill_racing_a_reclaim_does_not_deadlock() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["unit"]).await;
    let old = Agent::new(&app, "f", "old", Role::Agent).await;
    let new = Agent::new(&app, "f", "new", Role::Agent).await;
    let claimed = old.claim_next(json!({})).await;
    let (unit, first_attempt) = (claimed.str("id"), claimed.str("currentAttemptId"));
    app.expire_lease(&unit).await;

    let gate = app.owner.begin().await.expect("begin");
    gate.execute_unprepared(&format!("SELECT 1 FROM work_units WHERE id = '{unit}' FOR UPDATE")).await.expect("lock");
    let reclaim = new.claim_unit(&unit, json!({}));
    let bill = async {
        app.wait_for_lock_waiters(1).await;
        old.record_cost(&first_attempt, 700, "late-bill").await
    };
    let open = async {
        app.wait_for_lock_waiters(2).await;
        gate.rollback().await.expect("release the gate");
    };
    let (reclaimed, billed, ()) = tokio::join!(reclaim, bill, open);

    assert_eq!(reclaimed.str("claimedBy"), "new", "{:#}", reclaimed.body);
    billed.data();
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{unit}'")).await, 700);
    assert_eq!(
        app.sql_i64(&format!("SELECT cost_cents FROM work_unit_attempts WHERE id = '{first_attempt}'")).await,
        700
    );
    let events = app.events_of(&unit).await;
    assert_eq!(events.iter().filter(|e| *e == "cost_recorded").count(), 1, "{events:?}");
    assert_eq!(events.iter().filter(|e| *e == "stale_reclaimed").count(), 1, "{events:?}");
}

/// Two owner transactions that lock rows `a` and `b` in opposite orders: one
/// of them gets PostgreSQL's deadlock error.
async fn a_real_deadlock(app: &TestApp) -> DbErr {
    let a = app.raw_unit("f", "dl-a").await;
    let b = app.raw_unit("f", "dl-b").await;
    let t1 = app.owner.begin().await.expect("begin");
    let t2 = app.owner.begin().await.expect("begin");
    let lock = |id: &str| format!("SELECT 1 FROM work_units WHERE id = '{id}' FOR UPDATE");
    t1.execute_unprepared(&lock(&a)).await.expect("t1 locks a");
    t2.execute_unprepared(&lock(&b)).await.expect("t2 locks b");
    let (lock_a, lock_b) = (lock(&a), lock(&b));
    let first = t1.execute_unprepared(&lock_b);
    let second = async {
        app.wait_for_lock_waiters(1).await;
        t2.execute_unprepared(&lock_a).await
    };
    let (first, second) = tokio::join!(first, second);
    match (first, second) {
        (Err(err), _) | (_, Err(err)) => err,
        _ => panic!("no deadlock"),
    }
}

/// A REPEATABLE READ transaction updating a row another one changed since
/// its snapshot: PostgreSQL's serialization failure.
async fn a_real_serialization_failure(app: &TestApp) -> DbErr {
    let unit = app.raw_unit("f", "ser").await;
    let t1 = app.owner.begin().await.expect("begin");
    t1.execute_unprepared("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").await.expect("isolation");
    t1.execute_unprepared("SELECT count(*) FROM work_units").await.expect("snapshot");
    app.sql(&format!("UPDATE work_units SET workflow_id = 'other' WHERE id = '{unit}'")).await;
    t1.execute_unprepared(&format!("UPDATE work_units SET workflow_id = 'mine' WHERE id = '{unit}'"))
        .await
        .expect_err("serialization failure")
}

#[tokio::test]
async fn deadlocks_and_serialization_failures_are_retried() {
    let app = spawn_app().await;
    for (what, err) in
        [("deadlock", a_real_deadlock(&app).await), ("serialization", a_real_serialization_failure(&app).await)]
    {
        let code = work_ledger::db::violation(&err).map(|(code, _)| code).unwrap_or_default();
        assert!(["40P01", "40001"].contains(&code.as_str()), "{what}: {err}");
        assert!(matches!(LedgerError::from(err), LedgerError::Retry), "{what} is not retried");
    }
}
