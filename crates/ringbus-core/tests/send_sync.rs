//! Compile-time checks of `Send`, `Sync` and `Unpin` for every public type, in the manner of
//! tokio's `tests/async_send_sync.rs`. Everything here is decided by the compiler: if this file
//! builds, the positive assertions hold; the negative ones are checked by the ambiguity trick
//! below (a type that *is* `Send` makes the call ambiguous, which is a compile error).

#![allow(dead_code, clippy::extra_unused_type_parameters)]

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use ringbus_core::{
    AllocError, Batch, Builder, Closed, Full, JoinError, ReadGuard, Reader, Ready, Recv, RecvBatch,
    Reservation, Stage, TooLarge, TryRecvError, TryReserveError, Writer,
};

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}
fn assert_unpin<T: Unpin>() {}
fn assert_error<T: std::error::Error + Send + Sync + Unpin + 'static>() {}

/// `<T as AmbiguousIfSend<_>>::some_item` compiles only when `T` is *not* `Send`.
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

/// `<T as AmbiguousIfSync<_>>::some_item` compiles only when `T` is *not* `Sync`.
trait AmbiguousIfSync<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

macro_rules! assert_not_send {
    ($ty:ty) => {
        let _ = <$ty as AmbiguousIfSend<_>>::some_item;
    };
}
macro_rules! assert_not_sync {
    ($ty:ty) => {
        let _ = <$ty as AmbiguousIfSync<_>>::some_item;
    };
}

/// Every handle and future, for one payload type.
fn handles_are_send_sync_unpin<T: Send + Sync + 'static>() {
    assert_send::<Writer<T>>();
    assert_sync::<Writer<T>>();
    assert_unpin::<Writer<T>>();

    assert_send::<Stage<T>>();
    assert_sync::<Stage<T>>();
    assert_unpin::<Stage<T>>();

    assert_send::<Reader<T>>();
    assert_sync::<Reader<T>>();
    assert_unpin::<Reader<T>>();

    assert_send::<ReadGuard<'static, T>>();
    assert_sync::<ReadGuard<'static, T>>();
    assert_unpin::<ReadGuard<'static, T>>();

    assert_send::<Batch<'static, T>>();
    assert_sync::<Batch<'static, T>>();
    assert_unpin::<Batch<'static, T>>();

    assert_send::<Reservation<'static, T>>();
    assert_sync::<Reservation<'static, T>>();
    assert_unpin::<Reservation<'static, T>>();

    assert_send::<Recv<'static, T>>();
    assert_sync::<Recv<'static, T>>();
    assert_unpin::<Recv<'static, T>>();

    assert_send::<RecvBatch<'static, T>>();
    assert_sync::<RecvBatch<'static, T>>();
    assert_unpin::<RecvBatch<'static, T>>();

    assert_send::<Ready<'static, T>>();
    assert_sync::<Ready<'static, T>>();
    assert_unpin::<Ready<'static, T>>();
}

/// The futures of the `async fn`s, which have no nameable type.
fn async_fns_are_send<T: Send + Sync + 'static>(writer: &mut Writer<T>, value: T) {
    fn send<F: Future + Send>(_: &F) {}
    let publish = writer.publish(value);
    send(&publish);
    drop(publish);
    let reserve = writer.reserve(1);
    send(&reserve);
    drop(reserve);
    let batch = writer.publish_batch(Vec::<T>::new());
    send(&batch);
}

#[test]
fn handles_with_u64_payload() {
    handles_are_send_sync_unpin::<u64>();
    assert_send::<Full<u64>>();
    assert_sync::<Full<u64>>();
    assert_unpin::<Full<u64>>();
    assert_error::<Full<u64>>();
    let (mut writer, _stage) = Builder::new(1).build::<u64>();
    async_fns_are_send(&mut writer, 1);
}

#[test]
fn handles_with_string_payload() {
    handles_are_send_sync_unpin::<String>();
    assert_error::<Full<String>>();
    let (mut writer, _stage) = Builder::new(1).build::<String>();
    async_fns_are_send(&mut writer, String::new());
}

#[test]
fn builder_and_errors() {
    assert_send::<Builder>();
    assert_sync::<Builder>();
    assert_unpin::<Builder>();
    assert_error::<Closed>();
    assert_error::<TryRecvError>();
    assert_error::<TooLarge>();
    assert_error::<TryReserveError>();
    assert_error::<JoinError>();
    assert_error::<AllocError>();
}

#[test]
fn payloads_that_cannot_be_shared_keep_the_handles_on_one_thread() {
    // Readers on different threads hold `&T` to the same value at once: `T: Sync` is required.
    assert_not_send!(Reader<Cell<u64>>);
    assert_not_sync!(Reader<Cell<u64>>);
    assert_not_send!(Stage<Cell<u64>>);
    assert_not_send!(Writer<Cell<u64>>);
    // Values move from the writer's thread to the readers': `T: Send` is required.
    assert_not_send!(Writer<Rc<u64>>);
    assert_not_send!(Reader<Rc<u64>>);
    assert_not_send!(Full<Rc<u64>>);
}
