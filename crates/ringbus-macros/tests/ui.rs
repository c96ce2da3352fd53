//! `#[subscriber]` compile tests: every accepted form compiles and runs; every error points at
//! the offending token and says what would be valid.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
