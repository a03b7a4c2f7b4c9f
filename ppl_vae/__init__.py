"""ppl_vae: PartedVAE, Contrastive VAE and Decomposition VAE as Pyro model/guide pairs."""
__version__ = "0.1.0"

from ppl_vae.train.fit import FitResult, fit  # noqa: E402
from ppl_vae.train.config import TrainConfig  # noqa: E402

__all__ = ["FitResult", "TrainConfig", "__version__", "fit"]
