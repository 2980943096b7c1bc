//! The main-runtime hop: the one way code on another runtime reaches what is bound to the main
//! one.
//!
//! actix-web runs its handlers on worker runtimes of its own. A database connection or an
//! outbound connection opened there belongs to that runtime and breaks when it stops, so all
//! of them are opened on the runtime the pipeline was built on. What HTTP handlers are given of
//! anything that does such I/O (the pipeline, a transport's task store) is an [`OnMain`]: its
//! only door is [`OnMain::run`], which hands the value to a closure whose future runs on the
//! main runtime. A handler that does not hop cannot name the database.

use std::future::Future;

use tracing::Instrument as _;

use crate::error::{Error, Result};

/// A value whose I/O must run on the main runtime, held by code that runs elsewhere.
#[derive(Debug, Clone)]
pub struct OnMain<S> {
    value: S,
    main: tokio::runtime::Handle,
}

impl<S: Clone + Send + 'static> OnMain<S> {
    /// `value`, reachable from now on only by futures spawned on `main`.
    #[must_use]
    pub fn new(value: S, main: tokio::runtime::Handle) -> Self {
        Self { value, main }
    }

    /// Runs the future `f` makes of the value on the main runtime and waits for it, in the
    /// caller's span (what it does is logged and traced as the caller's).
    ///
    /// # Errors
    /// The future's own error, or [`Error::Unavailable`] when the main runtime is shutting
    /// down.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(S) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let value = self.value.clone();
        self.main
            .spawn(async move { f(value).await }.in_current_span())
            .await
            .map_err(|_| Error::Unavailable)?
    }
}

#[cfg(test)]
mod tests {
    use super::OnMain;

    #[test]
    fn the_future_runs_on_the_main_runtime_from_another_one() {
        let main = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let main_id = main.handle().id();
        let held = OnMain::new(7_u32, main.handle().clone());
        let other = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (value, ran_on) = other
            .block_on(held.run(|v| async move { Ok((v, tokio::runtime::Handle::current().id())) }))
            .unwrap();
        assert_eq!(value, 7);
        assert_eq!(ran_on, main_id, "the future ran on the main runtime");
        assert_ne!(
            other.handle().id(),
            main_id,
            "the caller's runtime is another one"
        );
        drop(main);
        let gone = other.block_on(held.run(|v| async move { Ok(v) }));
        assert!(
            matches!(gone, Err(crate::error::Error::Unavailable)),
            "a stopped main runtime answers Unavailable: {gone:?}"
        );
    }
}
