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
//! reads it (last of a repeated key, escaped keys unescaped), rows at a
//! place of the table of places (`pd_stitch::places::all()`, SPEC section
//! 1a): a non-null value at a place that holds rows, or for rows by handle
//! a payload with a segment of one of the stitcher's fields (of the data,
//! or of each element when the data is an array). It is found by its keys,
//! never by `finish_reason`. Only an event whose bytes contain a key of the
//! table that holds rows, other than as a member whose value is null
//! (`"routed_experts": null`), or a `\u` escape, can carry rows (a key
//! that marks rows is spelled out or escaped), so every other event (a
//! vLLM token chunk, with its `"routed_experts":null`) is passed on after
//! memchr-class searches of its bytes, without being parsed.

mod prefilter;
mod slots;
mod sse;
mod tokens;

use crate::bytes::{self, Doc, ScannedValue};
use crate::error::{Error, ErrorDetail, Side};
use crate::format::end_anchored as anchor;
use crate::format::stitch::Stitch;
use crate::stitcher::Stitcher;

use prefilter::{may_carry_rows, next_count, next_suspect};
use slots::{rows_slots, RowsSlot};
use sse::{data_prefix, event_data, field, find_end, one_line, reframe, Scan, BOM};
use tokens::Tokens;

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
///   [`ErrorDetail::StreamClosed`]; what it appended until then is a prefix of what
///   the whole stream would have given.
#[derive(Debug)]
pub struct StreamStitcher {
    stitcher: Stitcher,
    /// The prefill's whole response, once given.
    prefill: Option<Vec<u8>>,
    /// While the prefill is not given: the bytes of the stream from the
    /// first event that carries rows on, held until it is (read again
    /// then, from that event's start). Empty when nothing waits: an event
    /// is never empty (its blank line's line end is in it).
    held: Vec<u8>,
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
    seen: Vec<(RowsSlot, u64)>,
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

impl StreamStitcher {
    /// A stitcher of one decode stream with `prefill`, the prefill's whole
    /// (non-streamed) response body, merged as `stitcher` merges
    /// (its fields, strict mode).
    ///
    /// # Errors
    ///
    /// [`ErrorDetail::Json`] (side prefill) when `prefill` is not JSON.
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
    /// [`ErrorDetail::StreamPrefillMissing`].
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
    /// - [`ErrorDetail::Json`] (side prefill) when `prefill` is not JSON.
    /// - [`ErrorDetail::StreamPrefillRepeated`]: a prefill was given already (or
    ///   to [`new`](StreamStitcher::new)).
    /// - The errors of [`feed`](StreamStitcher::feed), met by the events
    ///   that waited.
    /// - [`ErrorDetail::StreamClosed`]: the stitcher failed before, or was
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
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            self.feed_open(&held, out)?;
        }
        Ok(())
    }

    /// Reads and keeps the prefill: whether its rows are placed by counts
    /// (tokens are then counted on), and whether it holds a line break.
    fn take_prefill(&mut self, prefill: Vec<u8>) -> Result<(), Error> {
        if self.prefill.is_some() {
            return Err(ErrorDetail::StreamPrefillRepeated {}.into());
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
    /// - [`ErrorDetail::StreamEvent`]: an event that carries rows failed to stitch
    ///   (the merge's error inside, at its place in the event's data).
    /// - [`ErrorDetail::StreamRowsRepeated`]: a second event with rows for a
    ///   choice that already had them.
    /// - [`ErrorDetail::StreamUnstitched`]: an event carries rows the merge does
    ///   not stitch.
    /// - [`ErrorDetail::StreamClosed`]: the stitcher failed before, or was
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
    /// - [`ErrorDetail::StreamUnfinished`]: the stream ended inside an event that
    ///   may carry rows (by the prefilter of the [module](self)): the rows
    ///   could not be stitched. Nothing of it is appended.
    /// - [`ErrorDetail::StreamPrefillMissing`]: a stitcher made by
    ///   [`awaiting_prefill`](StreamStitcher::awaiting_prefill) was never
    ///   given the prefill. What waited for it is not appended.
    /// - [`ErrorDetail::StreamClosed`]: the stitcher failed before, or was
    ///   finished.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.check_open()?;
        if self.prefill.is_none() {
            let err = ErrorDetail::StreamPrefillMissing {
                held: (self.held.len() + self.pending.len()) as u64,
            };
            self.fail();
            return Err(err.into());
        }
        if may_carry_rows(&self.pending) {
            let err = ErrorDetail::StreamUnfinished {
                offset: self.offset,
                len: self.pending.len() as u64,
            };
            self.fail();
            return Err(err.into());
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

    /// The prefilter's next suspect, and while tokens are counted, the
    /// first key of a choice's counts (`token_ids`) too: such an event is
    /// read for its count.
    fn suspect(&self, bytes: &[u8]) -> usize {
        let first = next_suspect(bytes);
        match self.tokens {
            Some(_) => next_count(&bytes[..first]),
            None => first,
        }
    }

    fn check_open(&self) -> Result<(), Error> {
        match self.state {
            State::Open => Ok(()),
            State::Failed => Err(ErrorDetail::StreamClosed { failed: true }.into()),
            State::Finished => Err(ErrorDetail::StreamClosed { failed: false }.into()),
        }
    }

    fn fail(&mut self) {
        self.state = State::Failed;
        self.pending = Vec::new();
        self.data = Vec::new();
        self.held = Vec::new();
    }

    fn feed_open(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if !self.held.is_empty() {
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
        // over the chunk, not one per event). Found when first needed: the
        // rest of an event begun in an earlier chunk is judged with that
        // event, and the search starts after it.
        let mut suspect = None;
        loop {
            if self.after_blank_cr {
                match input.first() {
                    None => return Ok(()),
                    Some(b'\n') => {
                        out.push(b'\n');
                        self.offset += 1;
                        input = &input[1..];
                        suspect = suspect.map(|s: usize| s.saturating_sub(1));
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
                let first = *suspect.get_or_insert_with(|| self.suspect(input));
                let mut run = 0;
                let mut scan = Scan::START;
                let end = loop {
                    match find_end(&input[run..], &mut scan) {
                        Some(end) if run + end <= first => {
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
                        suspect = None;
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
                        suspect = None;
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
                return Err(ErrorDetail::StreamRowsRepeated {
                    event: number,
                    offset,
                    first_event: first,
                    slot: slot.to_string(),
                }
                .into());
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
        .map_err(|error| ErrorDetail::StreamEvent {
            event: number,
            offset,
            error,
        })?;
        let Some(merged) = merged else {
            return Err(ErrorDetail::StreamUnstitched {
                event: number,
                offset,
            }
            .into());
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
