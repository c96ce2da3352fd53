//! Errors of the link: the `LinkError` every engine shares (it lives in `ringbus-link`).

pub use ringbus_link::LinkError;
