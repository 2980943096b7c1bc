//! Blocks: senders refused before anything of theirs is stored, for the whole server or for one
//! agent. They come from `[[moderation.blocks]]` and from the `blocks` table, which the operator
//! API and console write at run time and every instance reads again every
//! [`REFRESH_INTERVAL`].
//!
//! A block names a sender (an ActivityPub actor IRI or handle, a mail address, an A2A caller's
//! evidence subject), a domain (an instance or mail domain, its subdomains included) or an
//! issuer (who vouches for an A2A caller or a connector's forwarded identity), as a pattern in
//! which `*` stands for any run of characters, compared without regard to case. Checking a
//! sender against a thousand blocks costs a few hash look-ups, not a thousand pattern matches:
//! patterns without `*`, or with one only at their start or end, are indexed; only the rest are
//! tried one by one.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::BlockConfig;
use crate::error::{Error, Result};
use crate::message::Sender;
use crate::store::Db;
use crate::store::audit::{self, Actor};
use crate::store::blocks::{self as store, BlockRow};

/// How often an instance reads the `blocks` table again, to see what other instances added.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// What a block's pattern is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BlockKind {
    /// The sender's address and the subjects of its identity evidence.
    Sender,
    /// The sender's instance or mail domain, subdomains included.
    Domain,
    /// The issuers of the sender's identity evidence.
    Issuer,
}

impl BlockKind {
    /// The name stored and shown.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Sender => "sender",
            Self::Domain => "domain",
            Self::Issuer => "issuer",
        }
    }

    /// The kind named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "sender" => Some(Self::Sender),
            "domain" => Some(Self::Domain),
            "issuer" => Some(Self::Issuer),
            _ => None,
        }
    }
}

/// Where a block comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BlockSource {
    /// `[[moderation.blocks]]`: removed by editing the file.
    Config,
    /// Added at run time (operator API or console), stored in the database.
    Api,
}

/// One block, from the file or the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Block {
    /// `config-{n}` for the file's n-th block (from 0), else the stored id.
    pub id: String,
    /// What the pattern is matched against.
    pub kind: BlockKind,
    /// The pattern as given.
    pub pattern: String,
    /// The one agent it applies to; every agent when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Why, for the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where it comes from.
    pub source: BlockSource,
    /// When it was stored (unix ms); absent for the file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
}

impl Block {
    /// The file's `i`-th block.
    fn from_config(i: usize, b: &BlockConfig) -> Option<Self> {
        let (kind, pattern) = match (&b.sender, &b.domain, &b.issuer) {
            (Some(p), None, None) => (BlockKind::Sender, p),
            (None, Some(p), None) => (BlockKind::Domain, p),
            (None, None, Some(p)) => (BlockKind::Issuer, p),
            _ => return None,
        };
        Some(Self {
            id: format!("config-{i}"),
            kind,
            pattern: pattern.clone(),
            agent: b.agent.clone(),
            reason: b.reason.clone(),
            source: BlockSource::Config,
            created_at: None,
        })
    }

    fn from_row(r: BlockRow) -> Option<Self> {
        Some(Self {
            kind: BlockKind::parse(&r.kind)?,
            id: r.id,
            pattern: r.pattern,
            agent: r.agent,
            reason: r.reason,
            source: BlockSource::Api,
            created_at: Some(r.created_at),
        })
    }
}

/// A block to store (`POST /api/v1/blocks`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewBlock {
    /// What the pattern is matched against.
    pub kind: BlockKind,
    /// The pattern.
    pub pattern: String,
    /// The one agent it applies to.
    #[serde(default)]
    pub agent: Option<String>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What is known of a sender, to check against blocks: lower-cased addresses, domains and
/// issuers.
#[derive(Debug, Default)]
pub struct Who {
    senders: Vec<String>,
    domains: Vec<String>,
    issuers: Vec<String>,
}

impl Who {
    /// A sender as a message carries it: its address (and its domain), and each piece of its
    /// identity evidence's subject (and the subject's domain) and issuer.
    #[must_use]
    pub fn of(sender: &Sender) -> Self {
        let mut who = Self::default();
        who.add_sender(&sender.address);
        for e in sender.identities.as_deref().unwrap_or_default() {
            who.add_sender(&e.subject);
            push_new(&mut who.issuers, e.issuer.to_ascii_lowercase());
        }
        who
    }

    /// Only a domain (a remote host before anything else of it is known).
    #[must_use]
    pub fn domain(host: &str) -> Self {
        let mut who = Self::default();
        push_new(&mut who.domains, strip_port(host).to_ascii_lowercase());
        who
    }

    /// Adds an address: an IRI, a handle, a mail address or `mailto:` URI, with its domain.
    #[must_use]
    pub fn with_sender(mut self, address: &str) -> Self {
        self.add_sender(address);
        self
    }

    fn add_sender(&mut self, address: &str) {
        let address = address.trim();
        if address.is_empty() {
            return;
        }
        let lower = address.to_ascii_lowercase();
        let bare = lower.strip_prefix("mailto:").unwrap_or(&lower).to_owned();
        if let Some(host) = domain_of(&bare) {
            push_new(&mut self.domains, host);
        }
        if bare != lower {
            push_new(&mut self.senders, bare);
        }
        push_new(&mut self.senders, lower);
    }
}

fn push_new(v: &mut Vec<String>, s: String) {
    if !s.is_empty() && !v.contains(&s) {
        v.push(s);
    }
}

fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// The host of an IRI, or the domain of a handle or mail address.
fn domain_of(address: &str) -> Option<String> {
    if let Some((_, rest)) = address.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next()?;
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        return Some(strip_port(host).to_owned());
    }
    address
        .rsplit_once('@')
        .map(|(_, d)| strip_port(d).to_owned())
        .filter(|d| !d.is_empty())
}

/// Patterns of one kind, indexed: exact strings, `lit*` prefixes and `*lit` suffixes by hash
/// (looked up for each length some pattern has), the rest tried in turn. Values are indexes
/// into the set's blocks.
#[derive(Debug, Default)]
struct Index {
    exact: HashMap<String, Vec<usize>>,
    prefixes: HashMap<String, Vec<usize>>,
    prefix_lens: BTreeSet<usize>,
    suffixes: HashMap<String, Vec<usize>>,
    suffix_lens: BTreeSet<usize>,
    globs: Vec<(crate::access::Glob, usize)>,
}

impl Index {
    fn add(&mut self, pattern: &str, at: usize) {
        let p = pattern.trim().to_ascii_lowercase();
        let stars = p.matches('*').count();
        if stars == 0 {
            self.exact.entry(p).or_default().push(at);
        } else if stars == 1 && p.ends_with('*') {
            let lit = p.trim_end_matches('*').to_owned();
            self.prefix_lens.insert(lit.len());
            self.prefixes.entry(lit).or_default().push(at);
        } else if stars == 1 && p.starts_with('*') {
            let lit = p.trim_start_matches('*').to_owned();
            self.suffix_lens.insert(lit.len());
            self.suffixes.entry(lit).or_default().push(at);
        } else {
            self.globs.push((crate::access::Glob::new(&p), at));
        }
    }

    /// Hands `found` the index of every block whose pattern matches `text` (lower-case).
    fn matches(&self, text: &str, found: &mut impl FnMut(usize)) {
        let mut each = |v: Option<&Vec<usize>>| v.into_iter().flatten().for_each(|&at| found(at));
        each(self.exact.get(text));
        for &len in self.prefix_lens.range(..=text.len()) {
            each(text.get(..len).and_then(|p| self.prefixes.get(p)));
        }
        for &len in self.suffix_lens.range(..=text.len()) {
            each(
                text.get(text.len() - len..)
                    .and_then(|s| self.suffixes.get(s)),
            );
        }
        for (glob, at) in &self.globs {
            if glob.matches(text) {
                found(*at);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty()
            && self.prefixes.is_empty()
            && self.suffixes.is_empty()
            && self.globs.is_empty()
    }
}

/// Every block in force, indexed by kind.
#[derive(Debug, Default)]
struct BlockSet {
    blocks: Vec<Block>,
    senders: Index,
    domains: Index,
    issuers: Index,
}

impl BlockSet {
    fn new(blocks: Vec<Block>) -> Self {
        let mut set = Self::default();
        for (at, b) in blocks.iter().enumerate() {
            let index = match b.kind {
                BlockKind::Sender => &mut set.senders,
                BlockKind::Domain => &mut set.domains,
                BlockKind::Issuer => &mut set.issuers,
            };
            index.add(&b.pattern, at);
        }
        set.blocks = blocks;
        set
    }

    /// The first block over `who` that applies to `agent` (or, without an agent, a
    /// server-wide one).
    fn find(&self, agent: Option<&str>, who: &Who) -> Option<&Block> {
        if self.blocks.is_empty() {
            return None;
        }
        // The first block in order that applies to `agent`.
        let mut first: Option<usize> = None;
        let mut hits = |at: usize| {
            let applies = self.blocks.get(at).is_some_and(|b| {
                b.agent
                    .as_deref()
                    .is_none_or(|a| agent.is_some_and(|x| a.eq_ignore_ascii_case(x)))
            });
            if applies && first.is_none_or(|f| at < f) {
                first = Some(at);
            }
        };
        if !self.senders.is_empty() {
            for s in &who.senders {
                self.senders.matches(s, &mut hits);
            }
        }
        if !self.domains.is_empty() {
            for d in &who.domains {
                // A domain's block covers its subdomains: try the domain and each parent (an
                // IP address has no parents).
                let mut rest = d.as_str();
                loop {
                    self.domains.matches(rest, &mut hits);
                    if rest.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                        break;
                    }
                    match rest.split_once('.') {
                        Some((_, parent)) if parent.contains('.') => rest = parent,
                        _ => break,
                    }
                }
            }
        }
        if !self.issuers.is_empty() {
            for i in &who.issuers {
                self.issuers.matches(i, &mut hits);
            }
        }
        first.and_then(|at| self.blocks.get(at))
    }
}

/// The blocks in force: the file's and the database's, read again every
/// [`REFRESH_INTERVAL`] and at once after this instance changes them.
#[derive(Debug)]
pub struct Blocks {
    configured: Vec<Block>,
    set: RwLock<Arc<BlockSet>>,
}

impl Blocks {
    /// The file's blocks only, until [`Blocks::refresh`] reads the database's.
    #[must_use]
    pub fn new(configured: &[BlockConfig]) -> Self {
        let configured: Vec<Block> = configured
            .iter()
            .enumerate()
            .filter_map(|(i, b)| Block::from_config(i, b))
            .collect();
        Self {
            set: RwLock::new(Arc::new(BlockSet::new(configured.clone()))),
            configured,
        }
    }

    fn current(&self) -> Arc<BlockSet> {
        Arc::clone(&self.set.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The block that refuses `who` for `agent`, or for every agent when `agent` is `None`
    /// (a check made before the recipient is known only finds server-wide blocks).
    #[must_use]
    pub fn find(&self, agent: Option<&str>, who: &Who) -> Option<Block> {
        self.current().find(agent, who).cloned()
    }

    /// Whether any block is in force (nothing to check otherwise).
    #[must_use]
    pub fn any(&self) -> bool {
        !self.current().blocks.is_empty()
    }

    /// Every block in force: the file's, then the stored ones oldest first.
    #[must_use]
    pub fn list(&self) -> Vec<Block> {
        self.current().blocks.clone()
    }

    /// Reads the stored blocks again.
    ///
    /// # Errors
    /// Database errors (the blocks in force stay as they were).
    pub async fn refresh(&self, db: &Db) -> Result<()> {
        let rows = store::list(db).await?;
        let mut blocks = self.configured.clone();
        blocks.extend(rows.into_iter().filter_map(Block::from_row));
        let set = Arc::new(BlockSet::new(blocks));
        *self.set.write().unwrap_or_else(PoisonError::into_inner) = set;
        Ok(())
    }

    /// Stores a block and puts it in force here at once (other instances within
    /// [`REFRESH_INTERVAL`]). The same block twice is stored once. `by` is recorded in the
    /// audit log in the same transaction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty pattern; database errors.
    pub async fn add(&self, db: &Db, new: &NewBlock, now_ms: i64, by: &Actor) -> Result<Block> {
        let pattern = new.pattern.trim();
        if pattern.is_empty() || pattern.len() > 512 {
            return Err(Error::Invalid("pattern: 1 to 512 characters".into()));
        }
        let id = uuid::Uuid::now_v7().to_string();
        let row = BlockRow {
            id,
            kind: new.kind.as_str().to_owned(),
            pattern: pattern.to_owned(),
            agent: new.agent.clone().filter(|a| !a.is_empty()),
            reason: new.reason.clone().filter(|r| !r.is_empty()),
            created_at: now_ms,
        };
        let mut tx = db.begin().await?;
        let stored = store::insert(&mut tx, &row).await?;
        let detail = serde_json::json!({
            "kind": stored.kind, "pattern": stored.pattern, "agent": stored.agent,
            "reason": stored.reason,
        });
        let entry = audit::Entry {
            actor: by,
            action: audit::action::BLOCK_ADD,
            target: &stored.id,
            detail,
        };
        audit::record(&mut tx, &entry, now_ms).await?;
        tx.commit().await?;
        self.refresh(db).await?;
        Block::from_row(stored).ok_or_else(|| Error::corrupt("stored block of unknown kind"))
    }

    /// Removes a stored block; `false` when there is none with `id` (a configured block is
    /// removed by editing the file). A removal is recorded in the audit log, as done by `by`
    /// at `now_ms`, in the same transaction.
    ///
    /// # Errors
    /// Database errors.
    pub async fn remove(&self, db: &Db, id: &str, now_ms: i64, by: &Actor) -> Result<bool> {
        let mut tx = db.begin().await?;
        let removed = store::delete(&mut tx, id).await?;
        if removed {
            let entry = audit::Entry {
                actor: by,
                action: audit::action::BLOCK_REMOVE,
                target: id,
                detail: serde_json::json!({}),
            };
            audit::record(&mut tx, &entry, now_ms).await?;
        }
        tx.commit().await?;
        self.refresh(db).await?;
        Ok(removed)
    }

    /// Reads the stored blocks every [`REFRESH_INTERVAL`] until `shutdown` changes.
    pub fn spawn_refresh(
        self: &Arc<Self>,
        db: Db,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let blocks = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(REFRESH_INTERVAL) => {}
                    _ = shutdown.changed() => return,
                }
                if let Err(e) = blocks.refresh(&db).await {
                    tracing::warn!(error = %e, "reading the blocks table failed");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(blocks: &[(BlockKind, &str, Option<&str>)]) -> BlockSet {
        BlockSet::new(
            blocks
                .iter()
                .enumerate()
                .map(|(i, (kind, pattern, agent))| Block {
                    id: i.to_string(),
                    kind: *kind,
                    pattern: (*pattern).into(),
                    agent: agent.map(Into::into),
                    reason: None,
                    source: BlockSource::Config,
                    created_at: None,
                })
                .collect(),
        )
    }

    fn who(addresses: &[&str]) -> Who {
        addresses
            .iter()
            .fold(Who::default(), |w, a| w.with_sender(a))
    }

    #[test]
    fn each_pattern_shape_matches_whole_values_without_regard_to_case() {
        let s = set(&[
            (BlockKind::Sender, "https://bad.example/users/*", None),
            (BlockKind::Sender, "*@spam.example", None),
            (BlockKind::Sender, "Troll@Mail.Example", None),
            (BlockKind::Sender, "https://*.worse.example/*/x", None),
        ]);
        let hit = |a: &str| s.find(None, &who(&[a])).map(|b| b.id.clone());
        assert_eq!(hit("https://bad.example/users/eve").as_deref(), Some("0"));
        assert_eq!(hit("https://bad.example/user").as_deref(), None);
        assert_eq!(hit("mailto:eve@spam.example").as_deref(), Some("1"));
        assert_eq!(hit("eve@spam.example.org"), None);
        assert_eq!(hit("troll@mail.example").as_deref(), Some("2"));
        assert_eq!(hit("troll@mail.example.org"), None);
        assert_eq!(hit("https://a.worse.example/u/x").as_deref(), Some("3"));
        assert_eq!(hit("https://a.worse.example/u/y"), None);
        assert_eq!(hit("https://good.example/users/bob"), None);
    }

    #[test]
    fn a_domain_block_covers_its_subdomains_but_not_look_alikes() {
        let s = set(&[(BlockKind::Domain, "bad.example", None)]);
        assert!(s.find(None, &who(&["https://bad.example/u/1"])).is_some());
        assert!(s.find(None, &who(&["@eve@social.bad.example"])).is_some());
        assert!(s.find(None, &who(&["eve@mx.BAD.example"])).is_some());
        assert!(s.find(None, &Who::domain("bad.example:8443")).is_some());
        assert!(
            s.find(None, &who(&["https://notbad.example/u/1"]))
                .is_none()
        );
        assert!(
            s.find(None, &who(&["https://bad.example.org/u/1"]))
                .is_none()
        );
        let g = set(&[(BlockKind::Domain, "*.spam.example", None)]);
        assert!(g.find(None, &Who::domain("mx.spam.example")).is_some());
        assert!(g.find(None, &Who::domain("spam.example")).is_none());
    }

    #[test]
    fn an_agents_block_refuses_only_for_that_agent() {
        let s = set(&[(BlockKind::Sender, "*@spam.example", Some("support"))]);
        let w = who(&["eve@spam.example"]);
        assert!(s.find(Some("support"), &w).is_some());
        assert!(s.find(Some("sales"), &w).is_none());
        assert!(s.find(None, &w).is_none());
    }

    #[test]
    fn issuers_match_the_evidence_issuer_only() {
        let s = set(&[(BlockKind::Issuer, "https://idp.bad.example", None)]);
        let mut w = Who::default();
        w.issuers.push("https://idp.bad.example".into());
        assert!(s.find(None, &w).is_some());
        assert!(s.find(None, &who(&["https://idp.bad.example"])).is_none());
    }

    #[test]
    fn a_thousand_patterns_find_the_one_that_matches() {
        let mut blocks = Vec::new();
        for i in 0..250 {
            blocks.push((BlockKind::Sender, format!("https://b{i}.example/users/*")));
            blocks.push((BlockKind::Sender, format!("*@m{i}.example")));
            blocks.push((BlockKind::Domain, format!("d{i}.example")));
            blocks.push((BlockKind::Issuer, format!("https://idp{i}.example")));
        }
        let s = BlockSet::new(
            blocks
                .into_iter()
                .enumerate()
                .map(|(i, (kind, pattern))| Block {
                    id: i.to_string(),
                    kind,
                    pattern,
                    agent: None,
                    reason: None,
                    source: BlockSource::Config,
                    created_at: None,
                })
                .collect(),
        );
        assert!(
            s.find(None, &who(&["https://b17.example/users/x"]))
                .is_some()
        );
        assert!(s.find(None, &who(&["x@m249.example"])).is_some());
        assert!(s.find(None, &who(&["@x@sub.d3.example"])).is_some());
        assert!(
            s.find(None, &who(&["https://b250.example/users/x"]))
                .is_none()
        );
        assert!(s.find(None, &who(&["x@m17.example.net"])).is_none());
    }
}
