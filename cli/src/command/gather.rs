//! `pd-stitch gather`: one choice's rows of a field, in position order, as a
//! summary or a `.npy` file.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use pd_stitch::gather::{self, Source};
use pd_stitch::ROUTED_EXPERTS;

use super::{confined, read_json};

// What `gather` takes; the command's help is on `Command::Gather`.
#[derive(clap::Args)]
pub struct GatherArgs {
    /// The response (JSON).
    response: PathBuf,
    /// The choice.
    #[arg(long)]
    choice: usize,
    /// The field.
    #[arg(long, default_value = ROUTED_EXPERTS)]
    field: String,
    /// Resolve relative file names against this directory; only files
    /// inside it (or an --allow directory) are read.
    #[arg(long, value_name = "DIR", default_value = ".")]
    root: PathBuf,
    /// Also read files inside this directory (symlinks resolved);
    /// repeatable.
    #[arg(long = "allow", value_name = "DIR")]
    allow: Vec<PathBuf>,
    /// Write the rows as a .npy file instead of printing a summary.
    #[arg(long, value_name = "OUT.npy")]
    npy: Option<PathBuf>,
    /// Read SGLang's rows (meta_info, sglext, sgl_ext; --choice is the
    /// batch element) with this row shape, LAYERSxTOP_K.
    #[arg(long, value_name = "LxK", value_parser = super::row_shape)]
    row_shape: Option<(u64, u64)>,
}

pub fn run(args: GatherArgs) -> Result<ExitCode, String> {
    let GatherArgs {
        response,
        choice,
        field,
        root,
        allow,
        npy,
        row_shape,
    } = args;
    let store = confined(&root, &allow)?;
    let response = read_json(&response)?;
    let rows = match row_shape {
        Some((layers, top_k)) => gather::gather_sglang(&response, choice, layers, top_k),
        None => gather::gather_from(&response, choice, &field, &store),
    }
    .map_err(|e| e.to_string())?;
    match npy {
        Some(out) => {
            let file = rows.to_npy().map_err(|e| e.to_string())?;
            fs::write(&out, file).map_err(|e| format!("{}: {e}", out.display()))?;
        }
        None => {
            let source = match rows.source() {
                Source::Files => "files".to_owned(),
                Source::Inline(form) => format!("inline {form}"),
                Source::Sglang => "sglang".to_owned(),
            };
            println!("choice     {choice}");
            println!("field      {field}");
            println!("source     {source}");
            println!("positions  {}", rows.positions());
            println!("dtype      {}", rows.dtype());
            println!("shape      {:?}", rows.shape());
            println!(
                "checksum   {:016x} (FNV-1a 64 of the data)",
                rows.checksum()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
