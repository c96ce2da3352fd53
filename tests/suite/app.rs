//! `App`: the health probe follows the app through its phases, and reports subscribers
//! detached after a stall.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringbus::{App, Bus, HealthStatus};

/// Polls `health` until `done` holds of its status, for at most 10 s.
async fn until(health: &ringbus::Health, what: &str, done: impl Fn(&HealthStatus) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = health.status();
        if done(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: still {status:?}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_app_and_reports_a_detached_subscriber() {
    let bus = Bus::builder()
        .stall_timeout(Duration::from_millis(50))
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let seen_while_draining = Arc::new(Mutex::new(None));
    let seen = seen_while_draining.clone();
    let app = App::new(bus.clone())
        .without_signals()
        .drain_timeout(Duration::from_secs(5))
        .shutdown_on(async move {
            let _ = stopped.await;
        });
    let health = app.health();
    let probe = health.clone();
    let app = app.on_shutdown(async move |_: Bus| {
        *seen.lock().unwrap() = Some(probe.status());
    });
    assert_eq!(health.status(), HealthStatus::Starting);
    assert!(!health.status().is_healthy());

    let run = tokio::spawn(app.run());
    until(&health, "running", |s| *s == HealthStatus::Running).await;
    assert!(health.status().is_healthy());

    // A subscriber whose handler never returns is detached after the stall timeout.
    let _stuck = bus
        .subscribe_with(
            "orders",
            ringbus::SubscribeOptions::new().name("stuck"),
            |_: &u64| std::future::pending::<()>(),
        )
        .unwrap();
    bus.publish("orders", 1u64).await.unwrap();
    until(&health, "degraded", |s| {
        matches!(s, HealthStatus::Degraded { .. })
    })
    .await;
    assert_eq!(
        health.status(),
        HealthStatus::Degraded {
            detached: vec!["orders/stuck".to_owned()]
        }
    );
    assert!(!health.status().is_healthy());

    stop.send(()).unwrap();
    let report = run.await.unwrap().unwrap();
    assert_eq!(
        *seen_while_draining.lock().unwrap(),
        Some(HealthStatus::Draining),
        "a shutdown hook runs while the app drains"
    );
    assert_eq!(health.status(), HealthStatus::Stopped, "{report:?}");
}

#[tokio::test]
async fn health_says_stopped_when_run_fails() {
    let app = App::new(Bus::new())
        .without_signals()
        .on_startup(async |_: Bus| -> Result<(), String> { Err("no database".into()) });
    let health = app.health();
    assert!(app.run().await.is_err());
    assert_eq!(health.status(), HealthStatus::Stopped);
}
