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

/// Times a blocked thread gives its core away (`std::thread::yield_now`) and looks again
/// before it parks.
///
/// With more reader threads than cores, a reader that parks as soon as it is caught up is
/// parked again after every few items, and the writer pays a futex wake-up per parked reader
/// on its next publish. A reader that first yields lets the writer run on its core and
/// usually finds items when it looks again; the writer's wake-up of a reader that has not
/// parked yet is an atomic store, no system call. Measured with `ring/publish_readers/8`
/// (8 reader threads and the writer on 2 cores, `just bench quick`, two runs each,
/// alternated): 1.62 and 1.63 µs a publish before, 133 and 134 ns after. The cost: 3 threads
/// on 2 cores (`ring/stages/2`) went from 28.7 and 37.3 ns to 52.6 and 48.7 ns; one reader
/// (`publish_readers/1`) showed no difference beyond the noise. With a core per thread,
/// `yield_now` returns at once.
const YIELDS: u32 = 4;

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
        let mut yields = 0;
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            if yields < YIELDS {
                yields += 1;
                thread::yield_now();
                continue;
            }
            // Spurious unparks only cost another poll.
            thread::park();
        }
    })
}
