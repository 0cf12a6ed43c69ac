//! The versioned member list and its file format.
//!
//! # Format
//!
//! The operator writes it into the cluster's ConfigMap (mounted as a file the node watches), and
//! pushes the same document with the `SetMembers` admin RPC; outside Kubernetes it is a file
//! written by hand. JSON, one object:
//!
//! ```json
//! {
//!   "version": 3,
//!   "members": [
//!     {"name": "orders-0", "address": "orders-0.orders-headless.default.svc:8087", "zone": "eu-west-1a"},
//!     {"name": "orders-1", "address": "orders-1.orders-headless.default.svc:8087", "zone": "eu-west-1b"}
//!   ]
//! }
//! ```
//!
//! * `version` (unsigned 64-bit integer): raised by the writer on every change. A node refuses a
//!   list older than the one it has, and a list with its own version but other members.
//! * `members` (non-empty array), each with
//!   * `name`: the member's identity (the pod name). 1–253 characters of `A–Z a–z 0–9 - . _`.
//!     Unique. The claim is keyed by name: the same name at a new address is the same member.
//!   * `address`: `host:port` where its gRPC listens — a DNS name, an IPv4 address or a
//!     bracketed IPv6 address, and a port 1–65535. Unique. Not resolved here.
//!   * `zone` (optional, default `""`): failure domain (the node's `topology.kubernetes.io/zone`);
//!     the same characters as a name. Members without a zone share the zone `""`.
//!
//! Unknown fields are errors (a misspelt `"zone"` must not silently drop zone spreading). The
//! order of members carries no meaning: the list is kept sorted by name.

use serde::{Deserialize, Serialize};

use crate::ring::claim::ClaimMember;
use crate::ring::RingError;

/// One member of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub name: String,
    pub address: String,
    #[serde(default)]
    pub zone: String,
}

impl Member {
    pub fn new(
        name: impl Into<String>,
        address: impl Into<String>,
        zone: impl Into<String>,
    ) -> Member {
        Member {
            name: name.into(),
            address: address.into(),
            zone: zone.into(),
        }
    }
}

/// A validated member list: non-empty, names and addresses unique and well formed, sorted by
/// name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemberList {
    version: u64,
    members: Vec<Member>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberListFile {
    version: u64,
    members: Vec<Member>,
}

/// Errors of the member list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembersError {
    #[error("member list is not valid JSON of the form {{\"version\": N, \"members\": [{{\"name\", \"address\", \"zone\"}}, ...]}}: {0}")]
    Syntax(String),
    #[error("member list version {version} has no members")]
    Empty { version: u64 },
    #[error("member name {name:?}: {reason}")]
    BadName { name: String, reason: &'static str },
    #[error("member {name:?} is listed twice")]
    DuplicateName { name: String },
    #[error("member {name:?} has a bad address {address:?}: {reason}")]
    BadAddress {
        name: String,
        address: String,
        reason: &'static str,
    },
    #[error("members {first:?} and {second:?} have the same address {address:?}")]
    DuplicateAddress {
        address: String,
        first: String,
        second: String,
    },
    #[error("member {name:?} has a bad zone {zone:?}: {reason}")]
    BadZone {
        name: String,
        zone: String,
        reason: &'static str,
    },
    #[error("member list version {new} is older than the current version {current}; refusing to go back")]
    VersionWentBackwards { current: u64, new: u64 },
    #[error("member list version {version} differs from the list this node already has under the same version; a changed list needs a higher version")]
    VersionReused { version: u64 },
    #[error("the claim's members do not match member list version {version}")]
    ClaimMismatch { version: u64 },
    #[error(transparent)]
    Ring(#[from] RingError),
}

/// Characters allowed in names and zones: those of Kubernetes object names and labels, which
/// are also safe in file names and logs.
fn check_word(s: &str) -> Result<(), &'static str> {
    if s.len() > 253 {
        return Err("longer than 253 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err("only A-Z a-z 0-9 - . _ are allowed");
    }
    Ok(())
}

/// `host:port` with a DNS name, an IPv4 address or a bracketed IPv6 address.
pub fn check_address(address: &str) -> Result<(), &'static str> {
    if address.contains("://") {
        return Err("write host:port, without a scheme");
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or("expected host:port (port missing)")?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {}
        _ => return Err("the port must be a number from 1 to 65535"),
    }
    if let Some(inner) = host.strip_prefix('[') {
        let ip = inner
            .strip_suffix(']')
            .ok_or("unclosed [ in an IPv6 address")?;
        return ip
            .parse::<std::net::Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| "not an IPv6 address inside [ ]");
    }
    if host.is_empty() {
        return Err("the host is empty");
    }
    if host.contains(':') {
        return Err("an IPv6 address must be written in brackets: [addr]:port");
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return Ok(());
    }
    if host.len() > 253 {
        return Err("the host name is longer than 253 characters");
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("every label of the host name must have 1 to 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err("the host name may only hold A-Z a-z 0-9 - and dots");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label of the host name cannot start or end with -");
        }
    }
    if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err("not a valid IPv4 address");
    }
    Ok(())
}

impl MemberList {
    /// Checks and sorts a list.
    pub fn new(version: u64, mut members: Vec<Member>) -> Result<MemberList, MembersError> {
        if members.is_empty() {
            return Err(MembersError::Empty { version });
        }
        for m in &members {
            if m.name.is_empty() {
                return Err(MembersError::BadName {
                    name: m.name.clone(),
                    reason: "empty",
                });
            }
            check_word(&m.name).map_err(|reason| MembersError::BadName {
                name: m.name.clone(),
                reason,
            })?;
            check_word(&m.zone).map_err(|reason| MembersError::BadZone {
                name: m.name.clone(),
                zone: m.zone.clone(),
                reason,
            })?;
            check_address(&m.address).map_err(|reason| MembersError::BadAddress {
                name: m.name.clone(),
                address: m.address.clone(),
                reason,
            })?;
        }
        members.sort();
        if let Some(w) = members.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(MembersError::DuplicateName {
                name: w[0].name.clone(),
            });
        }
        let mut by_address: Vec<&Member> = members.iter().collect();
        by_address.sort_by(|a, b| a.address.cmp(&b.address).then(a.name.cmp(&b.name)));
        if let Some(w) = by_address.windows(2).find(|w| w[0].address == w[1].address) {
            return Err(MembersError::DuplicateAddress {
                address: w[0].address.clone(),
                first: w[0].name.clone(),
                second: w[1].name.clone(),
            });
        }
        Ok(MemberList { version, members })
    }

    /// Parses the JSON document described in the module documentation.
    pub fn parse(text: &str) -> Result<MemberList, MembersError> {
        let f: MemberListFile =
            serde_json::from_str(text).map_err(|e| MembersError::Syntax(e.to_string()))?;
        MemberList::new(f.version, f.members)
    }

    /// The JSON document (members sorted by name), parseable by [`MemberList::parse`].
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a member list always serializes")
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Members, sorted by name.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn get(&self, name: &str) -> Option<&Member> {
        self.members
            .binary_search_by(|m| m.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.members[i])
    }

    /// What the claim needs of each member: name and zone.
    pub fn claim_members(&self) -> Vec<ClaimMember> {
        self.members
            .iter()
            .map(|m| ClaimMember::new(m.name.clone(), m.zone.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{
      "version": 3,
      "members": [
        {"name": "orders-1", "address": "orders-1.orders-headless.default.svc:8087", "zone": "eu-west-1b"},
        {"name": "orders-0", "address": "orders-0.orders-headless.default.svc:8087", "zone": "eu-west-1a"},
        {"name": "orders-2", "address": "10.0.0.7:8087"}
      ]
    }"#;

    #[test]
    fn parses_sorts_and_round_trips() {
        let l = MemberList::parse(DOC).unwrap();
        assert_eq!(l.version(), 3);
        let names: Vec<&str> = l.members().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["orders-0", "orders-1", "orders-2"]);
        assert_eq!(l.get("orders-1").unwrap().zone, "eu-west-1b");
        assert_eq!(l.get("orders-2").unwrap().zone, "", "zone is optional");
        assert_eq!(MemberList::parse(&l.to_json()).unwrap(), l);
    }

    #[test]
    fn bad_documents_are_refused_with_typed_errors() {
        let one = |name: &str, address: &str, zone: &str| {
            format!(
                r#"{{"version": 1, "members": [{{"name": "{name}", "address": "{address}", "zone": "{zone}"}}]}}"#
            )
        };
        let err = |doc: &str| MemberList::parse(doc).unwrap_err();
        assert!(matches!(err("not json"), MembersError::Syntax(_)));
        assert!(matches!(
            err(r#"{"members": []}"#),
            MembersError::Syntax(m) if m.contains("version")
        ));
        assert!(matches!(
            err(r#"{"version": 1, "members": [{"name": "a", "address": "a:1", "zome": "x"}]}"#),
            MembersError::Syntax(m) if m.contains("zome")
        ));
        assert!(matches!(
            err(r#"{"version": -1, "members": []}"#),
            MembersError::Syntax(_)
        ));
        assert_eq!(
            err(r#"{"version": 4, "members": []}"#),
            MembersError::Empty { version: 4 }
        );
        assert!(matches!(
            err(&one("", "a:1", "")),
            MembersError::BadName { .. }
        ));
        assert!(matches!(
            err(&one("a b", "a:1", "")),
            MembersError::BadName { .. }
        ));
        assert!(matches!(
            err(&one("a", "a:1", "zone a")),
            MembersError::BadZone { .. }
        ));
        assert_eq!(
            err(r#"{"version": 1, "members": [
                {"name": "a", "address": "h1:1"}, {"name": "b", "address": "h2:1"}, {"name": "a", "address": "h3:1"}]}"#),
            MembersError::DuplicateName { name: "a".into() }
        );
        assert_eq!(
            err(
                r#"{"version": 1, "members": [{"name": "b", "address": "h:1"}, {"name": "a", "address": "h:1"}]}"#
            ),
            MembersError::DuplicateAddress {
                address: "h:1".into(),
                first: "a".into(),
                second: "b".into()
            }
        );
    }

    #[test]
    fn address_table() {
        let good = [
            "orders-0.orders-headless.default.svc:8087",
            "localhost:1",
            "node.:65535",
            "10.1.2.3:8087",
            "[::1]:8087",
            "[fe80::1]:8087",
        ];
        for a in good {
            assert_eq!(check_address(a), Ok(()), "{a}");
        }
        let bad = [
            ("orders-0", "port missing"),
            (":8087", "empty"),
            ("host:0", "port"),
            ("host:65536", "port"),
            ("host:+80", "port"),
            ("host:", "port"),
            ("::1:8087", "brackets"),
            ("[::1:8087", "unclosed"),
            ("[nope]:8087", "IPv6"),
            ("-bad.example:80", "start or end"),
            ("a..b:80", "1 to 63"),
            ("under_score:80", "may only hold"),
            ("10.0.0.256:80", "IPv4"),
            ("http://h:80", "scheme"),
        ];
        for (a, why) in bad {
            let e = check_address(a).unwrap_err();
            assert!(e.contains(why), "{a}: {e}");
        }
        let e = MemberList::new(1, vec![Member::new("a", "h", "")]).unwrap_err();
        assert!(
            e.to_string().contains("\"a\"") && e.to_string().contains("\"h\""),
            "{e}"
        );
    }
}
