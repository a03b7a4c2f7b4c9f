"""Evaluation metrics. They take arrays (torch or numpy) or an encode callable, never a model.

Disentanglement, each from ``encode(images) -> (n, D)`` and a factor data set
(:class:`FactorDataset`, e.g. ``ppl_vae.data.DSprites``), encoding in bounded batches:

- :func:`factor_score`: Factor (FactorVAE) score, "standard" protocol (disentanglement_lib)
  or "parted" (the PartedVAE authors' variant).
- :func:`mig`: Mutual Information Gap.
- :func:`sap_score`: Separated Attribute Predictability.
- :func:`dci`: disentanglement, completeness and informativeness.
- :func:`beta_vae_score`: the beta-VAE metric.
- :func:`factor_scores`: the Factor score under both protocols, at one scale.
- :func:`disentanglement_scores`: all but the standard Factor score, at one scale.

Others:

- :func:`student_t_to_normal`, :class:`StudentTToNormal`: the Decomposition VAE authors' map
  of Student-t codes to the normal scale before scoring.
- :func:`hoyer_sparsity`: Hoyer sparsity of std-normalised representations (Decomposition VAE).
- :func:`classification_accuracy`, :func:`clustering_accuracy`: accuracy of q(c|x), the latter
  under the best matching of cluster ids to labels.
- :func:`silhouette`: silhouette score of an embedding against labels (Contrastive VAE).
- :func:`aggregate_posterior_mismatch`: how far the aggregate posterior is from the prior.
"""
from ppl_vae.metrics.accuracy import classification_accuracy, clustering_accuracy
from ppl_vae.metrics.aggregate import aggregate_posterior_mismatch
from ppl_vae.metrics.beta_vae import BetaVAEResult, beta_vae_score
from ppl_vae.metrics.dci import DCIModel, DCIResult, dci
from ppl_vae.metrics.disentanglement import disentanglement_scores, factor_scores
from ppl_vae.metrics.factor_score import Encode, FactorDataset, FactorScoreResult, factor_score
from ppl_vae.metrics.mapping import StudentTToNormal, student_t_to_normal
from ppl_vae.metrics.mig import MIGResult, mig
from ppl_vae.metrics.sap import SAPResult, sap_score
from ppl_vae.metrics.silhouette import silhouette
from ppl_vae.metrics.sparsity import hoyer_sparsity

__all__ = [
    "StudentTToNormal",
    "student_t_to_normal",
    "aggregate_posterior_mismatch",
    "BetaVAEResult",
    "DCIModel",
    "DCIResult",
    "Encode",
    "FactorDataset",
    "FactorScoreResult",
    "MIGResult",
    "SAPResult",
    "beta_vae_score",
    "classification_accuracy",
    "clustering_accuracy",
    "dci",
    "disentanglement_scores",
    "factor_score",
    "factor_scores",
    "hoyer_sparsity",
    "mig",
    "sap_score",
    "silhouette",
]
