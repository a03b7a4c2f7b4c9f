"""Models: each a :class:`~pyro.nn.PyroModule` with ``model`` and ``guide`` methods."""
from ppl_vae.models.likelihoods import LIKELIHOODS, likelihood, likelihood_mean
from ppl_vae.models.vae import VAE, StandardNormalPrior

__all__ = ["LIKELIHOODS", "VAE", "StandardNormalPrior", "likelihood", "likelihood_mean"]
