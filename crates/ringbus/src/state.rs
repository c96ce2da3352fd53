//! Shared state for handlers: registered once on the bus builder, handed to every
//! `#[subscriber]` that takes a `State<S>` parameter.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A shared value registered with [`BusBuilder::state`](crate::BusBuilder::state), handed to
/// handlers that ask for it (an `Arc` inside: cloning is cheap).
///
/// ```
/// use ringbus::{Bus, State};
///
/// struct Db { url: String }
///
/// let bus = Bus::builder().state(Db { url: "postgres://localhost".into() }).build();
/// let db: State<Db> = bus.state::<Db>().expect("registered above");
/// assert_eq!(db.url, "postgres://localhost");
/// ```
pub struct State<S: ?Sized>(Arc<S>);

impl<S: ?Sized> State<S> {
    /// Wraps a shared value.
    pub fn from_arc(value: Arc<S>) -> Self {
        State(value)
    }

    /// The shared value's `Arc`.
    pub fn into_arc(self) -> Arc<S> {
        self.0
    }
}

impl<S: ?Sized> Clone for State<S> {
    fn clone(&self) -> Self {
        State(self.0.clone())
    }
}

impl<S: ?Sized> Deref for State<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S: ?Sized + fmt::Debug> fmt::Debug for State<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&&*self.0).finish()
    }
}

/// The states registered on a bus, by type.
#[derive(Clone, Default)]
pub(crate) struct States(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl States {
    pub(crate) fn insert<S: Send + Sync + 'static>(&mut self, value: S) {
        self.0.insert(TypeId::of::<S>(), Arc::new(value));
    }

    pub(crate) fn get<S: Send + Sync + 'static>(&self) -> Option<State<S>> {
        let any = self.0.get(&TypeId::of::<S>())?.clone();
        any.downcast::<S>().ok().map(State)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}
