//! What the server tells browsers and refuses from them, on every route:
//!
//! - [`security_headers`]: no framing (`X-Frame-Options: DENY`, and a CSP of
//!   `frame-ancestors 'none'` where a route sets no CSP of its own), no
//!   `Referer` leaving the page, `nosniff`, and `Cache-Control: no-store`
//!   where a route sets no caching of its own (GraphQL answers are never
//!   cached by browsers or proxies).
//! - [`check_host`]: a `Host` that is not this server's name gets 421. A
//!   hostile domain that resolves to 127.0.0.1 (DNS rebinding) then reaches
//!   nothing: the browser sends that domain as `Host`. An address by number
//!   is always accepted, since no rebinding can produce one.
//!   Two `Host` headers (or none on HTTP/1.1) get 400.
//! - [`Policy::origin_allowed`]: a WebSocket upgrade or an `/mcp` request
//!   from a page of another origin is refused (a cross-site page may open
//!   WebSockets freely, and may send simple POSTs; CORS does not stop
//!   either). Clients that send no `Origin` (agents, services) are
//!   unaffected.
//! - [`not_found`], [`not_found_on_metrics`]: 404 for unknown paths, before
//!   any authentication, naming the listener's own paths.
//!
//! [`guard`] applies the `Host` check and the headers to a listener's router.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::{MediaType, error_response};
use crate::ledger::LedgerError;

/// The `Host` and `Origin` allow-lists (`--allowed-hosts`,
/// `--allowed-origins`).
#[derive(Debug, Clone, Default)]
pub struct SurfaceConfig {
    /// Host names served (without port; `*` for any). Empty: the listen
    /// address's host and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) whose pages may open WebSockets,
    /// besides the server's own origin; `*` for any.
    pub allowed_origins: Vec<String>,
    /// The URL clients reach the server by (`https://ledger.example.com`,
    /// behind a TLS proxy), for the URLs the quick start prints. `None`:
    /// `http://` and the request's `Host`.
    pub public_url: Option<String>,
}

/// The allow-lists, normalised once at start.
#[derive(Debug)]
pub struct Policy {
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<String>,
    any_origin: bool,
}

impl Policy {
    pub fn new(config: &SurfaceConfig, listen: &str) -> Arc<Self> {
        let mut hosts: Vec<String> = config.allowed_hosts.iter().map(|h| normalise_host(h)).collect();
        if hosts.is_empty() {
            hosts = vec!["localhost".to_owned(), normalise_host(split_port(listen))];
        }
        let any_host = hosts.iter().any(|h| h == "*");
        let origins: Vec<String> =
            config.allowed_origins.iter().map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase()).collect();
        let any_origin = origins.iter().any(|o| o == "*");
        Arc::new(Self { hosts, any_host, origins, any_origin })
    }

    fn host_allowed(&self, host: &str) -> bool {
        let name = normalise_host(split_port(host));
        self.any_host
            || name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok()
            || self.hosts.contains(&name)
    }

    /// No `Origin`, the server's own origin (the `Host` it was reached by),
    /// or an allowed one.
    pub fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else { return true };
        let Ok(origin) = origin.to_str() else { return false };
        let origin = origin.trim().to_ascii_lowercase();
        if self.any_origin || self.origins.contains(&origin) {
            return true;
        }
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default().to_ascii_lowercase();
        !host.is_empty() && (origin == format!("http://{host}") || origin == format!("https://{host}"))
    }
}

/// `host:port`, `[v6]:port` or a bare host, without the port.
fn split_port(authority: &str) -> &str {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').map_or(authority, |(v6, _)| &authority[..v6.len() + 2]);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn normalise_host(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The checks and headers every listener applies to every route (the API
/// and the metrics listener alike): the `Host` allow-list, then the
/// security headers on whatever answers.
pub fn guard(router: Router, policy: Arc<Policy>) -> Router {
    router
        .layer(axum::middleware::from_fn_with_state(policy, check_host))
        .layer(axum::middleware::from_fn(security_headers))
}

/// 404 for a path no route of the API serves, before any authentication.
pub async fn not_found() -> Response {
    no_such_path("the API is POST /graphql, subscriptions GET /graphql/ws, agents /mcp; GET / describes them")
}

/// 404 on the metrics listener, which names its own path alone (a prober of
/// this port learns nothing of the API).
pub async fn not_found_on_metrics() -> Response {
    no_such_path("this port serves GET /metrics (Prometheus) alone")
}

fn no_such_path(what_is_served: &str) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        MediaType::Json,
        LedgerError::invalid("path", format!("no such path: {what_is_served}")),
    )
}

/// 400 for two `Host` headers (RFC 9112 §3.2: which one is meant cannot be
/// known), or none on HTTP/1.1; 421 for a `Host` (or HTTP/2 `:authority`)
/// this server does not answer to.
pub async fn check_host(State(policy): State<Arc<Policy>>, request: Request, next: Next) -> Response {
    let hosts = request.headers().get_all(header::HOST).iter().count();
    let needs_host = request.version() == axum::http::Version::HTTP_11 && request.uri().authority().is_none();
    if hosts > 1 || (hosts == 0 && needs_host) {
        return error_response(
            StatusCode::BAD_REQUEST,
            MediaType::Json,
            LedgerError::invalid("Host", "an HTTP/1.1 request carries exactly one Host header"),
        );
    }
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
    match host {
        Some(host) if policy.host_allowed(&host) => next.run(request).await,
        _ => error_response(
            StatusCode::MISDIRECTED_REQUEST,
            MediaType::Json,
            LedgerError::RequestRefused(
                "this server does not answer to that Host; an operator can allow a name with --allowed-hosts \
                 (WORK_LEDGER_ALLOWED_HOSTS), or use the address the server listens on"
                    .into(),
            ),
        ),
    }
}

/// The headers every response carries unless its route set its own.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
        );
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// 403 for a request to `/mcp` from a page of another origin (the MCP
/// specification's streamable HTTP transport requires servers to validate
/// `Origin`, against DNS rebinding): the same rule as WebSockets.
pub async fn check_mcp_origin(State(policy): State<Arc<Policy>>, request: Request, next: Next) -> Response {
    if policy.origin_allowed(request.headers()) {
        return next.run(request).await;
    }
    error_response(
        StatusCode::FORBIDDEN,
        MediaType::Json,
        LedgerError::RequestRefused(
            "/mcp refuses requests from pages of another origin; an operator can allow an origin with \
             --allowed-origins (WORK_LEDGER_ALLOWED_ORIGINS). Clients that send no Origin are unaffected"
                .into(),
        ),
    )
}

/// 403 for a WebSocket upgrade from a foreign page.
pub fn refuse_origin() -> Response {
    error_response(
        StatusCode::FORBIDDEN,
        MediaType::Json,
        LedgerError::RequestRefused(
            "WebSocket connections from pages of another origin are refused; an operator can allow an origin \
             with --allowed-origins (WORK_LEDGER_ALLOWED_ORIGINS). Clients that send no Origin are unaffected"
                .into(),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str], origins: &[&str], listen: &str) -> Arc<Policy> {
        let config = SurfaceConfig {
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
            public_url: None,
        };
        Policy::new(&config, listen)
    }

    #[test]
    fn hosts_default_to_the_listen_address_and_localhost() {
        let p = policy(&[], &[], "myhost.internal:8080");
        for ok in ["myhost.internal", "MyHost.internal:8080", "localhost:1", "10.1.2.3:8080", "[::1]:8080", "[fe80::1]"]
        {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in ["rebind.example", "rebind.example:8080", "localhost.evil", "", "myhost.internal.evil"] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
        assert!(policy(&["*"], &[], "0.0.0.0:1").host_allowed("anything.example"));
        let named = policy(&["ledger.example.com"], &[], "0.0.0.0:8080");
        assert!(named.host_allowed("ledger.example.com:443") && !named.host_allowed("localhost"));
    }

    #[test]
    fn origins_are_the_servers_own_or_allowed() {
        let headers = |origin: Option<&str>, host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap_or(HeaderValue::from_static("x")));
            if let Some(origin) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap_or(HeaderValue::from_static("x")));
            }
            h
        };
        let p = policy(&[], &["https://grafana.example:3000/"], "127.0.0.1:8080");
        assert!(p.origin_allowed(&headers(None, "127.0.0.1:8080")));
        assert!(p.origin_allowed(&headers(Some("http://127.0.0.1:8080"), "127.0.0.1:8080")));
        assert!(p.origin_allowed(&headers(Some("https://grafana.example:3000"), "127.0.0.1:8080")));
        assert!(!p.origin_allowed(&headers(Some("http://127.0.0.1:3000"), "127.0.0.1:8080")));
        assert!(!p.origin_allowed(&headers(Some("null"), "127.0.0.1:8080")));
        assert!(policy(&[], &["*"], "x:1").origin_allowed(&headers(Some("http://any.example"), "127.0.0.1:8080")));
    }
}
