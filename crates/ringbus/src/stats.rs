//! Snapshots of the bus's counters, from [`Bus::stats`](crate::Bus::stats).

/// Counters of the whole bus.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusStats {
    /// Every topic, sorted by name.
    pub topics: Vec<TopicStats>,
    /// True once `close` has begun.
    pub closed: bool,
}

/// Counters of one topic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicStats {
    /// The topic.
    pub name: String,
    /// The message type it carries.
    pub message_type: &'static str,
    /// Its capacity (0 for an unbuffered topic).
    pub capacity: usize,
    /// Messages published so far.
    pub published: u64,
    /// Of those, the messages published while the topic had no subscriber: they reached
    /// nobody. A topic name misspelled by a publisher shows up here. (With
    /// [`BusBuilder::strict`](crate::BusBuilder::strict) such a publish is refused instead and
    /// not counted.)
    pub unrouted: u64,
    /// Its subscribers in subscription order: the running ones, and those that finished since
    /// the last subscribe to this topic.
    pub subscribers: Vec<SubscriberStats>,
}

/// Counters of one subscriber.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriberStats {
    /// Its id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Messages handled (whatever the handler returned).
    pub handled: u64,
    /// Messages published for it and not yet handled. For a subscriber that is leaving
    /// ([`Subscription::unsubscribe`](crate::Subscription::unsubscribe)), only those
    /// published before the call: nothing that lands after it is for this subscriber.
    pub lag: u64,
    /// Handler calls that returned `Err`.
    pub errors: u64,
    /// Handler calls that panicked.
    pub panics: u64,
    /// Detached after a stall.
    pub detached: bool,
    /// Its task may still run its handler: it has not ended, and was not stopped by a
    /// bounded close.
    pub running: bool,
    /// Its task panicked outside a handler call (in a tracing layer or a metrics recorder,
    /// say: a handler's own panic is caught and counted in `panics`) and ended. What it had
    /// not handled is lost to it: logged at `error`, and listed by
    /// [`Bus::close_with`](crate::Bus::close_with)'s report.
    pub crashed: bool,
    /// Handler calls made again on a message after a failed one (a
    /// [`RetryPolicy`](crate::RetryPolicy)); each failed call, retried or not, also counts in
    /// `errors` or `panics`.
    pub retries: u64,
    /// Messages given up on and published to the subscriber's dead-letter topic
    /// ([`SubscribeOptions::dead_letter`](crate::SubscribeOptions::dead_letter)).
    pub dead_lettered: u64,
    /// Dead letters that could not be published (each logged at `error`).
    pub dead_letter_failures: u64,
    /// Replies of a [replier](crate::Bus::reply) that reached no requester because it had
    /// stopped waiting (its [`Context`](crate::Context) ended, or its future was dropped):
    /// dropped, never handed to another request.
    pub late_replies: u64,
    /// Replies of a replier that reached no requester because another replier of the topic
    /// had answered the request first (the first answer wins).
    pub duplicate_replies: u64,
}

/// What [`Bus::close_with`](crate::Bus::close_with) left unhandled when its context ended
/// before the drain finished.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CloseReport {
    /// True when every accepted message was handled and every task finished (or, stopped by
    /// the close, had nothing left to handle).
    pub complete: bool,
    /// The subscribers that had messages left unhandled: stopped (they run no handler
    /// again), or, where [`Unhandled::running`], still in a handler call that had not
    /// yielded (it takes no further message and ends when that call returns).
    pub unfinished: Vec<Unhandled>,
}

/// One subscriber left unfinished by a bounded close.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unhandled {
    /// The topic.
    pub topic: String,
    /// The subscriber's name.
    pub subscriber: String,
    /// Messages it had not handled when the report was made (a running handler's message
    /// included). For a subscriber that was leaving
    /// ([`Subscription::unsubscribe`](crate::Subscription::unsubscribe)), only those
    /// published before that call: what landed after was not for it.
    pub messages: u64,
    /// True if it could not be stopped: its handler was running and had not yielded (tokio
    /// aborts a task only between two polls). It takes no further message and ends when that
    /// handler call returns.
    pub running: bool,
}

/// A table of the topics, one line each (`unrouted`: the publishes that reached nobody; the
/// slowest subscriber's lag; errors, panics and detached subscribers summed over the topic's
/// subscribers), then `closed` once `close` has begun. For logs and a status page; the fields
/// are the stable interface.
///
/// A cell longer than 64 characters (a long topic name or type) is cut to 64, its middle
/// elided with `…`, so that every line stays readable; the fields keep the whole text.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let bus = ringbus::Bus::new();
/// let _sub = bus.subscribe("orders", async |_: &u64| {}).unwrap();
/// bus.publish("orders", 7u64).await.unwrap();
/// bus.publish("order", 8u64).await.unwrap(); // a typo: no subscriber
/// bus.close().await;
/// assert_eq!(
///     bus.stats().to_string(),
///     "topic   type  subscribers  published  unrouted  lag  errors  panics  detached\n\
///      order   u64             0          1         1    0       0       0         0\n\
///      orders  u64             1          1         0    0       0       0         0\n\
///      closed\n"
/// );
/// # }
/// ```
impl std::fmt::Display for BusStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const HEAD: [&str; COLUMNS] = [
            "topic",
            "type",
            "subscribers",
            "published",
            "unrouted",
            "lag",
            "errors",
            "panics",
            "detached",
        ];
        if self.topics.is_empty() {
            f.write_str("no topics\n")?;
        } else {
            let rows: Vec<[String; COLUMNS]> = self.topics.iter().map(TopicStats::row).collect();
            // In characters, as the padding counts them; at most `MAX_CELL` (`row` elides),
            // so never past what a format width can be (`u16::MAX`).
            let mut widths = HEAD.map(str::len);
            for row in &rows {
                for (width, cell) in widths.iter_mut().zip(row) {
                    *width = (*width).max(cell.chars().count());
                }
            }
            let head = HEAD.map(str::to_owned);
            for row in std::iter::once(&head).chain(&rows) {
                for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
                    match column {
                        0 => write!(f, "{cell:<width$}")?,
                        // The type is left-aligned; the counters right-aligned under their heads.
                        1 => write!(f, "  {cell:<width$}")?,
                        _ => write!(f, "  {cell:>width$}")?,
                    }
                }
                f.write_str("\n")?;
            }
        }
        if self.closed {
            f.write_str("closed\n")?;
        }
        Ok(())
    }
}

/// The columns of [`BusStats`]'s table.
const COLUMNS: usize = 9;

/// The most characters a cell of [`BusStats`]'s table shows: enough for any topic name a
/// person reads whole, and few enough that the table stays a table.
const MAX_CELL: usize = 64;

/// `cell`, or, if it is longer than [`MAX_CELL`] characters, its first and last characters
/// around `…`, [`MAX_CELL`] in all.
fn elide(cell: &str) -> String {
    let len = cell.chars().count();
    if len <= MAX_CELL {
        return cell.to_owned();
    }
    let head = (MAX_CELL - 1) / 2;
    let tail = MAX_CELL - 1 - head;
    let mut elided: String = cell.chars().take(head).collect();
    elided.push('…');
    elided.extend(cell.chars().skip(len - tail));
    elided
}

impl TopicStats {
    /// This topic's line in [`BusStats`]'s table.
    fn row(&self) -> [String; COLUMNS] {
        let subs = &self.subscribers;
        let sum = |count: fn(&SubscriberStats) -> u64| subs.iter().map(count).sum::<u64>();
        [
            elide(&self.name),
            elide(self.message_type),
            subs.len().to_string(),
            self.published.to_string(),
            self.unrouted.to_string(),
            subs.iter().map(|s| s.lag).max().unwrap_or(0).to_string(),
            sum(|s| s.errors).to_string(),
            sum(|s| s.panics).to_string(),
            sum(|s| u64::from(s.detached)).to_string(),
        ]
    }
}

/// `drained`, or the subscribers left unfinished, one line each.
///
/// ```
/// let report = ringbus::CloseReport::default();
/// assert_eq!(report.to_string(), "not drained: no subscriber listed\n");
/// ```
impl std::fmt::Display for CloseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.complete {
            return f.write_str("drained: every accepted message was handled\n");
        }
        if self.unfinished.is_empty() {
            return f.write_str("not drained: no subscriber listed\n");
        }
        let n = self.unfinished.len();
        let plural = if n == 1 { "" } else { "s" };
        writeln!(f, "not drained: {n} subscriber{plural} unfinished")?;
        for u in &self.unfinished {
            let state = if u.running {
                "still in a handler call"
            } else {
                "stopped"
            };
            writeln!(
                f,
                "  {} / {}: {} unhandled, {state}",
                u.topic, u.subscriber, u.messages
            )?;
        }
        Ok(())
    }
}
