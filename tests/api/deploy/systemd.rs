//! The systemd unit and its sysusers.d entry through systemd's own tools.

use super::*;

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
