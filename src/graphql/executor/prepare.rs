//! Before execution: a request's document parsed once and checked, and the
//! request given its data ([`LedgerSchema::prepare`]).

use std::any::{Any, TypeId};
use std::sync::Arc;

use async_graphql::parser::types::OperationType;
use async_graphql::{Data, Request, ServerError};
use chrono::Utc;

use super::{LedgerSchema, Prepared, Run, Shareable};
use crate::auth::Principal;
use crate::graphql::loaders::{RequestLoaders, RequestTime};
use crate::graphql::operation_metrics::Root;
use crate::graphql::read_budget;
use crate::graphql::request_errors::{self, OverHttp, PARSE_FAILED, with_code};
use crate::graphql::selection_order::Order;
use crate::graphql::shared_reads::Key;

impl LedgerSchema {
    /// The request checked ([`LedgerSchema::check`]) and given its data,
    /// with what its answer needs and, for a query over HTTP, the key it
    /// may share an execution under (with its caller); `session` is a
    /// WebSocket connection's.
    pub(super) fn prepare(&self, mut request: Request, session: Option<&Data>) -> Prepared {
        let over_http = data_of::<OverHttp>(&request.data).is_some();
        let who = data_of::<Principal>(&request.data).or_else(|| session.and_then(data_of::<Principal>)).cloned();
        let (root, reads, shared, order) = self.check(&mut request, over_http, who.as_ref())?;
        let run = Run { root, who, notes: Arc::default(), reads, order: Arc::new(order) };
        Ok((self.with_data(request, &run), run, shared))
    }

    /// Parses the document and checks it before async-graphql validates it
    /// (which then takes it as parsed): what the request's metrics and span
    /// need to know of it, its fleet-wide reads and, for `who`'s query over
    /// HTTP, the key it may share an execution under
    /// ([`shared_reads`](crate::graphql::shared_reads)); or the refusal.
    fn check(
        &self,
        request: &mut Request,
        over_http: bool,
        who: Option<&Principal>,
    ) -> Result<(Root, usize, Shareable, Order), ServerError> {
        let document =
            self.0.documents.parse(&request.query).map_err(|err| with_code(ServerError::from(err), PARSE_FAILED))?;
        let name = request.operation_name.as_deref();
        let operation = request_errors::selected(&document, name);
        let reads = read_budget::check(&document, operation)?;
        let order = operation.map(|op| Order::of(&document, &op.node.selection_set.node)).unwrap_or_default();
        request_errors::check_parsed(&self.0.registry, over_http, &document, &request.variables, name)?;
        // A document without the named operation: async-graphql refuses it.
        let mut root = Root::of(&document, name, &request.variables).unwrap_or_else(Root::unknown);
        // Spans and metrics are named after the schema's fields, never
        // after a name only the client knows.
        root.field = root.field.filter(|field| self.is_root_field(root.ty, field));
        let shareable = over_http && root.ty == OperationType::Query && root.field.is_some();
        let shared = who.filter(|_| shareable).and_then(|who| Some((Key::of(who, &document, request)?, who.clone())));
        request.set_parsed_query(document);
        Ok((root, reads, shared, order))
    }

    /// The request with its notes' store and, for a caller, its loaders (a
    /// query or mutation also its clock; a subscription's payloads each read
    /// the clock as they are resolved).
    fn with_data(&self, request: Request, run: &Run) -> Request {
        let mut request = request.data(run.notes.clone());
        if let Some(who) = &run.who {
            let subscription = run.root.ty == OperationType::Subscription;
            request = request.data(RequestLoaders::new(&self.0.ledger, who, subscription));
            if !subscription {
                request = request.data(RequestTime(Utc::now()));
            }
        }
        request
    }

    /// Whether the root type of `ty` has the field `name`.
    fn is_root_field(&self, ty: OperationType, name: &str) -> bool {
        let registry = &self.0.registry;
        let root = match ty {
            OperationType::Query => Some(&registry.query_type),
            OperationType::Mutation => registry.mutation_type.as_ref(),
            OperationType::Subscription => registry.subscription_type.as_ref(),
        };
        let introspection = ty == OperationType::Query && matches!(name, "__schema" | "__type" | "__typename");
        introspection || root.and_then(|root| registry.types.get(root)).is_some_and(|t| t.field_by_name(name).is_some())
    }
}

/// The value of type `T` in `data`, if any.
fn data_of<T: Any>(data: &Data) -> Option<&T> {
    data.get(&TypeId::of::<T>()).and_then(|d| d.downcast_ref::<T>())
}
