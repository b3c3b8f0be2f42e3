"""The learners' Adam (alf_async.algorithms.adam): torch.optim.Adam's updates
and state layout, without importing torch._dynamo."""

import copy
import subprocess
import sys
import textwrap

import pytest
import torch

from alf_async.algorithms.adam import Adam


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def _train(model: torch.nn.Module, optimizer, steps: int, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    for i in range(steps):
        x = torch.randn(16, 5, generator=g)
        optimizer.zero_grad(set_to_none=True)
        loss = (model(x) ** 2).mean()
        if i % 3 == 2:  # a parameter without a gradient is left alone
            loss = (model[0](x) ** 2).mean()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize("lr,eps", [(3e-4, 1e-5), (1e-2, 1e-8)])
def test_updates_equal_torch_adam_bit_for_bit(lr, eps):
    ours_model, torch_model = _model(), _model()
    ours = Adam(ours_model.parameters(), lr=lr, eps=eps)
    theirs = torch.optim.Adam(torch_model.parameters(), lr=lr, eps=eps)
    _train(ours_model, ours, 25)
    _train(torch_model, theirs, 25)
    for a, b in zip(ours_model.parameters(), torch_model.parameters()):
        assert torch.equal(a, b)
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert mine["param_groups"] == reference["param_groups"]
    assert mine["state"].keys() == reference["state"].keys()
    for index, moments in reference["state"].items():
        for key, value in moments.items():
            assert torch.equal(mine["state"][index][key], value), (index, key)


def test_state_dicts_load_both_ways_and_training_continues_identically():
    base = _model()
    reference = torch.optim.Adam(base.parameters(), lr=1e-3)
    _train(base, reference, 10)
    # torch's state into ours, ours into torch's: both continue like torch's own.
    ours_model, back_model = copy.deepcopy(base), copy.deepcopy(base)
    ours = Adam(ours_model.parameters(), lr=0.5)
    ours.load_state_dict(copy.deepcopy(reference.state_dict()))
    assert ours.param_groups[0]["lr"] == 1e-3
    back = torch.optim.Adam(back_model.parameters(), lr=0.5)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))
    for model, optimizer in ((base, reference), (ours_model, ours), (back_model, back)):
        _train(model, optimizer, 10, seed=2)
    for a, b, c in zip(base.parameters(), ours_model.parameters(), back_model.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_a_state_of_other_parameters_is_refused():
    small = Adam(_model().parameters())
    other = torch.nn.Linear(5, 7)
    with pytest.raises(ValueError, match="one parameter group of 4 parameters"):
        small.load_state_dict(torch.optim.Adam(other.parameters()).state_dict())
    wrong = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    theirs = torch.optim.Adam(wrong.parameters())
    _train(wrong, theirs, 1)
    with pytest.raises(ValueError, match="has shape"):
        small.load_state_dict(theirs.state_dict())
    with pytest.raises(ValueError, match="empty parameter list"):
        Adam([])


def test_lr_of_the_group_is_used_at_each_step():
    model = _model()
    optimizer = Adam(model.parameters(), lr=1e-3)
    optimizer.param_groups[0]["lr"] = 0.0
    before = [p.detach().clone() for p in model.parameters()]
    _train(model, optimizer, 3)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.state  # the moments moved, the weights did not


def test_a_training_iteration_does_not_import_torch_dynamo():
    """What the module is for: torch.optim's optimizers import torch._dynamo
    (seconds of start-up); a learner's iteration must not."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from alf_async.algorithms.ppo_learner import PPOLearner
        T, K, O, A = 8, 4, 3, 2
        learner = PPOLearner(O, A, mini_batch_size=16, num_epochs=2, device="cpu")
        rng = np.random.default_rng(0)
        batch = {"observation": rng.normal(size=(T, K, O)).astype(np.float32),
                 "action": rng.uniform(-1, 1, (T, K, A)).astype(np.float32),
                 "log_prob": np.zeros((T, K), np.float32),
                 "value": np.zeros((T, K), np.float32),
                 "reward": rng.normal(size=(T, K)).astype(np.float32),
                 "terminated": np.zeros((T, K), bool), "truncated": np.zeros((T, K), bool),
                 "truncation_value": np.zeros((T, K), np.float32),
                 "bootstrap_value": np.zeros(K, np.float32)}
        learner.train(batch)
        assert learner.iteration == 1
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "no dynamo"
