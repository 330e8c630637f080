//! `loco keygen`: a fresh cluster key for the verbs backend's multi-process rendezvous.
//!
//! Prints 32 bytes from the operating system's random generator as 64 hex digits, the form
//! `LOCO_CLUSTER_KEY` takes. Give every process of a cluster the same key (and keep it out of
//! logs and version control): only processes that hold it can join.

use std::process::ExitCode;

use rand::TryRngCore;

/// Bytes of a generated key.
pub const KEY_BYTES: usize = 32;

/// A fresh key as hex, or why the operating system's generator failed.
pub fn generate() -> Result<String, String> {
    let mut key = [0u8; KEY_BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut key)
        .map_err(|e| format!("the operating system's random generator failed: {e}"))?;
    Ok(key.iter().map(|b| format!("{b:02x}")).collect())
}

/// Runs the subcommand: prints a key, exits 0; on failure says why, exits 1.
pub fn main() -> ExitCode {
    match generate() {
        Ok(key) => {
            crate::ops::out(&key);
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("loco keygen: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fresh_hex_of_the_right_length() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_eq!(a.len(), 2 * KEY_BYTES);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
