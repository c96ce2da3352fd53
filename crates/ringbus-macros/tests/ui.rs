//! Compile tests of what users write: every accepted `#[subscriber]` form compiles and runs;
//! every macro error points at the offending token and says what would be valid (with a "did
//! you mean" for a misspelled argument); the handler traits' errors say what to write instead
//! (`publish(..)`, `()`/`Result<(), E>`, an async closure, `subscribe` for closures); and the
//! builders, `Context` and forgotten futures warn when unused. One harness for all of them, so
//! `cargo test` builds the cases' dependencies once.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
