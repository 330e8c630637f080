//! The `loco` command.
#![forbid(unsafe_code)]
fn main() {}
