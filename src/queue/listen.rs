//! One PostgreSQL `LISTEN` connection for the whole instance: it subscribes to every channel
//! registered with it and hands each notification's payload to that channel's handlers (the
//! queue's wakeups, A2A task changes, …). The connection is re-established after errors, after a
//! pause; shutdown is honoured at every wait, the connection attempts and the pause included.
//!
//! Handlers run on the listener's task and must not block: they wake something and return.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a notification's payload is handed to.
pub type Handler = Arc<dyn Fn(&str) + Send + Sync>;

/// What is called when the connection is back after it was lost (what was notified meanwhile
/// was missed).
pub type Reconnected = Arc<dyn Fn() + Send + Sync>;

/// How long the listener waits before connecting again after an error.
pub const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Channels and their handlers, gathered before the listener starts ([`Listener::spawn`]).
#[derive(Clone, Default)]
pub struct Listener {
    channels: HashMap<String, Vec<Handler>>,
    reconnected: Vec<Reconnected>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("channels", &self.channels.keys().collect::<Vec<_>>())
            .field("reconnected", &self.reconnected.len())
            .finish()
    }
}

/// Why the connection ended: shutdown, or an error to recover from.
enum Ended {
    Shutdown,
    Lost,
}

impl Listener {
    /// A listener with no channel yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands every notification on `channel` to `handler` (several handlers of one channel each
    /// get every payload).
    pub fn on(&mut self, channel: &str, handler: Handler) {
        self.channels
            .entry(channel.to_owned())
            .or_default()
            .push(handler);
    }

    /// Calls `handler` each time the connection is established again after it was lost.
    pub fn on_reconnect(&mut self, handler: Reconnected) {
        self.reconnected.push(handler);
    }

    /// Whether no channel is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Starts the listening loop on a connection of `pool`; it returns once `shutdown` turns
    /// true (or its sender is dropped), whatever it is waiting for, pausing `pause` before each
    /// reconnection.
    pub fn spawn(
        self,
        pool: PgPool,
        pause: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        tokio::spawn(self.run(pool, pause, shutdown))
    }

    async fn run(self, pool: PgPool, pause: Duration, mut shutdown: watch::Receiver<bool>) {
        let channels: Vec<&str> = self.channels.keys().map(String::as_str).collect();
        let mut first = true;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let ended = tokio::select! {
                biased;
                _ = shutdown.changed() => Ended::Shutdown,
                ended = self.serve(&pool, &channels, &mut first) => ended,
            };
            if matches!(ended, Ended::Shutdown) {
                return;
            }
            tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Connects, subscribes and routes notifications until the connection fails; once
    /// subscribed on any attempt but the `first`, tells the reconnection handlers.
    async fn serve(&self, pool: &PgPool, channels: &[&str], first: &mut bool) -> Ended {
        // Any attempt but the first, successful or not, comes after a time without a
        // subscription.
        let again = !std::mem::replace(first, false);
        let mut listener = match PgListener::connect_with(pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN connection failed; retrying");
                return Ended::Lost;
            }
        };
        if let Err(e) = listener.listen_all(channels.iter().copied()).await {
            tracing::warn!(error = %e, "LISTEN failed; retrying");
            return Ended::Lost;
        }
        if again {
            for handler in &self.reconnected {
                handler();
            }
        }
        loop {
            match listener.recv().await {
                Ok(n) => {
                    for handler in self.channels.get(n.channel()).into_iter().flatten() {
                        handler(n.payload());
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                    return Ended::Lost;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stops_promptly_on_shutdown_while_backing_off() {
        // Nothing listens on port 1: every connection attempt fails at once.
        let opts = "postgres://nobody@127.0.0.1:1/none"
            .parse::<sqlx::postgres::PgConnectOptions>()
            .unwrap();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_millis(100))
            .connect_lazy_with(opts);
        let (tx, rx) = watch::channel(false);
        let mut listener = Listener::new();
        listener.on("switchboard_test", Arc::new(|_| {}));
        // A long pause: the loop spends nearly all its time backing off.
        let task = listener.spawn(pool, Duration::from_secs(60), rx);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!task.is_finished(), "the listener gave up on its own");
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the listener ignored shutdown while backing off")
            .unwrap();
    }

    #[tokio::test]
    async fn stops_when_the_shutdown_sender_is_gone() {
        // Connection attempts may go on for minutes: the end of shutdown's sender stops them.
        let opts = "postgres://nobody@127.0.0.1:1/none"
            .parse::<sqlx::postgres::PgConnectOptions>()
            .unwrap();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_secs(600))
            .connect_lazy_with(opts);
        let (tx, rx) = watch::channel(false);
        let task = Listener::new().spawn(pool, Duration::from_secs(60), rx);
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(tx);
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the listener outlived its shutdown sender")
            .unwrap();
    }
}
