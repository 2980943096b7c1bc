//! The `switchboard` command: parses arguments and calls into the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use switchboard::app;
use switchboard::clock::{Clock, SystemClock};
use switchboard::store::{Db, jobs};
use switchboard::{Application, Config, ops, telemetry};

/// A federated protocol bridge for AI agents.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Configuration file (TOML); `SWITCHBOARD__…` variables override it.
    #[arg(long, short, global = true, env = "SWITCHBOARD_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (SQLite and the echo agent when nothing is configured).
    Serve {
        #[command(flatten)]
        weak: AllowWeak,
    },
    /// Validate the configuration and print the effective values, secrets masked.
    CheckConfig {
        /// File to check instead of --config.
        file: Option<PathBuf>,
        #[command(flatten)]
        weak: AllowWeak,
    },
    /// List the configured agents: fediverse handle, email address, A2A card URL, backend.
    Agents {
        #[command(subcommand)]
        command: Option<AgentsCommand>,
    },
    /// Ask the server on this host whether it is up: exits 0 when its health route on the
    /// private listener answers 200, 1 otherwise (a container's HEALTHCHECK, a Kubernetes probe).
    Healthcheck {
        /// Probe readiness (`/readyz`: the database answers, migrations applied) instead of
        /// liveness (`/healthz`).
        #[arg(long)]
        ready: bool,
        /// Probe the public listener (`server.bind`) instead of the private one
        /// (`server.metrics_bind`).
        #[arg(long)]
        public: bool,
        /// The address to probe instead of the listener's (loopback when it binds every
        /// interface).
        #[arg(long)]
        addr: Option<SocketAddr>,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Inspect and repair the durable queue.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Print the DNS TXT record publishing the DKIM key of outbound mail (made on first use).
    Dkim,
    /// Encrypt the private keys stored in the database under the key-encryption key
    /// (`server.kek_file` or `server.kek`), or move them to a new one.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Check from the outside what federation and mail need (public documents, DNS records,
    /// the SMTP certificate, the database): pass/warn/fail with the fix; exits 1 on a failure.
    Doctor {
        /// Reach the SMTP listener here instead of `{email.hostname}:25`.
        #[arg(long)]
        smtp: Option<SocketAddr>,
    },
    /// Write the JSON Schemas of the contract into DIR.
    Schema {
        /// Output directory.
        dir: PathBuf,
    },
    /// Write the operator API's OpenAPI 3.1 document to FILE.
    Openapi {
        /// Output file.
        file: PathBuf,
    },
}

/// The escape from the refusal of weak secrets.
#[derive(Debug, clap::Args)]
struct AllowWeak {
    /// Accept webhook secrets, API and console tokens shorter than 16 bytes (or empty). For
    /// tests only: a short secret can be guessed, an empty webhook secret forged.
    #[arg(long)]
    allow_weak: bool,
}

impl AllowWeak {
    /// The configuration's weak secrets, unless they are allowed.
    fn problems(&self, config: &Config) -> Vec<String> {
        if self.allow_weak {
            Vec::new()
        } else {
            config.weak_secrets()
        }
    }
}

#[derive(Debug, Subcommand)]
enum AgentsCommand {
    /// Move an agent's fediverse account to another one, which must already name the agent
    /// among its aliases: the agent's actor then says where it went (`movedTo`), and its
    /// followers are sent a `Move`, which their servers follow by following the new account.
    Move {
        /// The agent.
        name: String,
        /// The new account: `@user@host` or its actor URL.
        #[arg(long)]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Encrypt every private key still stored plain under the configured KEK.
    Encrypt,
    /// Re-encrypt every private key sealed under the old KEK (and every plain one) under the
    /// configured KEK. Stop every instance first; start them again with the new KEK.
    Rotate {
        /// The file holding the KEK the keys are encrypted with now.
        #[arg(long)]
        old_kek_file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// List jobs (dead ones by default).
    List {
        /// Which jobs.
        #[arg(long, value_enum, default_value_t = StateFilter::Dead)]
        state: StateFilter,
        /// Only this kind (dispatch, deliver, turn_end, ap_deliver, a2a_push, email_role).
        #[arg(long)]
        kind: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Put a dead job (or every dead job) back in the queue with fresh attempts.
    Retry {
        /// The job id.
        id: Option<String>,
        /// Every dead job.
        #[arg(long, conflicts_with = "id")]
        all: bool,
    },
    /// Delete dead or done jobs.
    Purge {
        /// dead or done.
        #[arg(long)]
        state: String,
    },
}

/// The states `queue list` selects by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StateFilter {
    Ready,
    Running,
    Done,
    Dead,
    All,
}

impl StateFilter {
    /// The state's name in the database; `None` for every state.
    fn column(self) -> Option<&'static str> {
        match self {
            Self::Ready => Some("ready"),
            Self::Running => Some("running"),
            Self::Done => Some("done"),
            Self::Dead => Some("dead"),
            Self::All => None,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file, weak } => {
            let path = file.or(cli.config);
            let config = Config::from_env(path.as_deref())?;
            print!("{}", config.to_masked_toml()?);
            let mut problems: Vec<String> = match config.check_with(&app::transport_names()) {
                Err(switchboard::Error::Config(p)) => p.lines().map(str::to_owned).collect(),
                Err(e) => vec![e.to_string()],
                Ok(()) => Vec::new(),
            };
            problems.extend(weak.problems(&config));
            problems.extend(ops::check_environment(&config, &app::job_kinds()));
            anyhow::ensure!(
                problems.is_empty(),
                "configuration: {}",
                problems.join("\n")
            );
            eprintln!("configuration is valid");
        }
        Command::Schema { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, content) in switchboard::message::schema::schemas() {
                std::fs::write(dir.join(name), content)
                    .with_context(|| format!("writing {name}"))?;
            }
        }
        Command::Openapi { file } => {
            std::fs::write(&file, switchboard::transports::api::openapi::document())
                .with_context(|| format!("writing {}", file.display()))?;
        }
        Command::Serve { weak } => {
            // First, so that no signal during start-up takes the default action (a SIGHUP
            // would end the process).
            let signals = app::Signals::install()?;
            let config = Config::from_env(cli.config.as_deref())?;
            let weak = weak.problems(&config);
            anyhow::ensure!(
                weak.is_empty(),
                "configuration: {}\n(--allow-weak accepts them, for tests only)",
                weak.join("\n")
            );
            let traces = telemetry::init(&config.log, &config.telemetry)?;
            let app = Application::build(config).await?;
            let stopped = app.run_until(signals).await;
            if let Some(traces) = traces {
                traces.flush(std::time::Duration::from_secs(5)).await;
            }
            stopped?;
        }
        Command::Dkim => {
            let config = Config::from_env(cli.config.as_deref())?;
            let db = Db::open_existing(&config.database).await?;
            let keys = switchboard::keys::Keys::new(db.clone(), std::sync::Arc::new(SystemClock))
                .with_kek(switchboard::keys::Kek::configured(&config.server)?);
            let (domain, _) = switchboard::transports::email::names(&config)?;
            let (name, value) = switchboard::transports::email::dkim_record(
                &keys,
                &config.email.dkim_selector,
                &domain,
            )
            .await?;
            // A TXT string holds at most 255 bytes: publish the record as several strings.
            let chunks: Vec<String> = value
                .as_bytes()
                .chunks(255)
                .map(|c| format!("\"{}\"", String::from_utf8_lossy(c)))
                .collect();
            println!("{name}. IN TXT {}", chunks.join(" "));
            db.close().await;
        }
        Command::Keys { command } => {
            let config = Config::from_env(cli.config.as_deref())?;
            let kek = switchboard::keys::Kek::configured(&config.server)?.context(
                "no key-encryption key: set server.kek_file (or SWITCHBOARD__SERVER__KEK) to 32 \
                 random bytes, hex or base64 (`openssl rand -hex 32`)",
            )?;
            let db = Db::open_existing(&config.database).await?;
            let done = match command {
                KeysCommand::Encrypt => switchboard::keys::encrypt_plain(&db, &kek)
                    .await
                    .map(|n| format!("{n} key(s) encrypted under KEK {}", kek.id())),
                KeysCommand::Rotate { old_kek_file } => {
                    let text = std::fs::read_to_string(&old_kek_file)
                        .with_context(|| format!("reading {}", old_kek_file.display()))?;
                    let old = switchboard::keys::Kek::parse(&text)
                        .with_context(|| format!("{}", old_kek_file.display()))?;
                    switchboard::keys::rotate(&db, &old, &kek).await.map(|n| {
                        format!(
                            "{n} key(s) re-encrypted from KEK {} to KEK {}",
                            old.id(),
                            kek.id()
                        )
                    })
                }
            };
            db.close().await;
            println!("{}", done?);
        }
        Command::Doctor { smtp } => {
            let config = Config::from_env(cli.config.as_deref())?;
            let clock: switchboard::clock::SharedClock = std::sync::Arc::new(SystemClock);
            let opts = switchboard::doctor::Options {
                smtp,
                now_unix_s: clock.now_ms() / 1000,
            };
            let report = switchboard::doctor::run(&config, clock, &opts).await;
            print!("{report}");
            if report.failed() {
                std::process::exit(1);
            }
        }
        Command::Agents { command: None } => {
            let config = Config::from_env(cli.config.as_deref())?;
            print!(
                "{}",
                ops::agents_table(&ops::agent_addresses(&config, &app::address_kinds())?)
            );
        }
        Command::Agents {
            command: Some(AgentsCommand::Move { name, to }),
        } => {
            let config = Config::from_env(cli.config.as_deref())?;
            let parts = app::offline_parts(config).await?;
            let moved =
                switchboard::transports::activitypub::move_agent(&parts, &name, &to).await?;
            parts.db.close().await;
            println!(
                "moved {} to {}: Move queued for {} follower inbox(es)",
                moved.from, moved.to, moved.inboxes
            );
        }
        Command::Healthcheck {
            ready,
            public,
            addr,
            timeout,
        } => {
            // The private listener speaks plain HTTP; a public one behind a load balancer
            // speaking the PROXY protocol expects its header first: the probe then sends a LOCAL
            // one (naming no client).
            let (addr, config) = match addr {
                Some(a) => (a, Config::from_env(cli.config.as_deref()).ok()),
                None => {
                    let c = Config::from_env(cli.config.as_deref())?;
                    let listener = if public {
                        c.server.bind
                    } else {
                        c.server.metrics_bind
                    };
                    (switchboard::net::probe::local_addr(listener), Some(c))
                }
            };
            let proxy_protocol = public && config.is_some_and(|c| c.server.proxy_protocol);
            let path = if ready { "/readyz" } else { "/healthz" };
            let timeout = Duration::from_secs(timeout);
            switchboard::net::probe::probe(addr, path, timeout, proxy_protocol)
                .await
                .map_err(|e| anyhow::anyhow!("unhealthy: {e}"))?;
            println!("ok: {addr}{path}");
        }
        Command::Queue { command } => {
            let config = Config::from_env(cli.config.as_deref())?;
            let db = Db::open_existing(&config.database).await?;
            let now = SystemClock.now_ms();
            match command {
                QueueCommand::List { state, kind, limit } => {
                    if let Some(k) = &kind {
                        let known = app::job_kinds();
                        anyhow::ensure!(
                            known.contains(&k.as_str()),
                            "unknown job kind {k:?} (known: {})",
                            known.join(", ")
                        );
                    }
                    anyhow::ensure!(limit > 0, "--limit must be above 0");
                    for j in jobs::list(&db, state.column(), kind.as_deref(), limit).await? {
                        println!("{}", serde_json::to_string(&j)?);
                    }
                }
                QueueCommand::Retry { id, all } => {
                    anyhow::ensure!(id.is_some() || all, "name a job id or pass --all");
                    let n = jobs::retry_dead(&db, id.as_deref(), now).await?;
                    if let (Some(id), 0) = (&id, n) {
                        match jobs::get(&db, id).await? {
                            None => anyhow::bail!("no job with id {id:?}"),
                            Some(j) => anyhow::bail!(
                                "job {id:?} is {}; only dead jobs are retried",
                                j.state
                            ),
                        }
                    }
                    println!("{n} job(s) back in the queue");
                }
                QueueCommand::Purge { state } => {
                    let n = jobs::purge(&db, &state).await?;
                    println!("{n} job(s) deleted");
                }
            }
            db.close().await;
        }
    }
    Ok(())
}
