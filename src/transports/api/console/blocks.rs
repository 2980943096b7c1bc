//! The console's blocks page: every block in force, a form that adds one (server-wide or for one
//! agent) and a button that removes each one added at run time. It writes through the same
//! store as `/api/v1/blocks` ([`crate::moderation`]), so every instance sees the change.

use std::fmt::Write as _;

use actix_web::{HttpRequest, HttpResponse, web};

use super::{Console, View, esc, guarded, guarded_form, when};
use crate::error::Error;
use crate::moderation::{Block, BlockKind, BlockSource, NewBlock};

/// `GET /console/blocks`.
pub(super) async fn blocks_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    let mut agents = String::from("<option value=\"\">every agent</option>");
    for a in c.agents.iter() {
        let _ = write!(
            agents,
            "<option value=\"{n}\">{n}</option>",
            n = esc(&a.name)
        );
    }
    guarded(&c, &req, move |pipeline| async move {
        let mut rows = String::new();
        for b in pipeline.blocks().list() {
            let remove = match b.source {
                BlockSource::Api => format!(
                    "<form class=\"inline\" method=\"post\" action=\"/console/blocks/remove\">\
                     <input type=\"hidden\" name=\"id\" value=\"{id}\">\
                     <button type=\"submit\">Unblock</button></form>",
                    id = esc(&b.id)
                ),
                BlockSource::Config => "<span class=\"muted\">in the file</span>".to_owned(),
            };
            let _ = write!(
                rows,
                "<tr data-block=\"{id}\"><td>{kind}</td><td><code>{pattern}</code></td><td>{agent}</td>\
                 <td>{reason}</td><td>{at}</td><td>{remove}</td></tr>",
                id = esc(&b.id),
                kind = b.kind.as_str(),
                pattern = esc(&b.pattern),
                agent = esc(b.agent.as_deref().unwrap_or("every agent")),
                reason = esc(b.reason.as_deref().unwrap_or("")),
                at = when(b.created_at),
            );
        }
        let main = format!(
            "<table><tr><th>Kind</th><th>Pattern</th><th>Agent</th><th>Reason</th><th>Added</th><th></th></tr>{rows}</table>\
             <h2>Block a sender</h2><form method=\"post\" action=\"/console/blocks\">\
             <label for=\"kind\">Kind</label><select id=\"kind\" name=\"kind\">\
             <option value=\"domain\">domain (an instance or mail domain, subdomains included)</option>\
             <option value=\"sender\">sender (actor IRI or @handle, mail address, A2A subject)</option>\
             <option value=\"issuer\">issuer (of an A2A caller's or a connector's evidence)</option></select>\
             <label for=\"pattern\">Pattern (<code>*</code> for any run of characters)</label>\
             <input id=\"pattern\" name=\"pattern\" required>\
             <label for=\"agent\">Agent</label><select id=\"agent\" name=\"agent\">{agents}</select>\
             <label for=\"reason\">Reason</label><input id=\"reason\" name=\"reason\">\
             <p><button type=\"submit\" id=\"block\">Block</button></p></form>\
             <p class=\"muted\">What is blocked is refused before anything of it is stored, on every \
             instance sharing the database (within 5 s). Blocks in the configuration file are removed there.</p>"
        );
        Ok(View::page("Blocks", "Blocks", &main))
    })
    .await
}

/// A remote host's actions on the hosts page: Unblock for a server-wide domain block added at
/// run time on exactly that host, a note for one in the file, else a Block button (a
/// server-wide domain block, its subdomains included); each comes back to the hosts page.
pub(super) fn host_actions(blocks: &[Block], host: &str) -> String {
    let domain = match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    let block = blocks.iter().find(|b| {
        b.kind == BlockKind::Domain && b.agent.is_none() && b.pattern.eq_ignore_ascii_case(domain)
    });
    match block {
        Some(b) if b.source == BlockSource::Api => format!(
            "<form class=\"inline\" method=\"post\" action=\"/console/blocks/remove\">\
             <input type=\"hidden\" name=\"id\" value=\"{id}\">\
             <input type=\"hidden\" name=\"back\" value=\"/console/hosts\">\
             <button type=\"submit\" data-unblock>Unblock</button></form>",
            id = esc(&b.id)
        ),
        Some(_) => "<span class=\"muted\">blocked in the file</span>".to_owned(),
        None => format!(
            "<form class=\"inline\" method=\"post\" action=\"/console/blocks\">\
             <input type=\"hidden\" name=\"kind\" value=\"domain\">\
             <input type=\"hidden\" name=\"pattern\" value=\"{d}\">\
             <input type=\"hidden\" name=\"reason\" value=\"blocked from the hosts page\">\
             <input type=\"hidden\" name=\"back\" value=\"/console/hosts\">\
             <button type=\"submit\" data-block>Block</button></form>",
            d = esc(domain)
        ),
    }
}

/// The add form; `back` is where to go afterwards (the hosts page's buttons come back to it).
#[derive(serde::Deserialize)]
pub(super) struct BlockForm {
    kind: String,
    pattern: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    back: String,
    #[serde(default)]
    csrf: String,
}

/// Where a form may send the browser back to: a console page, else the blocks page.
fn back_to(back: &str) -> String {
    if back.starts_with("/console/") && !back.contains("//") {
        back.to_owned()
    } else {
        "/console/blocks".to_owned()
    }
}

/// `POST /console/blocks`.
pub(super) async fn add_block(
    c: web::Data<Console>,
    req: HttpRequest,
    form: web::Form<BlockForm>,
) -> HttpResponse {
    let (mut form, by) = (form.into_inner(), super::audit::actor(&c, &req));
    let csrf = std::mem::take(&mut form.csrf);
    guarded_form(&c, &req, &csrf, move |pipeline| async move {
        let kind = BlockKind::parse(&form.kind).ok_or_else(|| {
            Error::Invalid(format!(
                "kind: {:?} is not sender, domain or issuer",
                form.kind
            ))
        })?;
        let new = NewBlock {
            kind,
            pattern: form.pattern,
            agent: Some(form.agent).filter(|a| !a.is_empty()),
            reason: Some(form.reason),
        };
        pipeline.add_block(&new, &by).await?;
        Ok(View::Redirect(back_to(&form.back)))
    })
    .await
}

/// The remove form.
#[derive(serde::Deserialize)]
pub(super) struct RemoveForm {
    id: String,
    #[serde(default)]
    back: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /console/blocks/remove`.
pub(super) async fn remove_block(
    c: web::Data<Console>,
    req: HttpRequest,
    form: web::Form<RemoveForm>,
) -> HttpResponse {
    let (mut form, by) = (form.into_inner(), super::audit::actor(&c, &req));
    let csrf = std::mem::take(&mut form.csrf);
    guarded_form(&c, &req, &csrf, move |p| async move {
        let now = p.clock().now_ms();
        if !p.blocks().remove(p.db(), &form.id, now, &by).await? {
            return Err(Error::NotFound(format!(
                "no block {} added at run time",
                form.id
            )));
        }
        tracing::info!(block = %form.id, "block removed in the console");
        Ok(View::Redirect(back_to(&form.back)))
    })
    .await
}
