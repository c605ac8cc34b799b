//! `pd-stitch compare`: two responses' rows position by position, or the
//! same-named responses of two directories. Exit status 0 when all equal, 1
//! when anything differs, 2 on an error.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pd_stitch::compare;
use pd_stitch::gather::{self, RowsCheck, RowsReport};
use pd_stitch::ROUTED_EXPERTS;
use serde_json::Value;

use super::progress::Progress;
use super::{confined, read_json};

// What `compare` takes; the command's help is on `Command::Compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// Response A (JSON).
    #[arg(required_unless_present = "dirs")]
    a: Option<PathBuf>,
    /// Response B (JSON).
    #[arg(required_unless_present = "dirs")]
    b: Option<PathBuf>,
    /// Compare the same-named .json files of two directories instead, one
    /// summary line per file and totals.
    #[arg(long, num_args = 2, value_names = ["A_DIR", "B_DIR"], conflicts_with_all = ["a", "b", "svg"])]
    dirs: Option<Vec<PathBuf>>,
    /// Only this choice (default: every choice).
    #[arg(long)]
    choice: Option<usize>,
    /// The field.
    #[arg(long, default_value = ROUTED_EXPERTS)]
    field: String,
    /// Resolve A's relative file names against this directory.
    #[arg(long, value_name = "DIR", default_value = ".")]
    root_a: PathBuf,
    /// Resolve B's relative file names against this directory.
    #[arg(long, value_name = "DIR", default_value = ".")]
    root_b: PathBuf,
    /// Also read files under this directory (repeatable).
    #[arg(long, value_name = "DIR")]
    allow: Vec<PathBuf>,
    /// The prompt length (default: usage.prompt_tokens, else the end of a
    /// merged response's prefill segments).
    #[arg(long, value_name = "N")]
    prompt_len: Option<u64>,
    /// Read SGLang's rows with this row shape, LAYERSxTOP_K (each element
    /// of a /generate batch array is a choice).
    #[arg(long, value_name = "LxK", value_parser = super::row_shape)]
    row_shape: Option<(u64, u64)>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write a heatmap of positions by layers here.
    #[arg(long, value_name = "OUT.svg")]
    svg: Option<PathBuf>,
    /// The model's expert count, for the rows check of each side (ids at
    /// or beyond it are wrong rows).
    #[arg(long, value_name = "N")]
    experts: Option<u64>,
    /// The model's config.json, for its expert count when --experts is not
    /// given.
    #[arg(long, value_name = "config.json")]
    config: Option<PathBuf>,
}

pub fn run(args: CompareArgs, quiet: bool) -> Result<ExitCode, String> {
    let CompareArgs {
        a,
        b,
        dirs,
        choice,
        field,
        root_a,
        root_b,
        allow,
        prompt_len,
        row_shape,
        json,
        svg,
        experts,
        config,
    } = args;
    let rows = match super::experts(experts, config.as_deref()) {
        Ok(experts) => RowsCheck::experts(experts),
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(ExitCode::from(COMPARE_ERROR));
        }
    };
    let check = Check {
        options: compare::Options {
            choice,
            field,
            prompt_len,
            row_shape,
            ..compare::Options::default()
        },
        rows,
    };
    let options = &check;
    let stores = (|| Ok::<_, String>([store(&root_a, &allow)?, store(&root_b, &allow)?]))();
    let code = match (stores, dirs, a, b) {
        (Err(message), ..) => {
            eprintln!("error: {message}");
            COMPARE_ERROR
        }
        (Ok(stores), Some(dirs), _, _) => compare_dirs(&dirs, &stores, options, json, quiet),
        (Ok(stores), None, Some(a), Some(b)) => {
            compare_files(&a, &b, &stores, options, json, svg.as_deref())
        }
        // clap requires A and B without --dirs.
        (Ok(_), None, _, _) => COMPARE_ERROR,
    };
    Ok(ExitCode::from(code))
}

/// Exit status of `compare` on an error (1 means "differs").
const COMPARE_ERROR: u8 = 2;

/// The store one side of `compare` reads through: only inside `root` and
/// the allowed directories.
fn store(root: &Path, allow: &[PathBuf]) -> Result<gather::Store, String> {
    confined(root, allow)
}

/// What to compare, and the rows check run on each side.
struct Check {
    options: compare::Options,
    rows: RowsCheck,
}

/// The comparison of two responses, and the rows check of each side.
struct Compared {
    report: compare::Report,
    rows: [RowsReport; 2],
}

impl Compared {
    /// Equal, and no side holds rows no engine produces.
    fn all_good(&self) -> bool {
        self.report.all_equal() && self.rows.iter().all(RowsReport::is_clean)
    }

    /// The JSON report, with `rows_check: {"a", "b"}` beside it.
    fn to_json(&self) -> Value {
        let mut json = self.report.to_json();
        json["rows_check"] =
            serde_json::json!({"a": self.rows[0].to_json(), "b": self.rows[1].to_json()});
        json["all_equal"] = Value::Bool(self.all_good());
        json
    }
}

/// The comparison of two response files.
fn compare_pair(
    a: &Path,
    b: &Path,
    stores: &[gather::Store; 2],
    check: &Check,
) -> Result<Compared, String> {
    let (va, vb) = (read_json(a)?, read_json(b)?);
    let report = compare::compare(&va, &stores[0], &vb, &stores[1], &check.options)
        .map_err(|e| e.to_string())?;
    let row_shape = check.options.row_shape;
    let rows = [(&va, &stores[0]), (&vb, &stores[1])]
        .map(|(v, store)| gather::check_response_rows(v, store, row_shape, check.rows));
    Ok(Compared { report, rows })
}

fn compare_files(
    a: &Path,
    b: &Path,
    stores: &[gather::Store; 2],
    check: &Check,
    json: bool,
    svg: Option<&Path>,
) -> u8 {
    let compared = match compare_pair(a, b, stores, check) {
        Ok(compared) => compared,
        Err(message) => {
            eprintln!("error: {message}");
            return COMPARE_ERROR;
        }
    };
    let report = &compared.report;
    if let Some(out) = svg {
        if let Err(e) = fs::write(out, report.to_svg()) {
            eprintln!("error: {}: {e}", out.display());
            return COMPARE_ERROR;
        }
    }
    if json {
        println!("{}", compared.to_json());
    } else {
        println!("A: {}\nB: {}", a.display(), b.display());
        println!("{report}");
        for (side, rows) in ["A", "B"].iter().zip(&compared.rows) {
            if !rows.is_clean() {
                println!("rows check of {side}: {}", rows.summary());
                print!("{}", super::rows_problems(rows, &format!("{side}: ")));
            }
        }
    }
    u8::from(!compared.all_good())
}

/// The `.json` files of `dir`, by name.
fn json_files(dir: &Path) -> Result<Vec<String>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && entry.path().is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Compares the same-named `.json` files of two directories: one line per
/// file and totals (or one JSON object), exit status the worst of all.
fn compare_dirs(
    dirs: &[PathBuf],
    stores: &[gather::Store; 2],
    check: &Check,
    json: bool,
    quiet: bool,
) -> u8 {
    let [dir_a, dir_b] = dirs else {
        return COMPARE_ERROR;
    };
    let (names_a, names_b) = match (json_files(dir_a), json_files(dir_b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(message), _) | (_, Err(message)) => {
            eprintln!("error: {message}");
            return COMPARE_ERROR;
        }
    };
    let mut names: Vec<&String> = names_a.iter().chain(&names_b).collect();
    names.sort();
    names.dedup();
    let mut worst = 0u8;
    let mut totals = Totals::default();
    let (mut equal_files, mut errors) = (0usize, 0usize);
    let mut entries = Vec::new();
    if !json {
        println!(
            "{:<32}  {:>9}  {:>20}  {:>20}  {:>8}  status",
            "file", "compared", "equal rows", "equal sets", "one side"
        );
    }
    let progress = Progress::new("files", names.len(), quiet);
    for (done, name) in names.iter().enumerate() {
        progress.set(done);
        // A response one directory lacks is a difference, not an error.
        let missing = match (names_a.contains(name), names_b.contains(name)) {
            (true, true) => None,
            (false, _) => Some(dir_a),
            (_, false) => Some(dir_b),
        };
        if let Some(dir) = missing {
            worst = worst.max(1);
            let message = format!("missing in {}", dir.display());
            if json {
                entries.push(
                    serde_json::json!({"file": name, "all_equal": false, "missing": message}),
                );
            } else {
                progress.say(&format!("{name:<32}  {message}"));
            }
            continue;
        }
        match compare_pair(&dir_a.join(name), &dir_b.join(name), stores, check) {
            Ok(compared) => {
                let file = Totals::of(&compared.report);
                totals.add(file);
                let same = compared.all_good();
                equal_files += usize::from(same);
                worst = worst.max(u8::from(!same));
                let status = match (compared.report.all_equal(), same) {
                    (_, true) => "equal",
                    (true, false) => "WRONG ROWS",
                    (false, false) => "DIFFERENT",
                };
                if json {
                    let mut entry = compared.to_json();
                    entry["file"] = Value::String((*name).clone());
                    entries.push(entry);
                } else {
                    progress.say(&format!(
                        "{name:<32}  {:>9}  {:>20}  {:>20}  {:>8}  {}",
                        file.compared,
                        fraction(file.equal_rows, file.compared),
                        fraction(file.equal_sets, file.compared),
                        file.one_side_only,
                        status
                    ));
                }
            }
            Err(message) => {
                errors += 1;
                worst = COMPARE_ERROR;
                if json {
                    entries.push(serde_json::json!({"file": name, "error": message}));
                } else {
                    progress.say(&format!("{name:<32}  error: {message}"));
                }
            }
        }
    }
    progress.finish();
    if json {
        println!(
            "{}",
            serde_json::json!({"all_equal": worst == 0, "files": entries})
        );
    } else {
        println!(
            "total: {} file(s), {equal_files} equal, {} different or missing, {errors} error(s); rows equal {}, equal sets {}, {} position(s) on one side only",
            names.len(),
            names.len() - equal_files - errors,
            fraction(totals.equal_rows, totals.compared),
            fraction(totals.equal_sets, totals.compared),
            totals.one_side_only
        );
    }
    worst
}

/// The counts of one line of the `--dirs` table: a file's, or all files'.
#[derive(Clone, Copy, Default)]
struct Totals {
    compared: u64,
    equal_rows: u64,
    equal_sets: u64,
    one_side_only: u64,
}

impl Totals {
    /// Over the choices of `report`.
    fn of(report: &compare::Report) -> Totals {
        let mut totals = Totals::default();
        for c in &report.choices {
            totals.add(Totals {
                compared: c.compared,
                equal_rows: c.equal_rows,
                equal_sets: c.equal_sets,
                one_side_only: c.one_side_only(),
            });
        }
        totals
    }

    fn add(&mut self, other: Totals) {
        self.compared += other.compared;
        self.equal_rows += other.equal_rows;
        self.equal_sets += other.equal_sets;
        self.one_side_only += other.one_side_only;
    }
}

/// `n/of (p%)`, or `n/0` when nothing was compared: as `compare::Report`
/// prints its fractions, so that the table and the reports read alike.
fn fraction(n: u64, of: u64) -> String {
    if of == 0 {
        format!("{n}/0")
    } else {
        format!("{n}/{of} ({:.2}%)", 100.0 * n as f64 / of as f64)
    }
}
