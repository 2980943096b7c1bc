//! The `switchboard` command: parses arguments and calls into the library.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use switchboard::clock::{Clock, SystemClock};
use switchboard::store::{Db, jobs};
use switchboard::{Application, Config, telemetry};

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
    Serve,
    /// Validate the configuration and print the effective values, secrets masked.
    CheckConfig {
        /// File to check instead of --config.
        file: Option<PathBuf>,
    },
    /// List the configured agents and their addresses.
    Agents,
    /// Inspect and repair the durable queue.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Print the DNS TXT record publishing the DKIM key of outbound mail (made on first use).
    Dkim,
    /// Write the JSON Schemas of the contract into DIR.
    Schema {
        /// Output directory.
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// List jobs (dead ones by default).
    List {
        /// ready, running, done, dead or all.
        #[arg(long, default_value = "dead")]
        state: String,
        /// Only this kind (dispatch, deliver, …).
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => {
            let path = file.or(cli.config);
            let config = Config::from_env(path.as_deref())?;
            print!("{}", config.to_masked_toml()?);
            eprintln!("configuration is valid");
        }
        Command::Schema { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, content) in switchboard::message::schema::schemas() {
                std::fs::write(dir.join(name), content)
                    .with_context(|| format!("writing {name}"))?;
            }
        }
        Command::Serve => {
            let config = Config::from_env(cli.config.as_deref())?;
            telemetry::init(&config.log);
            let app = Application::build(config).await?;
            app.run_until_stopped().await?;
        }
        Command::Dkim => {
            let config = Config::from_env(cli.config.as_deref())?;
            let db = Db::open(&config.database).await?;
            let keys = switchboard::keys::Keys::new(db.clone(), std::sync::Arc::new(SystemClock));
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
        Command::Agents => {
            let config = Config::from_env(cli.config.as_deref())?;
            let domain = config.domain().unwrap_or_default();
            for a in &config.agents {
                println!("@{}@{}\t{:?}", a.name, domain, a.backend);
            }
        }
        Command::Queue { command } => {
            let config = Config::from_env(cli.config.as_deref())?;
            let db = Db::open(&config.database).await?;
            let now = SystemClock.now_ms();
            match command {
                QueueCommand::List { state, kind, limit } => {
                    let state = (state != "all").then_some(state);
                    for j in jobs::list(&db, state.as_deref(), kind.as_deref(), limit).await? {
                        println!("{}", serde_json::to_string(&j)?);
                    }
                }
                QueueCommand::Retry { id, all } => {
                    anyhow::ensure!(id.is_some() || all, "name a job id or pass --all");
                    let n = jobs::retry_dead(&db, id.as_deref(), now).await?;
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
