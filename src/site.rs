//! Where this server is on the web and in mail: the public base URL, the web domain agents'
//! handles live on and the mail domain of their addresses, computed once from the
//! configuration and handed to every part that mints a URL or an address.

use crate::config::Config;
use crate::error::{Error, Result};

/// The public names of this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    base: String,
    domain: String,
    handle_domain: String,
    mail_domain: Option<String>,
}

impl Site {
    /// Computes the site from `config` (`server.public_url`, `email.domain`).
    ///
    /// # Errors
    /// [`Error::Config`] when the public URL is unusable or has no host.
    pub fn from_config(config: &Config) -> Result<Self> {
        let url = config.public_url().map_err(Error::Config)?;
        let domain = config
            .domain()
            .ok_or_else(|| Error::Config("server.public_url: no host".into()))?;
        let handle_domain = config.handle_domain().unwrap_or_else(|| domain.clone());
        Ok(Self {
            base: url.as_str().trim_end_matches('/').to_owned(),
            domain,
            handle_domain,
            mail_domain: config.email.enabled.then(|| config.mail_domain()).flatten(),
        })
    }

    /// The public base URL, scheme and host (and port), without a trailing slash:
    /// `https://example.org`.
    #[must_use]
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `path` (starting with `/`) under the public base URL.
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The web domain this server answers on: the public host, with the port when it is not
    /// the scheme's default (`example.org`, `localhost:8080`).
    #[must_use]
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The domain of agents' fediverse handles (`@name@{handle_domain}`):
    /// `server.handle_domain`, else [`Self::domain`].
    #[must_use]
    pub fn handle_domain(&self) -> &str {
        &self.handle_domain
    }

    /// The domain of agents' email addresses (`email.domain`, else the public host) when the
    /// email transport is on.
    #[must_use]
    pub fn mail_domain(&self) -> Option<&str> {
        self.mail_domain.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_public_url_and_the_mail_domain() {
        let mut config = Config::default();
        config.server.public_url = Some("https://sb.example.org:8443/".into());
        config.email.enabled = false;
        let site = Site::from_config(&config).expect("site");
        assert_eq!(site.mail_domain(), None);
        config.email.enabled = true;
        let site = Site::from_config(&config).expect("site");
        assert_eq!(site.base_url(), "https://sb.example.org:8443");
        assert_eq!(site.url("/inbox"), "https://sb.example.org:8443/inbox");
        assert_eq!(site.domain(), "sb.example.org:8443");
        assert_eq!(site.handle_domain(), "sb.example.org:8443");
        assert_eq!(site.mail_domain(), Some("sb.example.org"));
        config.email.domain = Some("Example.ORG".into());
        let site = Site::from_config(&config).expect("site");
        assert_eq!(site.mail_domain(), Some("example.org"));
        config.server.handle_domain = Some("Example.ORG".into());
        let site = Site::from_config(&config).expect("site");
        assert_eq!(site.handle_domain(), "example.org");
        assert_eq!(site.domain(), "sb.example.org:8443", "the web host stays");
    }

    #[test]
    fn an_unusable_public_url_is_a_configuration_error() {
        let mut config = Config::default();
        config.server.public_url = Some("ftp://example.org".into());
        assert!(matches!(Site::from_config(&config), Err(Error::Config(_))));
    }
}
