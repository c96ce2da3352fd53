use std::sync::atomic::{AtomicU64, Ordering};

fn main() {
    let bus = ringbus::Bus::new();
    let seen = AtomicU64::new(0);
    // A subscriber is a task that outlives this function: its handler cannot borrow a local
    // (`Bus::subscribe` quotes this error).
    // Lend the state with `with_state(seen, async |seen: &AtomicU64, _: &u64| ...)`.
    let _ = bus.subscribe("orders", async |_: &u64| {
        seen.fetch_add(1, Ordering::Relaxed);
    });
}
