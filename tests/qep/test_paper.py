"""Paper-level checks of the deep Q-EP, at the paper's settings.

They take minutes, so they carry the ``slow`` marker; ``make test`` still runs them.
The thresholds are far from what a wrong model gets (a constant or over-smoothed fit of
the step/turn series has R^2 well below 0.9 and MAE above 0.2; the majority class of the
rhombus grid has accuracy 0.55) and below what our runs reached
(time series: q = 1 MAE 0.06-0.075, R^2 0.94-0.96; q = 2 MAE 0.03-0.045, R^2 0.97-0.99).
"""

import numpy as np
import pytest
from sklearn.metrics import r2_score

from skgpx.datasets import load_authors_rhombus, make_step_turn_series, rhombus_labels
from skgpx.qep import DeepQEPClassifier, DeepQEPRegressor

pytestmark = pytest.mark.slow

# Sec. 5.1 settings: hidden (3,), M = 64, Adam 0.05, 1000 full-batch epochs, no y scaling
SERIES_SETTINGS = dict(hidden_dims=(3,), n_inducing=64, lr=0.05, max_iter=1000, tol=None,
                       normalize_y=False)


@pytest.mark.parametrize("q", [1.0, 2.0])
def test_step_turn_series_fit(q):
    """Median over three seeds, not the mean: at q = 1 about one fit in ten ends in a worse
    local optimum (higher final loss, R^2 about 0.71, MAE 0.16), and which seed does depends
    on floating-point details. Seed 2 did under MKL's reproducible mode (MKL_CBWR=AUTO,STRICT),
    not without it; seeds 0-9 in that mode gave R^2 0.95-0.98 apart from it. A mean over three
    seeds then fails about one run in four on some platform; a wrong model (constant or
    over-smoothed fit) fails the median as it failed the mean."""
    X_test = np.linspace(0.0, 1.0, 50)[:, None]
    truth = make_step_turn_series(n_samples=50, random_state=0)[2]
    mae, r2 = [], []
    for seed in range(3):
        X, y, _ = make_step_turn_series(n_samples=100, noise_std=0.1, random_state=seed)
        model = DeepQEPRegressor(q=q, random_state=seed, **SERIES_SETTINGS).fit(X, y)
        prediction = model.predict(X_test)
        mae.append(np.abs(prediction - truth).mean())
        r2.append(r2_score(truth, prediction))
    assert np.median(mae) <= 0.10, mae
    assert np.median(r2) >= 0.90, r2


def test_annular_rhombus_grid_accuracy():
    """One fit on the authors' fixed training set (``load_authors_rhombus``, the data behind
    the paper's Table B.2) at the Sec. 5.2 settings (N = 500, hidden (3,), M = 64, Adam 0.05,
    1000 epochs) with the default softmax likelihood and dtype (float64); test on the 50 x 50
    grid of [-3, 3]^2.

    Measured here (float64, MKL_CBWR=AUTO,STRICT): 0.888, 0.864 and 0.876 for model seeds 0, 1
    and 2 (the paper's deep Q-EP: 0.856). The floor 0.83 lies 0.03 below the worst of these
    and 0.058 below seed 0, so a correct model that lands in another optimum on some platform
    still passes. It excludes the majority class (0.552), nearest neighbours (1-NN 0.821,
    5-NN 0.757), an RBF SVC (0.769) and the collapse of the Dirichlet likelihood (0.33-0.66
    in float32 runs). It does not exclude a model at the level of sklearn's shallow GPC
    (0.845), which would need a floor within 0.02 of the worst measured seed.

    On our own draws (``make_annular_rhombus``) the same model reached only 0.754 and 0.790
    (seeds 0 and 1, which this test used before): most of the grid lies outside the bulk of
    500 standard-normal inputs, so accuracy there depends on the draw, and the paper's
    numbers are for this one.
    """
    axis = np.linspace(-3.0, 3.0, 50)
    grid = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)
    labels = rhombus_labels(grid)
    X, y = load_authors_rhombus()
    model = DeepQEPClassifier(q=1.0, hidden_dims=(3,), n_inducing=64, lr=0.05, max_iter=1000,
                              tol=None, random_state=0).fit(X, y)
    accuracy = model.score(grid, labels)
    assert accuracy >= 0.83, accuracy
