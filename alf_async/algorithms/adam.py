"""Adam for the learners, without torch.optim's start-up cost.

Constructing any ``torch.optim.Optimizer`` imports ``torch._dynamo`` (its
methods are wrapped to be skipped by the compiler, and the wrapper imports the
compiler at first call): 1-1.5 s of CPU on a 2-core machine, on the critical
path of every run's start (measured with ``bench.startup``). ``Adam`` keeps the
moments itself and steps through torch's functional ``torch.optim.adam.adam``,
the function ``torch.optim.Adam.step`` calls, with the same defaults (foreach
on CUDA, the single-tensor loop on the CPU): the arithmetic is torch's, the
results are bit-identical (tests/test_adam.py), and its ``state_dict`` has
``torch.optim.Adam``'s layout, so checkpoints load either way.

Only what the learners use: one parameter group, no AMSGrad, no weight decay.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Tuple

import torch
from torch.optim.adam import adam as adam_step


class Adam:
    """Adam over a fixed list of parameters.

    Args:
        params: the tensors to optimize (each ``requires_grad``).
        lr: the learning rate; ``param_groups[0]["lr"]`` may be changed
            between steps (a schedule).
        betas: the decay rates of the first and second moments.
        eps: added to the square root of the second moment.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params: List[torch.Tensor] = list(params)
        if not self.params:
            raise ValueError("Adam got an empty parameter list")
        if not lr >= 0.0 or not eps >= 0.0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Adam: invalid lr={lr}, eps={eps} or betas={betas}")
        # torch.optim.Adam's group keys, so that its state_dict loads here and
        # ours in torch.optim.Adam.
        self.param_groups: List[Dict[str, Any]] = [{
            "lr": float(lr), "betas": tuple(betas), "eps": float(eps), "weight_decay": 0.0,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
            "differentiable": False, "fused": None, "decoupled_weight_decay": False,
            "params": self.params}]
        # Per parameter: "step" (a float32 scalar tensor: the number of steps
        # taken), "exp_avg" and "exp_avg_sq" (the moments, the parameter's shape).
        self.state: Dict[torch.Tensor, Dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def _moments(self, p: torch.Tensor) -> Dict[str, torch.Tensor]:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {
                "step": torch.tensor(0.0, dtype=torch.float32),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        group = self.param_groups[0]
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        states = [self._moments(p) for p in params]
        beta1, beta2 = group["betas"]
        adam_step(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                  [s["exp_avg_sq"] for s in states], [], [s["step"] for s in states],
                  foreach=None, fused=None, amsgrad=False, beta1=beta1, beta2=beta2,
                  lr=group["lr"], weight_decay=0.0, eps=group["eps"], maximize=False)

    def state_dict(self) -> Dict[str, Any]:
        """``torch.optim.Adam``'s layout: parameters by index."""
        index = {p: i for i, p in enumerate(self.params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.params)))
        return {"state": {index[p]: dict(s) for p, s in self.state.items()},
                "param_groups": [group]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a ``state_dict`` of this class or of ``torch.optim.Adam`` over
        the same parameters (ValueError if the layout does not match)."""
        groups = state_dict.get("param_groups")
        if not isinstance(groups, (list, tuple)) or len(groups) != 1 \
                or len(groups[0].get("params", ())) != len(self.params):
            raise ValueError(f"the optimizer state does not match: expected one parameter "
                             f"group of {len(self.params)} parameters")
        saved = groups[0]
        if saved.get("amsgrad") or saved.get("weight_decay"):
            raise ValueError("the optimizer state uses AMSGrad or weight decay, which this "
                             "Adam does not")
        order = {index: position for position, index in enumerate(saved["params"])}
        state: Dict[torch.Tensor, Dict[str, torch.Tensor]] = {}
        for index, moments in state_dict.get("state", {}).items():
            p = self.params[order[index]]
            exp_avg, exp_avg_sq = moments["exp_avg"], moments["exp_avg_sq"]
            if exp_avg.shape != p.shape or exp_avg_sq.shape != p.shape:
                raise ValueError(f"the optimizer state of parameter {index} has shape "
                                 f"{tuple(exp_avg.shape)}, the parameter {tuple(p.shape)}")
            step = torch.as_tensor(moments["step"], dtype=torch.float32).detach().clone()
            state[p] = {"step": step.cpu(),
                        "exp_avg": exp_avg.detach().to(p.device, p.dtype).clone(),
                        "exp_avg_sq": exp_avg_sq.detach().to(p.device, p.dtype).clone()}
        self.state = state
        group = self.param_groups[0]
        group["lr"] = float(saved.get("lr", group["lr"]))
        group["betas"] = tuple(saved.get("betas", group["betas"]))
        group["eps"] = float(saved.get("eps", group["eps"]))
