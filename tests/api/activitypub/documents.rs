//! Discovery documents: WebFinger, the actor and instance actor, NodeInfo, the agent's HTML page
//! and its empty collections.

use serde_json::{Value, json};

use super::setup;
use crate::helpers::Engine;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_documents() {
    let s = setup(Engine::Sqlite, |_| {}).await;
    let (t, http) = (&s.t, &s.t.http);
    let domain = t.domain();
    let actor = format!("{}/agents/echo", t.base);

    let wf: Value = http
        .get(format!(
            "{}/.well-known/webfinger?resource=acct:echo@{domain}",
            t.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(wf["subject"], format!("acct:echo@{domain}"));
    assert_eq!(wf["links"][0]["rel"], "self");
    assert_eq!(wf["links"][0]["href"], actor);
    assert_eq!(
        wf["links"][1]["rel"],
        "https://mentionable.dev/ns/rel/agent-card"
    );
    assert_eq!(
        wf["links"][2]["rel"],
        "http://webfinger.net/rel/profile-page"
    );
    assert_eq!(wf["links"][3]["rel"], "mailto");
    assert!(
        wf["links"][3]["href"]
            .as_str()
            .unwrap()
            .starts_with("mailto:echo@"),
        "{wf}"
    );
    // The agent-card link leads to the A2A transport's card for the same agent.
    let card = http
        .get(wf["links"][1]["href"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), 200);
    let card: Value = card.json().await.unwrap();
    assert!(card["supportedInterfaces"].is_array(), "{card}");
    let by_url = http
        .get(format!("{}/.well-known/webfinger", t.base))
        .query(&[("resource", &actor)])
        .send()
        .await
        .unwrap();
    assert_eq!(by_url.status(), 200);
    for unknown in [
        format!("acct:nobody@{domain}"),
        "acct:echo@elsewhere.example".into(),
    ] {
        let r = http
            .get(format!("{}/.well-known/webfinger", t.base))
            .query(&[("resource", unknown)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    }

    let doc: Value = http
        .get(&actor)
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["type"], "Service");
    assert_eq!(doc["preferredUsername"], "echo");
    assert_eq!(doc["inbox"], format!("{actor}/inbox"));
    assert_eq!(doc["outbox"], format!("{actor}/outbox"));
    assert_eq!(doc["followers"], format!("{actor}/followers"));
    assert_eq!(doc["endpoints"]["sharedInbox"], format!("{}/inbox", t.base));
    assert_eq!(doc["publicKey"]["id"], format!("{actor}#main-key"));
    let spki =
        switchboard::keys::spki_der_from_pem(doc["publicKey"]["publicKeyPem"].as_str().unwrap())
            .unwrap();
    assert!(spki.len() > 270, "RSA-2048 SPKI");
    let mk = doc["assertionMethod"][0]["publicKeyMultibase"]
        .as_str()
        .unwrap();
    assert!(mk.starts_with("z6Mk"), "{mk}");
    assert_eq!(doc["assertionMethod"][0]["type"], "Multikey");
    assert!(
        doc["@context"]
            .to_string()
            .contains("https://www.w3.org/ns/activitystreams")
    );

    let page = http
        .get(&actor)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(&format!("@echo@{domain}"))
    );
    assert_eq!(
        http.get(format!("{}/agents/nobody", t.base))
            .header("accept", "application/activity+json")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    let ni: Value = http
        .get(format!("{}/.well-known/nodeinfo", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let href = ni["links"][0]["href"].as_str().unwrap().to_owned();
    let ni: Value = http.get(href).send().await.unwrap().json().await.unwrap();
    assert_eq!(ni["version"], "2.1");
    assert_eq!(ni["protocols"], json!(["activitypub"]));

    let inst: Value = http
        .get(format!("{}/actor", t.base))
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(inst["type"], "Application");
    assert!(
        inst["publicKey"]["publicKeyPem"]
            .as_str()
            .unwrap()
            .contains("PUBLIC KEY")
    );

    for coll in ["outbox", "followers"] {
        let c: Value = http
            .get(format!("{actor}/{coll}"))
            .header("accept", "application/activity+json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(c["type"], "OrderedCollection");
        assert_eq!(c["totalItems"], 0);
    }
}
