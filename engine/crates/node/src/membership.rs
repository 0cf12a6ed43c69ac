//! The member list this node runs with, and its claim (who owns each partition).
//!
//! Kubernetes is the source of truth: the operator writes a versioned JSON member list into the
//! cluster's ConfigMap, which the node reads from `[cluster] members_file` (re-read every second:
//! ConfigMap volumes update in place) and also takes from the `SetMembers` admin RPC. Every node
//! computes the same claim from (members, ring_size, n_val). The list the node runs with is
//! *committed* to `<data_dir>/MEMBERS` (with the claim's owners) before it is used, so a restart
//! keeps it even if the file is gone or older.
//!
//! A new list is applied through `levee_cluster::apply_list`: the same claim (new addresses, or
//! only a newer version) is adopted at once; a list that moves partitions starts a *ring
//! transition* — requests keep going by the claim in use (the routing claim) while each moving
//! partition is streamed to its next owner (`transition.rs`), and the target claim routes once
//! every move is done. Routing list, routing claim and target are committed together, so a
//! restart resumes the transition where the list left it.
//!
//! Where the first list comes from, in order: the committed `MEMBERS`; the members file; the
//! `[membership] members` of the config; else this node alone. The last two (and a members file in
//! the old one-address-per-line form) are *provisional* (version 0): not committed, and replaced by
//! the first versioned list whatever it moves — nothing was placed by a committed claim yet.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use levee_cluster::{
    apply_list, Claim, ListChange, Member, MemberList, MembersError, RingParams, RingSize,
    RingState,
};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::config::NodeConfig;

/// The committed member list and claim, in `<data_dir>/MEMBERS`.
pub const MEMBERS_FILE: &str = "MEMBERS";

/// The version of a list not from the operator (the old one-address-per-line file, `[membership]
/// members`, or the node alone): provisional, never committed, replaced by the first versioned
/// list whatever it moves (the operator's first list is version 1).
pub const PROVISIONAL: u64 = 0;

/// The member list, the claim requests are routed with, and the transition under way.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// The newest member list.
    pub list: MemberList,
    /// The routing claim.
    pub claim: Claim,
    /// The list the routing claim was made for (members leaving in a transition are found here).
    pub routing_list: MemberList,
    /// The claim a transition moves to (`None`: none runs).
    pub target: Option<Claim>,
}

impl ClusterView {
    /// A view with no transition.
    pub fn settled(list: MemberList, claim: Claim) -> ClusterView {
        ClusterView::from(RingState::settled(list, claim))
    }

    /// A member by name, leaving members included.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.list.get(name).or_else(|| self.routing_list.get(name))
    }

    /// Every member, leaving members included, each once.
    pub fn all_members(&self) -> impl Iterator<Item = &Member> {
        let listed = self.list.members();
        listed.iter().chain(
            self.routing_list
                .members()
                .iter()
                .filter(move |m| !listed.iter().any(|l| l.name == m.name)),
        )
    }

    /// The ring as `levee_cluster` reasons about it.
    pub fn ring(&self) -> RingState {
        RingState {
            list: self.list.clone(),
            routing_list: self.routing_list.clone(),
            routing: self.claim.clone(),
            target: self.target.clone(),
        }
    }

    /// The owner `partition` moves to in the transition under way, if it moves.
    pub fn next_owner(&self, partition: u32) -> Option<&str> {
        levee_cluster::next_owner(&self.claim, self.target.as_ref(), partition)
    }
}

impl From<RingState> for ClusterView {
    fn from(r: RingState) -> ClusterView {
        ClusterView {
            list: r.list,
            claim: r.routing,
            routing_list: r.routing_list,
            target: r.target,
        }
    }
}

/// The routing list of a committed transition (when it differs from the newest list).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommittedList {
    version: u64,
    members: Vec<Member>,
}

/// What `MEMBERS` holds.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Committed {
    version: u64,
    members: Vec<Member>,
    ring_size: u32,
    n_val: u32,
    /// Owner of each partition under the routing claim, by name.
    owners: Vec<String>,
    /// During a transition that removes members: the list the routing claim was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    routing: Option<CommittedList>,
    /// During a transition: owner of each partition under the target claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_owners: Option<Vec<String>>,
}

/// What applying a new list did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Same version, same members.
    Unchanged,
    /// Adopted: the claim kept every owner (or a transition was cancelled or retargeted).
    Adopted { from: u64, to: u64 },
    /// Adopted, and a ring transition moves `moves` partitions (see `transition.rs`).
    Transition { from: u64, to: u64, moves: usize },
}

/// The node's membership: the view in use, where it is committed, and the members file.
pub struct Membership {
    data_dir: PathBuf,
    view: RwLock<Arc<ClusterView>>,
    /// Serializes applies (file watcher and RPC) so each one classifies against the view it
    /// replaces.
    apply_lock: Mutex<()>,
    members_file: Option<PathBuf>,
}

impl Membership {
    /// The committed view, or the first one (see the module documentation), committed.
    /// `listening` is the bound gRPC address (the node's own address when it is alone).
    pub fn load(cfg: &NodeConfig, listening: SocketAddr) -> Result<Membership> {
        let ring_size = RingSize::new(cfg.cluster.ring_size)?;
        let params = RingParams::new(ring_size, cfg.n_val())?;
        let view = match read_committed(&cfg.data_dir, params)? {
            Some(v) => v,
            None => {
                let list = first_list(cfg, listening)?;
                let claim = Claim::initial(params, &list.claim_members())?;
                let v = ClusterView::settled(list, claim);
                if v.list.version() == PROVISIONAL {
                    log::info!(
                        "membership: no versioned member list yet; running with a provisional one \
                         ({} members, version 0) until the operator's list arrives",
                        v.list.members().len()
                    );
                } else {
                    commit(&cfg.data_dir, &v)?;
                    log::info!(
                        "membership: first member list, version {} with {} members, committed to {}",
                        v.list.version(),
                        v.list.members().len(),
                        cfg.data_dir.join(MEMBERS_FILE).display()
                    );
                }
                v
            }
        };
        if view.list.get(&cfg.node_name).is_none() {
            log::warn!(
                "membership: this node ({}) is not in member list version {}: it owns no partition",
                cfg.node_name,
                view.list.version()
            );
        }
        let m = Membership {
            data_dir: cfg.data_dir.clone(),
            view: RwLock::new(Arc::new(view)),
            apply_lock: Mutex::new(()),
            members_file: cfg.cluster.members_file.clone(),
        };
        // A members file newer than what was committed (the operator changed it while the node
        // was down) is applied now, under the same rule as later changes.
        if let Some(f) = m.members_file.clone() {
            m.apply_file(&f);
        }
        Ok(m)
    }

    /// The view in use.
    pub fn view(&self) -> Arc<ClusterView> {
        self.view.read().clone()
    }

    /// Apply a new list: commit it, then use it (one that moves partitions starts a ring
    /// transition). Refused (typed error, view unchanged) when it goes back in version or reuses
    /// a version for other content.
    pub fn apply(&self, new: MemberList) -> Result<Applied, ApplyError> {
        let _one = self.apply_lock.lock();
        let cur = self.view();
        let from = cur.list.version();
        let to = new.version();
        if from == PROVISIONAL {
            // Nothing was committed: the first versioned list is taken as it is (its own claim).
            if new == cur.list {
                return Ok(Applied::Unchanged);
            }
            let claim = Claim::initial(cur.claim.params(), &new.claim_members())
                .map_err(MembersError::from)?;
            let v = ClusterView::settled(new, claim);
            if to != PROVISIONAL {
                commit(&self.data_dir, &v).map_err(ApplyError::Commit)?;
            }
            *self.view.write() = Arc::new(v);
            log::info!("membership: member list version {to} replaces the provisional list");
            return Ok(Applied::Adopted { from, to });
        }
        let v = match apply_list(&cur.ring(), &new)? {
            ListChange::Unchanged => return Ok(Applied::Unchanged),
            ListChange::Adopted(state) => ClusterView::from(state),
        };
        commit(&self.data_dir, &v).map_err(ApplyError::Commit)?;
        let moves = v.ring().moves();
        let applied = if moves.is_empty() {
            if cur.target.is_some() {
                log::info!(
                    "membership: member list version {to} (was {from}) names the routing claim's \
                     members again: the ring transition is cancelled, nothing moves"
                );
            } else {
                log::info!("membership: adopted member list version {to} (was {from}); the claim is unchanged");
            }
            Applied::Adopted { from, to }
        } else {
            let mut to_whom: std::collections::BTreeMap<&str, usize> = Default::default();
            for m in &moves {
                *to_whom.entry(m.to.as_str()).or_default() += 1;
            }
            log::info!(
                "membership: member list version {to} (was {from}) starts a ring transition: {} of {} \
                 partitions move ({}); requests keep the current owners until every move is done",
                moves.len(),
                v.claim.ring_size(),
                to_whom
                    .iter()
                    .map(|(n, c)| format!("{c} to {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Applied::Transition {
                from,
                to,
                moves: moves.len(),
            }
        };
        *self.view.write() = Arc::new(v);
        Ok(applied)
    }

    /// Every move of the transition to member list `version` is done: the target routes from
    /// now on (committed first). False when no transition to that version is under way (it
    /// completed already, or a newer list changed it).
    pub fn complete(&self, version: u64) -> Result<bool> {
        let _one = self.apply_lock.lock();
        let cur = self.view();
        if cur.target.is_none() || cur.list.version() != version {
            return Ok(false);
        }
        let v = ClusterView::from(cur.ring().completed());
        commit(&self.data_dir, &v)?;
        *self.view.write() = Arc::new(v);
        log::info!(
            "membership: ring transition to member list version {version} complete: the new claim routes"
        );
        Ok(true)
    }

    /// Read and apply the members file, logging the outcome. A missing or unreadable file keeps
    /// the current view.
    pub fn apply_file(&self, path: &Path) -> Option<Result<Applied, ApplyError>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                log::error!("membership: reading {}: {e}", path.display());
                return None;
            }
        };
        let parsed = parse_members_text(&text).map_err(ApplyError::from);
        let r = parsed.and_then(|list| self.apply(list));
        if let Err(e) = &r {
            log::error!("membership: {}: {e}", path.display());
        }
        Some(r)
    }

    /// Re-read the members file every `every` (ConfigMap volumes change in place, by a symlink
    /// swap) and apply what changed. Runs until the process ends.
    pub fn watch(self: Arc<Self>, every: Duration) {
        let Some(path) = self.members_file.clone() else {
            return;
        };
        std::thread::Builder::new()
            .name("levee-members-watch".into())
            .spawn(move || {
                let mut last: Option<String> = None;
                loop {
                    std::thread::sleep(every);
                    let text = std::fs::read_to_string(&path).ok();
                    if text.is_some() && text != last {
                        self.apply_file(&path);
                        last = text;
                    }
                }
            })
            .expect("starting the members watcher");
    }
}

/// Why a list was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Refused(#[from] MembersError),
    #[error("committing the member list: {0:#}")]
    Commit(anyhow::Error),
}

/// The members file: the JSON list, or (as written before the JSON format) one `host:port` or
/// `name=host:port` per line, taken as provisional (version 0).
pub fn parse_members_text(text: &str) -> Result<MemberList, MembersError> {
    if text.trim_start().starts_with('{') {
        return MemberList::parse(text);
    }
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    legacy_list(&lines)
}

/// `host:port` (named by its first DNS label) or `name=host:port`, provisional (version 0).
fn legacy_list(entries: &[String]) -> Result<MemberList, MembersError> {
    let members = entries
        .iter()
        .map(|m| {
            let (name, address) = m
                .split_once('=')
                .unwrap_or((m.split(['.', ':']).next().unwrap_or(m), m));
            Member::new(name, address, "")
        })
        .collect();
    MemberList::new(PROVISIONAL, members)
}

fn first_list(cfg: &NodeConfig, listening: SocketAddr) -> Result<MemberList> {
    if let Some(f) = &cfg.cluster.members_file {
        if f.exists() {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            return parse_members_text(&text)
                .with_context(|| format!("members file {}", f.display()));
        }
    }
    if !cfg.membership.members.is_empty() {
        return legacy_list(&cfg.membership.members).context("[membership] members");
    }
    let me = Member::new(cfg.node_name.clone(), advertised(listening), "");
    MemberList::new(PROVISIONAL, vec![me]).context("this node as the only member")
}

/// The address others reach this node at: `LEVEE_ADVERTISE_ADDR`, else the bound gRPC address
/// (with 127.0.0.1 for an unspecified IP).
pub fn advertised(listening: SocketAddr) -> String {
    if let Ok(a) = std::env::var("LEVEE_ADVERTISE_ADDR") {
        if !a.is_empty() {
            return a;
        }
    }
    let mut l = listening;
    if l.ip().is_unspecified() {
        l.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    l.to_string()
}

fn read_committed(data_dir: &Path, params: RingParams) -> Result<Option<ClusterView>> {
    let path = data_dir.join(MEMBERS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let c: Committed = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is damaged; restore it or remove it to start from the members file",
            path.display()
        )
    })?;
    if c.ring_size != params.ring_size().get() || c.n_val != params.n_val() {
        anyhow::bail!(
            "{} was committed with ring_size {} and n_val {}, the config says {} and {}: \
             changing either needs a ring transition",
            path.display(),
            c.ring_size,
            c.n_val,
            params.ring_size(),
            params.n_val()
        );
    }
    let list = MemberList::new(c.version, c.members)
        .with_context(|| format!("member list in {}", path.display()))?;
    let routing_list = match c.routing {
        Some(r) => MemberList::new(r.version, r.members)
            .with_context(|| format!("routing member list in {}", path.display()))?,
        None => list.clone(),
    };
    let v = view_of(
        params,
        list,
        routing_list,
        &c.owners,
        c.target_owners.as_deref(),
    )
    .with_context(|| format!("claim in {}", path.display()))?;
    Ok(Some(v))
}

/// A view from its lists and owners (as committed, or as a peer reports its ring).
pub fn view_of(
    params: RingParams,
    list: MemberList,
    routing_list: MemberList,
    owners: &[String],
    target_owners: Option<&[String]>,
) -> Result<ClusterView> {
    let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
    let claim = Claim::from_owners(params, &routing_list.claim_members(), &owners)
        .context("routing claim")?;
    let target = match target_owners {
        Some(t) if !t.is_empty() => {
            let t: Vec<&str> = t.iter().map(String::as_str).collect();
            Some(Claim::from_owners(params, &list.claim_members(), &t).context("target claim")?)
        }
        _ => None,
    };
    Ok(ClusterView {
        list,
        claim,
        routing_list,
        target,
    })
}

/// Commit a view taken from a peer (a member joining with an empty data directory), so the node
/// starts with the ring the others route with.
pub fn commit_peer_view(data_dir: &Path, v: &ClusterView) -> Result<()> {
    commit(data_dir, v)
}

/// Write `MEMBERS` durably: temp file, fsync, rename, fsync of the directory.
fn commit(data_dir: &Path, v: &ClusterView) -> Result<()> {
    use std::io::Write;
    let c = Committed {
        version: v.list.version(),
        members: v.list.members().to_vec(),
        ring_size: v.claim.ring_size().get(),
        n_val: v.claim.n_val(),
        owners: v.claim.owners().map(String::from).collect(),
        routing: (v.routing_list != v.list).then(|| CommittedList {
            version: v.routing_list.version(),
            members: v.routing_list.members().to_vec(),
        }),
        target_owners: v
            .target
            .as_ref()
            .map(|t| t.owners().map(String::from).collect()),
    };
    let path = data_dir.join(MEMBERS_FILE);
    let tmp = data_dir.join(format!("{MEMBERS_FILE}.tmp"));
    let body = serde_json::to_vec_pretty(&c)?;
    {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(&body)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsyncing {}", data_dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDR: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8087);

    fn cfg(dir: &Path, members_file: Option<PathBuf>) -> NodeConfig {
        let mut c = NodeConfig {
            data_dir: dir.to_path_buf(),
            node_name: "n1".into(),
            ..NodeConfig::default()
        };
        c.cluster.ring_size = 16;
        c.cluster.n_val = Some(3);
        c.cluster.members_file = members_file;
        c
    }

    fn list(version: u64, names: &[&str]) -> MemberList {
        MemberList::new(
            version,
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Member::new(*n, format!("10.0.0.{}:8087", i + 1), ""))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn the_members_file_gives_the_first_list_and_is_committed() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("members.json");
        std::fs::write(&f, list(4, &["n1", "n2", "n3"]).to_json()).unwrap();
        let m = Membership::load(&cfg(d.path(), Some(f.clone())), ADDR).unwrap();
        assert_eq!(m.view().list.version(), 4);
        assert_eq!(m.view().claim.partitions_of("n1").len(), 6);
        // The file is gone: the committed list and claim come back as they were.
        std::fs::remove_file(&f).unwrap();
        let again = Membership::load(&cfg(d.path(), Some(f)), ADDR).unwrap();
        assert_eq!(again.view().list, m.view().list);
        assert_eq!(
            again.view().claim.owners().collect::<Vec<_>>(),
            m.view().claim.owners().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_new_address_is_adopted_and_a_join_starts_a_transition_that_survives_a_restart() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("members.json");
        std::fs::write(&f, list(1, &["n1", "n2", "n3"]).to_json()).unwrap();
        let m = Membership::load(&cfg(d.path(), Some(f.clone())), ADDR).unwrap();
        let owners: Vec<String> = m.view().claim.owners().map(String::from).collect();

        let mut moved = list(2, &["n1", "n2", "n3"]).members().to_vec();
        moved[1].address = "10.9.9.9:8087".into();
        let moved = MemberList::new(2, moved).unwrap();
        assert_eq!(
            m.apply(moved.clone()).unwrap(),
            Applied::Adopted { from: 1, to: 2 }
        );
        assert_eq!(m.view().list.get("n2").unwrap().address, "10.9.9.9:8087");
        assert_eq!(m.apply(moved).unwrap(), Applied::Unchanged);

        let Applied::Transition {
            from: 2,
            to: 3,
            moves,
        } = m.apply(list(3, &["n1", "n2", "n3", "n4"])).unwrap()
        else {
            panic!("a join starts a transition")
        };
        assert!(moves >= 3, "n4 takes about a quarter of 16: {moves}");
        let v = m.view();
        assert_eq!(v.list.version(), 3);
        assert_eq!(
            v.claim.owners().map(String::from).collect::<Vec<_>>(),
            owners,
            "requests keep the old owners during the transition"
        );
        let target: Vec<String> = v
            .target
            .as_ref()
            .unwrap()
            .owners()
            .map(String::from)
            .collect();
        assert_eq!(target.iter().filter(|o| *o == "n4").count(), moves);
        let back = m.apply(list(1, &["n1", "n2", "n3"])).unwrap_err();
        assert!(back.to_string().contains("back"), "{back}");

        // Committed: a restart (members file gone) resumes the same transition.
        std::fs::remove_file(&f).unwrap();
        let again = Membership::load(&cfg(d.path(), Some(f.clone())), ADDR).unwrap();
        let w = again.view();
        assert_eq!(w.list, v.list);
        assert_eq!(
            w.claim.owners().collect::<Vec<_>>(),
            v.claim.owners().collect::<Vec<_>>()
        );
        assert_eq!(w.target, v.target);
        // Completing another version does nothing; completing this one makes the target route.
        assert!(!again.complete(2).unwrap());
        assert!(again.complete(3).unwrap());
        assert_eq!(
            again
                .view()
                .claim
                .owners()
                .map(String::from)
                .collect::<Vec<_>>(),
            target
        );
        assert!(again.view().target.is_none());
        let third = Membership::load(&cfg(d.path(), Some(f)), ADDR).unwrap();
        assert!(third.view().target.is_none());
        assert_eq!(
            third
                .view()
                .claim
                .owners()
                .map(String::from)
                .collect::<Vec<_>>(),
            target
        );
    }

    #[test]
    fn a_leaving_member_stays_addressable_until_the_transition_completes() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("members.json");
        std::fs::write(&f, list(1, &["n1", "n2", "n3", "n4"]).to_json()).unwrap();
        let m = Membership::load(&cfg(d.path(), Some(f.clone())), ADDR).unwrap();
        assert!(matches!(
            m.apply(list(2, &["n1", "n2", "n3"])).unwrap(),
            Applied::Transition { .. }
        ));
        let again = Membership::load(&cfg(d.path(), Some(f)), ADDR).unwrap();
        assert_eq!(again.view().member("n4").unwrap().address, "10.0.0.4:8087");
        assert!(again.view().list.get("n4").is_none());
        assert!(again.complete(2).unwrap());
        assert!(again.view().member("n4").is_none());
    }

    #[test]
    fn the_committed_list_must_match_ring_size_and_n_val() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("members.json");
        std::fs::write(&f, list(1, &["n1"]).to_json()).unwrap();
        Membership::load(&cfg(d.path(), Some(f)), ADDR).unwrap();
        let mut c = cfg(d.path(), None);
        c.cluster.n_val = Some(2);
        let e = Membership::load(&c, ADDR).err().expect("n_val changed");
        assert!(format!("{e:#}").contains("n_val 3"), "{e:#}");
    }

    #[test]
    fn the_old_one_address_per_line_file_still_reads() {
        let l =
            parse_members_text("# members\norders-0.h.ns.svc:8087\nn2=10.0.0.2:8087\n\n").unwrap();
        assert_eq!(l.version(), PROVISIONAL);
        let names: Vec<&str> = l.members().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["n2", "orders-0"]);
        assert!(parse_members_text("{\"version\": 1}").is_err());
    }

    #[test]
    fn alone_the_node_is_its_own_provisional_member_until_a_versioned_list_comes() {
        let d = tempfile::tempdir().unwrap();
        let m = Membership::load(&cfg(d.path(), None), ADDR).unwrap();
        assert_eq!(m.view().list.version(), PROVISIONAL);
        assert_eq!(m.view().list.members().len(), 1);
        assert_eq!(m.view().claim.partitions_of("n1").len(), 16);
        assert!(
            !d.path().join(MEMBERS_FILE).exists(),
            "provisional: not committed"
        );
        // The operator's first list moves partitions, and is taken all the same.
        assert_eq!(
            m.apply(list(1, &["n1", "n2", "n3"])).unwrap(),
            Applied::Adopted { from: 0, to: 1 }
        );
        assert_eq!(m.view().claim.partitions_of("n1").len(), 6);
        let again = Membership::load(&cfg(d.path(), None), ADDR).unwrap();
        assert_eq!(again.view().list.version(), 1, "committed from then on");
        // Committed: now a join is a ring transition.
        assert!(matches!(
            again.apply(list(2, &["n1", "n2", "n3", "n4"])).unwrap(),
            Applied::Transition { .. }
        ));
    }
}
