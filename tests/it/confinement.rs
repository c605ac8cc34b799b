//! Confinement of reads (issue 15): `gather`, `check` and the `Store` they
//! read through open only files whose canonical path lies inside the root or
//! an allowed directory. A name that leads out by `..`, as an absolute path
//! or through a symlink is refused with `GatherError::Outside`, naming the
//! file; `allow` lets a directory in. (The command's `--allow` is tested in
//! `cli.rs`.)

use std::path::{Path, PathBuf};

use pd_stitch::gather::{check, check_from, gather, gather_from, GatherError, Store};
use serde_json::{json, Value};

/// A scratch tree: `root/in.bin` (bytes 1..=4), `root/sub/`,
/// `outside/secret.bin` (bytes 9), and inside the root the symlinks
/// `link.bin -> ../outside/secret.bin` (leads out), `same.bin -> in.bin`
/// (stays in) and `door -> ../outside` (a directory leading out).
struct Tree {
    dir: PathBuf,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!(
            "pd-stitch-confinement-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/sub")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::write(dir.join("root/in.bin"), [1, 2, 3, 4]).unwrap();
        std::fs::write(dir.join("outside/secret.bin"), [9, 9, 9, 9]).unwrap();
        std::os::unix::fs::symlink("../outside/secret.bin", dir.join("root/link.bin")).unwrap();
        std::os::unix::fs::symlink("in.bin", dir.join("root/same.bin")).unwrap();
        std::os::unix::fs::symlink("../outside", dir.join("root/door")).unwrap();
        Tree { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn outside(&self) -> PathBuf {
        self.dir.join("outside")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A response whose one segment reads 4 uint8 rows of `file`.
fn response(file: &str) -> Value {
    json!({"choices": [{"payload": [
        {"field": "routed_experts", "file": file, "offset": 0, "pos": 0, "rows": 4,
         "dtype": "uint8", "shape": []}]}]})
}

/// The names a response may give, and whether each is inside the root.
fn names(tree: &Tree) -> Vec<(String, bool)> {
    let abs = |p: &Path| p.to_str().unwrap().to_owned();
    vec![
        ("in.bin".into(), true),
        ("sub/../in.bin".into(), true),
        ("same.bin".into(), true),
        (abs(&tree.root().join("in.bin")), true),
        ("../outside/secret.bin".into(), false),
        ("sub/../../outside/secret.bin".into(), false),
        (abs(&tree.outside().join("secret.bin")), false),
        ("link.bin".into(), false),
        ("door/secret.bin".into(), false),
    ]
}

#[test]
fn gather_reads_inside_the_root_and_refuses_everything_else() {
    let tree = Tree::new("gather");
    let confined = Store::confined(&tree.root(), &[]).unwrap();
    let dir = Store::Dir(tree.root());
    for (name, inside) in names(&tree) {
        let response = response(&name);
        for (how, got) in [
            (
                "gather",
                gather(&response, 0, "routed_experts", &tree.root()),
            ),
            (
                "confined",
                gather_from(&response, 0, "routed_experts", &confined),
            ),
            (
                "Store::Dir",
                gather_from(&response, 0, "routed_experts", &dir),
            ),
        ] {
            if inside {
                assert_eq!(got.unwrap().data(), [1, 2, 3, 4], "{how} {name}");
            } else {
                match got {
                    Err(GatherError::Outside {
                        path, resolved, at, ..
                    }) => {
                        assert!(
                            path.ends_with(&name) || path == Path::new(&name),
                            "{path:?}"
                        );
                        let secret = tree.outside().canonicalize().unwrap().join("secret.bin");
                        assert_eq!(resolved, secret, "{how} {name}");
                        assert_eq!(at.to_string(), "response choices[0].payload[0]");
                    }
                    other => panic!("{how} {name}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn the_error_names_the_file_and_where_it_leads() {
    let tree = Tree::new("message");
    let err = gather(&response("link.bin"), 0, "routed_experts", &tree.root()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("response choices[0].payload[0]: file ")
            && text.contains("link.bin resolves to ")
            && text.ends_with("secret.bin, outside the allowed directories"),
        "{text}"
    );
}

#[test]
fn allow_lets_an_outside_directory_in_and_nothing_more() {
    let tree = Tree::new("allow");
    let store = Store::confined(&tree.root(), &[tree.outside()]).unwrap();
    for (name, inside) in names(&tree) {
        let rows = gather_from(&response(&name), 0, "routed_experts", &store).unwrap();
        // Inside names read the root's file, the others the allowed secret.
        let want = if inside { [1, 2, 3, 4] } else { [9, 9, 9, 9] };
        assert_eq!(rows.data(), want, "{name}");
    }
    // A directory beside the allowed one is still outside.
    std::fs::create_dir_all(tree.dir.join("elsewhere")).unwrap();
    std::fs::write(tree.dir.join("elsewhere/x.bin"), [5; 4]).unwrap();
    let got = gather_from(&response("../elsewhere/x.bin"), 0, "routed_experts", &store);
    assert!(matches!(got, Err(GatherError::Outside { .. })), "{got:?}");
    // An allowed directory that does not exist is an error of the store.
    assert!(Store::confined(&tree.root(), &[tree.dir.join("nowhere")]).is_err());
}

#[test]
fn check_reports_a_file_outside_as_a_problem_without_looking_at_it() {
    let tree = Tree::new("check");
    for (name, inside) in names(&tree) {
        let report = check(&response(&name), &tree.root());
        assert_eq!(report.is_ok(), inside, "{name}: {report}");
        if !inside {
            let problems = &report.fields[0].problems;
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0].contains("outside the allowed directories"),
                "{problems:?}"
            );
        }
        let allowed = Store::confined(&tree.root(), &[tree.outside()]).unwrap();
        let report = check_from(&response(&name), &allowed);
        assert!(report.is_ok(), "{name} with the outside allowed: {report}");
    }
}
