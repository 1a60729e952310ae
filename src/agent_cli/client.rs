//! One GraphQL request over HTTP, as a shell agent needs it: the bearer
//! token, and retries of what may pass (a network error, HTTP 5xx,
//! `UNAVAILABLE`) with the very same body, so a write's idempotency key makes
//! a retry of a write that did land a replay rather than a second write.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Failure;

/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub struct Client {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    token: String,
    retries: u32,
    backoff: Duration,
}

/// What one try gave.
enum Try {
    Data(Value),
    /// Worth trying again: the server may answer next time.
    Again(Failure),
    Fail(Failure),
}

impl Client {
    /// `base` is the server's base URL (`/graphql` is added) or the GraphQL endpoint itself.
    pub fn new(base: &str, token: &str, retries: u32, backoff: Duration, timeout: Duration) -> Result<Self, Failure> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("work-ledger-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| Failure::usage(format!("cannot set up the HTTP client: {err}")))?;
        Ok(Client { http, endpoint: endpoint(base)?, token: token.to_owned(), retries, backoff })
    }

    /// The response (`data`, `extensions`), or its first error; retried as the module says.
    pub async fn run(&self, query: &str, variables: Value) -> Result<Value, Failure> {
        let body = json!({ "query": query, "variables": variables });
        let mut tries = 0;
        loop {
            let failure = match self.send(&body).await {
                Try::Data(data) => return Ok(data),
                Try::Fail(failure) => return Err(failure),
                Try::Again(failure) => failure,
            };
            if tries == self.retries {
                return Err(failure);
            }
            tries += 1;
            let wait = self.backoff(tries);
            eprintln!(
                "retrying ({tries}/{}) in {}ms with the same request and idempotency key: {}: {}",
                self.retries,
                wait.as_millis(),
                failure.code,
                failure.message
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Doubling from the configured backoff, capped, with jitter so that a
    /// fleet cut off at once does not come back at once.
    fn backoff(&self, try_no: u32) -> Duration {
        let doubled = self.backoff.saturating_mul(1 << (try_no - 1).min(16)).min(MAX_BACKOFF);
        doubled.mul_f64(rand::random_range(0.5..=1.0))
    }

    async fn send(&self, body: &Value) -> Try {
        let sent = self
            .http
            .post(self.endpoint.clone())
            .bearer_auth(&self.token)
            // Plain JSON: every GraphQL error comes with HTTP 200 (401 for a bad token).
            .header(reqwest::header::ACCEPT, "application/json")
            .json(body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(err) => {
                return Try::Again(Failure::unavailable(format!("cannot reach {}: {}", self.endpoint, chain(&err))));
            }
        };
        let status = response.status();
        let text = match response.text().await {
            Ok(text) => text,
            Err(err) => return Try::Again(Failure::unavailable(format!("the response was cut off: {}", chain(&err)))),
        };
        let parsed: Option<Map<String, Value>> = serde_json::from_str(&text).ok();
        let error = parsed.as_ref().and_then(|body| body.get("errors")?.as_array()?.first().cloned());
        if status.is_server_error() {
            let mut failure = error.map(Failure::from_graphql).unwrap_or_else(|| {
                Failure::unavailable(format!("the server answered HTTP {status}: {}", snippet(&text)))
            });
            failure.unavailable = true;
            return Try::Again(failure);
        }
        match (parsed, error) {
            (_, Some(error)) => {
                let failure = Failure::from_graphql(error);
                if failure.unavailable { Try::Again(failure) } else { Try::Fail(failure) }
            }
            (Some(body), None) if status.is_success() => Try::Data(Value::Object(body)),
            _ => Try::Fail(Failure::unexpected(format!(
                "the server answered HTTP {status} with no GraphQL errors: {}",
                snippet(&text)
            ))),
        }
    }
}

/// `POST` goes to `<base>/graphql`, or to `base` when it names the endpoint itself.
fn endpoint(base: &str) -> Result<reqwest::Url, Failure> {
    let mut endpoint = reqwest::Url::parse(base)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| Failure::usage(format!("`{base}` is not an http(s) URL like http://127.0.0.1:8080")))?;
    if !endpoint.path().ends_with("/graphql") {
        let path = format!("{}/graphql", endpoint.path().trim_end_matches('/'));
        endpoint.set_path(&path);
    }
    Ok(endpoint)
}

/// An error and its causes, `: `-separated (reqwest's own text hides the cause).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn snippet(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_base_url_and_graphql() {
        let url = |base| endpoint(base).map(|url| url.to_string()).map_err(|failure| failure.code);
        assert_eq!(url("http://127.0.0.1:8080"), Ok("http://127.0.0.1:8080/graphql".to_owned()));
        assert_eq!(url("https://ledger.example/team/"), Ok("https://ledger.example/team/graphql".to_owned()));
        assert_eq!(url("http://h:1/graphql"), Ok("http://h:1/graphql".to_owned()));
        assert_eq!(url("127.0.0.1:8080"), Err("USAGE".to_owned()));
        assert_eq!(url("ftp://h/"), Err("USAGE".to_owned()));
    }
}
