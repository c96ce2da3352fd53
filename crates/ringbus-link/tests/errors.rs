//! What `?` in `main` and `unwrap` print is an error's `Debug`: the codec's errors lead with
//! their message; `{:#?}` is the structure alone.

use ringbus_link::{CodecError, HeaderError};

#[test]
fn the_debug_of_a_header_error_leads_with_its_message() {
    let e = HeaderError::bad_name("Tenant Id");
    let reason = "the name must be printable ASCII without ':' or whitespace";
    assert_eq!(
        format!("{e:?}"),
        format!("{e} (HeaderError {{ name: \"Tenant Id\", reason: {reason:?} }})")
    );
    assert!(e.to_string().ends_with(reason), "{e}");
    assert!(format!("{e:#?}").starts_with("HeaderError {\n"));
}

#[test]
fn the_debug_of_a_codec_error_leads_with_its_message() {
    let e = CodecError::new("expected value at line 1 column 1");
    assert_eq!(
        format!("{e:?}"),
        "expected value at line 1 column 1 (CodecError(..))"
    );
    assert!(format!("{e:#?}").starts_with("CodecError(\n"));
    assert!(format!("{e:#?}").contains("expected value"));
}
