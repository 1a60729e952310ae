//! The one way into the schema: [`LedgerSchema`] runs every request of
//! every surface (HTTP, WebSocket, MCP, the quick start) and does around the
//! execution what each request needs, each rule in the module that owns it.
//!
//! The schema itself has no extension. async-graphql runs every field of a
//! response through the extensions' `resolve` chain as soon as there is
//! one (a `ResolveInfo`, a registry lookup and boxed futures per field, for
//! each of a 2,920-row `throughput`'s 20,000 fields); without one it calls
//! the resolver directly (docs/BENCHMARKS.md, round 3, session 20: about a
//! fifth off every read with 16 readers). So the request's work is done
//! here, before and after:
//!
//! | step | what runs |
//! | --- | --- |
//! | parse | the document is parsed here once (async-graphql takes it as parsed): the code of a parse error; [`read_budget`]: fleet-wide reads (a batch's together) and aliases; [`request_errors`]: subscriptions over HTTP, required variables |
//! | data | [`notes`]: the response notes' store; [`loaders`](super::loaders): the request's DataLoaders and clock |
//! | execute | in the ledger operation's span ([`operation_metrics`]) |
//! | answer | a request refused before execution: the code of validation errors and [`guidance`]'s names meant; an executed one: [`notes`] into the response; [`operation_metrics`]: counted and timed by root field and code |
//!
//! A subscription's payloads get the notes of their own execution and a
//! DataLoader that caches nothing (made when a payload first needs one);
//! subscriptions are not counted as requests, and a payload has no span of
//! its own. A query or mutation over WebSocket runs in its span as over HTTP.
//!
//! The parse and the checks are in [`prepare`]; identical queries over HTTP
//! sharing one execution, in [`shared`].

mod prepare;
mod shared;

use std::sync::Arc;
use std::time::Instant;

use async_graphql::futures_util::stream::{self, BoxStream, StreamExt};
use async_graphql::parser::types::OperationType;
use async_graphql::registry::Registry;
use async_graphql::{Data, Executor, OutputType, Request, Response, Schema, ServerError, SubscriptionType};
use axum::body::Bytes;
use tracing::Instrument;

use super::documents::Documents;
use super::notes::{self, Notes};
use super::operation_metrics::{self, Root};
use super::request_errors::{self, VALIDATION_FAILED, with_code};
use super::selection_order::Order;
use super::shared_reads::{Gate, Key};
use super::{Mutation, Query, Subscription, guidance, read_budget};
use crate::auth::Principal;
use crate::ledger::Ledger;

type Raw = Schema<Query, Mutation, Subscription>;

/// A checked request's own: its root field, its caller, the store of the
/// notes its resolvers leave and its fleet-wide reads ([`read_budget`]).
#[derive(Clone)]
struct Run {
    root: Root,
    who: Option<Principal>,
    notes: Arc<Notes>,
    reads: usize,
    /// The order the answer's maps are written in ([`selection_order`]).
    order: Arc<Order>,
}

/// A request checked and given its data, or its refusal ([`LedgerSchema::prepare`]).
type Prepared = Result<(Request, Run, Shareable), ServerError>;

/// A response over HTTP with its text: the request's own, or the one an
/// execution gave every identical query that waited for it
/// ([`shared_reads`](super::shared_reads)), written once for all of them.
pub struct Answer(Arc<Written>);

struct Written {
    response: Response,
    /// Whether it comes from an execution ([`request_errors::executed`]).
    executed: bool,
    text: Bytes,
}

impl Written {
    fn new(response: Response, write: Write) -> Self {
        let executed = request_errors::executed(&response);
        let text = Bytes::from(write(&response, executed));
        Self { response, executed, text }
    }
}

impl Answer {
    /// Whether the response comes from an execution, not from a request
    /// refused before it ([`request_errors::executed`]).
    pub fn executed(&self) -> bool {
        self.0.executed
    }

    pub fn text(&self) -> Bytes {
        self.0.text.clone()
    }

    /// Whether the database refused the caller's token during the
    /// execution (revoked or expired since the request was admitted).
    pub fn unauthenticated(&self) -> bool {
        self.0.response.errors.iter().any(|err| {
            err.extensions.as_ref().and_then(|e| e.get("code")) == Some(&async_graphql::Value::from("UNAUTHENTICATED"))
        })
    }
}

/// A query's key for sharing its execution, and its caller
/// ([`shared_reads`](super::shared_reads)).
type Shareable = Option<(Key, Principal)>;

/// How the HTTP layer writes a response as text, given whether it comes
/// from an execution.
pub type Write = fn(&Response, bool) -> String;

/// The schema and what runs around each of its executions.
#[derive(Clone)]
pub struct LedgerSchema(Arc<Inner>);

struct Inner {
    raw: Raw,
    ledger: Ledger,
    /// The schema's types, for the checks of variables and the names meant.
    registry: Registry,
    /// Count and time requests (the service exports metrics).
    metrics: bool,
    /// Identical queries over HTTP running or gathering.
    reads: Gate<Key, Written, Principal>,
    /// Documents parsed before ([`documents`](super::documents)).
    documents: Documents,
}

impl LedgerSchema {
    pub(super) fn new(raw: Raw, ledger: Ledger, metrics: bool) -> Self {
        Self(Arc::new(Inner {
            raw,
            ledger,
            registry: registry(),
            metrics,
            reads: Gate::default(),
            documents: Documents::default(),
        }))
    }

    /// Runs a query or mutation (a subscription is refused with a code when
    /// the HTTP layer's [`OverHttp`](request_errors::OverHttp) is in the request).
    pub async fn execute(&self, request: impl Into<Request>) -> Response {
        let began = Instant::now();
        let (root, response) = match self.prepare(request.into(), None) {
            Err(err) => (None, Response::from_errors(vec![err])),
            Ok((request, run, _)) => {
                let span = run.root.span(run.who.as_ref());
                let response = self.run(request, &run, span).await;
                (Some(run.root), response)
            }
        };
        self.record(root.as_ref(), began, &response);
        response
    }

    /// [`LedgerSchema::execute`] of one request over HTTP, answered with its
    /// text (`write`): a query shares its execution with identical ones sent
    /// with it ([`shared_reads`](super::shared_reads)).
    pub async fn execute_shared(&self, request: Request, write: Write) -> Answer {
        self.execute_prepared(Instant::now(), self.prepare(request, None), write).await
    }

    /// One HTTP request's operations (a batch), each as `execute_shared` runs
    /// it once all are checked: their fleet-wide reads share one budget
    /// ([`read_budget::check_batch`]); over it, none runs, each is refused.
    pub async fn execute_batch(&self, requests: Vec<Request>, write: Write) -> Vec<Answer> {
        let began = Instant::now();
        let prepared: Vec<Prepared> = requests.into_iter().map(|request| self.prepare(request, None)).collect();
        let reads: Vec<usize> = prepared.iter().flatten().map(|(_, run, _)| run.reads).collect();
        if let Err(err) = read_budget::check_batch(&reads) {
            return prepared.iter().map(|_| self.refused(began, err.clone(), write)).collect();
        }
        let answers = prepared.into_iter().map(|prepared| self.execute_prepared(began, prepared, write));
        futures::future::join_all(answers).await
    }

    /// A prepared request's answer, sharing its execution when it may.
    async fn execute_prepared(&self, began: Instant, prepared: Prepared, write: Write) -> Answer {
        let (request, run, shared) = match prepared {
            Ok(prepared) => prepared,
            Err(err) => return self.refused(began, err, write),
        };
        let span = run.root.span(run.who.as_ref());
        let written = match shared {
            Some((key, who)) => self.shared(request, &run, span, key, who, write).await,
            None => Arc::new(Written::new(self.run(request, &run, span).await, write)),
        };
        self.record(Some(&run.root), began, &written.response);
        Answer(written)
    }

    /// The answer of a request refused before execution.
    fn refused(&self, began: Instant, err: ServerError, write: Write) -> Answer {
        let written = Arc::new(Written::new(Response::from_errors(vec![err]), write));
        self.record(None, began, &written.response);
        Answer(written)
    }

    /// Executes a checked request in `span` and answers it.
    async fn run(&self, request: Request, run: &Run, span: tracing::Span) -> Response {
        let response = self.0.raw.execute(request).instrument(span.clone()).await;
        self.conclude(response, run, &span)
    }

    /// Counts and times a request that began at `began`.
    fn record(&self, root: Option<&Root>, began: Instant, response: &Response) {
        if self.0.metrics {
            operation_metrics::record(&self.0.ledger, root, began, response);
        }
    }

    /// Runs an operation over WebSocket: a subscription's payloads, or the
    /// one response of a query or mutation. `session` holds the connection's
    /// data (its principal).
    pub fn stream(&self, request: Request, session: Option<Arc<Data>>) -> BoxStream<'static, Response> {
        let session = session.unwrap_or_default();
        let (request, run, _) = match self.prepare(request, Some(&session)) {
            Ok(prepared) => prepared,
            Err(err) => return stream::once(async move { Response::from_errors(vec![err]) }).boxed(),
        };
        let this = self.clone();
        let mut responses = self.0.raw.execute_stream_with_session_data(request, session);
        if run.root.ty == OperationType::Subscription {
            return responses
                .map(move |response| {
                    let mut response = this.answer(response, &run.notes).0;
                    run.order.apply(&mut response.data);
                    response
                })
                .boxed();
        }
        // A query or mutation answers once, in its span as over HTTP.
        let span = run.root.span(run.who.as_ref());
        let once = async move {
            let response = responses.next().await.unwrap_or_default();
            this.conclude(response, &run, &tracing::Span::current())
        };
        stream::once(once.instrument(span)).boxed()
    }

    /// An executed query's or mutation's answer ([`LedgerSchema::answer`]),
    /// its outcome recorded on `span`.
    fn conclude(&self, response: Response, run: &Run, span: &tracing::Span) -> Response {
        let (mut response, executed) = self.answer(response, &run.notes);
        run.order.apply(&mut response.data);
        if executed {
            run.root.finish(span, &response);
        }
        response
    }

    /// An executed response gets the notes its resolvers left; a request
    /// refused before execution, the code of validation errors and the
    /// names the caller probably meant. With whether it was executed.
    fn answer(&self, mut response: Response, notes: &Notes) -> (Response, bool) {
        let executed = request_errors::executed(&response);
        if executed {
            notes::into_response(notes, &mut response);
        } else {
            let registry = &self.0.registry;
            response.errors = std::mem::take(&mut response.errors)
                .into_iter()
                .map(|err| guidance::teach(registry, with_code(err, VALIDATION_FAILED)))
                .collect();
        }
        (response, executed)
    }
}

impl Executor for LedgerSchema {
    async fn execute(&self, request: Request) -> Response {
        LedgerSchema::execute(self, request).await
    }

    fn execute_stream(&self, request: Request, session_data: Option<Arc<Data>>) -> BoxStream<'static, Response> {
        self.stream(request, session_data)
    }
}

/// The types of the schema, as async-graphql registers them when it builds
/// it (its own registry is not reachable from outside an extension).
fn registry() -> Registry {
    let mut registry = Registry {
        query_type: <Query as OutputType>::type_name().to_string(),
        mutation_type: Some(<Mutation as OutputType>::type_name().to_string()),
        subscription_type: Some(Subscription::type_name().to_string()),
        ..Registry::default()
    };
    <Query as OutputType>::create_type_info(&mut registry);
    <Mutation as OutputType>::create_type_info(&mut registry);
    <Subscription as SubscriptionType>::create_type_info(&mut registry);
    registry
}
