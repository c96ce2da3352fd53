//! Compile tests of what users write: every accepted `#[subscriber]` form compiles and runs;
//! every macro error points at the offending token and says what would be valid (with a "did
//! you mean" for a misspelled argument); the handler traits' errors say what to write instead
//! (`publish(..)`, `()`/`Result<(), E>`, an async closure, `subscribe` for closures); the
//! compiler errors `Bus::subscribe`'s docs quote (a closure that borrows the message or a
//! local) are the ones users get; and the builders, `Context` and forgotten futures warn when
//! unused. One harness for all of them, so
//! `cargo test` builds the cases' dependencies once.
//!
//! Ignored by a plain `cargo test`: trybuild builds the cases' dependencies (tokio, ringbus)
//! a second time in a target dir of its own and compiles each case alone, about 40 s from a
//! cold target on 2 cores, a third of what the rest of `cargo test --workspace` takes. CI
//! (`.ci/run`) and `just test` run it: `cargo test -p ringbus --test ui -- --ignored`.

#[test]
#[ignore = "slow (a crate built per case): run with `cargo test -p ringbus --test ui -- --ignored`"]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
