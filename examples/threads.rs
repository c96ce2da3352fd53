//! `ringbus-core` on plain threads: no async runtime at all. One writer thread publishes with
//! `blocking_publish` (it blocks when the slowest reader is a lap behind); reader threads join
//! while it runs, read with `blocking_recv` / `blocking_recv_batch`, and one leaves half-way.
//!
//! Run with `cargo run --release --example threads`.

use std::thread;
use std::time::Instant;

use ringbus_core::Builder;

const ITEMS: u64 = 1_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Reuse big payloads in place: the slots are made once, here.
    let (mut writer, stage) = Builder::new(256).build_with(|| [0u64; 8]);

    // Join before publishing so every reader sees every item.
    let mut single = stage.reader()?;
    let mut batched = stage.reader()?;
    let mut leaver = stage.reader()?;

    let started = Instant::now();
    let writer = thread::spawn(move || {
        for i in 0..ITEMS {
            // Fill in place: no move of the 64-byte payload, no allocation.
            let mut slot = writer.blocking_reserve(1).expect("1 <= capacity");
            let (a, _) = slot.as_mut_slices();
            a[0] = [i; 8];
            slot.commit();
        }
        // Dropping the writer closes the ring.
    });

    let single = thread::spawn(move || {
        let mut sum = 0;
        while let Ok(item) = single.blocking_recv() {
            sum += item[0];
        }
        sum
    });
    let batched = thread::spawn(move || {
        let (mut sum, mut batches) = (0, 0u64);
        while let Ok(batch) = batched.blocking_recv_batch(usize::MAX) {
            sum += batch.iter().map(|item| item[7]).sum::<u64>();
            batches += 1;
        }
        (sum, batches)
    });
    let leaver = thread::spawn(move || {
        let mut read = 0u64;
        while read < ITEMS / 2 {
            match leaver.blocking_recv() {
                Ok(_) => read += 1,
                Err(_) => break,
            }
        }
        read // dropping the reader here leaves the ring: the writer stops waiting for it
    });

    writer.join().map_err(|_| "writer panicked")?;
    let expected = ITEMS * (ITEMS - 1) / 2;
    let single = single.join().map_err(|_| "reader panicked")?;
    let (batched, batches) = batched.join().map_err(|_| "reader panicked")?;
    let left_after = leaver.join().map_err(|_| "reader panicked")?;
    let elapsed = started.elapsed();

    println!("single reader:  sum ok: {}", single == expected);
    println!(
        "batch reader:   sum ok: {} ({batches} batches, {:.1} items each)",
        batched == expected,
        ITEMS as f64 / batches as f64
    );
    println!("leaving reader: read {left_after} items, then left");
    println!(
        "{ITEMS} items of 64 bytes on plain threads: {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    );
    if single != expected || batched != expected || left_after != ITEMS / 2 {
        return Err("a reader lost items".into());
    }
    Ok(())
}
