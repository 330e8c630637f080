//! The peer list of a cluster spread over processes (`LOCO_PEERS`): entry `i` is the
//! `host:port` where node `i`'s process listens for the rendezvous. One reading of it for
//! every part that reads one (the verbs backend, `loco doctor`, `loco bench`), so that they agree
//! on what a list means. Built without the `verbs` feature too: the doctor checks a list on
//! machines without RDMA.

/// What is wrong with a peer list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerListError {
    /// Nothing but blanks and commas.
    #[error("the peer list is empty: it names every node's host:port, node 0 first")]
    Empty,
    /// An entry is blank. Skipping it would give every later node the number of the one
    /// before it.
    #[error("entry {index} of the peer list is empty (node {index}'s host:port is missing; a stray comma?)")]
    EmptyEntry {
        /// The entry's position, which is its node id.
        index: usize,
    },
    /// Two nodes at one address would both listen there: the second process fails to bind,
    /// or, in turns, each takes the other's connections.
    #[error("the peer list gives n{first} and n{second} the same address {addr}: each node needs its own host:port")]
    Duplicate {
        /// The earlier node.
        first: usize,
        /// The later node.
        second: usize,
        /// Their address.
        addr: String,
    },
}

/// Parses a comma-separated peer list (entries trimmed) and checks it: not empty, no blank
/// entry, no address twice.
pub fn parse(list: &str) -> Result<Vec<String>, PeerListError> {
    let peers = entries(list);
    if peers.iter().all(String::is_empty) {
        return Err(PeerListError::Empty);
    }
    check(&peers)?;
    Ok(peers)
}

/// The entries of a comma-separated list, trimmed, blank ones included (unchecked: what
/// [`parse`] reads before it checks).
pub fn entries(list: &str) -> Vec<String> {
    list.split(',').map(|p| p.trim().to_string()).collect()
}

/// Checks a peer list given entry by entry (`VerbsConfig::distributed`, `loco doctor
/// --peers`): not empty, no blank entry, no address twice.
pub fn check(peers: &[String]) -> Result<(), PeerListError> {
    if peers.is_empty() {
        return Err(PeerListError::Empty);
    }
    if let Some(index) = peers.iter().position(|p| p.trim().is_empty()) {
        return Err(PeerListError::EmptyEntry { index });
    }
    for (second, p) in peers.iter().enumerate() {
        if let Some(first) = peers[..second].iter().position(|q| q == p) {
            return Err(PeerListError::Duplicate {
                first,
                second,
                addr: p.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_read_in_node_order_and_trimmed() {
        assert_eq!(
            parse(" 10.0.0.1:7470 ,10.0.0.2:7470").unwrap(),
            ["10.0.0.1:7470", "10.0.0.2:7470"]
        );
        assert_eq!(parse("h:1").unwrap(), ["h:1"]);
    }

    #[test]
    fn blank_entries_empty_lists_and_repeats_are_refused() {
        for empty in ["", " ", ",", ",,", " , "] {
            assert_eq!(parse(empty), Err(PeerListError::Empty), "{empty:?}");
        }
        assert_eq!(
            parse("a:1,,b:2"),
            Err(PeerListError::EmptyEntry { index: 1 })
        );
        assert_eq!(
            parse("a:1,b:2,"),
            Err(PeerListError::EmptyEntry { index: 2 })
        );
        assert_eq!(parse(",a:1"), Err(PeerListError::EmptyEntry { index: 0 }));
        let e = parse("a:1,b:2,a:1").unwrap_err();
        assert_eq!(
            e,
            PeerListError::Duplicate {
                first: 0,
                second: 2,
                addr: "a:1".into()
            }
        );
        assert!(e.to_string().contains("n0 and n2"), "{e}");
        assert_eq!(check(&[]), Err(PeerListError::Empty));
    }
}
