//! A transport and an agent backend added from outside the crate, through its public shapes
//! alone: the transport's descriptor (name, job kind, listener, the address it gives agents)
//! and module, the backend as a trait object. Nothing else names them, yet the application
//! builds and starts the transport like the built-in ones, runs its job kind, reports its
//! listener, accepts its name in `[conversation.transports]`, shows its address in the console,
//! and the pipeline carries a message from its listener to the backend and the answer back out
//! through it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use switchboard::agents::AgentBackend;
use switchboard::config::ConversationOverride;
use switchboard::error::{OutboundError, Result};
use switchboard::message::{NormalizedMessage, NormalizedResponse, Part};

/// The text of `parts`.
fn text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.content.as_str()),
            _ => None,
        })
        .collect()
}
use switchboard::ops::AddressKind;
use switchboard::pipeline::{Delivery, Pipeline, Transport};
use switchboard::queue::JobHandler;
use switchboard::store::jobs::JobRow;
use switchboard::transports::{Descriptor, Parts, Started, TransportModule};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::watch;

use crate::helpers::{Engine, fresh_db, message, spawn_on, wait_for};

const NAME: &str = "fake";
const TICK: &str = "fake_tick";

/// What the fake transport saw: answers delivered, jobs run.
fn seen() -> &'static Mutex<Vec<String>> {
    static SEEN: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

const FAKE: Descriptor = Descriptor {
    name: NAME,
    job_kinds: &[TICK],
    listeners: &[NAME],
    address: Some(AddressKind {
        key: NAME,
        label: "Fake line",
        rank: 9,
        of: |_, _, agent| Some(format!("fake:{agent}")),
    }),
    build: |parts| Ok(Some(Box::new(FakeModule(parts.clone())))),
};

struct FakeModule(Parts);

/// The outbound half: records each answer.
#[derive(Debug)]
struct FakeOut;

#[async_trait::async_trait]
impl Transport for FakeOut {
    fn name(&self) -> &str {
        NAME
    }

    async fn deliver(&self, d: &Delivery) -> std::result::Result<(), OutboundError> {
        let said = text(&d.response.parts);
        seen().lock().unwrap().push(format!("answer {said}"));
        Ok(())
    }
}

/// The job kind it runs: records each job.
struct Tick(Parts);

#[async_trait::async_trait]
impl JobHandler for Tick {
    async fn handle(&self, owner: &str, jobs: &[JobRow]) -> Result<()> {
        let results: Vec<std::result::Result<(), OutboundError>> = jobs
            .iter()
            .map(|j| {
                seen().lock().unwrap().push(format!("tick {}", j.payload));
                Ok(())
            })
            .collect();
        let now = self.0.clock.now_ms();
        let mut tx = self.0.db.begin().await?;
        let finished = self
            .0
            .queue
            .finish(&mut tx, owner, jobs, &results, now)
            .await?;
        self.0.queue.commit(tx, finished).await
    }
}

#[async_trait::async_trait]
impl TransportModule for FakeModule {
    fn outbound(&self) -> Arc<dyn Transport> {
        Arc::new(FakeOut)
    }

    fn jobs(&self) -> Vec<(&'static str, Arc<dyn JobHandler>)> {
        vec![(TICK, Arc::new(Tick(self.0.clone())))]
    }

    /// A line protocol: each line received is one message to the agent named by the first
    /// word; a job of its kind is enqueued at start.
    async fn start(&self, pipeline: &Pipeline, _: watch::Receiver<bool>) -> Result<Started> {
        let parts = &self.0;
        let mut tx = parts.db.begin().await?;
        let now = parts.clock.now_ms();
        let tick = vec![("fake_tick:1".to_owned(), "\"started\"".to_owned())];
        let enqueued = parts.queue.enqueue(&mut tx, TICK, &tick, now).await?;
        tx.commit().await?;
        parts.queue.hand_over(enqueued);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (pipeline, domain) = (pipeline.clone(), parts.site.handle_domain().to_owned());
        let task = tokio::spawn(async move {
            let mut n = 0;
            while let Ok((stream, _)) = listener.accept().await {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    n += 1;
                    let (agent, text) = line.split_once(' ').unwrap();
                    let msg = message(&format!("@{agent}@{domain}"), "line", text);
                    pipeline
                        .ingest(NAME, &format!("line-{n}"), msg)
                        .await
                        .unwrap();
                }
            }
        });
        Ok(Started {
            tasks: vec![task],
            listeners: vec![(NAME, addr)],
            ..Started::default()
        })
    }
}

/// A backend no configuration names.
#[derive(Debug)]
struct Shouter;

#[async_trait::async_trait]
impl AgentBackend for Shouter {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> std::result::Result<Option<NormalizedResponse>, OutboundError> {
        let loud = text(&msg.parts).to_uppercase();
        Ok(Some(NormalizedResponse::reply_to(
            msg,
            vec![Part::text(loud)],
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_and_a_backend_from_outside_need_no_edit_elsewhere() {
    let t = spawn_on(fresh_db(Engine::Sqlite).await, |c, o| {
        c.console.enabled = true;
        c.conversation.transports.insert(
            NAME.into(),
            ConversationOverride {
                debounce_ms: Some(0),
                queue: None,
            },
        );
        o.modules.push(FAKE);
        o.agents.push(("loud".into(), Arc::new(Shouter)));
    })
    .await;
    let addr: SocketAddr = t.app().listener(NAME).expect("its listener is reported");
    let mut line = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut line, b"loud hello there\n")
        .await
        .unwrap();
    let seen = wait_for(20, "the answer and the job", || async {
        let s = seen().lock().unwrap().clone();
        (s.contains(&"answer HELLO THERE".to_owned()) && s.contains(&"tick \"started\"".to_owned()))
            .then_some(s)
    })
    .await;
    assert_eq!(seen.len(), 2, "one answer, one job: {seen:?}");
    let console = t
        .http
        .get(format!("http://{}/console", t.app().metrics_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(console.contains("<th>Fake line</th>"), "{console}");
    // The configured agents (the added backend answers for one no configuration names).
    assert!(console.contains("<td>fake:echo</td>"), "{console}");
}
