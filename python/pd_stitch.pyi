"""Type stubs of the `pd_stitch` extension module (built from python/src/lib.rs)."""

from os import PathLike
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Body = TypeVar("_Body", bytes, bytearray, str, Dict[str, Any])
_Prefill = Union[bytes, bytearray, str, Dict[str, Any]]
_Path = Union[str, "PathLike[str]"]

class StitchError(ValueError):
    """A merge, gather, check or episode failed; the input is unchanged."""

    kind: str
    """The Rust error's variant, e.g. "MissingPrefillField", "Json" or, for
    an episode, "RowGap"."""
    location: Optional[str]
    """The JSON path the error names, e.g. "decode choices[1].payload[3].rows";
    None for invalid JSON and for errors about a file."""

def merge_routed_experts_for_pd(
    prefill: _Prefill,
    decode: _Body,
    *,
    fields: Optional[Iterable[str]] = None,
    strict: bool = False,
    row_shape: Optional[Tuple[int, int]] = None,
) -> _Body:
    """Stitch inline rows, rows by handle and SGLang's rows
    (``meta_info.routed_experts``, ``sglext.routed_experts``, a ``/generate``
    batch array as bytes or str) at once. ``row_shape=(layers, top_k)``
    places SGLang's rows, which carry no shape: without it, a pair whose
    lengths fit two row widths is a ``StitchError`` of kind ``Positions``.
    The result has the decode's type; with nothing to stitch, the decode
    object itself comes back. A dict input is never modified; a bytearray
    decode is merged where it is (grown or shortened) and returned, left as
    it was on error, and must not be used by another thread meanwhile (a
    ``BufferError`` if it is exported elsewhere and its length must change)."""

def merge_routed_payload_in_json(
    prefill: _Prefill,
    decode: _Body,
    *,
    fields: Optional[Iterable[str]] = None,
    strict: bool = False,
) -> _Body:
    """Stitch the payload segments (rows by handle)."""

def merge_routed_experts_in_json(
    prefill: _Prefill,
    decode: _Body,
    *,
    fields: Optional[Iterable[str]] = None,
    strict: bool = False,
) -> _Body:
    """Stitch the inline `routed_experts` (compact or npy)."""

def prefill_has_routed_experts(
    prefill: _Prefill, *, fields: Optional[Iterable[str]] = None
) -> bool:
    """Whether prefill.choices[0] carries rows to stitch."""

def gather(
    response: _Prefill,
    choice: int = 0,
    *,
    field: str = "routed_experts",
    root: Optional[_Path] = None,
    allow: Optional[Sequence[_Path]] = None,
    row_shape: Optional[Tuple[int, int]] = None,
) -> Tuple[int, npt.NDArray[Any]]:
    """(start, rows): the rows of positions [start, start + len(rows)) of one
    choice, shape (positions, *row_shape), in the segments' dtype. For
    routed_experts, wherever the table of places() puts them, whatever their
    kind; SGLang's rows placed with ``row_shape=(layers, top_k)`` (``choice``
    is then the item of a batch array)."""

def places() -> List[Dict[str, Optional[str]]]:
    """The table of where rows and their counts sit, in its order: one dict
    per place, ``holder`` ("choice", "choice_member" or "member"),
    ``member`` (the key of the object that holds the place; None for a
    choice), ``key``, and ``holds`` ("inline", "by_handle", "sglang" or
    "count")."""

def check(
    response: _Prefill,
    *,
    root: Optional[_Path] = None,
    allow: Optional[Sequence[_Path]] = None,
    row_shape: Optional[Tuple[int, int]] = None,
) -> List[Dict[str, Any]]:
    """One dict per choice and field: choice, field, segments, coverage, gaps,
    overlaps, dtype, shape, problems, ok. SGLang's rows get one dict per item
    (``choice`` is the item), placed with ``row_shape=(layers, top_k)``;
    without it, a problem says they cannot be placed."""

def check_rows(
    response: _Prefill,
    *,
    root: Optional[_Path] = None,
    allow: Optional[Sequence[_Path]] = None,
    row_shape: Optional[Tuple[int, int]] = None,
    experts: Optional[int] = None,
    limit: int = 100,
) -> Dict[str, Any]:
    """Rows no engine produces, in every choice: an expert twice in one
    layer's top-k, an id at or beyond ``experts`` (or negative), a row of
    zeros with top_k > 1. Returns ``{"rows", "counts": {"duplicate",
    "out-of-range", "negative", "zero-row"}, "findings": [{"choice",
    "position", "layer", "kind", "id", "experts", "ids"}], "unreadable":
    [{"choice", "error"}]}``: the first ``limit`` findings, all counted.
    SGLang's rows are read with ``row_shape=(layers, top_k)``."""

def assemble_episode(
    turns: Iterable[Dict[str, Any]],
    *,
    prefer: str = "earliest",
    row_shape: Optional[Tuple[int, int]] = None,
    allow: Sequence[_Path] = (),
    root: _Path = ".",
) -> Dict[str, Any]:
    """The rows of a multi-turn episode, one per position of its token
    sequence, assembled from its turns' responses by one rule (the Rust
    library's ``pd_stitch::episode``; README "The episode").

    Each turn is a dict: ``"prompt_token_ids"`` (all of the prompt, the
    earlier turns' tokens included), ``"completion_token_ids"`` (choice 0's),
    ``"start"`` (the start it asked the engine for, e.g. vLLM's
    ``routed_experts_prompt_start``; None or absent: 0), and its rows as
    ``"response"`` (dict, bytes, bytearray or str: stitched by a router, or a
    colocated server's; choice 0, or an SGLang batch's output 0) or as a P/D
    pair, ``"prefill"`` and ``"decode"`` (the two unstitched responses: the
    prefill's rows win where they overlap, the prompt's last position, as
    stitching takes them). Other keys are ignored. Rows are placed from the
    turn's token counts and the start it asked for, never from their count
    alone; a turn continues the earlier turn sharing its longest token prefix.

    ``prefer="earliest"`` keeps at each position the first row computed for it
    (the boundary, the last token of the turn continued, takes the next
    turn's); ``"latest"`` the last turn's. Rows by handle are read only
    inside ``root`` and the ``allow`` directories; SGLang's rows need
    ``row_shape=(layers, top_k)``. The GIL is released while turns are read
    and assembled; the inputs are not modified.

    Returns a dict:

    - ``"rows"``: ``(len, layers, top_k)`` (``(len, *row_shape)``), the widest
      dtype of the turns' as NumPy promotes them; the last position's row is
      zeros (its token was never fed back);
    - ``"has_row"``: bool ``(len,)``, False at the last position only;
    - ``"turn"``: int32 ``(len,)``, the turn each row came from, -1 where none;
    - ``"from_decode"``: bool ``(len,)``, the row was a decode's (a P/D pair's
      decode, or a whole response's rows from the prompt's end on);
    - ``"overlaps"``: one dict per turn, ``{"compared": int, "differed":
      [positions]}``: where its rows met rows already there, and where they
      differed (not an error: re-prefill and prefix caching make them
      differ);
    - ``"len"``: the number of positions, the last turn's prompt and
      completion.

    Raises ``StitchError`` naming the turn: an episode's check (``.kind`` one
    of NoCompletion, ExtendsNoTurn, StartBeyondPrefix, NoPieces,
    PieceLength, Counts, StartNotAsked, PieceRowShape, PieceDtype, Unsized,
    RowGap, NoTurns; ``.location`` None), or a response that cannot be read
    (``.kind`` the reader's, e.g. Base64, Json, NoRows, Outside,
    RowShapeNeeded; ``.location`` the JSON value at fault, if any), e.g.
    ``"turn 2: response choices[0].routed_experts.data: invalid base64 ..."``
    or ``"turn 1 (decode): ..."``. A turn that is not a dict is a
    ``TypeError``; a dict without its tokens or rows, a ``ValueError``."""

class StreamStitcher:
    """Stitches one decode stream (server-sent events) with the prefill's
    whole response: every event goes out as soon as it is complete, byte for
    byte, except the one that carries rows, whose data is merged as
    `merge_routed_experts_for_pd` merges it (SGLang's rows read with
    `row_shape=(layers, top_k)`). The GIL is released while a chunk is
    stitched. Made with `prefill=None`, it awaits the prefill: events pass at
    once, the rows event and what follows wait for `give_prefill`."""

    def __init__(
        self,
        prefill: Optional[_Prefill] = None,
        *,
        fields: Optional[Iterable[str]] = None,
        strict: bool = False,
        row_shape: Optional[Tuple[int, int]] = None,
    ) -> None: ...
    def feed(self, chunk: bytes) -> bytes:
        """The bytes that can be sent now (possibly b""). Raises StitchError
        (kinds StreamEvent, StreamRowsRepeated, StreamUnstitched,
        StreamClosed); when events before the failing one in the same chunk
        were stitched, they are returned and the next call raises. What was
        returned before is a prefix of the stitched stream."""
    def finish(self) -> bytes:
        """Ends the stream: the bytes of an unfinished event without rows.
        Raises StitchError (StreamUnfinished, StreamPrefillMissing when no
        prefill was ever given, StreamClosed)."""
    def give_prefill(self, prefill: _Prefill) -> bytes:
        """Gives the prefill's response to a stitcher made without one; the
        bytes that waited for it. Raises StitchError (Json,
        StreamPrefillRepeated, or feed's errors met by what waited)."""
    @property
    def has_prefill(self) -> bool:
        """Whether the prefill's response has been given."""
    @property
    def buffered(self) -> int:
        """Bytes held: those of the event being read, and while the prefill
        is awaited, those from the rows event on."""
