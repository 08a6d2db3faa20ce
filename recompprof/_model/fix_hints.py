"""The fix hint of each reason category: one line a user can act on, keyed by the category's name.

Apart from the event model so that a reader which only needs the wording (the lake's ``top-causes``)
does not load pydantic and the reason parser: this module imports nothing.
"""

from __future__ import annotations

FIX_HINTS: dict[str, str] = {
    "size": "Mark the varying dimension dynamic (torch._dynamo.mark_dynamic(x, dim)) or compile with dynamic=True; or pad/bucket sizes.",
    "stride": "Pass contiguous tensors (x.contiguous()) or keep one memory layout for this input.",
    "ndim": "Keep the input's number of dimensions fixed (reshape/unsqueeze before the compiled call).",
    "dtype": "Cast the input to one dtype before the compiled call.",
    "device": "Move inputs to one device before the compiled call.",
    "requires_grad": "Each requires_grad state of this input compiles once (a frozen and a trained path are two variants of a bounded set). Only if the input needs no gradient, detach it (x.detach()) before the call; detaching an input whose gradient is needed would stop that gradient.",
    "dispatch_keys": "Avoid mixing inference-mode, conjugate/negative views or subclasses for this input; materialise (x.clone(), x.resolve_conj()) first.",
    "python_constant": "Turn the changing Python value (LR, step, flag, enum member, a cache object's flag) into a tensor argument, or hoist it out of the compiled function; a value that takes a few states compiles once per state.",
    "global": "Hoist or freeze the global: pass it as a tensor argument, or stop reassigning it between calls.",
    "module_attribute": "Avoid toggling module attributes (training, flags) between calls: set it once; a flag that takes a few states compiles once per state (compiling the module twice does not separate them: torch keeps one cache per code object).",
    "object_identity": "Reuse the same object (function, module, class) across calls instead of creating a new one each step.",
    "type": "Pass the same kind of value each call (always a tensor or always None, always a list or always a tuple).",
    "container_length": "Keep the list/tuple length fixed (through *args: pass the same number of positional arguments), or stack the items into one tensor.",
    "dict_keys": "Pass the same keys each call: through **kwargs, the same keyword arguments (pass None rather than leaving one out); a dict argument, the same keys in the same order.",
    "aliasing": "Pass distinct tensors consistently (or always the same tensor twice); clone an input when it aliases another.",
    "grad_mode": "Call the compiled function under one grad mode; a train and an eval phase compile one variant each (compiling the function twice does not separate them: torch keeps one cache per code object).",
    "autocast": "Enter autocast consistently: always inside, or always outside, the compiled call.",
    "global_state": "Set global torch state (default dtype, deterministic algorithms, function modes) once before compiling.",
    "symbolic_shape": "A dynamic-shape guard failed: the traced code needed something of a size torch made dynamic (a branch, a parity, a fixed reshape); find it in the guard's source line, or mark the range with torch._dynamo.mark_dynamic(x, dim, min=, max=) where the code holds within it.",
    "mark_dynamic": "Apply mark_dynamic to this input on every call, or on none.",
    "backend_mismatch": "Reuse one backend object (or torch.compile wrapper) instead of creating a new one each call.",
    "invalidated": "Keep the guarded object alive (do not recreate modules/classes per step) so cached code stays valid.",
    "other": "recompprof cannot tell what changed (or what holds it): inspect the reason text; if recompiles are expected, raise the recompile limit with evidence from this report.",
}
