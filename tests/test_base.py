"""Device, dtype, seed and pickling plumbing of the torch estimator mixin."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator

import skgpx
from skgpx._base import (
    TorchEstimatorMixin,
    check_n_samples,
    cpu_generator,
    fit_seeds,
    prediction_generator,
    draw_seed,
    encode_classes,
    progress_bar,
    resolve_device,
    resolve_dtype,
    rows_per_chunk,
    standard_normal,
    to_numpy,
)


class _Toy(TorchEstimatorMixin, BaseEstimator):
    def __init__(self, device="auto", dtype="float64"):
        self.device = device
        self.dtype = dtype


def test_resolve_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == expected
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="not understood"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available; use device='auto'"):
            resolve_device("cuda:0")


def test_resolve_dtype():
    assert resolve_dtype("float64") is torch.float64
    assert resolve_dtype("float32") is torch.float32
    with pytest.raises(ValueError, match="'float64' or 'float32'"):
        resolve_dtype("float16")


def test_draw_seed_and_generator_are_reproducible():
    assert draw_seed(7) == 7
    assert draw_seed(np.random.RandomState(3)) == draw_seed(np.random.RandomState(3))
    a = torch.randn(4, generator=cpu_generator(5))
    b = torch.randn(4, generator=cpu_generator(5))
    assert torch.equal(a, b)


def test_tensor_copy_never_aliases_user_data():
    toy = _Toy()
    data = np.arange(6.0).reshape(3, 2)
    data.setflags(write=False)  # read-only input, like a memmap
    t = toy._as_tensor(data, "cpu", torch.float64)
    t += 1
    np.testing.assert_array_equal(data, np.arange(6.0).reshape(3, 2))
    assert to_numpy(t).dtype == np.float64


def test_pickle_moves_tensors_through_the_cpu():
    toy = _Toy()
    toy.device_ = "cpu"
    toy._state = torch.arange(3.0)
    clone = pickle.loads(pickle.dumps(toy))
    assert torch.equal(clone._state, toy._state) and clone.device_ == "cpu"


def test_cuda_fit_loads_on_cpu_with_a_warning():
    toy = _Toy()
    state = {"device": "auto", "dtype": "float64", "device_": "cuda:0",
             "_state": torch.arange(3.0), "_skgpx_version": skgpx.__version__}
    if torch.cuda.is_available():
        toy.__setstate__(state)
        assert toy._state.device.type == "cuda"
    else:
        with pytest.warns(UserWarning, match="CUDA is not available"):
            toy.__setstate__(state)
        assert toy.device_ == "cpu" and toy._state.device.type == "cpu"


def test_loadable_device_warns_only_for_a_named_owner(monkeypatch):
    # a part of an estimator (its skorch net) falls back silently: the estimator warns once
    from skgpx._base import loadable_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="Toy was fitted on 'cuda:0' but CUDA is not"):
        assert loadable_device("cuda:0", "Toy") == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loadable_device("cuda:0") == "cpu"
        assert loadable_device("cpu", "Toy") == "cpu"


def test_rows_per_chunk_bounds_memory():
    assert rows_per_chunk(8192, 10) == 8192
    assert rows_per_chunk(8192, 2**15) == 32  # 2**20 elements / 2**15 columns on the CPU
    assert rows_per_chunk(8192, 2**15, "cuda:0") == 1024  # 2**25 elements on a GPU
    assert rows_per_chunk(8192, 2**30) == 1


def test_progress_bar_is_silent_at_verbose_zero(capfd):
    with progress_bar(0, "x", total=3) as bar:
        bar.update()
        bar.set_postfix(a=1)
    assert capfd.readouterr() == ("", "")
    with progress_bar(1, "fitting", total=2) as bar:
        bar.update()
    assert "fitting" in capfd.readouterr().err


def test_column_standardisation_matches_numpy_and_guards_constant_columns():
    from skgpx._base import column_standardisation

    values = np.array([[1.0, 5.0, 2.0], [3.0, 5.0, 4.0], [8.0, 5.0, 9.0]])
    mean, scale = column_standardisation(values)
    np.testing.assert_array_equal(mean, values.mean(axis=0))
    np.testing.assert_array_equal(scale, [values[:, 0].std(), 1.0, values[:, 2].std()])


def test_move_to_device_leaves_the_live_module_in_place():
    # nn.Module.to moves in place; pickling must move a copy so a fitted GPU model stays on
    # its device after being pickled
    from skgpx._base import move_to_device

    module = torch.nn.Linear(2, 3).double()
    weight = module.weight
    moved = move_to_device({"module": module}, "cpu")["module"]
    assert moved is not module and module.weight is weight
    assert torch.equal(moved.weight, module.weight)
    moved.weight.data.add_(1.0)
    assert not torch.equal(moved.weight, module.weight)


def test_check_n_samples():
    assert check_n_samples(np.int64(3)) == 3 and check_n_samples(0, minimum=0) == 0
    for bad in (0, -1, 2.0, True, "2", None):
        with pytest.raises(ValueError, match="n_samples"):
            check_n_samples(bad)


def test_encode_classes():
    classes, codes = encode_classes(_Toy(), np.array(["b", "a", "b", "c"]))
    np.testing.assert_array_equal(classes, ["a", "b", "c"])
    np.testing.assert_array_equal(codes, [1, 0, 1, 2])
    assert codes.dtype == np.int64
    with pytest.raises(ValueError, match="_Toy needs at least 2 classes"):
        encode_classes(_Toy(), np.zeros(4))
    with pytest.raises(ValueError, match="Unknown label type"):
        encode_classes(_Toy(), np.linspace(0, 1, 5))


def test_standard_normal_is_the_float64_stream_in_every_dtype():
    z64 = standard_normal((8, 4), cpu_generator(4))
    z32 = standard_normal((8, 4), cpu_generator(4), dtype=torch.float32)
    assert z64.dtype == torch.float64 and z32.dtype == torch.float32
    torch.testing.assert_close(z32, z64.float(), rtol=0, atol=0)
    # not torch's own float32 stream, which differs from 16 values on (vectorised sampler)
    assert not torch.equal(z32, torch.randn((8, 4), generator=cpu_generator(4)))


def test_prediction_generator_uses_the_fit_seed_else_seed_zero():
    def first(g):
        return torch.randn(3, generator=g, dtype=torch.float64)

    class Deterministic:  # a deterministic fit stores no prediction seed
        pass

    fitted = Deterministic()
    fitted._prediction_seed = 11
    assert torch.equal(first(prediction_generator(Deterministic(), None)),
                       first(cpu_generator(0)))
    assert torch.equal(first(prediction_generator(fitted, None)), first(cpu_generator(11)))
    for owner in (Deterministic(), fitted):  # an explicit random_state always wins
        assert torch.equal(first(prediction_generator(owner, 7)), first(cpu_generator(7)))
    assert not torch.equal(first(prediction_generator(fitted, 7)), first(cpu_generator(11)))


def test_fit_seeds_are_named_and_drawn_in_order():
    seeds = fit_seeds(3, ("train", "prediction"))
    rng = np.random.RandomState(3)
    assert seeds == {"train": draw_seed(rng), "prediction": draw_seed(rng)}
    assert fit_seeds(3, ("train", "prediction")) == seeds  # an int seed repeats
    rng = np.random.RandomState(3)
    first, second = fit_seeds(rng, ("a",)), fit_seeds(rng, ("a",))
    assert first != second  # a RandomState advances
