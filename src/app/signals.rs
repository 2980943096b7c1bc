//! The process signals `serve` answers, as a daemon's operator expects: SIGTERM and SIGINT stop
//! it (logged, then drained by [`super::Application::shutdown`]); SIGHUP never ends it. Until
//! the configuration can be re-read in place, a SIGHUP (a `systemctl reload`, a log-rotation
//! hook) is logged and ignored, so a habit carried over from other daemons does not take the
//! server down.
//!
//! The handlers are installed by [`Signals::install`], which `serve` calls before it builds
//! anything: from then on the default action of each signal (the kernel ending the process) no
//! longer applies.

use crate::error::{Error, Result};

/// The signal that asked the server to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM (systemd, Kubernetes, `kill`).
    Terminate,
    /// SIGINT (Ctrl-C in a terminal).
    Interrupt,
}

impl Stop {
    /// The signal's name, as logged.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Terminate => "SIGTERM",
            Self::Interrupt => "SIGINT",
        }
    }
}

/// The installed handlers of SIGTERM, SIGINT and SIGHUP.
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers now: a signal that arrives from here on is the server's to answer.
    ///
    /// # Errors
    /// When a handler cannot be installed (no Tokio runtime with signal support).
    pub fn install() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let on = |kind: SignalKind, name: &str| {
                signal(kind)
                    .map_err(|e| Error::Startup(format!("installing the {name} handler: {e}")))
            };
            Ok(Self {
                term: on(SignalKind::terminate(), "SIGTERM")?,
                int: on(SignalKind::interrupt(), "SIGINT")?,
                hup: on(SignalKind::hangup(), "SIGHUP")?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// Waits until a signal asks the server to stop. A SIGHUP on the way is logged and ignored.
    pub async fn stop_requested(&mut self) -> Stop {
        #[cfg(unix)]
        loop {
            tokio::select! {
                _ = self.term.recv() => return Stop::Terminate,
                _ = self.int.recv() => return Stop::Interrupt,
                _ = self.hup.recv() => {
                    tracing::warn!(
                        signal = "SIGHUP",
                        "configuration reload is not supported yet: the running configuration \
                         is kept; restart the server to apply a changed file"
                    );
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Stop::Interrupt
        }
    }
}
