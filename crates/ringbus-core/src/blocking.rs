//! A minimal executor for plain threads: the `blocking_*` methods and [`block_on`].

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// One waker per thread, made on first use, so blocking calls do not allocate.
    static WAKER: Waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
}

/// Runs `future` to completion on the current thread, parking the thread while it is pending.
///
/// This is all the `blocking_*` methods need; it is public so plain-thread programs (and doc
/// examples) can drive the async methods without a runtime. It is no general executor: it
/// knows nothing of timers or I/O, so use it only with futures that are woken by this crate
/// (or by other threads). Do not call it from inside an async task: it blocks the thread.
///
/// ```
/// let (mut writer, stage) = ringbus_core::Builder::new(8).build::<u8>();
/// let mut reader = stage.reader().unwrap();
/// ringbus_core::block_on(writer.publish(1));
/// assert_eq!(*reader.blocking_recv().unwrap(), 1);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            // Spurious unparks only cost another poll.
            thread::park();
        }
    })
}
