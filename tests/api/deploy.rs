//! The files in `deploy/` hold together: the Dockerfile, `compose.yaml` and the systemd unit are
//! parsed and checked for what running switchboard needs (a data volume, SMTP reachable, a
//! health check without curl, no root, secrets only from an env file, a stop timeout above the
//! shutdown grace period), the unit and its sysusers.d entry go through systemd's own tools,
//! and the image's environment is loaded by the real binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The shutdown grace period every stop timeout must exceed: the default's, or the example
/// configuration's when that is longer.
fn grace_seconds() -> u64 {
    let example = switchboard::Config::load(
        Some(&root().join("deploy/switchboard.example.toml")),
        Vec::new(),
    )
    .unwrap();
    switchboard::Config::default()
        .server
        .shutdown_grace_seconds
        .max(example.server.shutdown_grace_seconds)
}

/// The instructions of the Dockerfile's last stage, continuation lines joined: (keyword, rest).
fn final_stage() -> Vec<(String, String)> {
    let text = read("deploy/Dockerfile");
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && cur.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                joined.push(std::mem::take(&mut cur));
            }
        }
    }
    let mut stage = Vec::new();
    for ins in joined {
        let (kw, rest) = ins.split_once(' ').unwrap_or((&ins, ""));
        let kw = kw.to_uppercase();
        if kw == "FROM" {
            stage.clear();
        }
        stage.push((kw, rest.trim().to_owned()));
    }
    stage
}

fn instruction(stage: &[(String, String)], kw: &str) -> Vec<String> {
    stage
        .iter()
        .filter(|(k, _)| k == kw)
        .map(|(_, v)| v.clone())
        .collect()
}

/// The image's `ENV` settings.
fn image_env(stage: &[(String, String)]) -> BTreeMap<String, String> {
    instruction(stage, "ENV")
        .iter()
        .flat_map(|e| {
            e.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn port_of(addr: &str) -> String {
    addr.rsplit(':').next().unwrap().to_owned()
}

#[test]
fn the_image_runs_unprivileged_with_a_volume_smtp_and_a_health_check() {
    let stage = final_stage();
    let user = instruction(&stage, "USER");
    let user = user.last().expect("the final stage sets USER");
    let name = user.split(':').next().unwrap();
    assert!(name != "root" && name != "0", "USER {user}");

    let env = image_env(&stage);
    let volume = instruction(&stage, "VOLUME").join(" ");
    assert!(
        volume.contains("\"/var/lib/switchboard\""),
        "VOLUME {volume}"
    );
    assert!(
        env["SWITCHBOARD__DATABASE__URL"].contains("/var/lib/switchboard/"),
        "the SQLite file lives in the volume"
    );
    let exposed: Vec<String> = instruction(&stage, "EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    for key in [
        "SWITCHBOARD__SERVER__BIND",
        "SWITCHBOARD__EMAIL__BIND",
        "SWITCHBOARD__SERVER__METRICS_BIND",
    ] {
        let addr = &env[key];
        assert!(addr.starts_with("0.0.0.0:"), "{key}={addr}: all interfaces");
        assert!(exposed.contains(&port_of(addr)), "{key}={addr} not exposed");
    }
    let health = instruction(&stage, "HEALTHCHECK").join(" ");
    assert!(
        health.contains(r#"CMD ["switchboard", "healthcheck"]"#),
        "{health}"
    );
    assert!(
        !health.contains("curl") && !health.contains("wget"),
        "{health}"
    );

    // The image's environment is a configuration the binary accepts, with SMTP where exposed.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.arg("check-config").env_remove("SWITCHBOARD_CONFIG");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SWITCHBOARD__")) {
        cmd.env_remove(k);
    }
    let out = cmd.envs(&env).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("bind = \"{}\"", env["SWITCHBOARD__EMAIL__BIND"])),
        "{stdout}"
    );
    // The health check's command exists.
    let help = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["healthcheck", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
}

#[test]
fn the_build_context_leaves_out_build_output_and_history() {
    let ignore = read(".dockerignore");
    let lines: Vec<&str> = ignore.lines().map(str::trim).collect();
    for needed in ["target/", "fuzz/target/", ".git/", "**/node_modules/"] {
        assert!(lines.contains(&needed), "{needed} not in .dockerignore");
    }
}

/// A mapping with YAML merge keys (`<<: *anchor`) applied.
fn merged(y: &Yaml) -> yaml_rust2::yaml::Hash {
    let mut out = yaml_rust2::yaml::Hash::new();
    if let Some(h) = y.as_hash() {
        if let Some(base) = h.get(&Yaml::String("<<".into())) {
            out.extend(merged(base));
        }
        for (k, v) in h {
            if k.as_str() != Some("<<") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn get<'a>(h: &'a yaml_rust2::yaml::Hash, key: &str) -> &'a Yaml {
    h.get(&Yaml::String(key.into()))
        .unwrap_or_else(|| panic!("no {key} in {h:?}"))
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .unwrap_or_else(|| panic!("not a list: {y:?}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// `45s`, `1m30s` in seconds.
fn duration_seconds(s: &str) -> u64 {
    let (mut total, mut n) = (0, String::new());
    for c in s.chars() {
        if c.is_ascii_digit() {
            n.push(c);
        } else {
            let v: u64 = n.parse().unwrap();
            n.clear();
            total += match c {
                's' => v,
                'm' => v * 60,
                'h' => v * 3600,
                _ => panic!("unit {c} in {s}"),
            };
        }
    }
    assert!(n.is_empty(), "{s}: no unit");
    total
}

#[test]
fn compose_runs_two_instances_on_postgresql_with_secrets_from_an_env_file() {
    let docs = YamlLoader::load_from_str(&read("deploy/compose.yaml")).unwrap();
    let doc = merged(&docs[0]);
    let services = merged(get(&doc, "services"));
    let volumes = merged(get(&doc, "volumes"));
    let env_example = read("deploy/switchboard.env.example");
    let env_file: BTreeMap<String, String> = env_example
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let smtp_port = port_of(&image_env(&final_stage())["SWITCHBOARD__EMAIL__BIND"]);
    let mut instances = 0;
    for (name, service) in &services {
        let name = name.as_str().unwrap();
        let s = merged(service);
        // Every service restarts, checks its health and keeps its data in a named volume.
        let restart = get(&s, "restart").as_str().unwrap();
        assert!(
            matches!(restart, "always" | "unless-stopped" | "on-failure"),
            "{name}: restart {restart}"
        );
        let health = strings(get(&merged(get(&s, "healthcheck")), "test"));
        assert_eq!(health[0], "CMD", "{name}");
        for v in strings(get(&s, "volumes")) {
            let source = v.split(':').next().unwrap();
            assert!(
                volumes.contains_key(&Yaml::String(source.into())),
                "{name}: {v} is not a named volume"
            );
        }
        assert_eq!(
            strings(get(&s, "env_file")),
            ["switchboard.env"],
            "{name}: secrets from the env file"
        );
        // No secret inline: every password, token and key comes from the env file.
        let env = merged(get(&s, "environment"));
        for (k, v) in &env {
            let (k, v) = (k.as_str().unwrap(), v.as_str().unwrap_or_default());
            for word in ["PASSWORD", "TOKEN", "SECRET"] {
                assert!(!k.contains(word), "{name}: {k} inline");
            }
            if let Ok(url) = url::Url::parse(v) {
                assert!(url.password().is_none(), "{name}: a password in {k}");
            }
        }
        if name == "postgres" {
            assert!(env_file.contains_key("POSTGRES_PASSWORD"));
            continue;
        }
        instances += 1;
        let build = merged(get(&s, "build"));
        assert_eq!(
            get(&build, "dockerfile").as_str(),
            Some("deploy/Dockerfile")
        );
        assert_eq!(health[1..3], ["switchboard", "healthcheck"], "{name}");
        let url =
            url::Url::parse(get(&env, "SWITCHBOARD__DATABASE__URL").as_str().unwrap()).unwrap();
        assert_eq!(url.scheme(), "postgres");
        assert!(
            services.contains_key(&Yaml::String(url.host_str().unwrap().into())),
            "{name}: the database host is the postgres service"
        );
        let depends = merged(get(&s, "depends_on"));
        assert_eq!(
            get(&merged(get(&depends, "postgres")), "condition").as_str(),
            Some("service_healthy")
        );
        let ports = strings(get(&s, "ports"));
        assert!(
            ports.iter().any(|p| p.ends_with(&format!(":{smtp_port}"))),
            "{name}: SMTP port {smtp_port} is not published: {ports:?}"
        );
        let stop = duration_seconds(get(&s, "stop_grace_period").as_str().unwrap());
        assert!(stop > grace_seconds(), "{name}: stop_grace_period {stop} s");
    }
    assert!(instances >= 2, "two switchboard instances");
    // The env file's settings are real: switchboard takes its keys, and the PostgreSQL client
    // takes the password of the URL, which has none.
    for key in [
        "POSTGRES_PASSWORD",
        "PGPASSWORD",
        "SWITCHBOARD__API__TOKEN",
        "SWITCHBOARD__MEDIA__SECRET",
    ] {
        assert!(env_file.contains_key(key), "{key} not in the env example");
    }
    let c = switchboard::Config::load(
        None,
        env_file
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(c.api.token.is_some() && c.media.secret.is_some());
    assert!(
        read(".gitignore")
            .lines()
            .any(|l| l == "deploy/switchboard.env"),
        "the real env file is never committed"
    );
}

/// A systemd tool; the test command installs systemd where it is missing
/// (`scripts/peers/deploy.sh`).
fn systemd_tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("{name} is missing: install systemd (scripts/peers/deploy.sh does)")
    })
}

/// `Key=value` lines of a unit, last one winning.
fn unit_settings(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn the_systemd_unit_and_its_user_pass_systemds_own_checks() {
    let unit = read("deploy/switchboard.service");
    let settings = unit_settings(&unit);
    let stop: u64 = settings["TimeoutStopSec"].parse().unwrap();
    assert!(stop > grace_seconds(), "TimeoutStopSec={stop}");
    assert_eq!(settings["LimitNOFILE"], "65536");
    assert!(
        settings["AmbientCapabilities"]
            .split_whitespace()
            .any(|c| c == "CAP_NET_BIND_SERVICE"),
        "port 25 needs CAP_NET_BIND_SERVICE"
    );
    assert!(settings["ExecStart"].ends_with(" serve"));

    // systemd-analyze checks every key and value (it needs the binary to exist: the real one).
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("switchboard.service");
    std::fs::write(
        &copy,
        unit.replace(
            "/usr/local/bin/switchboard",
            env!("CARGO_BIN_EXE_switchboard"),
        ),
    )
    .unwrap();
    let out = Command::new(systemd_tool("systemd-analyze"))
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );

    // The sysusers.d entry creates the unit's user and group, at home in its working directory.
    let sysroot = dir.path().join("root");
    std::fs::create_dir_all(sysroot.join("etc")).unwrap();
    let out = Command::new(systemd_tool("systemd-sysusers"))
        .arg(format!("--root={}", sysroot.display()))
        .arg(root().join("deploy/switchboard.sysusers.conf"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("Unknown") && !stderr.contains("Failed"),
        "systemd-sysusers: {stderr}"
    );
    let passwd = std::fs::read_to_string(sysroot.join("etc/passwd")).unwrap();
    let user = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == settings["User"])
        .unwrap_or_else(|| panic!("no user {} in {passwd}", settings["User"]));
    assert_eq!(user[5], settings["WorkingDirectory"]);
    let group = std::fs::read_to_string(sysroot.join("etc/group")).unwrap();
    assert!(
        group
            .lines()
            .any(|l| l.starts_with(&format!("{}:", settings["Group"]))),
        "{group}"
    );
}
