//! `pd-stitch merge`: a prefill and a decode response stitched as a router
//! stitches them, on the bytes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pd_stitch::{ErrorDetail, Side, Stitcher};
use serde_json::Value;

use super::read_bytes;

// What `merge` takes; the command's help is on `Command::Merge`.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// The prefill instance's response (JSON).
    prefill: PathBuf,
    /// The decode instance's response (JSON).
    decode: PathBuf,
    /// Stitch this payload field too (besides the defaults, routed_experts and
    /// routed_expert_weights); repeatable.
    #[arg(long = "field", value_name = "NAME")]
    fields: Vec<String>,
    /// Refuse a merged layout a trainer would misread (gaps, overlaps,
    /// segments out of position order, mixed row shapes or dtype kinds).
    #[arg(long)]
    strict: bool,
    /// SGLang's row shape, LAYERSxTOP_K (e.g. 48x8): places SGLang's rows,
    /// which carry no shape.
    #[arg(long, value_name = "LxK", value_parser = super::row_shape)]
    row_shape: Option<(u64, u64)>,
    /// Write the merged response here instead of stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// Indent the output.
    #[arg(long)]
    pretty: bool,
}

/// Stitches the two files' texts on the bytes path: the output is the decode's
/// text with only the stitched values changed (re-indented with `--pretty`).
pub fn run(args: MergeArgs) -> Result<ExitCode, String> {
    let MergeArgs {
        prefill,
        decode,
        fields,
        strict,
        row_shape,
        output,
        pretty,
    } = args;
    let stitcher = fields.into_iter().fold(Stitcher::new(), Stitcher::field);
    let stitcher = if strict { stitcher.strict() } else { stitcher };
    let stitcher = match row_shape {
        Some((layers, top_k)) => stitcher.row_shape(layers, top_k),
        None => stitcher,
    };
    merge(&stitcher, &prefill, &decode, output, pretty)
}

fn merge(
    stitcher: &Stitcher,
    prefill: &Path,
    decode: &Path,
    output: Option<PathBuf>,
    pretty: bool,
) -> Result<ExitCode, String> {
    let prefill_text = read_bytes(prefill)?;
    let mut text = read_bytes(decode)?;
    stitcher
        .merge_bytes(&prefill_text, &mut text, pd_stitch::Stitch::ForPd)
        .map_err(|e| match e.into_detail() {
            ErrorDetail::Json {
                side,
                offset,
                message,
                ..
            } => {
                let path = if side == Side::Prefill {
                    prefill
                } else {
                    decode
                };
                format!("{}: not JSON: {message} at byte {offset}", path.display())
            }
            other => other.to_string(),
        })?;
    if pretty {
        let value: Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
        text = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
        text.push(b'\n');
    }
    match output {
        Some(out) => fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?,
        None => std::io::stdout()
            .write_all(&text)
            .map_err(|e| e.to_string())?,
    }
    Ok(ExitCode::SUCCESS)
}
