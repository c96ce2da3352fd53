//! [`Topic`], the public handle to one topic: publishing through it skips the lookup by
//! name. Subscribing through it is in `subscriber`, the layer that runs subscribers.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::{AnyTopic, TopicInner};
use crate::context::Context;
use crate::delivery::Delivery;
use crate::error::{PublishError, Unpublished};

/// A resolved, typed handle to one topic: publishing through it skips the lookup by name.
///
/// Made by [`Bus::topic`](crate::Bus::topic); cheap to clone.
pub struct Topic<T> {
    pub(crate) inner: Arc<TopicInner<T>>,
}

impl<T> Clone for Topic<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T> fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.inner, f)
    }
}

impl<T: Send + Sync + 'static> Topic<T> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Messages published so far.
    pub fn published(&self) -> u64 {
        AnyTopic::published(&*self.inner)
    }

    /// As [`Bus::publish`](crate::Bus::publish), without the lookup.
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::publish`](crate::Bus::publish).
    pub fn publish(&self, msg: T) -> impl Future<Output = Result<(), PublishError<T>>> + Send + '_ {
        self.inner.publish_with(&crate::context::NEVER, msg)
    }

    /// As [`Bus::publish_with`](crate::Bus::publish_with), without the lookup.
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::publish`](crate::Bus::publish).
    pub fn publish_with<'a>(
        &'a self,
        ctx: &'a Context,
        msg: T,
    ) -> impl Future<Output = Result<(), PublishError<T>>> + Send + 'a {
        self.inner.publish_with(ctx, msg)
    }

    /// As [`Bus::try_publish`](crate::Bus::try_publish) (`Full` only when the slowest
    /// subscriber's queue is full), without the lookup.
    pub fn try_publish(&self, msg: T) -> Result<(), PublishError<T>> {
        self.inner.try_publish(msg)
    }

    /// As [`publish_with`](Self::publish_with), and returns a [`Delivery`]: a receipt whose
    /// [`wait`](Delivery::wait) resolves once every subscriber present at the publish has
    /// handled the message, with how many handlers failed on it.
    ///
    /// This is how a bridge acknowledges a message upstream only once it was handled here.
    /// While receipts are outstanding, the bus's subscribers notify them after each message;
    /// otherwise tracking costs nothing. Unlike `publish`, it allocates (the receipt and the
    /// list of subscribers it waits for).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let _ok = bus.subscribe("jobs", |_: &u32| async {})?;
    /// let _picky = bus.subscribe("jobs", |job: &u32| {
    ///     let job = *job;
    ///     async move { if job == 7 { Err("seven") } else { Ok(()) } }
    /// })?;
    /// let jobs = bus.topic::<u32>("jobs")?;
    /// let seven = jobs.publish_tracked(&ringbus::Context::new(), 7).await?.wait().await;
    /// assert_eq!((seven.handled, seven.failed), (2, 1));
    /// assert!(!seven.is_ok());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::publish`](crate::Bus::publish): dropped before it completes, the message was
    /// not published (an unbuffered topic excepted, as documented there) and no receipt is left
    /// behind.
    pub async fn publish_tracked(
        &self,
        ctx: &Context,
        msg: T,
    ) -> Result<Delivery, PublishError<T>> {
        self.inner.publish_tracked(ctx, msg).await
    }

    /// As [`Bus::publish_batch`](crate::Bus::publish_batch), without the lookup, bounded by `ctx`.
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::publish_batch`](crate::Bus::publish_batch).
    pub async fn publish_batch<I: IntoIterator<Item = T>>(
        &self,
        ctx: &Context,
        msgs: I,
    ) -> Result<u64, PublishError<Unpublished<I::IntoIter>>> {
        self.inner.publish_batch(ctx, msgs).await
    }
}
