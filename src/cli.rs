//! What each command does. `main` only parses and calls [`run`].

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use sea_orm::DatabaseConnection;
use tokio::signal::unix::{SignalKind, signal};

use crate::agent_cli;
use crate::auth::{self, Role};
use crate::config::{
    Cli, Command, DatabaseArgs, ImportArgs, LinkArgs, ProjectionsCommand, ReaderCommand, ServeArgs, TemporalCommand,
    TokenCommand,
};
use crate::db;
use crate::db::entities::api_token;
use crate::db::temporal::Link;
use crate::db::tokens::Expiry;
use crate::embedded_pg::EmbeddedPostgres;
use crate::graphql;
use crate::http::Application;
use crate::ledger::Ledger;
use crate::operator::{self, AnyError, audit, backup, import, projections};

/// True unless the command line asks for the service (`serve`): a one-shot
/// command (`token create`, `migrate`, `import`, ...) is quiet on success,
/// its logs at `warn` unless `WORK_LEDGER_LOG` says otherwise; what it has to
/// say it prints itself. A command line that does not parse counts as one
/// (`run` reports it).
pub fn one_shot() -> bool {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().is_some_and(|arg| arg == "agent") {
        return true;
    }
    Cli::try_parse().map_or(true, |cli| !matches!(cli.command, Command::Serve(_)))
}

pub async fn run() -> Result<ExitCode, AnyError> {
    // `work-ledger agent ...` is an HTTP client with a grammar of its own: the
    // database flags of the other commands are not its flags.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|arg| arg == "agent") {
        let agent = agent_cli::AgentCli::parse_from(argv.into_iter().skip(1));
        return Ok(agent_cli::run(agent.args).await);
    }
    let cli = Cli::parse();
    match cli.command {
        // Neither needs a database: the agent talks to a server over HTTP.
        Command::PrintSchema => print!("{}", graphql::schema_file()),
        Command::Agent(args) => return Ok(agent_cli::run(args).await),
        command => {
            let (url, embedded) = database(&cli.database).await?;
            let result = dispatch(command, &url).await;
            if let Some(pg) = embedded {
                pg.stop().await;
            }
            result?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `DATABASE_URL`, or an embedded PostgreSQL started for this process.
async fn database(args: &DatabaseArgs) -> Result<(String, Option<EmbeddedPostgres>), AnyError> {
    if let Some(url) = &args.database_url {
        return Ok((url.clone(), None));
    }
    let pg = EmbeddedPostgres::start(&args.data_dir).await?;
    tracing::info!(data_dir = %pg.data_dir().display(), "embedded PostgreSQL started");
    Ok((pg.url().to_owned(), Some(pg)))
}

async fn dispatch(command: Command, url: &str) -> Result<(), AnyError> {
    // A restore needs the database as empty as it was created; it migrates
    // after. A backup changes nothing: it also takes a database this build
    // refuses to migrate (one made before the schema baseline, to move).
    if !matches!(command, Command::Restore { .. } | Command::Backup { .. }) {
        db::migrate(url).await?;
    }
    match command {
        Command::Migrate => {
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Serve(args) => serve(args, url).await,
        Command::Token(cmd) => token(cmd, &db::connect(url, 1).await?).await,
        Command::Reader(ReaderCommand::Create { fleet, name, password }) => {
            let name = name.unwrap_or_else(|| format!("grafana_{}", fleet.to_lowercase().replace(['.', '-'], "_")));
            let generated = password.is_none();
            let password = password.unwrap_or_else(|| auth::new_token().0);
            let db = db::connect(url, 1).await?;
            db::reader_logins::create(&db, &name, &fleet, &password).await?;
            eprintln!("created read-only role `{name}` for fleet `{fleet}`");
            let reachable = db::reader_logins::other_databases(&db, &name).await?;
            if !reachable.is_empty() {
                eprintln!(
                    "warning: `{name}` can also connect to {} of this cluster, where it could fill the lock table and \
                     the connection slots every write of the ledger needs; run REVOKE CONNECT ON DATABASE <name> \
                     FROM PUBLIC on each (`work-ledger audit` reports it until then)",
                    reachable.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", ")
                );
            }
            if generated {
                println!("{password}");
            }
            Ok(())
        }
        Command::Import(args) => import(args, url).await,
        Command::Projections(ProjectionsCommand::Status) => {
            projections::print_status(&db::connect(url, 1).await?).await
        }
        Command::Projections(ProjectionsCommand::Rebuild { name }) => {
            projections::rebuild(&db::connect(url, 1).await?, name.as_deref()).await
        }
        Command::Audit { fleet, temporal: false, .. } => audit(fleet.as_deref(), url).await,
        Command::Audit { fleet, temporal: true, endpoint } => {
            let endpoint = endpoint.config().ok_or("audit --temporal needs --temporal-address")?.endpoint;
            operator::temporal::audit(&db::connect(url, 1).await?, &endpoint, fleet.as_deref()).await
        }
        Command::Temporal(cmd) => {
            let db = db::connect(url, 1).await?;
            let link = |a: LinkArgs| Link { fleet: a.fleet, namespace: a.namespace, query: a.query };
            match cmd {
                TemporalCommand::Link(args) => operator::temporal::link(&db, link(args)).await,
                TemporalCommand::Unlink(args) => operator::temporal::unlink(&db, link(args)).await,
                TemporalCommand::Links => operator::temporal::print_links(&db).await,
            }
        }
        Command::Backup { out } => {
            backup::backup(url, &out).await?;
            eprintln!("wrote {}", out.display());
            Ok(())
        }
        Command::Restore { file } => {
            backup::restore(url, &file).await?;
            eprintln!("restored {} and applied pending migrations", file.display());
            Ok(())
        }
        Command::PrintSchema | Command::Agent(_) => Ok(()), // handled by `run`
    }
}

async fn import(args: ImportArgs, url: &str) -> Result<(), AnyError> {
    let text = if args.file == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        text
    } else {
        std::fs::read_to_string(&args.file).map_err(|e| format!("cannot read {}: {e}", args.file))?
    };
    let format = args.format.unwrap_or_else(|| import::Format::detect(&args.file, &text));
    let db = db::connect(url, 2).await?;
    let started = std::time::Instant::now();
    // In-transaction notifications: this process may exit right after its
    // last commit, before a notification after it could go out.
    let ledger = Ledger::notifying(db.clone(), db::Notify::InTransaction);
    let summary = import::run(&ledger, &args.fleet, &text, format, args.dry_run).await;
    db.close().await?;
    let summary = summary.map_err(|e| e.to_string())?;
    println!("{summary}");
    eprintln!("took {:.1} s", started.elapsed().as_secs_f64());
    if summary.refused.is_empty() {
        Ok(())
    } else {
        Err(format!("{} line(s) refused; the others were imported", summary.refused.len()).into())
    }
}

async fn audit(fleet: Option<&str>, url: &str) -> Result<(), AnyError> {
    let db = db::connect(url, 1).await?;
    let findings = audit::run(&db, fleet).await;
    // The result becomes the service's metric; a database that refuses the
    // write (a read-only standby) still gets its audit.
    if let Ok(findings) = &findings
        && let Err(err) = audit::record(&db, fleet, findings).await
    {
        eprintln!("warning: the result was not recorded for the metrics: {err}");
    }
    db.close().await?;
    let findings = findings?;
    for f in &findings {
        let unit = f.unit_id.map(|u| u.to_string()).unwrap_or_else(|| "-".to_owned());
        println!("{}\t{unit}\t{}\texpected {}\tfound {}", f.fleet, f.rule, f.expected, f.found);
    }
    let rules = audit::rules().count();
    if findings.is_empty() {
        eprintln!("audit clean: {rules} rules checked");
        Ok(())
    } else {
        Err(format!("audit found {} breach(es) of {rules} rules", findings.len()).into())
    }
}

async fn serve(args: ServeArgs, url: &str) -> Result<(), AnyError> {
    let config = args.config();
    let pool = db::connect_limited(url, args.db_pool_size, config.db).await?;
    if !db::tokens::any_live(&pool).await? {
        let secret = mint(&pool, &args.fleet, "operator", Role::Operator, None).await?;
        eprintln!("first start: minted an operator token for fleet `{}` (shown once):", args.fleet);
        println!("{secret}");
    }
    // The listener and the sweeper run beside the HTTP server and stop with it.
    let mut config = config;
    config.metrics_listen = Some(args.metrics_listen.clone()).filter(|addr| !addr.trim().is_empty());
    let ledger = Ledger::notifying(pool.clone(), args.notify.into());
    let app = Application::build_with(ledger, &args.listen, config).await?;
    tracing::info!(addr = %app.local_addr()?, "serving GraphQL on /graphql and /graphql/ws, GraphiQL on /");
    if let Some(addr) = app.metrics_addr() {
        tracing::info!(metrics_addr = %addr, "Prometheus metrics on /metrics");
    }
    app.run_until(shutdown_signal()).await?;
    pool.close().await?;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

async fn mint(
    db: &DatabaseConnection,
    fleet: &str,
    name: &str,
    role: Role,
    expiry: Option<Expiry>,
) -> Result<String, AnyError> {
    let (secret, hash) = auth::new_token();
    db::tokens::insert_expiring(db, fleet, name, &role.permissions(), &hash, expiry).await.map_err(|err| {
        match db::violation(&err) {
            // The flags said a future time; the database's clock disagrees.
            Some((code, constraint)) if code == "23514" && constraint == db::tokens::EXPIRY_CONSTRAINT => {
                "invalid --expires-at or --expires-in: the token would expire before it is minted (by the \
                 database's clock); give a time in the future"
                    .into()
            }
            Some((code, _)) if code == "23514" => {
                "invalid token: fleet must match [A-Za-z0-9][A-Za-z0-9._-]{0,62}, name 1..256 printable characters"
                    .into()
            }
            _ => AnyError::from(err),
        }
    })?;
    Ok(secret)
}

async fn token(cmd: TokenCommand, db: &DatabaseConnection) -> Result<(), AnyError> {
    match cmd {
        TokenCommand::Create { fleet, name, role, expires_in, expires_at } => {
            let expiry = expires_at.map(Expiry::At).or(expires_in.map(Expiry::In));
            let secret = mint(db, &fleet, &name, role, expiry).await?;
            println!("{secret}");
        }
        TokenCommand::List => print_tokens(&db::tokens::list(db).await?)?,
        TokenCommand::Revoke { id: Some(id), .. } => {
            if db::tokens::revoke(db, id).await? {
                eprintln!("token {id} revoked");
            } else {
                return Err(format!("no live token with id {id}").into());
            }
        }
        TokenCommand::Revoke { id: None, unused_for } => {
            // clap requires one of the two.
            let unused_for = unused_for.ok_or("give a token id or --unused-for")?;
            let revoked = db::tokens::revoke_unused(db, unused_for).await?;
            let unused = crate::duration::display(unused_for);
            if revoked.is_empty() {
                eprintln!("no live token was unused for {unused}");
            } else {
                print_tokens(&revoked)?;
                eprintln!("revoked {} token(s) unused for {unused}", revoked.len());
            }
        }
    }
    Ok(())
}

/// Tokens as `token list` shows them, one line each: times in RFC 3339
/// (UTC), `never` for no expiry and no recorded use, and the status
/// `live`, `expired` or `revoked`.
fn print_tokens(tokens: &[api_token::Model]) -> std::io::Result<()> {
    let time = |at: Option<chrono::DateTime<chrono::Utc>>| {
        at.map_or_else(|| "never".to_owned(), |at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
    };
    let now = chrono::Utc::now();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<36}  {:<16}  {:<24}  {:<8}  {:<20}  {:<20}  PERMISSIONS",
        "ID", "FLEET", "NAME", "STATUS", "EXPIRES_AT", "LAST_USED_AT"
    )?;
    for t in tokens {
        let status = match (t.revoked_at, t.expires_at) {
            (Some(_), _) => "revoked",
            (None, Some(at)) if at <= now => "expired",
            _ => "live",
        };
        writeln!(
            out,
            "{:<36}  {:<16}  {:<24}  {:<8}  {:<20}  {:<20}  {}",
            t.id,
            t.fleet,
            t.name,
            status,
            time(t.expires_at),
            time(t.last_used_at),
            t.permissions.join(",")
        )?;
    }
    Ok(())
}
