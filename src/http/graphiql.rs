//! GraphiQL on `GET /`, with its assets compiled into the binary and served
//! from `GET /assets/graphiql/{file}`: the page works with no internet access
//! (SPEC §4). The vendored files and their versions are listed in
//! `assets/graphiql/README.md`; `assets/graphiql/work-ledger.js` wires
//! GraphiQL to `/graphql` and `/graphql/ws`, to the Headers pane and to the
//! schema (`schema.graphql`, compiled in as well).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use sha2::{Digest, Sha256};

const PAGE: &str = include_str!("../../assets/graphiql/index.html");

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const ASSETS: &[Asset] = &[
    Asset {
        name: "graphiql.min.css",
        content_type: CSS,
        body: include_bytes!("../../assets/graphiql/graphiql.min.css"),
    },
    Asset { name: "graphiql.min.js", content_type: JS, body: include_bytes!("../../assets/graphiql/graphiql.min.js") },
    Asset {
        name: "react.production.min.js",
        content_type: JS,
        body: include_bytes!("../../assets/graphiql/react.production.min.js"),
    },
    Asset {
        name: "react-dom.production.min.js",
        content_type: JS,
        body: include_bytes!("../../assets/graphiql/react-dom.production.min.js"),
    },
    Asset { name: "work-ledger.js", content_type: JS, body: include_bytes!("../../assets/graphiql/work-ledger.js") },
    // The SDL the server prints (a test keeps the two in step). GraphiQL
    // builds its schema from it instead of introspecting: SPEC §9's depth
    // limit of 12 refuses GraphiQL's introspection query, and this way the
    // docs and completion work before a token is entered.
    Asset {
        name: "schema.graphql",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("../../schema.graphql"),
    },
];

/// Assets are cached for a year; the page names each one with a hash of its
/// content (`?v=`), so a changed file is a new URL. The page itself is
/// revalidated every time.
const ASSET_CACHE: &str = "public, max-age=31536000, immutable";
const PAGE_CACHE: &str = "no-cache";

/// The page with every asset URL versioned by its content.
static VERSIONED_PAGE: LazyLock<String> = LazyLock::new(|| {
    ASSETS.iter().fold(PAGE.to_owned(), |page, asset| {
        let hash = hex::encode(&Sha256::digest(asset.body)[..6]);
        let path = format!("\"/assets/graphiql/{}\"", asset.name);
        let versioned = format!("\"/assets/graphiql/{}?v={hash}\"", asset.name);
        page.replace(&path, &versioned)
    })
});

/// `GET /assets/graphiql/{file}`; stateless, so it merges into a router of
/// any state. The page itself ([`page`]) is served by `GET /` to browsers.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/assets/graphiql/{file}", get(asset))
}

/// The page's Content-Security-Policy: scripts, styles and fetches only from
/// this server (WebSockets included), the page's one inline `<style>` by its
/// hash, no plugins, no forms, no `<base>`, and no framing. GraphiQL sets
/// element styles (`style-src-attr`); its fonts are `data:` URLs.
static PAGE_CSP: LazyLock<String> = LazyLock::new(|| {
    let style = PAGE.split_once("<style>").and_then(|(_, rest)| rest.split_once("</style>")).map_or("", |(s, _)| s);
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(style.as_bytes()));
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self' 'sha256-{hash}'; style-src-attr 'unsafe-inline'; \
         img-src 'self' data:; font-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    )
});

/// The GraphiQL page.
pub fn page() -> Response {
    (
        [
            (header::CACHE_CONTROL, PAGE_CACHE),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, PAGE_CSP.as_str()),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        Html(VERSIONED_PAGE.as_str()),
    )
        .into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|asset| asset.name == file) {
        Some(asset) => (
            [
                (header::CONTENT_TYPE, asset.content_type),
                (header::CACHE_CONTROL, ASSET_CACHE),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            asset.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_versioned_in_the_page() {
        for asset in ASSETS {
            let path = format!("\"/assets/graphiql/{}?v=", asset.name);
            assert!(VERSIONED_PAGE.contains(&path), "the page does not load {}", asset.name);
        }
    }
}
