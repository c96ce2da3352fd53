//! Errors of the link: the `LinkError` every engine shares (it lives in `ringbus-link`), and the
//! check of the names of exchanges, queues and routing keys.

pub use ringbus_link::LinkError;

/// Checks a topic pattern ([`ringbus::Pattern`]) an exchange binding can carry: no AMQP `#`,
/// no whitespace or control characters.
pub(crate) fn check_pattern(pattern: &str) -> Result<ringbus::Pattern, LinkError> {
    let refuse = |reason| LinkError::BadName {
        what: "topic pattern",
        name: pattern.escape_debug().to_string(),
        reason,
    };
    if pattern.contains('#') {
        return Err(refuse(
            "`#` is AMQP's wildcard: write `>` for the rest of the tokens",
        ));
    }
    if pattern.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse("it contains whitespace or a control character"));
    }
    ringbus_link::engine::parse_pattern(pattern)
}

/// Checks a name used in an exchange, a queue or a routing key: not empty, no whitespace or
/// control characters, none of AMQP's topic wildcards (`*`, `#`), at most 200 bytes; and no
/// `.` but in a topic, so that a queue name `<prefix>.<group>.<topic>` is made of one set of
/// names only (group `x.y` with topic `z` and group `x` with topic `y.z` would share a queue).
pub(crate) fn check_name(name: &str, what: &'static str) -> Result<(), LinkError> {
    let refuse = |reason| LinkError::BadName {
        what,
        name: name.escape_debug().to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(refuse("it is empty"));
    }
    if name.len() > 200 {
        return Err(refuse("it is longer than 200 bytes"));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse("it contains whitespace or a control character"));
    }
    if name.contains(['*', '#']) {
        return Err(refuse("it contains a topic wildcard (`*` or `#`)"));
    }
    if what != "topic" && name.contains('.') {
        return Err(refuse(
            "'.' separates the prefix, the group and the topic in a queue name",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_name, LinkError};

    #[test]
    fn names_with_wildcards_or_spaces_are_refused_and_debug_leads_with_the_message() {
        assert!(check_name("orders.eu", "topic").is_ok());
        assert!(check_name("billing.eu", "group").is_err());
        assert!(check_name("shop.v2", "prefix").is_err());
        for bad in ["", "a b", "orders.*", "orders.#", &"x".repeat(201)] {
            assert!(check_name(bad, "topic").is_err(), "{bad:?}");
        }
        let e = check_name("a*", "topic").unwrap_err();
        assert!(
            matches!(e, LinkError::BadName { what: "topic", .. }),
            "{e:?}"
        );
    }
}
