//! `ringbus-core` directly, as a Disruptor pipeline: a writer task, a first stage of two
//! readers (a journal reading one item at a time and a replicator reading zero-copy batches)
//! and a second stage (the business logic) that only sees what both have finished.
//!
//! Run with `cargo run --release --example pipeline`.

use std::time::Instant;

use ringbus_core::{Builder, Closed, Reader};

const ITEMS: u64 = 2_000_000;

/// Reads one item at a time, in place, and sums them.
async fn single(mut reader: Reader<u64>) -> (u64, u64) {
    let (mut count, mut sum) = (0, 0);
    loop {
        match reader.recv().await {
            Ok(item) => {
                count += 1;
                sum += *item;
            }
            Err(Closed) => return (count, sum),
        }
    }
}

/// Reads whatever is available as one zero-copy batch (two slices) per wake-up.
async fn batched(mut reader: Reader<u64>) -> (u64, u64) {
    let (mut count, mut sum) = (0, 0);
    while let Ok(batch) = reader.recv_batch(256).await {
        count += batch.len() as u64;
        sum += batch.iter().sum::<u64>();
    }
    (count, sum)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    runtime.block_on(async {
        let (mut writer, journal) = Builder::new(1024).build::<u64>();
        let logic = journal.then();
        let readers = [
            tokio::spawn(single(journal.reader()?)),
            tokio::spawn(batched(journal.reader()?)),
            tokio::spawn(single(logic.reader()?)),
        ];

        let started = Instant::now();
        let mut next = 0;
        while next < ITEMS {
            // Publish in chunks of up to 64 items, one cursor store per chunk.
            next += writer.publish_batch(next..ITEMS.min(next + 64)).await;
        }
        drop(writer); // closes the ring: readers drain, then see `Closed`

        let expected = ITEMS * (ITEMS - 1) / 2;
        let names = [
            "journal (stage 1)",
            "replicator (stage 1)",
            "logic (stage 2)",
        ];
        for (name, handle) in names.iter().zip(readers) {
            let (count, sum) = handle.await?;
            println!(
                "{name:<21} read {count} items (sum ok: {})",
                sum == expected
            );
            if count != ITEMS || sum != expected {
                return Err(format!("{name} lost items: {count} of {ITEMS}").into());
            }
        }
        let elapsed = started.elapsed();
        println!(
            "{ITEMS} items through 3 readers in 2 stages: {:.1} ms, {:.1} M items/s",
            elapsed.as_secs_f64() * 1e3,
            ITEMS as f64 / elapsed.as_secs_f64() / 1e6
        );
        Ok(())
    })
}
