//! Streamed responses: a sans-IO stitcher of a decode's server-sent events.
//!
//! Under P/D the engines put the whole of a choice's routed experts on
//! **one** event of the decode's stream (vLLM `/inference/v1/generate`: the chunk on
//! which routing becomes available, at stop, carries
//! `choices[i].routed_experts`; SGLang: `meta_info.routed_experts` on the
//! finished chunk of `/generate`, a separate `{"choices": [], "sglext":
//! {"routed_experts": ...}}` event on chat and completions; sources in
//! `docs/SPEC.md`, section 11). So a router can stream a stitched response:
//! every event passes through as it came, and the one that carries rows is
//! rewritten, its data replaced by the non-streaming bytes merge of that data
//! with the prefill.
//!
//! [`StreamStitcher`] does that without doing any I/O, in the manner of
//! `httparse`: the router feeds it each chunk of the decode's body as it
//! arrives and sends on what it appends to `out`; [`StreamStitcher::finish`]
//! ends the stream.
//!
//! The prefill need not have answered when the stream starts. vLLM's router
//! sends the decode its request after the prefill's answer, but SGLang's
//! sends both at once, and its prefill's answer completes about when the
//! decode's first byte comes, often later (SPEC section 10).
//! [`StreamStitcher::awaiting_prefill`] passes every event on at once, and
//! holds only the rows event, and what follows it, until
//! [`StreamStitcher::give_prefill`]: the bytes out are the same whenever the
//! prefill comes.
//!
//! ```
//! use pd_stitch::{stream::StreamStitcher, Stitcher};
//!
//! let prefill = br#"{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;
//! let mut stream = StreamStitcher::new(Stitcher::new(), prefill)?;
//! let mut out = Vec::new();
//! // A token chunk goes out as soon as its blank line has arrived.
//! stream.feed(b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [7]}]}\n", &mut out)?;
//! assert!(out.is_empty());
//! stream.feed(b"\n", &mut out)?;
//! assert_eq!(out, b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [7]}]}\n\n");
//! // The chunk with the rows is held until it is complete, then rewritten.
//! out.clear();
//! stream.feed(b"data: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AAAA", &mut out)?;
//! stream.feed(b"BAUG\", \"shape\": [2, 1, 3], \"start\": 0, \"dtype\": \"uint8\"}}]}\n\ndata: [DONE]\n\n", &mut out)?;
//! stream.finish(&mut out)?;
//! assert_eq!(
//!     out,
//!     &b"data: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AQIDBAUG\", \"shape\": [2,1,3], \"start\": 0, \"dtype\": \"uint8\"}}]}\n\ndata: [DONE]\n\n"[..]
//! );
//! # Ok::<(), pd_stitch::Error>(())
//! ```
//!
//! # Framing
//!
//! The stream is read as the WHATWG HTML standard's event stream format
//! ("Server-sent events", 9.2.5 and 9.2.6): lines end with `\r\n`, `\n` or
//! `\r`, and may be split anywhere across chunks, a line end included; a
//! blank line ends an event; a line starting with `:` is a comment; a field
//! line is `name: value` (one space after the colon removed) or `name` alone;
//! an event's data is the values of its `data` lines joined by `\n`; a
//! leading byte-order mark is not part of the first line. Nothing is ever
//! reordered, dropped or added: the bytes out are the bytes in, except the
//! data of an event that carries rows.
//!
//! # Which event carries rows
//!
//! An event carries rows when its data is JSON (UTF-8 decoded as the
//! standard decodes it, invalid bytes replaced) that has, as `serde_json`
//! reads it (last of a repeated key, escaped keys unescaped), a non-null
//! `choices[i].routed_experts`, a `choices[i].payload` with a segment of one
//! of the stitcher's fields, or one of SGLang's slots: a non-null
//! `meta_info.routed_experts`, `sglext.routed_experts` or
//! `choices[0].sgl_ext.routed_experts` (of the data, or of each element when
//! the data is an array). It is found by its keys, never by `finish_reason`.
//! Only an event whose bytes contain `payload`, a `\u` escape, or a
//! `routed_experts` that is not a member `"routed_experts": null`, can carry
//! rows (a key that marks rows is spelled out or escaped), so every other
//! event (a vLLM token chunk, with its `"routed_experts":null`) is passed on
//! after memchr-class searches of its bytes, without being parsed.

use crate::bytes::{self, Doc, ScannedValue};
use crate::error::{Error, Side};
use crate::fields::ROUTED_EXPERTS;
use crate::handle::Keys;
use crate::inline::anchor::{self, Counts};
use crate::stitch::Stitch;
use crate::stitcher::Stitcher;
use crate::view::View;

/// The UTF-8 byte-order mark, which the event stream's decoder strips.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// An incremental stitcher of one decode stream (server-sent events) with
/// one prefill response: [`feed`](StreamStitcher::feed) it the decode's body
/// chunk by chunk, [`finish`](StreamStitcher::finish) it at the end, and send
/// on what each call appends to `out`.
///
/// - Every event that carries no rows (see the [module](self)) is appended
///   to `out`, byte for byte as it came, by the call that delivers its blank
///   line; bytes before the first event (a byte-order mark) and after a
///   blank line's `\r` (its `\n`) go out as they arrive.
/// - An event that carries rows is held until its blank line has arrived,
///   then its data is merged with the prefill by
///   [`Stitcher::merge_bytes`] (`Stitch::ForPd`) and written back as `data:`
///   lines, its other lines and its line ends as they were.
/// - What it holds at any time is at most the event being read (plus, while
///   a rows event is stitched, that event's data and its merge), so memory is
///   bounded by the largest event.
/// - After an error it refuses every further call with
///   [`Error::StreamClosed`]; what it appended until then is a prefix of what
///   the whole stream would have given.
#[derive(Debug)]
pub struct StreamStitcher {
    stitcher: Stitcher,
    /// The prefill's whole response, once given.
    prefill: Option<Vec<u8>>,
    /// While the prefill is not given: the bytes of the stream from the
    /// first event that carries rows on, held until it is (read again
    /// then, from that event's start).
    held: Vec<u8>,
    /// Whether `held` is in use: an event that carries rows came before the
    /// prefill.
    holding: bool,
    /// The bytes of the event being read (its start not yet complete).
    pending: Vec<u8>,
    /// Where the line-end scan of `pending` stands.
    scan: Scan,
    /// Whether the stream's first bytes have been read past a byte-order
    /// mark (or found not to start with one).
    started: bool,
    /// The last event ended with a `\r`: a `\n` right after it is the rest
    /// of that line end.
    after_blank_cr: bool,
    /// The stream offset of the first byte not yet consumed into an event.
    offset: u64,
    /// How many events have been completed.
    events: u64,
    /// The rows already stitched: which slot, and the event it was on.
    seen: Vec<(Slot, u64)>,
    state: State,
    /// Scratch for a rows event's data and its merge.
    data: Vec<u8>,
    /// Whether the prefill holds a line-end byte (a merge's new text taken
    /// from it is then checked for line breaks).
    prefill_breaks: bool,
    /// The generated tokens seen so far, per choice, when the prefill's
    /// rows are a `.npy` placed by counts (vLLM 0.32): a streamed choice's
    /// `token_ids` is each event's own, so its count on the rows event is
    /// the sum over the stream (SPEC section 11, "Counts"). While the
    /// prefill is not given, tokens are counted in case it is such a
    /// `.npy` (`prompt` 0 until then).
    tokens: Option<Tokens>,
}

/// The counts a stream gives a vLLM `.npy`: the prompt's tokens (the
/// prefill's `usage.prompt_tokens`) and each choice's generated tokens so
/// far, by the choice's `index`.
#[derive(Debug)]
struct Tokens {
    prompt: u64,
    by_index: Vec<(u64, u64)>,
}

impl Tokens {
    fn seen(&self, index: u64) -> u64 {
        self.by_index
            .iter()
            .find(|(i, _)| *i == index)
            .map_or(0, |(_, n)| *n)
    }

    /// Adds the tokens of each choice of the event `root`.
    fn add(&mut self, root: ScannedValue<'_>) {
        let Some(choices) = root.get("choices").and_then(View::elements) else {
            return;
        };
        for (i, choice) in choices.enumerate() {
            let n = choice.get("token_ids").and_then(View::len).unwrap_or(0) as u64;
            let index = choice_index(choice, i);
            match self.by_index.iter_mut().find(|(k, _)| *k == index) {
                Some((_, seen)) => *seen = seen.saturating_add(n),
                None => self.by_index.push((index, n)),
            }
        }
    }

    /// The counts of each choice of the event `root`: the tokens before it
    /// and its own.
    fn counts(&self, root: ScannedValue<'_>) -> Vec<Counts> {
        root.get("choices")
            .and_then(View::elements)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, choice)| {
                let own = choice.get("token_ids").and_then(View::len).unwrap_or(0) as u64;
                Counts {
                    prompt: self.prompt,
                    generated: self.seen(choice_index(choice, i)).saturating_add(own),
                }
            })
            .collect()
    }
}

/// What became of a complete event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Done {
    /// Appended to `out`, as it came or stitched.
    Passed,
    /// It carries rows and the prefill is not given yet: nothing appended,
    /// nothing counted; it is read again once the prefill is given.
    Waits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    Failed,
    Finished,
}

/// The scan of an event's bytes for the blank line that ends it.
#[derive(Clone, Copy, Debug)]
struct Scan {
    /// Whether the next byte starts a line.
    line_start: bool,
    /// The last byte was a `\r` ending a (non-empty) line: a `\n` next
    /// belongs to it.
    after_cr: bool,
    /// How many lines of the event have ended (its blank line included,
    /// once found): 2 is one line and the blank line.
    lines: usize,
}

impl Scan {
    const START: Scan = Scan {
        line_start: true,
        after_cr: false,
        lines: 0,
    };
}

/// Where a choice's rows sit, to find a second rows event for the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// `choices[i]` (`routed_experts`, `payload`, `sgl_ext`), by the choice's
    /// `index` (its position when it has no integer `index`).
    Choice(u64),
    /// SGLang's `meta_info` of `/generate`, by the output's `index` (0 when
    /// it has none).
    Generate(u64),
    /// SGLang's response-level `sglext`, one per stream.
    SglExt,
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Choice(i) => write!(f, "choice {i}"),
            Slot::Generate(i) => write!(f, "SGLang output {i} (meta_info)"),
            Slot::SglExt => f.write_str("SGLang sglext"),
        }
    }
}

/// The prefilter: where in `bytes` the first needle that may mark rows
/// starts (`bytes.len()` when none): a `routed_experts` that is not a null
/// member, a `payload`, or a `\u`.
///
/// Each needle is found by a byte of its own, rare in JSON events: one
/// `memchr2` scan for the `x` of `routed_experts` and the `y` of `payload`
/// (a vLLM token chunk holds two `x`, one of them its
/// `"routed_experts":null`, and no `y`), each hit checked in place, then a
/// `memchr` scan for the `\` of `\u` up to the first of those found. Three
/// `memmem` searches, the `routed_experts` one restarted at every token
/// chunk, cost more instructions (callgrind, `examples/stream_count.rs`;
/// docs/PERFORMANCE.md).
///
/// The needles are found in the order of those bytes, not of their starts:
/// the start returned may follow another needle's start, but that needle
/// then ends after it (its byte comes later), so every event that ends at or
/// before the returned point holds no needle whole, which is all the callers
/// rely on; and a needle not whole in `bytes` is not counted (its event
/// goes on past `bytes`, and is judged whole).
fn next_suspect(bytes: &[u8]) -> usize {
    const X: usize = 8;
    const Y: usize = 2;
    debug_assert_eq!(ROUTED_EXPERTS.as_bytes()[X], b'x');
    let first = memchr::memchr2_iter(b'x', b'y', bytes)
        .find_map(|at| {
            if bytes[at] == b'x' {
                let start = at.checked_sub(X)?;
                let rest = bytes[start..].strip_prefix(ROUTED_EXPERTS.as_bytes())?;
                (!null_member(rest)).then_some(start)
            } else {
                let start = at.checked_sub(Y)?;
                bytes[start..].starts_with(b"payload").then_some(start)
            }
        })
        .unwrap_or(bytes.len());
    memchr::memchr_iter(b'\\', &bytes[..first])
        .find(|&at| bytes.get(at + 1) == Some(&b'u'))
        .unwrap_or(first)
}

/// Whether `bytes` may be (part of) an event that carries rows: every key
/// that marks rows is `routed_experts` or `payload` spelled out, or has an
/// escape; and a `routed_experts` that ends a string followed by `:` and
/// `null` (spaces and tabs around the colon) is a member whose value is
/// null, which is no rows (vLLM writes `"routed_experts":null` on every
/// token chunk).
fn may_carry_rows(bytes: &[u8]) -> bool {
    next_suspect(bytes) < bytes.len()
}

/// Whether `rest`, which follows a `routed_experts`, starts with `"`, `:`
/// and `null`, with spaces and tabs around the colon: that string ended
/// there (its quote is not escaped: the byte before it is `s`), is a key,
/// and its value is null. Line ends are not skipped: in an event's bytes
/// they end a line, and what follows is another line's.
fn null_member(rest: &[u8]) -> bool {
    if rest.starts_with(b"\":null") || rest.starts_with(b"\": null") {
        return true;
    }
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let Some(rest) = rest.strip_prefix(b"\"") else {
        return false;
    };
    let rest = &rest[rest.iter().take_while(|b| blank(b)).count()..];
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    let rest = &rest[rest.iter().take_while(|b| blank(b)).count()..];
    rest.starts_with(b"null")
}

impl StreamStitcher {
    /// A stitcher of one decode stream with `prefill`, the prefill's whole
    /// (non-streamed) response body, merged as `stitcher` merges
    /// (its fields, strict mode).
    ///
    /// # Errors
    ///
    /// [`Error::Json`] (side prefill) when `prefill` is not JSON.
    pub fn new(stitcher: Stitcher, prefill: impl Into<Vec<u8>>) -> Result<StreamStitcher, Error> {
        let mut stream = StreamStitcher::awaiting_prefill(stitcher);
        stream.take_prefill(prefill.into())?;
        Ok(stream)
    }

    /// A stitcher of one decode stream whose prefill response comes later,
    /// by [`give_prefill`](StreamStitcher::give_prefill): for a router that
    /// sends both instances the request at once (SGLang's P/D), whose
    /// prefill may answer after the decode's first bytes.
    ///
    /// Until the prefill is given, every event that carries no rows passes
    /// through at once, as [`new`](StreamStitcher::new)'s would; the first
    /// event that carries rows, and every byte after it, wait (in order)
    /// and go out stitched from the call that gives the prefill. Once it is
    /// given, the stitcher is the one `new` would have made: the bytes out,
    /// over the whole stream, are the same whenever the prefill comes.
    /// [`finish`](StreamStitcher::finish) before the prefill is given is
    /// [`Error::StreamPrefillMissing`].
    ///
    /// ```
    /// use pd_stitch::{stream::StreamStitcher, Stitcher};
    ///
    /// let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    /// let mut out = Vec::new();
    /// // A token event goes out before the prefill has answered.
    /// stream.feed(b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [7]}]}\n\n", &mut out)?;
    /// assert_eq!(out, b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [7]}]}\n\n");
    /// // The rows event waits for it, and so does what follows.
    /// out.clear();
    /// stream.feed(b"data: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AAAABAUG\", \"shape\": [2, 1, 3], \"start\": 0, \"dtype\": \"uint8\"}}]}\n\ndata: [DONE]\n\n", &mut out)?;
    /// assert!(out.is_empty());
    /// let prefill = br#"{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;
    /// stream.give_prefill(&prefill[..], &mut out)?;
    /// stream.finish(&mut out)?;
    /// assert_eq!(
    ///     out,
    ///     &b"data: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AQIDBAUG\", \"shape\": [2,1,3], \"start\": 0, \"dtype\": \"uint8\"}}]}\n\ndata: [DONE]\n\n"[..]
    /// );
    /// # Ok::<(), pd_stitch::Error>(())
    /// ```
    pub fn awaiting_prefill(stitcher: Stitcher) -> StreamStitcher {
        StreamStitcher {
            stitcher,
            prefill: None,
            held: Vec::new(),
            holding: false,
            pending: Vec::new(),
            scan: Scan::START,
            started: false,
            after_blank_cr: false,
            offset: 0,
            events: 0,
            seen: Vec::new(),
            state: State::Open,
            data: Vec::new(),
            prefill_breaks: false,
            // Counted until the prefill says whether its rows need them.
            tokens: Some(Tokens {
                prompt: 0,
                by_index: Vec::new(),
            }),
        }
    }

    /// Gives the prefill's whole (non-streamed) response body to a stitcher
    /// made by [`awaiting_prefill`](StreamStitcher::awaiting_prefill), and
    /// appends to `out` what was waiting for it: the event that carries
    /// rows, stitched, and every complete event after it.
    ///
    /// # Errors
    ///
    /// - [`Error::Json`] (side prefill) when `prefill` is not JSON.
    /// - [`Error::StreamPrefillRepeated`]: a prefill was given already (or
    ///   to [`new`](StreamStitcher::new)).
    /// - The errors of [`feed`](StreamStitcher::feed), met by the events
    ///   that waited.
    /// - [`Error::StreamClosed`]: the stitcher failed before, or was
    ///   finished.
    ///
    /// After an error the stitcher is failed, as after `feed`'s.
    pub fn give_prefill(
        &mut self,
        prefill: impl Into<Vec<u8>>,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        self.check_open()?;
        let result = self.give_open(prefill.into(), out);
        if result.is_err() {
            self.fail();
        }
        result
    }

    /// Whether the prefill's response has been given.
    pub fn has_prefill(&self) -> bool {
        self.prefill.is_some()
    }

    fn give_open(&mut self, prefill: Vec<u8>, out: &mut Vec<u8>) -> Result<(), Error> {
        self.take_prefill(prefill)?;
        if self.holding {
            self.holding = false;
            let held = std::mem::take(&mut self.held);
            self.feed_open(&held, out)?;
        }
        Ok(())
    }

    /// Reads and keeps the prefill: whether its rows are placed by counts
    /// (tokens are then counted on), and whether it holds a line break.
    fn take_prefill(&mut self, prefill: Vec<u8>) -> Result<(), Error> {
        if self.prefill.is_some() {
            return Err(Error::StreamPrefillRepeated {});
        }
        let doc = bytes::scan(Side::Prefill, &prefill)?;
        let counted = anchor::counted_prefill(ScannedValue::root(&doc));
        drop(doc);
        // The tokens counted while it was awaited are kept for a `.npy`
        // placed by counts, and dropped (with the counting) otherwise.
        let seen = self.tokens.take().map(|t| t.by_index).unwrap_or_default();
        self.tokens = counted.map(|prompt| Tokens {
            prompt,
            by_index: seen,
        });
        self.prefill_breaks = memchr::memchr2(b'\n', b'\r', &prefill).is_some();
        self.prefill = Some(prefill);
        Ok(())
    }

    /// Reads `chunk`, the next bytes of the decode's stream, and appends to
    /// `out` what can be sent now: every event completed by `chunk`, in
    /// order (a rows event stitched).
    ///
    /// # Errors
    ///
    /// - [`Error::StreamEvent`]: an event that carries rows failed to stitch
    ///   (the merge's error inside, at its place in the event's data).
    /// - [`Error::StreamRowsRepeated`]: a second event with rows for a
    ///   choice that already had them.
    /// - [`Error::StreamUnstitched`]: an event carries rows the merge does
    ///   not stitch.
    /// - [`Error::StreamClosed`]: the stitcher failed before, or was
    ///   finished.
    ///
    /// On error nothing of the failing event has been appended; events
    /// before it in `chunk` have been.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        self.check_open()?;
        let result = self.feed_open(chunk, out);
        if result.is_err() {
            self.fail();
        }
        result
    }

    /// Ends the stream: appends to `out` the bytes of an event the stream
    /// ended inside of (the standard discards such an event; the bytes are
    /// passed on as they came), and refuses further input.
    ///
    /// # Errors
    ///
    /// - [`Error::StreamUnfinished`]: the stream ended inside an event that
    ///   may carry rows (by the prefilter of the [module](self)): the rows
    ///   could not be stitched. Nothing of it is appended.
    /// - [`Error::StreamPrefillMissing`]: a stitcher made by
    ///   [`awaiting_prefill`](StreamStitcher::awaiting_prefill) was never
    ///   given the prefill. What waited for it is not appended.
    /// - [`Error::StreamClosed`]: the stitcher failed before, or was
    ///   finished.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.check_open()?;
        if self.prefill.is_none() {
            let err = Error::StreamPrefillMissing {
                held: (self.held.len() + self.pending.len()) as u64,
            };
            self.fail();
            return Err(err);
        }
        if may_carry_rows(&self.pending) {
            let err = Error::StreamUnfinished {
                offset: self.offset,
                len: self.pending.len() as u64,
            };
            self.fail();
            return Err(err);
        }
        out.extend_from_slice(&self.pending);
        self.offset += self.pending.len() as u64;
        self.pending.clear();
        self.state = State::Finished;
        Ok(())
    }

    /// How many bytes of the stream the stitcher holds: those of the event
    /// it is reading, and while the prefill is awaited, those from the
    /// first event that carries rows on.
    pub fn buffered(&self) -> usize {
        self.pending.len() + self.held.len()
    }

    /// The capacity of the stitcher's buffers, in bytes: what it keeps
    /// allocated, bounded by a small multiple of the largest event it has
    /// read (and the prefill, which it keeps), plus what waits for the
    /// prefill while it is awaited.
    pub fn capacity(&self) -> usize {
        self.pending.capacity()
            + self.data.capacity()
            + self.held.capacity()
            + self.prefill.as_ref().map_or(0, Vec::capacity)
    }

    /// How many events have been completed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// [`next_suspect`], and while tokens are counted, the first
    /// `token_ids` too: such an event is read for its count.
    fn suspect(&self, bytes: &[u8]) -> usize {
        let first = next_suspect(bytes);
        match self.tokens {
            Some(_) => memchr::memmem::find(&bytes[..first], b"token_ids").unwrap_or(first),
            None => first,
        }
    }

    fn check_open(&self) -> Result<(), Error> {
        match self.state {
            State::Open => Ok(()),
            State::Failed => Err(Error::StreamClosed { failed: true }),
            State::Finished => Err(Error::StreamClosed { failed: false }),
        }
    }

    fn fail(&mut self) {
        self.state = State::Failed;
        self.pending = Vec::new();
        self.data = Vec::new();
        self.held = Vec::new();
    }

    fn feed_open(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if self.holding {
            // Everything after a rows event waits with it: nothing is
            // reordered.
            self.held.extend_from_slice(input);
            return Ok(());
        }
        if !self.started {
            // A byte-order mark, which may arrive a byte at a time, is
            // passed on before the first event: it is not part of its line.
            let have = self.pending.len();
            let take = (BOM.len() - have).min(input.len());
            self.pending.extend_from_slice(&input[..take]);
            if BOM.starts_with(&self.pending) {
                if self.pending.len() < BOM.len() {
                    return Ok(());
                }
                out.extend_from_slice(BOM);
                self.offset += BOM.len() as u64;
                self.pending.clear();
                input = &input[take..];
            } else {
                // Not a mark: these bytes start the first event (none of
                // them ends a line).
                self.pending.truncate(have);
                if have > 0 {
                    self.scan.line_start = false;
                }
            }
            self.started = true;
        }
        // Where in `input` the first needle of the prefilter that may mark
        // rows starts: every event that ends at or before it holds none, and
        // is passed on without a search of its own (one search per needle
        // over the chunk, not one per event).
        let mut suspect = self.suspect(input);
        loop {
            if self.after_blank_cr {
                match input.first() {
                    None => return Ok(()),
                    Some(b'\n') => {
                        out.push(b'\n');
                        self.offset += 1;
                        input = &input[1..];
                        suspect = suspect.saturating_sub(1);
                    }
                    Some(_) => {}
                }
                self.after_blank_cr = false;
            }
            if input.is_empty() {
                return Ok(());
            }
            if self.pending.is_empty() {
                // Events that start and end in `input` before `suspect` hold
                // no needle whole: they are passed on as one run, copied
                // once. A needle that starts inside an event lies in it
                // whole (no needle holds a line-end byte, and the event ends
                // with one), so the event that holds `suspect` is the first
                // to end after it, and is judged without a search of its
                // own.
                let mut run = 0;
                let mut scan = Scan::START;
                let end = loop {
                    match find_end(&input[run..], &mut scan) {
                        Some(end) if run + end <= suspect => {
                            run += end;
                            self.events += 1;
                            if input[run - 1] == b'\r' {
                                // The `\n` of a blank line's `\r\n` goes
                                // with its event.
                                match input.get(run) {
                                    Some(b'\n') => run += 1,
                                    None => self.after_blank_cr = true,
                                    Some(_) => {}
                                }
                            }
                            scan = Scan::START;
                        }
                        end => break end,
                    }
                };
                out.extend_from_slice(&input[..run]);
                self.offset += run as u64;
                input = &input[run..];
                match end {
                    Some(end) => {
                        if self.event(&input[..end], scan.lines, Some(true), out)? == Done::Waits {
                            self.hold(&[], input);
                            return Ok(());
                        }
                        input = &input[end..];
                        suspect = self.suspect(input);
                    }
                    None => {
                        self.pending.extend_from_slice(input);
                        self.scan = scan;
                        return Ok(());
                    }
                }
            } else {
                let mut scan = self.scan;
                match find_end(input, &mut scan) {
                    Some(end) => {
                        self.pending.extend_from_slice(&input[..end]);
                        input = &input[end..];
                        let event = std::mem::take(&mut self.pending);
                        let result = self.event(&event, scan.lines, None, out);
                        if let Ok(Done::Waits) = result {
                            self.hold(&event, input);
                        }
                        self.pending = event;
                        self.pending.clear();
                        self.scan = Scan::START;
                        if result? == Done::Waits {
                            return Ok(());
                        }
                        suspect = self.suspect(input);
                    }
                    None => {
                        self.pending.extend_from_slice(input);
                        self.scan = scan;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Holds for the prefill an event that carries rows (the start of
    /// it in `event`, its rest and all that follows in `input`).
    fn hold(&mut self, event: &[u8], input: &[u8]) {
        self.holding = true;
        self.held.clear();
        self.held.extend_from_slice(event);
        self.held.extend_from_slice(input);
    }

    /// One complete event (its blank line's first line-end byte included),
    /// of `lines` lines (its blank line included): appended as it is, or
    /// stitched; or, when it carries rows and the prefill is not given
    /// yet, nothing done (it waits). `suspect` is the prefilter's answer,
    /// when it is known already.
    fn event(
        &mut self,
        event: &[u8],
        lines: usize,
        suspect: Option<bool>,
        out: &mut Vec<u8>,
    ) -> Result<Done, Error> {
        let number = self.events;
        let offset = self.offset;
        let suspect = suspect.unwrap_or_else(|| self.suspect(event) < event.len());
        if suspect && self.stitch_event(event, lines, number, offset, out)? == Done::Waits {
            return Ok(Done::Waits);
        } else if !suspect {
            out.extend_from_slice(event);
        }
        self.after_blank_cr = event.last() == Some(&b'\r');
        self.events += 1;
        self.offset += event.len() as u64;
        Ok(Done::Passed)
    }

    /// An event that may carry rows: parsed, and stitched when it does.
    fn stitch_event(
        &mut self,
        event: &[u8],
        lines: usize,
        number: u64,
        offset: u64,
        out: &mut Vec<u8>,
    ) -> Result<Done, Error> {
        let mut data = std::mem::take(&mut self.data);
        let result = self.stitch_with(event, lines, number, offset, &mut data, out);
        data.clear();
        self.data = data;
        result
    }

    fn stitch_with(
        &mut self,
        event: &[u8],
        lines: usize,
        number: u64,
        offset: u64,
        data: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Done, Error> {
        data.clear();
        // One line and the blank line (the usual event): that line, and its
        // line end, known without a scan of the event (the framing's scan
        // found no other line end in it).
        let single = if lines == 2 { one_line(event) } else { None };
        // One data line: its value is the data, read where it is; otherwise
        // the lines' values joined.
        let joined = match single {
            Some((line, _)) => match field(line) {
                Some((b"data", value)) => Some(Some(value)),
                _ => None,
            },
            None => event_data(event, data),
        };
        let Some(joined) = joined else {
            out.extend_from_slice(event);
            return Ok(Done::Passed);
        };
        let joined: &[u8] = match joined {
            Some(value) => value,
            None => data,
        };
        // The scanner accepts UTF-8 only (it checks every non-ASCII byte);
        // other bytes are read as the standard's decoder reads them,
        // replaced.
        let lossy;
        let doc = match Doc::scan(joined) {
            Ok(doc) => doc,
            Err(_) if std::str::from_utf8(joined).is_ok() => {
                out.extend_from_slice(event);
                return Ok(Done::Passed);
            }
            Err(_) => {
                lossy = String::from_utf8_lossy(joined).into_owned();
                let Ok(doc) = Doc::scan(lossy.as_bytes()) else {
                    out.extend_from_slice(event);
                    return Ok(Done::Passed);
                };
                doc
            }
        };
        let fields: Vec<&str> = self.stitcher.fields().collect();
        let slots = rows_slots(&fields, &doc);
        let root = ScannedValue::root(&doc);
        if slots.is_empty() {
            if let Some(tokens) = &mut self.tokens {
                tokens.add(root);
            }
            out.extend_from_slice(event);
            return Ok(Done::Passed);
        }
        let Some(prefill) = self.prefill.as_deref() else {
            return Ok(Done::Waits);
        };
        for &slot in &slots {
            if let Some(&(_, first)) = self.seen.iter().find(|(s, _)| *s == slot) {
                return Err(Error::StreamRowsRepeated {
                    event: number,
                    offset,
                    first_event: first,
                    slot: slot.to_string(),
                });
            }
        }
        // Text known to hold no line break: the prefill's, when it has none.
        let clean: &[u8] = if self.prefill_breaks { &[] } else { prefill };
        // A vLLM `.npy` is placed by the tokens of the whole stream so far.
        let counts = self.tokens.as_ref().map(|tokens| tokens.counts(root));
        let mut spec = self.stitcher.spec(Stitch::ForPd);
        spec.decode_counts = counts.as_deref();
        let merged = bytes::merge_doc_with(spec, prefill, &doc, |stitched| match single {
            // One data line, and a merged text without a line break
            // (the decode's line has none; the merge's new text is
            // checked): written straight into `out`, as `reframe`
            // would write it.
            Some((line, end)) if !stitched.has_line_break(clean) => {
                let prefix = data_prefix(line);
                out.reserve(prefix.len() + 1 + stitched.len() + end.len() + 1);
                out.extend_from_slice(prefix);
                let at = out.len();
                stitched.extend_into(out);
                if !prefix.ends_with(b" ") && out.get(at) == Some(&b' ') {
                    out.insert(at, b' ');
                }
                out.extend_from_slice(end);
                out.extend_from_slice(&event[event.len() - 1..]);
                None
            }
            _ => {
                let mut merged = Vec::with_capacity(stitched.len());
                stitched.extend_into(&mut merged);
                Some(merged)
            }
        })
        .map_err(|error| Error::StreamEvent {
            event: number,
            offset,
            error: Box::new(error),
        })?;
        let Some(merged) = merged else {
            return Err(Error::StreamUnstitched {
                event: number,
                offset,
            });
        };
        if let Some(merged) = merged {
            reframe(event, &merged, out);
        }
        self.seen
            .extend(slots.into_iter().map(|slot| (slot, number)));
        if let Some(tokens) = &mut self.tokens {
            tokens.add(root);
        }
        Ok(Done::Passed)
    }
}

/// The line of an event that is one line and the blank line, and that
/// line's line end (`\n`, `\r\n` or `\r`); the event's last byte is the
/// blank line's.
fn one_line(event: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = event.get(..event.len().checked_sub(1)?)?;
    let end = match body {
        [.., b'\r', b'\n'] => 2,
        [.., b'\n'] | [.., b'\r'] => 1,
        _ => return None,
    };
    let split = body.len() - end;
    Some((&body[..split], &body[split..]))
}

/// Scans `bytes` from where `scan` stands for the blank line that ends the
/// event: `Some(end)`, one past that line's first line-end byte, or `None`
/// when `bytes` ends first (`scan` then says where the scan stands).
fn find_end(bytes: &[u8], scan: &mut Scan) -> Option<usize> {
    let mut at = 0;
    loop {
        if scan.after_cr {
            // `at` follows a `\r` that ended a non-empty line (an empty one
            // ended the event): a `\n` here is the rest of its line end.
            if at == bytes.len() {
                return None;
            }
            if bytes[at] == b'\n' {
                at += 1;
            }
            scan.after_cr = false;
            scan.line_start = true;
        }
        // A line end right at a line's start (the blank line after a
        // line, as every event has) is read without a search.
        let next = match bytes.get(at) {
            Some(b'\n' | b'\r') if scan.line_start => Some(0),
            _ => memchr::memchr2(b'\n', b'\r', &bytes[at..]),
        };
        match next {
            None => {
                if at < bytes.len() {
                    scan.line_start = false;
                }
                return None;
            }
            Some(k) => {
                let empty = scan.line_start && k == 0;
                let end = at + k + 1;
                scan.lines += 1;
                if empty {
                    return Some(end);
                }
                if bytes[at + k] == b'\r' {
                    scan.after_cr = true;
                } else {
                    scan.line_start = true;
                }
                at = end;
            }
        }
    }
}

/// One line of an event: its bytes up to its line end, and the line end.
struct Line<'e> {
    text: &'e [u8],
    end: &'e [u8],
}

/// The lines of a complete event, its final blank line's included.
fn lines(event: &[u8]) -> impl Iterator<Item = Line<'_>> {
    let mut rest = event;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (text_len, end_len) = match memchr::memchr2(b'\n', b'\r', rest) {
            None => (rest.len(), 0),
            Some(k) if rest[k] == b'\r' && rest.get(k + 1) == Some(&b'\n') => (k, 2),
            Some(k) => (k, 1),
        };
        let line = Line {
            text: &rest[..text_len],
            end: &rest[text_len..text_len + end_len],
        };
        rest = &rest[text_len + end_len..];
        Some(line)
    })
}

/// A field line's name and value (one leading space of the value removed);
/// `None` for a comment or a blank line.
fn field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    if line.is_empty() || line[0] == b':' {
        return None;
    }
    Some(match memchr::memchr(b':', line) {
        None => (line, &[][..]),
        Some(k) => {
            let value = &line[k + 1..];
            (&line[..k], value.strip_prefix(b" ").unwrap_or(value))
        }
    })
}

/// The event's data, as the standard builds it: the values of its `data`
/// lines, each followed by `\n`, the last `\n` removed. `None` when the
/// event has no `data` line (it dispatches nothing); `Some(Some(value))`
/// when it has one, whose value is the data; `Some(None)` when it has
/// several, their data written into `data`.
fn event_data<'e>(event: &'e [u8], data: &mut Vec<u8>) -> Option<Option<&'e [u8]>> {
    let mut values = lines(event).filter_map(|line| match field(line.text) {
        Some((b"data", value)) => Some(value),
        _ => None,
    });
    let first = values.next()?;
    let Some(second) = values.next() else {
        return Some(Some(first));
    };
    for value in [first, second].into_iter().chain(values) {
        data.extend_from_slice(value);
        data.push(b'\n');
    }
    data.pop();
    Some(None)
}

/// The rows slots of an event's data (scanned as `doc`): empty
/// when it carries no rows.
fn rows_slots(fields: &[&str], doc: &Doc<'_>) -> Vec<Slot> {
    let root = ScannedValue::root(doc);
    let mut slots = Vec::new();
    // vLLM's inline rows and rows by handle, read from the scanner's index.
    if let Some(choices) = root.get("choices").and_then(View::elements) {
        for (i, choice) in choices.enumerate() {
            let inline = choice
                .get(ROUTED_EXPERTS)
                .is_some_and(|rows| !rows.is_null());
            let by_handle = choice
                .get("payload")
                .and_then(View::elements)
                .is_some_and(|mut items| items.any(|item| Keys::stitched(fields, item).is_some()));
            if inline || by_handle {
                slots.push(Slot::Choice(choice_index(choice, i)));
            }
        }
    }
    sglang_slots(root, &mut slots);
    slots
}

/// A choice's `index` when it is an integer, else its position.
fn choice_index<'a, V: View<'a>>(choice: V, position: usize) -> u64 {
    choice
        .get("index")
        .and_then(View::as_u64)
        .unwrap_or(position as u64)
}

/// Whether `object` is an object with a non-null `routed_experts`. The
/// scanner records the members of SGLang's slots (`meta_info`, `sglext`, a
/// choice's `sgl_ext`), of a batch's items too, so this reads its index.
fn has_rows_member(object: Option<ScannedValue<'_>>) -> bool {
    object
        .filter(|o| o.kind() == crate::view::Kind::Object)
        .and_then(|o| o.get(ROUTED_EXPERTS))
        .is_some_and(|rows| !rows.is_null())
}

/// SGLang's rows slots of the data `root`: `meta_info` (by the output's
/// `index`), `sglext`, and `choices[0].sgl_ext`; of each element, when the
/// data is an array.
fn sglang_slots(root: ScannedValue<'_>, slots: &mut Vec<Slot>) {
    match root.elements() {
        Some(items) if root.kind() == crate::view::Kind::Array => {
            for (k, item) in (0..).zip(items) {
                sglang_item_slots(item, k, slots);
            }
        }
        _ => sglang_item_slots(root, 0, slots),
    }
}

/// The slots of one SGLang output, the `position`-th of its batch.
fn sglang_item_slots(item: ScannedValue<'_>, position: u64, slots: &mut Vec<Slot>) {
    if has_rows_member(item.get("meta_info")) {
        let index = item.get("index").and_then(View::as_u64).unwrap_or(position);
        slots.push(Slot::Generate(index));
    }
    if has_rows_member(item.get("sglext")) {
        slots.push(Slot::SglExt);
    }
    if let Some(first) = item.get("choices").and_then(|c| c.index(0)) {
        if has_rows_member(first.get("sgl_ext")) {
            let slot = Slot::Choice(choice_index(first, 0));
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
    }
}

/// Writes `event` to `out` with its data replaced by `merged`: the merged
/// text split at its line breaks (JSON whitespace, so a CR or CRLF in it
/// becomes a line end, read back as `\n`) into pieces; the event's `k`-th
/// `data` line, but the last, gets piece `k` (while more than one piece is
/// left) with that line's `data:` or `data: ` and line end, and the last
/// data line gets the pieces left, each with its prefix and line end (so the
/// line before the next field or the blank line ends as it did); data lines
/// beyond the pieces are left out; every other line is as it was.
fn reframe(event: &[u8], merged: &[u8], out: &mut Vec<u8>) {
    let pieces: Vec<&[u8]> = lines(merged).map(|line| line.text).collect();
    let data_lines = lines(event)
        .filter(|line| matches!(field(line.text), Some((b"data", _))))
        .count();
    let mut next = 0;
    let mut seen = 0;
    for line in lines(event) {
        if !matches!(field(line.text), Some((b"data", _))) {
            out.extend_from_slice(line.text);
            out.extend_from_slice(line.end);
            continue;
        }
        seen += 1;
        let last = seen == data_lines;
        let prefix = data_prefix(line.text);
        while next < pieces.len() && (last || next + 1 < pieces.len()) {
            let piece = pieces[next];
            next += 1;
            out.extend_from_slice(prefix);
            if !prefix.ends_with(b" ") && piece.first() == Some(&b' ') {
                out.push(b' ');
            }
            out.extend_from_slice(piece);
            out.extend_from_slice(line.end);
            if !last {
                break;
            }
        }
    }
}

/// The `data:` or `data: ` that starts a data line (`data:` for a line that
/// is the bare name).
fn data_prefix(line: &[u8]) -> &[u8] {
    match line.get(4) {
        Some(b':') if line.get(5) == Some(&b' ') => &line[..6],
        Some(b':') => &line[..5],
        _ => b"data:",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(bytes: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let mut scan = Scan::START;
            match find_end(&bytes[at..], &mut scan) {
                Some(end) => {
                    at += end;
                    out.push(at);
                    // The `\n` of a blank line's `\r\n` follows its event.
                    if bytes[at - 1] == b'\r' && bytes.get(at) == Some(&b'\n') {
                        at += 1;
                    }
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn blank_lines_end_events_with_every_line_end() {
        assert_eq!(ends(b"data: a\n\ndata: b\n\n"), [9, 18]);
        assert_eq!(ends(b"data: a\r\n\r\n"), [10]);
        assert_eq!(ends(b"data: a\r\rdata: b\r\r"), [9, 18]);
        assert_eq!(ends(b"data: a\r\n\n"), [10]);
        assert_eq!(ends(b"\n"), [1]);
        assert_eq!(ends(b"data: a\n"), Vec::<usize>::new());
        // A `\r\n` is one line end, not a line and a blank one.
        assert_eq!(ends(b"data: a\r\ndata: b\n"), Vec::<usize>::new());
    }

    #[test]
    fn only_null_routed_experts_members_are_passed_unparsed() {
        for none in [
            &b"data: {\"routed_experts\":null}"[..],
            b"data: {\"routed_experts\" \t:  null, \"routed_experts\":null}",
            b"data: [DONE]",
        ] {
            assert!(!may_carry_rows(none), "{}", String::from_utf8_lossy(none));
        }
        for some in [
            &b"data: {\"routed_experts\":\"AAAA\"}"[..],
            b"data: {\"routed_experts\":null, \"routed_experts\": \"AA\"}",
            b"data: {\"routed_experts\"\n:null}",
            b"data: {\"routed_experts\"",
            b"data: {\"x\": \"routed_experts\", \"y\": 1}",
            b"data: {\"payload\": []}",
            b"data: {\"\\u0070ayload\": []}",
        ] {
            assert!(may_carry_rows(some), "{}", String::from_utf8_lossy(some));
        }
    }

    /// The needles of `bytes` as the prefilter defines them, found the
    /// plain way (every start tried): (start, end) of each `payload`, `\u`
    /// and `routed_experts` that is not a null member.
    fn needles(bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        for start in 0..bytes.len() {
            let rest = &bytes[start..];
            for needle in [&b"payload"[..], b"\\u", ROUTED_EXPERTS.as_bytes()] {
                if let Some(after) = rest.strip_prefix(needle) {
                    if needle != ROUTED_EXPERTS.as_bytes() || !null_member(after) {
                        found.push((start, start + needle.len()));
                    }
                }
            }
        }
        found
    }

    proptest::proptest! {
        /// `next_suspect` (one memchr3 scan, needles found by a byte of
        /// their own) returns a needle's start, or the length when there is
        /// none, and no needle ends at or before it; `may_carry_rows` is
        /// whether there is a needle.
        #[test]
        fn the_prefilter_finds_what_a_plain_search_finds(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "routed_experts", "routed_e", "xperts", "\"", ":", " ", "\t", "null", "nul",
                "payload", "pay", "load", "\\u", "\\", "u", "x", "y", "\n", "a",
            ]), 0..24)
        ) {
            let bytes = pieces.concat().into_bytes();
            let found = needles(&bytes);
            let s = next_suspect(&bytes);
            proptest::prop_assert_eq!(may_carry_rows(&bytes), !found.is_empty());
            proptest::prop_assert!(found.iter().all(|&(_, end)| end > s));
            proptest::prop_assert!(s == bytes.len() || found.iter().any(|&(start, _)| start == s));
        }
    }

    #[test]
    fn data_is_the_data_lines_joined() {
        let mut data = Vec::new();
        let joined = event_data(b": c\ndata: a\r\nevent: x\rdata:b\ndata\n\n", &mut data);
        assert_eq!(joined, Some(None));
        assert_eq!(data, b"a\nb\n");
        data.clear();
        assert_eq!(event_data(b"event: x\n\n", &mut data), None);
        let one = event_data(b"data:  two spaces\n\n", &mut data);
        assert_eq!(one, Some(Some(&b" two spaces"[..])));
        assert_eq!(event_data(b"data\r\r", &mut data), Some(Some(&b""[..])));
        assert!(data.is_empty());
    }
}

#[cfg(test)]
mod null_member_event {
    use super::*;

    #[test]
    fn a_null_rows_member_passes() {
        let mut s = StreamStitcher::new(Stitcher::new(), &b"{\"choices\": [{}]}"[..]).unwrap();
        let mut out = Vec::new();
        let event = b"data: {\"choices\": [{\"routed_experts\": null}]}\n\n";
        s.feed(event, &mut out).unwrap();
        assert_eq!(out, event);
    }
}
