//! A previous build of the service as a baseline in the same run (issue 55
//! asks for the speed-up over the previous commit measured side by side):
//! `--baseline BIN` serves `BIN serve` over a database of its own beside the
//! run's, which BIN migrates to its own schema, so that the phases run
//! against both servers share the machine and the moment. Its log goes to
//! `baseline.log` in the system's temporary folder.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{AnyError, drop_scratch, empty_database};

/// The baseline server: its database's URL and its GraphQL endpoint.
pub struct Baseline {
    pub url: String,
    pub endpoint: String,
    child: tokio::process::Child,
}

impl Baseline {
    /// Serves `bin` with a pool of `pool` connections on a free local port,
    /// over a new database on the server of `beside`, once it is ready.
    pub async fn start(bin: &str, beside: &str, pool: u32) -> Result<Self, AnyError> {
        let url = empty_database(beside, &format!("wl_bench_base_{}", std::process::id())).await?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(std::env::temp_dir().join("baseline.log"))?;
        let child = tokio::process::Command::new(bin)
            .args(["serve", "--listen", &listen, "--metrics-listen", "", "--db-pool-size", &pool.to_string()])
            .env("DATABASE_URL", &url)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot run the baseline {bin}: {err}"))?;
        let baseline = Self { url, endpoint: format!("http://{listen}/graphql"), child };
        let ready = format!("http://{listen}/readyz");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if client.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) {
                return Ok(baseline);
            }
            if Instant::now() > deadline {
                return Err(format!("the baseline {bin} was not ready in 120 s (see baseline.log)").into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the server and drops its database.
    pub async fn stop(mut self) -> Result<(), AnyError> {
        self.child.kill().await?;
        drop_scratch(&self.url).await
    }
}
