//! The quickstart's local steps, as written in docs/quickstart.md: its commands make the secret
//! files, its configuration file passes its `check-config` command with them and serves; its
//! `dkim`, `doctor` and `queue list` commands run as written, with nothing in the environment;
//! its nginx site, run in front of that server over TLS, passes `Host` through so the fediverse
//! documents name the public host; its Caddyfile is valid; behind that nginx, each client is
//! admitted on its own (the server trusts the proxy's X-Forwarded-For). Only what cannot exist
//! here is changed (ports, paths, the certificate, the owner of the secret files, a per-peer cap
//! small enough to reach, an agent that never answers), and each change is asserted to have
//! found its line, so an edit of the document that breaks a step breaks this test.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use switchboard::transports::activitypub::sig;

use crate::activitypub::remote::{Remote, note_create, now_s, rsa_sign};
use crate::helpers::{Binary, wait_for};

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/quickstart.md"))
        .unwrap()
}

/// The first fenced block of language `lang` after the heading that starts with `heading`.
fn block(doc: &str, heading: &str, lang: &str) -> String {
    let at = doc
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let fence = format!("```{lang}\n");
    let start = doc[at..]
        .find(&fence)
        .unwrap_or_else(|| panic!("no {lang} block under {heading:?}"))
        + at
        + fence.len();
    let end = doc[start..].find("```").unwrap() + start;
    doc[start..end].to_owned()
}

/// The commands of the section that starts with `heading` that run `switchboard` as the
/// quickstart writes them (`sudo -u switchboard switchboard --config … ARGS`).
fn commands(doc: &str, heading: &str) -> Vec<String> {
    let at = doc
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let section = &doc[at + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let found: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with(SWITCHBOARD))
        .map(str::to_owned)
        .collect();
    assert!(
        !found.is_empty(),
        "no switchboard command under {heading:?}"
    );
    found
}

/// How the quickstart runs a command: as the service's user, with the service's configuration.
const SWITCHBOARD: &str =
    "sudo -u switchboard switchboard --config /etc/switchboard/switchboard.toml ";

/// Runs a quickstart command line (see [`commands`]) on `config`, with no `SWITCHBOARD__…`
/// variable in its environment: all it needs is in the files, as for the service.
fn run_command(line: &str, config: &Path) -> (bool, String, String) {
    let args = line
        .strip_prefix(SWITCHBOARD)
        .unwrap_or_else(|| panic!("{line:?}"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.arg("--config")
        .arg(config)
        .args(args.split_whitespace());
    cmd.env_remove("SWITCHBOARD_CONFIG")
        .env_remove("CREDENTIALS_DIRECTORY");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SWITCHBOARD__")) {
        cmd.env_remove(k);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `text` with `from` replaced by `to`, which must occur.
fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the quickstart no longer has {from:?}");
    text.replace(from, to)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A self-signed certificate for `sb.example.com` in `dir`: (chain, key).
fn certificate(dir: &Path) -> (String, String) {
    let (crt, key) = (dir.join("fullchain.pem"), dir.join("privkey.pem"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=sb.example.com"])
        .args(["-addext", "subjectAltName=DNS:sb.example.com"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("openssl (scripts/peers/quickstart.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (crt.display().to_string(), key.display().to_string())
}

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_configuration_and_proxy_work_as_written() {
    if !crate::helpers::interop("quickstart") {
        return;
    }
    let doc = doc();
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = certificate(dir.path());

    // Step 3: the configuration, with this machine's ports and paths.
    let mut config = block(&doc, "3. Configure", "toml");
    config = swap(
        &config,
        "bind = \"127.0.0.1:8080\"",
        "bind = \"127.0.0.1:0\"",
    );
    config = swap(
        &config,
        "sqlite:///var/lib/switchboard/switchboard.db",
        &format!("sqlite://{}/switchboard.db", dir.path().display()),
    );
    config = swap(&config, "bind = \"0.0.0.0:25\"", "bind = \"127.0.0.1:0\"");
    // The proxy is trusted, not given a raised per-peer cap: each client behind it is capped
    // on its own. A small cap here, and an agent that never answers, show it below.
    assert!(
        !config.contains("max_connections_per_peer ="),
        "the quickstart trusts the proxy instead of raising the per-peer cap"
    );
    config = swap(
        &config,
        "trusted_proxies = [\"127.0.0.1/32\"]\n",
        "trusted_proxies = [\"127.0.0.1/32\"]\nmax_connections_per_peer = 2\n",
    );
    let silent_agent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    config = swap(
        &config,
        "https://agent.internal.example/hook",
        &format!("http://{}/hook", silent_agent.local_addr().unwrap()),
    );
    let _silent = tokio::spawn(async move {
        // Takes the agent's calls and never answers them.
        let mut held = Vec::new();
        while let Ok((s, _)) = silent_agent.accept().await {
            held.push(s);
        }
    });
    config = swap(&config, "/etc/switchboard/tls/fullchain.pem", &crt);
    config = swap(&config, "/etc/switchboard/tls/privkey.pem", &key);
    // The secret files, made by the step's own commands in a directory of the test's.
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    let mut make_secrets = block(&doc, "3. Configure", "sh");
    make_secrets = swap(&make_secrets, "sudo install", "install");
    make_secrets = swap(&make_secrets, "-o root -g switchboard ", "");
    make_secrets = swap(
        &make_secrets,
        "/etc/switchboard/$name",
        &format!("{}/$name", etc.display()),
    );
    let made = Command::new("sh").args(["-ec", &make_secrets]).status();
    assert!(made.unwrap().success(), "{make_secrets}");
    let mut secrets = Vec::new();
    for name in ["webhook.secret", "api.token", "media.secret", "kek"] {
        let path = etc.join(name);
        config = swap(
            &config,
            &format!("\"/etc/switchboard/{name}\""),
            &format!("\"{}\"", path.display()),
        );
        let secret = std::fs::read_to_string(&path).unwrap();
        assert!(secret.trim_end().len() >= 32, "{name}: {secret:?}");
        secrets.push(secret.trim_end().to_owned());
    }
    // The metrics listener too, so parallel tests do not collide; and logs the harness reads.
    config = swap(
        &config,
        "[server]\n",
        "[server]\nmetrics_bind = \"127.0.0.1:0\"\n",
    );
    config.push_str("\n[log]\nformat = \"json\"\n");
    // The fediverse server of this test is on loopback, where switchboard fetches its key.
    config.push_str("\n[net]\nallow_private_addresses = true\n");
    let file = dir.path().join("switchboard.toml");
    std::fs::write(&file, &config).unwrap();
    // `check-config` as written: the secrets come from their files, none is printed.
    let [check] = &commands(&doc, "3. Configure")[..] else {
        panic!("one check-config command");
    };
    assert!(check.ends_with(" check-config"), "{check}");
    let (ok, printed, err) = run_command(check, &file);
    assert!(ok, "check-config: {printed}{err}");
    for secret in &secrets {
        assert!(!printed.contains(secret.as_str()), "a secret was printed");
    }

    // Step 5: it serves, with STARTTLS on the certificate.
    let server = Binary::start(&file, None);
    assert!(server.smtp.is_some(), "SMTP is listening");

    // Step 4: the nginx site in front of it, over TLS; and, as the control, the same site
    // without the line that passes `Host` through.
    let site = block(&doc, "4. HTTPS in front", "nginx");
    let host_line = "        proxy_set_header Host $host;\n";
    assert!(
        site.contains("proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;"),
        "the site names each client to switchboard"
    );
    let nginx = std::env::var("SWITCHBOARD_NGINX").unwrap_or_else(|_| "/usr/sbin/nginx".into());
    let start_site = |name: &str, site: &str| -> (Nginx, u16) {
        let port = free_port();
        let mut site = swap(
            site,
            "listen 443 ssl;",
            &format!("listen 127.0.0.1:{port} ssl;"),
        );
        site = swap(&site, "    listen [::]:443 ssl;\n", "");
        site = swap(
            &site,
            "/etc/letsencrypt/live/sb.example.com/fullchain.pem",
            &crt,
        );
        site = swap(
            &site,
            "/etc/letsencrypt/live/sb.example.com/privkey.pem",
            &key,
        );
        site = swap(
            &site,
            "proxy_pass http://127.0.0.1:8080;",
            &format!("proxy_pass http://{};", server.http),
        );
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let d = d.display();
        let conf = format!(
            "master_process off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log;\n\
             events {{}}\nhttp {{\naccess_log off;\nclient_body_temp_path {d};\n\
             proxy_temp_path {d};\n{site}\n}}\n"
        );
        let conf_file = dir.path().join(format!("{name}.conf"));
        std::fs::write(&conf_file, conf).unwrap();
        let test = Command::new(&nginx)
            .arg("-t")
            .arg("-c")
            .arg(&conf_file)
            .output()
            .expect("nginx (scripts/peers/quickstart.sh)");
        assert!(
            test.status.success(),
            "nginx -t: {}",
            String::from_utf8_lossy(&test.stderr)
        );
        let child = Command::new(&nginx)
            .arg("-c")
            .arg(&conf_file)
            .args(["-g", "daemon off;"])
            // One process (master_process off), killed on drop, with no inherited output: a
            // leftover would hold the test run's output pipe open.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        (Nginx(child), port)
    };
    let (_documented, port) = start_site("documented", &site);
    let (_control, control_port) = start_site("control", &swap(&site, host_line, ""));
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .resolve(
            "sb.example.com",
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        )
        .build()
        .unwrap();
    let base = format!("https://sb.example.com:{port}");
    let jrd: Value = wait_for(20, "nginx to answer", || async {
        let r = http
            .get(format!(
                "{base}/.well-known/webfinger?resource=acct:helper@sb.example.com"
            ))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(r.json().await.ok()?)
    })
    .await;
    assert_eq!(jrd["subject"], "acct:helper@sb.example.com", "{jrd}");
    let actor: Value = http
        .get(format!("{base}/agents/helper"))
        .header("Accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The proxy passed Host through: the documents name the public host, not the upstream.
    assert_eq!(
        actor["id"], "https://sb.example.com/agents/helper",
        "{actor}"
    );
    assert_eq!(actor["preferredUsername"], "helper");
    let card: Value = http
        .get(format!("{base}/agents/helper/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["name"], "Helper", "{card}");

    // A fediverse server signs over the public host; through the documented site the
    // signature verifies (202), through the control it cannot (401).
    let remote = Remote::start().await;
    remote.add_actor("alice");
    let helper = "https://sb.example.com/agents/helper";
    let post = |port: u16, n: &str| {
        let activity = note_create(
            &remote,
            "alice",
            n,
            vec![helper.into()],
            vec![],
            &[(helper, "@helper@sb.example.com")],
            "<p>@helper hello</p>",
        );
        let body = serde_json::to_vec(&activity).unwrap();
        let signed_url = url::Url::parse("https://sb.example.com/inbox").unwrap();
        let headers = sig::sign_cavage::<()>(
            "POST",
            &signed_url,
            Some(&body),
            &remote.key_id("alice"),
            now_s(),
            |m| Ok(rsa_sign(m)),
        )
        .unwrap();
        let mut req = http
            .post(format!("https://sb.example.com:{port}/inbox"))
            .header("content-type", "application/activity+json")
            .header("host", "sb.example.com")
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };
    let through = post(port, "n1").await.unwrap();
    assert_eq!(through.status(), 202, "{:?}", through.text().await);
    let control = post(control_port, "n2").await.unwrap();
    assert_eq!(
        control.status(),
        401,
        "without Host passed through the signature cannot verify"
    );

    // Per-client admission through the proxy: every request reaches switchboard from nginx
    // (127.0.0.1), which names the client in X-Forwarded-For. One client (127.0.0.2) holds its
    // two places with A2A calls the agent never answers; its next request is refused with 503,
    // while another client (127.0.0.3) still gets through the same proxy.
    let client_at = |source: [u8; 4]| {
        reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .local_address(std::net::IpAddr::from(source))
            .resolve(
                "sb.example.com",
                std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            )
            .build()
            .unwrap()
    };
    let (busy, other) = (client_at([127, 0, 0, 2]), client_at([127, 0, 0, 3]));
    let slow_calls: Vec<_> = (0..2)
        .map(|i| {
            let busy = busy.clone();
            let url = format!("https://sb.example.com:{port}/agents/helper/a2a");
            // A call sent while a probe below holds one of the two places is refused; it is
            // sent again until it holds a place of its own.
            tokio::spawn(async move {
                loop {
                    let r = busy
                        .post(&url)
                        .json(
                            &serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "message/send",
                            "params": {"message": {"kind": "message", "role": "user",
                                "messageId": format!("slow-{i}"),
                                "parts": [{"kind": "text", "text": "take your time"}]}}}),
                        )
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status() == 503 => {
                            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
                        }
                        r => return r,
                    }
                }
            })
        })
        .collect();
    let card_url = format!("https://sb.example.com:{port}/agents/helper/agent-card.json");
    let refused = wait_for(
        30,
        "the busy client's third request to be refused",
        || async {
            let r = busy.get(&card_url).send().await.ok()?;
            (r.status() == 503).then_some(r)
        },
    )
    .await;
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    assert!(
        slow_calls.iter().all(|c| !c.is_finished()),
        "the two slow calls still hold their places"
    );
    let through = other.get(&card_url).send().await.unwrap();
    assert_eq!(
        through.status(),
        200,
        "another client behind the same proxy is admitted"
    );
    for c in slow_calls {
        c.abort();
    }

    // The Caddyfile parses.
    let caddyfile = dir.path().join("Caddyfile");
    std::fs::write(&caddyfile, block(&doc, "4. HTTPS in front", "caddyfile")).unwrap();
    let out = Command::new("caddy")
        .args(["adapt", "--adapter", "caddyfile", "--config"])
        .arg(&caddyfile)
        .output()
        .expect("caddy (scripts/peers/quickstart.sh)");
    assert!(
        out.status.success(),
        "caddy adapt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let adapted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = adapted.to_string();
    assert!(
        text.contains("sb.example.com") && text.contains("127.0.0.1:8080"),
        "{text}"
    );

    // Step 6: `dkim` prints the record of the key the server made, read from the files alone.
    let [dkim] = &commands(&doc, "6. Publish")[..] else {
        panic!("one dkim command");
    };
    let (ok, out, err) = run_command(dkim, &file);
    assert!(ok, "{dkim}: {err}");
    assert!(
        out.starts_with("switchboard._domainkey.sb.example.com. IN TXT \"v=DKIM1; k=rsa; p="),
        "{out}"
    );
    // Step 7: `doctor` runs its checks (the public ones fail here, away from the internet); the
    // configuration, the database and the encryption of its keys under the KEK pass.
    let [doctor] = &commands(&doc, "7. Check")[..] else {
        panic!("one doctor command");
    };
    let (_, out, err) = run_command(doctor, &file);
    assert!(
        out.contains(" passed, ") && out.contains(" failed"),
        "{doctor}: {out}{err}"
    );
    assert!(!err.contains("missing field"), "{err}");
    for check in ["database", "kek"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("pass") && l.split_whitespace().nth(1) == Some(check)),
            "{check}: {out}"
        );
    }
    // Step 8: `queue list` answers (nothing is dead).
    let [queue] = &commands(&doc, "8. Talk")[..] else {
        panic!("one queue command");
    };
    assert!(queue.contains(" queue list "), "{queue}");
    let (ok, out, err) = run_command(queue, &file);
    assert!(ok, "{queue}: {err}");
    assert!(out.trim().is_empty(), "{out}");
    drop(server);
}
