//! The Kubernetes manifests of `deploy/kubernetes/`: kubernetes-validate against a pinned
//! Kubernetes version, the kustomization, the configuration a replica runs with, and what an
//! operator relies on, one property at a time.

use super::*;

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
