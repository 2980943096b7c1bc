//! The module rules of `docs/architecture.md`, checked on the source: which modules may import
//! which, and that no module imports a module that imports it back (a folder's `mod.rs` and
//! the files below it count as one family, whose members may use each other).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of the crate, by path (`transports::email::inbound`), with its source. Unit
/// tests kept in a `tests.rs` of their own are left out, as the inline ones are: tests may
/// reach anywhere.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let mut p = prefix.to_vec();
                p.push(name);
                walk(&path, &p, out);
            } else if path.extension().is_some_and(|e| e == "rs") && name != "tests" {
                let mut p = prefix.to_vec();
                if !matches!(name.as_str(), "mod" | "lib" | "main") {
                    p.push(name);
                }
                if p.is_empty() {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                out.entry(p.join("::")).or_default().push_str(&text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &[],
        &mut out,
    );
    out
}

/// The leading lowercase path segments of `s` (`a::b::C` gives `a::b`).
fn module_path(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(r) if r.starts_with(|c: char| c.is_ascii_lowercase()) => rest = r,
            _ => break,
        }
    }
    segs
}

/// The module paths `text` names through `crate::`, `super::` and `self::`, as written in
/// module `me` (a file's module, or a folder's for its `mod.rs`: `super::` is the parent of
/// either).
fn references(me: &str, text: &str) -> BTreeSet<Vec<String>> {
    let here: Vec<String> = me.split("::").map(str::to_owned).collect();
    // The module `super::` and `self::` are relative to.
    let base_self = here.clone();
    let mut base_super = here.clone();
    base_super.pop();
    let mut out = BTreeSet::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", base_super),
        ("self::", base_self),
    ] {
        let mut from = 0;
        while let Some(i) = text[from..].find(prefix) {
            let at = from + i;
            from = at + prefix.len();
            // `foo::super::` or an identifier ending in the prefix is not a path start.
            if at > 0
                && text[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let rest = &text[from..];
            let head = module_path(rest);
            let mut full = base.clone();
            full.extend(head.iter().cloned());
            out.insert(full.clone());
            // `prefix::a::{b, c::d}`: each member may name a submodule.
            let after: usize = head.iter().map(|h| h.len() + 2).sum();
            if let Some(group) = rest.get(after..).and_then(|r| r.strip_prefix('{')) {
                let close = group.find('}').unwrap_or(group.len());
                for member in group[..close].split(',') {
                    let member = module_path(member.trim());
                    if member.first().is_some_and(|m| m != "self") {
                        let mut f = full.clone();
                        f.extend(member);
                        out.insert(f);
                    }
                }
            }
        }
    }
    out
}

/// The code of a module's source: comments (doc links are not imports) and the inline test
/// module at its end (tests may reach anywhere) left out.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("mod tests {") && out.trim_end().ends_with("#[cfg(test)]") {
            break;
        }
        if !t.starts_with("//") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The dependency graph between modules: `a → b` when `a` names `b` (the longest known
/// module prefix of each path it names).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (me, text) in &mods {
        for path in references(me, &code_of(text)) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|p| mods.contains_key(p));
            if let Some(t) = target
                && &t != me
            {
                g.entry(me.clone()).or_default().insert(t);
            }
        }
    }
    g
}

fn related(a: &str, b: &str) -> bool {
    a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let g = graph();
    assert!(
        g.get("transports::email::session")
            .is_some_and(|s| !s.is_empty()),
        "the scan finds imports: {g:?}"
    );
    let mut cycles = Vec::new();
    for (a, targets) in &g {
        for b in targets {
            if a < b && !related(a, b) && g.get(b).is_some_and(|t| t.contains(a)) {
                cycles.push(format!("{a} <-> {b}"));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "modules importing each other: {cycles:?}"
    );
}

#[test]
fn the_core_imports_no_transport_and_no_transport_imports_another() {
    let g = graph();
    let mut wrong = Vec::new();
    for (a, targets) in &g {
        // `app`, `main` and `doctor` (`app` and `doctor` with the files of their folders)
        // stand at the edge: they reach every transport.
        let core = !a.starts_with("transports")
            && !matches!(a.as_str(), "app" | "main" | "doctor")
            && !a.starts_with("doctor::")
            && !a.starts_with("app::");
        for b in targets {
            if core && b.starts_with("transports") {
                wrong.push(format!("{a} -> {b}"));
            }
            let family = |m: &str| m.split("::").take(2).collect::<Vec<_>>().join("::");
            if a.starts_with("transports::")
                && b.starts_with("transports::")
                && family(a) != family(b)
                && b != "transports"
            {
                wrong.push(format!("{a} -> {b}"));
            }
            if a.starts_with("message") && !b.starts_with("message") {
                wrong.push(format!("{a} -> {b}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the module rules: {wrong:?}"
    );
}

#[test]
fn the_scanner_resolves_paths_the_way_rust_does() {
    let r = references(
        "transports::email::inbound",
        "use super::session::{Reply, x};\nuse crate::store::{Db, email as store};\nfoo::super::bar",
    );
    assert!(r.contains(&vec!["transports".into(), "email".into(), "session".into()]));
    assert!(r.contains(&vec!["store".into(), "email".into()]));
    assert!(!r.iter().any(|p| p.contains(&"bar".to_owned())), "{r:?}");
    let code = code_of(
        "use a::b;\n/// [`super::x`]\nfn f() {}\n#[cfg(test)]\nmod tests;\nuse c::d;\n#[cfg(test)]\nmod tests {\n    use super::y;\n}\n",
    );
    assert!(
        !code.contains("super::x") && !code.contains("super::y"),
        "{code}"
    );
    assert!(code.contains("use c::d;"), "{code}");
}

/// The text between the braces of `struct {name}` (or the parentheses of a tuple struct)
/// wherever the crate defines it.
fn fields_of(code: &str, name: &str) -> Option<String> {
    for (open, close) in [('{', '}'), ('(', ')')] {
        let head = format!("struct {name} {open}");
        let head_tuple = format!("struct {name}{open}");
        let at = code.find(&head).or_else(|| code.find(&head_tuple));
        if let Some(at) = at {
            let rest = &code[at..];
            let start = rest.find(open)? + 1;
            let end = rest[start..].find(close)? + start;
            return Some(rest[start..end].to_owned());
        }
    }
    None
}

#[test]
fn no_http_handler_state_holds_what_does_io_off_the_main_runtime() {
    // What opens database or outbound connections: a handler may hold it only inside an
    // `OnMain` (or the pipeline as a `Front`), whose futures run on the main runtime.
    const FORBIDDEN: [&str; 9] = [
        "Pipeline",
        "Db",
        "TaskEngine",
        "Services",
        "Core",
        "Inner",
        "ActivityPub",
        "Queue",
        "BlobStore",
    ];
    let code: String = modules().values().map(|t| code_of(t)).collect();
    let states: BTreeSet<String> = code
        .split("web::Data<")
        .skip(1)
        .filter_map(|piece| piece.split(['>', '<']).next())
        .map(|t| t.rsplit("::").next().unwrap_or(t).trim().to_owned())
        .collect();
    assert!(
        states.len() >= 6,
        "the scan finds the handlers' states: {states:?}"
    );
    for state in &states {
        let fields =
            fields_of(&code, state).unwrap_or_else(|| panic!("no definition of {state} in src"));
        for field in fields.split(',') {
            let Some((_, ty)) = field.split_once(':') else {
                continue;
            };
            // What an `OnMain` holds is reached on the main runtime only.
            let held_here = ty.split("OnMain<").next().unwrap_or(ty);
            for word in held_here.split(|c: char| !c.is_alphanumeric() && c != '_') {
                assert!(
                    !FORBIDDEN.contains(&word),
                    "the handler state {state} holds a {word} ({}); hold it in an OnMain",
                    ty.trim()
                );
            }
        }
    }
}

#[test]
fn the_handler_state_check_reads_fields_and_would_refuse_a_pipeline() {
    let code = "pub struct S {\n    /// x\n    pub pipeline: Pipeline,\n    ok: Front,\n}\nstruct T(Arc<Inner>);\n";
    let s = fields_of(code, "S").unwrap();
    assert!(s.contains("pipeline: Pipeline") && s.contains("ok: Front"));
    assert_eq!(fields_of(code, "T").as_deref(), Some("Arc<Inner>"));
    assert_eq!(fields_of(code, "U"), None);
}
