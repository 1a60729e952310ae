//! What a `DATABASE_URL` names: one server, or libpq's list of servers
//! (`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`) of which
//! the read-write one is wanted. sqlx takes neither form whole (it refuses
//! the host list and silently ignores `target_session_attrs`), so the URL
//! is taken apart here and sqlx is given one server at a time.

use sea_orm::DbErr;
use sea_orm::sqlx::ConnectOptions as _;
use sea_orm::sqlx::postgres::PgConnectOptions;

/// Used for a listed host without a port, as libpq does.
const DEFAULT_PORT: u16 = 5432;

/// The servers a URL lists and how to reach each.
#[derive(Debug, Clone)]
pub struct Target {
    hosts: Vec<(String, u16)>,
    /// Options of the first server, everything but the host the same for all.
    base: PgConnectOptions,
    /// Accept only a server whose `transaction_read_only` is `off`.
    read_write: bool,
    /// The URL with the first host alone and without what sqlx does not know.
    single: String,
    /// The URL as given, and cut around the host list: libpq URLs for one server.
    original: String,
    prefix: String,
    suffix: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Self, DbErr> {
        Self::parse_text(url).map_err(|why| DbErr::Custom(format!("DATABASE_URL: {why}")))
    }

    fn parse_text(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url.split_once("://").ok_or("expected postgres://user@host:port/database")?;
        if !matches!(scheme, "postgres" | "postgresql") {
            return Err(format!("the scheme must be postgres:// or postgresql://, not {scheme}://"));
        }
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let mut read_write = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("target_session_attrs", value)) => read_write = Some(session_attrs(value)?),
                _ => kept.push(pair),
            }
        }
        let hosts = host_list.split(',').map(host_port).collect::<Result<Vec<_>, _>>()?;
        // sqlx gets the URL with the first host alone and without the
        // parameter it does not know; the others differ only by host.
        let first = host_list.split(',').next().unwrap_or_default();
        let query = if kept.is_empty() { String::new() } else { format!("?{}", kept.join("&")) };
        let single = format!("{scheme}://{userinfo}{first}{path}{query}");
        let base: PgConnectOptions = single.parse().map_err(|e| format!("{e}"))?;
        let base = base.disable_statement_logging();
        if hosts.len() > 1 && hosts.iter().any(|(host, _)| host.is_empty()) {
            return Err("an empty host in the host list".to_owned());
        }
        Ok(Self {
            read_write: read_write.unwrap_or(hosts.len() > 1),
            hosts,
            base,
            original: url.to_owned(),
            single,
            prefix: format!("{scheme}://{userinfo}"),
            suffix: tail.to_owned(),
        })
    }

    /// One server and no `target_session_attrs`: connected to as it is,
    /// with no check and no re-discovery (what a single-host URL always did).
    pub fn is_plain(&self) -> bool {
        self.hosts.len() == 1 && !self.read_write
    }

    pub fn read_write(&self) -> bool {
        self.read_write
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The URL sqlx is given (the first server's; pools are then pointed at
    /// the read-write one).
    pub fn sqlx_url(&self) -> &str {
        &self.single
    }

    /// Options for the listed server `i`.
    pub fn options(&self, i: usize) -> PgConnectOptions {
        with_server(&self.base, self, i)
    }

    /// The base options (the first server's): what a pool starts from.
    pub fn base(&self) -> &PgConnectOptions {
        &self.base
    }

    /// `host:port` of server `i`, for messages.
    pub fn name(&self, i: usize) -> String {
        let (host, port) = &self.hosts[i];
        if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
    }

    /// A libpq URL naming server `i` alone (for pg_dump and pg_restore).
    pub fn libpq_url(&self, i: usize) -> String {
        if self.hosts.len() == 1 {
            return self.original.clone();
        }
        format!("{}{}{}", self.prefix, self.name(i), self.suffix)
    }
}

/// `pool_options` (any pool's, with its own session settings) pointed at
/// server `i` of `target`.
pub fn with_server(pool_options: &PgConnectOptions, target: &Target, i: usize) -> PgConnectOptions {
    if target.hosts.len() == 1 {
        // Exactly as parsed: the host may be a socket directory from `?host=`.
        return pool_options.clone();
    }
    let (host, port) = &target.hosts[i];
    pool_options.clone().host(host).port(*port)
}

/// The values of `target_session_attrs` this service can honour: it always
/// writes, so only a read-write server will do. The others are refused
/// rather than ignored.
fn session_attrs(value: &str) -> Result<bool, String> {
    match value {
        "read-write" => Ok(true),
        other => Err(format!(
            "target_session_attrs={other} is not supported: work-ledger writes, so it connects only to a \
             read-write server; use target_session_attrs=read-write (or leave it out: with several hosts \
             the read-write one is used anyway)"
        )),
    }
}

fn host_port(item: &str) -> Result<(String, u16), String> {
    let port = |text: &str| text.parse::<u16>().map_err(|_| format!("`{text}` is not a port number (in `{item}`)"));
    if let Some(bracketed) = item.strip_prefix('[') {
        let (host, rest) = bracketed.split_once(']').ok_or_else(|| format!("unclosed `[` in `{item}`"))?;
        return match rest.strip_prefix(':') {
            Some(p) => Ok((host.to_owned(), port(p)?)),
            None if rest.is_empty() => Ok((host.to_owned(), DEFAULT_PORT)),
            None => Err(format!("unexpected `{rest}` after `[{host}]`")),
        };
    }
    match item.rsplit_once(':') {
        Some((host, p)) => Ok((host.to_owned(), port(p)?)),
        None => Ok((item.to_owned(), DEFAULT_PORT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Target, String> {
        Target::parse_text(url)
    }

    #[test]
    fn a_host_list_becomes_one_server_each() {
        let t = parse(
            "postgres://u:pw@127.0.0.1:6001,127.0.0.1:6002/ledger?target_session_attrs=read-write&sslmode=disable",
        )
        .expect("parse");
        assert_eq!(t.len(), 2);
        assert!(t.read_write() && !t.is_plain());
        let second = t.options(1);
        assert_eq!((second.get_host(), second.get_port()), ("127.0.0.1", 6002));
        assert_eq!(second.get_database(), Some("ledger"));
        assert_eq!(second.get_username(), "u");
        assert_eq!(
            t.libpq_url(1),
            "postgres://u:pw@127.0.0.1:6002/ledger?target_session_attrs=read-write&sslmode=disable"
        );
    }

    #[test]
    fn several_hosts_mean_read_write_even_unsaid() {
        let t = parse("postgresql://a,[::1]:7000,b:6000/db").expect("parse");
        assert!(t.read_write());
        assert_eq!(t.name(0), "a:5432");
        assert_eq!(t.name(1), "[::1]:7000");
        assert_eq!(t.options(2).get_port(), 6000);
    }

    #[test]
    fn a_single_host_is_taken_as_it_is() {
        let t = parse("postgres://postgres@localhost/ledger?host=/tmp/sock").expect("parse");
        assert!(t.is_plain());
        assert_eq!(t.libpq_url(0), "postgres://postgres@localhost/ledger?host=/tmp/sock");
        let checked = parse("postgres://h:5/ledger?target_session_attrs=read-write").expect("parse");
        assert!(checked.read_write() && !checked.is_plain());
    }

    #[test]
    fn unsupported_session_attrs_are_refused() {
        for value in ["any", "read-only", "standby", "prefer-standby", "primary", "bogus"] {
            let err = parse(&format!("postgres://a,b/db?target_session_attrs={value}")).expect_err(value);
            assert!(err.contains(&format!("target_session_attrs={value} is not supported")), "{err}");
        }
    }

    #[test]
    fn bad_host_lists_are_refused() {
        assert!(parse("postgres://a:x,b/db").expect_err("port").contains("not a port"));
        assert!(parse("postgres://a,,b/db").is_err());
        assert!(parse("postgres://[::1/db").is_err());
        assert!(parse("mysql://a/db").is_err());
    }
}
