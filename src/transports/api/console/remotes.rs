//! The console's pages about other servers: remote hosts with their delivery health and recent
//! refusals, and the reports of abuse they sent.

use super::*;

/// One remote host's row on the hosts page.
#[derive(Default)]
struct HostRow {
    health: Option<crate::hosts::HostHealth>,
    traffic: Option<crate::hosts::Traffic>,
    refusals: Vec<crate::hosts::Refusal>,
}

/// How many of a host's recent refusals its row lists.
const REFUSALS_SHOWN: usize = 5;

pub(super) async fn hosts_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    let hosts = std::sync::Arc::clone(c.pipeline.metrics());
    let in_force = c.pipeline.blocks();
    guarded(&c, &req, move |_| async move {
        let mut rows: std::collections::BTreeMap<String, HostRow> = Default::default();
        for source in hosts.hosts().sources() {
            for h in source.hosts().await? {
                let host = h.host.clone();
                rows.entry(host).or_default().health = Some(h);
            }
        }
        let snap = hosts.hosts().snapshot();
        for (host, t) in snap.activitypub {
            rows.entry(host).or_default().traffic = Some(t);
        }
        for (host, r) in snap.refusals {
            rows.entry(host).or_default().refusals = r;
        }
        let mut body = String::new();
        for (host, r) in &rows {
            let circuit = r
                .health
                .as_ref()
                .map_or(crate::hosts::Circuit::Closed, |h| h.circuit);
            let last_error = r
                .traffic
                .as_ref()
                .and_then(|t| t.last_error.as_ref())
                .map(|(at, e)| format!("{} <span class=\"muted\">{}</span>", esc(e), when(Some(*at))))
                .or_else(|| {
                    r.health
                        .as_ref()
                        .and_then(|h| h.last_error.as_deref())
                        .map(esc)
                })
                .unwrap_or_else(|| "—".to_owned());
            let mut refusals = String::new();
            for f in r.refusals.iter().take(REFUSALS_SHOWN) {
                let _ = write!(
                    refusals,
                    "<li><span class=\"muted\">{}</span> {}</li>",
                    when(Some(f.at_ms)),
                    esc(&f.reason)
                );
            }
            let refusals = if r.refusals.is_empty() {
                "—".to_owned()
            } else {
                format!(
                    "<span class=\"badge no\">{n}</span><ul class=\"refusals\">{refusals}</ul>",
                    n = r.refusals.len()
                )
            };
            let _ = write!(
                body,
                "<tr data-host=\"{h}\"><td>{h}</td><td><span class=\"badge {cls}\" data-circuit>{circuit}</span></td>\
                 <td>{ok}</td><td>{ko}</td><td>{streak}</td><td>{since}</td><td>{last_error}</td><td>{refusals}</td>\
                 <td class=\"actions\">{actions}</td></tr>",
                h = esc(host),
                actions = blocks::host_actions(&in_force, host),
                cls = if circuit == crate::hosts::Circuit::Closed { "ok" } else { "no" },
                circuit = circuit.label(),
                ok = r.traffic.as_ref().map_or(0, |t| t.delivered),
                ko = r.traffic.as_ref().map_or(0, |t| t.failed),
                streak = r.health.as_ref().map_or(0, |h| h.failures),
                since = when(r.health.as_ref().and_then(|h| h.failing_since)),
            );
        }
        let mut mail = String::new();
        for (relay, t) in &snap.mail {
            let _ = write!(
                mail,
                "<tr data-relay=\"{r}\"><td>{r}</td><td>{ok}</td><td>{ko}</td><td>{last}</td><td>{err}</td></tr>",
                r = esc(relay),
                ok = t.delivered,
                ko = t.failed,
                last = when(t.last_delivered_ms),
                err = t.last_error.as_ref().map_or_else(
                    || "—".to_owned(),
                    |(at, e)| format!("{} <span class=\"muted\">{}</span>", esc(e), when(Some(*at)))
                ),
            );
        }
        Ok(View::page(
            "Remote hosts",
            "Remote hosts",
            &format!(
                "<p class=\"muted\">ActivityPub hosts this server delivers to or refused something from: the \
                 circuit (<code>open</code> once a host has failed for longer than <code>activitypub.breaker_days</code>), \
                 deliveries since this instance started, the current failure streak, and the latest refusals \
                 (kept in memory, the newest {max} per host).</p>\
                 <h2>Hosts</h2><table id=\"hosts\"><tr><th>Host</th><th>Circuit</th><th>Delivered</th><th>Failed</th>\
                 <th>Failure streak</th><th>Failing since</th><th>Last error</th><th>Recent refusals</th><th></th></tr>{body}</table>\
                 <h2>Outbound mail</h2><table id=\"mail\"><tr><th>Relay or domain</th><th>Sent</th><th>Failed</th>\
                 <th>Last sent</th><th>Last error</th></tr>{mail}</table>",
                max = crate::hosts::MAX_REFUSALS,
            ),
        ))
    })
    .await
}

pub(super) async fn reports_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    guarded(&c, &req, move |p| async move {
        let db = p.db();
        let mut body = String::new();
        for r in crate::store::reports::list(db, None, 200).await? {
            let r = crate::transports::api::read::report_view(r);
            let objects: Vec<String> = r
                .objects
                .iter()
                .map(|o| format!("<li>{}</li>", esc(o)))
                .collect();
            let _ = write!(
                body,
                "<tr data-report=\"{id}\"><td>{at}</td><td>{reporter}</td><td>{host}</td><td>{agent}</td>\
                 <td><ul class=\"objects\">{objects}</ul></td><td class=\"comment\">{content}</td></tr>",
                id = esc(&r.id),
                at = r.received_at,
                reporter = esc(&r.reporter),
                host = esc(&r.host),
                agent = esc(r.agent.as_deref().unwrap_or("—")),
                objects = objects.concat(),
                content = esc(&r.content),
            );
        }
        Ok(View::page(
            "Reports",
            "Reports",
            &format!(
                "<p class=\"muted\">Reports of abuse received from remote servers (ActivityPub <code>Flag</code>), \
                 newest first (the last 200); also at <code>GET /api/v1/reports</code>, and mailed to \
                 <code>moderation.reports_to</code> when it is set.</p>\
                 <table id=\"reports\"><tr><th>Received</th><th>Reporter</th><th>Host</th><th>Agent</th><th>Reported</th>\
                 <th>Comment</th></tr>{body}</table>"
            ),
        ))
    })
    .await
}
