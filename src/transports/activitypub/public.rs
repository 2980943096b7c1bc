//! What the transport's HTTP handlers read in place, without hopping to the main runtime: the
//! server's names and addresses, its settings, the agents and their profiles. The transport's
//! state is wrapped so that nothing here reaches the database, the blob store or the network;
//! those are reached through [`super::HttpState::main`].

use std::sync::Arc;

use super::Inner;
use super::profile::AgentProfile;
use crate::agents::{Agent, AgentRegistry};
use crate::config::ActivityPubConfig;

/// The in-memory face of the transport's state.
#[derive(Debug, Clone)]
pub(super) struct Public(Arc<Inner>);

impl Public {
    pub(super) fn new(inner: Arc<Inner>) -> Self {
        Self(inner)
    }

    /// The agents.
    pub(super) fn agents(&self) -> &AgentRegistry {
        &self.0.agents
    }

    /// The transport's settings.
    pub(super) fn cfg(&self) -> &ActivityPubConfig {
        &self.0.cfg
    }

    /// `https://example.org` (no trailing slash).
    pub(super) fn base(&self) -> &str {
        &self.0.base
    }

    /// The host of [`Self::base`].
    pub(super) fn domain(&self) -> &str {
        &self.0.domain
    }

    /// The domain of the agents' handles.
    pub(super) fn handle_domain(&self) -> &str {
        &self.0.handle_domain
    }

    /// The agents' mail domain, when the email transport is on.
    pub(super) fn mail_domain(&self) -> Option<&str> {
        self.0.mail_domain.as_deref()
    }

    /// An agent's actor IRI.
    pub(super) fn actor_url(&self, agent: &str) -> String {
        self.0.actor_url(agent)
    }

    /// The IRI of a thread context `agent` minted.
    pub(super) fn context_url(&self, agent: &str, id: &str) -> String {
        self.0.context_url(agent, id)
    }

    /// The instance actor's IRI.
    pub(super) fn instance_actor(&self) -> String {
        self.0.instance_actor()
    }

    /// The local agent an actor IRI names.
    pub(super) fn local_agent(&self, iri: &str) -> Option<Arc<Agent>> {
        self.0.local_agent(iri)
    }

    /// An agent's profile as configured.
    pub(super) fn profile(&self, agent: &str) -> Arc<AgentProfile> {
        self.0.profile(agent)
    }
}
