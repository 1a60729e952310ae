//! Long lists of plain rows, resolved one after another.
//!
//! async-graphql resolves a `Vec<T>` by joining one future per item
//! (`try_join_all`, which beyond 30 items is a `FuturesOrdered`: a task node,
//! a waker and a queue push per item), and an object's fields by polling
//! one boxed future per field in a `FuturesUnordered` unless the object is
//! `serial`. That concurrency is what lets a page of units batch their
//! attempts into one DataLoader call; a row whose fields are all values it
//! already holds gains nothing from it and pays for it on every item: a
//! fleet-wide `throughput(bucket: DAY)` is 2,920 items of six fields
//! (docs/BENCHMARKS.md, round 3, session 23).
//!
//! [`Rows`] is the list for such rows. Its items are resolved in turn, each
//! one ready at its first poll, into the same value, with the same errors at
//! the same paths; its schema type is the `Vec`'s. Only a type that says it
//! is [`Plain`] can be listed this way: one whose fields wait on nothing, and
//! whose derive is `serial`.

use std::borrow::Cow;

use async_graphql::parser::types::Field;
use async_graphql::registry::Registry;
use async_graphql::{ContextSelectionSet, OutputType, Positioned, ServerResult, Value};

/// An output type whose fields are values it holds: no loader, no query,
/// nothing to wait for. Declared by hand, beside a `#[graphql(serial)]`.
pub trait Plain: OutputType {}

/// A list of [`Plain`] rows, the schema's `[T!]!`.
pub struct Rows<T>(pub Vec<T>);

impl<T, R: Into<T>> FromIterator<R> for Rows<T> {
    fn from_iter<I: IntoIterator<Item = R>>(iter: I) -> Self {
        Self(iter.into_iter().map(Into::into).collect())
    }
}

impl<T: Plain> OutputType for Rows<T> {
    fn type_name() -> Cow<'static, str> {
        Vec::<T>::type_name()
    }

    fn qualified_type_name() -> String {
        Vec::<T>::qualified_type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        Vec::<T>::create_type_info(registry)
    }

    async fn resolve(&self, ctx: &ContextSelectionSet<'_>, field: &Positioned<Field>) -> ServerResult<Value> {
        let mut items = Vec::with_capacity(self.0.len());
        for (idx, item) in self.0.iter().enumerate() {
            let ctx = ctx.with_index(idx);
            items.push(item.resolve(&ctx, field).await.map_err(|e| ctx.set_error_path(e))?);
        }
        Ok(Value::List(items))
    }
}
