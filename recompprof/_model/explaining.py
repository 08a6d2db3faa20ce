"""Which guard failure explains a recompile, and whether torch's automatic dynamic caused it.

:class:`ReasonExplainer` parses a compile's reason texts, marks the one that explains the change and
caps what an event keeps; :func:`automatic_dynamic` tells a one-time automatic-dynamic warm-up from a
recompile that repeats (docs/steady-state.md). Live capture and ``ingest`` share both.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from recompprof._model.compile_id import CompileId
from recompprof._model.compile_record import CompileRecord, DynamicSettings
from recompprof._model.events import Frame, Reason
from recompprof._model.reasons import parse_guard_failures, resolvable_subjects
from recompprof._model.subjects import owner
from recompprof._model.trusted import copied

MAX_SEEN_REASONS = 4096  # reason hashes remembered per frame
MAX_WAITING = 4 * MAX_SEEN_REASONS  # touches of them held before they are made (_History)
MAX_FRAMES_REMEMBERED = 256
MAX_REASONS_PER_EVENT = 64
MAX_TEXTS_REMEMBERED = 8192  # reason texts whose parse and facts an explainer keeps (all frames)


class _History(collections.OrderedDict[int, "int | None"]):
    """Per frame, hashes of what was seen, in the order last seen (a key's place is its last touch), the
    oldest dropped past MAX_SEEN_REASONS. A dim or scalar's first change keeps the newest cache entry that
    existed before it (its compile number), -1 if unknown: an entry up to that one was compiled while the
    dim was still static.

    The order is needed only to drop the oldest, so touches wait (``_pending``: a compile's listed keys as
    one block, single keys) until it is (:meth:`ordered`); the keys are in the dict from their first touch.
    The N-th recompile of a frame lists the keys of the one before after its new ones: its block then takes
    the place of that one's, and only its new keys go in (no step per key listed before)."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[list[int] | int] = []
        self._block: int | None = None  # where the last block is in _pending
        # keys in _pending; past MAX_WAITING they are moved (the cost of a move amortised as before)
        self._waiting = 0

    def touch(self, key: int) -> None:
        """Move ``key`` (in the dict) to the end."""
        if self._pending:
            self._pending.append(key)
            self._waiting += 1
        else:
            self.move_to_end(key)

    def touch_all(self, keys: list[int], before: list[int] | None) -> None:
        """Set each of ``keys`` to None and move them to the end in their order. ``before``: a block
        touched earlier that is the tail of ``keys``."""
        at = self._block
        last = self._pending[at] if at is not None else None
        if at is not None and isinstance(last, list) and (keys is last or before is last):
            del self._pending[at]  # every key of it is touched again
            self._waiting -= len(last)
            self.update(dict.fromkeys(keys[: len(keys) - len(last)]))
        else:
            self.update(dict.fromkeys(keys))
        self._block = len(self._pending)
        self._pending.append(keys)
        self._waiting += len(keys)
        if self._waiting > MAX_WAITING:
            self.ordered()

    def ordered(self) -> None:
        """Make the touches that wait."""
        pending, self._pending, self._block, self._waiting = self._pending, [], None, 0
        for touched in pending:
            if isinstance(touched, list):
                collections.deque(map(self.move_to_end, touched), maxlen=0)
            else:
                self.move_to_end(touched)


_SIZE_MISMATCH = re.compile(r"size mismatch at index (\d+)")
_SIZE_OF = re.compile(r"^(.*)\.size\(\)\[(\d+)\]$")
# A scalar's equality guard: "k == 2", "self.param_groups[0]['lr'] == 0.01" (before a source comment).
_SCALAR_LITERAL = re.compile(r"\s==\s(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf|nan))\s*(?:#|$)")
# "other" is a value guard on an attribute whose holder the text cannot tell (a module or a plain object:
# ``cache.max_len == 7`` read from a trace): still a scalar whose value changed.
_SCALAR_CATEGORIES = frozenset({"python_constant", "global", "module_attribute", "other"})


def changed_subject(reason: Reason) -> str | None:
    """What a reason says changed, as the unit torch's automatic dynamic decides on, or None.

    A tensor dim (``"dim 0 of L['x']"``) for a size mismatch or a dynamic-shape guard on ``x.size()[0]``;
    a scalar's value (``"value of L['lr']"``) for an int or float equality guard, also one whose holder
    is unknown (category ``other``). Under ``redact`` a size text keeps no index: ``"a dim of L['x']"``.
    """
    subject = reason.subject
    if not subject:
        return None
    if reason.category == "size":
        match = _SIZE_MISMATCH.search(reason.text)
        if match is not None:
            return f"dim {match.group(1)} of {subject}"
        # redacted text
        return f"a dim of {subject}" if reason.text.startswith("size guard failed") else None
    if reason.category == "symbolic_shape":
        match = _SIZE_OF.match(subject)
        return f"dim {match.group(2)} of {match.group(1)}" if match else None
    if reason.category in _SCALAR_CATEGORIES and _scalar_literal(reason) is not None:
        return f"value of {subject}"
    return None


def _scalar_literal(reason: Reason) -> str | None:
    """The int or float literal a scalar equality guard compared with (None: another guard, or redacted)."""
    match = _SCALAR_LITERAL.search(reason.text)
    return match.group(1) if match else None


@dataclasses.dataclass(slots=True)
class Explained:
    """The reasons of one compile as :meth:`ReasonExplainer.explain` keeps them (read-only by convention:
    one is made per compile, and a frozen dataclass sets each field through ``object.__setattr__``)."""

    reasons: list[Reason]  # the explaining reason first, then others up to MAX_REASONS_PER_EVENT
    omitted: dict[str, int]  # the others past that, counted by category
    # False when what the explaining reason changed (a tensor dim, a scalar's value: :func:`changed_subject`)
    # already changed on this frame, so it is not automatic dynamic warming up: that happens once per
    # dim or scalar.
    first_change: bool = True
    # True when the compile's own installed guards hold the scalar the explaining reason changed at its new
    # value (``G['cfg'].ls == 0.2``): torch tried it dynamic and the traced code specialised it again in
    # the same compile, so every new value recompiles (None of this is known: False).
    specialised: bool = False
    # The variants of the explaining change on this frame: the entry compiled before its first recompile,
    # and each recompile it explained since, this one included (what a bounded set is measured against:
    # recompprof._model.steady).
    variants: int = 2
    # The subject of an nn.Module's own constant (``L['self'].layer_idx``) whose instance no lookup could
    # be asked for (``ingest``: a trace names no instance, and torch guards no identity on ``self``): its
    # variants were counted per frame, which cannot tell new instances from one instance's value changing.
    instance_unknown: str | None = None


# What a job's installed guards are read through: the compile's guard texts (each without its source
# comment), called only for a recompile explained by a scalar's change.
InstalledGuards = Callable[[], Iterable[str]]


class _Facts(NamedTuple):
    """What the rule reads of one parsed reason, derived once: the N-th recompile of a frame lists the
    N texts of the entries before it, almost all of them listed (and so derived) by the compile before."""

    reason: Reason
    change: tuple[str, str]  # category and subject
    text_key: int  # the keys it is remembered under per frame (_History)
    change_key: int
    subject_key: int
    changed: str | None  # changed_subject(reason)
    changed_key: int
    ordinal: int | None  # of its entry
    zero_or_one: bool  # _from_zero_or_one(reason)


def _facts(reason: Reason) -> _Facts:
    changed = changed_subject(reason)
    return tuple.__new__(  # as _Facts(...) builds it, without its Python-level __new__
        _Facts,
        (
            reason,
            (reason.category, reason.subject),
            hash((reason.category, reason.subject, reason.text)),
            _change_key(reason),
            hash(("subject", reason.subject)),
            changed,
            hash(("changed", changed)),
            _ordinal(reason.entry),
            _from_zero_or_one(reason),
        ),
    )


class _Text(NamedTuple):
    """One reason text's reasons and their facts, with what a compile gathers of every text at C speed."""

    facts: tuple[_Facts, ...]
    reasons: tuple[Reason, ...]
    categories: tuple[str, ...]
    keys: tuple[int, ...]  # each reason's text, change and subject keys, in the order remembered
    entry: str | None  # every reason of one text fails one entry
    changes: frozenset[tuple[str, str]]


def _text(reasons: Sequence[Reason]) -> _Text:
    facts = tuple(map(_facts, reasons))
    if len(facts) == 1:  # most texts are one guard
        (one,) = facts
        keys = (one.text_key, one.change_key, one.subject_key)
        return _Text(
            facts, (one.reason,), (one.change[0],), keys, one.reason.entry, frozenset((one.change,))
        )
    return _Text(
        facts,
        tuple(reasons),
        tuple(r.category for r in reasons),
        tuple(k for f in facts for k in (f.text_key, f.change_key, f.subject_key)),
        reasons[0].entry if reasons else None,
        frozenset(f.change for f in facts),
    )


_Changes = frozenset[tuple[str, str]] | set[tuple[str, str]]
_FACTS, _REASONS, _CATEGORIES = (operator.attrgetter(n) for n in ("facts", "reasons", "categories"))
_KEYS, _ENTRY, _CHANGES = (operator.attrgetter(n) for n in ("keys", "entry", "changes"))


class _Parsed:
    """A compile's parsed reasons, in order, and the texts they came from (see :class:`_Text`), with what
    the rule reads of all of them together. The N-th recompile of a frame lists the texts of the compile
    before after its new ones, so :meth:`extended` builds these from that compile's and the new texts'
    alone (list concatenations and set unions, no pass over every reason in Python or C)."""

    __slots__ = ("categories", "entries", "facts", "reasons", "shared", "texts", "_order")

    def __init__(self, texts: list[_Text]) -> None:
        self.texts: list[_Text] = list(filter(_FACTS, texts))  # a text yields a reason, or is none
        self.facts: list[_Facts] = list(itertools.chain.from_iterable(map(_FACTS, self.texts)))
        self.reasons: list[Reason] = list(itertools.chain.from_iterable(map(_REASONS, self.texts)))
        self.categories: list[str] = list(
            itertools.chain.from_iterable(map(_CATEGORIES, self.texts))
        )
        self.entries: set[str | None] = set(map(_ENTRY, self.texts))
        # The changes every text failed on, where each text is another entry's (else None: joined by entry)
        self.shared: _Changes | None = (
            frozenset.intersection(*map(_CHANGES, self.texts))
            if self.texts and len(self.entries) == len(self.texts)
            else None
        )
        # the keys in the order of their last listing, as a set, and the order of the texts after the new
        # ones where it was built from them (_History.touch_all)
        self._order: tuple[list[int], set[int], list[int] | None] | None = None

    @classmethod
    def extended(cls, new: list[_Text], before: _Parsed) -> _Parsed:
        """The parse of ``new`` texts listed before those of ``before``, as ``_Parsed(new + before's)``."""
        head = cls(new)
        if not head.texts:  # the same texts again (a compile's start read them)
            return before
        if not before.texts:
            return head
        parsed = cls.__new__(cls)
        parsed.texts = head.texts + before.texts
        parsed.facts = head.facts + before.facts
        parsed.reasons = head.reasons + before.reasons
        parsed.categories = head.categories + before.categories
        parsed.entries = before.entries | head.entries
        parsed.shared = None
        if (  # every text another entry's, as in each part
            before.shared is not None
            and head.shared is not None
            and len(parsed.entries) == len(parsed.texts)
        ):
            parsed.shared = before.shared.intersection(head.shared)
        parsed._order = None
        if before._order is not None:
            listed, known, _ = before._order
            new_keys = [k for k in _last_listed(map(_KEYS, head.texts)) if k not in known]
            parsed._order = (new_keys + listed, known.union(new_keys), listed)
        return parsed

    def order(self) -> tuple[list[int], list[int] | None]:
        """Each reason's text, change and subject keys, once each, in the order of their last listing; and
        the order of the texts after the new ones, which it ends with, where it was built from them."""
        if self._order is None:
            listed = _last_listed(map(_KEYS, self.texts))
            self._order = (listed, set(listed), None)
        return self._order[0], self._order[2]


def _last_listed(keys: Iterable[tuple[int, ...]]) -> list[int]:
    """The keys, once each, in the order of their last listing."""
    listed = list(itertools.chain.from_iterable(keys))
    last_first = list(dict.fromkeys(reversed(listed)))
    last_first.reverse()
    return last_first


class ReasonExplainer:
    """Parses reason texts, marks the one that explains each recompile, and caps what is kept.

    A new input fails every cached entry of the frame, and torch lists one reason per entry, most
    recently used entry first, each the *first* guard of that entry that failed (so an entry of
    another variant, a decode step against a prefill, fails on what tells the variants apart, not
    on what changed). Reasons are compared as changes, category and subject (an input's requires_grad and
    its size are two changes of one subject). The reason that explains the change is, in this order: the
    change that failed against every entry; else the change torch makes dynamic now, most recently used
    entry first (its entry passed every guard before it, so it is the entry compiled under the same
    variant): first a
    tensor dim or an int/float that changes for the first time on this frame, or that fails an entry
    compiled while it was still static (:func:`_static_variant`), then a size from an expected 0 or 1
    (an entry holding a dim at 0 or 1 holds it static even once torch made it dynamic, so that size is
    its variant's, a decode step's one token); else the first reason whose change never failed on this
    frame before (the variants' own differences have failed before); else the first reason whose text
    is new; else the first. Each explaining change's variants on the frame are counted (``variants``).
    docs/steady-state.md has the rule and its grounds.
    An event keeps the explaining reason and the first others up to ``MAX_REASONS_PER_EVENT``; the
    rest are counted by category. Memory is bounded per frame (hashes of recent reasons and subjects)
    and in frames (least recently compiled dropped).
    """

    def __init__(self, redact: bool = False) -> None:
        self.redact = redact
        self._seen: collections.OrderedDict[str, _History] = collections.OrderedDict()
        # Each text's parse and facts: a dict lookup for a text seen before (bounded, oldest dropped).
        self._texts: collections.OrderedDict[object, _Text] = collections.OrderedDict()
        # Per frame, the texts of its last compile read without live kinds, and their parse: the next
        # compile lists them after its new ones (as many frames as _seen).
        self._last: collections.OrderedDict[str, tuple[list[str], _Parsed]] = (
            collections.OrderedDict()
        )

    def trigger(
        self,
        frame: Frame,
        texts: list[str],
        resolve: Callable[[str], str | None] | None = None,
    ) -> Reason | None:
        """The reason that will explain the compile of ``frame`` that ``texts`` trigger, by the same rule as
        :meth:`explain`, remembering nothing (a compile start reads it before its compile's record does)."""
        if not texts:  # a first compile: no reason (nothing parsed, nothing remembered)
            return None
        parsed = self._parse(frame, texts, resolve)
        if not parsed.facts:
            return None
        seen = self._seen.get(frame.key) or _History()
        reason = parsed.reasons[_explaining(parsed, seen)]
        return copied(reason, {"explains_change": True})

    def _parse(
        self, frame: Frame, texts: list[str], resolve: Callable[[str], str | None] | None
    ) -> _Parsed:
        if resolve is None:
            return self._extended(frame.key, texts)
        # Live: what the objects are decides how each text reads; only that reading's facts are derived.
        plain = parse_guard_failures(texts, redact=self.redact)
        kinds = {s: kind for s in resolvable_subjects(plain) if (kind := resolve(s)) is not None}
        return _Parsed(self._known(texts, kinds))

    def _extended(self, key: str, texts: list[str]) -> _Parsed:
        """The parse of ``texts``: of the new ones only where they are listed before the texts of the
        frame's last compile (compared by identity first, so at C speed)."""
        last = self._last.pop(key, None)
        new = len(texts) - len(last[0]) if last is not None else -1
        if last is not None and new >= 0 and texts[new:] == last[0]:
            parsed = _Parsed.extended(self._known(texts[:new]), last[1])
        else:
            parsed = _Parsed(self._known(texts))
        self._last[key] = (list(texts), parsed)
        if len(self._last) > MAX_FRAMES_REMEMBERED:
            self._last.popitem(last=False)
        return parsed

    def _known(self, texts: list[str], kinds: dict[str, str] | None = None) -> list[_Text]:
        """Each text's parse and facts (as read with ``kinds``), looked up where seen before (one dict
        lookup per text)."""
        memo = self._texts
        frozen = frozenset(kinds.items()) if kinds else None
        try:
            keys: Sequence[object] = texts if frozen is None else [(t, frozen) for t in texts]
            found: list[_Text | None] = list(map(memo.get, keys))
        except TypeError:  # not a text (parse_guard_failure makes it an "other" reason)
            found = [None] * len(texts)
        if None not in found:
            return found  # type: ignore[return-value]
        redact = self.redact
        for i, known in enumerate(found):
            if known is None:
                text = texts[i]
                found[i] = known = _text(parse_guard_failures([text], redact=redact, kinds=kinds))
                if isinstance(text, str):
                    memo[text if frozen is None else (text, frozen)] = known
                    if len(memo) > MAX_TEXTS_REMEMBERED:
                        memo.popitem(last=False)
        return found  # type: ignore[return-value]

    def explain(
        self,
        frame: Frame,
        texts: list[str],
        resolve: Callable[[str], str | None] | None = None,
        installed: InstalledGuards | None = None,
        instance: Callable[[str], int | None] | None = None,
        *,
        remember: bool = True,
    ) -> Explained:
        """The kept reasons and the omitted counts by category for one compile of ``frame``.

        ``resolve(subject)`` gives the kind of a guarded object in the live process (None if it cannot
        tell; see ``parse_guard_failure``'s ``kinds``); guards are then classified by what the object is.
        ``installed()`` gives the guards the compile installed (None: not known, as in ``ingest``).
        ``instance(subject)`` gives the identity of the nn.Module holding it as its own attribute (None:
        not known, as in ``ingest``): a module's own constant counts its variants per instance.
        ``remember`` False: a return to a variant already compiled (profile mode's re-enabled entry), judged
        against what was seen and adding nothing to it, so no variant is counted and later verdicts are
        those of a job that kept the entry cached.
        """
        if not texts:  # a first compile, a backward: no reason (nothing parsed, nothing remembered)
            return Explained([], {})
        parsed = self._parse(frame, texts, resolve)
        if not parsed.facts:
            return Explained([], {})
        frame_key = frame.key
        if not remember:
            return self._judged(parsed, self._seen.get(frame_key) or _History(), instance)
        seen = self._seen.pop(frame_key, None) or _History()
        self._seen[frame_key] = seen
        if len(self._seen) > MAX_FRAMES_REMEMBERED:
            self._seen.popitem(last=False)
        explaining = _explaining(parsed, seen)
        static_variant = _static_variant(parsed.facts, explaining, seen)  # on what was seen before
        this = parsed.facts[explaining]
        changed = this.changed
        change = _variant_key(this.reason, changed, instance)
        variants = (seen.get(change) or 1) + 1
        seen[change] = variants
        seen.touch(change)
        _remember(seen, parsed)
        first_change = True
        if changed is not None:  # remembered in the same bounded history, once per dim or scalar
            key = this.changed_key
            first_change = key not in seen or static_variant
            if key not in seen:
                ordinals = [f.ordinal for f in parsed.facts if f.ordinal is not None]
                seen[key] = max(ordinals, default=-1)
            seen.touch(key)
        if len(seen) > MAX_SEEN_REASONS:
            seen.ordered()
            while len(seen) > MAX_SEEN_REASONS:
                seen.popitem(last=False)
        kept, omitted = _kept(parsed, explaining)
        specialised = (
            changed is not None
            and installed is not None
            and changed.startswith("value of ")
            and _installed_equality(changed.removeprefix("value of "), installed)
        )
        return Explained(
            kept,
            omitted,
            first_change,
            specialised,
            variants,
            _unknown_instance(this.reason, instance),
        )

    @staticmethod
    def _judged(
        parsed: _Parsed, seen: _History, instance: Callable[[str], int | None] | None
    ) -> Explained:
        """A return to a compiled variant, by the same rule as :meth:`explain`, changing nothing: its
        variants are those its change compiled so far, and it is no change's first."""
        explaining = _explaining(parsed, seen)
        this = parsed.facts[explaining]
        change = _variant_key(this.reason, this.changed, instance)
        kept, omitted = _kept(parsed, explaining)
        variants = seen.get(change) or 1
        unknown = _unknown_instance(this.reason, instance)
        return Explained(kept, omitted, False, False, variants, unknown)


def _remember(seen: _History, parsed: _Parsed) -> None:
    """Mark each reason's text, change and subject keys seen, most recent last, as one pass setting and
    moving each in order would: a key's place is its last listing."""
    seen.touch_all(*parsed.order())


def _kept(parsed: _Parsed, explaining: int) -> tuple[list[Reason], dict[str, int]]:
    """The explaining reason first, then the others up to MAX_REASONS_PER_EVENT; the rest counted by
    category."""
    reasons = parsed.reasons
    kept = [copied(reasons[explaining], {"explains_change": True})]
    kept += (reasons[:explaining] + reasons[explaining + 1 : MAX_REASONS_PER_EVENT])[
        : MAX_REASONS_PER_EVENT - 1
    ]
    # the categories of the others past the kept ones (the explaining reason's taken out)
    categories, first = parsed.categories, MAX_REASONS_PER_EVENT - 1
    rest: Iterable[str] = (
        categories[first + 1 :]
        if explaining <= first
        else itertools.chain(categories[first:explaining], categories[explaining + 1 :])
    )
    return kept, dict(collections.Counter(rest))


def _variant_key(
    reason: Reason, changed: str | None, instance: Callable[[str], int | None] | None
) -> int:
    """The key a change's variants are counted under on a frame: a dim or scalar is one change however its
    guard is worded (a size, then a shape guard); a module's own constant, per instance where known."""
    return hash(
        ("variants", changed or (reason.category, reason.subject), _instance_of(reason, instance))
    )


def _unknown_instance(reason: Reason, instance: Callable[[str], int | None] | None) -> str | None:
    """The subject of a module's own constant whose instance no lookup was given for (``ingest``), else
    None. A lookup that finds none (an instance gone) is live's own verdict, not this. An attribute whose
    holder the text cannot tell (``other``) may be a module's own constant too, so it is unknown alike."""
    if instance is not None or not reason.subject:
        return None
    if _held_by_instance(reason) is not None:
        return reason.subject
    if reason.category == "other" and owner(reason.subject) is not None:
        return reason.subject
    return None


def _instance_of(reason: Reason, instance: Callable[[str], int | None] | None) -> int | None:
    """The nn.Module instance whose own constant the reason's guard failed on (``L['self'].layer_idx``,
    the shape of ``L['self']._parameters['weight']``), None where it is no module's constant or the
    instance is unknown. Under regional compilation every block shares one code object, so a new block
    fails the others' entries on its ``layer_idx`` (or its weight's width): its first compile is the
    first variant of that instance, one of a bounded set of instances, while the same instance's value
    changing again and again keeps counting toward the bound."""
    held = _held_by_instance(reason)
    if instance is None or held is None:
        return None
    return instance(held)


# A module's own parameter or buffer, as torch names it
# (``L['self']._modules['conv']._parameters['weight']``).
_OWN_TENSOR = re.compile(r"\._(?:parameters|buffers)\['[^']*'\]$")
# What a guard checks of a tensor: a parameter's or buffer's are its module instance's constants.
_TENSOR_PROPERTIES = frozenset({"size", "stride", "ndim", "dtype", "device", "requires_grad"})


def _held_by_instance(reason: Reason) -> str | None:
    """The subject whose holder is the module instance the reason's constant belongs to: a module's own
    attribute (``module_attribute``), or the dict holding a module's own parameter or buffer, for a
    property of that tensor (blocks of different widths: each block's weight has its own shape); None
    for anything else."""
    subject = reason.subject
    if not subject:
        return None
    if reason.category == "module_attribute":
        return subject
    if reason.category in _TENSOR_PROPERTIES and _OWN_TENSOR.search(subject):
        return subject[: subject.rindex("[")]
    return None


def _change_key(reason: Reason) -> int:
    """What a reason says changed, remembered per frame: its category and subject, never the subject alone
    (an input's requires_grad and its size are two changes of one subject)."""
    return hash(("change", reason.category, reason.subject))


def _installed_equality(subject: str, installed: InstalledGuards) -> bool:
    """The compile installed an equality guard on ``subject`` (``G['cfg'].ls == 0.2``): the value stayed
    specialised in the compile that was to make it dynamic."""
    prefix = f"{subject} == "
    return any(text.startswith(prefix) for text in installed())


def _explaining(parsed: _Parsed, seen: _History) -> int:
    """The index of the reason that explains the change (the rule of :class:`ReasonExplainer`)."""
    facts = parsed.facts
    common = _common_change(parsed)
    if common:
        return next(i for i, f in enumerate(facts) if f.change in common)
    dynamic_now = next((i for i in range(len(facts)) if _made_dynamic_now(facts, i, seen)), None)
    if dynamic_now is not None:
        return dynamic_now
    from_zero_or_one = next((i for i, f in enumerate(facts) if f.zero_or_one), None)
    if from_zero_or_one is not None:
        return from_zero_or_one
    new_subject = next(
        (i for i, f in enumerate(facts) if f.change[1] and f.change_key not in seen), None
    )
    if new_subject is not None:
        return new_subject
    return next((i for i, f in enumerate(facts) if f.text_key not in seen), 0)


def _common_change(parsed: _Parsed) -> set[tuple[str, str]]:
    """The changes (with a subject) every failed cache entry failed on; empty for a single entry."""
    texts = parsed.texts
    if len(parsed.entries) <= 1:
        return set()
    if parsed.shared is not None:  # each text another entry's
        return {c for c in parsed.shared if c[1]}
    # several texts of one entry (torch before 2.5 names none): an entry's changes joined
    joined: dict[str | None, set[tuple[str, str]]] = {}
    for text in texts:
        joined.setdefault(text.entry, set()).update(text.changes)
    first, *rest = joined.values()
    return {c for c in first.intersection(*rest) if c[1]}


def _made_dynamic_now(facts: list[_Facts], index: int, seen: _History) -> bool:
    """A change torch's automatic dynamic acts on now: a tensor dim or an int/float scalar changing for the
    first time on this frame, or for a variant whose entry was compiled before torch made it dynamic. The
    compile's settings decide later whether torch did (:func:`automatic_dynamic`). Else (the next tier)
    a size from an expected 0 or 1, which torch compiled static even in a dynamic dim: the first other
    size makes it dynamic in that variant's graph."""
    this = facts[index]
    if this.changed is None or this.change[0] == "symbolic_shape":
        return False
    return this.changed_key not in seen or _static_variant(facts, index, seen)


def _static_variant(facts: list[_Facts], index: int, seen: _History) -> bool:
    """The dim or scalar of ``parsed[index]`` changed before on this frame, and this reason's entry was
    compiled before that first change (so with it static), while no entry compiled since fails on it: torch
    made it dynamic and this variant (another flag value) now compiles with it dynamic, once. Each entry
    compiled since fails on what tells the variants apart, never on a size (but this dim held at 0 or 1),
    a scalar or a shape guard."""
    this = facts[index]
    before = seen.get(this.changed_key)
    entry = this.ordinal
    if before is None or entry is None or entry > before:
        return False
    newer = [f for f in facts if f.ordinal is not None and f.ordinal > before]
    # A newer entry failing on a subject never seen failing on this frame is the change itself (a flag
    # flipped now), not a known variant's difference (a cache that failed on its size and now on its
    # type tells the same variants apart): then this is no variant compiled static.
    return not any(_may_be_a_change(f, this) or f.subject_key not in seen for f in newer)


def _may_be_a_change(reason: _Facts, this: _Facts) -> bool:
    """An entry compiled after the dim went dynamic fails on this (a variant's own flag is none of these):
    the same change (category and subject: another variant's requires_grad of the same input is none), a
    dim or scalar, or a shape guard. Then the dim may have been specialised again;
    not when that entry holds this very dim at 0 or 1, which torch keeps static in a dynamic dim too
    (the entry of a decode step's one token, failed by a prefill's length)."""
    if reason.zero_or_one and reason.changed == this.changed:
        return False
    return (
        reason.change == this.change
        or reason.change[0] == "symbolic_shape"
        or reason.changed is not None
    )


@functools.lru_cache(maxsize=4096)  # a frame's entries are listed again on each of its recompiles
def _ordinal(entry: str | None) -> int | None:
    """The frame's compile number of a cache entry's compile id (``"0/3"`` -> 3), None if unknown."""
    parsed = CompileId.parse(entry) if entry else None
    return parsed.frame_compile_id if parsed is not None else None


def automatic_dynamic(
    m: CompileRecord, reasons: list[Reason], first_change: bool = True, specialised: bool = False
) -> str | None:
    """What torch's automatic dynamic made dynamic with this recompile (``"dim 0 of L['x']"``,
    ``"value of L['lr']"``), or None.

    With ``automatic_dynamic_shapes`` on (torch's default, unless ``dynamic=False``), the first time a
    tensor dim, or an int or float torch does not specialise, changes on a frame, torch records it as
    dynamic and recompiles once with a symbol; later values reuse that graph. So a recompile explained
    by that first change is a one-time warm-up, as the compile's own Dynamo settings decide (see
    docs/steady-state.md): not when the same dim or scalar changed before on this frame
    (``first_change`` False: it stayed static, or the code specialised it again), unless the cached
    graph held the dim at size 0 or 1, which torch never makes dynamic. Not when the compile's own
    installed guards hold the scalar at its new value (``specialised``): the traced code needed it
    constant, so every new value recompiles.
    """
    reason = next((r for r in reasons if r.explains_change), None)
    if (
        reason is None
        or specialised
        or reason.category == "symbolic_shape"
        or not (first_change or _from_zero_or_one(reason))
    ):
        return None
    changed = changed_subject(reason)
    settings = m.dynamic
    if changed is None or settings.automatic is False or settings.static_by_default is False:
        return None
    if reason.category == "size":
        if "_parameters" in reason.subject and settings.static_parameters is not False:
            return None
        return changed
    return changed if scalar_made_dynamic(reason, settings) else None


_FROM_ZERO_OR_ONE = re.compile(r"size mismatch at index \d+\. expected [01],")


def _from_zero_or_one(reason: Reason) -> bool:
    """A size mismatch from an expected 0 or 1: torch compiles sizes 0 and 1 static even in a dynamic dim, so
    a graph traced at that size recompiles once for the first other size, which takes the dim dynamic."""
    return reason.category == "size" and _FROM_ZERO_OR_ONE.search(reason.text) is not None


def scalar_made_dynamic(reason: Reason, settings: DynamicSettings) -> bool:
    """torch makes this scalar dynamic on its first change (its builder's rules; unknown config: no).

    Floats unless ``specialize_float`` (on before torch 2.6), nan or inf. Ints unless ``specialize_int``,
    a global, an ``nn.Module`` attribute (unless ``allow_unspec_int_on_nn_module``) or a default argument;
    an attribute whose holder is unknown (``other``: a module's or a plain object's) counts as a module's,
    so it is claimed only where either would be made dynamic.
    """
    literal = _scalar_literal(reason)
    if literal is None:
        return False
    subject = reason.subject
    if any(c in literal for c in ".ein"):
        return settings.specialize_float is False and literal.lstrip("-") not in ("inf", "nan")
    if (
        settings.specialize_int is not False
        or subject.startswith("G[")
        or "__defaults__" in subject
        or "__kwdefaults__" in subject
    ):
        return False
    return (
        reason.category not in ("module_attribute", "other")
        or settings.unspec_int_on_modules is True
    )
