//! The image built with buildah from the Dockerfile and run: its configuration agrees with the
//! compose file, both health checks pass inside it, the server runs as uid 10001, and a message
//! written through the API survives a new container on the same volume.

use super::*;

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
