#![deny(unused_must_use)]

use std::time::Duration;

use ringbus::{Bus, Context, SubscribeOptions};

fn main() {
    // A builder whose bus is never built.
    Bus::builder().capacity(64);
    // A deadline that limits nothing.
    Context::new().with_timeout(Duration::from_millis(5));
    SubscribeOptions::new().name("audit");
    let bus = Bus::new();
    // A publish that is never awaited publishes nothing.
    bus.publish("orders", 1u64);
    // A close that is never awaited closes nothing.
    bus.close();
}
