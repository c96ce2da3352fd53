//! For engines: an at-least-once import, written once (feature `engine`).
//!
//! An engine says how to take messages from its broker and how to settle them ([`Inbound`]);
//! [`spawn`] does the rest, the same on every engine:
//!
//! - **Take**, at most `max_in_flight` messages held at a time: the broker is asked for no
//!   more than the room left (waiting for room for one, at least), so a slow bus holds the
//!   broker back instead of piling messages up in memory.
//! - **Hand over**, each message in the order taken: this link's own export is acknowledged
//!   and skipped (echo); a message delivered past what the broker allows, or that does not
//!   decode, is dead-lettered; one whose id this import handed over recently, in another
//!   broker message, is acknowledged and dropped (the dedup window); any other is published
//!   into the local topic with a delivery receipt, through the bus's backpressure.
//! - **Settle**, in the order handed over, once every local subscriber has handled the
//!   message, as [`Settlement`] says: acknowledged (the acks of consecutive handled messages
//!   go together, sent within [`ACK_DELAY`]), dead-lettered at once when a handler gave up on
//!   it, given back for a later delivery when a subscriber ended before handling it
//!   (dead-lettered at the last delivery the broker allows).
//! - **Stop** when the link stops its imports: what was taken and not handed over is given
//!   back at once; what is held is settled; then [`Inbound::finish`].
//!
//! Invariant: a message is acknowledged only after every local subscriber present at its
//! publish has handled it, or after the broker stored its dead letter, or when it needs no
//! handling (an echo, a duplicate). Anything else is given back, or left to the broker's own
//! redelivery: a message can be handled twice, never lost.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

use ringbus::{Bus, Context, Delivery, PublishError, Topic};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::engine::Settlement;
use crate::Codec;

/// What an import counts, in the engine's own `LinkStats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Messages handed to the local bus.
    Imported,
    /// Messages acknowledged after every local subscriber handled them.
    Acked,
    /// Messages given back for a later delivery.
    Nacked,
    /// Messages whose dead letter the broker stored.
    DeadLettered,
    /// This link's own exports, skipped.
    EchoSkipped,
    /// Messages that did not decode (or were too large, or for another topic).
    BadInput,
    /// Messages dropped as a second copy of one already handed over.
    Duplicates,
}

/// Whether a message given back is delivered again at once or after the engine's delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redeliver {
    /// At once, to any consumer: the import is stopping, or never handed it over.
    Now,
    /// After the engine's `nack_delay`: a subscriber ended before handling it, or the bus
    /// refused it.
    Later,
}

/// One engine's at-least-once import of one topic: how messages are taken from the broker,
/// read, and settled. [`spawn`] drives it.
///
/// Shared by the task that takes messages and the one that settles them, so every method
/// takes `&self`; what only the taking side changes (a cursor, a stream of pulls) is the
/// engine's [`Reader`](Self::Reader).
pub trait Inbound: Send + Sync + Sized + 'static {
    /// One message as the broker delivered it, with what settling it needs.
    type Message: Send + Sync + 'static;
    /// What tells two broker messages apart (a stream entry id, a stream sequence): a
    /// message whose id was handed over in another broker message is a duplicate; a
    /// redelivery of the same broker message is not.
    type Key: Clone + Eq + Hash + Send + Sync + 'static;
    /// The state of the taking side.
    type Reader: Send + 'static;

    /// The engine's name, which starts its log lines: `"ringbus-redis"`.
    const ENGINE: &'static str;

    /// What the import reads of its link.
    fn shared(&self) -> Shared<'_>;
    /// Counts `n` of `what` in the link's stats.
    fn count(&self, what: Count, n: u64);
    /// Messages handed over and not yet settled, at most.
    fn max_in_flight(&self) -> usize;
    /// Message ids remembered for the dedup window; 0 turns it off.
    fn dedup_window(&self) -> usize;

    /// Up to `room` messages (at least one room), waiting a bounded time for some; empty
    /// when none came. Never more than `room`: the import counts what it holds by it. Errors
    /// are the engine's to log, count and back off from. Cancel safe: [`spawn`] drops it when
    /// the link stops, and a message it took is then the broker's to deliver again.
    fn take<'a>(
        &'a self,
        reader: &'a mut Self::Reader,
        room: usize,
    ) -> impl Future<Output = Vec<Self::Message>> + Send + 'a;

    /// The exporting link's id, if the message names one.
    fn origin<'m>(&self, message: &'m Self::Message) -> Option<&'m str>;
    /// The message id, if it has one.
    fn message_id<'m>(&self, message: &'m Self::Message) -> Option<&'m str>;
    /// The broker's own identity of this message, if the dedup window may use it.
    fn key(&self, message: &Self::Message) -> Option<Self::Key>;
    /// The delivery this is: 1 for the first.
    fn deliveries(&self, message: &Self::Message) -> u64;
    /// Whether the broker delivers it no more after this delivery (a failure must then
    /// dead-letter it, not give it back).
    fn is_last(&self, message: &Self::Message) -> bool;
    /// Why the message must be dead-lettered unhandled, if it was delivered more times than
    /// allowed (its consumers died or stalled while handling it). `None` where the broker
    /// enforces that itself.
    fn delivered_too_often(&self, message: &Self::Message) -> Option<String> {
        let _ = message;
        None
    }
    /// The local topic the message names, for an import into [`Destination::Named`]: the broker
    /// delivers a pattern import's messages of every matching topic.
    fn topic_of<'m>(&self, message: &'m Self::Message) -> Option<&'m str> {
        let _ = message;
        None
    }
    /// The message decoded for the local topic, or why it cannot be (logged without the
    /// body, and the message dead-lettered).
    fn decode<T, C: Codec<T>>(&self, codec: &C, message: &Self::Message) -> Result<T, String>;
    /// The value of the header (or field) `name` of the message, if it has one and it is text.
    fn header<'m>(&self, message: &'m Self::Message, name: &str) -> Option<&'m str> {
        let _ = (message, name);
        None
    }
    /// The context to publish it with: its handler spans' parent is a `ringbus.import` span
    /// (`DEBUG`, target `ringbus_link`) that continues the trace the message carries in its
    /// headers (feature `otel`; see `ringbus_link::otel`); a plain context when nobody
    /// listens at `DEBUG`.
    fn context(&self, message: &Self::Message) -> Context {
        let span = tracing::debug_span!(
            target: "ringbus_link",
            "ringbus.import",
            topic = self.shared().topic,
            engine = Self::ENGINE,
            otel.kind = "consumer",
        );
        crate::otel::import_context(span, |name| self.header(message, name))
    }
    /// The message as the settler keeps it (an engine may free what settling does not need,
    /// here, on the task that made it).
    fn keep(&self, message: Self::Message) -> Self::Message {
        message
    }

    /// Acknowledges `messages` (each handled, or needing no handling). False (logged and
    /// counted by the engine) if the broker was not told: they will be delivered again.
    fn ack(&self, messages: &[Self::Message]) -> impl Future<Output = bool> + Send;
    /// Gives `message` back, to be delivered again as `when` says. False if it could not be.
    fn give_back(
        &self,
        message: &Self::Message,
        when: Redeliver,
    ) -> impl Future<Output = bool> + Send;
    /// Stores a copy of `message` with `reason` where the engine keeps dead letters, and
    /// settles it so it is not delivered again. False if the copy was not stored (the
    /// message is then left to be delivered again).
    fn dead_letter(
        &self,
        message: &Self::Message,
        reason: &str,
    ) -> impl Future<Output = bool> + Send;
    /// Runs once the import stopped and settled what it held (leaving a consumer group).
    fn finish(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// What an import reads of its link ([`Inbound::shared`]).
#[derive(Clone, Copy, Debug)]
pub struct Shared<'a> {
    /// The local topic's name.
    pub topic: &'a str,
    /// This link's id, which its own exports carry as their origin.
    pub link_id: &'a str,
    /// The messages of the whole link handed to its bus and not yet settled (for the close
    /// report).
    pub held: &'a AtomicU64,
    /// Cancelled when the link stops its imports.
    pub stop: &'a CancellationToken,
}

/// The most messages one [`Inbound::ack`] acknowledges.
pub const ACK_BATCH: usize = 256;

/// Where an import publishes what it takes.
pub enum Destination<T> {
    /// Its one topic.
    Topic(Topic<T>),
    /// A pattern import: the topic of this bus that each message names
    /// ([`Inbound::topic_of`]). A message whose topic carries another type is dead-lettered
    /// at once; it costs that message alone.
    Named(Bus),
}

impl<T: Send + Sync + 'static> fmt::Debug for Destination<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Topic(topic) => f.debug_tuple("Topic").field(&topic.name()).finish(),
            Destination::Named(_) => f.write_str("Named"),
        }
    }
}

/// The topics a [`Destination::Named`] import met, resolved once each.
struct Local<T> {
    into: Destination<T>,
    named: HashMap<Arc<str>, Topic<T>>,
}

impl<T: Send + Sync + 'static> Local<T> {
    /// The topic `message` goes to, or why it has none (it names no topic, or one of another
    /// type), for its dead letter.
    fn topic<I: Inbound>(
        &mut self,
        inbound: &I,
        message: &I::Message,
    ) -> Result<&Topic<T>, String> {
        let bus = match &self.into {
            Destination::Topic(topic) => return Ok(topic),
            Destination::Named(bus) => bus,
        };
        let Some(name) = inbound.topic_of(message) else {
            return Err("the message names no topic".into());
        };
        if !self.named.contains_key(name) {
            let topic = bus
                .topic::<T>(name)
                .map_err(|e| format!("the local topic {name:?} refused it: {e}"))?;
            self.named.insert(name.into(), topic);
        }
        Ok(&self.named[name])
    }
}

/// How the stream of a [`take_ready`] stands after it.
#[derive(Debug)]
pub enum Stands<E> {
    /// Open: it had nothing more ready, or the room was filled.
    Open,
    /// It ended.
    Ended,
    /// It failed with this error.
    Failed(E),
}

/// For an engine's [`Inbound::take`]: the next message of `messages`, and those it has ready
/// after it (polled once each, never waited for), up to `room`; and how the stream stands.
/// The messages come before an end or an error met after them.
pub async fn take_ready<S, M, E>(messages: &mut S, room: usize) -> (Vec<M>, Stands<E>)
where
    S: futures_util::Stream<Item = Result<M, E>> + Unpin,
{
    use futures_util::{FutureExt, StreamExt};
    let mut taken = Vec::new();
    let mut next = messages.next().await;
    loop {
        match next {
            Some(Ok(message)) => taken.push(message),
            Some(Err(e)) => return (taken, Stands::Failed(e)),
            None => return (taken, Stands::Ended),
        }
        if taken.len() >= room {
            return (taken, Stands::Open);
        }
        match messages.next().now_or_never() {
            Some(ready) => next = ready,
            None => return (taken, Stands::Open),
        }
    }
}

/// Spawns the import of `inbound` into `into`: it takes, hands over and settles until the
/// link stops its imports, then settles what it holds.
pub fn spawn<I, T, C>(
    inbound: I,
    reader: I::Reader,
    into: Destination<T>,
    codec: C,
) -> JoinHandle<()>
where
    I: Inbound,
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let local = Local {
        into,
        named: HashMap::new(),
    };
    tokio::spawn(run(Arc::new(inbound), reader, local, codec))
}

/// The import task: see the module's documentation.
///
/// The messages held (handed to the bus, not yet settled) are counted by `room`'s permits:
/// taken before the broker is asked for messages, given back at once for what it did not
/// give or what was settled at once, and by the settler for each message it settles.
async fn run<I, T, C>(inbound: Arc<I>, mut reader: I::Reader, mut local: Local<T>, codec: C)
where
    I: Inbound,
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let room = Arc::new(Semaphore::new(
        inbound
            .max_in_flight()
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize)),
    ));
    let (to_settle, held) = mpsc::unbounded_channel();
    // Aborted with this task if a cut close aborts it.
    let settler = AbortOnDropHandle::new(tokio::spawn(settle_in_order(
        inbound.clone(),
        held,
        room.clone(),
    )));
    let mut window = Window::new(inbound.dedup_window());
    let stop = inbound.shared().stop;
    'take: while !stop.is_cancelled() {
        // Room for one more held message before the broker is asked for more, and all the
        // room there is.
        let free = tokio::select! {
            biased;
            () = stop.cancelled() => break 'take,
            () = to_settle.closed() => break 'take,
            permit = room.acquire() => match permit {
                Ok(permit) => {
                    permit.forget();
                    1 + take_free(&room)
                }
                Err(_) => break 'take,
            },
        };
        let taken = tokio::select! {
            biased;
            () = stop.cancelled() => break 'take,
            taken = inbound.take(&mut reader, free) => taken,
        };
        debug_assert!(
            taken.len() <= free,
            "{}: took more than its room",
            I::ENGINE
        );
        let (held, go_on) = hand_over_take(
            &*inbound,
            &mut local,
            &codec,
            &mut window,
            taken,
            &to_settle,
        )
        .await;
        // The room of what was not taken, or was settled at once.
        room.add_permits(free.saturating_sub(held));
        if !go_on {
            break 'take;
        }
    }
    drop(to_settle);
    let _ = settler.await;
    inbound.finish().await;
}

/// Messages handed to the bus, in order, with their receipts: what the settler settles.
type Held<M> = Vec<(Delivery, M)>;

/// Hands the messages of one take to the bus in order, and what it holds to the settler: in
/// one piece, or in a piece before each hand-over that has to wait (for room in the bus, or
/// for the broker), so that nothing handled waits behind it. Returns how many it holds, and
/// false if the import stops (the link stops it, the bus closed, or the settler is gone:
/// what it did not settle is the broker's to deliver again).
async fn hand_over_take<I, T, C>(
    inbound: &I,
    local: &mut Local<T>,
    codec: &C,
    window: &mut Window<I::Key>,
    taken: Vec<I::Message>,
    to_settle: &mpsc::UnboundedSender<Held<I::Message>>,
) -> (usize, bool)
where
    I: Inbound,
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let send = |batch: &mut Held<I::Message>| {
        batch.is_empty() || to_settle.send(std::mem::take(batch)).is_ok()
    };
    let mut batch = Vec::with_capacity(taken.len());
    let mut held = 0;
    let mut taken = taken.into_iter();
    while let Some(message) = taken.next() {
        if inbound.shared().stop.is_cancelled() {
            // Stopping: what was taken and not handed over goes back at once.
            for rest in std::iter::once(message).chain(taken) {
                inbound.give_back(&rest, Redeliver::Now).await;
            }
            send(&mut batch);
            return (held, false);
        }
        let mut handing = std::pin::pin!(hand_over(inbound, local, codec, window, message));
        let handed = match poll_once(&mut handing).await {
            Some(handed) => handed,
            None if send(&mut batch) => handing.await,
            None => {
                // The settler is gone: the message being handed over is left to the
                // broker's redelivery, the rest goes back at once.
                for rest in taken {
                    inbound.give_back(&rest, Redeliver::Now).await;
                }
                return (held, false);
            }
        };
        match handed {
            HandedOver::Held(delivery, message) => {
                held += 1;
                batch.push((delivery, message));
            }
            HandedOver::Settled => {}
            HandedOver::BusClosed => {
                for rest in taken {
                    inbound.give_back(&rest, Redeliver::Now).await;
                }
                send(&mut batch);
                return (held, false);
            }
        }
    }
    (held, send(&mut batch))
}

/// Polls `future` once (with the task's waker): its output if it is ready, `None` if it waits.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match Pin::new(&mut *future).poll(cx) {
        Poll::Ready(out) => Poll::Ready(Some(out)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Takes every permit `room` has free, returning how many.
fn take_free(room: &Semaphore) -> usize {
    // Only the import takes permits: all those counted are there to take.
    let free = room.available_permits();
    match u32::try_from(free).map(|n| room.try_acquire_many(n)) {
        Ok(Ok(permits)) => {
            permits.forget();
            free
        }
        _ => 0,
    }
}

/// What became of one message taken from the broker.
enum HandedOver<M> {
    /// Published into the bus: the settler settles it once its receipt resolves.
    Held(Delivery, M),
    /// Settled at once (an echo, a duplicate, a dead letter, a refusal).
    Settled,
    /// The bus is closed: the message went back, and the import stops.
    BusClosed,
}

/// Decides what to do with one message, and hands it to the bus if it is to be handled.
async fn hand_over<I, T, C>(
    inbound: &I,
    local: &mut Local<T>,
    codec: &C,
    window: &mut Window<I::Key>,
    message: I::Message,
) -> HandedOver<I::Message>
where
    I: Inbound,
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    if inbound.origin(&message) == Some(inbound.shared().link_id) {
        // Our own export, back from the broker: not for us.
        inbound.count(Count::EchoSkipped, 1);
        inbound.ack(std::slice::from_ref(&message)).await;
        return HandedOver::Settled;
    }
    if let Some(reason) = inbound.delivered_too_often(&message) {
        dead_letter(inbound, &message, &reason).await;
        return HandedOver::Settled;
    }
    // A message that does not decode, or names no local topic of its type, is bad input.
    let routed = match inbound.decode(codec, &message) {
        Ok(msg) => local.topic(inbound, &message).map(|local| (msg, local)),
        Err(reason) => Err(reason),
    };
    let (msg, local) = match routed {
        Ok(routed) => routed,
        Err(reason) => {
            inbound.count(Count::BadInput, 1);
            tracing::warn!(topic = %inbound.shared().topic, reason = %reason, "{}: refused a message", I::ENGINE);
            dead_letter(inbound, &message, &reason).await;
            return HandedOver::Settled;
        }
    };
    // The id to remember once the bus takes the message: one the window does not hold yet.
    let mut new_id = None;
    let tracked = window
        .tracks()
        .then(|| {
            let id = inbound.message_id(&message)?;
            Some((window.hash(id), id, inbound.key(&message)?))
        })
        .flatten();
    if let Some((hash, id, key)) = tracked {
        match window.seen(hash, id, &key) {
            Seen::Duplicate => {
                inbound.count(Count::Duplicates, 1);
                tracing::debug!(topic = %inbound.shared().topic, id = %id, "{}: dropped a duplicate", I::ENGINE);
                inbound.ack(std::slice::from_ref(&message)).await;
                return HandedOver::Settled;
            }
            Seen::Again => {}
            Seen::New => new_id = Some((hash, id, key)),
        }
    }
    // Not cancelled by the close: a message taken from the broker is handed over.
    match local.publish_tracked(&inbound.context(&message), msg).await {
        Ok(delivery) => {
            inbound.count(Count::Imported, 1);
            if let Some((hash, id, key)) = new_id {
                window.remember(hash, id, key);
            }
            inbound.shared().held.fetch_add(1, Ordering::Relaxed);
            HandedOver::Held(delivery, inbound.keep(message))
        }
        Err(PublishError::Closed(_)) => {
            inbound.give_back(&message, Redeliver::Now).await;
            HandedOver::BusClosed
        }
        Err(e) => {
            tracing::warn!(topic = %inbound.shared().topic, error = %e, "{}: the local bus refused an import", I::ENGINE);
            redeliver(inbound, &message, &format!("the local bus refused it: {e}")).await;
            HandedOver::Settled
        }
    }
}

/// Settles held imports in the order they were handed to the bus, giving each one's room
/// back once it is settled. The messages handled without a failure are acknowledged together
/// ([`Acks`]): once a batch of them is due, once the first of them has waited [`ACK_DELAY`],
/// before any other settling, and when the import stops; never before every local subscriber
/// handled them.
async fn settle_in_order<I: Inbound>(
    inbound: Arc<I>,
    mut held: mpsc::UnboundedReceiver<Held<I::Message>>,
    room: Arc<Semaphore>,
) {
    let inbound = &*inbound;
    let mut acks = Acks::new(inbound.max_in_flight());
    loop {
        let batch = match held.try_recv() {
            Ok(batch) => batch,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => match acks.until(inbound, held.recv()).await {
                Some(batch) => batch,
                None => break,
            },
        };
        for (delivery, message) in batch {
            let outcome = match delivery.try_outcome() {
                Some(outcome) => outcome,
                None => acks.until(inbound, delivery.wait()).await,
            };
            settle(inbound, &mut acks, outcome, message).await;
            room.add_permits(1);
        }
    }
    acks.send(inbound).await;
}

/// Settles one held message as its receipt's `outcome` says.
async fn settle<I: Inbound>(
    inbound: &I,
    acks: &mut Acks<I::Message>,
    outcome: ringbus::Delivered,
    message: I::Message,
) {
    match Settlement::of(outcome.subscribers, outcome.failed, outcome.missed) {
        Settlement::Ack => acks.push(inbound, message).await,
        Settlement::DeadLetter(why) => {
            acks.send(inbound).await;
            let reason = format!("{why} on delivery {}", inbound.deliveries(&message));
            dead_letter(inbound, &message, &reason).await;
            inbound.shared().held.fetch_sub(1, Ordering::Relaxed);
        }
        Settlement::Redeliver(why) => {
            acks.send(inbound).await;
            redeliver(inbound, &message, &why).await;
            inbound.shared().held.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How long a handled message's acknowledgement may wait for others to go with it.
///
/// While messages keep coming the settler would otherwise acknowledge every few messages,
/// and each acknowledgement is a command the broker runs. A millisecond holds no message back
/// (it is handled), and it is far below every broker's redelivery timeout.
pub const ACK_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// The handled messages not yet acknowledged, sent together once a quarter of the import's
/// `max_in_flight` (at most [`ACK_BATCH`]) is due, or [`ACK_DELAY`] after the first became
/// due. A quarter, so that brokers that stop delivering at `max_in_flight` unacknowledged
/// messages (prefetch, max ack pending) never wait for an acknowledgement held back here.
struct Acks<M> {
    handled: Vec<M>,
    batch: usize,
    /// Armed for [`ACK_DELAY`] after the first of `handled`.
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<M> Acks<M> {
    fn new(max_in_flight: usize) -> Self {
        Self {
            handled: Vec::new(),
            batch: (max_in_flight / 4).clamp(1, ACK_BATCH),
            deadline: Box::pin(tokio::time::sleep(ACK_DELAY)),
        }
    }

    /// Adds a handled message, sending the batch if it is full.
    async fn push<I: Inbound<Message = M>>(&mut self, inbound: &I, message: M) {
        if self.handled.is_empty() {
            self.deadline
                .as_mut()
                .reset(tokio::time::Instant::now() + ACK_DELAY);
        }
        self.handled.push(message);
        if self.handled.len() >= self.batch {
            self.send(inbound).await;
        }
    }

    /// Ready once acknowledgements are due by time; never while none are held.
    async fn due(&mut self) {
        if self.handled.is_empty() {
            std::future::pending::<()>().await;
        }
        self.deadline.as_mut().await;
    }

    /// Waits for `wait`, sending the acknowledgements that fall due meanwhile.
    async fn until<I, F>(&mut self, inbound: &I, wait: F) -> F::Output
    where
        I: Inbound<Message = M>,
        F: Future,
    {
        let mut wait = std::pin::pin!(wait);
        loop {
            tokio::select! {
                biased;
                out = &mut wait => return out,
                () = self.due() => self.send(inbound).await,
            }
        }
    }

    /// Acknowledges every handled message held (each handled by every local subscriber).
    async fn send<I: Inbound<Message = M>>(&mut self, inbound: &I) {
        if self.handled.is_empty() {
            return;
        }
        let n = self.handled.len() as u64;
        if inbound.ack(&self.handled).await {
            inbound.count(Count::Acked, n);
        }
        inbound.shared().held.fetch_sub(n, Ordering::Relaxed);
        self.handled.clear();
    }
}

impl<M> fmt::Debug for Acks<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acks")
            .field("held", &self.handled.len())
            .field("batch", &self.batch)
            .finish()
    }
}

/// A message some subscriber did not handle (`why`): given back for a later delivery, or
/// dead-lettered if this was the last the broker allows.
async fn redeliver<I: Inbound>(inbound: &I, message: &I::Message, why: &str) {
    let deliveries = inbound.deliveries(message);
    if inbound.is_last(message) {
        let reason = format!("{why} on delivery {deliveries} (the last allowed)");
        dead_letter(inbound, message, &reason).await;
        return;
    }
    tracing::debug!(topic = %inbound.shared().topic, deliveries, reason = why, "{}: a message was not handled; delivering it again later", I::ENGINE);
    if inbound.give_back(message, Redeliver::Later).await {
        inbound.count(Count::Nacked, 1);
    }
}

/// Dead-letters `message`, counting it once the broker stored the copy.
async fn dead_letter<I: Inbound>(inbound: &I, message: &I::Message, reason: &str) {
    if inbound.dead_letter(message, reason).await {
        inbound.count(Count::DeadLettered, 1);
        tracing::warn!(topic = %inbound.shared().topic, id = ?inbound.message_id(message), reason, "{}: message dead-lettered", I::ENGINE);
    }
}

/// The message ids handed to the bus recently, each with the broker message that carried
/// it: a second broker message with one of them is a duplicate (a redelivery of the same
/// broker message is not).
///
/// One pass of the hash per message, and no allocation once the index has grown to twice the
/// capacity: the ids live in a ring of
/// `capacity` strings that are overwritten in place, oldest first, and `index` maps each id's
/// hash to its number (keyed by the hash itself: it is already random-keyed). Two ids of one
/// hash keep only the newer's number: the older is then forgotten early, so a collision can
/// let a duplicate through, never drop a message that is not one.
///
/// An id that leaves the ring keeps its entry in `index` until the next sweep, one pass over
/// the index every `capacity` ids remembered: remembering an id touches the index once, not
/// also at the place of the id it overwrites.
struct Window<K> {
    capacity: usize,
    /// The remembered ids; the `n`th remembered is at `n % capacity`.
    ring: Vec<Remembered<K>>,
    /// How many were ever remembered: the next one's number.
    next: u64,
    /// An id's hash to its number: those of the last `capacity` numbers are in `ring`, the
    /// older are forgotten (at most `capacity` of them, until the next sweep).
    index: HashMap<u64, u64, BuildHasherDefault<Prehashed>>,
    hasher: RandomState,
}

/// What the window knows of a message's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Not handed over recently: to be handed over, and remembered.
    New,
    /// Handed over in this same broker message: a redelivery, handled again.
    Again,
    /// Handed over in another broker message: dropped.
    Duplicate,
}

struct Remembered<K> {
    id: String,
    carrier: K,
}

/// The hasher of `Window::index`, whose keys are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, _: &[u8]) {
        unreachable!("`Window::index` hashes u64 keys only (`write_u64`)");
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl<K: Clone + Eq> Window<K> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ring: Vec::new(),
            next: 0,
            index: HashMap::default(),
            hasher: RandomState::new(),
        }
    }

    /// Whether it remembers anything (`dedup_window` above 0): off, nothing is hashed.
    fn tracks(&self) -> bool {
        self.capacity > 0
    }

    /// The hash the other methods take for `id`.
    fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// Where `id` (of hash `hash`) is remembered, if it is.
    fn find(&self, hash: u64, id: &str) -> Option<&Remembered<K>> {
        let n = *self.index.get(&hash)?;
        // An id that left the ring fails the comparison: a later id took its place (had it
        // been `id` again, `index` would hold that later number).
        let remembered = &self.ring[(n % self.capacity as u64) as usize];
        (remembered.id == id).then_some(remembered)
    }

    /// Whether `id` (of hash `hash`), carried by `carrier`, was handed over before.
    fn seen(&self, hash: u64, id: &str, carrier: &K) -> Seen {
        match self.find(hash, id) {
            None => Seen::New,
            Some(remembered) if remembered.carrier == *carrier => Seen::Again,
            Some(_) => Seen::Duplicate,
        }
    }

    /// Remembers `id`, which `seen` found [`Seen::New`].
    fn remember(&mut self, hash: u64, id: &str, carrier: K) {
        if self.capacity == 0 {
            return;
        }
        let n = self.next;
        self.next += 1;
        let at = (n % self.capacity as u64) as usize;
        if at == self.ring.len() {
            self.ring.push(Remembered {
                id: id.to_owned(),
                carrier,
            });
        } else {
            let oldest = &mut self.ring[at];
            oldest.id.clear();
            oldest.id.push_str(id);
            oldest.carrier = carrier;
        }
        self.index.insert(hash, n);
        if self.next % self.capacity as u64 == 0 {
            // The sweep: every number below `next - capacity` has left the ring.
            let first = self.next - self.capacity as u64;
            self.index.retain(|_, n| *n >= first);
        }
    }
}

impl<K> fmt::Debug for Window<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("capacity", &self.capacity)
            .field("remembered", &self.next.min(self.capacity as u64))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::{Seen, Window};

    #[test]
    fn the_window_drops_other_carriers_of_a_seen_id_and_forgets_the_oldest() {
        let mut w = Window::new(2);
        let [a, b, c] = ["a", "b", "c"].map(|id| w.hash(id));
        w.remember(a, "a", 1);
        assert!(
            w.seen(a, "a", &1) == Seen::Again,
            "a redelivery of one broker message is not a duplicate"
        );
        assert!(w.seen(a, "a", &2) == Seen::Duplicate);
        w.remember(b, "b", 3);
        w.remember(c, "c", 4);
        assert!(
            w.seen(a, "a", &5) == Seen::New,
            "forgotten past the capacity"
        );
        assert!(w.seen(b, "b", &6) == Seen::Duplicate);
        assert!(w.seen(c, "c", &6) == Seen::Duplicate);
        let mut off = Window::new(0);
        assert!(!off.tracks());
        off.remember(a, "a", 1);
        assert!(off.seen(a, "a", &2) == Seen::New);
    }

    /// Against a model (the last `capacity` distinct ids, each with the carrier it was
    /// remembered with), over a long pseudo-random run of a few ids: with the real hash the
    /// window says what the model says. With hashes that collide (three values for all ids)
    /// it may forget an id early, so a duplicate can pass; but it calls a message a duplicate
    /// only if its id was handed over before in another carrier.
    #[test]
    fn the_window_agrees_with_a_model_and_collisions_only_forget() {
        for colliding in [false, true] {
            for capacity in [1, 2, 3, 7] {
                let mut w = Window::new(capacity);
                let mut model: VecDeque<(String, u32)> = VecDeque::new();
                let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ capacity as u64;
                let mut handed = std::collections::HashSet::new();
                let mut forgot = 0;
                for _ in 0..20_000 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let id = format!("id-{}", seed % 11);
                    let carrier = (seed >> 8) as u32 % 3;
                    let hash = if colliding {
                        seed % 11 % 3
                    } else {
                        w.hash(&id)
                    };
                    let expected = model
                        .iter()
                        .any(|(seen, first)| *seen == id && *first != carrier);
                    let seen = w.seen(hash, &id, &carrier);
                    let said = seen == Seen::Duplicate;
                    if colliding {
                        let other =
                            (0..3).any(|c| c != carrier && handed.contains(&(id.clone(), c)));
                        assert!(
                            !said || other,
                            "{id}: dropped, never handed over in another carrier"
                        );
                        forgot += usize::from(expected && !said);
                    } else {
                        assert_eq!(said, expected, "{id}, capacity {capacity}");
                    }
                    if seen == Seen::New {
                        w.remember(hash, &id, carrier);
                        assert!(w.index.len() <= 2 * capacity, "forgotten ids are swept");
                        handed.insert((id.clone(), carrier));
                        if !model.iter().any(|(seen, _)| *seen == id) {
                            model.push_back((id, carrier));
                            if model.len() > capacity {
                                model.pop_front();
                            }
                        }
                    }
                }
                if colliding && capacity > 1 {
                    // Collisions did make it forget, so the run above took that path.
                    assert!(
                        forgot > 0,
                        "capacity {capacity}: no collision forgot anything"
                    );
                }
            }
        }
    }
}

/// The import against an in-memory broker: what it takes, holds and settles.
#[cfg(test)]
mod runs {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};

    use ringbus::Bus;
    use tokio::sync::{Notify, Semaphore};
    use tokio_util::sync::CancellationToken;

    use super::{Destination, Inbound, Redeliver, Shared};
    use crate::{Codec, Json, Meta};

    /// Numbered messages ready to be taken; what the import does with them, recorded.
    struct Broker {
        ready: Mutex<VecDeque<u64>>,
        log: Mutex<Log>,
        max_in_flight: usize,
        held: AtomicU64,
        stop: CancellationToken,
        /// Notified at each acknowledgement.
        acked: Notify,
        /// The settler's first acknowledgement panics (an engine's bug).
        ack_panics: bool,
    }

    #[derive(Default)]
    struct Log {
        /// Calls of `take`, and the messages they took.
        takes: usize,
        taken: usize,
        /// Calls of `ack`, and the messages acknowledged.
        acks: usize,
        acked: Vec<u64>,
        given_back: Vec<u64>,
        /// The most messages the import held, in the broker's view (taken and not settled),
        /// counting the room of each take as held.
        most: usize,
    }

    impl Broker {
        fn new(messages: u64, max_in_flight: usize) -> Self {
            Self {
                ready: Mutex::new((0..messages).collect()),
                log: Mutex::default(),
                max_in_flight,
                held: AtomicU64::new(0),
                stop: CancellationToken::new(),
                acked: Notify::new(),
                ack_panics: false,
            }
        }

        fn log(&self) -> std::sync::MutexGuard<'_, Log> {
            self.log.lock().unwrap()
        }
    }

    impl Inbound for Broker {
        type Message = u64;
        type Key = u64;
        type Reader = ();

        const ENGINE: &'static str = "test";

        fn shared(&self) -> Shared<'_> {
            Shared {
                topic: "t",
                link_id: "link",
                held: &self.held,
                stop: &self.stop,
            }
        }
        fn count(&self, _: super::Count, _: u64) {}
        fn max_in_flight(&self) -> usize {
            self.max_in_flight
        }
        fn dedup_window(&self) -> usize {
            0
        }

        async fn take(&self, (): &mut (), room: usize) -> Vec<u64> {
            self.log().takes += 1;
            let taken: Vec<u64> = {
                let mut ready = self.ready.lock().unwrap();
                let n = room.min(ready.len());
                ready.drain(..n).collect()
            };
            if taken.is_empty() {
                // Nothing more will come: wait for the stop.
                std::future::pending::<()>().await;
            }
            let mut log = self.log();
            let held = log.taken - log.acked.len();
            log.most = log.most.max(held + room);
            log.taken += taken.len();
            taken
        }

        fn origin<'m>(&self, _: &'m u64) -> Option<&'m str> {
            None
        }
        fn message_id<'m>(&self, _: &'m u64) -> Option<&'m str> {
            None
        }
        fn key(&self, n: &u64) -> Option<u64> {
            Some(*n)
        }
        fn deliveries(&self, _: &u64) -> u64 {
            1
        }
        fn is_last(&self, _: &u64) -> bool {
            false
        }
        fn decode<T, C: Codec<T>>(&self, codec: &C, n: &u64) -> Result<T, String> {
            codec
                .decode(n.to_string().as_bytes(), Meta::default())
                .map_err(|e| e.to_string())
        }

        async fn ack(&self, messages: &[u64]) -> bool {
            self.log().acks += 1;
            assert!(!self.ack_panics, "the acknowledgement panics");
            self.log().acked.extend_from_slice(messages);
            self.acked.notify_one();
            true
        }
        async fn give_back(&self, n: &u64, _: Redeliver) -> bool {
            self.log().given_back.push(*n);
            true
        }
        async fn dead_letter(&self, _: &u64, _: &str) -> bool {
            unreachable!("every message is handled")
        }
    }

    /// The import of `broker`'s messages into the topic `t` of `bus`, running.
    fn import_into(bus: &Bus, broker: &Arc<Broker>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(super::run(
            broker.clone(),
            (),
            super::Local {
                into: Destination::Topic(bus.topic::<u64>("t").unwrap()),
                named: Default::default(),
            },
            Json,
        ))
    }

    /// With handlers that hold each message until the test lets it go, the import never
    /// holds more than `max_in_flight` messages (counting the room it asks the broker for),
    /// fills that room, and acknowledges each message once it is handled, in order, also
    /// while later messages of its take wait for room in the bus (a ring of one).
    #[tokio::test]
    async fn the_import_holds_at_most_max_in_flight_and_settles_each_once_handled() {
        const MAX: usize = 4;
        for capacity in [1, 64] {
            let bus = Bus::builder().capacity(capacity).build();
            let gate = Arc::new(Semaphore::new(0));
            let release = gate.clone();
            let _sub = bus
                .subscribe("t", move |_: &u64| {
                    let gate = gate.clone();
                    async move { gate.acquire().await.map(|p| p.forget()) }
                })
                .unwrap();
            let broker = Arc::new(Broker::new(20, MAX));
            let import = import_into(&bus, &broker);
            // One message at a time: each let go once the import has had every chance to
            // take more (the runtime has one thread, and this task waits for the ack).
            for n in 0..20 {
                let acked = broker.acked.notified();
                release.add_permits(1);
                tokio::time::timeout(std::time::Duration::from_secs(20), acked)
                    .await
                    .unwrap_or_else(|_| {
                        panic!("ring of {capacity}: message {n} handled, never acknowledged")
                    });
                assert_eq!(
                    broker.log().acked.len(),
                    n + 1,
                    "ring of {capacity}: acknowledged before its handler let it go"
                );
            }
            broker.stop.cancel();
            tokio::time::timeout(std::time::Duration::from_secs(20), import)
                .await
                .expect("the import did not stop")
                .unwrap();
            let log = broker.log();
            assert_eq!(log.acked, (0..20).collect::<Vec<_>>());
            assert!(log.given_back.is_empty(), "every message is handled");
            assert_eq!(
                log.most, MAX,
                "ring of {capacity}: held more than max_in_flight, or never filled it"
            );
        }
    }

    /// When the settler is gone (a panic in an engine's acknowledgement), the import hands
    /// nothing more to the bus and takes nothing more: of its take, the messages before the
    /// one whose hand-over found the settler gone were handed over, that one is left to the
    /// broker's redelivery, the rest go back at once; and the import ends.
    #[tokio::test]
    async fn with_the_settler_gone_the_import_gives_back_the_rest_and_ends() {
        const MESSAGES: u64 = 8;
        // A ring of one: each hand-over after the first waits for the handler.
        let bus = Bus::builder().capacity(1).build();
        let gate = Arc::new(Semaphore::new(0));
        let release = gate.clone();
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let _sub = bus
            .subscribe("t", move |n: &u64| {
                let (gate, seen) = (gate.clone(), seen_tx.clone());
                let n = *n;
                async move {
                    let _ = seen.send(n);
                    gate.acquire().await.map(|p| p.forget())
                }
            })
            .unwrap();
        let broker = Arc::new(Broker {
            ack_panics: true,
            ..Broker::new(MESSAGES, MESSAGES as usize)
        });
        let import = import_into(&bus, &broker);
        // Message 0 in its handler; letting it go lets the settler acknowledge it, and panic.
        // Whichever of the import and the settler runs first, two more releases are all the
        // import can use before it finds the settler gone.
        assert_eq!(seen.recv().await, Some(0));
        release.add_permits(3);
        tokio::time::timeout(std::time::Duration::from_secs(20), import)
            .await
            .expect("the import did not stop")
            .expect("the import itself panicked");
        release.add_permits(MESSAGES as usize);
        bus.close().await;
        let mut handed = vec![0];
        while let Ok(n) = seen.try_recv() {
            handed.push(n);
        }
        let log = broker.log();
        assert_eq!(log.takes, 1, "took again after the settler was gone");
        assert_eq!(log.taken, MESSAGES as usize);
        assert_eq!(
            log.acks, 1,
            "the settler went on after its acknowledgement panicked"
        );
        let k = handed.len() as u64;
        assert_eq!(handed, (0..k).collect::<Vec<_>>());
        assert!(k >= 2, "handed over {handed:?}");
        assert_eq!(
            log.given_back,
            (k + 1..MESSAGES).collect::<Vec<_>>(),
            "handed over {handed:?}: the rest, but the one left to redelivery, goes back"
        );
    }
}
