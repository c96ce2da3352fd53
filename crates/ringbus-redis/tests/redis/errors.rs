//! What `?` in `main` and `unwrap` print is an error's `Debug`: a link error's leads with its
//! message, then names the variant and its fields; `{:#?}` is the structure alone.

use ringbus_redis::LinkError;

fn redis_error() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "WRONGPASS"))
}

#[test]
fn the_debug_of_every_link_error_leads_with_its_message() {
    let errors = [
        (LinkError::Connect(redis_error()), "Connect(..)"),
        (
            LinkError::BadName {
                what: "group",
                name: "a:b".into(),
                reason: "':' separates the prefix from the topic in a stream key",
            },
            "BadName { what: \"group\", name: \"a:b\", \
             reason: \"':' separates the prefix from the topic in a stream key\" }",
        ),
        (
            LinkError::AlreadyLinked {
                topic: "orders".into(),
                direction: "import",
            },
            "AlreadyLinked { topic: \"orders\", direction: \"import\" }",
        ),
        (
            LinkError::EchoLoop {
                topic: "orders".into(),
                message_type: "app::Order",
            },
            "EchoLoop { topic: \"orders\", message_type: \"app::Order\" }",
        ),
        (LinkError::Group(redis_error()), "Group(..)"),
        (LinkError::Bus(ringbus::Error::Closed), "Bus(..)"),
        (LinkError::Closed, "Closed"),
    ];
    for (e, structure) in errors {
        assert_eq!(format!("{e:?}"), format!("{e} ({structure})"));
        let whole = format!("{e:#?}");
        let variant = structure.split(['(', ' ']).next().unwrap();
        assert!(whole.starts_with(variant), "{{:#?}}: {whole}");
    }
    // `{:#?}` shows a wrapped error in full.
    assert!(format!("{:#?}", LinkError::Group(redis_error())).contains("WRONGPASS"));
}
