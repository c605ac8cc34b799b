//! The README's "Layout" section names every file of the library (`src/`)
//! and of the command's crate (`cli/src/`), and every path it names exists:
//! a map of the crates that cannot go stale unnoticed.
//!
//! A file is named when the section holds its path (`src/codec/npy.rs`), or
//! when one bullet names its folder (`src/codec/`) and, in backticks, its
//! file name (`npy.rs`); a folder's `mod.rs` is named by the folder alone.
//! A format's file is named by its row of the table of formats, which
//! `src/format/mod.rs` declares and the bullet of `src/format/` names
//! (`mod.rs`): a new convention is its file and its row, with no line here
//! (`scripts/new_format.sh`).

use std::collections::BTreeSet;
use std::path::Path;

/// The "## Layout" section of the README, as its bullets (each with the
/// lines that continue it).
fn layout_bullets(readme: &str) -> Vec<String> {
    let start = readme
        .find("\n## Layout\n")
        .expect("README has a Layout section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let mut bullets: Vec<String> = Vec::new();
    for line in section.lines().skip(1) {
        if let Some(rest) = line.strip_prefix("- ") {
            bullets.push(rest.to_owned());
        } else if let Some(last) = bullets.last_mut() {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    bullets
}

/// The backticked words of a text.
fn backticked(text: &str) -> BTreeSet<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_str().unwrap().replace('\\', "/"));
        }
    }
}

/// The source folders of the crates, from the repository's root.
const SOURCES: [&str; 2] = ["src", "cli/src"];

/// Which of `files` (paths such as `src/codec/npy.rs`) the bullets leave
/// unnamed.
fn unnamed<'f>(bullets: &[String], files: &'f [String]) -> Vec<&'f str> {
    files
        .iter()
        .map(String::as_str)
        .filter(|file| {
            let (folder, name) = file.rsplit_once('/').expect("a path in a folder");
            let folder = format!("{folder}/");
            !bullets.iter().any(|bullet| {
                let words = backticked(bullet);
                words.contains(file)
                    || (words.contains(folder.as_str())
                        && (name == "mod.rs" || words.contains(name)))
            })
        })
        .collect()
}

/// The backticked paths into the crates' sources (`src/...`, `cli/...`)
/// that do not exist.
fn stale(bullets: &[String], root: &Path) -> Vec<String> {
    bullets
        .iter()
        .flat_map(|bullet| {
            backticked(bullet)
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|word| {
            (word.starts_with("src/") || word.starts_with("cli/")) && !root.join(word).exists()
        })
        .collect()
}

/// The files of the modules `src/format/mod.rs` declares (its `mod`
/// lines), each as `src/format/<name>.rs` or `src/format/<name>/mod.rs`.
fn declared_by_the_table(root: &Path) -> Vec<String> {
    let table = std::fs::read_to_string(root.join("src/format/mod.rs")).unwrap();
    let mut files = Vec::new();
    for line in table.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = match words.as_slice() {
            ["mod", name] | [_, "mod", name] => name.strip_suffix(';'),
            _ => None,
        };
        if let Some(name) = name {
            for file in [
                format!("src/format/{name}.rs"),
                format!("src/format/{name}/mod.rs"),
            ] {
                if root.join(&file).exists() {
                    files.push(file);
                }
            }
        }
    }
    files
}

#[test]
fn the_readme_layout_names_every_file_of_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let bullets = layout_bullets(&readme);
    let mut files = Vec::new();
    for folder in SOURCES {
        rust_files(&root.join(folder), &mut files);
    }
    let prefix = format!("{}/", root.to_str().unwrap().replace('\\', "/"));
    let files: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(&prefix).expect("under the root").to_owned())
        .collect();
    assert!(files.len() > 20, "{files:?}");
    assert!(files.contains(&"cli/src/main.rs".to_owned()), "{files:?}");
    // The table's files, named by their rows, when a bullet names the
    // table.
    let table = declared_by_the_table(root);
    let names_table = bullets.iter().any(|bullet| {
        let words = backticked(bullet);
        words.contains("src/format/") && words.contains("mod.rs")
    });
    assert!(names_table && table.len() > 5, "{table:?}");
    let files: Vec<String> = files.into_iter().filter(|f| !table.contains(f)).collect();
    assert_eq!(
        unnamed(&bullets, &files),
        Vec::<&str>::new(),
        "README Layout leaves these out"
    );
    assert_eq!(
        stale(&bullets, root),
        Vec::<String>::new(),
        "README Layout names what is not there"
    );
}

/// The check itself can fail: a file of no bullet, a file whose folder's
/// bullet does not name it, and a path that is not there are all caught.
#[test]
fn the_layout_check_catches_what_is_missing_and_what_is_stale() {
    let readme = "# x\n\n## Layout\n\n- `src/codec/`: rows (`npy.rs`,\n  `text.rs`).\n- `src/lib.rs`, `src/gone.rs`, `cli/src/gone.rs`.\n\n## Next\n- `src/later.rs`\n";
    let bullets = layout_bullets(readme);
    assert_eq!(bullets.len(), 2, "{bullets:?}");
    let files: Vec<String> = [
        "src/codec/npy.rs",
        "src/codec/text.rs",
        "src/codec/mod.rs",
        "src/codec/form.rs",
        "src/lib.rs",
        "src/later.rs",
        "cli/src/main.rs",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        unnamed(&bullets, &files),
        ["src/codec/form.rs", "src/later.rs", "cli/src/main.rs"]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(stale(&bullets, root), ["cli/src/gone.rs", "src/gone.rs"]);
}
