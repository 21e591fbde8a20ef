import math

import numpy as np
import pytest

import blocklab
from conftest import cli, copy_batch


def test_parameters_carry_pytorch_names_and_shapes(tiny):
    model = blocklab.Model(tiny)
    shapes = model.tensor_shapes()
    assert shapes["tok_emb.weight"] == (8, 16)
    assert shapes["pos_emb.weight"] == (7, 16)
    assert shapes["blocks.0.attn.qkv.weight"] == (48, 16)
    assert shapes["blocks.1.mlp.fc2.weight"] == (16, 64)
    assert shapes["head.weight"] == (8, 16)
    params = model.parameters()
    assert list(params) == list(shapes)
    for name, array in params.items():
        assert array.shape == shapes[name] and array.dtype == np.float32 and array.flags.c_contiguous


def test_parameter_views_alias_the_models_memory(tiny):
    model = blocklab.Model(tiny)
    inputs, _, _ = copy_batch(8, 4, 3)
    before = model.forward(inputs)
    assert before.shape == (3, 7, 8) and np.abs(before).max() > 0
    params = model.parameters()
    assert np.shares_memory(params["head.weight"], model.parameters()["head.weight"])
    params["head.weight"][...] = 0  # the head has no bias: every logit is 0 now
    assert np.all(model.forward(inputs) == 0)
    params["head.weight"][0, :] = 1  # only token 0's logit changes
    after = model.forward(inputs)
    assert np.all(after[..., 1:] == 0) and np.abs(after[..., 0]).max() > 0


def test_views_keep_the_model_alive(tiny):
    weight = blocklab.Model(tiny).parameters()["tok_emb.weight"]
    copy = weight.copy()
    import gc
    gc.collect()
    assert np.array_equal(weight, copy)  # the model behind the view was not freed


def test_same_seed_same_weights_other_seed_other_weights(tiny):
    a, b = blocklab.Model(tiny), blocklab.Model(tiny)
    c = blocklab.Model(tiny, seed=1)
    pa, pb, pc = a.parameters(), b.parameters(), c.parameters()
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert not np.array_equal(pa["blocks.0.attn.qkv.weight"], pc["blocks.0.attn.qkv.weight"])


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_backward_matches_central_differences_in_float64(tiny, placement):
    model = blocklab.Model(tiny, norm_placement=placement, dtype="float64")
    assert model.dtype == np.float64
    inputs, targets, mask = copy_batch(8, 4, 2, seed=3)
    loss = model.loss(inputs, targets, mask)
    assert math.isfinite(loss)
    model.backward()
    grads = {k: v.copy() for k, v in model.gradients().items()}
    assert max(np.abs(g).max() for g in grads.values()) > 0
    params = model.parameters()
    rng = np.random.default_rng(0)
    eps = 1e-6
    checked = 0
    for name in ["tok_emb.weight", "pos_emb.weight", "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.bias",
                 "blocks.1.mlp.fc1.weight", "blocks.1.norm2.weight", "head.weight"]:
        flat = params[name].reshape(-1)  # a view: writing it changes the model
        for index in rng.choice(flat.size, size=3, replace=False):
            saved = flat[index]
            flat[index] = saved + eps
            up = model.loss(inputs, targets, mask)
            flat[index] = saved - eps
            down = model.loss(inputs, targets, mask)
            flat[index] = saved
            numeric = (up - down) / (2 * eps)
            analytic = grads[name].reshape(-1)[index]
            assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(analytic)), (name, index, numeric, analytic)
            checked += 1
    assert checked == 21


def test_gradient_views_see_each_backward(tiny):
    model = blocklab.Model(tiny)
    view = model.gradients()["blocks.1.mlp.fc2.weight"]
    inputs, targets, mask = copy_batch(8, 4, 4, seed=1)
    model.loss(inputs, targets, mask)
    model.backward()
    first = view.copy()
    assert np.abs(first).max() > 0
    model.loss(inputs, targets, mask)
    model.backward()
    assert np.array_equal(view, first)  # same batch, same weights: the same gradients, in the same memory
    other, other_targets, _ = copy_batch(8, 4, 4, seed=2)
    model.loss(other, other_targets)
    model.backward()
    assert not np.array_equal(view, first)


def test_float32_and_float64_models_agree(tiny):
    inputs, targets, mask = copy_batch(8, 4, 3)
    single, double = blocklab.Model(tiny), blocklab.Model(tiny, dtype="float64")
    np.testing.assert_allclose(single.forward(inputs), double.forward(inputs), rtol=1e-4, atol=1e-4)
    assert single.loss(inputs, targets, mask) == pytest.approx(double.loss(inputs, targets, mask), rel=1e-5)


def test_loss_of_an_untrained_model_is_near_ln_vocab(tiny):
    inputs, targets, mask = copy_batch(8, 4, 4)
    loss = blocklab.Model(tiny, norm_placement="pre").loss(inputs, targets, mask)
    assert 0.5 * math.log(8) < loss < 3 * math.log(8)


def test_backward_needs_a_loss_first(tiny):
    model = blocklab.Model(tiny)
    with pytest.raises(blocklab.Error, match="needs a loss"):
        model.backward()
    inputs, _, _ = copy_batch(8, 4, 2)
    model.forward(inputs)  # logits only: nothing to differentiate
    with pytest.raises(blocklab.Error, match="needs a loss"):
        model.backward()


def test_bad_tokens_raise_value_errors(tiny):
    model = blocklab.Model(tiny)
    with pytest.raises(ValueError, match=r"token id 8 .* outside \[0, 8\)"):
        model.forward([[1, 2, 8]])
    with pytest.raises(ValueError, match="exceeds the model's seq_len 7"):
        model.forward(np.zeros((1, 8), dtype=np.int64))
    with pytest.raises(ValueError, match="integer token ids"):
        model.forward([[0.5, 1.0]])
    with pytest.raises(ValueError, match="selects no position"):
        model.loss([[1, 2]], [[2, 3]], mask=[[0, 0]])


def test_a_single_sequence_gives_t_by_v_logits(tiny):
    model = blocklab.Model(tiny)
    assert model.forward([1, 2, 3]).shape == (3, 8)
    np.testing.assert_array_equal(model.forward([1, 2, 3]), model.forward([[1, 2, 3]])[0])


def test_save_and_load_round_trip(tiny, tmp_path):
    trained = blocklab.Model(tiny, seed=5)
    path = tmp_path / "model.safetensors"
    trained.save(path)
    fresh = blocklab.Model(tiny)
    inputs, _, _ = copy_batch(8, 4, 2)
    assert not np.array_equal(fresh.forward(inputs), trained.forward(inputs))
    fresh.load(path)
    np.testing.assert_array_equal(fresh.forward(inputs), trained.forward(inputs))


def test_load_refuses_another_architecture_and_changes_nothing(tiny, tmp_path):
    path = tmp_path / "wide.safetensors"
    blocklab.Model(tiny, width=32).save(path)
    model = blocklab.Model(tiny)
    before = {k: v.copy() for k, v in model.parameters().items()}
    with pytest.raises(blocklab.Error, match=r"tok_emb.weight has shape \(8, 32\), the model expects \(8, 16\)"):
        model.load(path)
    assert all(np.array_equal(before[k], v) for k, v in model.parameters().items())


def test_state_dict_round_trip(tiny):
    source, target = blocklab.Model(tiny, seed=3), blocklab.Model(tiny)
    state = source.state_dict()
    assert all(isinstance(v, np.ndarray) and v.flags.c_contiguous for v in state.values())
    target.load_state_dict({k: v.copy() for k, v in state.items()})
    inputs, _, _ = copy_batch(8, 4, 2)
    np.testing.assert_array_equal(target.forward(inputs), source.forward(inputs))
    with pytest.raises(blocklab.Error, match="missing"):
        target.load_state_dict({"tok_emb.weight": state["tok_emb.weight"]})


def test_state_dict_loads_into_torch_when_installed(tiny):
    torch = pytest.importorskip("torch")
    state = {k: torch.from_numpy(v) for k, v in blocklab.Model(tiny).state_dict().items()}
    module = torch.nn.Module()
    for name, tensor in state.items():  # a module with exactly these parameter names
        owner = module
        parts = name.split(".")
        for part in parts[:-1]:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        owner.register_parameter(parts[-1], torch.nn.Parameter(torch.zeros_like(tensor)))
    module.load_state_dict(state)
    assert torch.equal(module.get_parameter("head.weight"), state["head.weight"])


def test_build_info_matches_the_cli():
    info = blocklab.build_info()
    assert info["isa"] in info["isa_levels"]
    names = [part["name"] for part in info["optional_parts"]]
    assert names == ["OpenBLAS", "oneDNN", "MPI", "text", "TOML"]
    version = cli("--version").stdout
    # the module is linked from the same core as the CLI beside it: the same kernels and the same parts
    assert info["kernels"] in version
    for part in info["optional_parts"]:
        assert f"{part['name']} {'yes' if part['present'] else 'no'} (" in version
