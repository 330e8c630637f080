//! Litmus tests for loco-rs.
#![forbid(unsafe_code)]
