//! What `?` in a `main` returning `Result<(), E>` prints, and what `unwrap` panics with, is the
//! error's `Debug`: for every error of the bus it leads with the `Display` message (which says
//! what went wrong and how to fix it), then gives the structure; `{:#?}` is the structure alone.

use std::sync::Arc;

use ringbus::{Error, PublishError, RequestError, TypeMismatch};

/// A message type with no `Debug`: the errors that give it back must print without it.
struct Order;

fn mismatch() -> TypeMismatch {
    TypeMismatch {
        topic: Arc::from("orders"),
        expected: "app::Order",
        found: "u64",
    }
}

/// `{:?}` is the message, then the structure (which names `variant`) in parentheses;
/// `{:#?}` is the structure alone.
fn assert_message_first(debug: String, pretty: String, display: String, variant: &str) {
    assert!(
        debug.starts_with(&format!("{display} (")) && debug.ends_with(')'),
        "{{:?}} should lead with the message {display:?}, got {debug:?}"
    );
    assert!(
        debug[display.len()..].contains(variant),
        "{{:?}} should name {variant} after the message, got {debug:?}"
    );
    assert!(
        pretty.starts_with(variant),
        "{{:#?}} should be the structure alone, got {pretty:?}"
    );
}

#[test]
fn the_debug_of_every_bus_error_leads_with_its_message() {
    let errors = [
        (Error::Closed, "Closed"),
        (Error::Cancelled, "Cancelled"),
        (Error::Full, "Full"),
        (Error::TypeMismatch(mismatch()), "TypeMismatch"),
        (
            Error::NoSubscriber {
                topic: Arc::from("ordrs"),
            },
            "NoSubscriber",
        ),
        (Error::NoRuntime, "NoRuntime"),
        (
            Error::CapacityMismatch {
                topic: Arc::from("orders"),
                capacity: 8,
                requested: 16,
            },
            "CapacityMismatch",
        ),
        (
            Error::MissingState {
                subscriber: "audit".into(),
                state: "app::Ledger",
            },
            "MissingState",
        ),
        (Error::Hook("the database is down".into()), "Hook"),
        (
            Error::Unsupported("a batch subscriber does not retry"),
            "Unsupported",
        ),
        (
            Error::TooManySubscribers {
                topic: Arc::from("orders"),
                max: 4,
            },
            "TooManySubscribers",
        ),
        (Error::NoResponders, "NoResponders"),
        (Error::ReplyFailed("out of stock".into()), "ReplyFailed"),
    ];
    for (e, variant) in errors {
        assert_message_first(format!("{e:?}"), format!("{e:#?}"), e.to_string(), variant);
    }
    // The fields stay visible after the message.
    let e = Error::MissingState {
        subscriber: "audit".into(),
        state: "app::Ledger",
    };
    assert!(
        format!("{e:?}").ends_with(
            "to Bus::builder() (MissingState { subscriber: \"audit\", state: \"app::Ledger\" })"
        ),
        "{e:?}"
    );
}

#[test]
fn the_debug_of_every_publish_error_leads_with_its_message_without_the_message_being_debug() {
    let errors = [
        (PublishError::Closed(Order), "Closed"),
        (PublishError::Cancelled(Order), "Cancelled"),
        (PublishError::Full(Order), "Full"),
        (
            PublishError::TypeMismatch(Order, mismatch()),
            "TypeMismatch",
        ),
        (
            PublishError::NoSubscriber(Order, Arc::from("ordrs")),
            "NoSubscriber",
        ),
        (PublishError::NoRuntime(Order), "NoRuntime"),
    ];
    for (e, variant) in errors {
        assert_message_first(format!("{e:?}"), format!("{e:#?}"), e.to_string(), variant);
        assert!(format!("{e:?}").contains(&format!("{variant}(..")), "{e:?}");
    }
}

#[test]
fn the_debug_of_every_request_error_leads_with_its_message_without_the_message_being_debug() {
    let errors = [
        (RequestError::NoResponders(Order), "NoResponders"),
        (RequestError::Unanswered, "Unanswered"),
        (RequestError::Timeout(Some(Order)), "Timeout"),
        (RequestError::Timeout(None), "Timeout"),
        (RequestError::Cancelled(Some(Order)), "Cancelled"),
        (RequestError::Cancelled(None), "Cancelled"),
        (RequestError::Failed("out of stock".into()), "Failed"),
        (RequestError::Closed(Order), "Closed"),
        (RequestError::NoRuntime(Order), "NoRuntime"),
    ];
    for (e, variant) in errors {
        assert_message_first(format!("{e:?}"), format!("{e:#?}"), e.to_string(), variant);
    }
    assert!(format!("{:?}", RequestError::Timeout(Some(Order))).ends_with("(Timeout(Some(..)))"));
    assert!(format!("{:?}", RequestError::<Order>::Timeout(None)).ends_with("(Timeout(None))"));
}

#[test]
fn unwrap_panics_with_the_message() {
    // No tokio runtime here: subscribing is `Err(Error::NoRuntime)`.
    let bus = ringbus::Bus::new();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bus.subscribe("t", async |_: &u64| {}).unwrap()
    }))
    .expect_err("unwrap of an Err panics");
    let text = panic
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(
        text.contains("Err` value: no tokio runtime is reachable"),
        "{text}"
    );
}

/// Set for the run of [`a_failing_main_prints_the_message`] in a child process.
const CHILD: &str = "RINGBUS_SUITE_MAIN_ERROR_CHILD";

struct Ledger;

#[ringbus::subscriber("orders")]
async fn audit(_: &u64, _: ringbus::State<Ledger>) {}

/// A `main` whose handler asks for a `State` nobody registered: in the child process it fails
/// as such a `main` would (a test's `Result` is reported as `main`'s is: `Error: {e:?}` on
/// stderr); in this process it does nothing.
#[tokio::test]
async fn main_with_a_missing_state() -> Result<(), Error> {
    if std::env::var_os(CHILD).is_none() {
        return Ok(());
    }
    let bus = ringbus::Bus::new();
    bus.register(audit)?;
    Ok(())
}

#[test]
fn a_failing_main_prints_the_message() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "errors::main_with_a_missing_state",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child's main should fail");
    let ledger = std::any::type_name::<Ledger>();
    let expected = format!(
        "Error: subscriber \"audit\" takes a State<{ledger}>, but no `{ledger}` was registered: \
         add `.state(value)` to Bus::builder() (MissingState {{ subscriber: \"audit\", \
         state: \"{ledger}\" }})\n"
    );
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in:\n{stderr}"
    );
}
