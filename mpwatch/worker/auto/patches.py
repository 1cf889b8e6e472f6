"""Where mpwatch.worker.auto listens in torch: the hooks, put in once right after `import torch`.

- torch's global optimizer hook (`register_optimizer_step_post_hook`): an optimizer stepped;
- `torch.optim.Optimizer.__init__`: an optimizer was made (then backward() alone is no step),
  and its class's `step` wrapped once: what step() returns is the step's loss where it returns
  one (`optimizer.step(closure)`);
- `torch.autograd.backward` (which `Tensor.backward` calls): the losses, and where a step's
  backward ends; a backward() inside another one (a checkpoint's recomputation) is part of it;
- `GradScaler.scale` notes the loss it scaled (the scaled one is what reaches backward());
  `GradScaler.step` counts a step the scaler skipped;
- a DataLoader iterator's `__next__`: the step's time in data loading.
Where each begins and ends splits the step into phases (worker.auto.split).
Each wrapper calls torch's own function with the arguments it got and returns what it
returns; the hooks run on the thread that called them (the training thread).
"""
from __future__ import annotations

import functools
from importlib import import_module

from mpwatch.worker.auto.loss import UNSCALED, Capture
from mpwatch.worker.auto.steps import Steps

WRAPPED = "_mpwatch_step"  # marks an optimizer class's step() wrapped here

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any


def install(torch: ModuleType, steps: Steps, capture: Capture, losses_wanted: Callable[[], bool]) -> None:
    optim = import_module("torch.optim.optimizer")  # loaded by torch's own import: no cost here
    optim.register_optimizer_step_post_hook(lambda opt, args, kwargs: steps.optimizer_stepped())
    _optimizer_init(optim.Optimizer, steps, capture, losses_wanted)
    autograd: Any = import_module("torch.autograd")
    autograd.backward = _backward(autograd.backward, steps, capture, losses_wanted)
    _grad_scaler(import_module("torch.amp.grad_scaler").GradScaler, torch.Tensor, steps)
    _data_loader(import_module("torch.utils.data.dataloader")._BaseDataLoaderIter, steps)


def _optimizer_init(cls: Any, steps: Steps, capture: Capture, losses_wanted: Callable[[], bool]) -> None:
    real = cls.__init__

    @functools.wraps(real)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        steps.has_optimizer = True
        real(self, *args, **kwargs)
        kind = type(self)
        if not getattr(kind.step, WRAPPED, False):  # (torch wrapped it with its hooks in real())
            kind.step = _optimizer_step(kind.step, steps, capture, losses_wanted)

    cls.__init__ = __init__


def _optimizer_step(real: Callable[..., Any], steps: Steps, capture: Capture,
                    losses_wanted: Callable[[], bool]) -> Callable[..., Any]:
    """An optimizer class's step(), around torch's own (whose hook counts the step): the step
    is counted as it returns, with the loss it returned."""
    @functools.wraps(real)  # (torch's `hooked` mark comes along: it never wraps this again)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        steps.stepping += 1
        try:
            out = real(self, *args, **kwargs)
        finally:
            steps.stepping -= 1
        if not steps.stepping:
            loss = None
            if out is not None and losses_wanted():
                try:
                    loss = capture.returned(out)
                except Exception:  # noqa: BLE001 - an odd value is no reason to fail the user's step()
                    loss = None
            steps.step_returned(loss)
        return out

    setattr(step, WRAPPED, True)
    return step


def _backward(real: Callable[..., Any], steps: Steps, capture: Capture,
              losses_wanted: Callable[[], bool]) -> Callable[..., Any]:
    @functools.wraps(real)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if steps.depth:  # inside a backward() already: part of it
            return real(tensors, *args, **kwargs)
        steps.backward_start()
        if losses_wanted():
            grads = args[0] if args else kwargs.get("grad_tensors", kwargs.get("grad_variables"))
            try:
                capture.take(tensors, grads, steps.parts)
            except Exception:  # noqa: BLE001 - an odd tensor is no reason to fail the user's backward()
                pass
        steps.depth += 1
        try:
            out = real(tensors, *args, **kwargs)
        finally:
            steps.depth -= 1
        steps.backward_done()
        return out

    return backward


def _grad_scaler(cls: Any, tensor: type, steps: Steps) -> None:
    real_scale, real_step = cls.scale, cls.step

    @functools.wraps(real_scale)
    def scale(self: Any, outputs: Any) -> Any:
        out = real_scale(self, outputs)
        if type(out) is tensor and out is not outputs and type(outputs) is tensor:
            out.__dict__[UNSCALED] = outputs.detach()  # auto.loss reads the loss, not loss * scale
        return out

    @functools.wraps(real_step)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_step(self, optimizer, *args, **kwargs)
        steps.scaler_stepped()
        return out

    cls.scale, cls.step = scale, step


def _data_loader(cls: Any, steps: Steps) -> None:
    real = cls.__next__
    clock = steps.clock

    @functools.wraps(real)
    def __next__(self: Any) -> Any:
        if steps.data_depth:
            return real(self)
        steps.batch_start()
        steps.data_depth += 1
        t0 = clock()
        try:
            return real(self)
        finally:
            steps.data_depth -= 1
            steps.data(clock() - t0)

    cls.__next__ = __next__
