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
    /// Messages published for it and not yet handled.
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
}

/// What [`Bus::close_with`](crate::Bus::close_with) left unhandled when its context ended
/// before the drain finished.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CloseReport {
    /// True when every accepted message was handled and every task finished.
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
    /// included).
    pub messages: u64,
    /// True if it could not be stopped: its handler was running and had not yielded (tokio
    /// aborts a task only between two polls). It takes no further message and ends when that
    /// handler call returns.
    pub running: bool,
}
