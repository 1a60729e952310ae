//! The read path: validated keyset pages and the batched loads behind the
//! DataLoaders. Every read needs `ledger:read` and runs in the caller's fleet.

use uuid::Uuid;

use super::cursor::{self, Cursor, CursorText, List};
use super::{Ledger, LedgerError, UnitModel, validate};
use crate::auth::Principal;
use crate::db::entities::{Disposition, attempt, event, question};
use crate::db::reads::{
    self, AgentRow, AgentStatus, AttemptEndRow, CostRow, DisposalRow, DispositionRow, Query, QueueDepthRow, UnitCount,
};
pub use crate::db::reads::{EventFilter, QuestionFilter, Range, UnitFilter};
use crate::db::{aggregates, events};

/// One page of a keyset list.
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_next: bool,
    /// How to count the whole list (every page, same filter), when asked.
    pub total: Total,
}

/// The `count(*)` of a list, run only when a client asks for its `totalCount`.
#[derive(Clone)]
pub struct Total(Query);

/// Which rows of a list: at most `first` (1..=500, default 100) after a cursor.
pub struct PageArgs {
    pub first: Option<i32>,
    pub after: Option<String>,
}

fn split<T>(mut rows: Vec<T>, first: i32, total: Total) -> Page<T> {
    let has_next = rows.len() > first as usize;
    rows.truncate(first as usize);
    Page { items: rows, has_next, total }
}

/// What a list of units selects: units (alias `u`), or a view's units.
enum Listed {
    Units(Query),
    View(Query),
}

/// Validates paging arguments: `first` within bounds, `after` a cursor of `list`.
fn page_args(list: List, args: &PageArgs) -> Result<(i32, Option<Cursor>), LedgerError> {
    Ok((validate::first(args.first)?, Cursor::decode_opt(list, args.after.as_deref())?))
}

impl Ledger {
    /// One page of units listed by `query`: the table's own rows (`u`) or
    /// a view's ([`reads::units_in_view`], paged by [`reads::view_page`]).
    async fn units_query(
        &self,
        who: &Principal,
        list: List,
        args: PageArgs,
        listed: Listed,
        counted: Option<Query>,
    ) -> Result<Page<UnitModel>, LedgerError> {
        let (first, cursor) = page_args(list, &args)?;
        // The unit totals answer the same count when they can (SPEC §7 at
        // any size, issue 27); otherwise the rows are counted.
        let (Listed::Units(all) | Listed::View(all)) = &listed;
        let total = Total(counted.unwrap_or_else(|| all.count()));
        let query = match listed {
            Listed::Units(mut query) => {
                query.page("u", cursor, list == List::UnitsNewestFirst, first + 1);
                query
            }
            Listed::View(query) => reads::view_page(query, cursor, first + 1),
        };
        let rows = self.read(who, move |tx| Box::pin(async move { Ok(query.units(tx).await?) })).await?;
        Ok(split(rows, first, total))
    }

    /// Units, oldest first unless `newest_first`; each order has cursors of its own.
    pub async fn units_page(
        &self,
        who: &Principal,
        args: PageArgs,
        filter: UnitFilter,
        newest_first: bool,
    ) -> Result<Page<UnitModel>, LedgerError> {
        if let Some(prefix) = &filter.external_ref_prefix {
            validate::external_ref("filter.externalRefPrefix", prefix)?;
        }
        validate::filter("filter.domain", filter.domain.as_deref())?;
        validate::filter("filter.claimedBy", filter.claimed_by.as_deref())?;
        validate::range("filter.from", "filter.until", &filter.created)?;
        let counted = reads::units_counted_by_totals(&who.fleet, &filter);
        self.units_query(
            who,
            List::units(newest_first),
            args,
            Listed::Units(reads::units(&who.fleet, &filter)),
            counted,
        )
        .await
    }

    /// The `totalCount` of a list.
    pub async fn total(&self, who: &Principal, total: Total) -> Result<i64, LedgerError> {
        self.scan(who, move |tx| Box::pin(async move { Ok(total.0.scalar(tx).await?) })).await
    }

    /// CLAIMED or IN_PROGRESS units whose lease ran out (`v_stall_list`).
    pub async fn stalls_page(&self, who: &Principal, args: PageArgs) -> Result<Page<UnitModel>, LedgerError> {
        who.require(crate::auth::Permission::LedgerRead)?;
        let _turn = self.scans.enter(who.token_id).await?;
        self.units_query(who, List::Stalls, args, Listed::View(reads::units_in_view(&who.fleet, "v_stall_list")), None)
            .await
    }

    /// Units that needed more than one attempt (`v_rework`).
    pub async fn rework_page(&self, who: &Principal, args: PageArgs) -> Result<Page<UnitModel>, LedgerError> {
        let mut counted = reads::counted_by_totals(&who.fleet);
        counted.push(" AND t.reworked");
        self.units_query(
            who,
            List::Rework,
            args,
            Listed::View(reads::units_in_view(&who.fleet, "v_rework")),
            Some(counted),
        )
        .await
    }

    /// Disposed units with their evidence (`v_disposition_detail`).
    pub async fn dispositions_page(
        &self,
        who: &Principal,
        args: PageArgs,
        disposition: Option<Disposition>,
        domain: Option<String>,
        disposed: Range,
    ) -> Result<Page<UnitModel>, LedgerError> {
        validate::range("disposed.from", "disposed.until", &disposed)?;
        validate::filter("domain", domain.as_deref())?;
        let named = disposition.map(Disposition::as_sql);
        // Without a time range the unit totals count the same units; with
        // one, the day totals (through `throughput` by day).
        let counted = if disposed.from.is_none() && disposed.until.is_none() {
            let groups = UnitFilter { disposition, domain: domain.clone(), ..UnitFilter::default() };
            reads::units_counted_by_totals(&who.fleet, &groups).map(|mut q| {
                q.push(" AND t.disposition IS NOT NULL");
                q
            })
        } else {
            Some(aggregates::disposals_counted(&who.fleet, &disposed, named, domain.as_deref()))
        };
        let query = reads::dispositions(&who.fleet, &disposed, named, domain.as_deref());
        self.units_query(who, List::Dispositions, args, Listed::View(query), counted).await
    }

    /// Events, newest first unless not `newest_first`; each order has cursors of its own.
    pub async fn events_page(
        &self,
        who: &Principal,
        args: PageArgs,
        filter: EventFilter,
        newest_first: bool,
    ) -> Result<(Page<event::Model>, i64), LedgerError> {
        validate::range("filter.from", "filter.until", &filter.created)?;
        validate::filter("filter.agentId", filter.agent_id.as_deref())?;
        let (first, cursor) = page_args(List::events(newest_first), &args)?;
        let mut query = reads::events(&who.fleet, &filter);
        let counted = reads::events_counted_by_totals(&who.fleet, &filter);
        let total = Total(counted.unwrap_or_else(|| query.count()));
        query.page("e", cursor, newest_first, first + 1);
        let (rows, floor) = self
            .read(who, move |tx| {
                Box::pin(async move {
                    // The floor first: the page's statement then has a later snapshot.
                    let floor = events::watermark(tx).await?;
                    Ok((reads::events_page(tx, query).await?, floor))
                })
            })
            .await?;
        Ok((split(rows, first, total), floor))
    }

    pub async fn questions_page(
        &self,
        who: &Principal,
        args: PageArgs,
        filter: QuestionFilter,
    ) -> Result<Page<question::Model>, LedgerError> {
        validate::range("asked.from", "asked.until", &filter.created)?;
        validate::filter("assigneeGroup", filter.assignee_group.as_deref())?;
        let (first, cursor) = page_args(List::Questions, &args)?;
        let mut query = reads::questions(&who.fleet, &filter);
        let total = Total(query.count());
        query.page("q", cursor, false, first + 1);
        let rows =
            self.read(who, move |tx| Box::pin(async move { Ok(reads::questions_page(tx, query).await?) })).await?;
        Ok(split(rows, first, total))
    }

    pub async fn cost_page(
        &self,
        who: &Principal,
        args: PageArgs,
        domain: Option<String>,
    ) -> Result<Page<CostRow>, LedgerError> {
        validate::filter("domain", domain.as_deref())?;
        let (first, cursor) = page_args(List::CostPerUnit, &args)?;
        let mut query = reads::cost_per_unit(&who.fleet, domain.as_deref());
        let total = Total(query.count());
        query.page_on("v", "unit_id", cursor, false, first + 1);
        let rows = self.read(who, move |tx| Box::pin(async move { Ok(query.rows::<CostRow>(tx).await?) })).await?;
        Ok(split(rows, first, total))
    }

    /// The roster (`roster()`), by name; `status` keeps the agents of one
    /// status. A page without a status looks at its own names only; with a
    /// status, at every name after the cursor (fleet-wide, as is `totalCount`).
    pub async fn agents_page(
        &self,
        who: &Principal,
        args: PageArgs,
        status: Option<AgentStatus>,
    ) -> Result<Page<AgentRow>, LedgerError> {
        let first = validate::first(args.first)?;
        let after = args.after.as_deref().map(|c| cursor::decode_name(List::Agents, c)).transpose()?;
        let total = Total(reads::agents(&who.fleet, status, None, None).count());
        // roster() takes the cursor itself: the page is ordered and cut here.
        let mut query = reads::agents(&who.fleet, status, after, Some(first + 1));
        query.page_by_text("v.name", None, first + 1);
        let rows = self.scan(who, move |tx| Box::pin(async move { Ok(query.rows::<AgentRow>(tx).await?) })).await?;
        Ok(split(rows, first, total))
    }

    /// The work of each domain (`v_queue_depth`): every domain with units,
    /// finished ones too; an unknown domain has no row.
    pub async fn queue_depth(
        &self,
        who: &Principal,
        domain: Option<String>,
    ) -> Result<Vec<QueueDepthRow>, LedgerError> {
        validate::filter("domain", domain.as_deref())?;
        let fleet = who.fleet.clone();
        self.scan(who, move |tx| Box::pin(async move { Ok(reads::queue_depth(tx, &fleet, domain.as_deref()).await?) }))
            .await
    }

    pub async fn disposition_summary(
        &self,
        who: &Principal,
        domain: Option<String>,
    ) -> Result<Vec<DispositionRow>, LedgerError> {
        validate::filter("domain", domain.as_deref())?;
        let fleet = who.fleet.clone();
        self.scan(who, move |tx| {
            Box::pin(async move { Ok(reads::disposition_summary(tx, &fleet, domain.as_deref()).await?) })
        })
        .await
    }

    // --- Batched loads for the DataLoaders ---------------------------------

    pub async fn units_by_ids(&self, who: &Principal, ids: Vec<Uuid>) -> Result<Vec<UnitModel>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::units_by_ids(tx, &ids).await?) })).await
    }

    pub async fn attempts_by_ids(&self, who: &Principal, ids: Vec<Uuid>) -> Result<Vec<attempt::Model>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::attempts_by_ids(tx, &ids).await?) })).await
    }

    pub async fn attempts_of_units(
        &self,
        who: &Principal,
        units: Vec<Uuid>,
    ) -> Result<Vec<attempt::Model>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::attempts_of_units(tx, &units).await?) })).await
    }

    pub async fn questions_of_units(
        &self,
        who: &Principal,
        units: Vec<Uuid>,
    ) -> Result<Vec<question::Model>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::questions_of_units(tx, &units).await?) })).await
    }

    /// One page of events for each of `units` (`first + 1` fetched to know
    /// whether there is a next page), in one statement.
    pub async fn events_of_units(
        &self,
        who: &Principal,
        units: Vec<Uuid>,
        first: i32,
        after: Option<Cursor>,
        newest_first: bool,
    ) -> Result<(Vec<event::Model>, i64), LedgerError> {
        self.read(who, move |tx| {
            Box::pin(async move {
                let floor = events::watermark(tx).await?;
                Ok((reads::events_of_units(tx, &units, after, first + 1, newest_first).await?, floor))
            })
        })
        .await
    }

    /// Validates the arguments of `WorkUnit.events` before they reach a loader.
    pub fn unit_events_args(&self, args: &PageArgs, newest_first: bool) -> Result<(i32, Option<Cursor>), LedgerError> {
        page_args(List::events(newest_first), args)
    }

    pub async fn event_counts_of_units(
        &self,
        who: &Principal,
        units: Vec<Uuid>,
    ) -> Result<Vec<UnitCount>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::event_counts_of_units(tx, &units).await?) })).await
    }

    pub async fn disposals_of_units(&self, who: &Principal, units: Vec<Uuid>) -> Result<Vec<DisposalRow>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::disposals_of_units(tx, &units).await?) })).await
    }

    pub async fn attempt_ends(&self, who: &Principal, attempts: Vec<Uuid>) -> Result<Vec<AttemptEndRow>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(reads::attempt_ends(tx, &attempts).await?) })).await
    }
}
