//! Topic names to NATS subjects: `<prefix>.<topic>`, checked when a link is made.

use crate::error::LinkError;

/// Checks that `s` is a publishable NATS subject (or a part of one): dot-separated tokens,
/// none empty, no whitespace or control characters, no wildcards.
pub(crate) fn check(s: &str, what: &'static str) -> Result<(), LinkError> {
    let bad = |reason: &'static str| LinkError::BadName {
        what,
        name: s.escape_debug().to_string(),
        reason,
    };
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    if s.len() > 256 {
        return Err(bad("it is longer than 256 bytes"));
    }
    for token in s.split('.') {
        if token.is_empty() {
            return Err(bad(
                "it has an empty token (a leading, trailing or double '.')",
            ));
        }
        if token == "*" || token == ">" || token.contains(['*', '>']) {
            return Err(bad("wildcards ('*', '>') cannot be published to"));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains whitespace or a control character"));
        }
    }
    Ok(())
}

/// Checks that `s` is a topic pattern ([`ringbus::Pattern`]) a NATS subscription takes: also no
/// whitespace or control characters, and at most 256 bytes.
pub(crate) fn check_pattern(s: &str) -> Result<(), LinkError> {
    let bad = |reason: &'static str| LinkError::BadName {
        what: "topic pattern",
        name: s.escape_debug().to_string(),
        reason,
    };
    ringbus_link::engine::parse_pattern(s)?;
    if s.len() > 256 {
        return Err(bad("it is longer than 256 bytes"));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains whitespace or a control character"));
    }
    Ok(())
}

/// The subject of `topic` under `prefix`.
pub(crate) fn subject(prefix: &str, topic: &str) -> Result<String, LinkError> {
    check(topic, "topic")?;
    Ok(format!("{prefix}.{topic}"))
}

/// Whether `filter` (a stream's subject, which may hold wildcards: `*` one token, `>` the
/// rest) matches every subject that `subject` (plain, or holding wildcards too) matches. A
/// subject that is no pattern covers itself alone.
pub(crate) fn covers(filter: &str, subject: &str) -> bool {
    match (
        ringbus::Pattern::parse(filter),
        ringbus::Pattern::parse(subject),
    ) {
        (Ok(filter), Ok(subject)) => filter.covers(&subject),
        _ => filter == subject,
    }
}

/// A name usable as a JetStream stream or consumer name: letters, digits, '-' and '_'.
pub(crate) fn durable_name(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| {
            p.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_take_whole_token_wildcards_only() {
        for good in ["orders.*", "orders.>", "*.eu.*", ">", "orders.eu"] {
            assert!(check_pattern(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "orders..x",
            "orders.>.paid",
            "ord*.x",
            "a b.*",
            ".orders",
        ] {
            assert!(
                matches!(check_pattern(bad), Err(LinkError::BadName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn accepts_plain_and_dotted_topics() {
        assert_eq!(subject("app", "orders").unwrap(), "app.orders");
        assert_eq!(
            subject("app", "orders.eu-west").unwrap(),
            "app.orders.eu-west"
        );
    }

    #[test]
    fn refuses_what_nats_cannot_route() {
        for topic in [
            "", "a..b", ".a", "a.", "a b", "a.*", ">", "a\tb", "a\nb", "x*",
        ] {
            let err = subject("app", topic).unwrap_err();
            assert!(
                matches!(err, LinkError::BadName { what: "topic", .. }),
                "{topic:?}: {err}"
            );
        }
        assert!(subject("app", &"a".repeat(300)).is_err());
    }

    #[test]
    fn a_filter_covers_by_the_pattern_rules_and_a_non_pattern_covers_itself() {
        assert!(covers("app.>", "app.orders.*"));
        assert!(!covers("app.*", "app.>"));
        assert!(covers("app..x", "app..x"));
        assert!(!covers("app.>", "app..x"));
    }

    #[test]
    fn a_stream_subject_covers_what_its_wildcards_match() {
        for (filter, subject) in [
            ("app.orders", "app.orders"),
            ("app.>", "app.orders"),
            ("app.>", "app.orders.eu"),
            ("app.*", "app.orders"),
            ("*.orders", "app.orders"),
            ("app.*.eu", "app.orders.eu"),
        ] {
            assert!(covers(filter, subject), "{filter} {subject}");
        }
        for (filter, subject) in [
            ("app.orders", "app.orders.eu"),
            ("app.orders.eu", "app.orders"),
            ("app.>", "app"),
            ("app.*", "app.orders.eu"),
            ("other.>", "app.orders"),
            ("app.order", "app.orders"),
        ] {
            assert!(!covers(filter, subject), "{filter} {subject}");
        }
    }

    #[test]
    fn durable_names_are_sanitised() {
        assert_eq!(
            durable_name(&["app", "orders.eu west"]),
            "app_orders_eu_west"
        );
    }
}
