//! The files in `deploy/` hold together: the Dockerfile, `compose.yaml` and the systemd unit are
//! parsed and checked for what running switchboard needs (a data volume, SMTP reachable, a
//! health check without curl, no root, secrets only from an env file, a stop timeout above the
//! shutdown grace period), the unit and its sysusers.d entry go through systemd's own tools,
//! and the image's environment is loaded by the real binary. The Kubernetes manifests of
//! `deploy/kubernetes/` go through kubernetes-validate against a pinned Kubernetes version, the
//! configuration a replica runs with (ConfigMap, image, Secret) through the configuration check,
//! and what an operator relies on (probes on the private listener, graceful stops, no Service
//! on the private listener, SMTP client addresses kept) is checked one property at a time.
//! And the image is built with buildah from the Dockerfile and run: its configuration agrees
//! with the compose file, both health checks pass inside it, the server runs as uid 10001, and a
//! message written through the API survives a new container on the same volume.

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
    // `systemctl reload` signals the server, which keeps serving (serving.rs tests the binary).
    assert_eq!(settings["ExecReload"], "/bin/kill -HUP $MAINPID");

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

/// The manifests' folder.
const KUBERNETES: &str = "deploy/kubernetes";

/// The Kubernetes version whose API schemas the manifests must pass.
const KUBERNETES_VERSION: &str = "1.34";

/// The files `kustomization.yaml` applies, in its order.
fn kustomization_resources() -> Vec<String> {
    let docs = YamlLoader::load_from_str(&read(&format!("{KUBERNETES}/kustomization.yaml")))
        .expect("kustomization.yaml parses");
    strings(&docs[0]["resources"])
}

/// Every object the kustomization applies, with its file.
fn kubernetes_objects() -> Vec<(String, Yaml)> {
    kustomization_resources()
        .into_iter()
        .flat_map(|file| {
            let docs = YamlLoader::load_from_str(&read(&format!("{KUBERNETES}/{file}")))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            docs.into_iter()
                .filter(|d| !d.is_null())
                .map(move |d| (file.clone(), d))
        })
        .collect()
}

/// `y` at a dotted path (numbers index lists); the test fails where the path leads nowhere.
fn at<'a>(y: &'a Yaml, path: &str) -> &'a Yaml {
    let mut cur = y;
    for seg in path.split('.') {
        cur = match seg.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[seg],
        };
        assert!(!cur.is_badvalue(), "no {path} (missing at {seg})");
    }
    cur
}

fn text<'a>(y: &'a Yaml, path: &str) -> &'a str {
    at(y, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"))
}

fn int(y: &Yaml, path: &str) -> i64 {
    at(y, path)
        .as_i64()
        .unwrap_or_else(|| panic!("{path} is not an integer"))
}

fn list<'a>(y: &'a Yaml, path: &str) -> &'a [Yaml] {
    at(y, path)
        .as_vec()
        .unwrap_or_else(|| panic!("{path} is not a list"))
}

/// Every object of `kind`.
fn of_kind<'a>(objects: &'a [(String, Yaml)], kind: &str) -> Vec<&'a Yaml> {
    objects
        .iter()
        .filter(|(_, o)| o["kind"].as_str() == Some(kind))
        .map(|(_, o)| o)
        .collect()
}

/// The one object of `kind` named `name`.
fn named<'a>(objects: &'a [(String, Yaml)], kind: &str, name: &str) -> &'a Yaml {
    let found: Vec<&Yaml> = of_kind(objects, kind)
        .into_iter()
        .filter(|o| o["metadata"]["name"].as_str() == Some(name))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} named {name}");
    found[0]
}

/// The Deployment, the only one.
fn deployment(objects: &[(String, Yaml)]) -> &Yaml {
    let found = of_kind(objects, "Deployment");
    assert_eq!(found.len(), 1, "one Deployment");
    found[0]
}

/// The switchboard container of the Deployment's pods.
fn container(deployment: &Yaml) -> &Yaml {
    list(deployment, "spec.template.spec.containers")
        .iter()
        .find(|c| c["name"].as_str() == Some("switchboard"))
        .expect("a container named switchboard")
}

/// A port as the container has it: a number, or the name of one of its ports.
fn container_port(container: &Yaml, port: &Yaml) -> i64 {
    if let Some(n) = port.as_i64() {
        return n;
    }
    let name = port.as_str().expect("a port is a number or a name");
    list(container, "ports")
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .map(|p| int(p, "containerPort"))
        .unwrap_or_else(|| panic!("the container has no port named {name}"))
}

/// A map of string values (labels, selectors, stringData) as pairs.
fn string_map(y: &Yaml, path: &str) -> BTreeMap<String, String> {
    at(y, path)
        .as_hash()
        .unwrap_or_else(|| panic!("{path} is not a mapping"))
        .iter()
        .map(|(k, v)| {
            let v = v
                .as_str()
                .unwrap_or_else(|| panic!("{path}: {k:?} is not a string"));
            (k.as_str().unwrap().to_owned(), v.to_owned())
        })
        .collect()
}

/// Whether every label of `selector` is on the pods.
fn selects(selector: &BTreeMap<String, String>, pod_labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
}

/// The Secret's entries (its stringData: the example's values are readable placeholders).
fn secret_entries(secret: &Yaml) -> BTreeMap<String, String> {
    assert!(
        secret["data"].is_badvalue(),
        "the example Secret holds stringData only"
    );
    string_map(secret, "stringData")
}

/// What a replica runs with: the ConfigMap's file where `SWITCHBOARD_CONFIG` points, and the
/// environment as the container gets it — the image's `ENV`, overridden by the Secrets of
/// `envFrom`, overridden by the container's own `env`.
struct Replica {
    _dir: tempfile::TempDir,
    file: PathBuf,
    /// The ConfigMap's file as TOML.
    toml: toml::Table,
    env: BTreeMap<String, String>,
}

impl Replica {
    fn of(objects: &[(String, Yaml)]) -> Self {
        let deployment = deployment(objects);
        let c = container(deployment);
        let mut env = image_env(&final_stage());
        for from in list(c, "envFrom") {
            let name = text(from, "secretRef.name");
            env.extend(secret_entries(named(objects, "Secret", name)));
        }
        for var in list(c, "env") {
            let name = text(var, "name").to_owned();
            let value = if let Some(v) = var["value"].as_str() {
                v.to_owned()
            } else {
                let secret = named(objects, "Secret", text(var, "valueFrom.secretKeyRef.name"));
                let key = text(var, "valueFrom.secretKeyRef.key");
                secret_entries(secret)
                    .remove(key)
                    .unwrap_or_else(|| panic!("{name}: no {key} in its Secret"))
            };
            env.insert(name, value);
        }
        // SWITCHBOARD_CONFIG names a file of a ConfigMap mounted in the container.
        let path = env
            .get("SWITCHBOARD_CONFIG")
            .expect("the container sets SWITCHBOARD_CONFIG")
            .clone();
        let (dir, key) = path.rsplit_once('/').expect("an absolute path");
        let mount = list(c, "volumeMounts")
            .iter()
            .find(|m| m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(dir))
            .unwrap_or_else(|| panic!("nothing is mounted at {dir}"));
        let volume = list(deployment, "spec.template.spec.volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("the mount's volume");
        let config_map = named(objects, "ConfigMap", text(volume, "configMap.name"));
        // The key holds a dot: no dotted path.
        let content = config_map["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("the ConfigMap has no {key}"));
        let toml: toml::Table = toml::from_str(content)
            .unwrap_or_else(|e| panic!("the ConfigMap's {key} is not TOML: {e}"));
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(key);
        std::fs::write(&file, content).unwrap();
        Self {
            _dir: tmp,
            file,
            toml,
            env,
        }
    }

    /// The configuration, loaded as `serve` loads it.
    fn config(&self) -> switchboard::Config {
        switchboard::Config::load(Some(&self.file), self.env.clone())
            .unwrap_or_else(|e| panic!("the replicas' configuration: {e}"))
    }

    /// An address the ConfigMap's own file sets (`section.key`).
    fn file_addr(&self, section: &str, key: &str) -> std::net::SocketAddr {
        self.toml
            .get(section)
            .and_then(|s| s.get(key))
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("the ConfigMap sets no {section}.{key}"))
            .parse()
            .unwrap_or_else(|e| panic!("{section}.{key}: {e}"))
    }
}

/// kubernetes-validate: `SWITCHBOARD_KUBERNETES_VALIDATE` (set by `scripts/peers/deploy.sh`),
/// else the one on PATH. Missing, the test is skipped with a note, unless
/// `SWITCHBOARD_INTEROP=1` (scripts/test), where that is a failure.
fn kubernetes_validate() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWITCHBOARD_KUBERNETES_VALIDATE") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "SWITCHBOARD_KUBERNETES_VALIDATE={}: no such file",
            path.display()
        );
        return Some(path);
    }
    let found = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("kubernetes-validate"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("SWITCHBOARD_INTEROP").as_deref() != Ok("1"),
            "kubernetes-validate is missing: scripts/peers/deploy.sh installs it"
        );
        eprintln!(
            "kubernetes-validate is missing: the manifests' schema check is skipped \
             (scripts/test installs it with scripts/peers/deploy.sh)"
        );
    }
    found
}

#[test]
fn the_kubernetes_manifests_pass_kubernetes_validate() {
    let Some(tool) = kubernetes_validate() else {
        return;
    };
    let files = kustomization_resources();
    let out = Command::new(&tool)
        .args(["--kubernetes-version", KUBERNETES_VERSION, "--strict"])
        .args(files.iter().map(|f| root().join(KUBERNETES).join(f)))
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubernetes-validate: {report}");
    // An object of a kind or API version without a schema only draws a warning.
    assert!(
        !report.contains("WARN") && !report.contains("ERROR"),
        "kubernetes-validate: {report}"
    );
    let passed = report.lines().filter(|l| l.contains(" passed ")).count();
    assert_eq!(
        passed,
        kubernetes_objects().len(),
        "every object passed: {report}"
    );
}

#[test]
fn the_kustomization_applies_every_manifest_of_its_folder() {
    let resources = kustomization_resources();
    let mut listed = resources.clone();
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), resources.len(), "a file listed twice");
    let mut present: Vec<String> = std::fs::read_dir(root().join(KUBERNETES))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .filter(|n| n != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present, "kustomization.yaml resources");
    for (file, o) in kubernetes_objects() {
        for field in ["apiVersion", "kind", "metadata.name"] {
            text(&o, field);
        }
        assert!(
            o["metadata"]["namespace"].is_badvalue(),
            "{file}: the namespace is the one applied to"
        );
    }
}

#[test]
fn kubernetes_replicas_run_a_configuration_that_passes_check_config() {
    let objects = kubernetes_objects();
    let replica = Replica::of(&objects);
    let config = replica.config();
    // What `check-config` checks beyond the loader's own check.
    if let Err(e) = config.check_with(&switchboard::app::transport_names()) {
        panic!("check-config: {e}");
    }
    let problems = switchboard::ops::check_environment(&config, &switchboard::app::job_kinds());
    assert!(problems.is_empty(), "check-config: {problems:?}");

    // One PostgreSQL database shared by every replica: an SQLite file cannot be shared. The
    // image's own default (SQLite in its volume) must not be what is left.
    let url = url::Url::parse(config.database.url.expose()).expect("database.url is a URL");
    assert!(
        matches!(url.scheme(), "postgres" | "postgresql"),
        "the replicas' database is {}:, not PostgreSQL",
        url.scheme()
    );
    if let Some(file_url) = replica
        .toml
        .get("database")
        .and_then(|d| d.get("url"))
        .and_then(|u| u.as_str())
    {
        assert!(
            file_url.starts_with("postgres://") || file_url.starts_with("postgresql://"),
            "the ConfigMap's database.url is not PostgreSQL"
        );
    }
    // Media URLs minted by one replica are served by all.
    assert!(config.media.secret.is_some(), "media.secret is unset");
    // The console on the private listener, which the kubelet reaches from outside the pod.
    assert!(!config.server.metrics_bind.ip().is_loopback());
    assert!(config.console.enabled && config.console.token.is_some());
}

#[test]
fn kubernetes_probes_ask_the_private_listener() {
    let objects = kubernetes_objects();
    let replica = Replica::of(&objects);
    let config = replica.config();
    let private = i64::from(config.server.metrics_bind.port());
    assert_ne!(private, i64::from(config.server.bind.port()));
    let file_bind = replica.file_addr("server", "metrics_bind");
    assert!(
        file_bind.ip().is_unspecified() && i64::from(file_bind.port()) == private,
        "the ConfigMap's server.metrics_bind {file_bind}: every interface, port {private}"
    );
    let c = container(deployment(&objects));
    for (probe, paths) in [
        ("livenessProbe", &["/healthz"][..]),
        ("readinessProbe", &["/readyz"][..]),
        ("startupProbe", &["/healthz", "/readyz"][..]),
    ] {
        if probe == "startupProbe" && c[probe].is_badvalue() {
            continue;
        }
        let get = at(c, &format!("{probe}.httpGet"));
        let path = text(get, "path");
        assert!(paths.contains(&path), "{probe} asks {path}");
        assert_eq!(
            container_port(c, at(get, "port")),
            private,
            "{probe}: on the private listener"
        );
        assert!(
            matches!(get["scheme"].as_str(), None | Some("HTTP")),
            "{probe}: plain HTTP"
        );
    }
}

/// Seconds the container's preStop hook waits (`sleep N`, or the `sleep` action).
fn pre_stop_seconds(c: &Yaml) -> u64 {
    let hook = &c["lifecycle"]["preStop"];
    if hook.is_badvalue() {
        return 0;
    }
    if let Some(n) = hook["sleep"]["seconds"].as_i64() {
        return n.try_into().unwrap();
    }
    let command = strings(at(hook, "exec.command"));
    assert_eq!(command[0], "sleep", "preStop: {command:?}");
    command[1].parse().unwrap()
}

#[test]
fn kubernetes_pods_run_unprivileged_and_outlast_the_shutdown_grace_period() {
    let objects = kubernetes_objects();
    let d = deployment(&objects);
    let c = container(d);
    let pod = at(d, "spec.template.spec");
    assert!(int(d, "spec.replicas") >= 2, "several replicas");

    // The image deploy/Dockerfile builds, by the name compose gives it.
    let compose = YamlLoader::load_from_str(&read("deploy/compose.yaml")).unwrap();
    let services = merged(get(&merged(&compose[0]), "services"));
    let image = services
        .values()
        .map(merged)
        .find(|s| {
            s.get(&Yaml::String("build".into()))
                .map(merged)
                .is_some_and(|b| get(&b, "dockerfile").as_str() == Some("deploy/Dockerfile"))
        })
        .map(|s| get(&s, "image").as_str().unwrap().to_owned())
        .expect("a compose service built from deploy/Dockerfile");
    assert_eq!(text(c, "image"), image);

    // SIGTERM comes after the preStop pause; the kill after the grace period.
    let stop = u64::try_from(int(pod, "terminationGracePeriodSeconds")).unwrap();
    let shutdown =
        grace_seconds().max(Replica::of(&objects).config().server.shutdown_grace_seconds);
    let pause = pre_stop_seconds(c);
    assert!(
        stop > shutdown + pause,
        "terminationGracePeriodSeconds {stop} <= shutdown grace {shutdown} + preStop {pause}"
    );

    // No root, no privilege, nothing written to the image.
    let user = |key: &str| {
        c["securityContext"][key]
            .clone()
            .or(pod["securityContext"][key].clone())
    };
    assert_eq!(user("runAsNonRoot").as_bool(), Some(true), "runAsNonRoot");
    assert!(
        user("runAsUser").as_i64().is_some_and(|u| u > 0),
        "runAsUser is not root"
    );
    assert_eq!(
        at(c, "securityContext.readOnlyRootFilesystem").as_bool(),
        Some(true)
    );
    assert_eq!(
        at(c, "securityContext.allowPrivilegeEscalation").as_bool(),
        Some(false)
    );
    assert!(
        strings(at(c, "securityContext.capabilities.drop")).contains(&"ALL".to_owned()),
        "every capability dropped"
    );
    for bound in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            text(c, &format!("resources.{bound}.{resource}"));
        }
    }
}

#[test]
fn kubernetes_services_reach_the_pods_but_never_the_private_listener() {
    let objects = kubernetes_objects();
    let config = Replica::of(&objects).config();
    let d = deployment(&objects);
    let c = container(d);
    let pod_labels = string_map(d, "spec.template.metadata.labels");
    assert!(selects(
        &string_map(d, "spec.selector.matchLabels"),
        &pod_labels
    ));
    let private = i64::from(config.server.metrics_bind.port());
    let (mut http, mut smtp) = (false, false);
    for service in of_kind(&objects, "Service") {
        let name = text(service, "metadata.name");
        assert!(
            selects(&string_map(service, "spec.selector"), &pod_labels),
            "Service {name} does not select the pods"
        );
        for port in list(service, "spec.ports") {
            let number = int(port, "port");
            let target = match &port["targetPort"] {
                Yaml::BadValue => number,
                t => container_port(c, t),
            };
            assert!(
                number != private && target != private,
                "Service {name} exposes the private listener ({private})"
            );
            if target == i64::from(config.server.bind.port()) {
                http = true;
            }
            if target == i64::from(config.email.bind.port()) {
                smtp = true;
                assert_eq!(number, 25, "Service {name}: SMTP on port 25");
                // Client addresses survive (SPF, per-peer caps): no SNAT to a node's address.
                assert_eq!(text(service, "spec.type"), "LoadBalancer", "{name}");
                assert_eq!(
                    text(service, "spec.externalTrafficPolicy"),
                    "Local",
                    "{name}"
                );
            }
        }
    }
    assert!(http, "no Service reaches server.bind");
    assert!(
        smtp && config.email.enabled,
        "no Service reaches email.bind"
    );

    let pdbs = of_kind(&objects, "PodDisruptionBudget");
    assert_eq!(pdbs.len(), 1, "one PodDisruptionBudget");
    let pdb = pdbs[0];
    assert!(
        pdb["spec"]["selector"]["matchExpressions"].is_badvalue(),
        "matchLabels only"
    );
    assert!(
        selects(&string_map(pdb, "spec.selector.matchLabels"), &pod_labels),
        "the PodDisruptionBudget does not select the Deployment's pods"
    );
    let replicas = int(d, "spec.replicas");
    let allowed = match (
        pdb["spec"]["maxUnavailable"].as_i64(),
        pdb["spec"]["minAvailable"].as_i64(),
    ) {
        (Some(max), None) => max,
        (None, Some(min)) => replicas - min,
        other => panic!("maxUnavailable or minAvailable as a number: {other:?}"),
    };
    assert!(
        allowed >= 1 && allowed < replicas,
        "the PodDisruptionBudget lets {allowed} of {replicas} replicas go at once"
    );
}

#[test]
fn the_kubernetes_secret_holds_only_switchboard_secrets_as_placeholders() {
    let objects = kubernetes_objects();
    let c = container(deployment(&objects));
    let names: Vec<&str> = list(c, "envFrom")
        .iter()
        .map(|f| text(f, "secretRef.name"))
        .collect();
    assert!(!names.is_empty(), "the container takes a Secret's entries");
    for name in names {
        let entries = secret_entries(named(&objects, "Secret", name));
        for (key, value) in &entries {
            assert!(key.starts_with("SWITCHBOARD__"), "{name}: {key}");
            // A key the configuration knows (unknown keys are errors), and a secret: the
            // effective configuration `check-config` prints masks it.
            let config = switchboard::Config::load(None, [(key.clone(), value.clone())])
                .unwrap_or_else(|e| panic!("{name}: {key}: {e}"));
            assert!(
                !config.to_masked_toml().unwrap().contains(value.as_str()),
                "{name}: {key} is not a secret of the configuration"
            );
            // The example's values are placeholders, marked as such.
            assert!(
                value.contains("CHANGE-ME"),
                "{name}: {key} is no placeholder"
            );
        }
        for needed in ["SWITCHBOARD__DATABASE__URL", "SWITCHBOARD__MEDIA__SECRET"] {
            assert!(entries.contains_key(needed), "{name}: no {needed}");
        }
    }
}

// The image leg: deploy/Dockerfile built with buildah and the image run.

/// buildah on the image leg's storage: `SWITCHBOARD_BUILDAH` (the wrapper
/// `scripts/peers/image.sh` writes). `None`, with one line saying why, where buildah cannot run
/// here (`SWITCHBOARD_IMAGE_SKIP`), or outside the test command (`SWITCHBOARD_INTEROP=1`
/// without the variable is a failure).
fn buildah_or_skip() -> Option<PathBuf> {
    use std::io::Write;
    // Past the test harness's capture: the line shows in the run's output.
    let say = |why: &str| {
        let _ = writeln!(std::io::stderr(), "image leg skipped: {why}");
    };
    if let Ok(reason) = std::env::var("SWITCHBOARD_IMAGE_SKIP") {
        say(&reason);
        return None;
    }
    match std::env::var_os("SWITCHBOARD_BUILDAH") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            assert!(
                std::env::var("SWITCHBOARD_INTEROP").as_deref() != Ok("1"),
                "SWITCHBOARD_BUILDAH is unset: scripts/peers/image.sh sets it"
            );
            say("SWITCHBOARD_BUILDAH is unset (scripts/test sets it with scripts/peers/image.sh)");
            None
        }
    }
}

/// A command's output, the test failing with its stderr unless it succeeded.
fn succeed(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pause in a synchronous test, where there is no async worker to block.
#[allow(clippy::disallowed_methods)]
fn pause(millis: u64) {
    std::thread::sleep(std::time::Duration::from_millis(millis));
}

/// The last lines of a log file, for a failure's message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A network namespace of the test's own with only loopback up, where the container's
/// listeners (every interface, the image's ports) take nothing from the host.
struct NetNs(String);

impl NetNs {
    fn new(name: String) -> Self {
        succeed(Command::new("ip").args(["netns", "add", &name]));
        let ns = Self(name);
        succeed(Command::new("ip").args(["-n", &ns.0, "link", "set", "lo", "up"]));
        ns
    }

    /// `program` run inside the namespace.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.0]).arg(program);
        cmd
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
    }
}

/// The pids of every process below `pid`.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let ppid = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))?
                .trim()
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// One container of the built image, with the volume and environment every command in it gets
/// (as `docker run -v … -e …`, and `docker exec` after it).
struct Container<'a> {
    buildah: &'a Path,
    net: &'a NetNs,
    name: String,
    volume: String,
    env: Vec<String>,
    /// `buildah run` of the image's entrypoint and command, while it runs.
    main: Option<std::process::Child>,
    log: PathBuf,
}

impl<'a> Container<'a> {
    fn create(
        buildah: &'a Path,
        net: &'a NetNs,
        image: &str,
        name: String,
        volume: String,
        env: &BTreeMap<String, String>,
        log: PathBuf,
    ) -> Self {
        succeed(
            Command::new(buildah)
                .args(["from", "--pull=never", "--name", &name, image])
                .stdout(std::process::Stdio::null()),
        );
        Self {
            buildah,
            net,
            name,
            volume,
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            main: None,
            log,
        }
    }

    fn command(&self, argv: &[String]) -> Command {
        let mut cmd = self.net.command(self.buildah);
        cmd.arg("run").args(["--volume", &self.volume]);
        for kv in &self.env {
            cmd.args(["--env", kv]);
        }
        cmd.arg(&self.name).arg("--").args(argv);
        cmd
    }

    /// Starts the image's process (its entrypoint and command), logging to `self.log`.
    fn start(&mut self, argv: &[String]) {
        let log = std::fs::File::create(&self.log).unwrap();
        let child = self
            .command(argv)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.main = Some(child);
    }

    /// `argv` run in the container beside the main process, as `docker exec` would.
    fn exec(&self, argv: &[String]) -> std::process::Output {
        self.command(argv).output().unwrap()
    }

    /// The main process: the one process below `buildah run` that runs the image's binary.
    fn main_pid(&self, binary: &str) -> u32 {
        let child = self.main.as_ref().expect("the container runs");
        let pids: Vec<u32> = descendants(child.id())
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == binary)
            })
            .collect();
        assert_eq!(
            pids.len(),
            1,
            "one {binary} process in the container: {pids:?}"
        );
        pids[0]
    }

    /// Fails the test when the main process has exited.
    fn assert_running(&mut self) {
        let child = self.main.as_mut().expect("the container runs");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the container exited ({status}):\n{}", tail(&self.log));
        }
    }

    /// Sends `signal` to the main process and waits for it to exit: its status and how long it
    /// took.
    fn stop(
        &mut self,
        pid: u32,
        signal: &str,
        limit: std::time::Duration,
    ) -> (std::process::ExitStatus, std::time::Duration) {
        let started = std::time::Instant::now();
        succeed(Command::new("kill").args(["-s", signal, &pid.to_string()]));
        let mut child = self.main.take().expect("the container runs");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            if started.elapsed() > limit {
                let _ = Command::new("kill")
                    .args(["-s", "KILL", &pid.to_string()])
                    .output();
                let _ = child.kill();
                panic!(
                    "SIG{signal} did not stop the container in {limit:?}:\n{}",
                    tail(&self.log)
                );
            }
            pause(100);
        }
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        if let Some(mut child) = self.main.take() {
            for pid in descendants(child.id()) {
                let _ = Command::new("kill")
                    .args(["-s", "KILL", &pid.to_string()])
                    .output();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new(self.buildah).args(["rm", &self.name]).output();
    }
}

/// Whether the name `{prefix}{pid}…` belongs to a run whose process is gone.
fn left_behind(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.split(['-', ' ']).next())
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// What an interrupted run left: its containers, its namespace and what still runs there.
fn clear_leftovers(buildah: &Path) {
    let containers =
        succeed(Command::new(buildah).args(["containers", "--format", "{{.ContainerName}}"]));
    for name in containers.lines() {
        if left_behind(name, "switchboard-test-") {
            let _ = Command::new(buildah).args(["rm", name]).output();
        }
    }
    let namespaces = succeed(Command::new("ip").args(["netns", "list"]));
    for ns in namespaces.lines().filter(|l| left_behind(l, "sb-image-")) {
        let ns = ns.split_whitespace().next().unwrap();
        let pids = succeed(Command::new("ip").args(["netns", "pids", ns]));
        for pid in pids.split_whitespace() {
            let _ = Command::new("kill").args(["-s", "KILL", pid]).output();
        }
        let _ = Command::new("ip").args(["netns", "delete", ns]).output();
    }
}

/// A compose value with its `${VAR:-default}` interpolated to the default.
fn compose_default(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("a closing brace") + start;
        let inner = &rest[start + 2..end];
        out.push_str(inner.split_once(":-").map(|(_, d)| d).unwrap_or_default());
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// `curl` inside the namespace: the status and the body as JSON.
fn http(
    net: &NetNs,
    token: &str,
    method: &str,
    url: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut cmd = net.command(Path::new("curl"));
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ])
    .args(["-H", &format!("Authorization: Bearer {token}")]);
    if let Some(body) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(body.to_string());
    }
    let out = succeed(cmd.arg(url));
    let (body, status) = out.trim_end().rsplit_once('\n').unwrap();
    let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("{method} {url}: {e}: {body}"));
    (status.parse().unwrap(), json)
}

#[test]
fn the_image_builds_runs_unprivileged_passes_its_health_checks_and_keeps_its_volume() {
    let Some(buildah) = buildah_or_skip() else {
        return;
    };
    let buildah = buildah.as_path();
    clear_leftovers(buildah);
    let scratch = tempfile::tempdir().unwrap();

    // The service compose builds from deploy/Dockerfile: the image is built under its name.
    let compose = YamlLoader::load_from_str(&read("deploy/compose.yaml")).unwrap();
    let service = merged(get(&merged(&compose[0]), "services"))
        .values()
        .map(merged)
        .find(|s| {
            s.get(&Yaml::String("build".into()))
                .map(merged)
                .is_some_and(|b| get(&b, "dockerfile").as_str() == Some("deploy/Dockerfile"))
        })
        .expect("a compose service built from deploy/Dockerfile");
    let image = get(&service, "image").as_str().unwrap().to_owned();

    // The build: base images from the leg's storage only (a registry's, or the stand-ins
    // scripts/peers/image.sh made), Docker's format so the image keeps its HEALTHCHECK, at a
    // lower priority than the other tests. Where the leg says so (SWITCHBOARD_IMAGE_BINARY,
    // on a machine of the image's Debian release), the image packages the binary this test
    // run was built with (the Dockerfile's BINARY=prebuilt), stripped as the source stage
    // strips its own, instead of compiling the tree a third time; otherwise its source stage
    // builds it, with cargo's download cache lent to it.
    let build_log = scratch.path().join("build.log");
    let log = std::fs::File::create(&build_log).unwrap();
    let mut build = Command::new("nice");
    build
        .args(["-n", "10"])
        .arg(buildah)
        .args(["build", "--format", "docker", "--pull=never"])
        .arg("--file")
        .arg(root().join("deploy/Dockerfile"))
        .args(["--tag", &image]);
    if std::env::var("SWITCHBOARD_IMAGE_BINARY").as_deref() == Ok("prebuilt") {
        let context = scratch.path().join("context");
        std::fs::create_dir(&context).unwrap();
        succeed(
            Command::new("strip")
                .arg("-o")
                .arg(context.join("switchboard"))
                .arg(env!("CARGO_BIN_EXE_switchboard")),
        );
        build.args(["--build-arg", "BINARY=prebuilt"]).arg(context);
    } else {
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
        build
            .arg("--volume")
            .arg(format!(
                "{}:/usr/local/cargo/registry",
                cargo_home.join("registry").display()
            ))
            .arg(root());
    }
    let started = std::time::Instant::now();
    let status = build
        .current_dir(root())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "buildah build: {status}\n{}",
        tail(&build_log)
    );
    eprintln!("image built in {:?}", started.elapsed());
    // Images the tag left behind.
    let _ = Command::new(buildah).args(["rmi", "--prune"]).output();

    // What the built image says of itself, against the compose file.
    let inspect: serde_json::Value = serde_json::from_str(&succeed(
        Command::new(buildah).args(["inspect", "--type", "image", &image]),
    ))
    .unwrap();
    let config = &inspect["Docker"]["config"];
    let user = config["User"].as_str().unwrap_or_default();
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let (uid, gid): (u32, u32) = (uid.parse().expect("a numeric USER"), gid.parse().unwrap());
    assert_ne!(uid, 0, "the image runs as root");
    assert!(
        service.get(&Yaml::String("user".into())).is_none(),
        "compose overrides the image's user"
    );
    for port in strings(get(&service, "ports")) {
        let inside = port.rsplit(':').next().unwrap().trim_end_matches("/tcp");
        assert!(
            config["ExposedPorts"]
                .get(format!("{inside}/tcp"))
                .is_some(),
            "compose publishes {port}, the image exposes {}",
            config["ExposedPorts"]
        );
    }
    for volume in strings(get(&service, "volumes")) {
        let path = volume.split(':').nth(1).unwrap();
        assert!(
            config["Volumes"].get(path).is_some(),
            "compose mounts {volume}, the image's volumes are {}",
            config["Volumes"]
        );
    }
    let argv = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not a list: {v}"))
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let image_health = argv(&config["Healthcheck"]["Test"]);
    assert_eq!(image_health[0], "CMD", "{image_health:?}");
    let compose_health = strings(get(&merged(get(&service, "healthcheck")), "test"));
    assert_eq!(compose_health[0], "CMD", "{compose_health:?}");
    let main: Vec<String> = argv(&config["Entrypoint"])
        .into_iter()
        .chain(argv(&config["Cmd"]))
        .collect();
    let binary = main[0].clone();
    let stop_signal = config["StopSignal"].as_str().unwrap_or("SIGTERM");
    let stop_grace = std::time::Duration::from_secs(duration_seconds(
        get(&service, "stop_grace_period").as_str().unwrap(),
    ));

    // The service's environment, but the database: compose's names its postgres service, and
    // what is tested here is the image's own SQLite file in its volume. The secrets come from the
    // env file's example.
    let mut env: BTreeMap<String, String> = merged(get(&service, "environment"))
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_owned(),
                compose_default(v.as_str().unwrap()),
            )
        })
        .filter(|(k, _)| k != "SWITCHBOARD__DATABASE__URL")
        .collect();
    env.extend(
        read("deploy/switchboard.env.example")
            .lines()
            .filter(|l| l.starts_with("SWITCHBOARD__"))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let token = env["SWITCHBOARD__API__TOKEN"].clone();
    let public = url::Url::parse(&env["SWITCHBOARD__SERVER__PUBLIC_URL"]).unwrap();

    // The volume: a directory of the test's, the image user's as a named volume copied from
    // the image would be.
    let data = scratch.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(uid), Some(gid)).unwrap();
    let volume = format!("{}:/var/lib/switchboard", data.display());
    let api = |path: &str| {
        format!(
            "http://127.0.0.1:{}{path}",
            public.port_or_known_default().unwrap()
        )
    };

    let net = NetNs::new(format!("sb-image-{}", std::process::id()));
    let mut message_id = String::new();
    let mut response = serde_json::Value::Null;
    for life in 1..=2 {
        let mut c = Container::create(
            buildah,
            &net,
            &image,
            format!("switchboard-test-{}-{life}", std::process::id()),
            volume.clone(),
            &env,
            scratch.path().join(format!("serve-{life}.log")),
        );
        c.start(&main);

        // Both health checks pass: the image's HEALTHCHECK (liveness) and compose's (readiness).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        for check in [&image_health[1..], &compose_health[1..]] {
            loop {
                c.assert_running();
                let out = c.exec(check);
                if out.status.success() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{check:?} fails: {}{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    tail(&c.log)
                );
                pause(250);
            }
        }

        // The server runs as the image's user, never root.
        let pid = c.main_pid(binary.rsplit('/').next().unwrap());
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        for (field, want) in [("Uid:", uid), ("Gid:", gid)] {
            let ids: Vec<u32> = status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .unwrap()
                .split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect();
            assert!(
                ids.iter().all(|&id| id == want),
                "{field} {ids:?}, not {want}"
            );
        }

        let (_, agents) = http(&net, &token, "GET", &api("/api/v1/agents"), None);
        let handle = agents["agents"][0]["handle"].as_str().unwrap().to_owned();
        let body = serde_json::json!({
            "external_id": "image-volume-1",
            "message": {
                "sender": {"address": "me@example.com", "auth_method": "none", "verified": false},
                "recipient": handle,
                "parts": [{"kind": "text", "mime": "text/plain", "content": "kept across containers"}]
            }
        });
        let (code, ids) = http(&net, &token, "POST", &api("/api/v1/messages"), Some(&body));
        if life == 1 {
            // Into the volume: the message, and the agent's answer once delivered.
            assert_eq!(code, 202, "{ids}");
            assert_eq!(ids["duplicate"], false);
            message_id = ids["id"].as_str().unwrap().to_owned();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let (_, m) = http(
                    &net,
                    &token,
                    "GET",
                    &api(&format!("/api/v1/messages/{message_id}")),
                    None,
                );
                if m["status"] == "delivered" {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "not delivered: {m}");
                pause(200);
            }
            let (code, r) = http(
                &net,
                &token,
                "GET",
                &api(&format!("/api/v1/messages/{message_id}/response")),
                None,
            );
            assert_eq!(code, 200, "{r}");
            response = r;
        } else {
            // A new container on the same volume: the same message, its answer, and the same
            // POST taken as the duplicate it is.
            assert_eq!(ids["duplicate"], true, "{ids}");
            assert_eq!(ids["id"].as_str(), Some(message_id.as_str()));
            let (code, m) = http(
                &net,
                &token,
                "GET",
                &api(&format!("/api/v1/messages/{message_id}")),
                None,
            );
            assert_eq!(
                (code, m["status"].as_str()),
                (200, Some("delivered")),
                "{m}"
            );
            let (_, r) = http(
                &net,
                &token,
                "GET",
                &api(&format!("/api/v1/messages/{message_id}/response")),
                None,
            );
            assert_eq!(r, response);
        }

        // The image's stop signal ends it cleanly, within compose's stop_grace_period.
        let (status, took) = c.stop(pid, stop_signal.trim_start_matches("SIG"), stop_grace);
        assert!(
            status.success(),
            "exit after {stop_signal}: {status}\n{}",
            tail(&c.log)
        );
        assert!(took < stop_grace, "{took:?}");
        // `drop` removes the container; the volume stays.
    }
    assert!(data.join("switchboard.db").is_file());
}
