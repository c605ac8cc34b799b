//! Which writer answers a request in a wire form: each engine's wire is
//! written by its own writer over the one model.

use std::io;

use serde_json::Value;

use crate::gather::Store;

use super::engine::Wire;
use super::request::Request;
use super::responses::Responses;
use super::slot_pool::SlotPool;

/// What the deployments answer `requests` in `wire`, writing the files rows
/// by handle point into to `store` (named `req-NNNN/...` by the request's
/// index).
///
/// Only SGLang's `/generate` answers several requests at once: with `batch`
/// (or more than one request) an array of outputs, one a request. Every
/// other wire answers the first request; SGLang's and Dynamo's OpenAI APIs
/// answer its first choice. An SGLang decode reads and writes `pool` (a
/// fresh server's, as large as the requests, when none is given), so its
/// answers depend on the order requests come in.
///
/// ```
/// use pd_stitch::gather::Store;
/// use pd_stitch::sim::{answer, Request, Wire};
///
/// let request = Request::draw(1, 0);
/// let responses = answer(Wire::Compact, &[request.clone()], false, None, &mut Store::memory())?;
/// let rows = &responses.colocated["choices"][0]["routed_experts"];
/// assert_eq!(rows["shape"][0], request.rows());
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
///
/// An I/O error writing to a directory store, or a row shape a `.npy`
/// header cannot hold.
pub fn answer(
    wire: Wire,
    requests: &[Request],
    batch: bool,
    pool: Option<&mut SlotPool>,
    store: &mut Store,
) -> io::Result<Responses> {
    let Some(first) = requests.first() else {
        return Ok(Responses {
            colocated: Value::Null,
            prefill: Value::Null,
            decode: Value::Null,
        });
    };
    match wire {
        Wire::ByHandle | Wire::Compact | Wire::Npy => super::vllm::forms(first, store)?
            .into_iter()
            .find(|(form, _)| *form == wire)
            .map(|(_, responses)| responses)
            .ok_or_else(|| io::Error::other("vLLM writes by handle, compact and npy")),
        Wire::Sglang(api) => Ok(super::sglang::answer(
            api,
            requests,
            batch || requests.len() > 1,
            pool,
        )),
        Wire::DynamoToken => Ok(super::dynamo::token_api(first)),
        Wire::DynamoOpenAi => Ok(super::dynamo::openai_api(first)),
    }
}
