//! `POST /graphql` and `GET /graphql` by the GraphQL-over-HTTP
//! specification: authentication first (401), then the media types (406 when
//! the client accepts neither `application/graphql-response+json` nor
//! `application/json`; 415 for a POST that is not `application/json`), the
//! body and batch limits of SPEC §9, the shape of each request (400), and
//! execution. A request error (the document does not parse or validate, its
//! variables do not coerce) answers 400 with no `data` entry under
//! `application/graphql-response+json`, and 200 under `application/json`.
//! GET runs queries only (a mutation is 405), with the same authentication,
//! limits and complexity budget. Each operation of a batch gets its own
//! DataLoaders, and all of them one budget of fleet-wide reads (the one way
//! into the schema makes the one and checks the other: `graphql::executor`).

use std::net::SocketAddr;

use async_graphql::{BatchRequest, Request, Response as GqlResponse};
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::{AppState, MAX_BATCH, authenticate, error_response, read_body};
use crate::auth::Principal;
use crate::graphql::request_errors::{self, OverHttp};
use crate::ledger::LedgerError;

/// The two response media types of the specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    GraphQlResponse,
    Json,
}

impl MediaType {
    pub fn content_type(self) -> &'static str {
        match self {
            Self::GraphQlResponse => "application/graphql-response+json; charset=utf-8",
            Self::Json => "application/json; charset=utf-8",
        }
    }

    /// What the client accepts: `application/graphql-response+json` when it
    /// names it (at least as preferred as `application/json`), otherwise
    /// `application/json` (also for no `Accept` and for `*/*`), `None` when
    /// neither is acceptable.
    pub fn negotiate(headers: &HeaderMap) -> Option<Self> {
        let mut ranges: Vec<(String, f32)> = Vec::new();
        for value in headers.get_all(header::ACCEPT) {
            let Ok(value) = value.to_str() else { continue };
            for range in value.split(',') {
                let mut parts = range.split(';');
                let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
                if media.is_empty() {
                    continue;
                }
                let q = parts
                    .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
                    .find_map(|q| q.trim().parse::<f32>().ok())
                    .unwrap_or(1.0);
                ranges.push((media, q));
            }
        }
        if ranges.is_empty() {
            return Some(Self::Json);
        }
        // The most specific range that matches a type gives its quality.
        let quality = |wanted: &str| -> (f32, bool) {
            let exact = ranges.iter().filter(|(m, _)| m == wanted).map(|(_, q)| *q).reduce(f32::max);
            if let Some(q) = exact {
                return (q, true);
            }
            let partial = ranges.iter().filter(|(m, _)| m == "application/*").map(|(_, q)| *q).reduce(f32::max);
            let any = ranges.iter().filter(|(m, _)| m == "*/*").map(|(_, q)| *q).reduce(f32::max);
            (partial.or(any).unwrap_or(0.0), false)
        };
        let (graphql, named) = quality("application/graphql-response+json");
        let (json, _) = quality("application/json");
        if named && graphql > 0.0 && graphql >= json {
            Some(Self::GraphQlResponse)
        } else if json > 0.0 {
            Some(Self::Json)
        } else if graphql > 0.0 {
            Some(Self::GraphQlResponse)
        } else {
            None
        }
    }
}

/// 406: nothing the client accepts.
fn not_acceptable() -> Response {
    error_response(
        StatusCode::NOT_ACCEPTABLE,
        MediaType::Json,
        LedgerError::invalid(
            "Accept",
            "this endpoint answers application/graphql-response+json or application/json; accept one of them",
        ),
    )
}

pub(super) async fn post(
    State(state): State<AppState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (principal, media) = match admit(&state, &headers, client).await {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    if !is_json(&headers) {
        return error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            media,
            LedgerError::invalid(
                "Content-Type",
                "a POST carries `Content-Type: application/json` with {\"query\": ..., \"variables\": ...}",
            ),
        );
    }
    let bytes = match read_body(body, state.http.body_read_timeout).await {
        Ok(bytes) => bytes,
        Err(err) => return error_response(err.status(), media, err.into_ledger_error()),
    };
    let batch = match parse_body(&bytes) {
        Ok(batch) => batch,
        Err(err) => return error_response(StatusCode::BAD_REQUEST, media, err),
    };
    execute(&state, principal, batch, media).await
}

pub(super) async fn get(
    State(state): State<AppState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let (principal, media) = match admit(&state, &headers, client).await {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    let mut request = match parse_query_string(uri.query().unwrap_or_default()) {
        Ok(request) => request,
        Err(err) => return error_response(StatusCode::BAD_REQUEST, media, err),
    };
    // Only reads: a GET can be a link, and a link must never write.
    if let Some(kind) = operation_kind(&mut request)
        && kind != async_graphql::parser::types::OperationType::Query
    {
        let mut response = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            media,
            LedgerError::invalid(
                "query",
                format!("GET runs queries only; send this {kind} as a POST with Content-Type: application/json"),
            ),
        );
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
        return response;
    }
    execute(&state, principal, BatchRequest::Single(request), media).await
}

/// 401 (with the scheme to use) or, when the token store cannot be asked, 503.
/// What both methods check first, in order: the token (401 even when the
/// client accepts no type we answer), then the response type (406).
async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    client: SocketAddr,
) -> Result<(Principal, MediaType), Box<Response>> {
    let media = MediaType::negotiate(headers);
    let principal = match authenticate(state, headers, client).await {
        Ok(principal) => principal,
        Err(err) => return Err(Box::new(auth_refusal(err, media.unwrap_or(MediaType::Json)))),
    };
    let Some(media) = media else { return Err(Box::new(not_acceptable())) };
    Ok((principal, media))
}

fn auth_refusal(err: LedgerError, media: MediaType) -> Response {
    error_response(super::auth_status(&err), media, err)
}

/// `application/json`, with any parameters.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The body: one request object or a batch of 1 to `MAX_BATCH` of them.
fn parse_body(bytes: &[u8]) -> Result<BatchRequest, LedgerError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|_| {
        LedgerError::invalid(
            "body",
            "expected a JSON GraphQL request {\"query\": ..., \"variables\": ...} or a list of them",
        )
    })?;
    match value {
        Value::Array(items) => {
            if items.is_empty() || items.len() > MAX_BATCH {
                return Err(LedgerError::invalid(
                    "body",
                    format!("a batch holds 1 to {MAX_BATCH} operations (got {})", items.len()),
                ));
            }
            let requests = items.into_iter().map(request_of).collect::<Result<Vec<_>, _>>()?;
            Ok(BatchRequest::Batch(requests))
        }
        other => Ok(BatchRequest::Single(request_of(other)?)),
    }
}

/// One request object, its parameters checked by the specification's rules:
/// `query` a string, `operationName` a string or null, `variables` and
/// `extensions` maps or null.
fn request_of(value: Value) -> Result<Request, LedgerError> {
    let Value::Object(mut fields) = value else {
        return Err(LedgerError::invalid("body", "each GraphQL request is a JSON object with a string `query`"));
    };
    let query = match fields.remove("query") {
        Some(Value::String(query)) => query,
        None | Some(Value::Null) => {
            return Err(LedgerError::invalid("query", "missing: send the GraphQL document as a string `query`"));
        }
        Some(_) => return Err(LedgerError::invalid("query", "must be a string holding the GraphQL document")),
    };
    let operation_name = match fields.remove("operationName") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name),
        Some(_) => return Err(LedgerError::invalid("operationName", "must be a string or null")),
    };
    let variables = map_or_null(fields.remove("variables"), "variables")?;
    let extensions = map_or_null(fields.remove("extensions"), "extensions")?;
    let mut request = Request::new(query);
    if let Some(name) = operation_name {
        request = request.operation_name(name);
    }
    if let Some(variables) = variables {
        request = request.variables(async_graphql::Variables::from_json(Value::Object(variables)));
    }
    if let Some(extensions) = extensions {
        for (key, value) in extensions {
            let value = async_graphql::Value::from_json(value)
                .map_err(|_| LedgerError::invalid("extensions", "must be a JSON map"))?;
            request.extensions.insert(key, value);
        }
    }
    Ok(request)
}

fn map_or_null(value: Option<Value>, name: &str) -> Result<Option<Map<String, Value>>, LedgerError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(LedgerError::invalid(name, "must be a JSON map (object) or null")),
    }
}

/// `?query=...&variables=<JSON>&operationName=...&extensions=<JSON>`.
fn parse_query_string(query: &str) -> Result<Request, LedgerError> {
    let mut fields = Map::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let value = match key.as_ref() {
            "query" | "operationName" => Value::String(value.into_owned()),
            "variables" | "extensions" => serde_json::from_str(&value)
                .map_err(|_| LedgerError::invalid(key.as_ref(), "must be a URL-encoded JSON map"))?,
            _ => continue,
        };
        fields.insert(key.into_owned(), value);
    }
    request_of(Value::Object(fields))
}

/// The kind of operation a request would run; `None` when the document does
/// not parse or names no runnable operation (execution reports that).
fn operation_kind(request: &mut Request) -> Option<async_graphql::parser::types::OperationType> {
    let name = request.operation_name.clone();
    let document = request.parsed_query().ok()?;
    request_errors::selected(document, name.as_deref()).map(|operation| operation.node.ty)
}

/// Runs the batch as `principal` and answers in `media`.
async fn execute(state: &AppState, principal: Principal, batch: BatchRequest, media: MediaType) -> Response {
    let with_context = |request: Request| request.data(principal.clone()).data(OverHttp);
    let (body, status) = match batch {
        BatchRequest::Single(request) => {
            let answer = state.schema.execute_shared(with_context(request), response_body).await;
            let failed = !answer.executed();
            let status = if answer.unauthenticated() {
                StatusCode::UNAUTHORIZED
            } else if failed && media == MediaType::GraphQlResponse {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            (answer.text(), status)
        }
        BatchRequest::Batch(requests) => {
            let requests = requests.into_iter().map(with_context).collect();
            let answers = state.schema.execute_batch(requests, response_body).await;
            let mut status = StatusCode::OK;
            let mut body = Vec::from(b"[".as_slice());
            for (i, answer) in answers.into_iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                if answer.unauthenticated() {
                    status = StatusCode::UNAUTHORIZED;
                }
                body.extend_from_slice(&answer.text());
            }
            body.push(b']');
            (Bytes::from(body), status)
        }
    };
    // The database refused the token in the request's own statements (it
    // was revoked or expired after the request was admitted): 401, as if
    // it had been refused at the door.
    let mut response = (status, [(header::CONTENT_TYPE, media.content_type())], body).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// A response as JSON text, written straight from the response's values (a
/// 2,920-row `throughput` is not built a second time as a JSON tree). A
/// request error (not `executed`) has no `data` entry (its errors have
/// their codes from `graphql::executor`).
fn response_body(response: &GqlResponse, executed: bool) -> String {
    const NO_DATA: &str = r#"{"data":null}"#;
    if executed {
        return serde_json::to_string(response).unwrap_or_else(|_| NO_DATA.to_owned());
    }
    let mut body = serde_json::to_value(response).unwrap_or_else(|_| serde_json::json!({ "data": null }));
    if let Value::Object(fields) = &mut body {
        fields.remove("data");
    }
    body.to_string()
}
