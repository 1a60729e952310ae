//! An embedded PostgreSQL for laptops and tests: the machine's own `initdb`
//! and `postgres` binaries, data under a folder of ours, a Unix socket only
//! (no TCP port to collide with), and stopped with us.
//!
//! `postgres` runs under a small shell watchdog whose stdin is a pipe held by
//! this process. When we exit, cleanly or not, the pipe closes and the
//! watchdog sends the server SIGINT (fast shutdown): the database never
//! outlives the process that started it.

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// The database created for the service inside the embedded cluster.
pub const DATABASE: &str = "work_ledger";

/// What [`EmbeddedPostgres::wait_ready`] runs in the service's database on
/// every start, as every deployment the project ships does: every other
/// database refuses CONNECT to PUBLIC.
const CONFINE: &str = include_str!("../deploy/postgres/confine.sql");

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) found on PATH or in /usr/lib/postgresql/*/bin. \
         Three ways out: install PostgreSQL (e.g. `apt-get install postgresql`), set DATABASE_URL to an \
         existing database, or run `docker compose up`"
    )]
    NoBinaries,
    #[error(
        "running as root, but PostgreSQL refuses to run as root and there is no `postgres` user to run it as; \
         create one (`useradd postgres`) or set DATABASE_URL"
    )]
    NoPostgresUser,
    #[error("{step} failed: {detail}")]
    Failed { step: &'static str, detail: String },
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EmbeddedError + '_ {
    move |source| EmbeddedError::Io { path: path.to_owned(), source }
}

pub struct EmbeddedPostgres {
    watchdog: Child,
    url: String,
    data_dir: PathBuf,
}

/// Folders searched after PATH, newest major version first.
/// `WORK_LEDGER_PG_BIN_DIR`, when set, is the only folder searched (to pick
/// one of several installed versions).
fn find_bin_dir() -> Option<PathBuf> {
    let has_server = |dir: &PathBuf| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir)).filter(has_server);
    }
    let on_path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    let mut versioned: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versioned.sort_by_key(|p| {
        let major = p.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse::<u32>().ok());
        std::cmp::Reverse(major.unwrap_or(0))
    });
    let fixed = ["/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/pgsql/bin"].map(PathBuf::from);
    on_path.into_iter().chain(versioned).chain(fixed).find(has_server)
}

/// The folder of the PostgreSQL binaries the embedded server uses, links
/// followed (`pg_dump` and `pg_restore` of the same version are there).
pub fn bin_dir() -> Option<PathBuf> {
    let dir = find_bin_dir()?;
    let real = dir.join("initdb").canonicalize().ok().and_then(|p| p.parent().map(Path::to_path_buf));
    Some(real.unwrap_or(dir))
}

pub const BIN_DIR_ENV: &str = "WORK_LEDGER_PG_BIN_DIR";

/// A PostgreSQL client program (`pg_dump`, `pg_restore`): the one beside the
/// server binaries the embedded PostgreSQL would use, else the first on PATH.
pub fn client_tool(name: &str) -> Option<PathBuf> {
    let beside_server = find_bin_dir().map(|dir| dir.join(name)).filter(|p| p.is_file());
    beside_server.or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
    })
}

/// uid and gid of the `postgres` user, when we are root and must drop to it.
fn run_as() -> Result<Option<(u32, u32)>, EmbeddedError> {
    let id = |flag: &str| -> Option<u32> {
        let out = std::process::Command::new("id").args([flag]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    if id("-u") != Some(0) {
        return Ok(None);
    }
    let lookup = |flag: &str| -> Option<u32> {
        let out = std::process::Command::new("id").args([flag, "postgres"]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    match (lookup("-u"), lookup("-g")) {
        (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
        _ => Err(EmbeddedError::NoPostgresUser),
    }
}

fn command(program: PathBuf, owner: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    cmd.env_remove("PGDATA").env("LC_ALL", "C.UTF-8");
    cmd
}

fn make_dir(path: &Path, owner: Option<(u32, u32)>) -> Result<(), EmbeddedError> {
    std::fs::create_dir_all(path).map_err(io(path))?;
    if let Some((uid, gid)) = owner {
        chown(path, Some(uid), Some(gid)).map_err(io(path))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(io(path))
}

impl EmbeddedPostgres {
    /// Starts (initialising on first use) a cluster kept under `root`.
    pub async fn start(root: &Path) -> Result<Self, EmbeddedError> {
        let bin = find_bin_dir().ok_or(EmbeddedError::NoBinaries)?;
        let owner = run_as()?;
        std::fs::create_dir_all(root).map_err(io(root))?;
        let root = root.canonicalize().map_err(io(root))?;
        if let Some((uid, gid)) = owner {
            // The server user must be able to reach its folders.
            chown(&root, Some(uid), Some(gid)).map_err(io(&root))?;
        }
        let data_dir = root.join("pgdata");
        // Unix socket paths are limited to ~107 bytes; fall back to /tmp for deep folders.
        let mut socket_dir = root.join("run");
        if socket_dir.as_os_str().len() > 80 {
            socket_dir = std::env::temp_dir().join(format!("work-ledger-{}", std::process::id()));
        }
        make_dir(&socket_dir, owner)?;

        if !data_dir.join("PG_VERSION").exists() {
            make_dir(&data_dir, owner)?;
            let out = command(bin.join("initdb"), owner)
                .arg("-D")
                .arg(&data_dir)
                .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"])
                .output()
                .await
                .map_err(io(&bin))?;
            if !out.status.success() {
                return Err(EmbeddedError::Failed {
                    step: "initdb",
                    detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                });
            }
        }

        let log_path = root.join("postgres.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(io(&log_path))?;
        let log_err = log.try_clone().map_err(io(&log_path))?;
        let watchdog_script = r#"
            "$0" -D "$1" -k "$2" -c listen_addresses= -c max_connections=200 -c fsync=off &
            pid=$!
            read -r _ || true
            kill -INT "$pid" 2>/dev/null
            wait "$pid"
        "#;
        let mut sh = command(PathBuf::from("/bin/sh"), owner);
        sh.arg("-c")
            .arg(watchdog_script)
            .arg(bin.join("postgres"))
            .arg(&data_dir)
            .arg(&socket_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .kill_on_drop(false);
        // The watchdog must not die with our terminal's Ctrl-C before we have
        // shut down ourselves: put it in its own process group.
        sh.process_group(0);
        let watchdog = sh.spawn().map_err(io(Path::new("/bin/sh")))?;

        let admin_url = format!("postgres://postgres@localhost/postgres?host={}", socket_dir.display());
        let mut this = Self {
            watchdog,
            url: format!("postgres://postgres@localhost/{DATABASE}?host={}", socket_dir.display()),
            data_dir,
        };
        if let Err(err) = this.wait_ready(&admin_url, &log_path).await {
            this.stop().await;
            return Err(err);
        }
        Ok(this)
    }

    /// Only the ledger's database admits the logins the ledger hands out
    /// (SPEC §8): the lock table, the connection slots and the notification
    /// queue are the cluster's, so every other database of the cluster
    /// (`postgres`, `template1`) refuses CONNECT to PUBLIC. (`migrate` does
    /// the same for the ledger's own database, granting its own roles.)
    async fn wait_ready(&mut self, admin_url: &str, log_path: &Path) -> Result<(), EmbeddedError> {
        use sea_orm::{ConnectionTrait, Database};
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.watchdog.try_wait() {
                return Err(EmbeddedError::Failed { step: "postgres", detail: log_tail(log_path, status) });
            }
            if let Ok(db) = Database::connect(admin_url).await {
                let exists = db
                    .query_one_raw(crate::db::stmt(
                        "SELECT 1 AS one FROM pg_database WHERE datname = $1",
                        [DATABASE.into()],
                    ))
                    .await
                    .map_err(|e| EmbeddedError::Failed { step: "connect", detail: e.to_string() })?;
                if exists.is_none() {
                    db.execute_unprepared(&format!("CREATE DATABASE {DATABASE}"))
                        .await
                        .map_err(|e| EmbeddedError::Failed { step: "create database", detail: e.to_string() })?;
                }
                let _ = db.close().await;
                let confine = async {
                    let ledger = Database::connect(&self.url).await?;
                    ledger.execute_unprepared(CONFINE).await?;
                    ledger.close().await
                };
                confine.await.map_err(|e| EmbeddedError::Failed { step: "confine logins", detail: e.to_string() })?;
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(EmbeddedError::Failed {
                    step: "postgres",
                    detail: format!("not accepting connections after 60 s; see {}", log_path.display()),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// URL of the service database, over the Unix socket.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Fast shutdown, waiting until the server has exited.
    pub async fn stop(mut self) {
        drop(self.watchdog.stdin.take());
        if let Err(err) = self.watchdog.wait().await {
            tracing::warn!(error = %err, "embedded PostgreSQL did not stop cleanly");
        }
    }
}

fn log_tail(path: &Path, status: std::process::ExitStatus) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(5).collect();
    format!("exited with {status}: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
}
