//! The Dockerfile and `compose.yaml`, parsed: the image runs unprivileged with a data volume,
//! SMTP and a health check; the build context leaves out build output and history; compose runs
//! two instances on PostgreSQL with secrets from an env file.

use super::*;

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
