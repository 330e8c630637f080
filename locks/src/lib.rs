//! The weak, strong and node locks (in progress).
#![forbid(unsafe_code)]
