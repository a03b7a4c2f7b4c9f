"""Models: each a :class:`~pyro.nn.PyroModule` with ``model`` and ``guide`` methods;
:class:`~ppl_vae.models.ModelAndGuide` holds a Pyro model and guide given as callables in the
same form (:class:`~ppl_vae.models.PyroPair`, the form ``fit`` and the checks take)."""
from ppl_vae.models.baselines import ContrastivePCA
from ppl_vae.models.contrastive import ContrastiveVAE, check_contrastive_data
from ppl_vae.models.decomposition import DecompositionVAE
from ppl_vae.models.likelihoods import COUNT_LIKELIHOODS, LIKELIHOODS, CountLikelihood, likelihood, likelihood_mean
from ppl_vae.models.pair import ModelAndGuide, PyroPair, model_and_guide
from ppl_vae.models.parted import PartedVAE
from ppl_vae.models.vae import VAE, StandardNormalPrior

__all__ = [
    "COUNT_LIKELIHOODS",
    "LIKELIHOODS",
    "VAE",
    "ContrastivePCA",
    "ContrastiveVAE",
    "CountLikelihood",
    "DecompositionVAE",
    "ModelAndGuide",
    "PartedVAE",
    "PyroPair",
    "StandardNormalPrior",
    "check_contrastive_data",
    "likelihood",
    "likelihood_mean",
    "model_and_guide",
]
