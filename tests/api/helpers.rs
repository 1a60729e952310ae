//! The test harness: one PostgreSQL per test process (`DATABASE_URL` when
//! set, a throwaway embedded one otherwise), a migrated template database,
//! and per test a fresh database cloned from it with the real server on
//! port 0 in front.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::{Value, json};
use work_ledger::auth::{self, Role};

use work_ledger::db;
use work_ledger::embedded_pg::{self, EmbeddedPostgres};
use work_ledger::http::{Application, ServerConfig};
use work_ledger::ledger::Ledger;
use work_ledger::live::{Live, LiveConfig, SweeperConfig};
use work_ledger::projector::ProjectorConfig;

struct Cluster {
    /// URL of any database of the cluster, with `{db}` where the name goes.
    url_pattern: String,
    template: String,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

fn url_pattern(base: &str) -> String {
    let mut url = url::Url::parse(base).expect("DATABASE_URL must be a URL");
    url.set_path("/DBNAME");
    url.to_string().replace("DBNAME", "{db}")
}

impl Cluster {
    fn url(&self, db: &str) -> String {
        self.url_pattern.replace("{db}", db)
    }

    /// Started once per test process on a thread of its own, which keeps the
    /// embedded server's handle (and so the server) alive until the process exits.
    fn get() -> &'static Cluster {
        CLUSTER.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(async move {
                    let (base, embedded) = match std::env::var("DATABASE_URL") {
                        Ok(url) if !url.is_empty() => (url, None),
                        _ => {
                            remove_stopped_clusters();
                            let dir = tempfile::Builder::new().prefix("wl-test-").tempdir().expect("tempdir").keep();
                            let pg = EmbeddedPostgres::start(&dir).await.expect("embedded PostgreSQL");
                            // The cluster's own service database, which the tests leave unused (and
                            // unmigrated), closed like every other to the tests' reader logins.
                            let service = db::connect(pg.url(), 1).await.expect("connect");
                            let closing = format!("REVOKE CONNECT ON DATABASE {} FROM PUBLIC", embedded_pg::DATABASE);
                            service.execute_unprepared(&closing).await.expect("close the service database");
                            service.close().await.expect("close");
                            (pg.url().to_owned(), Some(pg))
                        }
                    };
                    let cluster = Cluster {
                        url_pattern: url_pattern(&base),
                        template: format!("wlt_{}_template", std::process::id()),
                    };
                    drop_stale_databases(&cluster).await;
                    admin(&cluster, &format!("CREATE DATABASE {}", cluster.template)).await;
                    db::migrate(&cluster.url(&cluster.template)).await.expect("migrate template");
                    tx.send(cluster).expect("send cluster");
                    // Keep `embedded` alive for the life of the process.
                    let _keep = embedded;
                    std::future::pending::<()>().await;
                });
            });
            rx.recv().expect("cluster started")
        })
    }
}

/// Throwaway clusters of earlier test processes (about 1 GB each) whose
/// server has stopped: a fast shutdown removes `postmaster.pid`, and a log
/// untouched for minutes rules out a cluster another process is starting.
fn remove_stopped_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let dir = entry.path();
        let is_test_cluster = entry.file_name().to_string_lossy().starts_with("wl-test-");
        let stopped = dir.join("pgdata/PG_VERSION").exists() && !dir.join("pgdata/postmaster.pid").exists();
        let quiet = std::fs::metadata(dir.join("postgres.log"))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > std::time::Duration::from_secs(120)));
        if is_test_cluster && stopped && quiet {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

async fn admin(cluster: &Cluster, sql: &str) {
    let conn = db::connect(&cluster.url("postgres"), 1).await.expect("connect admin");
    conn.execute_unprepared(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    conn.close().await.expect("close admin");
}

/// Databases left by earlier test processes that are gone (only matters
/// with a shared DATABASE_URL server; the embedded one is thrown away).
async fn drop_stale_databases(cluster: &Cluster) {
    let conn = db::connect(&cluster.url("postgres"), 1).await.expect("connect admin");
    let rows = conn
        .query_all_raw(Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT datname FROM pg_database WHERE datname LIKE 'wlt\\_%'",
        ))
        .await
        .expect("list databases");
    for row in rows {
        let name: String = row.try_get("", "datname").expect("datname");
        let pid = name.split('_').nth(1).unwrap_or_default();
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = conn.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    }
    conn.close().await.expect("close admin");
}

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub db_url: String,
    /// Statements the server has sent to PostgreSQL so far.
    pub statements: Arc<AtomicUsize>,
    /// Their SQL, in order (the same statements as `statements` counts).
    pub statement_log: Arc<std::sync::Mutex<Vec<String>>>,
    /// A pool as the migrating (owner) role: for setting up fixtures and for
    /// reading what the database recorded, bypassing row-level security.
    pub owner: DatabaseConnection,
    pub http: reqwest::Client,
    /// The server's live subsystem (listener, sweeper): tests wait on it
    /// instead of sleeping.
    pub live: Live,
    /// Where `GET /metrics` listens, when the config asked for it.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(test_config()).await
}

/// The live subsystem as tests run it: the sweeper and the projector run,
/// but an hour apart, so that a test that expires a lease decides itself
/// when a sweep happens (`app.live.sweep_now()`), and one that reads a
/// projection's tables when they are folded (`app.project()`); reads add
/// what is not folded themselves. A config with short intervals runs them.
pub fn test_config() -> ServerConfig {
    let hour = std::time::Duration::from_secs(3600);
    ServerConfig {
        live: LiveConfig {
            sweeper: SweeperConfig { interval: hour, ..SweeperConfig::default() },
            projector: ProjectorConfig { interval: hour, ..ProjectorConfig::default() },
            ..LiveConfig::default()
        },
        ..ServerConfig::default()
    }
}

pub async fn spawn_app_with(config: ServerConfig) -> TestApp {
    // Server-side errors (logged with their correlation ids) show in failing tests' output.
    // RUST_LOG raises it for a run (e.g. `work_ledger::http::ws=debug`).
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,sqlx=error".to_owned());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    let cluster = Cluster::get();
    let name = format!("wlt_{}_{}", std::process::id(), NEXT_DB.fetch_add(1, Ordering::SeqCst));
    // Born closed to PUBLIC (as `migrate` leaves it): a reader login of
    // another test must never find a database it may connect to (SPEC §8,
    // the audit reports one), not even while this one is being made.
    admin(cluster, &format!("CREATE DATABASE {name} TEMPLATE {} ALLOW_CONNECTIONS false", cluster.template)).await;
    admin(cluster, &format!("REVOKE CONNECT ON DATABASE {name} FROM PUBLIC")).await;
    admin(cluster, &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true")).await;
    // As `serve` does at start: a clone is up to date, but database-wide
    // privileges are not copied from the template and are set again.
    db::migrate(&cluster.url(&name)).await.expect("migrate the test database");
    start_server(cluster.url(&name), config).await
}

/// The real server in front of a database of the caller's (already migrated).
pub async fn spawn_app_on(db_url: &str) -> TestApp {
    start_server(db_url.to_owned(), test_config()).await
}

impl TestApp {
    /// Another server process on the same database (its own pools, listener
    /// and sweeper), as a replica behind a load balancer would be.
    pub async fn spawn_replica(&self) -> TestApp {
        self.spawn_replica_with(test_config()).await
    }

    pub async fn spawn_replica_with(&self, config: ServerConfig) -> TestApp {
        start_server(self.db_url.clone(), config).await
    }
}

/// The server over any database (say, one restored into another cluster).
pub async fn serve(db_url: String, config: ServerConfig) -> TestApp {
    start_server(db_url, config).await
}

/// Starts the server as `serve` does (HTTP, listener, sweeper) and returns
/// once its LISTEN connection is up.
pub async fn start_server(db_url: String, config: ServerConfig) -> TestApp {
    let mut pool = db::connect_limited(&db_url, 20, config.db).await.expect("connect app pool");
    // Counts every statement the server sends on behalf of requests: the N+1
    // tests read it. The listener's periodic health ping (a NOTIFY through this
    // pool) is not a request's statement and would make those counts flaky,
    // nor is the record of a token's last use, sent beside a request (at most
    // once a minute per token) and never awaited by it.
    let statements = Arc::new(AtomicUsize::new(0));
    let statement_log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (counter, log) = (statements.clone(), statement_log.clone());
    pool.set_metric_callback(move |info| {
        let sql = &info.statement.sql;
        if !sql.starts_with("SELECT pg_notify(") && !sql.starts_with("SELECT ledger_token_touch(") {
            log.lock().unwrap_or_else(|e| e.into_inner()).push(info.statement.sql.clone());
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let app = Application::build_with(Ledger::new(pool), "127.0.0.1:0", config).await.expect("bind");
    let addr = app.local_addr().expect("addr");
    let metrics_addr = app.metrics_addr();
    let live = app.live().clone();
    tokio::spawn(app.run_until(std::future::pending()));
    let owner = db::connect(&db_url, 5).await.expect("connect owner pool");
    let mut listening = live.listener_status();
    tokio::time::timeout(std::time::Duration::from_secs(30), listening.wait_for(|up| *up))
        .await
        .expect("the LISTEN connection within 30 s")
        .expect("listener status");
    TestApp { addr, db_url, owner, http: reqwest::Client::new(), statements, statement_log, live, metrics_addr }
}

/// A GraphQL response as the client sees it.
#[derive(Debug)]
pub struct Gql {
    pub status: u16,
    pub body: Value,
}

impl Gql {
    /// `data`, asserting there were no errors.
    pub fn data(&self) -> &Value {
        assert!(self.body.get("errors").is_none(), "unexpected errors: {:#}", self.body);
        &self.body["data"]
    }

    /// The first error's `extensions.code`.
    pub fn code(&self) -> &str {
        self.body["errors"][0]["extensions"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code: {:#}", self.body))
    }

    pub fn message(&self) -> &str {
        self.body["errors"][0]["message"].as_str().unwrap_or("")
    }

    pub fn assert_code(&self, code: &str) -> &Self {
        assert_eq!(self.code(), code, "{:#}", self.body);
        self
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Mints a token directly in the database, as `work-ledger token create` does.
    pub async fn token(&self, fleet: &str, name: &str, role: Role) -> String {
        let (secret, hash) = auth::new_token();
        db::tokens::insert(&self.owner, fleet, name, &role.permissions(), &hash).await.expect("mint token");
        secret
    }

    pub async fn post_raw(&self, auth: Option<&str>, body: String) -> Gql {
        let mut req = self.http.post(self.url("/graphql")).header("content-type", "application/json").body(body);
        if let Some(auth) = auth {
            req = req.header("authorization", auth);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let body = resp.json().await.expect("JSON body");
        Gql { status, body }
    }

    pub async fn gql(&self, token: &str, query: &str, variables: Value) -> Gql {
        let body = json!({ "query": query, "variables": variables }).to_string();
        self.post_raw(Some(&format!("Bearer {token}")), body).await
    }

    /// Runs raw SQL as the owner and returns the first column of every row as JSON.
    pub async fn sql_json(&self, sql: &str) -> Vec<Value> {
        let rows = self
            .owner
            .query_all_raw(Statement::from_string(
                sea_orm::DbBackend::Postgres,
                format!("SELECT to_jsonb(q) AS j FROM ({sql}) q"),
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        rows.iter().map(|r| r.try_get::<Value>("", "j").expect("json")).collect()
    }

    /// For a claim that found nothing it should have: the fleet's units, the
    /// locks on the ledger's tables and the database's other sessions.
    pub async fn why_unclaimed(&self, fleet: &str) -> String {
        let units = self
            .sql_json(&format!(
                "SELECT external_ref, state, claimed_by, attempt_count, lease_expires_at, xmin::text AS xmin
                   FROM work_units WHERE fleet = '{fleet}'"
            ))
            .await;
        let locks = self
            .sql_json(
                "SELECT l.pid, l.locktype, l.relation::regclass::text AS relation, l.mode, l.granted, a.state,
                        left(a.query, 200) AS query
                   FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                  WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND l.pid <> pg_backend_pid()",
            )
            .await;
        format!("units {units:?}; locks {locks:?}")
    }

    pub async fn sql_i64(&self, sql: &str) -> i64 {
        let rows = self.sql_json(sql).await;
        let row = rows.first().unwrap_or_else(|| panic!("no row from {sql}"));
        let value = row.as_object().and_then(|o| o.values().next()).cloned().unwrap_or(Value::Null);
        value.as_i64().unwrap_or_else(|| panic!("not an integer from {sql}: {value}"))
    }

    /// A new `work-ledger reader create` login of fleet `fleet` (password
    /// `s3cret`): its connection URL, the role's name as the user.
    pub async fn reader_login(&self, fleet: &str) -> url::Url {
        let role = format!("grafana_t{}", uuid::Uuid::new_v4().simple());
        db::reader_logins::create(&self.owner, &role, fleet, "s3cret").await.expect("create reader");
        let mut url = url::Url::parse(&self.db_url).expect("url");
        url.set_username(&role).expect("user");
        url.set_password(Some("s3cret")).expect("password");
        url
    }

    pub async fn register(&self, token: &str, refs: &[&str]) -> Vec<Value> {
        let units: Vec<Value> = refs.iter().map(|r| json!({ "externalRef": r })).collect();
        let resp = self
            .gql(
                token,
                "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id externalRef state } }",
                json!({ "u": units }),
            )
            .await;
        resp.data()["registerUnits"].as_array().expect("units").clone()
    }
}

impl TestApp {
    /// Lets a fixture lay out history in raw SQL with past timestamps (the
    /// operator-read calendars): switches off, in this test's own database
    /// only, the history guards that rightly refuse such
    /// rewrites from anyone else. The state-machine triggers stay on.
    pub async fn allow_history_rewrites(&self) {
        self.sql(
            "ALTER TABLE work_units DISABLE TRIGGER work_units_holder_guard;
             ALTER TABLE work_units DISABLE TRIGGER work_units_change_recorded;
             ALTER TABLE work_units DISABLE TRIGGER work_units_claim_recorded;
             ALTER TABLE work_unit_attempts DISABLE TRIGGER work_unit_attempts_history_guard;
             ALTER TABLE blocking_questions DISABLE TRIGGER blocking_questions_guard;",
        )
        .await;
    }

    /// Has this test's database count the delivery watermarks taken from
    /// now on (each a scan of pg_locks): by the server's live
    /// pool (`live`: its feeds), or else by its other sessions (requests,
    /// catching-up subscribers). [`TestApp::watermarks_taken`] reads the count.
    pub async fn count_watermarks(&self, live: bool) {
        let sessions = if live { "=" } else { "<>" };
        self.sql(&format!(
            "CREATE SEQUENCE watermarks_taken;
             GRANT USAGE ON SEQUENCE watermarks_taken TO work_ledger_app;
             ALTER FUNCTION live_delivery_watermark() RENAME TO live_delivery_watermark_uncounted;
             CREATE FUNCTION live_delivery_watermark() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
             BEGIN
                 IF current_setting('application_name') {sessions} 'work-ledger-live' THEN
                     PERFORM nextval('watermarks_taken');
                 END IF;
                 RETURN live_delivery_watermark_uncounted();
             END $$;"
        ))
        .await;
    }

    pub async fn watermarks_taken(&self) -> i64 {
        self.sql_i64("SELECT coalesce(pg_sequence_last_value('watermarks_taken'), 0)").await
    }

    /// Mints in SQL, for raw-SQL writes, a token of `fleet` with
    /// `permissions` for every name the SQL set `names` yields, known by the
    /// hash [`sql_token`] of the name: every write acts as a token (SPEC §8).
    pub async fn sql_tokens(&self, fleet: &str, permissions: &str, names: &str) {
        self.sql(&format!(
            "SELECT ledger_token_create('{fleet}', n, ARRAY[{permissions}], {}) FROM ({names}) AS t(n)",
            sql_token("n")
        ))
        .await;
    }

    /// Creates database `name` in the test cluster closed to PUBLIC from its
    /// first moment, as every database but a ledger's is in the deployments
    /// the project ships (no reader login of any test may reach it).
    pub async fn create_closed_database(&self, name: &str) {
        for sql in [
            format!("CREATE DATABASE {name} ALLOW_CONNECTIONS false"),
            format!("REVOKE CONNECT ON DATABASE {name} FROM PUBLIC"),
            format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
        ] {
            self.sql(&sql).await;
        }
    }

    /// Executes SQL as the owner, panicking on failure.
    pub async fn sql(&self, sql: &str) {
        self.owner.execute_unprepared(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Executes SQL that PostgreSQL must refuse; returns its error text.
    pub async fn sql_refused(&self, sql: &str) -> String {
        match self.owner.execute_unprepared(sql).await {
            Ok(_) => panic!("PostgreSQL accepted: {sql}"),
            Err(e) => e.to_string(),
        }
    }

    /// Runs a statement (data-modifying CTEs welcome) and returns the text
    /// column `id` of its first row.
    pub async fn sql_id(&self, sql: &str) -> String {
        let row = self
            .owner
            .query_one_raw(Statement::from_string(sea_orm::DbBackend::Postgres, sql.to_owned()))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .unwrap_or_else(|| panic!("no row from {sql}"));
        row.try_get("", "id").expect("text column id")
    }

    /// A READY unit inserted directly, bypassing the API.
    pub async fn raw_unit(&self, fleet: &str, external_ref: &str) -> String {
        self.sql_id(&format!(
            "INSERT INTO work_units (fleet, external_ref) VALUES ('{fleet}', '{external_ref}') RETURNING id::text"
        ))
        .await
    }

    /// Moves a READY unit to CLAIMED by `agent` with attempt 1, in raw SQL,
    /// with its `claimed` event (every state change is logged).
    pub async fn raw_claim(&self, unit: &str, agent: &str) -> String {
        self.sql_id(&format!(
            "WITH a AS (INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
                            SELECT fleet, id, attempt_count + 1, '{agent}' FROM work_units WHERE id = '{unit}'
                            RETURNING id, attempt_no, started_at),
                      u AS (UPDATE work_units SET state = 'claimed', claimed_by = '{agent}',
                                   current_attempt_id = (SELECT id FROM a), attempt_count = (SELECT attempt_no FROM a),
                                   lease_expires_at = now() + interval '15 minutes',
                                   first_claimed_at = coalesce(first_claimed_at, (SELECT started_at FROM a))
                             WHERE id = '{unit}' RETURNING id, fleet, current_attempt_id),
                      e AS (INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id)
                            SELECT fleet, id, current_attempt_id, 'claimed', 'ready', 'claimed', '{agent}' FROM u)
                 SELECT id::text FROM a"
        ))
        .await
    }
}

impl TestApp {
    /// Opens a transaction as the application role, with the fleet setting
    /// when given, as the server's own transaction helper does.
    async fn app_role_tx(&self, fleet: Option<&str>) -> sea_orm::DatabaseTransaction {
        self.role_tx("work_ledger_app", fleet).await
    }

    async fn role_tx(&self, role: &str, fleet: Option<&str>) -> sea_orm::DatabaseTransaction {
        use sea_orm::TransactionTrait;
        let tx = self.owner.begin().await.expect("begin");
        tx.execute_unprepared(&format!("SET LOCAL ROLE {role}")).await.expect("set role");
        if let Some(fleet) = fleet {
            tx.execute_unprepared(&format!("SELECT set_config('work_ledger.fleet', '{fleet}', true)"))
                .await
                .expect("fleet");
        }
        tx
    }

    /// A query as the application role; rows as JSON. Rolled back.
    pub async fn app_role_query(&self, fleet: Option<&str>, sql: &str) -> Vec<Value> {
        let tx = self.app_role_tx(fleet).await;
        let rows = tx
            .query_all_raw(Statement::from_string(
                sea_orm::DbBackend::Postgres,
                format!("SELECT to_jsonb(q) AS j FROM ({sql}) q"),
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        tx.rollback().await.expect("rollback");
        rows.iter().map(|r| r.try_get::<Value>("", "j").expect("json")).collect()
    }

    /// The scans of `table` that `sql` made, index and sequential, run as
    /// the application role in `fleet`: the database's own count of the
    /// probes a statement took (`pg_stat_xact_user_tables`, this
    /// transaction's), whatever plan it chose.
    pub async fn app_role_scans(&self, fleet: &str, table: &str, sql: &str) -> i64 {
        let scans = "SELECT coalesce((SELECT coalesce(idx_scan, 0) + seq_scan FROM pg_stat_xact_user_tables
                                       WHERE relname = $1), 0) AS n";
        self.app_role_counted(fleet, table, sql, scans, None).await
    }

    /// The rows of `table` that `sql` read, as entries of its indexes and
    /// by sequential scans, run as the application role in `fleet` (this
    /// transaction's `idx_tup_read` and `seq_tup_read`). Planned as on a
    /// ledger of any size, where the totals are read through their indexes
    /// (sequential scans off): the few rows of a test would otherwise be
    /// read whole by any statement that touches them.
    pub async fn app_role_rows_read(&self, fleet: &str, table: &str, sql: &str) -> i64 {
        let rows = "SELECT (pg_stat_get_xact_tuples_returned($1::text::regclass)
                           + coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) FROM pg_index i
                                        WHERE i.indrelid = $1::text::regclass), 0))::bigint AS n";
        self.app_role_counted(fleet, table, sql, rows, Some("SET LOCAL enable_seqscan = off")).await
    }

    /// `counter` (a statement of one bigint `n` about the table `$1`) after
    /// `sql`, less before it, in one transaction of the application role
    /// (after `setting`).
    async fn app_role_counted(&self, fleet: &str, table: &str, sql: &str, counter: &str, setting: Option<&str>) -> i64 {
        let tx = self.app_role_tx(Some(fleet)).await;
        if let Some(setting) = setting {
            tx.execute_unprepared(setting).await.unwrap_or_else(|e| panic!("{setting}: {e}"));
        }
        let scans = Statement::from_sql_and_values(sea_orm::DbBackend::Postgres, counter, [table.into()]);
        let count = |row: Option<sea_orm::QueryResult>| row.expect("a row").try_get::<i64>("", "n").expect("n");
        let before = count(tx.query_one_raw(scans.clone()).await.expect("scans"));
        tx.query_all_raw(Statement::from_string(sea_orm::DbBackend::Postgres, sql))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let after = count(tx.query_one_raw(scans).await.expect("scans"));
        tx.rollback().await.expect("rollback");
        after - before
    }

    /// Statements in one transaction that commits, so that deferred
    /// constraint triggers run too: the error text of the first refusal
    /// (statement or commit), if any. `role` `None` is the owner, the only
    /// login that can write hand-written SQL (the application role has no
    /// table writes); `Some("work_ledger_writer")` is the write functions'
    /// role, under row-level security with `fleet` set.
    pub async fn commit_as(&self, role: Option<&str>, fleet: &str, sqls: &[&str]) -> Result<(), String> {
        use sea_orm::TransactionTrait;
        // The message, then the SQLSTATE and the constraint the refusal names.
        let text = |e: sea_orm::DbErr| match db::violation(&e) {
            Some((code, constraint)) => format!("{e} [SQLSTATE {code}, constraint {constraint}]"),
            None => e.to_string(),
        };
        let tx = match role {
            Some(role) => self.role_tx(role, Some(fleet)).await,
            None => self.owner.begin().await.expect("begin"),
        };
        for sql in sqls {
            if let Err(e) = tx.execute_unprepared(sql).await {
                let _ = tx.rollback().await;
                return Err(text(e));
            }
        }
        tx.commit().await.map_err(text)
    }

    /// A statement as the application role: rows affected, or the error text. Rolled back.
    pub async fn app_role_exec(&self, fleet: Option<&str>, sql: &str) -> Result<u64, String> {
        let tx = self.app_role_tx(fleet).await;
        let result = tx.execute_unprepared(sql).await.map(|r| r.rows_affected()).map_err(|e| e.to_string());
        tx.rollback().await.expect("rollback");
        result
    }
}

/// A bearer token's hash as a SQL literal: what a write function takes as
/// its caller.
pub fn hash_sql(token: &str) -> String {
    format!("decode('{}', 'hex')", hex::encode(work_ledger::auth::hash_token(token)))
}

/// The token hash [`TestApp::sql_tokens`] gave the name the SQL expression
/// `name` yields, as a SQL expression.
pub fn sql_token(name: &str) -> String {
    format!("sha256(convert_to({name}, 'UTF8'))")
}

/// The fields every write-path test reads back.
pub const UNIT: &str = "id externalRef state claimedBy currentAttemptId attemptCount costCents leaseExpiresAt \
    disposition evidenceUrls legalActions openQuestion { id status question answer }";

/// A typed client for one token: one method per mutation of SPEC §4.
#[derive(Clone)]
pub struct Agent<'a> {
    pub app: &'a TestApp,
    pub token: String,
}

impl<'a> Agent<'a> {
    pub async fn new(app: &'a TestApp, fleet: &str, name: &str, role: Role) -> Agent<'a> {
        Agent { app, token: app.token(fleet, name, role).await }
    }

    pub async fn run(&self, query: &str, variables: Value) -> Gql {
        self.app.gql(&self.token, query, variables).await
    }

    pub async fn claim_next(&self, vars: Value) -> Gql {
        let q = format!(
            "mutation($domain: String, $lease: Int, $key: String) {{ r: claimNext(domain: $domain, leaseSeconds: $lease, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, vars).await
    }

    pub async fn claim_unit(&self, id: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($id: UUID!, $lease: Int, $key: String) {{ r: claimUnit(id: $id, leaseSeconds: $lease, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "id": id }), vars)).await
    }

    pub async fn heartbeat(&self, attempt: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($a: UUID!, $lease: Int) {{ r: heartbeat(attemptId: $a, leaseSeconds: $lease) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "a": attempt }), vars)).await
    }

    pub async fn transition(&self, unit: &str, to: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($u: UUID!, $to: WorkState!, $evidence: String, $key: String) {{ r: transition(unitId: $u, to: $to, evidenceUrl: $evidence, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "u": unit, "to": to }), vars)).await
    }

    pub async fn block(&self, unit: &str, question: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($u: UUID!, $q: String!, $group: String, $key: String) {{ r: block(unitId: $u, question: $q, assigneeGroup: $group, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "u": unit, "q": question }), vars)).await
    }

    pub async fn unblock(&self, unit: &str, answer: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($u: UUID!, $q: UUID, $a: String!, $key: String) {{ r: unblock(unitId: $u, questionId: $q, answer: $a, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "u": unit, "a": answer }), vars)).await
    }

    pub async fn release(&self, unit: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($u: UUID!, $reason: String, $outcome: ReleaseOutcome, $key: String) {{ r: release(unitId: $u, reason: $reason, outcome: $outcome, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "u": unit }), vars)).await
    }

    pub async fn record_cost(&self, attempt: &str, cents: i64, key: &str) -> Gql {
        let q = format!(
            "mutation($a: UUID!, $c: Int!, $key: String!) {{ r: recordCost(attemptId: $a, cents: $c, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, json!({ "a": attempt, "c": cents, "key": key })).await
    }

    pub async fn dispose(&self, unit: &str, disposition: &str, vars: Value) -> Gql {
        let q = format!(
            "mutation($u: UUID!, $d: Disposition!, $evidence: String, $reason: String, $key: String) {{ r: dispose(unitId: $u, disposition: $d, evidenceUrl: $evidence, reason: $reason, idempotencyKey: $key) {{ {UNIT} }} }}"
        );
        self.run(&q, merge(json!({ "u": unit, "d": disposition }), vars)).await
    }
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

impl Gql {
    /// The unit a mutation returned (aliased `r`).
    pub fn unit(&self) -> &Value {
        &self.data()["r"]
    }

    pub fn str(&self, field: &str) -> String {
        self.unit()[field].as_str().unwrap_or_else(|| panic!("no {field} in {:#}", self.body)).to_owned()
    }
}

impl TestApp {
    /// Makes time pass for one unit: its lease ran out a second ago.
    pub async fn expire_lease(&self, unit: &str) {
        self.sql(&format!("UPDATE work_units SET lease_expires_at = now() - interval '1 second' WHERE id = '{unit}'"))
            .await;
    }

    /// Waits until `n` sessions of this test's database wait on a lock (a
    /// third session holding a row lock lines writers up this way).
    pub async fn wait_for_lock_waiters(&self, n: i64) {
        // The owner pool is on the test's own database.
        let sql = "SELECT count(*) AS n FROM pg_stat_activity
                    WHERE datname = current_database() AND wait_event_type = 'Lock'";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.sql_i64(sql).await < n {
            assert!(std::time::Instant::now() < deadline, "{n} lock waiters within 30 s");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Every row a write on `unit` could touch, read as the owner (past
    /// row-level security): the unit's row with all its columns (the lease,
    /// `updated_at` and the cost too), its attempts, its questions, its
    /// events, and how many units, attempts, questions and events the whole
    /// database holds. Equal snapshots before and after a refusal are what
    /// "nothing written" means; "no new event" misses a refusal that moves
    /// the lease or the cost without logging it.
    pub async fn snapshot(&self, unit: &str) -> Value {
        let rows = |table: &str, column: &str, order: &str| {
            format!(
                "SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY {order}), '[]') FROM {table} t WHERE {column} = '{unit}'"
            )
        };
        let snapshot = self
            .sql_json(&format!(
                "SELECT (SELECT to_jsonb(u) FROM work_units u WHERE id = '{unit}') AS unit,
                        ({}) AS attempts, ({}) AS questions, ({}) AS events,
                        (SELECT count(*) FROM work_units) AS all_units,
                        (SELECT count(*) FROM work_unit_attempts) AS all_attempts,
                        (SELECT count(*) FROM blocking_questions) AS all_questions,
                        (SELECT count(*) FROM work_unit_events) AS all_events",
                rows("work_unit_attempts", "unit_id", "attempt_no"),
                rows("blocking_questions", "unit_id", "created_at, id"),
                rows("work_unit_events", "unit_id", "seq"),
            ))
            .await;
        let snapshot = snapshot.into_iter().next().expect("one row");
        assert!(!snapshot["unit"].is_null(), "no unit {unit} to snapshot");
        snapshot
    }

    /// Asserts that `unit`'s snapshot is still `before`, naming what differs.
    pub async fn assert_unchanged(&self, unit: &str, before: &Value, what: &str) {
        let after = self.snapshot(unit).await;
        let mut differs = Vec::new();
        diff("", before, &after, &mut differs);
        assert!(differs.is_empty(), "{what} wrote: {}", differs.join("; "));
    }

    /// Where the statement log stands now, for [`Self::request_statements_since`].
    pub fn statement_mark(&self) -> usize {
        self.statement_log.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The statements sent since `mark` on behalf of requests' work, without
    /// the token lookups (a token's first request on the server looks its
    /// facts up): what is counted is what the request asks for.
    pub fn request_statements_since(&self, mark: usize) -> Vec<String> {
        let log = self.statement_log.lock().unwrap_or_else(|e| e.into_inner());
        log[mark..]
            .iter()
            .filter(|sql| !sql.contains("authenticate_token") && !sql.contains("api_tokens"))
            .cloned()
            .collect()
    }

    pub async fn event_count(&self) -> i64 {
        self.sql_i64("SELECT count(*) FROM work_unit_events").await
    }

    pub async fn events_of(&self, unit: &str) -> Vec<String> {
        self.sql_json(&format!(
            "SELECT event_type::text AS t FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"
        ))
        .await
        .into_iter()
        .map(|row| row["t"].as_str().unwrap_or_default().to_owned())
        .collect()
    }
}

/// The first of `n` consecutive loopback ports, free now, for a server that
/// cannot listen on port 0 and say where it did (Prometheus, a PostgreSQL
/// formation). They lie below the kernel's ephemeral range, which every
/// port-0 listener of the suite (each test's server) and every outgoing
/// connection draws from, so none of those can take them between this check
/// and the server's own bind; within this process no two calls share a port,
/// and the process id spreads concurrent test processes apart.
pub fn loopback_ports(n: u16) -> u16 {
    static HANDED_OUT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (low, span) = (10_000u32, ephemeral_start.saturating_sub(10_000 + u32::from(n)).max(1));
    let seed = std::process::id().wrapping_mul(7919);
    (0..500)
        .map(|_| {
            let offset = seed.wrapping_add(HANDED_OUT.fetch_add(u32::from(n), Ordering::SeqCst)) % span;
            u16::try_from(low + offset).expect("a port")
        })
        .find(|&base| (0..n).all(|k| std::net::TcpListener::bind(("127.0.0.1", base + k)).is_ok()))
        .expect("free loopback ports below the ephemeral range")
}

/// The paths at which two JSON values differ, with both sides.
fn diff(path: &str, before: &Value, after: &Value, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for key in b.keys().chain(a.keys().filter(|k| !b.contains_key(*k))) {
                diff(
                    &format!("{path}.{key}"),
                    b.get(key).unwrap_or(&Value::Null),
                    a.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (b, a)) in b.iter().zip(a).enumerate() {
                diff(&format!("{path}[{i}]"), b, a, out);
            }
        }
        _ if before != after => out.push(format!("{path}: {before} -> {after}")),
        _ => {}
    }
}

/// The address a spawned `work-ledger serve` prints once it listens (its
/// "serving addr=..." log line on stderr); stderr is drained after, so the
/// child never blocks on a full pipe.
pub async fn serving_addr(child: &mut tokio::process::Child, within: std::time::Duration) -> String {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let addr = tokio::time::timeout(within, async {
        while let Some(line) = stderr.next_line().await.expect("read stderr") {
            if let Some(rest) = line.split("addr=").nth(1).filter(|_| line.contains("serving")) {
                return rest.trim().to_owned();
            }
        }
        panic!("serve exited before listening");
    })
    .await
    .expect("serve listening in time");
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    addr
}

impl TestApp {
    /// What the projector does, now: every projection folded up to the
    /// watermark, then the totals' delta rows compacted (a test that reads
    /// a projection's tables themselves, not a read that adds the tail).
    pub async fn project(&self) -> u64 {
        self.live.project_now().await.expect("a projector pass")
    }

    /// Every projection rebuilt from the whole log (`projections rebuild`).
    pub async fn rebuild_projections(&self) {
        self.sql("SELECT ledger_project_rebuild(name) FROM ledger_projections()").await;
    }
}
