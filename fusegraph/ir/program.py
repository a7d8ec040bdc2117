"""A `Program`: the main module plus the submodules of control-flow ops, and its compiled form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CompileError, api_boundary
from .module import Instruction, Module
from .shape import AnyShape

if TYPE_CHECKING:
    import numpy as np


class Program:
    def __init__(self, empty: bool = False):
        self.modules: dict[str, Module] = {}
        if not empty:
            self.modules["main"] = Module("main")
            self.main.program = self
        self.executable: Any = None  # set by compile()
        self.target_name: str | None = None
        self.metadata: dict[str, str] = {}

    # -- modules ----------------------------------------------------------------------------------
    @property
    def main(self) -> Module:
        return self.modules["main"]

    def create_module(self, name: str, parent: Module | None = None) -> Module:
        base, k = name, 0
        while name in self.modules:
            k += 1
            name = f"{base}_{k}"
        mod = Module(name, parent if parent is not None else self.main)
        mod.program = self
        self.modules[name] = mod
        return mod

    def get_or_create_module(self, name: str) -> Module:
        if name not in self.modules:
            self.modules[name] = Module(name)
            self.modules[name].program = self
        return self.modules[name]

    def modules_in_order(self) -> list[Module]:
        """main first, then submodules in the order the instructions refer to them."""
        order: list[Module] = []
        seen: set[str] = set()

        def visit(m: Module) -> None:
            if m.name in seen:
                return
            seen.add(m.name)
            order.append(m)
            for ins in m.instructions:
                for sub in ins.module_args:
                    visit(sub)

        visit(self.main)
        return order

    def verify(self, check_shapes: bool = True) -> None:
        for mod in self.modules_in_order():
            mod.verify(check_shapes)

    def copy(self) -> Program:
        """An uncompiled copy to change without changing this one: new modules and instructions (their
        provenance too), the same ops and literal values, which nothing changes in place (a pass
        makes new ones). Built loop by loop: copy.deepcopy recurses along the use chains and
        overflows Python's stack on a deep model (ResNet-50)."""
        if self.is_compiled:
            raise CompileError("copy a program before compiling it: its executable is not copied")
        new = Program(empty=True)
        new.metadata = dict(self.metadata)
        for name in self.modules:
            new.modules[name] = Module(name)
            new.modules[name].program = new
        made: dict[int, Instruction] = {}
        for name, mod in self.modules.items():
            new.modules[name].parent = None if mod.parent is None else new.modules[mod.parent.name]
            for ins in mod.instructions:
                made[ins.uid] = Instruction(ins.op, [], ins.shape, [new.modules[m.name] for m in ins.module_args])
                made[ins.uid].origin, made[ins.uid].tensor = ins.origin, ins.tensor
        for name, mod in self.modules.items():  # inputs once every instruction exists: a submodule reads outer values
            for ins in mod.instructions:
                copied = made[ins.uid]
                copied.inputs = [made[x.uid] for x in ins.inputs]
                new.modules[name]._attach(copied, None)
        return new

    def discard_module(self, module: Module) -> None:
        """Forget `module` (and the bodies inside it): drop it and its instructions' uses of outer
        values, so that those are not kept alive by a body nothing runs."""
        for ins in module.instructions:
            for sub in ins.module_args:
                self.discard_module(sub)
            for i in ins.inputs:
                if ins in i.users:
                    i.users.remove(ins)
        self.modules.pop(module.name, None)

    def remove_unused_modules(self) -> None:
        used = {m.name for m in self.modules_in_order()}
        for name in list(self.modules):
            if name not in used:
                del self.modules[name]

    # -- shapes -----------------------------------------------------------------------------------
    def get_parameter_shapes(self) -> dict[str, AnyShape]:
        return {p.op.param_name: p.shape for p in self.main.parameters}

    def get_parameter_names(self) -> list[str]:
        return [p.op.param_name for p in self.main.parameters]

    def get_output_shapes(self) -> list[AnyShape]:
        return [o.shape for o in self.main.outputs]

    @property
    def output_names(self) -> list[str]:
        names = self.metadata.get("output_names")
        return names.split("\x1f") if names else [f"output{i}" for i in range(len(self.main.outputs))]

    # -- text -------------------------------------------------------------------------------------
    def to_text(self, full: bool = True) -> str:
        from .text import print_program

        return print_program(self, full=full)

    @staticmethod
    def from_text(text: str) -> Program:
        from .text import parse_program

        return parse_program(text)

    def __str__(self) -> str:
        return self.to_text(full=False)

    # -- compile and run --------------------------------------------------------------------------
    @api_boundary
    def compile(self, target: Any, options: Any = None, manager: Any = None) -> Program:
        """Optimize this program for `target` (a target's name, or a target from `fusegraph.get_target`)
        in place; build its executable. `manager` (a PassManager) collects per-pass records."""
        if isinstance(target, str):
            from ..targets import get_target

            target = get_target(target)
        if not hasattr(target, "compile"):
            raise CompileError(f"not a target: {target!r} (use fusegraph.get_target(name))")
        self.executable = target.compile(self, options, manager) if manager is not None else target.compile(self, options)
        self.target_name = target.name
        return self

    @property
    def is_compiled(self) -> bool:
        return self.executable is not None

    @api_boundary
    def run(self, inputs: Mapping[str, Any], *, deadline: float | None = None) -> list[np.ndarray]:
        """Run the compiled program; `deadline`: seconds after which it stops with DeadlineExceeded."""
        if self.executable is None:
            raise CompileError("the program is not compiled: call program.compile(target) first")
        return self.executable.run(inputs, deadline=deadline)

    @api_boundary
    def run_async(self, inputs: Mapping[str, Any], *, stream: Any = None, after: Any = (),
                  deadline: float | None = None) -> Any:
        """Start a run and return at once: a Future-like handle (`.result()` waits and gives the outputs,
        `.done()`). On ref and cpu the run goes to a worker thread (no more at once than the cores
        allow); on gpu it is queued on `stream` (a torch.cuda.Stream; None: the context's own), device
        tensors in giving device tensors out, and `.event` orders other streams after it. `after`:
        handles of runs that must finish first (on gpu: their events, without waiting on the host)."""
        if self.executable is None:
            raise CompileError("the program is not compiled: call program.compile(target) first")
        return self.executable.run_async(inputs, stream=stream, after=after, deadline=deadline)

    @api_boundary
    def context(self) -> Program:
        """An execution context of this compiled program: a Program sharing its IR, weights and compiled
        kernels whose runs have their own buffers (and on gpu their own CUDA stream and graph), so that
        several threads run one compiled program at once, each on its context. Make the contexts before
        serving (on gpu each captures its CUDA graph when made). On ref and cpu every thread has its
        own buffers already, and a context is the program itself."""
        if self.executable is None:
            raise CompileError("the program is not compiled: call program.compile(target) first")
        exe = self.executable.context()
        if exe is self.executable:
            return self
        ctx = Program(empty=True)
        ctx.modules, ctx.metadata, ctx.target_name, ctx.executable = self.modules, self.metadata, self.target_name, exe
        return ctx
