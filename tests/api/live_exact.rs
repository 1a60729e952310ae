//! Live events that are exact and isolated (issue 9): delivery held back
//! only by in-flight transactions that appended ledger events, no event lost
//! behind a cursor of the `events` list, streams that survive pg_dump /
//! pg_restore into a fresh cluster, and notifications that reveal nothing
//! across fleets. Assertions are on delivered messages and on what the
//! database recorded; timeouts are failure guards.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;
use work_ledger::db;
use work_ledger::db::events::{self, Position};

use crate::helpers::{Agent, TestApp, serve, spawn_app, spawn_app_with, test_config};
use crate::ws_client::Ws;

const EVENTS: &str = "subscription($after: String, $unit: UUID, $types: [EventType!]) {
    ledgerEvents(after: $after, unitId: $unit, types: $types) { id cursor unitId eventType detail unit { externalRef } } }";

/// Normal delivery takes milliseconds; this only bounds a failure.
const PROMPT: Duration = Duration::from_secs(5);

async fn newest_cursor(app: &TestApp, token: &str) -> String {
    let resp = app.gql(token, "{ events(first: 1) { edges { cursor } } }", json!({})).await;
    resp.data()["events"]["edges"][0]["cursor"].as_str().expect("an event").to_owned()
}

async fn next_event(ws: &mut Ws) -> Value {
    ws.next_data().await["ledgerEvents"].clone()
}

/// The next event, which must come promptly.
async fn prompt_event(ws: &mut Ws, what: &str) -> Value {
    tokio::time::timeout(PROMPT, next_event(ws))
        .await
        .unwrap_or_else(|_| panic!("{what}: not delivered within {PROMPT:?}"))
}

/// Writes `before` events of `unit` until `ws` delivers one: the
/// subscription is live once it does (later `before`s may still follow).
async fn until_live(app: &TestApp, ws: &mut Ws, fleet: &str, unit: &str) {
    let deadline = std::time::Instant::now() + PROMPT;
    loop {
        app.sql(&insert_event_in(fleet, unit, "before")).await;
        if let Ok(event) = tokio::time::timeout(Duration::from_millis(200), next_event(ws)).await {
            assert_eq!(tag(&event), "before");
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the subscription went live within {PROMPT:?}");
    }
}

/// What a feed of `fleet` reading from the start may deliver now.
async fn read_log(app: &TestApp, fleet: &str) -> events::Batch {
    events::events_after(&app.owner, fleet, Position::before_batch(0), None, 100).await.expect("read")
}

fn unit_ref(event: &Value) -> String {
    event["unit"]["externalRef"].as_str().unwrap_or_default().to_owned()
}

fn tag(event: &Value) -> String {
    event["detail"]["tx"].as_str().unwrap_or_default().to_owned()
}

fn insert_event(unit: &str, tag: &str) -> String {
    insert_event_in("f", unit, tag)
}

/// A `heartbeat` event of `unit` in `fleet`, tagged `tag`, written as the owner.
fn insert_event_in(fleet: &str, unit: &str, tag: &str) -> String {
    format!(
        "INSERT INTO work_unit_events (fleet, unit_id, event_type, agent_id, detail)
         VALUES ('{fleet}', '{unit}', 'heartbeat', 'writer', '{{\"tx\": \"{tag}\"}}')"
    )
}

#[tokio::test]
async fn transactions_that_append_no_event_delay_nothing() {
    let app = spawn_app().await;
    let elsewhere = spawn_app().await; // another database of the same cluster
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["origin"]).await;
    let origin = newest_cursor(&app, &op).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin, "types": ["REGISTERED"] })).await;

    // A transaction holding a transaction id in another database.
    let other_db = elsewhere.owner.begin().await.expect("begin");
    other_db.execute_unprepared("SELECT pg_current_xact_id()").await.expect("xid");
    app.register(&op, &["while-another-database-writes"]).await;
    assert_eq!(unit_ref(&prompt_event(&mut ws, "another database").await), "while-another-database-writes");

    // One in this database that wrote, but no event.
    let same_db = app.owner.begin().await.expect("begin");
    same_db
        .execute_unprepared("INSERT INTO work_units (fleet, external_ref) VALUES ('f', 'quiet')")
        .await
        .expect("unit");
    app.register(&op, &["while-a-unit-is-written"]).await;
    assert_eq!(unit_ref(&prompt_event(&mut ws, "this database, no event").await), "while-a-unit-is-written");
    assert!(app.live.oldest_event_writer().await.expect("writers").is_none(), "no event writer in flight");

    other_db.rollback().await.expect("rollback");
    same_db.commit().await.expect("commit");
    app.register(&op, &["after"]).await;
    assert_eq!(unit_ref(&prompt_event(&mut ws, "after").await), "after", "nothing twice, nothing in between");
}

#[tokio::test]
async fn an_open_event_writer_holds_later_events_back_until_it_ends_then_all_arrive_once_in_order() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["target"]).await[0]["id"].as_str().expect("id").to_owned();
    let origin = newest_cursor(&app, &op).await;
    let reader = app.token("f", "reader", Role::Reader).await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": origin, "unit": unit })).await;

    let open = app.owner.begin().await.expect("begin");
    open.execute_unprepared(&insert_event(&unit, "open")).await.expect("insert");
    let writer = app.live.oldest_event_writer().await.expect("writers").expect("one writer in flight");
    assert!(writer.age.is_some_and(|a| a < Duration::from_secs(60)), "{writer:?}");
    for later in ["later-1", "later-2"] {
        app.sql(&insert_event(&unit, later)).await;
    }
    // Committed, but behind the open writer: not deliverable yet.
    let read = read_log(&app, "f").await;
    let tags: Vec<&str> = read.events.iter().filter_map(|e| e.event.detail["tx"].as_str()).collect();
    assert!(tags.is_empty(), "nothing after the open writer's marker is deliverable: {tags:?}");
    assert!(read.held, "later events are committed and held back");
    open.commit().await.expect("commit");

    let got: Vec<String> =
        [next_event(&mut ws).await, next_event(&mut ws).await, next_event(&mut ws).await].iter().map(tag).collect();
    assert_eq!(got, ["open", "later-1", "later-2"], "the writer's event first, then the held ones");
    assert!(app.live.oldest_event_writer().await.expect("writers").is_none());
    app.sql(&insert_event(&unit, "last")).await;
    assert_eq!(tag(&next_event(&mut ws).await), "last", "nothing twice");
}

/// A read of the live log below a watermark it is given
/// stops there, however much lies final beyond it; given none, it takes its
/// own and holds back what an open event writer precedes; given one past
/// the batches drawn so far, the database lowers it to those. Each fleet's
/// read finds that fleet's events alone.
#[tokio::test]
async fn a_read_below_a_given_watermark_stops_there_and_never_reaches_past_the_batches_drawn() {
    let app = spawn_app().await;
    for (fleet, units) in [("f", ["f-1", "f-2", "f-3"]), ("g", ["g-1", "g-2", "g-3"])] {
        let op = app.token(fleet, "op", Role::Operator).await;
        for unit in units {
            app.register(&op, &[unit]).await; // a transaction, a batch, each
        }
    }
    let log = |fleet: &str| {
        let app = &app;
        let sql =
            format!("SELECT id::text, batch FROM work_unit_events WHERE fleet = '{fleet}' ORDER BY batch, tx_id, seq");
        async move {
            app.sql_json(&sql)
                .await
                .iter()
                .map(|r| (r["id"].as_str().expect("id").to_owned(), r["batch"].as_i64().expect("batch")))
                .collect::<Vec<(String, i64)>>()
        }
    };
    let ids = |batch: &events::Batch| batch.events.iter().map(|e| e.event.id.to_string()).collect::<Vec<_>>();
    let (f, g) = (log("f").await, log("g").await);
    let last_batch = f.last().expect("f's events").1;
    let first_batches: Vec<i64> = f.iter().map(|(_, b)| *b).collect();
    assert!(first_batches.windows(2).any(|w| w[0] < w[1]), "f's events span several batches: {first_batches:?}");
    let start = Position::before_batch(0);
    let read = |fleet: &'static str, below: Option<i64>| {
        let app = &app;
        async move { events::events_after(&app.owner, fleet, start, below, 100).await.expect("read") }
    };

    // Its own watermark: everything, each fleet its own.
    let fresh = read("f", None).await;
    assert_eq!(ids(&fresh), f.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>());
    assert!(fresh.watermark > last_batch && !fresh.held, "{fresh:?}");
    assert_eq!(ids(&read("g", None).await), g.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>());

    // Below a given one: what lies below it, nothing further.
    let cut = first_batches[first_batches.len() - 1];
    let below: Vec<String> = f.iter().filter(|(_, b)| *b < cut).map(|(id, _)| id.clone()).collect();
    assert!(!below.is_empty() && below.len() < f.len(), "the cut splits f's events");
    let older = read("f", Some(cut)).await;
    assert_eq!((ids(&older), older.watermark), (below, cut));
    assert!(older.held, "final events wait beyond the given watermark");

    // Past the batches drawn: lowered to the sequence's last value + 1.
    let drawn = app.sql_i64("SELECT pg_sequence_last_value('work_unit_events_batch_seq')").await;
    let far = read("f", Some(i64::MAX)).await;
    assert_eq!((ids(&far), far.watermark), (ids(&fresh), drawn + 1));

    // An open event writer: its own watermark holds back what it precedes, a
    // given older one stays where it was.
    let unit = app.sql_json("SELECT id::text FROM work_units WHERE external_ref = 'f-3'").await[0]["id"]
        .as_str()
        .expect("unit")
        .to_owned();
    let open = app.owner.begin().await.expect("begin");
    open.execute_unprepared(&insert_event(&unit, "open")).await.expect("insert");
    app.sql(&insert_event(&unit, "later")).await;
    let held = read("f", None).await;
    assert_eq!(ids(&held), ids(&fresh), "nothing past the open writer's batch");
    assert!(held.held, "the later event is committed and held back");
    assert_eq!(ids(&read("f", Some(cut)).await), ids(&older));
    open.commit().await.expect("commit");
    assert_eq!(read("f", None).await.events.len(), f.len() + 2);

    // Limited: the first events in delivery order.
    let limited = events::events_after(&app.owner, "f", start, Some(i64::MAX), 1).await.expect("read");
    assert_eq!(ids(&limited), vec![f[0].0.clone()]);
}

#[tokio::test]
async fn a_cursor_from_the_events_list_never_skips_an_event_of_a_transaction_still_open() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["target"]).await[0]["id"].as_str().expect("id").to_owned();
    let reader = app.token("f", "reader", Role::Reader).await;

    // T1 appends E1 and stays open; T2 appends E2 and commits.
    let t1 = app.owner.begin().await.expect("begin T1");
    t1.execute_unprepared(&insert_event(&unit, "E1")).await.expect("E1");
    app.sql(&insert_event(&unit, "E2")).await;
    // The list shows E2 (E1 is not committed) with its cursor.
    let listed = app.gql(&reader, "{ events(first: 1) { edges { cursor node { detail } } } }", json!({})).await;
    let edge = &listed.data()["events"]["edges"][0];
    assert_eq!(edge["node"]["detail"]["tx"], "E2");
    let cursor = edge["cursor"].as_str().expect("cursor").to_owned();
    t1.commit().await.expect("commit T1");

    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": cursor, "unit": unit })).await;
    app.sql(&insert_event(&unit, "E3")).await;
    let mut got = Vec::new();
    while got.last().map(String::as_str) != Some("E3") {
        got.push(tag(&next_event(&mut ws).await));
    }
    // A resume from a list cursor may repeat what the list showed (E2), never skip.
    assert_eq!(got, ["E1", "E2", "E3"]);
}

/// A fleet's feed starts with its first subscriber, and its first read can
/// come after that subscriber has caught up from the table (here the live
/// pool's tag lookup is made slow in this test's own database). An event
/// committed in between must still arrive: the feed starts no later than
/// where the subscriber's own reads ended.
#[tokio::test]
async fn an_event_committed_before_a_new_feeds_first_read_is_not_skipped() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["slow-feed"]).await[0]["id"].as_str().expect("id").to_owned();
    let reader = app.token("f", "reader", Role::Reader).await;
    let after = newest_cursor(&app, &reader).await;
    app.sql(&insert_event(&unit, "caught-up")).await;
    app.sql(
        "ALTER FUNCTION live_fleet_tag(text) RENAME TO live_fleet_tag_unslowed;
         CREATE FUNCTION live_fleet_tag(p_fleet text) RETURNS text LANGUAGE plpgsql SECURITY DEFINER
         SET search_path = pg_catalog, public, pg_temp AS $$
         BEGIN
             IF current_setting('application_name') = 'work-ledger-live' THEN PERFORM pg_sleep(3); END IF;
             RETURN live_fleet_tag_unslowed(p_fleet);
         END $$;
         GRANT EXECUTE ON FUNCTION live_fleet_tag(text) TO work_ledger_app;",
    )
    .await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": after, "unit": unit })).await;
    // Delivered by the subscriber's own catch-up: the feed is still asking for its tag.
    assert_eq!(tag(&prompt_event(&mut ws, "the caught-up event").await), "caught-up");
    app.sql(&insert_event(&unit, "in-between")).await;
    assert_eq!(tag(&prompt_event(&mut ws, "the event before the feed's first read").await), "in-between");
}

/// Subscriptions that start at once share one read of their starting point
/// and one token re-check (`Live::start_now`, `Live::token_dead`), across
/// fleets: each still skips what committed before it began, and from its
/// first event on misses nothing and repeats nothing.
#[tokio::test]
async fn subscriptions_started_at_once_each_skip_the_past_and_then_miss_nothing() {
    let app = spawn_app().await;
    let mut units = Vec::new();
    let mut readers = Vec::new();
    for fleet in ["f", "g"] {
        let op = app.token(fleet, "op", Role::Operator).await;
        let unit = app.register(&op, &["many"]).await[0]["id"].as_str().expect("id").to_owned();
        // A subscription that started earlier: a start kept from it would
        // hand the later ones "before".
        let early = app.token(fleet, "early", Role::Reader).await;
        let mut early = Ws::subscription(&app, &early, EVENTS, json!({ "unit": unit })).await;
        until_live(&app, &mut early, fleet, &unit).await;
        for i in 0..16 {
            readers.push((app.token(fleet, &format!("reader-{i}"), Role::Reader).await, unit.clone()));
        }
        units.push((fleet, unit));
    }
    let subscriptions =
        readers.iter().map(|(token, unit)| Ws::subscription(&app, token, EVENTS, json!({ "unit": unit })));
    let mut subscriptions = futures::future::join_all(subscriptions).await;

    let tags = ["e1", "e2", "e3", "e4", "e5"];
    for t in tags {
        for (fleet, unit) in &units {
            app.sql(&insert_event_in(fleet, unit, t)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (ws, (_, unit)) in subscriptions.iter_mut().zip(&readers) {
        let mut got = Vec::new();
        while got.last().map(String::as_str) != Some("e5") {
            let event = prompt_event(ws, "the last event").await;
            assert_eq!(event["unitId"].as_str(), Some(unit.as_str()), "its own fleet's unit");
            got.push(tag(&event));
        }
        let first = tags.iter().position(|t| *t == got[0]).unwrap_or_else(|| panic!("{got:?}: an event from before"));
        assert_eq!(got, tags[first..].to_vec(), "a suffix of what committed after the start, once each, in order");
    }
}

/// Issue 27: a subscription to one type of event is fed that type alone (not
/// woken for the others), and still gets every event of it once, in order,
/// when a burst overruns its broadcast (capacity 4 here) and it reads the
/// table instead; beside it, a subscription to everything gets the burst
/// whole.
#[tokio::test]
async fn a_subscription_to_one_type_gets_each_of_its_events_once_in_order_through_a_burst() {
    let mut config = test_config();
    config.live.broadcast_capacity = 4;
    let app = spawn_app_with(config).await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["burst"]).await[0]["id"].as_str().expect("id").to_owned();
    let reader = app.token("f", "reader", Role::Reader).await;
    let only = json!({ "unit": unit, "types": ["HEARTBEAT"] });
    let mut heartbeats = Ws::subscription(&app, &reader, EVENTS, only).await;
    until_live(&app, &mut heartbeats, "f", &unit).await;
    let after = newest_cursor(&app, &reader).await;
    let mut everything = Ws::subscription(&app, &reader, EVENTS, json!({ "unit": unit, "after": after })).await;

    // One transaction: 20 heartbeats between 20 events of another type.
    let mut burst = Vec::new();
    for i in 0..20 {
        burst.push(insert_event(&unit, &format!("h{i}")));
        burst.push(insert_event(&unit, &format!("r{i}")).replace("'heartbeat'", "'registered'"));
    }
    app.sql(&burst.join(";\n")).await;

    let mut got = Vec::new();
    while got.last().map(String::as_str) != Some("h19") {
        let event = prompt_event(&mut heartbeats, "the last heartbeat").await;
        assert_eq!(event["eventType"], "HEARTBEAT", "{event}");
        got.push(tag(&event));
    }
    got.retain(|t| t != "before");
    assert_eq!(got, (0..20).map(|i| format!("h{i}")).collect::<Vec<_>>(), "each heartbeat once, in order");
    let mut all = Vec::new();
    while all.len() < 40 {
        all.push(tag(&prompt_event(&mut everything, "the burst").await));
    }
    let expected: Vec<String> = (0..20).flat_map(|i| [format!("h{i}"), format!("r{i}")]).collect();
    assert_eq!(all, expected, "the other subscription gets the whole burst once, in order");
}

/// Issue 27: `ledgerEvents` payloads that select only the event's own fields
/// are resolved once per process for all the subscribers with that selection;
/// each subscriber still gets exactly what it asked for (its fields, its
/// aliases, its directives, its nested objects), whoever resolved first.
#[tokio::test]
async fn subscribers_selecting_an_event_differently_each_get_their_own_selection() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["shared"]).await[0]["id"].as_str().expect("id").to_owned();
    let reader = app.token("f", "reader", Role::Reader).await;
    let after = newest_cursor(&app, &reader).await;
    let subscription = |selection: &str, extra: &str| {
        format!(
            "subscription($after: String, $unit: UUID{extra}) {{ ledgerEvents(after: $after, unitId: $unit) {selection} }}"
        )
    };
    let vars = json!({ "after": after, "unit": unit, "yes": false });
    let plain = json!({ "after": after, "unit": unit });
    let selections = [
        (subscription("{ id eventType }", ""), plain.clone()),
        (subscription("{ id eventType }", ""), plain.clone()),
        (subscription("{ eventId: id kind: eventType }", ""), plain.clone()),
        (subscription("{ eventId: id kind: eventType }", ""), plain.clone()),
        (subscription("{ id: unitId eventType }", ""), plain.clone()),
        (subscription("{ id unit { externalRef } }", ""), plain.clone()),
        (subscription("{ id eventType @include(if: $yes) }", ", $yes: Boolean!"), vars),
        (subscription("{ __typename id }", ""), plain.clone()),
    ];
    let mut streams = Vec::new();
    for (query, variables) in &selections {
        streams.push(Ws::subscription(&app, &reader, query, variables.clone()).await);
    }
    app.sql(&insert_event(&unit, "x")).await;
    let event = app.sql_json("SELECT id FROM work_unit_events WHERE detail->>'tx' = 'x'").await[0]["id"].clone();
    let expected = [
        json!({ "id": event, "eventType": "HEARTBEAT" }),
        json!({ "id": event, "eventType": "HEARTBEAT" }),
        json!({ "eventId": event, "kind": "HEARTBEAT" }),
        json!({ "eventId": event, "kind": "HEARTBEAT" }),
        json!({ "id": unit, "eventType": "HEARTBEAT" }),
        json!({ "id": event, "unit": { "externalRef": "shared" } }),
        json!({ "id": event }),
        json!({ "__typename": "WorkUnitEvent", "id": event }),
    ];
    for (ws, want) in streams.iter_mut().zip(expected) {
        assert_eq!(prompt_event(ws, "the event").await, want);
    }
}

/// SPEC §6: a notification is only a hint. An event whose notification never
/// comes (here the notify trigger is off in this test's own database, as for a
/// process that died between its commit and its NOTIFY) still reaches an idle
/// subscriber through the feed's bounded re-read of the table.
#[tokio::test]
async fn an_event_whose_notification_never_comes_reaches_an_idle_subscriber() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["quiet"]).await[0]["id"].as_str().expect("id").to_owned();
    let reader = app.token("f", "reader", Role::Reader).await;
    // From a cursor, so the stream's start does not race the first write.
    let after = newest_cursor(&app, &reader).await;
    let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "after": after, "unit": unit })).await;
    // A notified event first: once it arrived, the feed has read and sits idle.
    app.sql(&insert_event(&unit, "notified")).await;
    // Bounds only a failure (a loaded machine can be slow): without the re-read the
    // silent event never comes at all.
    let bound = PROMPT * 6;
    assert_eq!(tag(&tokio::time::timeout(bound, next_event(&mut ws)).await.expect("notified event")), "notified");
    app.sql("ALTER TABLE work_unit_events DISABLE TRIGGER work_unit_events_notify").await;
    app.sql(&insert_event(&unit, "silent")).await;
    let event = tokio::time::timeout(bound, next_event(&mut ws)).await.expect("delivered by the re-read");
    assert_eq!(tag(&event), "silent");
}

/// `pg_dump` and `pg_restore` from the folder of the embedded server's binaries.
fn pg_tool(name: &str) -> std::process::Command {
    let dir = work_ledger::embedded_pg::bin_dir().expect("PostgreSQL binaries");
    std::process::Command::new(dir.join(name))
}

#[tokio::test]
async fn a_stream_resumes_exactly_after_the_ledger_is_restored_into_a_fresh_cluster() {
    let source = spawn_app().await;
    // Make the source cluster's transaction ids far larger than a fresh
    // cluster's, as they are in any cluster that has lived a while.
    source
        .sql(
            "CREATE TABLE xid_burner (i int);
             DO $$ BEGIN FOR i IN 1..20000 LOOP
                 BEGIN INSERT INTO xid_burner VALUES (i); RAISE EXCEPTION 'burn'; EXCEPTION WHEN raise_exception THEN NULL; END;
             END LOOP; END $$;
             DROP TABLE xid_burner;",
        )
        .await;
    let op = source.token("f", "op", Role::Operator).await;
    source.register(&op, &["origin"]).await;
    let origin = newest_cursor(&source, &op).await;
    let reader = source.token("f", "reader", Role::Reader).await;
    let only_registered = |after: Option<&str>| json!({ "after": after, "types": ["REGISTERED"] });
    let mut before = Ws::subscription(&source, &reader, EVENTS, only_registered(Some(&origin))).await;
    for r in ["r1", "r2", "r3"] {
        source.register(&op, &[r]).await;
    }
    let seen = [next_event(&mut before).await, next_event(&mut before).await];
    assert_eq!(seen.iter().map(unit_ref).collect::<Vec<_>>(), ["r1", "r2"]);
    // The client stops after r2, with r2's cursor; r4 commits before the backup.
    let resume_at = seen[1]["cursor"].as_str().expect("cursor").to_owned();
    drop(before);
    source.register(&op, &["r4"]).await;

    let dir = tempfile::Builder::new().prefix("wl-restore-").tempdir().expect("tempdir");
    let dump = dir.path().join("ledger.dump");
    let out = pg_tool("pg_dump")
        .args(["--format=custom", "--file"])
        .arg(&dump)
        .arg(&source.db_url)
        .output()
        .expect("pg_dump");
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));

    let cluster =
        work_ledger::embedded_pg::EmbeddedPostgres::start(&dir.path().join("cluster")).await.expect("fresh cluster");
    let fresh = db::connect(cluster.url(), 1).await.expect("connect");
    // Roles are cluster-wide and not part of a database's dump.
    fresh
        .execute_unprepared(
            "CREATE ROLE work_ledger_app NOLOGIN; CREATE ROLE work_ledger_reader NOLOGIN; CREATE ROLE work_ledger_writer NOLOGIN; \
             CREATE ROLE work_ledger_warden NOLOGIN;",
        )
        .await
        .expect("roles");
    fresh.close().await.expect("close");
    let out = pg_tool("pg_restore")
        .args(["--exit-on-error", "--dbname", cluster.url()])
        .arg(&dump)
        .output()
        .expect("pg_restore");
    assert!(out.status.success(), "pg_restore: {}", String::from_utf8_lossy(&out.stderr));

    let restored = serve(cluster.url().to_owned(), test_config()).await;
    // (a) Resuming from the pre-backup cursor: every later event, once.
    let mut resumed = Ws::subscription(&restored, &reader, EVENTS, only_registered(Some(&resume_at))).await;
    assert_eq!(unit_ref(&prompt_event(&mut resumed, "r3").await), "r3");
    assert_eq!(unit_ref(&prompt_event(&mut resumed, "r4").await), "r4");
    // (b) New writes are delivered live; (c) nothing restored comes as new.
    let mut live = Ws::subscription(&restored, &reader, EVENTS, only_registered(None)).await;
    // The first thing the fresh stream sends must be a probe, nothing
    // restored; then one last probe that every stream reads up to.
    let first = live.first_probe(&restored, &op, "probe").await;
    assert!(unit_ref(&first).starts_with("probe-"), "a fresh subscription got {} first", unit_ref(&first));
    restored.register(&op, &["probe-end"]).await;
    for ws in [&mut live, &mut resumed] {
        while unit_ref(&prompt_event(ws, "probe-end").await) != "probe-end" {}
    }
    let mut newest = newest_cursor(&restored, &op).await;
    for r in ["n1", "n2", "n3"] {
        restored.register(&op, &[r]).await;
        assert_eq!(unit_ref(&prompt_event(&mut resumed, r).await), r);
        let first = unit_ref(&prompt_event(&mut live, r).await);
        assert!(first == r, "a fresh subscription got {first} before {r}");
        let mut from_list = Ws::subscription(&restored, &reader, EVENTS, only_registered(Some(&newest))).await;
        assert_eq!(unit_ref(&prompt_event(&mut from_list, r).await), r, "resumed from the list's newest");
        newest = newest_cursor(&restored, &op).await;
    }
    restored.live.stop();
    restored.owner.clone().close().await.ok();
    cluster.stop().await;
}

/// Every notification on the service's channels until `sentinel` arrives on each.
async fn notifications_until(listener: &mut PgListener, channels: &[&str], sentinel: &str) -> Vec<(String, String)> {
    let mut open: HashSet<&str> = channels.iter().copied().collect();
    let mut got = Vec::new();
    while !open.is_empty() {
        let n = tokio::time::timeout(crate::ws_client::GUARD, listener.recv())
            .await
            .expect("notifications within the guard")
            .expect("notification");
        if n.payload() == sentinel {
            open.remove(n.channel());
        } else {
            got.push((n.channel().to_owned(), n.payload().to_owned()));
        }
    }
    got
}

#[tokio::test]
async fn a_reader_of_another_fleet_learns_nothing_from_notifications_and_forgeries_change_nothing() {
    let app = spawn_app().await;
    let url = app.reader_login("fleet-b").await;
    let channels = ["work_ledger_events", "work_ledger_tokens", "work_ledger_ping"];
    let mut listener = PgListener::connect(url.as_str()).await.expect("the reader connects");
    listener.listen_all(channels).await.expect("LISTEN is open to every role");

    // Fleet "acme-secret" works: registers, claims, blocks, and revokes a token.
    let op = app.token("acme-secret", "op", Role::Operator).await;
    let units = app.register(&op, &["acme-1", "acme-2"]).await;
    let agent = Agent::new(&app, "acme-secret", "acme-agent", Role::Agent).await;
    let unit = agent.claim_next(json!({})).await.str("id");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.block(&unit, "why?", json!({})).await.data();
    let doomed = app.token("acme-secret", "doomed", Role::Reader).await;
    let doomed_id = app.sql_id("SELECT id::text AS id FROM api_tokens WHERE name = 'doomed'").await;
    assert!(db::tokens::revoke(&app.owner, doomed_id.parse().expect("uuid")).await.expect("revoke"));
    let _ = doomed;
    for channel in channels {
        app.sql(&format!("SELECT pg_notify('{channel}', 'sentinel')")).await;
    }
    let heard = notifications_until(&mut listener, &channels, "sentinel").await;

    let mut secrets: Vec<String> = vec!["acme".into(), doomed_id.clone()];
    secrets.extend(units.iter().map(|u| u["id"].as_str().unwrap_or_default().to_owned()));
    for table in ["work_unit_events", "work_unit_attempts", "blocking_questions", "api_tokens"] {
        let ids = app.sql_json(&format!("SELECT id::text AS id FROM {table} WHERE fleet = 'acme-secret'")).await;
        secrets.extend(ids.iter().map(|r| r["id"].as_str().unwrap_or_default().to_owned()));
    }
    assert!(heard.iter().any(|(c, _)| c == "work_ledger_events"), "the reader did hear event notifications");
    assert!(heard.iter().any(|(c, _)| c == "work_ledger_tokens"), "and a revocation");
    for (channel, payload) in &heard {
        for secret in &secrets {
            assert!(!payload.contains(secret.as_str()), "{channel} told the reader {secret:?}: {payload}");
        }
    }

    // Forgeries, by the same reader, on every channel: what it heard, garbage,
    // the old payload shapes and a live token's id.
    let subscriber = app.token("acme-secret", "subscriber", Role::Reader).await;
    let subscriber_id = app.sql_id("SELECT id::text AS id FROM api_tokens WHERE name = 'subscriber'").await;
    let origin = newest_cursor(&app, &op).await;
    let mut ws = Ws::subscription(&app, &subscriber, EVENTS, json!({ "after": origin })).await;
    let reader = db::connect(url.as_str(), 1).await.expect("reader connects");
    let mut forged: Vec<(String, String)> = heard.clone();
    forged.extend([
        ("work_ledger_events".into(), "garbage".into()),
        ("work_ledger_events".into(), json!({ "fleet": "acme-secret", "id": units[0]["id"] }).to_string()),
        ("work_ledger_tokens".into(), subscriber_id.clone()),
        ("work_ledger_tokens".into(), "garbage".into()),
        ("work_ledger_ping".into(), "garbage".into()),
    ]);
    for (channel, payload) in &forged {
        reader
            .execute_raw(db::stmt("SELECT pg_notify($1, $2)", [channel.clone().into(), payload.clone().into()]))
            .await
            .expect("any role can notify");
    }
    reader.close().await.expect("close");
    // Everything forged was delivered (to this listener, and so to the server's).
    for channel in channels {
        app.sql(&format!("SELECT pg_notify('{channel}', 'sentinel-2')")).await;
    }
    let echoed = notifications_until(&mut listener, &channels, "sentinel-2").await;
    assert!(echoed.len() >= forged.len(), "{echoed:?}");

    // The subscriber's next message is the next real event, and its token works.
    app.register(&op, &["acme-3"]).await;
    let event = prompt_event(&mut ws, "the next real event").await;
    assert_eq!((event["eventType"].as_str(), unit_ref(&event).as_str()), (Some("REGISTERED"), "acme-3"));
    let still = app.gql(&subscriber, "{ events(first: 1) { edges { node { id } } } }", json!({})).await;
    still.data();
}

#[tokio::test]
async fn reader_logins_and_the_service_run_with_timeouts_and_the_queue_is_watched() {
    let mut config = test_config();
    config.live.listener.health_interval = Duration::from_millis(100);
    let app = spawn_app_with(config).await;
    let url = app.reader_login("f").await;
    let show = |pool: sea_orm::DatabaseConnection| async move {
        let mut values = Vec::new();
        for setting in ["statement_timeout", "idle_in_transaction_session_timeout"] {
            let row = pool
                .query_one_raw(db::stmt(&format!("SELECT current_setting('{setting}') AS v"), []))
                .await
                .expect("show")
                .expect("row");
            values.push(row.try_get::<String>("", "v").expect("text"));
        }
        pool.close().await.expect("close");
        values
    };
    let reader = db::connect(url.as_str(), 1).await.expect("reader connects");
    assert_eq!(show(reader).await, ["1min", "1min"], "a reader login");
    let service = db::connect_service(&app.db_url, 1).await.expect("connect");
    // statement_timeout is the request pool's limit (issue 10's 10 s), idle-in-transaction the live path's.
    assert_eq!(show(service).await, ["10s", "30s"], "the service's connections");
    let app_role = app
        .sql_json("SELECT array_to_string(rolconfig, ',') AS c FROM pg_roles WHERE rolname = 'work_ledger_app'")
        .await;
    let config = app_role[0]["c"].as_str().unwrap_or_default();
    assert!(config.contains("statement_timeout=30s"), "{config}");
    assert!(config.contains("idle_in_transaction_session_timeout=30s"), "{config}");

    let mut usage = app.live.notification_queue_usage();
    let seen = tokio::time::timeout(crate::ws_client::GUARD, usage.wait_for(|u| u.is_some()))
        .await
        .expect("a queue usage sample")
        .expect("usage")
        .unwrap_or(1.0);
    assert!((0.0..0.5).contains(&seen), "{seen}");
}

/// Feeds woken together share their delivery watermark: one commit with
/// events in 24 fleets wakes 24 feeds, and the live pool's sessions take a
/// few watermarks (each a scan of pg_locks), not one per feed. The test's
/// database counts them; every feed still delivers its fleet's event.
#[tokio::test]
async fn feeds_woken_by_one_commit_share_the_watermark_they_read_below() {
    const FLEETS: usize = 24;
    let app = spawn_app().await;
    let mut streams = Vec::new();
    for i in 0..FLEETS {
        let fleet = format!("f{i}");
        let op = app.token(&fleet, "op", Role::Operator).await;
        let unit = app.register(&op, &["u"]).await[0]["id"].as_str().expect("id").to_owned();
        let reader = app.token(&fleet, "reader", Role::Reader).await;
        let mut ws = Ws::subscription(&app, &reader, EVENTS, json!({ "unit": unit })).await;
        until_live(&app, &mut ws, &fleet, &unit).await;
        streams.push((fleet, unit, ws));
    }
    app.count_watermarks(true).await;

    // One transaction, notified as the service notifies its commits.
    let rows: Vec<String> = streams
        .iter()
        .map(|(fleet, unit, _)| format!("('{fleet}', '{unit}', 'heartbeat', 'writer', '{{\"tx\": \"burst\"}}')"))
        .collect();
    let fleets: Vec<String> = streams.iter().map(|(fleet, _, _)| format!("'{fleet}'")).collect();
    app.sql(&format!(
        "INSERT INTO work_unit_events (fleet, unit_id, event_type, agent_id, detail) VALUES {};
         SELECT pg_notify('work_ledger_events', live_fleet_signal(f)) FROM unnest(ARRAY[{}]) AS f;",
        rows.join(", "),
        fleets.join(", ")
    ))
    .await;
    for (fleet, _, ws) in &mut streams {
        let mut got = tag(&prompt_event(ws, "the burst's event").await);
        while got == "before" {
            got = tag(&prompt_event(ws, "the burst's event").await);
        }
        assert_eq!(got, "burst", "{fleet}");
    }
    let taken = app.watermarks_taken().await;
    // A feed's idle re-read (every second) may take one of its own meanwhile.
    assert!(taken < FLEETS as i64 / 2, "{FLEETS} feeds woken by one commit took {taken} watermarks");
}

#[tokio::test]
async fn a_writes_notification_goes_out_on_the_notifiers_own_session_not_a_request_connection() {
    let app = spawn_app().await;
    let mut listener = PgListener::connect(app.db_url.as_str()).await.expect("the owner connects");
    listener.listen("work_ledger_events").await.expect("LISTEN");
    let op = app.token("acme", "op", Role::Operator).await;
    app.register(&op, &["announced"]).await;
    let heard =
        tokio::time::timeout(PROMPT, listener.recv()).await.expect("a notification in time").expect("notification");
    // The sender's backend, as PostgreSQL tells every listener.
    let sender = app
        .sql_json(&format!("SELECT application_name AS name FROM pg_stat_activity WHERE pid = {}", heard.process_id()))
        .await;
    assert_eq!(
        sender.first().and_then(|row| row["name"].as_str()),
        Some(work_ledger::ledger::notifier::APPLICATION_NAME),
        "the notification was sent by {sender:?}, not the notifier's session (sharing the request pool, it \
         waits for a connection behind the requests)"
    );
}
