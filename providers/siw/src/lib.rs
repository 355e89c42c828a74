//! The siw provider in Rust (work in progress: not built into build/ yet).
