//! Errors of the link: the `LinkError` every engine shares (it lives in `ringbus-link`), and the
//! check of the names a stream key is made of.

pub use ringbus_link::LinkError;

/// Checks a name used in a stream key or as a group or consumer name: not empty, no
/// whitespace or control characters, no `:` (the key separator), at most 200 bytes.
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
    if name.contains(':') {
        return Err(refuse(
            "':' separates the prefix from the topic in a stream key",
        ));
    }
    Ok(())
}
