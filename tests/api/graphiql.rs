//! GraphiQL on `/` (SPEC §4): served by the binary with its assets, nothing
//! fetched from anywhere else; a real headless Chromium loads it from the
//! running server, runs a query with a token and shows the result.
//!
//! The browser is driven over the Chrome DevTools Protocol on
//! `--remote-debugging-pipe` (NUL-separated JSON on file descriptors 3 and 4),
//! which needs no extra crate: only `sh` to hand the pipes over.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::spawn_app;
use crate::skip::skip;

const CHROMIUM: &str = "/usr/bin/chromium";
const QUERY: &str = "{ me { fleet name } }";
/// Per step (page load, query, screenshot); generous for a loaded CI machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

fn is_loopback_host(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "localhost" | "[::1]" | "::1")
}

/// Every `http://` or `https://` URL in `text` whose host is not loopback.
fn external_urls(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for scheme in ["http://", "https://"] {
        for (at, _) in text.match_indices(scheme) {
            let rest = &text[at + scheme.len()..];
            let end = rest.find(|c: char| "/\"'`?#) <>\n".contains(c)).unwrap_or(rest.len());
            let authority = &rest[..end];
            let host = match authority.rsplit_once(':') {
                Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
                _ => authority,
            };
            if !is_loopback_host(host) {
                found.push(format!("{scheme}{authority}"));
            }
        }
    }
    found
}

/// The values of the `src` and `href` attributes of an HTML page.
fn referenced_urls(html: &str) -> Vec<String> {
    let mut urls = Vec::new();
    for attr in ["src=\"", "href=\""] {
        for (at, _) in html.match_indices(attr) {
            let rest = &html[at + attr.len()..];
            urls.push(rest[..rest.find('"').unwrap_or(rest.len())].to_owned());
        }
    }
    urls
}

/// Chromium's `Accept` for a page.
const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

#[tokio::test]
async fn graphiql_is_served_with_its_own_assets_and_no_external_url() {
    let app = spawn_app().await;
    // What a browser asks for; anything else gets the plain-text quick start.
    let resp = app.http.get(app.url("/")).header("accept", BROWSER_ACCEPT).send().await.expect("GET /");
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let page = resp.text().await.expect("page");

    assert_eq!(external_urls(&page), Vec::<String>::new(), "the page must work offline:\n{page}");
    let urls = referenced_urls(&page);
    let assets: Vec<&String> = urls.iter().filter(|url| url.starts_with("/assets/")).collect();
    for url in &urls {
        assert!(url.starts_with("/assets/") || url.starts_with("data:"), "a URL not served by the binary: {url}");
    }
    for wanted in [
        "graphiql.min.js",
        "graphiql.min.css",
        "react.production.min.js",
        "react-dom.production.min.js",
        "schema.graphql",
    ] {
        assert!(assets.iter().any(|url| url.contains(wanted)), "the page does not load {wanted}: {assets:?}");
    }

    let mut own_code = String::new();
    for url in assets {
        let resp = app.http.get(app.url(url)).send().await.expect("GET asset");
        assert_eq!(resp.status(), 200, "{url}");
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
        let expected = match url.split('?').next().unwrap_or_default().rsplit('.').next() {
            Some("css") => "text/css",
            Some("js") => "text/javascript",
            _ => "text/plain",
        };
        assert!(content_type.starts_with(expected), "{url}: {content_type}");
        let cache = resp.headers()["cache-control"].to_str().unwrap().to_owned();
        assert!(cache.contains("max-age=31536000"), "{url}: {cache}");
        let body = resp.text().await.expect("asset body");
        assert!(body.len() > 100, "{url} is empty");
        // Our own code, unlike the vendored bundles (whose strings mention
        // project homepages in error messages), names no URL at all. (The
        // schema is data: its descriptions may mention URLs.)
        if url.contains(".js") && !url.contains(".min.") {
            assert_eq!(external_urls(&body), Vec::<String>::new(), "{url}");
            own_code.push_str(&body);
        }
    }
    // The default document: the dashboard, with where the token goes.
    for wanted in ["query Dashboard", "dispositionSummary", "stalls(first: 20)", "Bearer <paste token>"] {
        assert!(own_code.contains(wanted), "the page's default document lacks {wanted}");
    }

    let missing = app.http.get(app.url("/assets/graphiql/nope.js")).send().await.expect("GET");
    assert_eq!(missing.status(), 404);
}

/// Chromium, or `None` when the test may be skipped: only outside CI.
fn chromium() -> Option<PathBuf> {
    if Path::new(CHROMIUM).exists() {
        return Some(PathBuf::from(CHROMIUM));
    }
    skip(&format!("{CHROMIUM} is not installed (apt-get install chromium)"));
    None
}

fn token_url(base: &str, query: Option<&str>, token: Option<&str>) -> String {
    let mut url = url::Url::parse(base).expect("url");
    if let Some(query) = query {
        url.query_pairs_mut().append_pair("query", query);
    }
    if let Some(token) = token {
        url.set_fragment(Some(
            &url::form_urlencoded::Serializer::new(String::new()).append_pair("token", token).finish(),
        ));
    }
    url.to_string()
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target")
}

#[tokio::test]
async fn a_real_browser_loads_graphiql_offline_and_runs_a_query_with_a_token() {
    let Some(chromium) = chromium() else { return };
    let app = spawn_app().await;
    let token = app.token("browser-fleet", "operator", Role::Operator).await;

    // A link pre-fills the query (never the token: that is typed into the
    // Headers pane), and the query runs with whatever that pane holds, under
    // the server's Content-Security-Policy.
    let base = app.url("/");
    let url = token_url(&base, Some(QUERY), None);
    let typed = format!("{{\"Authorization\": \"Bearer {token}\"}}");
    let started = Instant::now();
    let run = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch(&chromium, &target_dir().join("graphiql-chromium.log"));
        browser.open_graphiql(&url);
        browser.wait_for(QUERY_TEXT, |v| v == &json!(QUERY), "the ?query= document in the editor");
        browser.type_headers(&typed);
        let response = browser.execute();
        // The schema GraphiQL works with (docs, completion): open the docs.
        browser.eval(SHOW_DOCS);
        let docs = browser.wait_for(DOCS_ROOT_TYPES, |v| v.as_str().is_some_and(|t| t.contains("query")), "the docs");
        let location = browser.eval("location.href");
        browser.screenshot(&target_dir().join("graphiql.png"));
        // The tab keeps the token: a plain visit finds it in the Headers pane.
        browser.wait_for(HISTORY, |v| v.as_str().is_some_and(|h| h.contains("me { fleet name }")), "the history entry");
        browser.open_graphiql(&base);
        let headers = browser.wait_for(HEADERS_TEXT, |v| v.is_string(), "the Headers pane");
        let kept = browser.eval(LOCAL_STORAGE);
        let history = browser.eval(HISTORY);
        browser.close();
        (browser, response, docs, location, headers, kept, history)
    });
    let (browser, response, docs, location, headers, kept, history) = run.await.expect("browser thread");
    eprintln!("chromium run took {:?}", started.elapsed());

    // What outlives the tab (localStorage) holds the query in its history,
    // and no token anywhere.
    let kept = kept.as_str().unwrap_or_default();
    assert!(!kept.contains(&token) && !kept.contains("Bearer"), "a token in localStorage: {kept}");
    let history: Value = serde_json::from_str(history.as_str().unwrap_or_default()).expect("history JSON");
    let entries = history["queries"].as_array().cloned().unwrap_or_default();
    assert!(
        entries.iter().any(|e| e["query"].as_str().is_some_and(|q| q.contains("me { fleet name }"))),
        "{history:#}"
    );
    assert!(entries.iter().all(|e| e.get("headers").is_none()), "headers in query history: {history:#}");

    // What the page showed: the server's answer, which only the token could
    // have produced (the fleet is nowhere in the page or the URL).
    assert_eq!(response["data"]["me"], json!({ "fleet": "browser-fleet", "name": "operator" }), "{response:#}");
    assert!(response.get("errors").is_none(), "{response:#}");
    let location = location.as_str().unwrap_or_default();
    assert!(!location.contains(&token), "the token stays out of the address bar: {location}");
    let headers: Value = serde_json::from_str(headers.as_str().unwrap_or_default()).expect("headers JSON");
    assert_eq!(headers, json!({ "Authorization": format!("Bearer {token}") }), "the Headers pane on the next visit");

    // The query went out with the token from the Headers pane.
    let requests = browser.requests();
    let posts: Vec<&Value> = requests
        .iter()
        .filter(|r| r["method"] == "POST" && r["url"].as_str().is_some_and(|u| u.ends_with("/graphql")))
        .collect();
    assert!(
        posts.iter().any(|r| {
            r["headers"].as_object().into_iter().flatten().any(|(name, value)| {
                name.eq_ignore_ascii_case("authorization") && value.as_str() == Some(&format!("Bearer {token}"))
            }) && r["postData"].as_str().is_some_and(|body| body.contains("me { fleet name }"))
        }),
        "no POST /graphql carried the query and the token: {posts:#?}"
    );

    // GraphiQL took its schema from the binary's schema.graphql, not from
    // introspection, and shows it.
    let docs = docs.as_str().unwrap_or_default();
    assert!(docs.contains("query") && docs.contains("mutation"), "docs root types: {docs}");
    let introspections = requests.iter().filter(|r| r["postData"].as_str().is_some_and(|b| b.contains("__schema")));
    assert_eq!(introspections.count(), 0, "GraphiQL introspected instead of using schema.graphql");

    browser.assert_offline_and_clean();
    browser.assert_no_csp_violation();
}

/// A stand-in for `/graphql/ws` that speaks just enough graphql-transport-ws
/// and reports every message the browser sends.
async fn ticking_server() -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};

    async fn serve(mut socket: WebSocket, seen: tokio::sync::mpsc::UnboundedSender<Value>) {
        while let Some(Ok(Message::Text(text))) = socket.recv().await {
            let message: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
            let _ = seen.send(message.clone());
            let replies = match message["type"].as_str() {
                Some("connection_init") => vec![json!({ "type": "connection_ack" })],
                Some("subscribe") => vec![
                    json!({ "type": "next", "id": message["id"], "payload": { "data": { "ticks": 1 } } }),
                    json!({ "type": "complete", "id": message["id"] }),
                ],
                _ => vec![],
            };
            for reply in replies {
                if socket.send(Message::Text(reply.to_string().into())).await.is_err() {
                    return;
                }
            }
        }
    }

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let router = axum::Router::new()
        .merge(work_ledger::http::graphiql::routes())
        .route("/", axum::routing::get(|| async { work_ledger::http::graphiql::page() }))
        .route(
            "/graphql/ws",
            axum::routing::get(move |ws: WebSocketUpgrade| {
                let tx = tx.clone();
                async move { ws.protocols(["graphql-transport-ws"]).on_upgrade(move |socket| serve(socket, tx)) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}/", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    (base, rx)
}

/// The token is typed once into the Headers pane, kept by the browser across
/// visits, and sent by GraphiQL in the `connection_init` payload of
/// `/graphql/ws`.
#[tokio::test]
async fn graphiql_subscriptions_send_the_headers_pane_as_connection_init_payload() {
    let Some(chromium) = chromium() else { return };
    let (base, mut seen) = ticking_server().await;
    let token = "wl_browser-subscription-token";
    let typed = format!("{{\"Authorization\": \"Bearer {token}\"}}");
    let second = token_url(&base, Some(SUBSCRIPTION), None);

    let run = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch(&chromium, &target_dir().join("graphiql-chromium-ws.log"));
        // First visit: the default document, and the Headers pane open with the placeholder.
        browser.open_graphiql(&base);
        let document = browser.eval(QUERY_TEXT);
        let placeholder = browser.wait_for(HEADERS_TEXT, |v| v.is_string(), "the Headers pane");
        browser.screenshot(&target_dir().join("graphiql-first-visit.png"));
        browser.type_headers(&typed);
        // A new tab starts with it too.
        browser.eval(ADD_TAB);
        browser.wait_for(TAB_COUNT, |v| v == &json!(2), "a second tab");
        let new_tab = browser.wait_for(HEADERS_TEXT, |v| v.as_str().is_some_and(|h| h.contains(token)), "a new tab");
        // Second visit, no token in the URL: it is still there, and a subscription uses it.
        browser.open_graphiql(&second);
        browser.wait_for(QUERY_TEXT, |v| v == &json!(SUBSCRIPTION), "the subscription in the editor");
        let headers = browser.wait_for(HEADERS_TEXT, |v| v.is_string(), "the Headers pane");
        let response = browser.execute();
        browser.close();
        (browser, document, placeholder, new_tab, headers, response)
    });
    let (browser, document, placeholder, new_tab, headers, response) = run.await.expect("browser thread");

    let document = document.as_str().unwrap_or_default();
    assert!(document.contains("query Dashboard") && document.contains("Bearer <paste token>"), "{document}");
    let placeholder: Value = serde_json::from_str(placeholder.as_str().unwrap_or_default()).expect("headers JSON");
    assert_eq!(placeholder, json!({ "Authorization": "Bearer <paste token>" }));
    let new_tab: Value = serde_json::from_str(new_tab.as_str().unwrap_or_default()).expect("headers JSON");
    assert_eq!(new_tab, json!({ "Authorization": format!("Bearer {token}") }), "the Headers pane of a new tab");
    let headers: Value = serde_json::from_str(headers.as_str().unwrap_or_default()).expect("headers JSON");
    assert_eq!(headers, json!({ "Authorization": format!("Bearer {token}") }), "the Headers pane on the second visit");

    assert_eq!(response, json!({ "data": { "ticks": 1 } }), "what the response pane shows");
    let mut messages = Vec::new();
    while let Ok(message) = seen.try_recv() {
        messages.push(message);
    }
    assert_eq!(
        messages.first(),
        Some(&json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })),
        "{messages:#?}"
    );
    assert!(
        messages.iter().any(|m| m["type"] == "subscribe" && m["payload"]["query"] == json!(SUBSCRIPTION)),
        "{messages:#?}"
    );
    let sockets: Vec<Value> = browser.requests().into_iter().filter(|r| r["websocket"] == json!(true)).collect();
    assert_eq!(sockets.len(), 1, "{sockets:#?}");
    assert!(sockets[0]["url"].as_str().is_some_and(|u| u.ends_with("/graphql/ws")), "{sockets:#?}");
    browser.assert_offline_and_clean();
    browser.assert_no_csp_violation();
}

/// Clickjacking: a page on another local port (any dev server, Grafana)
/// frames GraphiQL under a decoy. The browser refuses to render it, so no
/// click can reach it.
#[tokio::test]
async fn a_page_on_another_port_that_frames_graphiql_gets_nothing_rendered() {
    let Some(chromium) = chromium() else { return };
    let app = spawn_app().await;
    let framed =
        token_url(&app.url("/"), Some("mutation { registerUnits(units: [{externalRef: \"framed\"}]) { id } }"), None);
    let decoy = format!(
        "<!doctype html><title>decoy</title><button>Win a prize</button>\
         <iframe id=\"f\" src=\"{framed}\" width=\"1000\" height=\"700\" onload=\"window.framedLoaded = true\"></iframe>"
    );
    let router = axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(decoy) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let outer = format!("http://{}/", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router).await });

    let run = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch(&chromium, &target_dir().join("graphiql-chromium-framed.log"));
        browser.call("Page.navigate", json!({ "url": outer }));
        browser.wait_for("window.framedLoaded === true", |v| v == &json!(true), "the frame's load event");
        browser.screenshot(&target_dir().join("graphiql-framed.png"));
        browser.close();
        browser
    });
    let browser = run.await.expect("browser thread");
    // The page's own document may be fetched (that is how the browser learns
    // it must not show it); nothing it would load or run is.
    let requests = browser.requests();
    let loaded: Vec<&Value> =
        requests.iter().filter(|r| r["url"].as_str().is_some_and(|u| u.contains("/assets/graphiql/"))).collect();
    assert!(loaded.is_empty(), "the framed GraphiQL loaded its assets: {loaded:#?}");
    let refusals = browser.console_text();
    assert!(refusals.contains("frame-ancestors") || refusals.contains("X-Frame-Options"), "{refusals}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);
}

/// Links carry no token and no one-click write: a `#token=` of another fleet
/// changes nothing (the Headers pane keeps the operator's token, storage
/// never sees the other), and a `?query=` mutation arrives commented out
/// under a warning, so clicking run writes nothing.
#[tokio::test]
async fn a_link_with_a_token_or_a_mutation_changes_nothing() {
    let Some(chromium) = chromium() else { return };
    let app = spawn_app().await;
    let mine = app.token("my-fleet", "operator", Role::Operator).await;
    let theirs = app.token("their-fleet", "attacker", Role::Operator).await;
    let mutation = "mutation { registerUnits(units: [{externalRef: \"from-a-link\"}]) { id } }";
    let base = app.url("/");
    let link = token_url(&base, Some(mutation), Some(&theirs));
    let typed = format!("{{\"Authorization\": \"Bearer {mine}\"}}");

    let run = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch(&chromium, &target_dir().join("graphiql-chromium-link.log"));
        browser.open_graphiql(&base);
        browser.type_headers(&typed);
        browser.open_graphiql(&link);
        let document =
            browser.wait_for(QUERY_TEXT, |v| v.as_str().is_some_and(|t| t.contains("WARNING")), "the warning");
        let headers = browser.wait_for(HEADERS_TEXT, |v| v.is_string(), "the Headers pane");
        let location = browser.eval("location.href");
        browser.screenshot(&target_dir().join("graphiql-link.png"));
        // One click on run.
        let response = browser.execute_any();
        let storage = browser.eval(ALL_STORAGE);
        browser.close();
        (browser, document, headers, location, response, storage)
    });
    let (browser, document, headers, location, response, storage) = run.await.expect("browser thread");

    let document = document.as_str().unwrap_or_default();
    assert!(document.contains("never takes\n# a token from a link"), "{document}");
    assert!(document.contains("# mutation { registerUnits"), "the mutation is shown commented out: {document}");
    let headers: Value = serde_json::from_str(headers.as_str().unwrap_or_default()).expect("headers JSON");
    assert_eq!(headers, json!({ "Authorization": format!("Bearer {mine}") }), "the Headers pane is unchanged");
    let location = location.as_str().unwrap_or_default();
    assert!(!location.contains(&theirs) && !location.contains("token="), "{location}");
    let storage = storage.as_str().unwrap_or_default();
    assert!(!storage.contains(&theirs), "the link's token reached storage: {storage}");
    eprintln!("the response pane after one click: {response}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0, "a link wrote");
    let posts = browser.requests();
    // (The navigation's own URL holds the fragment; what the page sent is what counts.)
    let theirs_sent =
        posts.iter().any(|r| r["headers"].to_string().contains(&theirs) || r["postData"].to_string().contains(&theirs));
    assert!(!theirs_sent, "a request carried the link's token");
    browser.assert_no_csp_violation();
}

const SUBSCRIPTION: &str = "subscription { ticks }";

const EDITORS_READY: &str = "(() => {
    const button = document.querySelector('.graphiql-execute-button');
    const query = document.querySelector('.graphiql-query-editor .CodeMirror');
    const response = document.querySelector('.result-window .CodeMirror');
    return !!(button && query && query.CodeMirror && response && response.CodeMirror);
})()";

const QUERY_TEXT: &str = "document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.getValue()";

/// The Headers pane: the editor among the tools that holds JSON with a key.
const HEADERS_TEXT: &str = "[...document.querySelectorAll('.graphiql-editor-tool .CodeMirror')]
    .map(e => e.CodeMirror.getValue()).find(v => v.includes('Authorization')) ?? null";

/// Focuses the Headers pane and selects its text, so typing replaces it.
const SELECT_HEADERS: &str = "(() => {
    const cm = [...document.querySelectorAll('.graphiql-editor-tool .CodeMirror')]
        .find(e => e.CodeMirror.getValue().includes('Authorization')).CodeMirror;
    cm.focus();
    cm.execCommand('selectAll');
})()";

const ADD_TAB: &str = "document.querySelector('[aria-label=\"Add tab\"]').click()";

const TAB_COUNT: &str = "document.querySelectorAll('.graphiql-tabs [role=\"tab\"]').length";

/// What GraphiQL keeps of the Headers pane (it writes with a short debounce):
/// for this tab only.
const STORED_HEADERS: &str =
    "(sessionStorage.getItem('graphiql:headers') || '') + (sessionStorage.getItem('graphiql:tabState') || '')";

/// Everything in localStorage, which outlives the tab (and is on disk).
const LOCAL_STORAGE: &str = "JSON.stringify(Object.fromEntries(Object.entries(localStorage)))";

/// Everything the page kept, in either storage.
const ALL_STORAGE: &str = "JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])";

/// GraphiQL's query history.
const HISTORY: &str = "localStorage.getItem('graphiql:queries') || ''";

const EXECUTE_BUTTON_CENTER: &str = "(() => {
    const r = document.querySelector('.graphiql-execute-button').getBoundingClientRect();
    return { x: r.left + r.width / 2, y: r.top + r.height / 2 };
})()";

const SHOW_DOCS: &str = "document.querySelector('[aria-label=\"Show Documentation Explorer\"]').click()";

const DOCS_ROOT_TYPES: &str =
    "[...document.querySelectorAll('.graphiql-doc-explorer-root-type')].map(e => e.textContent).join(' ')";

const RESPONSE_TEXT: &str = "document.querySelector('.result-window .CodeMirror').CodeMirror.getValue()";

/// A headless Chromium with one page, a fresh profile, and everything the
/// page did on the network recorded.
struct Browser {
    cdp: Cdp,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn launch(chromium: &Path, log: &Path) -> Browser {
        let profile = tempfile::Builder::new().prefix("wl-chromium-").tempdir().expect("profile dir");
        let mut cdp = Cdp::launch(chromium, profile.path(), log);
        let target = cdp.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let attached =
            cdp.call(None, "Target.attachToTarget", json!({ "targetId": target["targetId"], "flatten": true }));
        let session = attached["sessionId"].as_str().expect("sessionId").to_owned();
        let mut browser = Browser { cdp, session, _profile: profile };
        for domain in ["Network.enable", "Runtime.enable", "Page.enable", "Log.enable"] {
            browser.call(domain, json!({}));
        }
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
        );
        browser
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.cdp.call(Some(&session), method, params)
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true }));
        if let Some(exception) = result.get("exceptionDetails") {
            self.cdp.fail(&format!("{expression}: {exception:#}"));
        }
        result["result"]["value"].clone()
    }

    /// Polls `expression` until `done` accepts its value.
    fn wait_for(&mut self, expression: &str, done: impl Fn(&Value) -> bool, what: &str) -> Value {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let result = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true }));
            let value = result["result"]["value"].clone();
            if result.get("exceptionDetails").is_none() && done(&value) {
                return value;
            }
            if Instant::now() > deadline {
                self.cdp.fail(&format!("waited {STEP_TIMEOUT:?} for {what}; last: {result}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn open_graphiql(&mut self, url: &str) {
        let navigated = self.call("Page.navigate", json!({ "url": url }));
        if let Some(error) = navigated.get("errorText") {
            self.cdp.fail(&format!("navigation to {url} failed: {error}"));
        }
        self.wait_for(EDITORS_READY, |v| v == &json!(true), "GraphiQL's editors");
    }

    /// Types `text` over the Headers pane and waits until GraphiQL kept it.
    fn type_headers(&mut self, text: &str) {
        self.wait_for(HEADERS_TEXT, |v| v.is_string(), "the Headers pane");
        self.eval(SELECT_HEADERS);
        self.call("Input.insertText", json!({ "text": text }));
        let wanted = text.to_owned();
        self.wait_for(
            STORED_HEADERS,
            |v| v.as_str().is_some_and(|h| h.contains(wanted.split('"').nth(3).unwrap_or("Bearer"))),
            "the headers kept",
        );
    }

    /// Clicks "Execute"; returns whatever the response pane then shows.
    fn execute_any(&mut self) -> Value {
        self.click_execute();
        self.wait_for(RESPONSE_TEXT, |v| v.as_str().is_some_and(|t| !t.is_empty()), "the response pane")
    }

    fn click_execute(&mut self) {
        let center = self.eval(EXECUTE_BUTTON_CENTER);
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": center["x"], "y": center["y"], "button": "left", "clickCount": 1 }),
            );
        }
    }

    /// Clicks "Execute" like a person would; returns what the response pane then shows.
    fn execute(&mut self) -> Value {
        // Empty until something runs (GraphiQL shows schema errors there too).
        let before = self.eval(RESPONSE_TEXT);
        if before != json!("") {
            self.cdp.fail(&format!("the response pane shows something before running: {before}"));
        }
        self.click_execute();
        let text = self.wait_for(
            RESPONSE_TEXT,
            |v| v.as_str().is_some_and(|text| serde_json::from_str::<Value>(text).is_ok()),
            "a JSON response in the response pane",
        );
        serde_json::from_str(text.as_str().unwrap_or_default()).expect("JSON")
    }

    /// A PNG of the page, for humans.
    fn screenshot(&mut self, path: &Path) {
        // Let the last change paint first.
        self.call(
            "Runtime.evaluate",
            json!({ "expression": "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))", "awaitPromise": true }),
        );
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = STANDARD.decode(shot["data"].as_str().expect("screenshot data")).expect("base64 PNG");
        std::fs::create_dir_all(path.parent().expect("target dir")).expect("mkdir target");
        std::fs::write(path, png).expect("write screenshot");
        eprintln!("screenshot: {}", path.display());
    }

    fn close(&mut self) {
        self.cdp.close();
    }

    /// Every request the page made (`Network.requestWillBeSent`'s `request`)
    /// and every websocket it opened (`{url, websocket: true}`).
    fn requests(&self) -> Vec<Value> {
        let mut requests = Vec::new();
        for event in &self.cdp.events {
            match event["method"].as_str() {
                Some("Network.requestWillBeSent") => requests.push(event["params"]["request"].clone()),
                Some("Network.webSocketCreated") => {
                    requests.push(json!({ "url": event["params"]["url"], "websocket": true }))
                }
                _ => {}
            }
        }
        requests
    }

    /// What the browser logged (console, and its own messages such as CSP
    /// and framing refusals), one entry a line.
    fn console_text(&self) -> String {
        let mut lines = Vec::new();
        for event in &self.cdp.events {
            match event["method"].as_str() {
                Some("Log.entryAdded") => lines.push(event["params"]["entry"]["text"].to_string()),
                Some("Runtime.consoleAPICalled") => lines.push(event["params"]["args"].to_string()),
                _ => {}
            }
        }
        lines.join("\n")
    }

    /// The page's Content-Security-Policy blocked nothing it needed.
    fn assert_no_csp_violation(&self) {
        let console = self.console_text();
        let violations: Vec<&str> =
            console.lines().filter(|l| l.contains("Content Security Policy") || l.contains("Refused to")).collect();
        assert!(violations.is_empty(), "CSP violations: {violations:#?}");
    }

    /// No network beyond loopback, and no uncaught exception in the page.
    fn assert_offline_and_clean(&self) {
        let requests = self.requests();
        assert!(!requests.is_empty(), "no network events recorded");
        for request in requests {
            let url = request["url"].as_str().unwrap_or_default();
            let parsed = url::Url::parse(url).unwrap_or_else(|e| panic!("{e}: {url}"));
            let local = parsed.scheme() == "data"
                || (matches!(parsed.scheme(), "http" | "ws") && parsed.host_str().is_some_and(is_loopback_host));
            assert!(local, "the page fetched {url}");
        }
        let exceptions: Vec<&Value> =
            self.cdp.events.iter().filter(|e| e["method"] == "Runtime.exceptionThrown").map(|e| &e["params"]).collect();
        assert!(exceptions.is_empty(), "uncaught exceptions in the page: {exceptions:#?}");
    }
}

/// A Chromium under `--remote-debugging-pipe`.
struct Cdp {
    child: Child,
    input: ChildStdin,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
    /// Every event received so far, in order.
    events: Vec<Value>,
    log: PathBuf,
}

impl Cdp {
    fn launch(chromium: &Path, profile: &Path, log: &Path) -> Cdp {
        std::fs::create_dir_all(log.parent().expect("log dir")).expect("mkdir target");
        let stderr = File::create(log).expect("chromium log");
        let mut child = Command::new("sh")
            // Our stdin becomes its fd 3 (commands), our stdout its fd 4 (replies).
            .args(["-c", r#"exec "$@" 3<&0 4>&1 0</dev/null 1>&2"#, "sh"])
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--no-proxy-server",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--mute-audio",
                "--hide-scrollbars",
                // Belt and braces: no name resolves except loopback.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                "--window-size=1280,900",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", chromium.display()));
        let input = child.stdin.take().expect("stdin");
        let output = child.stdout.take().expect("stdout");
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(output);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if message.last() == Some(&0) {
                            message.pop();
                        }
                        let Ok(value) = serde_json::from_slice::<Value>(&message) else { continue };
                        if tx.send(value).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Cdp { child, input, messages, next_id: 0, events: Vec::new(), log: log.to_owned() }
    }

    fn fail(&self, what: &str) -> ! {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> =
            log.lines().filter(|l| !l.contains("dbus")).rev().take(30).collect::<Vec<_>>().into_iter().rev().collect();
        let console: Vec<&Value> = self
            .events
            .iter()
            .filter(|e| matches!(e["method"].as_str(), Some("Runtime.consoleAPICalled" | "Runtime.exceptionThrown")))
            .map(|e| &e["params"])
            .collect();
        panic!("{what}\npage console: {console:#?}\nchromium log ({}):\n{}", self.log.display(), tail.join("\n"));
    }

    /// Sends a command (to the browser, or to a page's session) and waits for its result.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        if let Err(e) = self.input.write_all(&bytes).and_then(|()| self.input.flush()) {
            self.fail(&format!("{method}: writing to chromium: {e}"));
        }
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(reply) if reply["id"] == json!(id) => {
                    if let Some(error) = reply.get("error") {
                        self.fail(&format!("{method}: {error}"));
                    }
                    return reply["result"].clone();
                }
                Ok(event) => self.events.push(event),
                Err(mpsc::RecvTimeoutError::Timeout) => self.fail(&format!("{method}: no reply in {STEP_TIMEOUT:?}")),
                Err(mpsc::RecvTimeoutError::Disconnected) => self.fail(&format!("{method}: chromium went away")),
            }
        }
    }

    fn close(&mut self) {
        self.next_id += 1;
        let mut bytes = json!({ "id": self.next_id, "method": "Browser.close", "params": {} }).to_string().into_bytes();
        bytes.push(0);
        let _ = self.input.write_all(&bytes).and_then(|()| self.input.flush());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // Keep what arrived meanwhile (late events count too).
            while let Ok(event) = self.messages.try_recv() {
                self.events.push(event);
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
