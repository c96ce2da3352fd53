//! Issue 34's own case: a bus of capacity 2^30 asks for a ring of 64 GiB at the first use of a
//! topic of 64-byte messages, which aborted the process ("memory allocation of 68719476736
//! bytes failed"). It is an `Err` now, as every ring the process cannot have.
//!
//! Whether an allocator hands out 64 GiB depends on the machine: its memory, and how its kernel
//! overcommits (with Linux's `vm.overcommit_memory = 1` a ring of that size is had, and costs
//! nothing until it is used: its empty slots are not written). So this binary first lowers its
//! own address-space limit to 8 GiB, and the refusal is the same everywhere. A test binary of
//! its own: the limit holds for the whole process.
#![cfg(target_os = "linux")]

use ringbus::{Bus, Error, PublishError, SubscribeOptions};

/// Lowers this process's address-space limit (`RLIMIT_AS`) to `bytes`, if it was higher.
fn limit_address_space(bytes: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid `rlimit` to write to.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) }, 0);
    limit.rlim_cur = limit.rlim_cur.min(bytes);
    // SAFETY: `limit` is a valid `rlimit`; a soft limit at most the hard one may be set.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
}

#[test]
fn a_ring_of_64_gib_the_process_cannot_have_is_an_error() {
    limit_address_space(8 << 30);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(1 << 30).build();
        match bus.publish("t", [7u8; 64]).await {
            Err(PublishError::RingTooLarge(back, e)) => {
                assert_eq!(back, [7; 64], "the message comes back");
                let fields = (&*e.topic, e.capacity, e.message_size, e.bytes);
                assert_eq!(fields, ("t", 1 << 30, 64, 1 << 36));
                assert_eq!(
                    e.to_string(),
                    "topic \"t\": a ring of 1073741824 messages of 64 bytes takes 68719476736 \
                     bytes, which could not be allocated: lower the topic's capacity or box \
                     its messages"
                );
            }
            other => panic!("{:?}", other.map_err(|e| e.to_string())),
        }
        let refused = bus.subscribe("t", |_: &[u8; 64]| async {});
        assert!(
            matches!(&refused, Err(Error::RingTooLarge(e)) if e.bytes == 1 << 36),
            "{:?}",
            refused.map(drop)
        );
        // A ring the process can have is had, under the same name.
        let options = SubscribeOptions::new().capacity(1024);
        let sub = bus.subscribe_with("t", options, |_: &[u8; 64]| async {});
        assert!(sub.is_ok(), "{:?}", sub.map(drop));
        bus.publish("t", [1u8; 64]).await.unwrap();
        bus.close().await;
    });
}
