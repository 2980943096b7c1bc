//! Loading, layering, masking and checking of the whole configuration.

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn defaults_are_valid_and_serve_echo_on_sqlite() {
    let c = Config::load(None, vec![]).unwrap();
    assert_eq!(c.server.bind.to_string(), "127.0.0.1:8080");
    assert_eq!(c.database.url.expose(), "sqlite://switchboard.db");
    assert_eq!(c.agents.len(), 1);
    assert!(matches!(c.agents[0].backend, BackendConfig::Echo));
    assert_eq!(c.domain().unwrap(), "127.0.0.1:8080");
}

#[test]
fn env_overrides_file_and_types_follow_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[server]\nworkers = 3\n[queue]\nlease_seconds = 5\n").unwrap();
    let c = Config::load(
        Some(&path),
        env(&[
            ("SWITCHBOARD__SERVER__WORKERS", "7"),
            ("SWITCHBOARD__DATABASE__URL", "postgres://localhost/x"),
            ("SWITCHBOARD__API__TOKEN", "12345"),
            ("SWITCHBOARD__AGENTS__0__NAME", "helper"),
            ("SWITCHBOARD__QUEUE__KINDS__DISPATCH__BATCH_SIZE", "9"),
            ("UNRELATED", "x"),
        ]),
    )
    .unwrap();
    assert_eq!(c.server.workers, 7);
    assert_eq!(c.queue.lease_seconds, 5);
    assert_eq!(c.api.token.unwrap().expose(), "12345");
    assert_eq!(c.agents[0].name, "helper");
    assert_eq!(c.queue.kind("dispatch").batch_size, 9);
}

#[test]
fn unknown_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[server]\nbindd = \"127.0.0.1:1\"\n").unwrap();
    let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
    assert!(e.contains("server") && e.contains("bindd"), "{e}");
    let e = Config::load(None, env(&[("SWITCHBOARD__QUEUE__LEASE", "3")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("queue") && e.contains("lease"), "{e}");
    std::fs::write(&path, "[[agents]]\nname = \"w\"\nbackend = { kind = \"webhook\", url = \"https://a.example\", secret = \"s\", urll = 1 }\n").unwrap();
    let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
    assert!(e.contains("agents[0].backend") && e.contains("urll"), "{e}");
}

#[test]
fn semantic_problems_are_all_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[database]\nurl = \"mysql://x\"\n[[agents]]\nname = \"a b\"\nbackend = { kind = \"echo\" }\n[[agents]]\nname = \"A\"\nbackend = { kind = \"echo\" }\n[[agents]]\nname = \"a\"\nbackend = { kind = \"echo\" }\n",
    )
    .unwrap();
    let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
    assert!(e.contains("database.url"), "{e}");
    assert!(e.contains("agents[0].name"), "{e}");
    assert!(
        e.contains("agents[2].name") && e.contains("duplicate"),
        "{e}"
    );
    std::fs::write(
        &path,
        "[queue]\nlease_seconds = 10\n[[agents]]\nname = \"w\"\nbackend = { kind = \"webhook\", url = \"https://a.example\", secret = \"s\", timeout_ms = 10000 }\n",
    )
    .unwrap();
    let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
    assert!(e.contains("shorter than queue.lease_seconds"), "{e}");
}

/// Each section reports its own problems under its keys' paths, section by section, all in one
/// error; the lease rule applies to A2A backends as to webhooks.
#[test]
fn every_section_reports_its_problems_under_its_path() {
    let mut c = Config::default();
    c.server.public_url = Some("ftp://sb.example".into());
    c.database.url = Secret::new("mysql://x");
    let agent = |name: &str, backend, auth: Option<A2aAuthConfig>| AgentConfig {
        activitypub: None,
        name: name.into(),
        display_name: None,
        summary: None,
        backend,
        email: None,
        a2a: auth.map(|auth| AgentA2aConfig {
            skills: vec![],
            extended_skills: vec![],
            auth,
        }),
        access: None,
        notify: Vec::new(),
    };
    let issuer = JwtIssuerConfig {
        issuer: "https://id.example".into(),
        audiences: vec![],
        jwks_url: None,
        keys: vec![],
        algorithms: vec!["HS256".into()],
        assurance: None,
    };
    c.agents = vec![
        agent(
            "a b",
            BackendConfig::Webhook {
                url: "not a url".into(),
                secret: Secret::new("s"),
                timeout_ms: 5_000,
                assembled: false,
            },
            None,
        ),
        agent(
            "A",
            BackendConfig::A2a {
                card: "ftp://card.example".into(),
                token: None,
                timeout_ms: 10_000,
                streaming: true,
                require_signed_card: false,
                card_keys: vec![],
            },
            Some(A2aAuthConfig::Jwt {
                issuers: vec![],
                leeway_seconds: 60,
            }),
        ),
        agent(
            "a",
            BackendConfig::Echo,
            Some(A2aAuthConfig::Oauth {
                issuers: vec![],
                introspection: None,
                token_url: None,
                metadata_url: None,
                leeway_seconds: 60,
            }),
        ),
        agent(
            "b",
            BackendConfig::Conformance,
            Some(A2aAuthConfig::Jwt {
                issuers: vec![issuer],
                leeway_seconds: 60,
            }),
        ),
    ];
    c.queue.lease_seconds = 10;
    c.queue.kinds.get_mut("dispatch").unwrap().workers = 0;
    c.a2a.default_agent = Some("nobody".into());
    c.a2a.max_parts = 0;
    c.api.callback_url = Some("not a url".into());
    c.activitypub.host_concurrency = 0;
    c.email.tls_cert_file = Some("cert.pem".into());
    c.email.max_recipients = 0;
    c.email.max_data_memory_bytes = 1;
    c.email.dkim_selector = "bad selector".into();
    c.email.domain = Some("not a domain".into());
    let problems = match c.check() {
        Err(Error::Config(problems)) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        problems.lines().collect::<Vec<_>>(),
        [
            r#"server.public_url "ftp://sb.example": needs http(s) and a host"#,
            "database.url: must start with sqlite:, postgres:// or postgresql://",
            r#"agents[0].name "a b": use letters, digits, _ - ."#,
            r#"agents[0].backend.url "not a url": not an http(s) URL"#,
            r#"agents[1].backend.card "ftp://card.example": not an http(s) URL"#,
            "agents[1].backend.timeout_ms 10000: must be shorter than queue.lease_seconds",
            "agents[1].a2a.auth.issuers: at least one issuer",
            r#"agents[2].name "a": duplicate"#,
            "agents[2].a2a.auth: oauth needs issuers or introspection",
            "agents[3].a2a.auth.issuers[0].audiences: at least one audience",
            "agents[3].a2a.auth.issuers[0]: needs jwks_url or keys",
            r#"agents[3].a2a.auth.issuers[0].algorithms: "HS256" is not an accepted asymmetric algorithm"#,
            r#"a2a.default_agent "nobody": no such agent"#,
            "a2a.max_parts and a2a.max_page_size must be > 0",
            r#"api.callback_url "not a url": not a URL"#,
            "queue.kinds.dispatch: workers, batch_size and max_attempts must be > 0",
            "activitypub: max_body_bytes, max_json_depth and host_concurrency must be > 0",
            "email.tls_cert_file and email.tls_key_file: set both or neither",
            "email.max_message_bytes, max_recipients, max_sessions and max_sessions_per_peer must be > 0",
            "email.max_data_memory_bytes: must be at least email.max_message_bytes",
            r#"email.dkim_selector "bad selector": use letters, digits, - and ."#,
            r#"email.domain "not a domain": not a domain name"#,
        ]
    );
    c.queue.lease_seconds = 0;
    let problems = c.check().unwrap_err().to_string();
    assert!(
        problems.contains("queue.lease_seconds: must be > 0"),
        "{problems}"
    );
}

#[test]
fn secrets_never_print() {
    let c = Config::load(
        None,
        env(&[
            ("SWITCHBOARD__DATABASE__URL", "postgres://u:hunter2@db/x"),
            ("SWITCHBOARD__API__TOKEN", "tok-hunter2"),
        ]),
    )
    .unwrap();
    let shown = format!("{}{:?}", c.to_masked_toml().unwrap(), c);
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("********"));
}

#[test]
fn example_config_loads_and_documents_every_key() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("deploy/switchboard.example.toml");
    let c = Config::load(Some(&path), vec![]).unwrap();
    assert!(
        c.agents.len() >= 2,
        "the example shows an echo and a webhook agent"
    );
    // The static JWT keys it shows are keys the A2A verifier can read.
    let pems: Vec<&str> = c
        .agents
        .iter()
        .filter_map(|a| match a.a2a.as_ref().map(|a| &a.auth) {
            Some(A2aAuthConfig::Jwt { issuers, .. }) => Some(issuers),
            _ => None,
        })
        .flatten()
        .flat_map(|i| &i.keys)
        .map(|k| k.pem.as_str())
        .collect();
    assert!(!pems.is_empty(), "the example shows a static key");
    for pem in pems {
        let pem = pem.as_bytes();
        let read = jsonwebtoken::DecodingKey::from_ed_pem(pem)
            .or_else(|_| jsonwebtoken::DecodingKey::from_rsa_pem(pem))
            .or_else(|_| jsonwebtoken::DecodingKey::from_ec_pem(pem));
        assert!(read.is_ok(), "an unreadable key in the example");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let defaults = toml::Value::try_from(Config::default()).unwrap();
    let mut missing = Vec::new();
    collect_keys(&defaults, "", &mut missing, &text);
    for key in [
        "public_url",
        "token",
        "callback_url",
        "callback_secret",
        "secret",
        "timeout_ms",
        "url",
        "token_file",
        "secret_file",
    ] {
        if !text.contains(&format!("{key} =")) {
            missing.push(key.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "keys not documented in the example: {missing:?}"
    );
}

fn collect_keys(v: &toml::Value, prefix: &str, missing: &mut Vec<String>, text: &str) {
    if let toml::Value::Table(t) = v {
        for (k, v) in t {
            if let Some(first) = v
                .as_array()
                .and_then(|a| a.first())
                .filter(|f| f.is_table())
            {
                if !text.contains(&format!("[[{prefix}{k}]]")) {
                    missing.push(format!("{prefix}{k}"));
                }
                collect_keys(first, &format!("{prefix}{k}[]."), missing, text);
            } else if v.is_table() && !(prefix.ends_with("[].") && k == "backend") {
                collect_keys(v, &format!("{prefix}{k}."), missing, text);
            } else if !text.contains(&format!("{k} =")) {
                missing.push(format!("{prefix}{k}"));
            }
        }
    }
}

/// The request deadline must leave room for a whole body plus the longest wait a request makes.
#[test]
fn server_deadlines_must_nest() {
    let mut c = Config::default();
    c.server.body_timeout_ms = 20_000;
    c.server.request_timeout_ms = 20_000;
    c.server.max_connections_per_peer = 0;
    let problems = match c.check() {
        Err(Error::Config(problems)) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        problems.lines().collect::<Vec<_>>(),
        [
            "server.max_connections_per_peer: must be above 0",
            "server.request_timeout_ms 20000: must be at least server.body_timeout_ms plus the \
             longest of a2a.blocking_timeout_ms and activitypub.processing_timeout_ms (50000)",
        ]
    );
    c.server.max_connections_per_peer = 1;
    c.server.request_timeout_ms = 50_000;
    assert!(c.check().is_ok());
}

/// Rates and the concurrency cap must be above zero, in `[limits]` and per agent.
#[test]
fn limits_must_be_positive() {
    let mut c = Config::default();
    c.limits.per_sender = Some(crate::config::Rate {
        requests: 0,
        per_seconds: 60,
    });
    c.agents[0].access = Some(crate::config::AccessConfig {
        refusal_reply: Default::default(),
        limits: crate::config::LimitsConfig {
            max_concurrent_calls: Some(0),
            ..Default::default()
        },
        ..Default::default()
    });
    let problems = match c.check() {
        Err(Error::Config(problems)) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        problems.lines().collect::<Vec<_>>(),
        [
            "agents[0].access.limits.max_concurrent_calls: must be above 0",
            "limits.per_sender: requests and per_seconds must be above 0",
        ]
    );
}

/// A chain takes 1 to 16 agent turns, in `[limits]` and per agent; the agent's own value wins.
#[test]
fn max_hops_is_checked_and_an_agents_own_wins() {
    let mut c = Config::default();
    c.limits.max_hops = Some(0);
    c.agents[0].access = Some(crate::config::AccessConfig {
        limits: crate::config::LimitsConfig {
            max_hops: Some(17),
            ..Default::default()
        },
        ..Default::default()
    });
    let problems = match c.check() {
        Err(Error::Config(problems)) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        problems.lines().collect::<Vec<_>>(),
        [
            "agents[0].access.limits.max_hops: must be 1 to 16",
            "limits.max_hops: must be 1 to 16",
        ]
    );
    c.limits.max_hops = Some(5);
    let own = crate::config::LimitsConfig {
        max_hops: Some(2),
        ..Default::default()
    };
    assert_eq!(own.over(&c.limits).max_hops, Some(2));
    assert_eq!(
        crate::config::LimitsConfig::default()
            .over(&c.limits)
            .max_hops,
        Some(5)
    );
    assert_eq!(
        crate::limits::AgentLimits::default().max_hops,
        crate::config::DEFAULT_MAX_HOPS
    );
    c.agents[0].access = None;
    assert!(c.check().is_ok());
}

#[test]
fn an_openai_backend_reads_its_key_from_the_named_variable_and_never_prints_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        r#"[[agents]]
name = "helper"
[agents.backend]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.2"
api_key_env = "MY_LLM_KEY"
system_prompt = "You are helpful."
stream = true
max_tokens = 1024
temperature = 0.7
timeout_ms = 20000
"#,
    )
    .unwrap();
    let c = Config::load(Some(&path), env(&[("MY_LLM_KEY", "sk-hunter2")])).unwrap();
    let BackendConfig::Openai {
        api_key,
        model,
        max_tokens,
        temperature,
        ..
    } = &c.agents[0].backend
    else {
        panic!("not an openai backend: {:?}", c.agents[0].backend);
    };
    assert_eq!(api_key.as_ref().unwrap().expose(), "sk-hunter2");
    assert_eq!(
        (model.as_str(), *max_tokens, *temperature),
        ("llama3.2", Some(1024), Some(0.7))
    );
    let shown = format!("{}{:?}", c.to_masked_toml().unwrap(), c);
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("api_key_env = \"MY_LLM_KEY\""), "{shown}");

    // The variable unset: check-config says which one.
    let problems = Config::load(Some(&path), vec![]).unwrap_err().to_string();
    assert!(
        problems.contains("agents[0].backend.api_key_env \"MY_LLM_KEY\": the variable is not set"),
        "{problems}"
    );
    assert!(!problems.contains("hunter2"));
}

#[test]
fn an_openai_backend_is_checked() {
    let mut c = Config::default();
    c.agents[0].backend = BackendConfig::Openai {
        base_url: "ollama:11434".into(),
        model: " ".into(),
        api_key_env: Some("1-bad name".into()),
        system_prompt: None,
        stream: true,
        max_tokens: Some(0),
        temperature: Some(3.5),
        timeout_ms: 600_000,
        api_key: None,
    };
    let problems = c.check().unwrap_err().to_string();
    for expected in [
        "agents[0].backend.base_url \"ollama:11434\": not an http(s) URL",
        "agents[0].backend.model: must not be empty",
        "agents[0].backend.api_key_env \"1-bad name\": not an environment variable name",
        "agents[0].backend.max_tokens: must be > 0",
        "agents[0].backend.temperature 3.5: must be within 0..=2",
        "agents[0].backend.timeout_ms 600000: must be shorter than queue.lease_seconds",
    ] {
        assert!(problems.contains(expected), "{expected}\n{problems}");
    }
    // No key variable (a local server): fine.
    c.agents[0].backend = BackendConfig::Openai {
        base_url: "http://127.0.0.1:11434/v1".into(),
        model: "llama3.2".into(),
        api_key_env: None,
        system_prompt: None,
        stream: false,
        max_tokens: None,
        temperature: None,
        timeout_ms: 10_000,
        api_key: None,
    };
    c.check().unwrap();
}

#[test]
fn the_handle_domain_is_a_bare_host_name() {
    let mut c = Config::default();
    assert_eq!(c.handle_domain().unwrap(), "127.0.0.1:8080");
    c.server.public_url = Some("https://sb.example.com".into());
    c.server.handle_domain = Some("Example.com".into());
    c.check().unwrap();
    assert_eq!(c.handle_domain().unwrap(), "example.com");
    assert_eq!(c.domain().unwrap(), "sb.example.com");
    for bad in [
        "https://example.com",
        "example.com/path",
        "",
        "exa mple.com",
    ] {
        c.server.handle_domain = Some(bad.into());
        let problems = c.check().unwrap_err().to_string();
        assert!(
            problems.contains("server.handle_domain") && problems.contains("without a scheme"),
            "{bad}: {problems}"
        );
    }
}

/// `activitypub.max_reply_chars`: a table over the built-in entries (names in any case), or a
/// bare number for `default`; each entry 0 or at least the minimum, checked by `check-config`.
#[test]
fn max_reply_chars_overrides_the_built_in_table_and_is_checked() {
    let c = Config::load(None, vec![]).unwrap();
    let m = &c.activitypub.max_reply_chars;
    assert_eq!(m.default, 0);
    assert_eq!(m.for_software(Some("Mastodon")), 500);
    assert_eq!(m.for_software(Some("gotosocial")), 5000);
    assert_eq!(m.for_software(Some("misskey")), 3000);
    assert_eq!(m.for_software(Some("unheard-of")), 0);
    assert_eq!(m.for_software(None), 0);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[activitypub.max_reply_chars]\ndefault = 800\nMastodon = 1000\nmy-fork = 200\n",
    )
    .unwrap();
    let c = Config::load(Some(&path), vec![]).unwrap();
    let m = &c.activitypub.max_reply_chars;
    assert_eq!(m.for_software(Some("mastodon")), 1000);
    assert_eq!(m.for_software(Some("my-fork")), 200);
    assert_eq!(m.for_software(Some("pleroma")), 5000, "built-ins stay");
    assert_eq!(m.for_software(None), 800);
    // The shown configuration reads back the same.
    let shown: Config = toml::from_str(&c.to_masked_toml().unwrap()).unwrap();
    assert_eq!(shown.activitypub.max_reply_chars, *m);

    std::fs::write(&path, "[activitypub]\nmax_reply_chars = 700\n").unwrap();
    let c = Config::load(Some(&path), vec![]).unwrap();
    assert_eq!(c.activitypub.max_reply_chars.default, 700);
    assert_eq!(
        c.activitypub.max_reply_chars.for_software(Some("mastodon")),
        500
    );

    std::fs::write(
        &path,
        "[activitypub.max_reply_chars]\nmastodon = 10\ndefault = 49\nfine = 0\n",
    )
    .unwrap();
    let problems = Config::load(Some(&path), vec![]).unwrap_err().to_string();
    assert!(
        problems.contains("activitypub.max_reply_chars: default, mastodon must be 0"),
        "{problems}"
    );
    assert!(!problems.contains("fine"), "{problems}");
}

/// An extended card is for callers the agent authenticates: a public agent cannot have one;
/// pinned card keys are JWKs, read as such.
#[test]
fn an_extended_card_needs_callers_who_authenticate_and_card_keys_are_jwks() {
    let mut c: Config = toml::from_str(
        r#"
        [[agents]]
        name = "open"
        backend = { kind = "a2a", card = "https://r.example/card.json", require_signed_card = true, card_keys = [{ kty = "OKP", crv = "Ed25519", x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", kid = "r1" }] }
        [agents.a2a]
        extended_skills = [{ id = "x", name = "x", description = "x" }]
        "#,
    )
    .unwrap();
    c.server.public_url = Some("https://sb.example".into());
    let problems = match c.check() {
        Err(Error::Config(problems)) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        problems.lines().collect::<Vec<_>>(),
        [
            "agents[0].a2a.extended_skills: the extended card is for authenticated callers; set agents[0].a2a.auth to jwt or oauth"
        ]
    );
    match &c.agents[0].backend {
        BackendConfig::A2a {
            require_signed_card,
            card_keys,
            ..
        } => {
            assert!(require_signed_card);
            assert_eq!(card_keys[0].common.key_id.as_deref(), Some("r1"));
        }
        other => panic!("{other:?}"),
    }
    let bad = toml::from_str::<Config>(
        r#"
        [[agents]]
        name = "a"
        backend = { kind = "a2a", card = "https://r.example/card.json", card_keys = [{ kty = "nope" }] }
        "#,
    );
    assert!(bad.is_err());
}

#[test]
fn weak_secrets_are_named_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let text = "[api]\ntoken = \"x\"\n[console]\ntoken = \"fifteen-bytes!!\"\n\
         [[agents]]\nname = \"w\"\nbackend = { kind = \"webhook\", url = \"https://a.example\", secret = \"\" }\n\
         [[agents]]\nname = \"v\"\nbackend = { kind = \"webhook\", url = \"https://a.example\", secret = \"sixteen-bytes!!!\" }\n";
    std::fs::write(&path, text).unwrap();
    // Weak secrets load (tests use them); `check-config` and `serve` refuse them.
    let c = Config::load(Some(&path), vec![]).unwrap();
    let weak = c.weak_secrets();
    assert_eq!(weak.len(), 3, "{weak:?}");
    assert!(
        weak[0].starts_with("agents[0].backend.secret: empty"),
        "{weak:?}"
    );
    assert!(
        weak[1].starts_with("api.token: 1 bytes is too short"),
        "{weak:?}"
    );
    assert!(weak[2].starts_with("console.token: 15 bytes"), "{weak:?}");
    assert!(
        weak.iter().all(|w| !w.contains("fifteen")),
        "never the secret itself"
    );
    assert!(Config::default().weak_secrets().is_empty());
}

#[test]
fn secrets_come_from_files_and_systemd_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(dir.path().join("api.token"), "api-token-from-a-file\n").unwrap();
    std::fs::write(creds.join("webhook"), "webhook-secret-credential\r\n").unwrap();
    std::fs::write(dir.path().join("db.url"), "sqlite::memory:").unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!(
            "[api]\ntoken_file = \"{}\"\n[database]\nurl_file = \"{}\"\n\
             [[agents]]\nname = \"w\"\nbackend = {{ kind = \"webhook\", url = \"https://a.example\", secret_file = \"webhook\" }}\n",
            dir.path().join("api.token").display(),
            dir.path().join("db.url").display(),
        ),
    )
    .unwrap();
    let c = Config::load(
        Some(&path),
        env(&[(CREDENTIALS_DIRECTORY, creds.to_str().unwrap())]),
    )
    .unwrap();
    assert_eq!(c.api.token.unwrap().expose(), "api-token-from-a-file");
    assert_eq!(c.database.url.expose(), "sqlite::memory:");
    let BackendConfig::Webhook { secret, .. } = &c.agents[0].backend else {
        panic!("a webhook");
    };
    assert_eq!(secret.expose(), "webhook-secret-credential");

    // An environment variable names a file too (a Kubernetes Secret mounted as files).
    let c = Config::load(
        None,
        env(&[(
            "SWITCHBOARD__CONSOLE__TOKEN_FILE",
            dir.path().join("api.token").to_str().unwrap(),
        )]),
    )
    .unwrap();
    assert_eq!(c.console.token.unwrap().expose(), "api-token-from-a-file");

    // Without $CREDENTIALS_DIRECTORY the relative name is not found; every problem is named.
    let e = Config::load(
        Some(&path),
        env(&[("SWITCHBOARD__API__TOKEN", "also-given-as-a-value")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("api.token: set both"), "{e}");
    assert!(e.contains("agents[0].backend.secret_file: webhook:"), "{e}");
    assert!(!e.contains("also-given"), "{e}");

    std::fs::write(creds.join("webhook"), "\n").unwrap();
    let e = Config::load(
        None,
        env(&[(
            "SWITCHBOARD__API__TOKEN_FILE",
            creds.join("webhook").to_str().unwrap(),
        )]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("api.token_file:") && e.contains("empty"), "{e}");
}
