"""aggregate_posterior_mismatch: about 0 when q(z) = p(z), clearly positive otherwise, bad input."""
import pyro.distributions as dist
import pytest
import torch

from ppl_vae.metrics.aggregate import aggregate_posterior_mismatch

PRIOR = dist.Normal(torch.zeros(3), torch.ones(3)).to_event(1)


def encodings_of_the_prior(n: int = 1500) -> tuple[torch.Tensor, torch.Tensor]:
    """Components N(m_j, 0.7^2 I) with m_j ~ N(0, 0.51 I): their mixture is close to N(0, I)."""
    generator = torch.Generator().manual_seed(3)
    return 0.51**0.5 * torch.randn(n, 3, generator=generator), torch.full((n, 3), 0.7)


def test_matching_aggregate_posterior_scores_near_the_prior_floor():
    loc, scale = encodings_of_the_prior()
    figures = aggregate_posterior_mismatch(loc, scale, PRIOR, num_samples=1000)
    assert set(figures) == {"mmd", "mmd_prior_floor", "inclusive_kl"}
    assert abs(figures["mmd"]) < 0.05 and abs(figures["mmd_prior_floor"]) < 0.05
    assert figures["inclusive_kl"] < 0.1


def test_shifted_aggregate_posterior_scores_clearly_higher():
    loc, scale = encodings_of_the_prior()
    matched = aggregate_posterior_mismatch(loc, scale, PRIOR, num_samples=1000)
    shifted = aggregate_posterior_mismatch(loc + 2.0, scale, PRIOR, num_samples=1000)
    assert shifted["mmd"] > 10 * max(abs(matched["mmd"]), 0.01)
    assert shifted["inclusive_kl"] > matched["inclusive_kl"] + 1.0


def test_same_seed_same_figures_and_global_rng_untouched():
    loc, scale = encodings_of_the_prior(200)
    torch.manual_seed(11)
    state = torch.get_rng_state()
    first = aggregate_posterior_mismatch(loc, scale, PRIOR, num_samples=100, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    assert aggregate_posterior_mismatch(loc, scale, PRIOR, num_samples=100, seed=5) == first


def test_works_with_a_prior_without_rsample():
    mixture = dist.MixtureSameFamily(
        dist.Categorical(torch.ones(2)), dist.Normal(torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), 0.3).to_event(1)
    )
    loc, scale = encodings_of_the_prior(300)
    figures = aggregate_posterior_mismatch(loc, scale, mixture, num_samples=None)
    assert all(isinstance(v, float) for v in figures.values())


@pytest.mark.parametrize(
    "loc, scale, prior, num_samples, match",
    [
        (torch.zeros(4, 3), torch.ones(4, 2), PRIOR, 10, "same shape"),
        (torch.zeros(4, 2), torch.ones(4, 2), PRIOR, 10, r"event_shape \(2,\)"),
        (torch.zeros(4, 3), torch.zeros(4, 3), PRIOR, 10, "scale must be positive"),
        (torch.zeros(4, 3), torch.ones(4, 3), PRIOR, 1, "num_samples must be an integer >= 2"),
    ],
)
def test_bad_input_raises_value_error(loc, scale, prior, num_samples, match):
    with pytest.raises(ValueError, match=match):
        aggregate_posterior_mismatch(loc, scale, prior, num_samples=num_samples)
