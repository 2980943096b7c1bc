//! Payloads shaped like other servers' (Mastodon, GoToSocial, Misskey, Pleroma/Akkoma, Lemmy)
//! through the pure mapping functions, without a server.

use serde_json::Value;
use switchboard::transports::activitypub::mapping;

/// Payloads shaped like each server's (from their documented and observed formats, written
/// here, not copied) parse and map: who wakes, the text, visibility and thread key.
#[test]
fn fixtures_from_other_servers_parse_and_map() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/activitypub");
    let agent = "https://sb.example/agents/helper";
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let fx: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let activity = &fx["activity"];
        let expect = &fx["expect"];
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let mut note = activity["object"].clone();
        if activity["type"] == "Announce" {
            note = note["object"].clone();
        }
        if let Some(w) = expect.get("wakes") {
            let inner = if activity["type"] == "Announce" {
                &activity["object"]
            } else {
                activity
            };
            assert_eq!(
                mapping::wakes(&note, inner, agent),
                w.as_bool().unwrap(),
                "{name}: wakes"
            );
        }
        if let Some(text) = expect.get("text") {
            assert_eq!(
                mapping::note_text(&note),
                text.as_str().unwrap(),
                "{name}: text"
            );
        }
        if let Some(v) = expect.get("visibility") {
            let followers = format!(
                "{}/followers",
                mapping::iri(&activity["actor"]).unwrap_or_default()
            );
            assert_eq!(
                serde_json::to_value(mapping::visibility_of(&note, Some(&followers))).unwrap(),
                *v,
                "{name}: visibility"
            );
        }
        if let Some(th) = expect.get("thread") {
            assert_eq!(
                mapping::explicit_thread(&note).as_deref(),
                th.as_str(),
                "{name}: thread"
            );
        }
        if let Some(k) = expect.get("type") {
            assert_eq!(activity["type"], *k, "{name}: type");
        }
        seen += 1;
    }
    assert!(seen >= 10, "fixtures found: {seen}");
}
