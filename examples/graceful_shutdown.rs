//! The bus inside a service, run by `ringbus::App`: handlers registered, a startup hook that
//! starts a publisher task (standing in for an HTTP server), and shutdown on Ctrl-C, SIGTERM,
//! or here after a short while so the example ends by itself. The bus then drains under a
//! timeout and the close report is printed.
//!
//! Run with `cargo run --release --example graceful_shutdown` (press Ctrl-C to stop early).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringbus::{subscriber, App, Bus, PublishError, State};

#[derive(Debug)]
struct Job {
    id: u64,
}

#[derive(Default)]
struct Done(AtomicU64);

/// A handler with a little latency, so there is something queued at shutdown.
#[subscriber("jobs")]
async fn work(job: &Job, done: State<Done>) {
    if job.id % 64 == 0 {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    done.0.fetch_add(1, Ordering::Relaxed);
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The bus reports errors, panics, stalls and drain reports as `tracing` events: print them.
    tracing_subscriber::fmt().with_target(false).init();
    let bus = Bus::builder().capacity(256).state(Done::default()).build();
    let accepted = Arc::new(AtomicU64::new(0));

    let report = App::new(bus.clone())
        .register(work)
        .on_startup({
            let accepted = accepted.clone();
            move |bus: Bus| async move {
                // The "server": publishes until the bus closes under it.
                tokio::spawn(async move {
                    for id in 1.. {
                        match bus.publish("jobs", Job { id }).await {
                            Ok(()) => accepted.fetch_add(1, Ordering::Relaxed),
                            Err(PublishError::Closed(_)) => break,
                            Err(e) => panic!("unexpected: {e}"),
                        };
                    }
                });
            }
        })
        .on_shutdown(|_bus: Bus| async { println!("shutting down: draining the queue") })
        .shutdown_on(tokio::time::sleep(Duration::from_millis(300)))
        .drain_timeout(Duration::from_secs(5))
        .run()
        .await?;

    let done = bus
        .state::<Done>()
        .expect("registered")
        .0
        .load(Ordering::Relaxed);
    let accepted = accepted.load(Ordering::Relaxed);
    println!(
        "accepted {accepted} jobs, handled {done}; drain complete: {}",
        report.complete
    );
    if !report.complete || done != accepted {
        return Err(format!("{} of {accepted} jobs handled", done).into());
    }
    Ok(())
}
