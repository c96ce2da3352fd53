//! The bus's share of tokio's cooperative budget (guarantee 11).
//!
//! tokio gives each task a budget of operations per poll (128); its own channels spend one
//! unit per send or receive that makes progress and, once the budget is spent, return
//! `Pending` (having woken the task) instead of going on, so a task that always finds room or
//! data still lets the other tasks of its worker run. The ring (`ringbus-core`) stays
//! runtime-agnostic; the budget is spent here, in the bus, with `tokio::task::coop`:
//!
//! - **A publish** spends one unit before it takes the topic's writer ([`proceed`]), so a
//!   publisher that yields holds no lock (see `lock`: a holder never suspends except while it
//!   waits for room). The unit is spent at once rather than restored if the publish then
//!   waits: a [`RestoreOnPending`](tokio::task::coop::RestoreOnPending) cannot be held across
//!   an await (it restores the budget as it was when taken, whenever it is dropped), and a
//!   publish that waits may still never return `Pending` (the ring spins before it parks).
//! - **A subscriber** spends one unit per [`PER_UNIT`] messages it receives, whether it
//!   takes them one handler call at a time or in one call: the first unit of a turn is taken
//!   before it looks and given back when it finds none (it then parks, which is a yield).
//! - **A batch** (published or received) spends one unit per [`PER_UNIT`] messages, rounded
//!   up, taken as the messages go: with tokio's 128 units, at most 1,024 messages pass
//!   between two yields, whatever the mix of single and batch operations.
//!
//! Off a tokio runtime (a plain thread publishing through `ring::block_on`), the budget is
//! unconstrained and none of this ever yields.

use std::future::poll_fn;
use std::task::{Context, Poll};

use tokio::task::coop;

/// Messages of a batch that one unit of budget pays for: 128 units × 8 = 1,024 messages.
pub(crate) const PER_UNIT: usize = 8;

/// Spends one unit of the task's budget: `Pending` (the task woken, to yield) if it is spent.
#[inline]
pub(crate) fn spend(cx: &mut Context<'_>) -> Poll<()> {
    coop::poll_proceed(cx).map(|restore| restore.made_progress())
}

/// Spends one unit of the task's budget; if it is spent, yields first.
#[inline]
pub(crate) async fn proceed() {
    poll_fn(spend).await
}

/// Spends units for up to `n` messages, stopping at the first one refused (the task has
/// then been woken, to yield as soon as it can). Returns how many messages the units spent
/// pay for, at most `n` (0 when the budget was already spent).
#[inline]
pub(crate) fn pay_for(cx: &mut Context<'_>, n: usize) -> usize {
    let mut paid = 0;
    while paid < n {
        match coop::poll_proceed(cx) {
            Poll::Ready(restore) => {
                restore.made_progress();
                paid += PER_UNIT;
            }
            Poll::Pending => break,
        }
    }
    paid.min(n)
}

/// An iterator that spends a unit of budget for every [`PER_UNIT`] items it takes from
/// `inner`, and ends early, leaving the rest in `inner`, when a unit is refused.
///
/// `credit` is how many items units already spent pay for; it carries over between chunks of
/// one batch. A unit is spent before the item it pays for is taken, so nothing is taken that
/// cannot be paid for; when `inner` runs dry just after a unit, that unit pays for nothing
/// (at most one per batch).
pub(crate) struct Budgeted<'a, 'c, I> {
    pub(crate) inner: &'a mut I,
    pub(crate) cx: &'a mut Context<'c>,
    pub(crate) credit: &'a mut usize,
    /// Set once a unit was refused: the caller must yield before it goes on.
    pub(crate) spent: bool,
}

impl<'a, 'c, I> Budgeted<'a, 'c, I> {
    /// Takes from `inner`, paying as it goes, with `credit` carried over (see the type's docs).
    pub(crate) fn new(inner: &'a mut I, cx: &'a mut Context<'c>, credit: &'a mut usize) -> Self {
        Self {
            inner,
            cx,
            credit,
            spent: false,
        }
    }
}

impl<I: Iterator> Iterator for Budgeted<'_, '_, I> {
    type Item = I::Item;

    #[inline]
    fn next(&mut self) -> Option<I::Item> {
        if *self.credit == 0 {
            if pay_for(self.cx, 1) == 0 {
                self.spent = true;
                return None;
            }
            *self.credit = PER_UNIT;
        }
        let item = self.inner.next()?;
        *self.credit -= 1;
        Some(item)
    }
}
