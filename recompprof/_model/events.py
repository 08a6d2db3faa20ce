"""The event model: one typed record per thing that happened on the compile path.

Every line of the event log is one of these models serialised as JSON, with ``schema_version`` and
``kind`` on every line. Readers ignore unknown fields, so fields can be added without a version bump;
removing or changing the meaning of one needs a new ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# The closed vocabularies are defined once, in a module that imports nothing heavy (the lake derives
# its columns from them there); re-exported here, where the model's users have always found them.
from recompprof._model.vocabulary import (
    CACHE_RESULTS as CACHE_RESULTS,
    CACHES as CACHES,
    CATEGORIES as CATEGORIES,
    LIMITS as LIMITS,
    OUTCOMES as OUTCOMES,
    PHASES as PHASES,
    CacheName as CacheName,
    CacheResult as CacheResult,
    Category as Category,
    LimitName as LimitName,
    Outcome as Outcome,
    Phase as Phase,
)

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})


# Bounds on free text so one pathological reason cannot bloat memory, the log or a span.
MAX_TEXT = 4096
MAX_SUBJECT = 200


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def short_path(file: str) -> str:
    """A file's last two path parts: what labels and frame keys show, so runs from two checkouts compare."""
    return "/".join(file.replace("\\", "/").split("/")[-2:])


class Frame(_Model):
    """One frame: a compiled code object, seen through the class of the instance it ran as a method of.

    ``name``, ``file`` and ``line`` are the user's function as written (``AdamW.step`` at the line of
    ``def step``); ``code_file``/``code_line`` are the compiled code object's (a decorator's wrapper, say),
    the one torch counts cache entries and limits on; ``owner`` is the name of the instance's class
    (``AdamW``), None for a plain function. See docs/frames.md.
    """

    name: str
    file: str
    line: int
    code_file: str | None = None  # None only in logs written before frames carried their code
    code_line: int | None = None
    owner: str | None = None

    @property
    def key(self) -> str:
        """The frame's identity: its code object and owner, never its display name (the label, for old logs)."""
        if self.code_file is None:
            return self.label
        owner = f" {self.owner}" if self.owner else ""
        return f"{short_path(self.code_file)}:{self.code_line}{owner}"

    @property
    def label(self) -> str:
        """``function (dir/file:line)``; a code object that is not the function itself (a decorator's
        wrapper) adds ``via dir/file:line`` of its code, so it never shares a label with the function."""
        label = f"{self.name} ({short_path(self.file)}:{self.line})"
        if self.code_file is not None and (self.code_file, self.code_line) != (
            self.file,
            self.line,
        ):
            label += f" via {short_path(self.code_file)}:{self.code_line}"
        return label


class Reason(_Model):
    """One guard failure: the text torch gave, parsed into a category and a bounded subject."""

    text: str = Field(max_length=MAX_TEXT)
    category: Category
    subject: str = Field(default="", max_length=MAX_SUBJECT)
    explains_change: bool = False
    entry: str | None = None  # compile id of the cache entry that failed, e.g. "0/2"
    # Added field: the subject as torch names it when the function a decorator's wrapper calls is compiled
    # itself (``L['input_ids']`` for the wrapper's ``L['kwargs']['input_ids']``), where the wrapper provably
    # passes it on unchanged (live only; docs/categories.md). Presentation: ``subject`` stays the identity.
    parameter: str | None = Field(default=None, max_length=MAX_SUBJECT)


class _Event(_Model):
    schema_version: int = SCHEMA_VERSION
    time: float
    rank: int = 0
    step: int | None = None


class SessionStart(_Event):
    kind: Literal["session_start"] = "session_start"
    run_id: str
    local_rank: int = 0
    world_size: int = 1
    host: str
    pid: int
    versions: dict[str, str]
    mode: Literal["monitor", "profile"]
    # None: unlimited (profile mode), or unknown (a trace without dynamo_config)
    recompile_limit: int | None = None
    warmup_steps: int = 0
    signals: dict[str, bool] = {}
    profile_mechanism: str | None = None  # profile mode: "evict" (limit held) or "unlimited"
    launcher: str = "single"
    restart_count: int = 0
    # The job this session belongs to: torch.compiler.config.job_id (TORCH_COMPILE_JOB_ID), else the
    # launcher's run id, else the run id; and the free labels of the ``labels`` setting (team, model, ...).
    job: str | None = Field(default=None, max_length=MAX_SUBJECT)
    labels: dict[str, str] = {}


class Compile(_Event):
    """One compile of one frame (forward, or a lazily compiled backward)."""

    kind: Literal["compile"] = "compile"
    frame: Frame
    compile_id: str
    generation: int | None = None  # resets seen before it, as in its compile_start
    is_recompile: bool
    cache_entries: int | None = None
    outcome: Outcome = "ok"
    fail_type: str | None = None
    fail_reason: str | None = Field(default=None, max_length=MAX_TEXT)
    reasons: list[Reason] = []
    # Reasons past the per-event cap (one per failing cache entry: a frame with N variants fails N
    # times per recompile), counted by category so totals stay exact while the event stays small.
    reasons_omitted: dict[Category, int] = {}
    start_time: float | None = None
    duration: float = 0.0
    phases: dict[Phase, float] = {}
    guard_count: int | None = None
    graph_op_count: int | None = None
    graph_breaks: int = 0
    cache: Literal["hit", "miss"] | None = None
    backward: bool = False
    steady_state: bool = False
    # Set where the steady-state verdict cannot be known (``steady_state`` is then false and counts
    # nothing): what is unknown ("instance of L['self'].layer_idx": a trace names no instance, so a new
    # block and one block's value changing read alike past the bound). docs/steady-state.md.
    steady_state_unknown: str | None = Field(default=None, max_length=MAX_TEXT)
    # Set on a recompile torch's automatic dynamic caused: the first change of a tensor dim or an int/float
    # argument, after which it is dynamic ("dim 0 of L['x']", "value of L['lr']"). A one-time warm-up: never
    # steady state (docs/steady-state.md).
    automatic_dynamic: str | None = Field(default=None, max_length=MAX_SUBJECT)
    # Set on a recompile whose scalar the compile's own installed guards hold at its new value ("value of
    # G['cfg'].ls"): torch tried it dynamic, the traced code needed it constant; every new value recompiles.
    specialised: str | None = Field(default=None, max_length=MAX_SUBJECT)
    # The user's call site of a recompile: innermost-last "file:line in function" lines (bounded, redactable).
    call_site: list[str] = []
    # Compile-cache lookups of this compile, by cache and result, as torch counted them.
    cache_lookups: dict[CacheName, dict[CacheResult, int]] = {}
    cache_seconds_saved: float | None = None  # compile time a cache hit saved, as torch reports it
    # Profile mode with dynamo_profiler: Dynamo tracing seconds (exclusive) per user function label.
    trace_seconds_by_function: dict[str, float] = {}
    # Fingerprint of the guards of the cache entry this compile installed: a frame needs as many compiled
    # variants as it has distinct guard sets (profile mode retraces a variant it evicted: same guard set).
    guard_set: str | None = None
    # False: torch traced the frame and installed nothing for it (it skipped the frame, which runs eagerly),
    # so this is no compile; its seconds are still compile time.
    installed_code: bool = True
    # Why CUDA graphs were not used for this compile (reduce-overhead / cudagraphs backend): a category
    # of recompprof._model.cudagraphs.CUDAGRAPH_SKIPS and torch's text (dropped under redact: it holds a stack).
    cudagraph_skip: str | None = None
    cudagraph_skip_reason: str | None = Field(default=None, max_length=MAX_TEXT)
    # W3C trace id (32 hex digits) of the trace an exporter sends for this compile (the duration exemplar).
    trace_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    # More of torch's record (None: this torch release, or an older log, does not say): the fleet
    # history's dimensions (docs/history.md).
    graph_node_count: int | None = None
    graph_input_count: int | None = None
    shape_env_guard_count: int | None = None  # guards on symbolic shapes
    accumulated_cache_size: int | None = (
        None  # compiles of the code object across its cache entries
    )
    param_numel: int | None = None  # parameters of the compiled module(s), elements
    param_bytes: int | None = None
    triton_compile_s: float | None = None  # of duration: compiling Triton kernels
    restart_count: int | None = None  # times Dynamo restarted tracing the frame within this compile
    # sha256 (first 16 hex digits) of torch's Dynamo / Inductor config JSON for this compile
    dynamo_config_sha: str | None = Field(default=None, max_length=64)
    inductor_config_sha: str | None = Field(default=None, max_length=64)
    # Seconds torch measured evaluating the installed entry's guards once, at the end of the compile
    # (its guard_latency_us; forward compiles only).
    guard_latency_s: float | None = None
    # The lookups of ``cache_lookups`` the remote cache answered (the rest were local); None where the
    # torch release does not report the split, {} where no remote cache was consulted.
    remote_cache_lookups: dict[CacheName, dict[CacheResult, int]] | None = None


class CompileStart(_Event):
    """A compile began: what is known then. Its finished ``compile`` has the same ``(rank, generation,
    compile_id)``; a start without one is a compile that was still running when the log ended."""

    kind: Literal["compile_start"] = "compile_start"
    frame: Frame
    compile_id: str
    # How many torch._dynamo.reset() calls the session had seen (absent: none). Compile ids restart at "0/0"
    # after a reset, so a compile is named by (generation, compile_id).
    generation: int | None = None
    is_recompile: bool
    # the guard failure that triggered a recompile (None for a first compile)
    reason: Reason | None = None
    # A lazily compiled backward (torch compiles it at the first .backward(), after its forward's compile
    # ended): it shares its forward's compile id and frame, and its ``compile`` has ``backward`` too.
    backward: bool = False
    # W3C trace id its compile will carry as ``Compile.trace_id`` (set only while an exporter sends traces):
    # the OpenTelemetry exporter opens the compile's root span under it now.
    trace_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")


class Running(_Model):
    """The compile still running when a session ended."""

    frame: Frame
    compile_id: str
    generation: int | None = None  # as in its compile_start
    started: float
    seconds: float
    reason: Reason | None = None
    # as in its compile_start (torch before 2.6 gives no reason at the start)
    is_recompile: bool = False
    backward: bool = False  # as in its compile_start: a lazily compiled backward


class CompileRunning(_Event):
    """A compile is still running: written while a compile runs long (after ``HEARTBEAT_SECONDS``, then each
    ``HEARTBEAT_SECONDS``), so a log whose process was killed outright still says how long it compiled."""

    kind: Literal["compile_running"] = "compile_running"
    compile_id: str
    generation: int | None = None  # as in its compile_start
    seconds: float  # how long it had run when this was written
    backward: bool = False  # as in its compile_start: a lazily compiled backward


HEARTBEAT_SECONDS = 10.0


class GraphBreak(_Event):
    kind: Literal["graph_break"] = "graph_break"
    frame: Frame | None = None
    compile_id: str | None = None
    generation: int | None = None  # as in its compile's
    reason: str = Field(
        max_length=MAX_TEXT
    )  # torch's graph-break type, e.g. "Failed to trace builtin operator"
    user_location: str | None = None  # file:line of the user code that broke the graph
    explanation: str | None = Field(default=None, max_length=MAX_TEXT)
    hints: list[str] = []
    # torch could not resume after the break: the whole frame ran eagerly
    skipped_frame: bool = False
    count: int = 1


class RecompileLimitHit(_Event):
    kind: Literal["recompile_limit_hit"] = "recompile_limit_hit"
    frame: Frame
    compile_id: str | None = None
    generation: int | None = None  # as in its compile's
    limit: LimitName
    value: int | None
    last_reason: Reason | None = None


class SignalChange(_Event):
    """A signal went dark (or came back) while the session ran: capture of that signal is incomplete."""

    kind: Literal["signal"] = "signal"
    signal: str
    live: bool
    reason: str = Field(default="", max_length=MAX_TEXT)


class SessionEnd(_Event):
    kind: Literal["session_end"] = "session_end"
    totals: dict[str, float]
    events_dropped: dict[str, int] = {}
    internal_errors: dict[str, int] = {}
    signals_off: dict[str, str] = {}  # signals that were off or went dark, with why
    compiling: Running | None = None  # the compile that was running when the session ended


Event = Annotated[
    SessionStart
    | Compile
    | CompileStart
    | CompileRunning
    | GraphBreak
    | RecompileLimitHit
    | SignalChange
    | SessionEnd,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
KINDS: tuple[str, ...] = (
    "session_start",
    "compile",
    "compile_start",
    "compile_running",
    "graph_break",
    "recompile_limit_hit",
    "signal",
    "session_end",
)


def to_json_bytes(event: _Event) -> bytes:
    """One event as one compact JSON line (no trailing newline), as the serialiser's UTF-8 bytes: the
    event log writes these as they are, with no decoding to text and encoding back."""
    return event.__pydantic_serializer__.to_json(event, exclude_none=True)


def to_json(event: _Event) -> str:
    """One event as one compact JSON line (no trailing newline)."""
    return to_json_bytes(event).decode()
