//! What `?` in `main` and `unwrap` print is an error's `Debug`: a link error's leads with its
//! message, then names the variant and its fields; `{:#?}` is the structure alone.

use ringbus_nats::LinkError;

#[test]
fn the_debug_of_every_link_error_leads_with_its_message() {
    let errors = [
        (
            LinkError::Connect(async_nats::ConnectError::new(
                async_nats::ConnectErrorKind::ServerParse,
            )),
            "Connect(..)",
        ),
        (
            LinkError::Credentials(std::io::Error::from(std::io::ErrorKind::NotFound)),
            "Credentials(..)",
        ),
        (
            LinkError::BadSubject {
                what: "topic",
                name: "orders.>".into(),
                reason: "it contains a wildcard",
            },
            "BadSubject { what: \"topic\", name: \"orders.>\", reason: \"it contains a wildcard\" }",
        ),
        (
            LinkError::AlreadyLinked {
                topic: "orders".into(),
                direction: "export",
            },
            "AlreadyLinked { topic: \"orders\", direction: \"export\" }",
        ),
        (
            LinkError::EchoLoop {
                topic: "orders".into(),
                message_type: "app::Order",
            },
            "EchoLoop { topic: \"orders\", message_type: \"app::Order\" }",
        ),
        (
            LinkError::JetStream("no stream".into()),
            "JetStream(\"no stream\")",
        ),
        (
            LinkError::Subscribe("permissions violation".into()),
            "Subscribe(\"permissions violation\")",
        ),
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
    assert!(format!("{:#?}", LinkError::Bus(ringbus::Error::Closed)).contains("Closed"));
}
