//! The console's queue page: jobs by kind and state, the dead ones with their last error, and
//! the forms that retry one dead job or purge them all (each recorded in the audit log).

use super::*;

pub(super) async fn queue_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    guarded(&c, &req, move |p| async move {
        let db = p.db();
        let mut counts = String::new();
        for n in jobs::counts(db).await? {
            let _ = write!(
                counts,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&n.kind),
                esc(&n.state),
                n.n
            );
        }
        let mut dead = String::new();
        for j in jobs::list(db, Some("dead"), None, 200).await? {
            let _ = write!(
                dead,
                "<tr data-job=\"{id}\"><td>{id}</td><td>{kind}</td><td>{a}</td><td>{err}</td><td>{at}</td>\
                 <td><form class=\"inline\" method=\"post\" action=\"/console/queue/retry\">\
                 <input type=\"hidden\" name=\"id\" value=\"{id}\"><button type=\"submit\">Retry</button></form></td></tr>",
                id = esc(&j.id),
                kind = esc(&j.kind),
                a = j.attempts,
                err = esc(j.last_error.as_deref().unwrap_or("")),
                at = when(Some(j.updated_at)),
            );
        }
        Ok(View::page(
            "Queue",
            "Queue",
            &format!(
                "<h2>Jobs per kind and state</h2><table><tr><th>Kind</th><th>State</th><th>Jobs</th></tr>{counts}</table>\
                 <h2>Dead jobs</h2><table><tr><th>Job</th><th>Kind</th><th>Attempts</th><th>Last error</th><th>Died</th>\
                 <th></th></tr>{dead}</table><form method=\"post\" action=\"/console/queue/purge\">\
                 <p><button type=\"submit\" id=\"purge\">Purge every dead job</button></p></form>"
            ),
        ))
    })
    .await
}

#[derive(serde::Deserialize)]
pub(super) struct RetryForm {
    id: String,
    #[serde(default)]
    csrf: String,
}

pub(super) async fn queue_retry(
    c: web::Data<Console>,
    req: HttpRequest,
    form: web::Form<RetryForm>,
) -> HttpResponse {
    let now = c.pipeline.clock().now_ms();
    let RetryForm { id, csrf } = form.into_inner();
    let by = audit::actor(&c, &req);
    guarded_form(&c, &req, &csrf, move |p| async move {
        let db = p.db();
        audit::retry(db, &by, &id, now).await?;
        Ok(View::Redirect("/console/queue".into()))
    })
    .await
}

pub(super) async fn queue_purge(
    c: web::Data<Console>,
    req: HttpRequest,
    form: Option<web::Form<TokenOnly>>,
) -> HttpResponse {
    let csrf = form.map(|f| f.into_inner().csrf).unwrap_or_default();
    let by = audit::actor(&c, &req);
    guarded_form(&c, &req, &csrf, move |p| async move {
        let db = p.db();
        audit::purge(db, &by, p.clock().now_ms()).await?;
        Ok(View::Redirect("/console/queue".into()))
    })
    .await
}
