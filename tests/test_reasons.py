"""Guard-failure reason parsing: recorded torch 2.13 strings, constructed older formats, fuzzing, redaction."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from scenarios import SCENARIOS, run_scenario

from recompprof._model.events import MAX_SUBJECT, MAX_TEXT, Reason
from recompprof._model.fix_hints import FIX_HINTS
from recompprof._model.reasons import (
    parse_guard_failure,
    parse_recompiles_log,
    user_location,
)
from recompprof._model.vocabulary import CATEGORIES
from recompprof._torch import versions
from recompprof._torch.versions import torch_info

FIXTURES = Path(__file__).parent / "fixtures" / "reasons"
RECORDED: dict[str, Any] = json.loads((FIXTURES / "torch-2.13.json").read_text())
# Every recorded version (record.py run in each version's venv by scripts/compat.sh).
RECORDINGS: dict[str, Any] = {
    p.stem: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("torch-*.json"))
}
CONSTRUCTED: dict[str, Any] = json.loads((FIXTURES / "constructed.json").read_text())
SECRET = "s3cr3t-token"


def _torch_strings(record: dict[str, Any]) -> list[str]:
    """The per-entry strings torch reported: guard_failures, or the log where torch skips guard_failures."""
    if record["in_guard_failures"]:
        return list(record["guard_failures"])
    return [entry for message in record["log"] for entry in parse_recompiles_log(message)]


def _assert_well_formed(reasons: list[Reason]) -> None:
    assert isinstance(reasons, list)
    for reason in reasons:
        assert isinstance(reason, Reason)
        assert reason.category in CATEGORIES
        assert len(reason.text) <= MAX_TEXT and len(reason.subject) <= MAX_SUBJECT
        reason.model_dump_json()  # serialisable: no lone surrogates reach a sink


@pytest.mark.parametrize("name", sorted(RECORDED["scenarios"]))
def test_recorded_213_strings_classify_to_scenario_category(name: str) -> None:
    """Every string torch 2.13 recorded for a scenario parses to that scenario's category from the text alone
    (where only the live objects tell, what ingest can say) and its subject, with its compile id."""
    record = RECORDED["scenarios"][name]
    strings = _torch_strings(record)
    assert strings, "the recording holds no reason for this scenario"
    category = SCENARIOS[name].from_text((2, 13), same_process=False)
    assert record.get("text_category", record["category"]) == category
    for text in strings:
        reasons = parse_guard_failure(text)
        assert [(r.category, r.subject) for r in reasons] == [(category, record["subject"])], text
        assert reasons[0].entry is not None and re.fullmatch(r"\d+/\d+", reasons[0].entry)
        assert "User stack trace" not in reasons[0].text and not reasons[0].text.startswith(
            reasons[0].entry
        )


@pytest.mark.parametrize(
    ("recording", "name"),
    [(v, n) for v, r in RECORDINGS.items() if v != "torch-2.13" for n in sorted(r["scenarios"])],
)
def test_recorded_categories_equal_across_versions(recording: str, name: str) -> None:
    """A scenario's reason strings recorded on another torch parse to the same category as on 2.13 (same subject
    where that torch names it), however the text is formatted; or to the degraded outcome the scenario declares
    (from the text alone: what ingest says where only the live objects tell)."""
    record = RECORDINGS[recording]["scenarios"][name]
    scenario = SCENARIOS[name]
    assert record["category"] == RECORDED["scenarios"][name]["category"] == scenario.category
    older = scenario.on(versions.parse(RECORDINGS[recording]["torch"]))
    strings = _torch_strings(record)
    if older is not None and not older.logged:  # torch did not report this recompile at all
        assert record["observed_recompiles"] == 0 and strings == []
        return
    assert record["observed_recompiles"] == (
        older.recompiles if older and older.recompiles is not None else scenario.recompiles
    )
    category = scenario.from_text(
        versions.parse(RECORDINGS[recording]["torch"]), same_process=False
    )
    reasons = [r for text in strings for r in parse_guard_failure(text)]
    assert reasons and {r.category for r in reasons} == {category}, strings
    subject = older.subject if older and older.subject is not None else scenario.subject
    if subject and category in (scenario.category, scenario.text_category):
        assert {r.subject for r in reasons} == {subject}, strings


@pytest.mark.parametrize(
    "name", sorted(n for n, r in RECORDED["scenarios"].items() if r["in_guard_failures"])
)
def test_recorded_log_splits_into_the_guard_failures_strings(name: str) -> None:
    """Splitting the recorded TORCH_LOGS=recompiles messages gives back exactly the strings torch put in guard_failures."""
    record = RECORDED["scenarios"][name]
    assert [e for message in record["log"] for e in parse_recompiles_log(message)] == record[
        "guard_failures"
    ]


@pytest.mark.parametrize("name", sorted(RECORDED["verbose"]))
def test_recorded_verbose_log_entries_classify(name: str) -> None:
    """recompiles_verbose messages split into entries whose "; "-joined reasons all classify to the scenario's category."""
    record = RECORDED["verbose"][name]
    entries = [e for message in record["log"] for e in parse_recompiles_log(message)]
    assert len(entries) == len(_torch_strings(record))
    reasons = [r for entry in entries for r in parse_guard_failure(entry)]
    assert reasons and {r.category for r in reasons} == {record["category"]}
    if name == "two_guards":
        assert [r.subject for r in reasons] == ["L['x'].size()[0]", "L['x'].size()[1]"]


def test_recorded_user_location_points_at_the_scenario_source() -> None:
    """A recorded reason with a User stack trace block yields the innermost frame as file:line in tests/scenarios.py."""
    with_stack = [
        t
        for r in RECORDED["scenarios"].values()
        for t in r["guard_failures"]
        if "\nUser stack trace:" in t
    ]
    assert with_stack
    for text in with_stack:
        location = user_location(text)
        assert location is not None and re.search(r"tests/scenarios\.py:\d+$", location), location
    assert user_location("0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3") is None


@pytest.mark.parametrize("fixture", CONSTRUCTED["reasons"], ids=lambda f: f["id"])
def test_constructed_older_formats_parse(fixture: dict[str, Any]) -> None:
    """Hand-built strings in the 2.4, 2.5-2.10 and 2.11+ formats parse to the expected entry, subject and category."""
    reasons = parse_guard_failure(fixture["text"])
    assert [
        {"category": r.category, "subject": r.subject, "entry": r.entry} for r in reasons
    ] == fixture["expect"]
    assert user_location(fixture["text"]) == fixture["user_location"]
    assert all(
        "User stack trace" not in r.text and not re.match(r"!?\d+/\d+", r.text) for r in reasons
    )


@pytest.mark.parametrize("fixture", CONSTRUCTED["logs"], ids=lambda f: f["id"])
def test_constructed_logs_split_into_entries(fixture: dict[str, Any]) -> None:
    """TORCH_LOGS recompiles and recompiles_verbose messages, also with stderr prefixes, split into per-entry strings."""
    assert parse_recompiles_log(fixture["message"]) == fixture["entries"]


def test_fix_hints_cover_every_category() -> None:
    """FIX_HINTS has exactly one non-empty, one-line hint per category of the closed vocabulary."""
    assert set(FIX_HINTS) == set(CATEGORIES)
    assert all(hint.strip() and "\n" not in hint for hint in FIX_HINTS.values())


# Fragments of real reason syntax, so the fuzzer reaches the classifier's branches, not only "other".
_FRAGMENTS = [
    "0/1: ",
    "!0/0/1: ",
    "tensor 'x' ",
    "size mismatch at index 0. ",
    "dispatch key set mismatch. ",
    "DispatchKeySet(CPU, ",
    "___check_obj_id(",
    "___check_type_id(",
    "L['x']",
    "G['y']",
    "self.",
    "training",
    ".size()[0]",
    " == ",
    " is ",
    "len(",
    "list(dict.keys(",
    ")",
    "(",
    "[",
    "]",
    "'",
    '"',
    "; ",
    "\n",
    "  # ",
    "User stack trace:\n",
    '  File "a.py", line ',
    "GLOBAL_STATE changed: ",
    "grad_mode ",
    "autocast",
    "Eq(s0, ",
    "<=",
    "Duplicate tensors found: ",
    "Cache line invalidated because ",
    " got deallocated",
    "BACKEND_MATCH",
    "_dynamo_dynamic_indices",
    "param_groups",
    "- ",
    "guard 0 failures:",
    "\x00",
    "\ud800",
    "7",
    "expected type of '",
    "' to be a tensor type, ' but found ",
    "' to be <class 'torch.Tensor'>, but found ",
    " is None",
    " is not None",
    ", type=<Reduction.MEAN: 'mean'>",
    "kwargs['m']",
    ".is_updated[0]",
]


def _check_never_raises(text: str) -> None:
    for redact in (False, True):
        _assert_well_formed(parse_guard_failure(text, redact=redact))
    location = user_location(text)
    assert location is None or isinstance(location, str)
    assert all(isinstance(entry, str) for entry in parse_recompiles_log(text))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    """On arbitrary unicode text the parsers never raise and every Reason is in the vocabulary and within the bounds."""
    _check_never_raises(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_never_raises_on_binary_ish_text(data: bytes) -> None:
    """On bytes decoded loosely (control characters, surrogate escapes) the parsers never raise and stay within bounds."""
    _check_never_raises(data.decode("latin-1"))
    _check_never_raises(data.decode("utf-8", "surrogateescape"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=40))
def test_never_raises_on_reason_like_text(parts: list[str]) -> None:
    """On text stitched from real reason syntax the parsers never raise and every Reason stays within bounds."""
    _check_never_raises("".join(parts))


@pytest.mark.parametrize(
    "unit",
    [
        "a",
        "\n",
        " ",
        "(",
        "tensor '",
        "L['x'].",
        "; ",
        "0/0: ",
        "- ",
        "\x00",
        "[",
        " # x; ",
        "expected type of '",
        ".a[0]",
    ],
)
def test_never_raises_on_huge_text(unit: str) -> None:
    """A multi-megabyte reason of a repeated pattern parses without raising, within bounds, in linear time."""
    _check_never_raises(unit * (2_000_000 // len(unit)))


_SECRET_REASONS = [
    f"0/0: token == '{SECRET}'                              # if token == '{SECRET}':  # t.py:3 in f",
    f"tensor 'x' size mismatch at index 0. expected 2, actual 3  # {SECRET}",
    f"0/1: list(dict.keys(batch))[0] == '{SECRET}'",
    f"0/0: ___check_obj_id(mode, 1401), type=<class '{SECRET}'>  # y = {SECRET}",
    f"0/0: G['KEY'] == '{SECRET}'\nUser stack trace:\n  File \"t.py\", line 3, in f\n    key = '{SECRET}'",
    f"0/0: L['n'] == 2; G['KEY'] == '{SECRET}'",
    f"0/0: an unknown future guard mentioning {SECRET}",
    f"{SECRET}",
    f"0/0: Eq(s0, 3)  # {SECRET}",
    f"0/0: GLOBAL_STATE changed: grad_mode  # {SECRET}",
]


@pytest.mark.parametrize("text", _SECRET_REASONS)
def test_redaction_drops_literal_values(text: str) -> None:
    """With redact=True a guarded literal planted in the reason never appears in any Reason's text or subject."""
    reasons = parse_guard_failure(text, redact=True)
    assert reasons and all(SECRET not in r.text and SECRET not in r.subject for r in reasons)
    assert all(r.category in CATEGORIES for r in reasons)


def test_redaction_keeps_subject_and_comparison() -> None:
    """Redacted text still names the subject and the comparison, e.g. "G['SCALE'] == <redacted>"."""
    [reason] = parse_guard_failure(
        "0/0: G['SCALE'] == 1.0   # return x * SCALE  # t.py:3 in f", redact=True
    )
    assert (
        reason.text == "G['SCALE'] == <redacted>"
        and reason.category == "global"
        and reason.entry == "0/0"
    )


@pytest.mark.torch_compat
def test_redaction_on_a_live_string_guard() -> None:
    """A real torch 2.13 guard on a string argument holding a secret is redacted to its subject."""
    import torch

    def secret_fn(x: torch.Tensor, token: str) -> torch.Tensor:
        return x + 1 if token == SECRET else x - 1

    from torch._dynamo.utils import guard_failures

    torch._dynamo.reset()
    compiled = torch.compile(secret_fn, backend="eager")
    compiled(torch.ones(2), SECRET)
    compiled(torch.ones(2), "other")
    [text] = [
        t for code, texts in guard_failures.items() if code.co_name == "secret_fn" for t in texts
    ]
    assert SECRET in text
    [reason] = parse_guard_failure(text, redact=True)
    assert (
        SECRET not in reason.text
        and reason.subject == "L['token']"
        and reason.category == "python_constant"
    )


@pytest.mark.torch_compat
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_live_scenario_matches_declaration(name: str) -> None:
    """Each scenario run on the installed torch recompiles as often as declared, for its declared category and subject."""
    scenario = SCENARIOS[name]
    observed = run_scenario(scenario)
    older = scenario.on(
        torch_info().major_minor
    )  # older torch reports less: what it yields there, and why
    recompiles = older.recompiles if older and older.recompiles is not None else scenario.recompiles
    assert observed.recompiles == (recompiles if not older or older.logged else 0)
    if observed.recompiles == 0:
        assert older is not None and observed.guard_failures == []
        return
    category = scenario.from_text(torch_info().major_minor, same_process=True)
    if scenario.in_guard_failures:
        strings = observed.guard_failures
        if not older:  # where torch writes no text (older backend guards) its log lists no entry
            assert [
                e for message in observed.log_messages for e in parse_recompiles_log(message)
            ] == strings
    else:
        assert observed.guard_failures == []
        strings = [e for message in observed.log_messages for e in parse_recompiles_log(message)]
    assert strings
    reasons = [r for text in strings for r in parse_guard_failure(text)]
    assert {r.category for r in reasons} == {category}
    subject = older.subject if older and older.subject is not None else scenario.subject
    if subject and category in (
        scenario.category,
        scenario.text_category,
    ):  # "" where some torch versions do not name it
        assert {r.subject for r in reasons} == {subject}


# Identity and type guards, classified by what the guarded object is (issue: type reasons were misfiled).
@pytest.mark.parametrize(
    ("text", "category", "subject"),
    [
        (
            "0/0: ___check_obj_id(type(foo).__call__.__code__, 140011), type=<class 'code'>",
            "object_identity",
            "type(L['foo']).__call__.__code__",
        ),
        (
            "0/0: expected type of 'b' to be a tensor type, ' but found <class 'int'>",
            "type",
            "L['b']",
        ),
        (
            "0/0: ___check_obj_id(self.training, 9786592), type=<class 'bool'>",
            "module_attribute",
            "L['self'].training",
        ),
        ("0/0: ___check_obj_id(G['FLAG'], 9786592), type=<class 'bool'>", "global", "G['FLAG']"),
        ("0/0: ___check_obj_id(n, 9786592), type=<class 'int'>", "python_constant", "L['n']"),
        # an identity guard on None fails only when the argument is no longer None: its kind changed
        ("0/0: ___check_obj_id(mask, 9786592), type=<class 'NoneType'>", "type", "L['mask']"),
        ("0/0: ___check_obj_id(fn, 140011), type=<class 'function'>", "object_identity", "L['fn']"),
        (
            "0/0: ___check_obj_id(self.act, 140011), type=<class 'torch.nn.modules.activation.GELU'>",
            "module_attribute",
            "L['self'].act",
        ),
        (
            "0/0: ___check_obj_id(model, 140011), type=<class 'torch.nn.modules.linear.Linear'>",
            "object_identity",
            "L['model']",
        ),
        # torch 2.4-2.8: no annotation; the subject's shape decides
        (
            "___check_obj_id(L['self'].training, 140662072962816)",
            "module_attribute",
            "L['self'].training",
        ),
        (
            "0/0: ___check_obj_id(L['fn'].__code__, 140659052221568)",
            "object_identity",
            "L['fn'].__code__",
        ),
        ("0/0: ___check_obj_id(G['helper'], 140659052221568)", "global", "G['helper']"),
    ],
)
def test_identity_and_type_guards_classified_by_the_object(
    text: str, category: str, subject: str
) -> None:
    """An identity guard is classified by what the guarded object is (type annotation, else the subject's shape),
    never as symbolic_shape because of the '<' in '<class ...>'; a tensor-type expectation is a type change."""
    [reason] = parse_guard_failure(text)
    assert (reason.category, reason.subject) == (category, subject)


def test_identity_guard_on_a_singleton_id_resolves_in_process() -> None:
    """On 2.6-style text (no annotation) the id of True/False/None/a small int names the value in this process:
    a bool argument is a python_constant, a bool module flag a module_attribute, an unknown id an object_identity."""
    assert [
        (r.category, r.subject)
        for r in parse_guard_failure(f"0/0: ___check_obj_id(L['flag'], {id(True)})")
    ] == [("python_constant", "L['flag']")]
    assert (
        parse_guard_failure(f"0/0: ___check_obj_id(L['self'].use_bias, {id(False)})")[0].category
        == "module_attribute"
    )
    assert (
        parse_guard_failure(f"0/0: ___check_obj_id(G['MODE'], {id(None)})")[0].category == "global"
    )
    assert (
        parse_guard_failure("0/0: ___check_obj_id(L['flag'], 12345)")[0].category
        == "object_identity"
    )


def test_kinds_resolved_in_process_decide_identity_guards() -> None:
    """kinds (subject -> type name of the live object) decides python_constant / global / module_attribute /
    object_identity / type, the cache keeps answers for different kinds apart, and any mapping type is accepted."""
    text = "0/0: ___check_obj_id(L['x'], 140011)"
    assert parse_guard_failure(text)[0].category == "object_identity"
    assert parse_guard_failure(text, kinds={"L['x']": "bool"})[0].category == "python_constant"
    assert parse_guard_failure(text, kinds={"L['x']": "function"})[0].category == "object_identity"
    assert parse_guard_failure(text, kinds={"L['other']": "bool"})[0].category == "object_identity"
    assert (
        parse_guard_failure("0/0: ___check_obj_id(G['x'], 1)", kinds={"G['x']": "float"})[
            0
        ].category
        == "global"
    )
    assert parse_guard_failure(
        "0/0: ___check_obj_id(L['self'].act, 1)", kinds={"L['self'].act": "GELU"}
    )[0].category == ("module_attribute")
    assert parse_guard_failure(
        "0/0: ___check_obj_id(L['self'].act, 1)", kinds={"L['self'].act": "function"}
    )[0].category == ("object_identity")
    # the kind changed between calls: None at compile time, a tensor now
    none_then = "0/0: ___check_obj_id(mask, 9786592), type=<class 'NoneType'>"
    assert [
        (r.category, r.subject)
        for r in parse_guard_failure(none_then, kinds={"L['mask']": "Tensor"})
    ] == [("type", "L['mask']")]
    assert (
        parse_guard_failure(none_then, kinds={"L['mask']": "NoneType"})[0].category
        == "python_constant"
    )
    assert parse_guard_failure(none_then)[0].category == "type"


def test_parser_errors_go_through_the_internal_error_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the parser raises under tests and, in production, is counted as an internal error while the
    parser still returns an 'other' reason, None, or [] (it never raises into torch)."""
    from recompprof import _internal
    from recompprof._model import reasons
    from recompprof.testing import raise_internal_errors

    def broken(*args: object) -> object:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(reasons, "_classify", broken)
    monkeypatch.setattr(reasons, "_log_item", broken)
    monkeypatch.setattr(
        reasons, "_FILE_LINE", type("Broken", (), {"findall": staticmethod(broken)})()
    )
    text = '0/0: a never-seen reason text for this test\nUser stack trace:\n  File "a.py", line 3, in f'
    with pytest.raises(RuntimeError, match="parser bug"):
        parse_guard_failure(text)
    with pytest.raises(RuntimeError, match="parser bug"):
        user_location(text)
    with pytest.raises(RuntimeError, match="parser bug"):
        parse_recompiles_log("Recompiling function f\n    - 0/0: x == 1")
    raise_internal_errors(False)
    assert [(r.category, r.text) for r in parse_guard_failure(text + " (production)")] == [
        ("other", "<unparseable guard failure>")
    ]
    assert user_location(text) is None
    assert parse_recompiles_log("Recompiling function f\n    - 0/0: x == 1") == []
    # each counted twice: once raised (test mode), once swallowed (production)
    assert {k: v for k, v in _internal.counts().items() if k.startswith("reasons.")} == {
        "reasons.parse": 2,
        "reasons.user_location": 2,
        "reasons.recompiles_log": 2,
    }


@pytest.mark.parametrize(
    ("text", "kinds", "category"),
    [
        # a value guard on an attribute: by what holds it, resolved live
        (
            "0/0: kwargs['past_key_values'].is_updated[0] == False",
            {"L['kwargs']['past_key_values']": "EncoderDecoderCache"},
            "python_constant",
        ),
        (
            "0/0: kwargs['past_key_values'].is_updated[0] == False",
            {"L['kwargs']['past_key_values']": "Cache:module"},
            "module_attribute",
        ),
        ("0/0: G['cfg'].mode == 'fast'", {"G['cfg']": "Config"}, "global"),
        # state reached through a module (its config's fields) is the module's, live and from the text alike
        (
            "0/0: L['self'].config.use_cache == True",
            {"L['self']": "T5Stack:module"},
            "module_attribute",
        ),
        (
            "0/0: L['model'].config.use_cache == True",
            {"L['model']": "T5Model:module"},
            "module_attribute",
        ),
        # from the text alone: self's attributes and .training are a module's; any other holder is unknown
        ("0/0: kwargs['past_key_values'].is_updated[0] == False", {}, "other"),
        ("0/0: L['self'].use_cache == True", {}, "module_attribute"),
        ("0/0: L['model'].training == True", {}, "module_attribute"),
        # an identity guard on an attribute (2.4-style bool flag, an object swapped on a plain object)
        (
            "___check_obj_id(L['kwargs']['c'].is_updated[0], 7)",
            {"L['kwargs']['c']": "EncoderDecoderCache", "L['kwargs']['c'].is_updated[0]": "bool"},
            "python_constant",
        ),
        ("0/0: ___check_obj_id(L['c'].layer, 7)", {"L['c']": "Holder"}, "object_identity"),
        ("0/0: ___check_obj_id(L['c'].layer, 7)", {}, "other"),
        # enum members: by isinstance resolved live, or by 2.10-2.12's repr annotation; never by the class's name
        (
            "0/0: ___check_obj_id(r, 7), type=<class 'm.Reduction'>",
            {"L['r']": "Reduction:enum"},
            "python_constant",
        ),
        ("0/0: ___check_obj_id(r, 7), type=<Reduction.MEAN: 'mean'>", {}, "python_constant"),
        ("0/0: ___check_obj_id(r, 7), type=<class 'm.ReductionEnum'>", {}, "object_identity"),
        (
            "0/0: ___check_obj_id(r, 7), type=<class 'm.ReductionEnum'>",
            {"L['r']": "ReductionEnum"},
            "object_identity",
        ),
        # None to something else (2.8+ text), and the reverse
        ("0/0: mask is None", {}, "type"),
        ("0/0: L['mask'] is not None", {}, "type"),
        ("0/0: G['MASK'] is None", {}, "global"),
        # an empty reason: every guard passed, the entry was refused for its backend (torch < 2.10)
        ("0/0: ", {}, "backend_mismatch"),
        ("", {}, "backend_mismatch"),
    ],
)
def test_category_by_what_the_object_is(text: str, kinds: dict[str, str], category: str) -> None:
    """A guard is filed by what its object (or the object holding the guarded attribute) is: an attribute is a
    module's only on an nn.Module, an enum member is a constant by isinstance, a None check that fails is a kind
    change; where nothing says what the holder is, it is 'other' (unknown) rather than a guess."""
    [reason] = parse_guard_failure(text, kinds=kinds)
    assert reason.category == category, reason


@pytest.mark.parametrize(
    "text",
    [
        "0/0: expected type of 'kwargs['attention_mask']' to be a tensor type, ' but found <class 'NoneType'>",
        "0/0: expected type of 'kwargs['attention_mask']' to be <class 'torch.Tensor'>, but found <class 'NoneType'>",
        "expected type of 'L['kwargs']['attention_mask']' to be a tensor type, ' but found <class 'NoneType'>",
    ],
)
def test_expected_type_with_a_quoted_name_is_a_type_change(text: str) -> None:
    """HF models' keyword arguments (kwargs['attention_mask']) in every release's wording (2.4, 2.5-2.14, 2.15's
    '<class ...>') are a type change with the subject in recompprof's form."""
    [reason] = parse_guard_failure(text)
    assert (reason.category, reason.subject) == ("type", "L['kwargs']['attention_mask']")


@pytest.mark.parametrize(
    ("subject", "want"),
    [("L['self'].x", "module_attribute"), ("G['X']", "global"), ("L['x']", "type")],
)
def test_a_none_that_went_is_filed_alike_by_identity_and_none_guard(
    subject: str, want: str
) -> None:
    """A None replaced by a tensor is filed by what holds it (a module's attribute, a global, else the
    argument's type) whether torch writes ``x is None`` or, as 2.4 - 2.6 do, an identity guard on None's id."""
    kinds = {subject: "Tensor"}
    by_id = parse_guard_failure(f"0/0: ___check_obj_id({subject}, {id(None)})", kinds=kinds)
    by_none = parse_guard_failure(f"0/0: {subject} is None", kinds=kinds)
    assert [(r.category, r.subject) for r in by_id] == [(want, subject)]
    assert [(r.category, r.subject) for r in by_none] == [(want, subject)]


@pytest.mark.parametrize(
    ("guard", "found"),
    [
        # pinned to a value in any arithmetic torch's printer writes: the scalar's own
        (
            "(1.0 + ((-1)*self.drop_path.drop_prob)) == 0.92",
            ("module_attribute", "L['self'].drop_path.drop_prob"),
        ),
        ("2*self.k == 6", ("module_attribute", "L['self'].k")),
        ("(self.layer_idx % 2) == 1", ("module_attribute", "L['self'].layer_idx")),
        ("1e-05*L['p'] == 2.5e-06", ("python_constant", "L['p']")),
        ("(L['n'] // 4) == 2", ("python_constant", "L['n']")),
        # not a scalar pinned: a bound on a symbol, two sources, a size, a symbol of torch's own
        ("1.0 - L['p'] <= 0.9", ("symbolic_shape", "")),
        ("2 <= L['n']", ("symbolic_shape", "")),
        ("L['a'] + L['b'] == 3", ("other", "")),
        ("s0 + 1 == 4", ("symbolic_shape", "")),
        ("L['x'].size()[0] + 1 == 4", ("symbolic_shape", "L['x'].size()[0]")),
    ],
)
def test_a_relation_pinning_one_scalar_is_that_scalars(guard: str, found: tuple[str, str]) -> None:
    """A guard that pins a scalar torch made a symbol (an int, or a float it does not specialise, as
    stochastic depth's ``1 - drop_prob``) is that scalar's, by its holder, whatever arithmetic the
    printer wrote around it; a bound on it, or a guard over two sources, a size or torch's own symbols,
    is not (docs/categories.md)."""
    (reason,) = parse_guard_failure(f"0/3: {guard}  # keep = 1 - self.drop_prob")
    assert (reason.category, reason.subject) == found
