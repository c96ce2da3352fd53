//! What the benches of the link engines with one mode (`redis.rs`, `rabbitmq.rs`) share beside
//! `links.rs`: their options, their cells (a payload size and a number of messages per round)
//! and the wait for a link's import to handle and acknowledge every message. Included by both as
//! `#[path = "common/one_mode.rs"] mod one_mode;` (not a bench target of its own; `nats.rs`,
//! with two modes and a core mode that acknowledges nothing, has its own).

use std::time::Instant;

use crate::links::{self, poll_until, Tally};

/// The options of a run: `quick`, `diag`, `rounds=N`, `messages=N`, `systems=a,b`.
pub(crate) struct Options {
    pub(crate) quick: bool,
    pub(crate) diag: bool,
    pub(crate) rounds: usize,
    /// Per round and cell.
    pub(crate) messages: u64,
    /// Run only these systems (for profiling one of them); nothing is written.
    pub(crate) systems: Option<Vec<String>>,
}

impl Options {
    /// The options given: a full run is 9 rounds of 20,000 messages, a quick one 3 of 5,000.
    pub(crate) fn parse() -> Self {
        let args = links::Args::parse();
        let quick = args.flag("quick");
        Self {
            quick,
            diag: args.flag("diag"),
            rounds: args.num("rounds", if quick { 3 } else { 9 }) as usize,
            messages: args.num("messages", if quick { 5_000 } else { 20_000 }),
            systems: args.systems(),
        }
    }

    /// Whether the run is not one to publish (quick, diag, or some systems only).
    pub(crate) fn partial(&self) -> bool {
        self.quick || self.diag || self.systems.is_some()
    }
}

/// A cell: the engine's one mode, a payload size and the messages of each round.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cell {
    pub(crate) mode: &'static str,
    pub(crate) size: usize,
    pub(crate) messages: u64,
}

impl links::Cell for Cell {
    fn mode(&self) -> &'static str {
        self.mode
    }

    fn size(&self) -> usize {
        self.size
    }

    fn messages(&self) -> u64 {
        self.messages
    }
}

/// The cells of a run in `mode`: payloads of 64 B and 512 B, `messages` a round each.
pub(crate) fn cells(mode: &'static str, messages: u64) -> Vec<Cell> {
    [64, 512]
        .into_iter()
        .map(|size| Cell {
            mode,
            size,
            messages,
        })
        .collect()
}

/// When a link's import handled the last of `expected` messages (counted by `tally`) and
/// acknowledged every one (`acked`, from its stats), or why not: `lost` said messages were
/// lost or refused, or the round timed out.
pub(crate) async fn imported(
    tally: &Tally,
    expected: u64,
    lost: impl Fn() -> Option<String>,
    acked: impl Fn() -> u64,
) -> Result<Instant, String> {
    let handled = tally.wait(lost).await?;
    poll_until(handled, "the import did not ack every message", || {
        acked() >= expected
    })
    .await
}
